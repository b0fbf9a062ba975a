"""Single-agent Gymnasium envs: an LLM plays ``player_0`` of a multi-agent game against a scripted opponent.

Holds :class:`VersusEnv` (the shared :class:`~llmgym.LLMEnv` machinery) and
the registered envs :class:`TicTacToeVsBot` (``llmgym/TicTacToe-v0``),
:class:`ConnectFourVsBot` (``llmgym/ConnectFour-v0``),
:class:`NegotiationVsBot` (``llmgym/Negotiation-v0``) and
:class:`PrisonersDilemmaVsBot` (``llmgym/PrisonersDilemma-v0``).

The agent moves with the game's tools or plain text, exactly as in the
multi-agent env; after each legal move the opponent answers at once, and the
observation shows its move. :class:`VersusEnv`'s docstring has the reward
components all four share; each env's docstring has its game in Gymnasium's sections.

A tool call reaches the game as a native tool call with the arguments it was
made with (:func:`_call`), never re-written as ``<tool_call>`` text, so any
message text, ``</tool_call>`` included, arrives as it was written.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import Any, Literal

from llmgym.env import LLMEnv
from llmgym.envs.multiagent.base import TextGameEnv
from llmgym.envs.multiagent.connect_four import ConnectFourEnv, NegamaxPlayer
from llmgym.envs.multiagent.negotiation import HagglerPlayer, NegotiationEnv
from llmgym.envs.multiagent.prisoners_dilemma import PrisonersDilemmaEnv, TitForTat
from llmgym.envs.multiagent.tictactoe import MinimaxPlayer, TicTacToeEnv
from llmgym.rubric import Reward, Rubric, TurnContext, format_error
from llmgym.tools import ToolError, ToolResult, tool

__all__ = ["VersusEnv", "TicTacToeVsBot", "ConnectFourVsBot", "NegotiationVsBot", "PrisonersDilemmaVsBot"]

AGENT, OPPONENT = "player_0", "player_1"


class VersusEnv(LLMEnv):
    """An LLM as ``player_0`` of a text game, a scripted player as ``player_1``.

    Subclasses set :meth:`make_game` and :meth:`make_opponent` and declare the
    game's tools as ``@tool`` methods that call :meth:`send`.

    Rewards (components in ``info["reward_components"]``), the same in every game:

    | name | weight | when | value |
    |---|---|---|---|
    | ``game`` | 1.0 | turn | what ``player_0`` earned this turn: illegal-move penalties, payoffs, the result |
    | ``unfinished`` | -1.0 | end | 1 when the turn budget ran out before the game ended |
    | ``format_error`` | -0.1 | turn | 1 for a malformed tool call (it never reaches the game) |

    Only one tool call per turn is honoured (one move per turn).

    How it could be gamed, and why that does not pay: claiming a win in prose
    or naming several cells or columns is an illegal move (-0.1, and the third in
    a row forfeits at -1); malformed tool calls and bad arguments (a ``player``
    argument to move for the opponent) never reach the game and cost 0.1 each
    until the turn budget ends the episode with ``unfinished`` (-1); extra tool
    calls in a turn are refused. ``tests/envs/test_multiagent.py`` checks that such
    policies end at -1 or below in ``llmgym/TicTacToe-v0``, where honest perfect play
    draws (0). In ``llmgym/Negotiation-v0`` the haggler never settles for less than
    half the pool's worth to it, not even on the last turn, so holding out with
    greedy demands for a last-turn ultimatum scores below fair haggling (tested).

    Args:
        max_turns: turn budget (illegal attempts count as turns).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.
    """

    #: the most moves a whole game can ask of the agent: a smaller turn budget could never finish it
    agent_moves: int = 1

    def __init__(self, max_turns: int = 30, **kwargs: Any):
        if isinstance(max_turns, int) and max_turns < self.agent_moves:
            raise ValueError(
                f"max_turns must be >= {self.agent_moves}: a game of {type(self).__name__} can take "
                f"{self.agent_moves} moves from you (illegal attempts count as turns too), got {max_turns}"
            )
        kwargs.setdefault("max_tool_calls", 1)
        self.game = self.make_game()
        self.opponent: Any = None
        self.turn_game_rewards: dict[int, float] = {}
        super().__init__(max_turns=max_turns, **kwargs)
        self.system_prompt = self.game.system_prompt

    @abstractmethod
    def make_game(self) -> Any:
        """A new multi-agent game (AEC :class:`TextGameEnv` or Parallel)."""

    @abstractmethod
    def make_opponent(self, seed: int) -> Any:
        """The scripted opponent for one episode."""

    # -- LLMEnv hooks ------------------------------------------------------------

    def setup(self, options: dict[str, Any] | None) -> str:
        seed = int(self.np_random.integers(2**31))
        self.opponent = self.make_opponent(seed)
        self.turn_game_rewards = {}
        if isinstance(self.game, TextGameEnv):
            self.game.reset(seed=seed, options=options)
            if self.game.agent_selection == OPPONENT:
                self._opponent_moves()
            text = self.game.observe(AGENT)["text"]
        else:
            observations, _ = self.game.reset(seed=seed, options=options)
            text = observations[AGENT]["text"]
        return text.replace(self.system_prompt + "\n", "", 1)

    def on_text(self, text: str) -> str:
        return self.send(text).content

    def is_done(self) -> bool:
        if isinstance(self.game, TextGameEnv):
            return self.game.game_over
        return not self.game.agents

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(lambda ctx: self.turn_game_rewards.get(ctx.turn, 0.0), name="game"),
                Reward(self._unfinished, weight=-1.0, when="end", name="unfinished"),
                Reward(format_error, weight=-0.1),
            ]
        )

    def _unfinished(self, ctx: TurnContext) -> float:
        return 0.0 if self.is_done() else 1.0

    # -- playing -------------------------------------------------------------------

    def send(self, action: str | dict[str, Any]) -> ToolResult:
        """Send ``action`` to the game as ``player_0``; the opponent answers.

        ``action`` is text, or an assistant message dict such as :func:`_call` makes.

        Returns:
            What ``player_0`` reads next; ``ok=False`` when the move was illegal.
        """
        turn = len(self.turn_contexts) + 1
        if isinstance(self.game, TextGameEnv):
            before = self.game.illegal_attempts[AGENT]
            self.game.step(action)
            earned = self.game.rewards[AGENT]
            legal = self.game.illegal_attempts[AGENT] == before
            if legal and not self.game.game_over:
                earned += self._opponent_moves()
            text = self.game.observe(AGENT)["text"]
        else:
            before = self.game.illegal_attempts[AGENT]
            opponent_action = self.opponent.act(self.game, OPPONENT)
            observations, rewards, *_ = self.game.step({AGENT: action, OPPONENT: opponent_action})
            earned, text = rewards[AGENT], observations[AGENT]["text"]
            legal = self.game.illegal_attempts[AGENT] == before
        self.turn_game_rewards[turn] = self.turn_game_rewards.get(turn, 0.0) + float(earned)
        return ToolResult(text, ok=legal)

    def _opponent_moves(self) -> float:
        """Let the opponent move until it is ``player_0``'s turn or the game ends; ``player_0``'s reward meanwhile."""
        earned = 0.0
        while not self.game.game_over and self.game.agent_selection == OPPONENT:
            self.game.step(self.opponent.act(self.game, OPPONENT))
            earned += self.game.rewards[AGENT]
        return earned


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    """A move for the game: an assistant message with one native tool call, its arguments exactly as given.

    Example:
        >>> _call("play", move="C", message="</tool_call>")["tool_calls"][0]["function"]
        {'name': 'play', 'arguments': '{"move": "C", "message": "</tool_call>"}'}
    """
    call = {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class TicTacToeVsBot(VersusEnv):
    """Tic-tac-toe as X against a perfect minimax opponent (a draw is the best possible result).

    ## Description

    The agent plays X (first) on cells ``a1`` (top left) to ``c3`` with ``move(cell)`` or
    a reply whose last line names one cell; :class:`~.tictactoe.MinimaxPlayer` answers.

    ## Action Space

    ``Text``: assistant text (a tool call, or plain text whose last line is the move)
    or an OpenAI assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the board after both moves, or why a move was illegal.

    ## Rewards

    Win +1, draw 0, loss -1 (paid on the last move); -0.1 per illegal attempt. The components are :class:`VersusEnv`'s
    (``game``, ``unfinished``, ``format_error``), with how they could be gamed.

    ## Starting State

    An empty board; the opponent's tie-breaks are seeded from ``self.np_random``.

    ## Episode End

    - Terminated: three in a row, a full board, or a forfeit (a third illegal attempt in a row).
    - Truncated: ``max_turns`` turns (illegal attempts count) or the token budget ran
      out before the game ended (``unfinished``).

    ## Arguments

    Args:
        max_turns: turn budget, at least 5 (the moves X can need).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "Tic-tac-toe as X against a perfect minimax opponent (win +1, draw 0, loss -1)."

    agent_moves = 5  # X makes at most 5 of the 9 moves

    def __init__(self, max_turns: int = 20, **kwargs: Any):
        super().__init__(max_turns=max_turns, **kwargs)

    def make_game(self) -> TicTacToeEnv:
        return TicTacToeEnv()

    def make_opponent(self, seed: int) -> MinimaxPlayer:
        return MinimaxPlayer(seed=seed)

    @tool
    def move(self, cell: str) -> str:
        """Put your mark on an empty cell.

        Args:
            cell: the cell, column letter a-c then row number 1-3 (a1 is top left, b2 the centre).
        """
        return _result(self.send(_call("move", cell=cell)))


