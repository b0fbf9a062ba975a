r"""One OpenSpiel game read and written as text: the rules, each player's view, the legal actions, replies.

Holds :class:`OpenSpielText` (a ``pyspiel.Game``: its rules, each player's view, the legal
actions named, a reply read back as one of them, the chat a decision is made in, chance drawn
from a seeded generator), :func:`load_game` (any OpenSpiel game name, checked to have text to
show), :data:`GAME_NOTES` (how to read each curated game's text) and the ``play`` tool. The
PettingZoo envs on top are :mod:`.openspiel_game` (turn-based) and :mod:`.openspiel_parallel`
(simultaneous moves).

A player reads what OpenSpiel lets it see and nothing else: in a game of perfect information
its observation string (the position), otherwise its information-state string (its private
cards and what it saw happen; perfect recall), after the game's rules and, for a curated game,
a note on how to read that text.

A reply is read as one legal action (:meth:`OpenSpielText.read_action`): the reply equal to an
action's name (case, spacing and end punctuation ignored), else the one action named in its last
line, else the one action named anywhere in it, a name counting only when no letter or digit
touches it (``a1`` is not in ``a10``).

Example:
    >>> text = OpenSpielText("kuhn_poker")
    >>> state = text.game.new_initial_state()
    >>> text.apply_chance(state, np.random.default_rng(0))
    >>> text.observation_text(state, 0).splitlines()[-3:]
    ['Pass', 'Bet', 'Your move (player 0): reply with exactly one of the legal actions.']
    >>> text.read_action(state, 0, "I will not pass.\nBet")
    1
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import numpy as np

try:
    import pyspiel
except ModuleNotFoundError as err:  # name= keeps the CLI's "which extra" lookup working
    raise ModuleNotFoundError(
        'OpenSpiel games need open-spiel: pip install "llmgym[openspiel]"', name="pyspiel"
    ) from err

from llmgym.messages import Message, system, user
from llmgym.tools import tool

__all__ = ["OpenSpielText", "load_game", "play", "GAME_NOTES"]

_PERFECT = pyspiel.GameType.Information.PERFECT_INFORMATION
_SIMULTANEOUS = pyspiel.GameType.Dynamics.SIMULTANEOUS
_FOLD = re.compile(r"\s+")

#: How to read a curated game's text (formatted with the game's parameters), and each player's mark or piece.
GAME_NOTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kuhn_poker": (
        "Three cards: Jack < Queen < King (OpenSpiel's 0, 1 and 2). Each player antes 1 chip and gets one private "
        "card. Pass or Bet 1 chip; after a bet the other player must Bet (call) or Pass (fold). At a showdown the "
        "higher card takes the pot. Your view shows your card, the moves so far, and OpenSpiel's information state "
        "(your card, then p = pass, b = bet).",
        (),
    ),
    "leduc_poker": (
        "Six cards, two of each rank: 0 and 1 are Jacks, 2 and 3 Queens, 4 and 5 Kings. Each player antes 1 chip and "
        "gets one private card; after a betting round a public card is dealt and a second round follows (raises of 2, "
        "then 4). At a showdown a pair with the public card wins, else the higher rank.",
        (),
    ),
    "liars_dice": (
        "Each player rolls {numdice} six-sided die in secret. A bid q-f claims that at least q of all the dice show "
        "face f; a 6 is wild and counts as any face. Each bid must come later in the list than the last one; instead "
        "of bidding you may call Liar: if the last bid holds, its bidder wins, else the caller wins. Your information "
        "state is your dice, then the bids so far.",
        (),
    ),
    "goofspiel": (
        "Each player holds bid cards 1 to {num_cards}. Each round a point card is turned up and both players bid one "
        "of their cards at once; the higher bid wins the point card (a tie: nobody), and bid cards are spent. More "
        "points at the end wins.",
        (),
    ),
    "tic_tac_toe": (
        "Three in a row on a 3x3 board wins. The board shows rows top to bottom; the action x(r,c) marks row r, "
        "column c, counting from 0.",
        ("x", "o"),
    ),
    "connect_four": (
        "Drop discs into a board of {columns} columns and {rows} rows; {x_in_row} in a row (across, down or "
        "diagonally) wins. The action x3 drops your disc into column 3 (columns count from 0, left to right).",
        ("x", "o"),
    ),
    "breakthrough": (
        "A piece moves one square forward, straight or diagonally, and captures only diagonally. Reaching the far "
        "row, or capturing every enemy piece, wins. The action a5a4 moves the piece on a5 to a4 (columns a, b, ... "
        "from the left; rows numbered from the bottom; a * marks a capture).",
        ("b (black: starts at the top, moves down)", "w (white: starts at the bottom, moves up)"),
    ),
    "nim": (
        "Piles of objects: on your turn take one or more objects from one pile. The view shows the player to move in "
        "parentheses, then the pile sizes. is_misere is {is_misere}: if true, whoever takes the last object loses; "
        "if false, whoever takes it wins.",
        (),
    ),
    "dots_and_boxes": (
        "Players take turns drawing one line between two neighbouring dots; completing a box scores it and you move "
        "again. More boxes wins. P1(h,r,c) draws the horizontal line at row r, column c, and P1(v,r,c) the vertical "
        "one, counting from 0 (P1 is player 0, P2 player 1).",
        (),
    ),
    "hex": (
        "Place a stone on an empty cell. x (player 0) wins by joining the top and bottom edges with a chain of "
        "stones, o (player 1) by joining the left and right edges. Cells are a column letter and a row number, "
        "a1 at the top left.",
        ("x", "o"),
    ),
    "first_sealed_auction": (
        "A first-price sealed-bid auction: each player privately learns its value for one item and bids once, "
        "without seeing the other bid. The highest bid wins the item and pays it (payoff: value - bid; ties are "
        "broken at random); the others get 0. Your information state shows your value.",
        (),
    ),
}


def kuhn_view(information_state: str, players: int = 2) -> str:
    """Kuhn poker's information state (``"2pb"``: the king, then pass, bet) in words, the state itself kept.

    A small model conditions on ``Your card: King`` far more easily than on a leading digit (SmolLM2-135M
    warmed up on the bare string played the same mix of Pass and Bet whatever its card).

    Example:
        >>> print(kuhn_view("2pb"))
        Your card: King
        Moves so far: player 0 Pass, player 1 Bet
        Information state: 2pb
    """
    card, moves = information_state[0], information_state[1:]
    names = {"0": "Jack", "1": "Queen", "2": "King", "3": "Ace"}
    said = [f"player {turn % players} {'Pass' if move == 'p' else 'Bet'}" for turn, move in enumerate(moves)]
    lines = [f"Your card: {names.get(card, card)}", f"Moves so far: {', '.join(said) or 'none'}"]
    return "\n".join([*lines, f"Information state: {information_state}"])


#: A curated game's information state in words: ``(information state, number of players) -> view``.
VIEWS = {"kuhn_poker": kuhn_view}


def load_game(name: str, params: dict[str, Any] | None = None) -> pyspiel.Game:
    """The OpenSpiel game ``name`` with ``params``, checked to have text to show.

    Raises:
        ValueError: an unknown name (with close names and the curated ones), parameters OpenSpiel
            refuses, or a game with neither information-state nor observation strings.

    Example:
        >>> load_game("nim", {"pile_sizes": "1;2"}).get_type().long_name
        'Nim'
    """
    known = pyspiel.registered_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3) or [n for n in known if name.casefold() in n][:3]
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown OpenSpiel game {name!r}.{hint} Curated: {', '.join(sorted(GAME_NOTES))}; "
            "every name: pyspiel.registered_names()"
        )
    try:
        game = pyspiel.load_game(name, dict(params or {}))
    except pyspiel.SpielError as err:
        raise ValueError(f"OpenSpiel cannot load {name!r} with params {params!r}: {err}") from None
    kind = game.get_type()
    if not (kind.provides_information_state_string or kind.provides_observation_string):
        raise ValueError(
            f"OpenSpiel's {name!r} gives neither information-state nor observation strings, so a player "
            "would have no text to read; choose a game that does (most do)"
        )
    return game


def _key(text: str) -> str:
    """``text`` as replies are compared: case-folded, runs of spaces as one, no end spaces or end punctuation."""
    return _FOLD.sub(" ", text.casefold()).strip(" .;:,!*")  # breakthrough marks a capture "a2b3*"


def _mentions(text: str, key: str) -> bool:
    """Whether compared ``text`` names ``key``, not as part of a longer word or number (``a1`` is not in ``a10``)."""
    return re.search(rf"(?<![0-9a-z]){re.escape(key)}(?![0-9a-z])", text) is not None


class OpenSpielText:
    """One OpenSpiel game as text: rules, views, legal actions, replies read as actions, chance.

    Args:
        game: an OpenSpiel game name (``pyspiel.registered_names()``).
        params: the game's parameters (``{"num_cards": 4}``).

    Raises:
        ValueError: see :func:`load_game`.

    Example:
        >>> text = OpenSpielText("tic_tac_toe")
        >>> state = text.game.new_initial_state()
        >>> text.action_names(state, 0)[:3], text.read_action(state, 0, "I take the centre: x(1,1)")
        (['x(0,0)', 'x(0,1)', 'x(0,2)'], 4)
    """

    def __init__(self, game: str, params: dict[str, Any] | None = None):
        self.name = game
        self.params = dict(params or {})
        self.game = load_game(game, self.params)
        kind = self.game.get_type()
        self.perfect_information = kind.information == _PERFECT
        self.simultaneous = kind.dynamics == _SIMULTANEOUS
        self.num_players = self.game.num_players()
        self.first_player = self._first_player()
        #: The rules every player shares (the chat's system prompt); :meth:`rules` adds the player's role.
        self.system_prompt = self._describe()

    def _first_player(self) -> int | None:
        """Who moves first once the opening chance events are drawn (``None``: all at once, or it depends on chance)."""
        state = self.game.new_initial_state()
        while state.is_chance_node():
            state.apply_action(state.chance_outcomes()[0][0])
        player = state.current_player()
        return player if player >= 0 else None

    def _describe(self) -> str:
        kind = self.game.get_type()
        settings = ", ".join(f"{k}={v}" for k, v in sorted(self.game.get_parameters().items()))
        lines = [f"You are playing {kind.long_name} (OpenSpiel game {self.name}: {settings})."]
        if self.name in GAME_NOTES:
            lines.append(GAME_NOTES[self.name][0].format_map(self.game.get_parameters()))
        if not self.perfect_information:
            lines.append("You see only your own information; what the other players hold is hidden from you.")
        lines.append(
            "Each turn you read your view of the game and the legal actions, one per line. Reply with exactly one "
            'of the legal actions, written as listed, or call <tool_call>{"name": "play", "arguments": {"action": '
            '"..."}}</tool_call>.'
        )
        lines.append(
            f"At the end every player gets OpenSpiel's return for the game (from {self.game.min_utility():g} "
            f"to {self.game.max_utility():g})."
        )
        return "\n".join(lines)

    def role(self, player: int) -> str:
        """``player``'s role: ``"You are player 0 (first to act) of 2."`` and its mark in a curated game."""
        marks = GAME_NOTES.get(self.name, ("", ()))[1]
        order = " (first to act)" if player == self.first_player else ""
        mark = f" You play {marks[player]}." if player < len(marks) else ""
        together = " All players move at the same time." if self.simultaneous else ""
        return f"You are player {player}{order} of {self.num_players}.{mark}{together}"

    def rules(self, player: int) -> str:
        """What the game is, how to answer, and ``player``'s role."""
        return f"{self.system_prompt}\n{self.role(player)}"

    def view(self, state: pyspiel.State, player: int) -> str:
        """What ``player`` may see of ``state``: the observation string in a game of perfect information, else
        the information-state string (each falls back on the other when the game lacks it)."""
        kind = self.game.get_type()
        if kind.provides_observation_string and (
            self.perfect_information or not kind.provides_information_state_string
        ):
            text = state.observation_string(player)
        else:
            text = state.information_state_string(player)
            if self.name in VIEWS:
                return VIEWS[self.name](text, self.num_players)
        return text.rstrip() or "(nothing has happened yet)"

    def acting(self, state: pyspiel.State) -> list[int]:
        """The players who must act now (all of them at a simultaneous node; none at a chance or terminal node)."""
        if state.is_terminal() or state.is_chance_node():
            return []
        if state.is_simultaneous_node():
            return [p for p in range(self.num_players) if state.legal_actions(p)]
        return [state.current_player()]

    def observation_text(self, state: pyspiel.State, player: int) -> str:
        """``player``'s view of ``state``; when it is to act, the legal actions one per line and the request to move."""
        lines = [f"Your view (player {player}):", self.view(state, player)]
        if player in self.acting(state):
            lines += ["Legal actions:", *self.action_names(state, player)]
            lines.append(f"Your move (player {player}): reply with exactly one of the legal actions.")
        return "\n".join(lines)

    def action_names(self, state: pyspiel.State, player: int) -> list[str]:
        """The legal actions' names in ``state.legal_actions(player)`` order.

        OpenSpiel's ``action_to_string``; an empty one becomes ``action N``, and names that read the
        same (case and spacing ignored) get `` (#N)`` so that every reply names at most one action.
        """
        actions = state.legal_actions(player)
        names = [state.action_to_string(player, a).strip() or f"action {a}" for a in actions]
        keys = [_key(n) for n in names]
        return [f"{n} (#{a})" if keys.count(k) > 1 else n for n, k, a in zip(names, keys, actions)]

    def read_action(self, state: pyspiel.State, player: int, reply: str) -> int:
        """The legal action ``reply`` stands for.

        The reply equal to an action's name (case, spacing and end punctuation ignored); else the one
        action named in its last non-empty line; else the one named anywhere in it.

        Raises:
            ValueError: no action or several are named; the message lists the legal actions.
        """
        names, actions = self.action_names(state, player), state.legal_actions(player)
        keys = [_key(n) for n in names]
        whole = _key(reply)
        if whole in keys:
            return actions[keys.index(whole)]
        lines = [line for line in reply.splitlines() if line.strip()]
        found: list[int] = []
        for part in ([_key(lines[-1])] if len(lines) > 1 else []) + [whole]:
            found = [i for i, key in enumerate(keys) if _mentions(part, key)]
            if len(found) == 1:
                return actions[found[0]]
        problem = f"several legal actions named ({', '.join(names[i] for i in found)})" if found else "no legal action"
        raise ValueError(f"{problem}; reply with exactly one of the legal actions: {', '.join(names)}")

    def prompt(self, state: pyspiel.State, player: int) -> list[Message]:
        """The chat a fresh conversation for ``player``'s decision in ``state`` holds.

        The system prompt, then the role and the observation: for a game's first decision, exactly
        the chat that :class:`OpenSpielEnv` and ``play_match`` give the player.
        """
        return [system(self.system_prompt), user(f"{self.role(player)}\n\n{self.observation_text(state, player)}")]

    def apply_chance(self, state: pyspiel.State, rng: np.random.Generator) -> None:
        """Draw chance outcomes with ``rng`` (by their probabilities) until ``state`` is no chance node."""
        while state.is_chance_node():
            actions, probabilities = zip(*state.chance_outcomes())
            weights = np.asarray(probabilities, dtype=float)
            state.apply_action(int(actions[rng.choice(len(actions), p=weights / weights.sum())]))

    def forfeit_returns(self, losers: list[int]) -> list[float]:
        """Returns when ``losers`` forfeit: the game's lowest utility for them, its highest for the others.

        A forfeit never pays better than playing on and losing, so illegal replies are no way out of a bad hand.
        """
        low, high = self.game.min_utility(), self.game.max_utility()
        return [low if p in losers else high for p in range(self.num_players)]


@tool
def play(action: str) -> None:
    """Play one of the legal actions.

    Args:
        action: the action, written as in the list of legal actions.
    """
