"""Multi-agent text games (PettingZoo AEC and Parallel) and their single-agent versions.

Holds :data:`MULTIAGENT_ENVS`, the registry of multi-agent ids: each maps to
the factory that builds the PettingZoo env (``"aec"`` or ``"parallel"`` in
:data:`MULTIAGENT_KINDS`), and :func:`make_multiagent`. The modules:

- ``tictactoe`` (``tictactoe_v0``), ``connect_four`` (``connect_four_v0``),
  ``negotiation`` (``negotiation_v0``): AEC games on :mod:`.base`.
- ``prisoners_dilemma`` (``prisoners_dilemma_v0``): a Parallel game.
- ``versus``: single-agent Gymnasium envs against scripted opponents
  (``llmgym/TicTacToe-v0`` and friends).
- ``rollout``: :func:`~.rollout.play_match` and the win/draw/loss matrix.
- ``evaluation``: :func:`~.evaluation.evaluate`, one player against others in both
  seats (what ``llmgym eval --opponent`` runs), and the games' scripted opponents.

Example:
    >>> from llmgym.envs.multiagent import make_multiagent
    >>> game = make_multiagent("llmgym/ma-TicTacToe-v0")
    >>> game.reset(seed=0)
    >>> game.agent_selection, sorted(game.observe("player_0"))
    ('player_0', ['text'])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MULTIAGENT_ENVS", "MULTIAGENT_KINDS", "make_multiagent"]

#: Multi-agent id -> ``"module:factory"`` of its PettingZoo env.
MULTIAGENT_ENVS: dict[str, str] = {
    "llmgym/ma-TicTacToe-v0": "llmgym.envs.multiagent.tictactoe:env",
    "llmgym/ma-ConnectFour-v0": "llmgym.envs.multiagent.connect_four:env",
    "llmgym/ma-Negotiation-v0": "llmgym.envs.multiagent.negotiation:env",
    "llmgym/ma-PrisonersDilemma-v0": "llmgym.envs.multiagent.prisoners_dilemma:parallel_env",
}

#: Multi-agent id -> ``"aec"`` or ``"parallel"``.
MULTIAGENT_KINDS: dict[str, str] = {
    "llmgym/ma-TicTacToe-v0": "aec",
    "llmgym/ma-ConnectFour-v0": "aec",
    "llmgym/ma-Negotiation-v0": "aec",
    "llmgym/ma-PrisonersDilemma-v0": "parallel",
}


def make_multiagent(env_id: str, **kwargs: Any) -> Any:
    """Build the PettingZoo env registered as ``env_id``.

    Raises:
        ValueError: the id is unknown (the message lists the known ones).
    """
    if env_id not in MULTIAGENT_ENVS:
        raise ValueError(f"unknown multi-agent env {env_id!r}; known: {', '.join(sorted(MULTIAGENT_ENVS))}")
    factory = _load(MULTIAGENT_ENVS[env_id])
    return factory(**kwargs)


def _load(target: str) -> Callable[..., Any]:
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
