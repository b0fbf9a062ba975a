"""Tic-tac-toe as a PettingZoo AEC text game, with a perfect (minimax) scripted player.

Holds :class:`TicTacToeEnv` (``player_0`` plays X and moves first),
:func:`env` (the PettingZoo-style factory), :class:`MinimaxPlayer` (never
loses), :class:`TextMinimaxPlayer` (the same, reading only the observation
text, for ``ScriptedPolicy``), :func:`best_moves`, :func:`winner_of` and
:func:`read_board`.

Moves are cells named column letter + row number, ``a1`` (top left) to
``c3``: as plain text (``"b2"``, ``"I take the centre: B2."``) or as a tool
call ``<tool_call>{"name": "move", "arguments": {"cell": "b2"}}</tool_call>``.
Rewards: win +1, loss -1, draw 0 at the end; -0.1 for each illegal attempt
(occupied cell, no cell or several cells named, malformed tool call); a
third illegal attempt in a row forfeits the game (a loss).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np

from llmgym.envs.multiagent.base import TextGameEnv
from llmgym.tools import ToolError, tool

__all__ = [
    "TicTacToeEnv",
    "env",
    "MinimaxPlayer",
    "TextMinimaxPlayer",
    "best_moves",
    "winner_of",
    "read_board",
    "LINES",
    "cell_name",
]

LINES: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),
    (0, 3, 6),
    (1, 4, 7),
    (2, 5, 8),
    (0, 4, 8),
    (2, 4, 6),
)
_CELL = re.compile(r"(?<![a-z0-9])([abc])\s*([123])(?![a-z0-9])", re.IGNORECASE)
_MARKS = {"player_0": "X", "player_1": "O"}


def cell_name(index: int) -> str:
    """The name of board index 0..8 (``0`` is ``a1``, ``4`` is ``b2``).

    Example:
        >>> cell_name(0), cell_name(4), cell_name(8)
        ('a1', 'b2', 'c3')
    """
    return "abc"[index % 3] + str(index // 3 + 1)


def winner_of(board: str) -> str | None:
    """``"X"`` or ``"O"`` when that mark has three in a row, else ``None``.

    Example:
        >>> winner_of("XXX" "OO." "..."), winner_of("........."), winner_of("XOX" "XOO" "OXX")
        ('X', None, None)
    """
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


@cache
def _value(board: str, mark: str) -> int:
    """Minimax value of ``board`` for ``mark`` to move: +1 win, 0 draw, -1 loss."""
    other = "O" if mark == "X" else "X"
    if winner_of(board) is not None:
        return -1  # the previous mover completed a line
    empty = [i for i, c in enumerate(board) if c == "."]
    if not empty:
        return 0
    return max(-_value(board[:i] + mark + board[i + 1 :], other) for i in empty)


def best_moves(board: str, mark: str) -> list[int]:
    """Every optimal move (board indices) for ``mark`` on ``board`` (a 9-character string of ``X``, ``O``, ``.``).

    Example:
        >>> best_moves("XX." "OO." "...", "X")
        [2]
    """
    other = "O" if mark == "X" else "X"
    empty = [i for i, c in enumerate(board) if c == "."]
    if not empty or winner_of(board):
        return []
    values = {i: -_value(board[:i] + mark + board[i + 1 :], other) for i in empty}
    top = max(values.values())
    return [i for i in empty if values[i] == top]


@tool
def move(cell: str) -> None:
    """Put your mark on an empty cell.

    Args:
        cell: the cell, column letter a-c then row number 1-3 (a1 is top left, b2 the centre).
    """


class TicTacToeEnv(TextGameEnv):
    """Tic-tac-toe for two text players; ``player_0`` (X) moves first.

    Args:
        **kwargs: see :class:`~llmgym.envs.multiagent.base.TextGameEnv`.
    """

    metadata = {**TextGameEnv.metadata, "name": "tictactoe_v0"}
    game_tools = (move,)
    system_prompt = (
        "You are playing tic-tac-toe on a 3x3 board. Columns are a-c (left to right), rows 1-3 (top to bottom). "
        "Get three of your marks in a row, column or diagonal. Each turn, name exactly one empty cell, e.g. b2, "
        'or call <tool_call>{"name": "move", "arguments": {"cell": "b2"}}</tool_call>.'
    )

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.board = "." * 9

    def new_game(self, options: dict[str, Any] | None) -> str:
        board = (options or {}).get("board", "." * 9)
        if not isinstance(board, str) or len(board) != 9 or set(board) - set("XO.") or winner_of(board):
            raise ValueError(f"options['board'] must be 9 characters of X, O and . with no line yet, got {board!r}")
        if board.count("X") - board.count("O") not in (0, 1) or "." not in board:
            raise ValueError(f"options['board'] {board!r} is not a reachable, unfinished position")
        self.board = board
        return "player_0" if board.count("X") == board.count("O") else "player_1"

    def rules(self, agent: str) -> str:
        return f"{self.system_prompt}\nYou are {agent} and play {_MARKS[agent]}. X moves first."

    def state_text(self, agent: str) -> str:
        rows = ["   a b c"] + [f"{r + 1}  " + " ".join(self.board[3 * r : 3 * r + 3]) for r in range(3)]
        return "Board:\n" + "\n".join(rows)

    def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> int:
        return self.read_text(agent, arguments["cell"])

    def read_text(self, agent: str, text: str) -> int:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        cells = _cells(lines[-1]) if lines else []
        if not cells:
            cells = _cells(text)
        if not cells:
            raise ToolError("no cell found; name one empty cell such as b2")
        if len(cells) > 1:
            raise ToolError(f"several cells named ({', '.join(cell_name(c) for c in cells)}); name exactly one")
        index = cells[0]
        if self.board[index] != ".":
            raise ToolError(f"{cell_name(index)} is taken; empty cells: {', '.join(self.empty_cells())}")
        return index

    def apply(self, agent: str, move: int) -> str:
        self.board = self.board[:move] + _MARKS[agent] + self.board[move + 1 :]
        return f"{agent} ({_MARKS[agent]}) played {cell_name(move)}."

    def next_agent(self, agent: str) -> str | None:
        mark = winner_of(self.board)
        if mark is not None:
            self.winner = agent
            return None
        if "." not in self.board:
            return None
        return self._other(agent)

    def empty_cells(self) -> list[str]:
        """Names of the empty cells."""
        return [cell_name(i) for i, c in enumerate(self.board) if c == "."]


def _cells(text: str) -> list[int]:
    found: list[int] = []
    for col, row in _CELL.findall(text[:4096]):
        index = "abc".index(col.lower()) + 3 * (int(row) - 1)
        if index not in found:
            found.append(index)
    return found


class MinimaxPlayer:
    """A perfect tic-tac-toe player: always plays an optimal move.

    Ties between optimal moves are broken by a hash of ``seed`` and the
    position, so the player keeps no state: the same position always gets the
    same answer, however many games share the player.

    Args:
        seed: varies the tie-breaking.
        tool_calls: answer with the tool-call protocol instead of plain text.
    """

    name = "minimax"

    def __init__(self, seed: int = 0, tool_calls: bool = False):
        self.seed = seed
        self.tool_calls = tool_calls

    def act(self, env: TicTacToeEnv, agent: str) -> str:
        board = env.unwrapped.board
        choices = best_moves(board, _MARKS[agent])
        position = sum(".XO".index(c) * 3**i for i, c in enumerate(board))
        pick = np.random.default_rng([self.seed, position]).integers(len(choices))
        cell = cell_name(choices[int(pick)])
        if self.tool_calls:
            return f'<tool_call>{{"name": "move", "arguments": {{"cell": "{cell}"}}}}</tool_call>'
        return cell


class TextMinimaxPlayer:
    """:class:`MinimaxPlayer` that reads the board from the observation text alone.

    For ``llmgym.wrappers.scripted.ScriptedPolicy`` (``act(observation) -> str``), e.g.
    ``llmgym eval llmgym/TicTacToe-v0 --policy scripted:llmgym.envs.multiagent.tictactoe:TextMinimaxPlayer``.
    """

    def act(self, observation: str) -> str:
        board = read_board(observation)
        if board is None or "." not in board:
            return "I cannot see the board."
        mark = "X" if board.count("X") == board.count("O") else "O"
        choices = best_moves(board, mark) or [board.index(".")]
        return cell_name(choices[0])


def read_board(text: str) -> str | None:
    r"""The last board in an observation, as 9 characters (``None`` when there is none).

    Example:
        >>> read_board("Board:\n   a b c\n1  X . .\n2  . O .\n3  . . .\nYour move.")
        'X...O....'
    """
    block = text.rsplit("Board:", 1)
    if len(block) < 2:
        return None
    rows = re.findall(r"^([123])  ([XO.]) ([XO.]) ([XO.])$", block[1], re.MULTILINE)
    if len(rows) != 3:
        return None
    return "".join("".join(row[1:]) for row in rows)


def env(**kwargs: Any) -> TicTacToeEnv:
    """A new :class:`TicTacToeEnv` (PettingZoo convention: ``tictactoe_v0.env()``)."""
    return TicTacToeEnv(**kwargs)