class ConnectFourVsBot(VersusEnv):
    """Connect Four as X against a depth-limited negamax opponent.

    ## Description

    The agent drops X discs (first) into columns 1-7 with ``move(column)`` or a reply
    naming one column; :class:`~.connect_four.NegamaxPlayer` answers.

    ## Action Space

    ``Text``: assistant text (a tool call, or plain text whose last line is the move)
    or an OpenAI assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the board after both moves, or why a move was illegal.

    ## Rewards

    Win +1, draw 0, loss -1 (paid on the last move); -0.1 per illegal attempt. The components are :class:`VersusEnv`'s
    (``game``, ``unfinished``, ``format_error``), with how they could be gamed.

    ## Starting State

    An empty 7x6 board.

    ## Episode End

    - Terminated: four in a row, a full board, or a forfeit (a third illegal attempt in a row).
    - Truncated: ``max_turns`` turns (illegal attempts count) or the token budget ran
      out before the game ended (``unfinished``).

    ## Arguments

    Args:
        depth: the opponent's search depth in plies.
        max_turns: turn budget, at least 21 (the moves X can need).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "Connect Four as X against a depth-6 negamax opponent (win +1, draw 0, loss -1)."

    agent_moves = 21  # X makes at most 21 of the 42 moves

    def __init__(self, depth: int = 6, max_turns: int = 40, **kwargs: Any):
        self.depth = depth
        super().__init__(max_turns=max_turns, **kwargs)

    def make_game(self) -> ConnectFourEnv:
        return ConnectFourEnv()

    def make_opponent(self, seed: int) -> NegamaxPlayer:
        return NegamaxPlayer(depth=self.depth)

    @tool
    def move(self, column: int) -> str:
        """Drop your disc into a column.

        Args:
            column: the column number, 1 (left) to 7 (right).
        """
        return _result(self.send(_call("move", column=column)))


class NegotiationVsBot(VersusEnv):
    """Split items with private values against a scripted haggler; deal or no deal.

    ## Description

    A pool of books, hats and balls; each player values them privately (the pool is
    worth 10 to each). Players alternate ``propose(books, hats, balls)`` (what the
    proposer takes) and ``accept()``; prose is delivered to the other player as a
    message. :class:`~.negotiation.HagglerPlayer` answers.

    ## Action Space

    ``Text``: assistant text (a tool call, or plain text whose last line is the move)
    or an OpenAI assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the pool, your values, the other player's proposal and message.

    ## Rewards

    A deal pays your share's value / 10; no deal 0; -0.1 per illegal attempt; a
    forfeit -1. The components are :class:`VersusEnv`'s
    (``game``, ``unfinished``, ``format_error``), with how they could be gamed.

    ## Starting State

    A pool (1-4 of each item) and both players' values drawn with ``self.np_random``.

    ## Episode End

    - Terminated: an acceptance (a deal), the game's 8 turns without one (no deal), or a forfeit.
    - Truncated: ``max_turns`` turns (illegal attempts count) or the token budget ran
      out before the game ended (``unfinished``).

    ## Arguments

    Args:
        max_turns: turn budget, at least 4 (the agent's turns of the game's 8).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = (
        "Negotiate a split of items with private values against a scripted haggler (reward: your share's value / 10)."
    )

    agent_moves = 4  # the agent's 4 of the game's 8 turns

    def __init__(self, max_turns: int = 16, **kwargs: Any):
        super().__init__(max_turns=max_turns, **kwargs)

    def make_game(self) -> NegotiationEnv:
        return NegotiationEnv()

    def make_opponent(self, seed: int) -> HagglerPlayer:
        return HagglerPlayer()

    @tool
    def propose(self, books: int, hats: int, balls: int) -> str:
        """Propose a split: how many of each item YOU take; the other player gets the rest.

        Args:
            books: books you take.
            hats: hats you take.
            balls: balls you take.
        """
        return _result(self.send(_call("propose", books=books, hats=hats, balls=balls)))

    @tool
    def accept(self) -> str:
        """Accept the other player's latest proposal; the game ends with that deal."""
        return _result(self.send(_call("accept")))


