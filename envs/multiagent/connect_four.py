"""Connect Four as a PettingZoo AEC text game, with a depth-limited negamax scripted player.

Holds :class:`ConnectFourEnv` (7 columns, 6 rows; ``player_0`` plays X and
moves first), :func:`env` (the PettingZoo-style factory) and
:class:`NegamaxPlayer` (alpha-beta search on bitboards; the heuristic counts open threats and
weights those on the rows that decide Connect Four endgames; see
``docs/envs-games.md`` for measured strength and speed).

Moves are column numbers 1-7: as plain text (``"4"``, ``"column 4"``,
``"I drop in column 4."``) or as a tool call
``<tool_call>{"name": "move", "arguments": {"column": 4}}</tool_call>``.
Rewards: win +1, loss -1, draw 0 at the end; -0.1 for each illegal attempt
(full or missing column, several columns named, malformed tool call); a
third illegal attempt in a row forfeits the game (a loss).
"""

from __future__ import annotations

import re
from typing import Any

from llmgym.envs.multiagent.base import TextGameEnv
from llmgym.tools import ToolError, tool

__all__ = [
    "ConnectFourEnv",
    "env",
    "NegamaxPlayer",
    "TextNegamaxPlayer",
    "best_column",
    "read_columns",
    "ROWS",
    "COLUMNS",
]

ROWS, COLUMNS = 6, 7
_MARKS = {"player_0": "X", "player_1": "O"}
_NAMED = re.compile(r"col(?:umn)?\s*[:#]?\s*(-?\d+)", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\d.])(-?\d+)(?![\d.])")

# Bitboards (after Pascal Pons' solver): column c uses bits 7c..7c+5, bit 7c+6 stays empty as a sentinel.
_H1 = ROWS + 1
_BOTTOM = sum(1 << (c * _H1) for c in range(COLUMNS))
_FULL = _BOTTOM * ((1 << ROWS) - 1)
_ORDER = (3, 2, 4, 1, 5, 0, 6)  # centre first: better moves first makes alpha-beta cut more
_CENTRE = ((1 << ROWS) - 1) << (3 * _H1)
_ROWS_135 = sum(1 << (c * _H1 + r) for c in range(COLUMNS) for r in (0, 2, 4))  # rows 1, 3, 5 from the bottom
_ROWS_246 = _FULL ^ _ROWS_135
_WIN = 10_000


def _column_mask(column: int) -> int:
    return ((1 << ROWS) - 1) << (column * _H1)


def _open_fours(stones: int, mask: int) -> int:
    """Empty cells that would complete four in a row for ``stones``."""
    r = (stones << 1) & (stones << 2) & (stones << 3)
    for shift in (_H1, ROWS, ROWS + 2):
        p = (stones << shift) & (stones << 2 * shift)
        r |= p & (stones << 3 * shift)
        r |= p & (stones >> shift)
        p = (stones >> shift) & (stones >> 2 * shift)
        r |= p & (stones << shift)
        r |= p & (stones >> 3 * shift)
    return r & (_FULL ^ mask)


def _has_four(stones: int) -> bool:
    for shift in (1, _H1, ROWS, ROWS + 2):
        m = stones & (stones >> shift)
        if m & (m >> 2 * shift):
            return True
    return False


def _evaluate(current: int, mask: int) -> int:
    """Heuristic score for the player to move: open threats, weighted up on the rows where
    they tend to decide the endgame (odd rows for the first player, even rows for the
    second), plus discs in the centre column."""
    opponent = current ^ mask
    mine, theirs = _open_fours(current, mask), _open_fours(opponent, mask)
    first_to_move = mask.bit_count() % 2 == 0
    my_rows, their_rows = (_ROWS_135, _ROWS_246) if first_to_move else (_ROWS_246, _ROWS_135)
    return (
        3 * (mine.bit_count() - theirs.bit_count())
        + 4 * ((mine & my_rows).bit_count() - (theirs & their_rows).bit_count())
        + (current & _CENTRE).bit_count()
        - (opponent & _CENTRE).bit_count()
    )


