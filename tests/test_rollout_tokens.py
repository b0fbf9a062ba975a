"""Token assembly across turns (llmgym/rollout/tokens.py): prompt and completion tokens, mask, log-probs, turn spans."""

from __future__ import annotations

from llmgym.episode import Episode
from llmgym.policy import Generation
from llmgym.rollout.tokens import TokenRecord

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
