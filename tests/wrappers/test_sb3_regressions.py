"""Regression tests for llmgym.wrappers.sb3, llmgym.spaces and llmgym.wrappers.scripted (review findings)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401  (registers the envs)
from llmgym.spaces import Text
from llmgym.wrappers.scripted import load_scripted

pytest.importorskip("stable_baselines3")
from llmgym.wrappers.sb3 import CandidateActions, TextEmbeddingObservation  # noqa: E402


def three_words(env, obs, info):
    return ["crane", None, "pious"]


def letter_counts(texts):
    return np.array([[t.count(c) + 1.0 for c in "aeiou"] for t in texts], dtype=np.float32)


def wrapped() -> gym.Env:
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), three_words, max_candidates=4)
    return TextEmbeddingObservation(env, encoder=letter_counts)


def test_the_wrapped_env_can_be_remade_from_its_spec_and_passes_gymnasium_check_env():
    from gymnasium.utils.env_checker import check_env

    env = wrapped()
    remade = gym.make(env.spec)  # was TypeError: CandidateActions missing 'candidates'
    assert remade.get_wrapper_attr("candidate_fn") is three_words
    assert remade.get_wrapper_attr("max_candidates") == 4
    with pytest.warns(UserWarning, match="different from the unwrapped"):
        check_env(env)


@pytest.mark.parametrize("lone", ["crane", {"role": "assistant", "content": "crane"}])
def test_a_candidate_function_returning_one_action_instead_of_a_list_is_a_clear_error(lone):
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), lambda env, obs, info: lone, max_candidates=8)
    with pytest.raises(TypeError, match="list of actions"):
        env.reset(seed=0)  # was: candidates ['c', 'r', 'a', 'n', 'e'] (or the dict's keys)


def test_text_sample_with_an_empty_charset_gives_the_empty_string():
    space = Text(5, charset="", seed=1)
    assert [space.sample() for _ in range(10)] == [""] * 10  # was ValueError on any non-zero length


@pytest.mark.parametrize("spec", [".relative:Actor", ":Actor", "llmgym.envs.wordle.solver:__all__"])
def test_load_scripted_refuses_bad_paths_with_value_error(spec):
    with pytest.raises(ValueError, match="scripted policy"):
        load_scripted(spec)  # the CLI turns ValueError into a clean message; TypeError was a traceback
    with pytest.raises(ValueError, match="scripted policy"):
        load_scripted(spec, use_tool=False)  # with kwargs a non-callable used to fail only when acting
