"""Regressions of token assembly (llmgym/rollout_tokens.py) and collation (trainers/batch.py)."""

import numpy as np
import pytest

from llmgym.episode import Episode
from llmgym.policy import Generation
from llmgym.rollout_tokens import TokenRecord

torch = pytest.importorskip("torch")
from llmgym.trainers.batch import collate  # noqa: E402

_MSG = {"role": "assistant", "content": "x"}


def test_zero_token_turn_without_logprobs_keeps_the_episode_logprobs():
    # OpenAIPolicy returns logprobs=None for an empty completion (no logprob entries)
    record = TokenRecord()
    record.add(Generation(_MSG, prompt_token_ids=[1, 2], token_ids=[3], logprobs=[-0.5]), 1, None)
    record.add(Generation(_MSG, prompt_token_ids=[1, 2, 3, 4], token_ids=[], logprobs=None), 2, record.prefix())
    record.add(Generation(_MSG, prompt_token_ids=[1, 2, 3, 4, 5], token_ids=[6], logprobs=[-0.25]), 3, record.prefix())
    episode = Episode("x")
    record.fill(episode)
    assert episode.token_ids == [1, 2, 3, 4, 5, 6]
    assert episode.mask == [0, 0, 1, 0, 0, 1]
    assert episode.logprobs == [0.0, 0.0, -0.5, 0.0, 0.0, -0.25]
    assert episode.turn_spans == [(2, 3), (4, 4), (5, 6)]


def test_missing_logprobs_on_a_nonempty_turn_still_drop_them():
    record = TokenRecord()
    record.add(Generation(_MSG, prompt_token_ids=[1], token_ids=[2], logprobs=[-0.5]), 1, None)
    record.add(Generation(_MSG, prompt_token_ids=[1, 2, 3], token_ids=[4], logprobs=None), 2, record.prefix())
    episode = Episode("x")
    record.fill(episode)
    assert episode.token_ids == [1, 2, 3, 4] and episode.logprobs == []


def _episode():
    return Episode("x", token_ids=[1, 2, 3], mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.1])


@pytest.mark.parametrize("length", [2, 4])
def test_collate_rejects_advantages_of_the_wrong_length(length):
    with pytest.raises(ValueError, match="3 tokens but %d advantages" % length):
        collate([_episode()], [np.ones(length)])


def test_collate_rejects_a_wrong_number_of_advantage_arrays():
    with pytest.raises(ValueError, match="1 advantage arrays for 2 episodes"):
        collate([_episode(), _episode()], [np.ones(3)])


def test_collate_places_advantages_on_their_tokens():
    batch = collate([_episode(), Episode("x", token_ids=[1, 2], mask=[0, 1])], [np.array([0.0, 1.0, 2.0]), np.array([0.0, 3.0])])
    assert batch.advantages.tolist() == [[0.0, 1.0, 2.0], [0.0, 3.0, 0.0]]