def _negamax(current: int, mask: int, depth: int, alpha: int, beta: int) -> int:
    """Score for the player to move (``current`` = its stones): > 0 good, ±(_WIN + depth) a forced result."""
    possible = (mask + _BOTTOM) & _FULL
    if not possible:
        return 0
    if _open_fours(current, mask) & possible:
        return _WIN + depth
    if depth == 0:
        return _evaluate(current, mask)
    best = -_WIN - depth - 1
    for column in _ORDER:
        move = possible & _column_mask(column)
        if move:
            score = -_negamax(current ^ mask, mask | move, depth - 1, -beta, -alpha)
            if score > best:
                best = score
            alpha = max(alpha, score)
            if alpha >= beta:
                break
    return best


def best_column(columns: list[str], mark: str, depth: int = 4) -> int:
    """The negamax choice (0-based column) for ``mark`` given columns as bottom-up strings of marks.

    Example:
        >>> best_column(["XXX", "OO", "", "", "", "", ""], "X", depth=2)
        0
        >>> best_column(["XXX", "OO", "", "", "", "", ""], "O", depth=2)
        0
    """
    current = mask = 0
    for c, column in enumerate(columns):
        for r, cell in enumerate(column):
            bit = 1 << (c * _H1 + r)
            mask |= bit
            if cell == mark:
                current |= bit
    possible = (mask + _BOTTOM) & _FULL
    best, choice = -2 * _WIN, -1
    alpha = -2 * _WIN
    for column in _ORDER:
        move = possible & _column_mask(column)
        if not move:
            continue
        if _has_four(current | move):
            return column
        score = -_negamax(current ^ mask, mask | move, depth - 1, -2 * _WIN, -alpha)
        if score > best:
            best, choice = score, column
            alpha = max(alpha, score)
    if choice < 0:
        raise ValueError("the board is full: no column to play")
    return choice


@tool
def move(column: int) -> None:
    """Drop your disc into a column.

    Args:
        column: the column number, 1 (left) to 7 (right).
    """


class ConnectFourEnv(TextGameEnv):
    """Connect Four for two text players; ``player_0`` (X) moves first.

    Args:
        **kwargs: see :class:`~llmgym.envs.multiagent.base.TextGameEnv`.

    ``reset(options={"moves": [4, 4, 3]})`` starts from a position reached by
    those (1-based) column moves.
    """

    metadata = {**TextGameEnv.metadata, "name": "connect_four_v0"}
    game_tools = (move,)
    system_prompt = (
        "You are playing Connect Four on a board of 7 columns (1-7, left to right) and 6 rows. "
        "Discs drop to the lowest empty cell of a column. Connect four of your discs in a row, column or diagonal. "
        'Each turn, name exactly one column that is not full, e.g. "4", '
        'or call <tool_call>{"name": "move", "arguments": {"column": 4}}</tool_call>.'
    )

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.columns: list[str] = [""] * COLUMNS

    def new_game(self, options: dict[str, Any] | None) -> str:
        self.columns = [""] * COLUMNS
        moves = (options or {}).get("moves", [])
        if not isinstance(moves, (list, tuple)):
            raise ValueError(f"options['moves'] must be a list of column numbers 1-7, got {moves!r}")
        agent = "player_0"
        for number in moves:
            if not isinstance(number, int) or not 1 <= number <= COLUMNS or len(self.columns[number - 1]) >= ROWS:
                raise ValueError(f"options['moves']: {number!r} is not a playable column")
            self.columns[number - 1] += _MARKS[agent]
            if self.winner_mark() is not None:
                raise ValueError("options['moves'] must not end the game")
            agent = self._other(agent)
        if not self.open_columns():
            raise ValueError("options['moves'] must not end the game: they fill the board")
        return agent

    def rules(self, agent: str) -> str:
        return f"{self.system_prompt}\nYou are {agent} and play {_MARKS[agent]}. X moves first."

    def state_text(self, agent: str) -> str:
        rows = []
        for r in reversed(range(ROWS)):
            rows.append(" ".join(col[r] if r < len(col) else "." for col in self.columns))
        return "Board:\n" + "\n".join(rows) + "\n" + " ".join(str(c + 1) for c in range(COLUMNS))

    def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> int:
        return self._check(arguments["column"])

    def read_text(self, agent: str, text: str) -> int:
        text = text[:4096]
        named = _distinct(_NAMED.findall(text))
        if len(named) == 1:
            return self._check(named[0])
        lines = [line for line in text.strip().splitlines() if line.strip()]
        numbers = _distinct(_NUMBER.findall(lines[-1])) if lines else []
        if len(numbers) == 1:
            return self._check(numbers[0])
        if not named and not numbers:
            raise ToolError("no column found; name one column number from 1 to 7")
        raise ToolError(f"several columns named ({', '.join(map(str, named or numbers))}); name exactly one")

    def _check(self, number: int) -> int:
        if not 1 <= number <= COLUMNS:
            raise ToolError(f"there is no column {number}; columns are 1 to {COLUMNS}")
        if len(self.columns[number - 1]) >= ROWS:
            raise ToolError(f"column {number} is full; open columns: {', '.join(map(str, self.open_columns()))}")
        return number - 1

    def apply(self, agent: str, move: int) -> str:
        self.columns[move] += _MARKS[agent]
        return f"{agent} ({_MARKS[agent]}) dropped a disc in column {move + 1}."

    def next_agent(self, agent: str) -> str | None:
        if self.winner_mark() is not None:
            self.winner = agent
            return None
        if not self.open_columns():
            return None
        return self._other(agent)

    def open_columns(self) -> list[int]:
        """1-based numbers of the columns that are not full."""
        return [c + 1 for c, col in enumerate(self.columns) if len(col) < ROWS]

    def winner_mark(self) -> str | None:
        """``"X"`` or ``"O"`` when that mark has connected four."""
        for mark in "XO":
            stones = 0
            for c, column in enumerate(self.columns):
                for r, cell in enumerate(column):
                    if cell == mark:
                        stones |= 1 << (c * _H1 + r)
            if _has_four(stones):
                return mark
        return None


