"""Regressions from a new user's walk through docs/interop.md, docs/adapters.md and docs/multiagent.md."""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import llmgym
from llmgym import LLMEnv, Reward, Rubric
from llmgym.wrappers.trl import trl_environment


class NoToolsEnv(LLMEnv):
    """Plain-text answers only: nothing TRL could call."""

    def setup(self, options: dict[str, Any] | None) -> str:
        return "Say hello."

    def build_rubric(self) -> Rubric:
        return Rubric([Reward(lambda ctx: 0.0, when="end", name="nothing")])


def test_trl_environment_refuses_an_env_without_tools():
    env_id = "llmgym-interop-test/NoTools-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=NoToolsEnv)
    with pytest.raises(ValueError, match="has no tools: TRL passes only tool calls"):
        trl_environment(env_id)


def test_trl_tool_methods_take_arguments_by_position_as_their_signature_says():
    env = trl_environment("llmgym/Wordle-v0")()
    env.reset(seed=0)
    assert env.guess("crane").splitlines()[0] == "CRANE x x x x Y"
    assert env.guess(word="slate").splitlines()[0].startswith("SLATE")
    with pytest.raises(TypeError, match="takes 1 arguments"):
        env.guess("crane", "slate")
    with pytest.raises(TypeError, match="several values"):
        env.guess("crane", word="slate")


def test_sb3_make_vec_env_snippet_from_the_docs():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_util import make_vec_env

    from llmgym.wrappers.sb3 import CandidateActions, TextEmbeddingObservation

    candidates = lambda env, obs, info: ["crane", "slate", None, "pious"]  # noqa: E731
    encode = lambda texts: np.ones((len(texts), 3), dtype=np.float32)  # noqa: E731  (no model load)
    wrap = lambda env: TextEmbeddingObservation(CandidateActions(env, candidates, max_candidates=4), encoder=encode)  # noqa: E731
    vec_env = make_vec_env("llmgym/Wordle-v0", n_envs=2, wrapper_class=wrap, env_kwargs={"render_mode": None})
    assert vec_env.reset().shape == (2, 3)
    assert [m.tolist() for m in vec_env.env_method("action_masks")] == [[True, True, False, True]] * 2
    vec_env.close()


def test_unknown_textarena_game_lists_only_games_the_adapter_can_make():
    pytest.importorskip("textarena")
    from llmgym.envs.adapters.textarena import make_game

    with pytest.raises(ValueError, match="unknown TextArena game 'BabyAiText-v0'") as err:
        make_game("BabyAiText-v0")  # registered by TextArena, but with no -raw id
    known = str(err.value).split("known: ", 1)[1].split(", ")
    assert "BabyAiText-v0" not in known and "TicTacToe-v0" in known and "Taboo-v0-city/country" in known


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Chess-v0 compiles on Python >= 3.12")
def test_textarena_game_needing_a_newer_python_fails_with_one_clear_error():
    pytest.importorskip("textarena")
    from llmgym.envs.adapters.textarena_aec import aec_env

    with pytest.raises(RuntimeError, match=r"'Chess-v0' cannot be imported on Python 3\.\d+: its code has a SyntaxError"):
        aec_env("Chess-v0")
    with pytest.raises(RuntimeError, match="'Klondike-v0' cannot be imported"):
        gym.make("llmgym/ta-GuessTheNumber-v0", game="Klondike-v0")
