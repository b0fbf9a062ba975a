"""Multi-agent text games (PettingZoo AEC and Parallel) and their single-agent versions.

Holds :data:`MULTIAGENT_ENVS`, the registry of multi-agent ids: each maps to
the factory that builds the PettingZoo env (``"aec"`` or ``"parallel"`` in
:data:`MULTIAGENT_KINDS`), and :func:`make_multiagent`. The modules:

- ``tictactoe`` (``tictactoe_v0``), ``connect_four`` (``connect_four_v0``),
  ``negotiation`` (``negotiation_v0``): AEC games on :mod:`.base`.
- ``prisoners_dilemma`` (``prisoners_dilemma_v0``): a Parallel game.
- ``openspiel_game``, ``openspiel_parallel``, ``openspiel_text``: any OpenSpiel game (extra
  ``openspiel``); the curated ones, :data:`OPENSPIEL_GAMES`, are registered as
  ``llmgym/ma-os-<Name>-v0`` here and ``llmgym/os-<Name>-v0`` (against a bot, from
  ``openspiel_versus``) by :func:`register_openspiel_envs`, only when ``pyspiel`` is installed.
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
from importlib.util import find_spec
from typing import Any

__all__ = [
    "MULTIAGENT_ENVS",
    "MULTIAGENT_KINDS",
    "OPENSPIEL_GAMES",
    "make_multiagent",
    "openspiel_ids",
    "register_openspiel_envs",
]

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

#: The curated OpenSpiel games: the name in their ids -> (OpenSpiel game, its parameters, ``"aec"`` or
#: ``"parallel"``). Small sizes, so that a position reads well as text and a game ends in a few dozen moves.
OPENSPIEL_GAMES: dict[str, tuple[str, dict[str, Any], str]] = {
    "KuhnPoker": ("kuhn_poker", {}, "aec"),
    "LeducPoker": ("leduc_poker", {}, "aec"),
    "LiarsDice": ("liars_dice", {}, "aec"),
    "Goofspiel": ("goofspiel", {"num_cards": 4}, "parallel"),
    "TicTacToe": ("tic_tac_toe", {}, "aec"),
    "ConnectFour": ("connect_four", {}, "aec"),
    "Breakthrough": ("breakthrough", {"rows": 6, "columns": 6}, "aec"),
    "Nim": ("nim", {}, "aec"),
    "DotsAndBoxes": ("dots_and_boxes", {}, "aec"),
    "Hex": ("hex", {"board_size": 5}, "aec"),
    "FirstSealedAuction": ("first_sealed_auction", {}, "aec"),
}
_OPENSPIEL_FACTORY = {"Hex": "hex_game"}  # the factory's name where the game's would shadow a builtin


def openspiel_ids(name: str) -> tuple[str, str]:
    """The multi-agent and single-agent ids of a curated OpenSpiel game.

    Example:
        >>> openspiel_ids("KuhnPoker")
        ('llmgym/ma-os-KuhnPoker-v0', 'llmgym/os-KuhnPoker-v0')
    """
    return f"llmgym/ma-os-{name}-v0", f"llmgym/os-{name}-v0"


def _add_openspiel_games() -> None:
    """Add the curated OpenSpiel games to the multi-agent ids when ``pyspiel`` is installed (it is not imported)."""
    if find_spec("pyspiel") is None:
        return
    for name, (game, _, kind) in OPENSPIEL_GAMES.items():
        multiagent_id = openspiel_ids(name)[0]
        MULTIAGENT_ENVS[multiagent_id] = f"llmgym.envs.multiagent.openspiel_game:{_OPENSPIEL_FACTORY.get(name, game)}"
        MULTIAGENT_KINDS[multiagent_id] = kind


_add_openspiel_games()


def register_openspiel_envs() -> None:
    """Register ``llmgym/os-<Name>-v0`` (against a uniformly random bot) for each curated OpenSpiel game, when
    ``pyspiel`` is installed (neither it nor the env module is imported)."""
    if find_spec("pyspiel") is None:
        return
    from llmgym.registry import register

    for name, (game, params, _) in OPENSPIEL_GAMES.items():
        register(
            openspiel_ids(name)[1],
            "llmgym.envs.multiagent.openspiel_versus:OpenSpielVersusEnv",
            description=f"OpenSpiel's {game} against a uniformly random bot (reply: one legal action; its returns).",
            kwargs={"game": game, "params": dict(params)},
        )


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
