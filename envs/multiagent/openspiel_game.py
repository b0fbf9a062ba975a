"""OpenSpiel games as PettingZoo text games (AEC; Parallel for simultaneous moves): the curated ones and any by name.

Holds :class:`OpenSpielEnv` (a sequential two-player OpenSpiel game on
:class:`~.base.TextGameEnv`), the factories :func:`env` and :func:`parallel_env` (any
OpenSpiel game name with its ``params``), :class:`CuratedGame` and one factory per curated
game (``kuhn_poker`` ...; their ids are :data:`llmgym.envs.multiagent.OPENSPIEL_GAMES`'s).
:class:`~.openspiel_text.OpenSpielText` (the game as text) is re-exported from here;
simultaneous-move games are :class:`~.openspiel_parallel.OpenSpielParallelEnv`.

Each player reads its own view only (:meth:`~.openspiel_text.OpenSpielText.view`): another
player's move is relayed by name in a game of perfect information; elsewhere its opponents
read "player 0 moved; ..." and learn what they may from their own information state. Chance
events are drawn from the env's ``np_random`` (``reset(seed=)`` reproduces them). A reply
or a ``play(action)`` tool call is read as one legal action; anything else is an illegal
attempt with :class:`~.base.TextGameEnv`'s retries, penalty and forfeit.

Rewards are OpenSpiel's returns at the end (Kuhn poker pays +-1 or +-2); a player that
forfeits gets the game's lowest utility and the other its highest, so illegal replies are
never a way out of a bad hand. An exception from OpenSpiel while a move is applied ends that
game without a result (rewards 0, outcome ``"unfinished"``, :attr:`OpenSpielEnv.error` set),
never the process.

Example:
    >>> game = env("kuhn_poker")
    >>> game.reset(seed=0)
    >>> game.agent_selection, game.observe("player_0")["text"].splitlines()[-3:]
    ('player_0', ['Pass', 'Bet', 'Your move (player 0): reply with exactly one of the legal actions.'])
    >>> game.step("I bet")
    >>> game.observe("player_1")["text"].splitlines()[-7:-4]
    ['Your card: Jack', 'Moves so far: player 0 Bet', 'Information state: 0b']
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyspiel

from llmgym.envs.multiagent import OPENSPIEL_GAMES
from llmgym.envs.multiagent.base import TextGameEnv
from llmgym.envs.multiagent.openspiel_parallel import OpenSpielParallelEnv
from llmgym.envs.multiagent.openspiel_text import OpenSpielText, play
from llmgym.tools import ToolError

__all__ = [
    "OpenSpielEnv",
    "OpenSpielText",
    "env",
    "parallel_env",
    "CuratedGame",
    "kuhn_poker",
    "leduc_poker",
    "liars_dice",
    "goofspiel",
    "tic_tac_toe",
    "connect_four",
    "breakthrough",
    "nim",
    "dots_and_boxes",
    "hex_game",
    "first_sealed_auction",
]


class OpenSpielEnv(TextGameEnv):
    """A turn-based OpenSpiel game for two text players, PettingZoo AEC.

    ``player_0`` plays OpenSpiel's player 0 unless :attr:`seats` says otherwise (a single-agent
    env seats its agent in either chair this way); every text speaks of OpenSpiel's players.

    Args:
        game: an OpenSpiel game name; the game must be turn-based (sequential) for two players.
        params: the game's parameters.
        **kwargs: see :class:`~llmgym.envs.multiagent.base.TextGameEnv`.

    Raises:
        ValueError: see :func:`load_game`; or the game has simultaneous moves (use :func:`parallel_env`)
            or not two players.
    """

    metadata: ClassVar[dict[str, Any]] = {**TextGameEnv.metadata, "name": "openspiel_v0"}
    game_tools = (play,)

    def __init__(self, game: str = "kuhn_poker", params: dict[str, Any] | None = None, **kwargs: Any):
        self.text = OpenSpielText(game, params)
        if self.text.simultaneous:
            raise ValueError(f"{game!r} has simultaneous moves: build it with parallel_env({game!r}, ...)")
        if self.text.num_players != 2:
            raise ValueError(f"OpenSpielEnv plays two-player games; {game!r} has {self.text.num_players} players")
        super().__init__(**kwargs)
        self.system_prompt = self.text.system_prompt
        #: agent -> the OpenSpiel player it plays.
        self.seats: dict[str, int] = {agent: i for i, agent in enumerate(self.possible_agents)}
        self.state = self.text.game.new_initial_state()
        self.error: str | None = None  # what OpenSpiel raised, when it stopped the game

    def _agent(self, player: int) -> str:
        return next(a for a, p in self.seats.items() if p == player)

    def new_game(self, options: dict[str, Any] | None) -> str:
        if sorted(self.seats.values()) != list(range(2)):
            raise ValueError(f"seats must give each agent its own OpenSpiel player 0 or 1, got {self.seats}")
        self.error = None
        self.state = self.text.game.new_initial_state()
        self.text.apply_chance(self.state, self.np_random)
        return self._agent(self.state.current_player())

    def rules(self, agent: str) -> str:
        return self.text.rules(self.seats[agent])

    def state_text(self, agent: str) -> str:
        return self.text.observation_text(self.state, self.seats[agent])

    def your_turn(self, agent: str) -> str:
        return self.state_text(agent)

    def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> int:
        return self.read_text(agent, arguments["action"])

    def read_text(self, agent: str, text: str) -> int:
        try:
            return self.text.read_action(self.state, self.seats[agent], text)
        except ValueError as err:
            raise ToolError(str(err)) from None

    def apply(self, agent: str, move: int) -> str:
        player = self.seats[agent]
        name = self.text.action_names(self.state, player)[self.state.legal_actions(player).index(move)]
        try:
            self.state.apply_action(move)
            self.text.apply_chance(self.state, self.np_random)
        except pyspiel.SpielError as err:  # the engine failed, not the player: end this game without a result
            self.error = f"SpielError: {err}"
        return (
            f"player {player} played {name}."
            if self.text.perfect_information
            else f"player {player} moved; your view shows what you can know of it."
        )

    def next_agent(self, agent: str) -> str | None:
        if self.error is not None:
            return None
        if self.state.is_terminal():
            returns = self.state.returns()
            best = max(returns)
            winners = [p for p, value in enumerate(returns) if value == best]
            self.winner = self._agent(winners[0]) if len(winners) == 1 else None
            return None
        return self._agent(self.state.current_player())

    def final_rewards(self) -> dict[str, float]:
        if self.error is not None:
            return dict.fromkeys(self.possible_agents, 0.0)
        returns = self.state.returns()
        return {agent: float(returns[player]) for agent, player in self.seats.items()}

    def forfeit_rewards(self, loser: str) -> dict[str, float]:
        returns = self.text.forfeit_returns([self.seats[loser]])
        return {agent: float(returns[player]) for agent, player in self.seats.items()}

    def outcome(self) -> dict[str, str]:
        if self.error is not None:
            return dict.fromkeys(self.possible_agents, "unfinished")
        return super().outcome()

    def result_text(self) -> str:
        if self.error is not None:
            return f"Game over without a result: OpenSpiel failed while applying the move ({self.error})."
        if self.forfeited is not None:
            loser = self.seats[self.forfeited]
            return f"Game over: player {loser} forfeited after {self.max_retries + 1} illegal attempts in a row."
        returns = ", ".join(f"player {p}: {value:g}" for p, value in enumerate(self.state.returns()))
        return f"Game over. Returns: {returns}."

    def render(self) -> str | None:
        """The whole state as OpenSpiel prints it (every player's private information too: a spectator's view)."""
        if self.render_mode != "ansi":
            return None
        return f"{self.state}\n"


class CuratedGame:
    """The factory of a curated game's env: ``kuhn_poker(**kwargs)`` builds ``KuhnPoker``'s game.

    Args:
        name: the game's name in :data:`llmgym.envs.multiagent.OPENSPIEL_GAMES` (``"KuhnPoker"``).

    A call's ``params`` are merged over the curated ones; other keyword arguments go to the env.
    """

    def __init__(self, name: str):
        self.game, self.params, kind = OPENSPIEL_GAMES[name]
        self.parallel = kind == "parallel"
        self.__name__ = self.game
        params = ", ".join(f"{key}={value}" for key, value in self.params.items())
        turns = "simultaneous moves, PettingZoo Parallel" if self.parallel else "turn-based, PettingZoo AEC"
        self.description = f"OpenSpiel's {self.game}{f' ({params})' if params else ''}: {turns}"
        """What ``llmgym list`` shows for the game's id."""

    def __call__(self, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        build = parallel_env if self.parallel else env
        return build(self.game, params={**self.params, **(params or {})}, **kwargs)


def env(game: str = "kuhn_poker", params: dict[str, Any] | None = None, **kwargs: Any) -> OpenSpielEnv:
    """A new :class:`OpenSpielEnv` for the turn-based OpenSpiel game ``game`` (any name, with ``params``).

    Raises:
        ValueError: see :class:`OpenSpielEnv`.
    """
    return OpenSpielEnv(game, params, **kwargs)


def parallel_env(game: str = "goofspiel", params: dict[str, Any] | None = None, **kwargs: Any) -> OpenSpielParallelEnv:
    """A new :class:`~.openspiel_parallel.OpenSpielParallelEnv` for a simultaneous-move OpenSpiel game.

    Raises:
        ValueError: see :class:`~.openspiel_parallel.OpenSpielParallelEnv`.
    """
    return OpenSpielParallelEnv(game, params, **kwargs)


kuhn_poker = CuratedGame("KuhnPoker")
leduc_poker = CuratedGame("LeducPoker")
liars_dice = CuratedGame("LiarsDice")
goofspiel = CuratedGame("Goofspiel")
tic_tac_toe = CuratedGame("TicTacToe")
connect_four = CuratedGame("ConnectFour")
breakthrough = CuratedGame("Breakthrough")
nim = CuratedGame("Nim")
dots_and_boxes = CuratedGame("DotsAndBoxes")
hex_game = CuratedGame("Hex")
first_sealed_auction = CuratedGame("FirstSealedAuction")
