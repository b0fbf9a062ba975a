"""Adapters that turn other libraries' tasks and games into llmgym environments.

Holds :func:`register_adapter_envs`, called by ``llmgym.envs.register_envs``
on ``import llmgym``, and the default id lists. It registers ids only for the
libraries that are installed, checked with ``importlib.util.find_spec``:
neither the library nor the adapter module is imported (the adapters define
tools, whose pydantic models would cost ~0.3 s at import):

- :mod:`.reasoning_gym`: ``llmgym/rg-<task>-v0`` for :data:`RG_DEFAULT_TASKS`
  (extra ``reasoning-gym``; ``reasoning_gym.register_all()`` for every task);
- :mod:`.textarena`: ``llmgym/ta-<Game>-v0`` for :data:`TA_DEFAULT_GAMES`
  (extra ``textarena``); its multi-player games are PettingZoo AEC envs;
- :mod:`.openenv`: ``llmgym/OpenEnv-v0``, any OpenEnv server (extra ``openenv``), registered always and
  not listed (it plays only with the ``base_url`` of a server); and ``llmgym serve-env``'s server.
"""

from __future__ import annotations

from importlib.util import find_spec

from llmgym.registry import register

__all__ = [
    "register_adapter_envs",
    "register_rg",
    "register_ta",
    "rg_env_id",
    "ta_env_id",
    "RG_DEFAULT_TASKS",
    "TA_DEFAULT_GAMES",
]

#: reasoning-gym tasks registered on ``import llmgym``: popular, fast to build, every item has a reference answer.
RG_DEFAULT_TASKS: tuple[str, ...] = (
    "basic_arithmetic",
    "chain_sum",
    "gsm_symbolic",
    "leg_counting",
    "letter_counting",
    "spell_backward",
    "word_sorting",
    "knights_knaves",
    "mini_sudoku",
    "family_relationships",
)

#: TextArena single-player games registered on ``import llmgym`` (no NLTK data, no API key needed).
TA_DEFAULT_GAMES: tuple[str, ...] = (
    "GuessTheNumber-v0",
    "Mastermind-v0",
    "TowerOfHanoi-v0",
    "FrozenLake-v0",
    "2048-v0",
)


def rg_env_id(task: str) -> str:
    """The llmgym id of a reasoning-gym task.

    Example:
        >>> rg_env_id("chain_sum")
        'llmgym/rg-chain_sum-v0'
    """
    return f"llmgym/rg-{task}-v0"


def ta_env_id(game: str) -> str:
    """The llmgym id of a TextArena single-player game (TextArena's id without its ``-v0``).

    Example:
        >>> ta_env_id("GuessTheNumber-v0")
        'llmgym/ta-GuessTheNumber-v0'
    """
    return f"llmgym/ta-{game.removesuffix('-v0')}-v0"


def register_rg(task: str) -> None:
    """Register ``llmgym/rg-<task>-v0`` (nothing is imported; an unknown task fails at ``gym.make``)."""
    register(
        rg_env_id(task),
        "llmgym.envs.adapters.reasoning_gym:ReasoningGymEnv",
        description=(
            f"reasoning-gym task {task!r}, scored by its own verifier (single turn; python_tool=True for a sandbox)."
        ),
        kwargs={"task": task},
    )


def register_ta(game: str) -> None:
    """Register ``llmgym/ta-<Game>-v0`` for a TextArena single-player game id such as ``"GuessTheNumber-v0"``."""
    register(
        ta_env_id(game),
        "llmgym.envs.adapters.textarena:TextArenaEnv",
        description=f"TextArena single-player game {game}; moves in [brackets], TextArena's own rules and rewards.",
        kwargs={"game": game},
    )


def register_adapter_envs() -> None:
    """Register the adapter envs whose library is installed (no library is imported), and ``llmgym/OpenEnv-v0``."""
    register(
        "llmgym/OpenEnv-v0",
        "llmgym.envs.adapters.openenv.client:OpenEnvEnv",
        description="Any OpenEnv server as a text env: gym.make(id, base_url=...) (extra openenv).",
        listed=False,  # without a server's base_url it cannot play
    )
    if find_spec("reasoning_gym") is not None:
        for task in RG_DEFAULT_TASKS:
            register_rg(task)
    if find_spec("textarena") is not None:
        for game in TA_DEFAULT_GAMES:
            register_ta(game)
