"""Regressions for llmgym.vector and llmgym init (scaffold)."""

from __future__ import annotations

import pytest

import llmgym


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_wrong_number_of_actions_plays_none_and_leaves_the_envs_in_step(mode):
    envs = llmgym.make_vec("llmgym/Wordle-v0", 2, mode)
    try:
        envs.reset(seed=0)
        for bad in (["crane"], ["crane", "hello", "extra"], "hello"):
            with pytest.raises(ValueError, match="one per sub-environment"):
                envs.step(bad)
        first = envs.step(["crane", "hello"])[0]
        second = envs.step(["crane", "hello"])[0]
    finally:
        envs.close()
    assert [o.splitlines()[-1] for o in first] == ["5 guesses left."] * 2
    assert [o.splitlines()[-1] for o in second] == ["4 guesses left."] * 2
