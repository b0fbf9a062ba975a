"""The Stable-Baselines3 wrappers (llmgym/wrappers/sb3.py): action masks and ``make_vec_env``.

Belongs in tests/wrappers/ (kept here while that folder is being reorganised).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest


def test_the_mask_after_the_last_step_agrees_with_info():
    """Regression: after the last step the action mask disagreed with ``info["candidates"]``."""
    pytest.importorskip("stable_baselines3")
    from llmgym.wrappers.sb3 import CandidateActions

    env = CandidateActions(gym.make("llmgym/Wordle-v0"), lambda env, obs, info: ["crane", "pious"], max_candidates=3)
    env.reset(seed=0, options={"answer": "pious"})
    assert env.action_masks().tolist() == [True, True, False]
    _, _, terminated, _, info = env.step(1)
    assert terminated and info["candidates"] == []
    assert env.action_masks().tolist() == [False, False, False]
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True, False]


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
