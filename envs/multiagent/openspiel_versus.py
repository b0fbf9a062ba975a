"""Single-agent Gymnasium envs: an LLM plays one seat of an OpenSpiel game against an OpenSpiel bot.

Holds :class:`OpenSpielVersusEnv` (``llmgym/os-<Name>-v0`` for each curated game, and any
OpenSpiel game through ``game=``/``params=``) on :class:`~.versus.VersusEnv`, and the bots,
scripted players (``act(env, agent) -> str``) that ``play_match`` and ``evaluate`` can seat as well:
:class:`RandomBot` (a uniformly random legal action) and :class:`MCTSBot` (OpenSpiel's
``MCTSBot`` with random rollouts, for turn-based games of perfect information; it handles chance).

Both bots keep no state between calls: an action is a function of the bot's seed, the game's
seed and the history, so many games can share a bot and a seed replays a game.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Literal

import numpy as np

from llmgym.envs.multiagent.openspiel_game import OpenSpielEnv
from llmgym.envs.multiagent.openspiel_parallel import OpenSpielParallelEnv
from llmgym.envs.multiagent.openspiel_text import OpenSpielText
from llmgym.envs.multiagent.versus import AGENT, OPPONENT, VersusEnv
from llmgym.tools import ToolError, ToolResult, tool

__all__ = ["OpenSpielVersusEnv", "RandomBot", "MCTSBot", "BOTS", "make_bot"]


def _position_seed(seed: int, game: OpenSpielEnv | OpenSpielParallelEnv, agent: str) -> list[int]:
    """Entropy for one decision: the bot's seed, the game's seed (its generator, read, never drawn), the history."""
    game_seed = zlib.crc32(repr(game.np_random.bit_generator.state).encode())
    return [seed % 2**32, game_seed, zlib.crc32(f"{agent}:{game.state.history()}".encode())]


def _choose(game: Any, agent: str, action: int) -> str:
    """The name ``agent`` would write for ``action``: what the bot answers."""
    player = game.seats[agent]
    return game.text.action_names(game.state, player)[game.state.legal_actions(player).index(action)]


class RandomBot:
    """Plays a uniformly random legal action of any OpenSpiel game.

    Args:
        seed: varies the choices.

    Example:
        >>> from llmgym.envs.multiagent.openspiel_game import env
        >>> game = env("tic_tac_toe"); game.reset(seed=0)
        >>> RandomBot(seed=1).act(game, "player_0") in game.text.action_names(game.state, 0)
        True
    """

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def act(self, env: Any, agent: str) -> str:
        game = env.unwrapped
        legal = game.state.legal_actions(game.seats[agent])
        rng = np.random.default_rng(_position_seed(self.seed, game, agent))
        return _choose(game, agent, legal[int(rng.integers(len(legal)))])


class MCTSBot:
    """OpenSpiel's Monte Carlo tree search (UCT, random rollouts) for turn-based games of perfect information.

    It searches the true state, so in a game of imperfect information it would see hidden cards:
    such games, and simultaneous ones, are refused.

    Args:
        game: the game the bot plays (an :class:`~.openspiel_text.OpenSpielText`).
        seed: seeds the search and the rollouts.
        simulations: searches per move.
        uct_c: the exploration constant.

    Raises:
        ValueError: the game has imperfect information or simultaneous moves.
    """

    name = "mcts"

    def __init__(self, game: OpenSpielText, seed: int = 0, simulations: int = 200, uct_c: float = 2.0):
        if not game.perfect_information or game.simultaneous:
            raise ValueError(
                f"the MCTS bot searches the true state, which in {game.name!r} would show it what is hidden "
                "from it (or the game has simultaneous moves): use opponent='random'"
            )
        self.game, self.seed, self.simulations, self.uct_c = game, seed, simulations, uct_c

    def act(self, env: Any, agent: str) -> str:
        from open_spiel.python.algorithms import mcts  # imports OpenSpiel's Python algorithms only when searching

        game = env.unwrapped
        random_state = np.random.RandomState(
            np.random.SeedSequence(_position_seed(self.seed, game, agent)).generate_state(1)
        )
        bot = mcts.MCTSBot(
            self.game.game,
            self.uct_c,
            self.simulations,
            mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=random_state),
            random_state=random_state,
        )
        return _choose(game, agent, bot.step(game.state))


#: The bots by name, as ``opponent=`` takes them.
BOTS = ("random", "mcts")


def make_bot(kind: str, game: OpenSpielText, seed: int = 0) -> RandomBot | MCTSBot:
    """The bot named ``kind`` (one of :data:`BOTS`) for ``game``.

    Raises:
        ValueError: an unknown name, or MCTS for a game it cannot play fairly.
    """
    if kind == "random":
        return RandomBot(seed)
    if kind == "mcts":
        return MCTSBot(game, seed)
    raise ValueError(f"opponent must be one of {', '.join(BOTS)}, got {kind!r}")


class OpenSpielVersusEnv(VersusEnv):
    """An OpenSpiel game against an OpenSpiel bot: one seat for the agent, the other for the bot.

    ## Description

    Any two-player OpenSpiel game with observation or information-state strings
    (``llmgym/os-<Name>-v0`` registers the curated ones). The agent reads its own view only (the
    position, or its information state in a game of imperfect information) and the legal actions,
    one per line, and replies with one of them, or calls ``play(action)``. The bot
    (:class:`RandomBot` or :class:`MCTSBot`) answers at once; chance events are drawn from the
    env's seeded generator.

    ## Action Space

    ``Text``: assistant text (the reply equal to a legal action, else the one legal action named in
    its last line, else the one named anywhere) or an OpenAI assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the agent's view of the game after the bot's move, and the legal actions; or why a reply
    was illegal.

    ## Rewards

    OpenSpiel's return for the agent's player at the end (Kuhn poker +-1 or +-2, Tic-Tac-Toe +1/0/-1);
    -0.1 per illegal attempt; a forfeit (a third illegal attempt in a row) pays the game's lowest utility,
    so it is never a way out of a bad hand. The components are :class:`~.versus.VersusEnv`'s
    (``game``, ``unfinished``, ``format_error``), with how they could be gamed.

    ## Starting State

    The game's initial state after its opening chance events (cards dealt, dice rolled), drawn with
    ``self.np_random``; with ``seat="random"`` the agent's seat is drawn from it too.

    ## Episode End

    - Terminated: the game ends, a forfeit, or OpenSpiel fails while applying a move (no result, reward 0).
    - Truncated: ``max_turns`` turns (illegal attempts count) or the token budget ran
      out before the game ended (``unfinished``).

    ## Arguments

    Args:
        game: an OpenSpiel game name (``pyspiel.registered_names()``).
        params: the game's parameters (``{"rows": 6, "columns": 6}``).
        opponent: ``"random"`` or ``"mcts"`` (200 simulations; turn-based games of perfect information).
        seat: the agent's OpenSpiel player, 0 or 1, or ``"random"`` (drawn per episode from the seed);
            a simultaneous-move game offers seat 0 only.
        max_turns: turn budget; default twice the game's longest length plus 10.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "An OpenSpiel game against an OpenSpiel bot (reply: one legal action; reward: OpenSpiel's returns)."

    def __init__(
        self,
        game: str = "kuhn_poker",
        params: dict[str, Any] | None = None,
        opponent: Literal["random", "mcts"] = "random",
        seat: int | Literal["random"] = 0,
        max_turns: int | None = None,
        **kwargs: Any,
    ):
        self.text = OpenSpielText(game, params)
        if self.text.num_players != 2:
            raise ValueError(f"{game!r} has {self.text.num_players} players; the versus envs play two-player games")
        if seat not in (0, 1, "random") or (self.text.simultaneous and seat != 0):
            offered = "0 (its players move at once)" if self.text.simultaneous else "0, 1 or 'random'"
            raise ValueError(f"seat must be {offered}, got {seat!r}")
        make_bot(opponent, self.text)  # refuse a bot the game cannot have now, not at the first reset
        self.game_name, self.params, self.opponent_kind, self.seat = game, dict(params or {}), opponent, seat
        length = self.text.game.max_game_length()
        self.agent_moves = length  # the agent could make every move (a player may move again, as in dots and boxes)
        super().__init__(max_turns=2 * length + 10 if max_turns is None else max_turns, **kwargs)

    def make_game(self) -> OpenSpielEnv | OpenSpielParallelEnv:
        build = OpenSpielParallelEnv if self.text.simultaneous else OpenSpielEnv
        return build(self.game_name, self.params)

    def make_opponent(self, seed: int) -> RandomBot | MCTSBot:
        return make_bot(self.opponent_kind, self.text, seed)

    def setup(self, options: dict[str, Any] | None) -> str:
        if isinstance(self.game, OpenSpielEnv):
            seat = int(self.np_random.integers(2)) if self.seat == "random" else int(self.seat)
            self.game.seats = {AGENT: seat, OPPONENT: 1 - seat}
        return super().setup(options)

    @tool
    def play(self, action: str) -> str:
        """Play one of the legal actions.

        Args:
            action: the action, written as in the list of legal actions.
        """
        call = {
            "id": "call_play",
            "type": "function",
            "function": {"name": "play", "arguments": json.dumps({"action": action})},
        }
        result: ToolResult = self.send({"role": "assistant", "content": None, "tool_calls": [call]})
        if not result.ok:  # an illegal move is a failed call; its text still explains and shows the position
            raise ToolError(result.content)
        return result.content
