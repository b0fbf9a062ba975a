"""PettingZoo-style entry: ``prisoners_dilemma_v0.parallel_env()`` builds the game (see :mod:`llmgym.envs.multiagent.prisoners_dilemma`)."""

from llmgym.envs.multiagent.prisoners_dilemma import parallel_env

__all__ = ["parallel_env"]