def _distinct(numbers: list[str]) -> list[int]:
    seen: list[int] = []
    for text in numbers:
        value = int(text[:6])
        if value not in seen:
            seen.append(value)
    return seen


class NegamaxPlayer:
    """A strong-ish Connect Four player: alpha-beta negamax to a fixed depth.

    Args:
        depth: plies searched (6: about 10 ms a move in CPython; 2: near-instant, still blocks and takes wins).
        tool_calls: answer with the tool-call protocol instead of plain text.
    """

    def __init__(self, depth: int = 6, tool_calls: bool = False):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.depth = depth
        self.tool_calls = tool_calls
        self.name = f"negamax-{depth}"

    def act(self, env: ConnectFourEnv, agent: str) -> str:
        column = best_column(env.unwrapped.columns, _MARKS[agent], self.depth) + 1
        if self.tool_calls:
            return f'<tool_call>{{"name": "move", "arguments": {{"column": {column}}}}}</tool_call>'
        return f"column {column}"


class TextNegamaxPlayer:
    """:class:`NegamaxPlayer` that reads the board from the observation text alone.

    For ``llmgym.wrappers.scripted.ScriptedPolicy`` (``act(observation) -> str``), e.g.
    ``llmgym eval llmgym/ConnectFour-v0 --policy scripted:llmgym.envs.multiagent.connect_four:TextNegamaxPlayer``.

    Args:
        depth: plies searched.
    """

    def __init__(self, depth: int = 6):
        self.depth = depth

    def act(self, observation: str) -> str:
        columns = read_columns(observation)
        if columns is None or all(len(c) >= ROWS for c in columns):
            return "I cannot see the board."
        stones = sum(len(c) for c in columns)
        return f"column {best_column(columns, 'X' if stones % 2 == 0 else 'O', self.depth) + 1}"


def read_columns(text: str) -> list[str] | None:
    r"""The last board in an observation as columns (bottom-up strings of marks); ``None`` when there is none.

    Example:
        >>> board = "Board:\n" + ". . . . . . .\n" * 5 + "X O . . . . .\n1 2 3 4 5 6 7"
        >>> read_columns(board)
        ['X', 'O', '', '', '', '', '']
    """
    block = text.rsplit("Board:", 1)
    if len(block) < 2:
        return None
    rows = re.findall(r"^([XO.](?: [XO.]){6})$", block[1], re.MULTILINE)[:ROWS]
    if len(rows) != ROWS:
        return None
    grid = [row.split() for row in rows]
    return ["".join(grid[r][c] for r in reversed(range(ROWS)) if grid[r][c] != ".") for c in range(COLUMNS)]


def env(**kwargs: Any) -> ConnectFourEnv:
    """A new :class:`ConnectFourEnv` (PettingZoo convention: ``connect_four_v0.env()``)."""
    return ConnectFourEnv(**kwargs)