class PrisonersDilemmaVsBot(VersusEnv):
    """Ten rounds of the prisoner's dilemma with messages against tit-for-tat.

    ## Description

    Each round both players move ``C`` or ``D`` with an optional message
    (``play(move, message)``, or text whose last line is the move);
    :class:`~.prisoners_dilemma.TitForTat` answers.

    ## Action Space

    ``Text``: assistant text (a tool call, or plain text whose last line is the move)
    or an OpenAI assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the round's moves, payoffs and the other player's message.

    ## Rewards

    Per round CC 3/3, DD 1/1, DC 5/0; an illegal action costs 1 and holds the
    round; a third in a row forfeits (-5). The components are :class:`VersusEnv`'s
    (``game``, ``unfinished``, ``format_error``), with how they could be gamed.

    ## Starting State

    Round one, no history; the opponent opens with ``C``.

    ## Episode End

    - Terminated: the tenth round, or a forfeit.
    - Truncated: ``max_turns`` turns (illegal attempts count) or the token budget ran
      out before the game ended (``unfinished``).

    ## Arguments

    Args:
        max_turns: turn budget, at least 10 (one move a round).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "Iterated prisoner's dilemma with messages, 10 rounds against tit-for-tat (reward: payoffs)."

    agent_moves = 10  # one move a round, 10 rounds

    def __init__(self, max_turns: int = 40, **kwargs: Any):
        super().__init__(max_turns=max_turns, **kwargs)

    def make_game(self) -> PrisonersDilemmaEnv:
        return PrisonersDilemmaEnv(num_rounds=10)

    def make_opponent(self, seed: int) -> TitForTat:
        return TitForTat()

    @tool
    def play(self, move: Literal["C", "D"], message: str = "") -> str:
        """Play this round's move.

        Args:
            move: C to cooperate, D to defect.
            message: what to tell the other player (they read it with this round's result).
        """
        return _result(self.send(_call("play", move=move, message=message)))


def _result(result: ToolResult) -> str:
    """A tool's return value; an illegal move becomes a failed call (its text still explains and shows the position)."""
    if not result.ok:
        raise ToolError(result.content)
    return result.content
