"""Collation of episodes into a training batch (llmgym/trainers/batch.py): advantages are checked and placed."""

from __future__ import annotations

import numpy as np
import pytest

from llmgym.episode import Episode

pytest.importorskip("torch")
from llmgym.trainers.batch import collate  # noqa: E402


def _episode():
    return Episode("x", token_ids=[1, 2, 3], mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.1])


@pytest.mark.parametrize("length", [2, 4])
def test_collate_rejects_advantages_of_the_wrong_length(length):
    with pytest.raises(ValueError, match=f"3 tokens but {length} advantages"):
        collate([_episode()], [np.ones(length)])


def test_collate_rejects_a_wrong_number_of_advantage_arrays():
    with pytest.raises(ValueError, match="1 advantage arrays for 2 episodes"):
        collate([_episode(), _episode()], [np.ones(3)])


def test_collate_places_advantages_on_their_tokens():
    batch = collate(
        [_episode(), Episode("x", token_ids=[1, 2], mask=[0, 1])], [np.array([0.0, 1.0, 2.0]), np.array([0.0, 3.0])]
    )
    assert batch.advantages.tolist() == [[0.0, 1.0, 2.0], [0.0, 3.0, 0.0]]
