"""PettingZoo-style entry: ``prisoners_dilemma_v0.parallel_env()`` builds the game, ``env()`` its AEC form
(PettingZoo's ``parallel_to_aec``; see :mod:`llmgym.envs.multiagent.prisoners_dilemma`)."""

from typing import Any

from llmgym.envs.multiagent.prisoners_dilemma import parallel_env

__all__ = ["env", "parallel_env"]


def env(**kwargs: Any) -> Any:
    """The game as a PettingZoo AEC env: players act in turn, the round resolves when both have."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(parallel_env(**kwargs))
