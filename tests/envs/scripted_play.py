"""Play a scripted test policy ``policy(obs, state) -> action`` on an env over seeds (the reward-hacking suites).

Not a test module: the env test files import :func:`play_scripted` from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np


def play_scripted(
    env: gym.Env,
    policy: Callable[[str, dict[str, Any]], Any],
    seeds: Iterable[int],
    outcome: Callable[[Any], float] = lambda env: 0.0,
    first: str = "question",
) -> tuple[float, float]:
    """One episode per seed; the mean return and the mean ``outcome(env.unwrapped)`` at each episode's end.

    ``state`` starts each episode as ``{first: the first observation}``; the policy keeps what it likes in it.
    ``env`` is closed at the end.
    """
    returns, outcomes = [], []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        state, done, total = {first: obs}, False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs, state))
            total += reward
            done = terminated or truncated
        returns.append(total)
        outcomes.append(float(outcome(env.unwrapped)))
    env.close()
    return float(np.mean(returns)), float(np.mean(outcomes))
