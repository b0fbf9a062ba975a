"""Shared fixtures. Tests mirror the package: tests/test_*.py for the core, tests/envs/, tests/wrappers/, tests/trainers/."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tiny test models are dominated by thread overhead on 2 cores: one thread is faster and steadier.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def wordle():
    import gymnasium as gym

    import llmgym  # noqa: F401  registers the envs

    env = gym.make("llmgym/Wordle-v0")
    yield env
    env.close()
