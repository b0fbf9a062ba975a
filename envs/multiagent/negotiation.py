"""A deal-or-no-deal negotiation as a PettingZoo AEC text game.

Holds :class:`NegotiationEnv`, :func:`env` (the PettingZoo-style factory),
:class:`HagglerPlayer` (a scripted negotiator) and :func:`draw_game`.

Two players split a pool of items (books, hats, balls; counts drawn per
seed). Each has private values per item, drawn per seed so that the whole
pool is worth 10 to each. Players alternate for a fixed number of turns;
each turn is either a proposal (how many of each item the proposer takes;
the other gets the rest) or accepting the other player's latest proposal.
Prose around the move is delivered to the other player as a message.

Moves: ``propose(books, hats, balls)`` / ``accept()`` as tool calls, or
plain text such as ``"I propose: 2 books, 1 hat, 0 balls"`` (a type left out
means 0) and ``"I accept"``. Prose is read as a person would: an acceptance
accepts even when it restates the split on the table ("I accept your offer of
1 book"), an acceptance that names a *different* split is an illegal attempt
(one move per turn), and counts after "I propose"/"how about" are the offer
(the full rules: "Negotiation in plain text" in ``docs/multiagent.md``).

Rewards: at a deal each player gets the value of its share over 10 (0..1);
no deal by the last turn gives both 0; -0.1 for each illegal attempt (accepting
with no proposal on the table, impossible counts, no move found); a third
illegal attempt in a row forfeits: -1 for the forfeiter, 0 (no deal) for the
other. How it could be gamed, and why that does not pay: declaring a deal in
prose is not a move (an ``accept`` always takes the *other* player's latest
proposal, never the claim); demanding everything gets no deal (0), and so
does an ultimatum on the last turn that leaves :class:`HagglerPlayer` less
than its ``floor`` (half the pool's worth to it by default); spamming
illegal moves costs 0.1 each and then forfeits at -1. Reasoning in
``<think>...</think>`` is neither read for the move nor sent to the other player.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np

from llmgym.envs.multiagent.base import TextGameEnv
from llmgym.tools import ToolError, tool

__all__ = ["NegotiationEnv", "env", "HagglerPlayer", "draw_game", "ITEMS", "TOTAL_VALUE"]

ITEMS: tuple[str, ...] = ("books", "hats", "balls")
TOTAL_VALUE = 10
_COUNT_FIRST = re.compile(r"(\d+)\s*(book|hat|ball)s?", re.IGNORECASE)
_NAME_FIRST = re.compile(r"(book|hat|ball)s?\s*[:=]\s*(\d+)", re.IGNORECASE)
# plain-text moves (the rules are in docs/multiagent.md, "Negotiation in plain text")
_CLAUSE = re.compile(r"[^.!?;\n]+[.!?;]*")
_ACCEPT_WORD = re.compile(r"\b(?:accept(?:ed|ing)?|agreed?)\b", re.IGNORECASE)
_DEAL = re.compile(
    r"^(?:(?:ok|okay|yes|sure|fine|great|alright|perfect|then)\W+)*"
    r"(?:(?:it'?s|that'?s|it is|that is|we have|we've got|you have|you've got|you got)\s+a\s+)?"
    r"deal\b(?!\s+(?:or|if|with|for|would|is|on)\b)",
    re.IGNORECASE,
)
# "Fine by me, deal." / "Sounds good - deal!": a closing "deal" after a comma or dash (a clause without counts)
_DEAL_LAST = re.compile(
    r"[,:\u2013\u2014-]\s*(?:(?:it'?s|that'?s|it is|that is|we have|we've got|you have|you've got|you got)\s+a\s+)?"
    r"deal\W*$",
    re.IGNORECASE,
)
_NEGATED = re.compile(
    r"\b(?:not|never|don'?t|do not|can'?t|cannot|won'?t|will not|couldn'?t|wouldn'?t|shouldn'?t|no longer)"
    r"(?:\s+\w+){0,2}\s*$",
    re.IGNORECASE,
)
_NOT_MINE = re.compile(
    r"(?:\b(?:if|unless|whether|when|once)\b.*"
    r"|\byou(?:'ll|'d|\s+(?:will|would|can|could|should|must|might|may|shall|to|do))?\s+"
    r"|\bplease\s+|\b(?:would|could|might|may)(?:\s+\w+)?\s+)$",
    re.IGNORECASE,
)
_DECLINE = re.compile(r"\b(?:reject(?:ed)?|refuse[ds]?|declined?|no deal|not a deal)\b", re.IGNORECASE)
_PROPOSAL = re.compile(
    r"\b(?:i|we)(?:'d| would)?\s+(?:propose|suggest|counter|offer)\b|\b(?:how|what) about\b|"
    r"\bcounter[- ]?(?:offer|proposal)\b|\b(?:my|new) (?:proposal|offer)\b|^\s*(?:proposal|offer)\s*:",
    re.IGNORECASE | re.MULTILINE,
)


def draw_game(rng: np.random.Generator) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """Item counts and each player's private values (the pool is worth :data:`TOTAL_VALUE` to both).

    Example:
        >>> counts, values = draw_game(np.random.default_rng(0))
        >>> all(sum(c * v for c, v in zip(counts, values[p])) == 10 for p in values)
        True
    """
    while True:
        counts = tuple(int(c) for c in rng.integers(1, 5, size=len(ITEMS)))
        options = [
            vals
            for vals in itertools.product(range(TOTAL_VALUE + 1), repeat=len(ITEMS))
            if sum(c * v for c, v in zip(counts, vals)) == TOTAL_VALUE and sum(v > 0 for v in vals) >= 2
        ]
        if len(options) >= 2:
            first, second = rng.choice(len(options), size=2, replace=False)
            return counts, {"player_0": options[int(first)], "player_1": options[int(second)]}


@tool
def propose(books: int, hats: int, balls: int) -> None:
    """Propose a split: how many of each item YOU take; the other player gets the rest.

    Args:
        books: books you take.
        hats: hats you take.
        balls: balls you take.
    """


@tool
def accept() -> None:
    """Accept the other player's latest proposal; the game ends with that deal."""


class NegotiationEnv(TextGameEnv):
    """Split items with private values by messages and offers; deal or no deal.

    Args:
        max_turns: turns in the game (both players together); the last proposal
            must be accepted by then or nobody gets anything.
        **kwargs: see :class:`~llmgym.envs.multiagent.base.TextGameEnv`.
    """

    metadata = {**TextGameEnv.metadata, "name": "negotiation_v0"}
    game_tools = (propose, accept)
    relay_prose = True
    system_prompt = (
        "You are negotiating how to split a pool of items with another player. Each of you values the items "
        "differently, and only you know your own values. Take turns: each turn either propose a split (how many of "
        "each item YOU take) with "
        '<tool_call>{"name": "propose", "arguments": {"books": 1, "hats": 2, "balls": 0}}</tool_call>, '
        "or accept the other player's latest proposal with "
        '<tool_call>{"name": "accept", "arguments": {}}</tool_call>. '
        "Anything else you write is sent to the other player as a message."
    )

    def __init__(self, max_turns: int = 8, **kwargs: Any):
        super().__init__(**kwargs)
        if max_turns < 2:
            raise ValueError(f"max_turns must be >= 2 (a proposal and an answer), got {max_turns}")
        self.max_turns = max_turns
        self.counts: tuple[int, ...] = ()
        self.values: dict[str, tuple[int, ...]] = {}
        self.proposal: tuple[str, tuple[int, ...]] | None = None  # (proposer, what the proposer takes)
        self.deal: dict[str, tuple[int, ...]] | None = None
        self.turn = 0

    def new_game(self, options: dict[str, Any] | None) -> str:
        self.counts, self.values = draw_game(self.np_random)
        self.proposal, self.deal, self.turn = None, None, 0
        return "player_0"

    def value(self, agent: str, share: tuple[int, ...]) -> int:
        """What ``share`` (counts per item) is worth to ``agent``."""
        return sum(n * v for n, v in zip(share, self.values[agent]))

    def rules(self, agent: str) -> str:
        pool = ", ".join(f"{n} {item}" for n, item in zip(self.counts, ITEMS))
        worth = ", ".join(f"{item[:-1]} = {v}" for item, v in zip(ITEMS, self.values[agent]))
        return (
            f"{self.system_prompt}\nYou are {agent}. The pool: {pool}. Your private values per item: {worth} "
            f"(the whole pool is worth {TOTAL_VALUE} to you). The game lasts {self.max_turns} turns in total; "
            f"{'you' if agent == 'player_0' else 'the other player'} move first. Without an accepted deal both get 0. "
            f"Your reward is the value of what you get, divided by {TOTAL_VALUE}."
        )

    def state_text(self, agent: str) -> str:
        lines = [f"Turn {min(self.turn + 1, self.max_turns)} of {self.max_turns}."]
        if self.deal is not None:
            mine = self.deal[agent]
            lines.append(f"Deal: you get {_describe(mine)} (worth {self.value(agent, mine)} to you).")
        elif self.proposal is None:
            lines.append("No proposal on the table yet.")
        else:
            proposer, takes = self.proposal
            rest = tuple(c - t for c, t in zip(self.counts, takes))
            mine = takes if proposer == agent else rest
            who = "your" if proposer == agent else f"{proposer}'s"
            lines.append(
                f"On the table ({who} proposal): you would get {_describe(mine)} "
                f"(worth {self.value(agent, mine)} to you)."
            )
        return "\n".join(lines)

    def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> Any:
        if name == "accept":
            return self._accept(agent)
        return self._propose(tuple(arguments[item] for item in ITEMS))

    def read_text(self, agent: str, text: str) -> Any:
        """The move in prose: an acceptance, a proposal, or an illegal attempt when it is neither or both.

        See "Negotiation in plain text" in docs/multiagent.md for the rules.

        Raises:
            ToolError: no move found; an acceptance with nothing to accept, or naming a split that is
                not the one on the table (two moves in one turn); impossible counts.
        """
        text = text[:4096]
        clauses = _CLAUSE.findall(text)
        declined = [_declines(c) for c in clauses]
        if not any(declined) and any(_accepts(c) for c in clauses):
            return self._accept_in_words(agent, text)
        offer = "\n".join(_offer_part(c) if no else c for c, no in zip(clauses, declined))
        takes, _ = _proposal(offer)
        if takes is not None:
            return self._propose(takes)
        raise ToolError(
            'no move found; propose a split such as "I propose: 1 book, 2 hats, 0 balls" or write "I accept"'
        )

    def _accept_in_words(self, agent: str, text: str) -> str:
        """An acceptance in prose, which must not also name a different split (that would be two moves)."""
        self._accept(agent)
        proposer, theirs = self.proposal
        mine = tuple(c - t for c, t in zip(self.counts, theirs))
        takes, marked = _proposal(text)
        if marked:  # "I accept; how about 1 book, ..." is both moves unless it restates the table's split
            different = takes not in (mine, theirs)
        else:  # "I accept your offer of 1 book": every count it names must be one side's count on the table
            different = any(n not in (mine[i], theirs[i]) for i, n in _mentions(text))
        if different:
            raise ToolError(
                f"one move per turn: you accepted but also named a split that is not the proposal on the table "
                f'(you would get {_describe(mine)}; {proposer} would take {_describe(theirs)}). Write "I accept" '
                f'alone to take it, or propose without accepting, e.g. "I propose: 1 book, 2 hats, 0 balls"'
            )
        return "accept"

    def _accept(self, agent: str) -> str:
        if self.proposal is None or self.proposal[0] == agent:
            raise ToolError("there is no proposal from the other player to accept; make a proposal instead")
        return "accept"

    def _propose(self, takes: tuple[int, ...]) -> tuple[int, ...]:
        for n, item, count in zip(takes, ITEMS, self.counts):
            if not 0 <= n <= count:
                raise ToolError(f"you cannot take {n} {item}: the pool has {count}; give counts from 0 to {count}")
        return takes

    def apply(self, agent: str, move: Any) -> str:
        self.turn += 1
        if move == "accept":
            proposer, takes = self.proposal
            rest = tuple(c - t for c, t in zip(self.counts, takes))
            self.deal = {proposer: takes, agent: rest}
            return f"{agent} accepted {proposer}'s proposal."
        self.proposal = (agent, move)
        rest = tuple(c - t for c, t in zip(self.counts, move))
        return f"{agent} proposes to take {_describe(move)}, leaving {_describe(rest)} to the other player."

    def next_agent(self, agent: str) -> str | None:
        if self.deal is not None or self.turn >= self.max_turns:
            return None
        return self._other(agent)

    def final_rewards(self) -> dict[str, float]:
        if self.deal is None:
            return dict.fromkeys(self.possible_agents, 0.0)
        return {a: self.value(a, self.deal[a]) / TOTAL_VALUE for a in self.possible_agents}

    def outcome(self) -> dict[str, str]:
        """A forfeit loses; otherwise whoever got the more valuable share (to itself) wins; no deal is a draw."""
        if self.forfeited is not None:
            return {a: "loss" if a == self.forfeited else "win" for a in self.possible_agents}
        return _compare(self.final_rewards())

    def forfeit_rewards(self, loser: str) -> dict[str, float]:
        return {a: -1.0 if a == loser else 0.0 for a in self.possible_agents}

    def result_text(self) -> str:
        if self.forfeited is not None:
            return (
                f"Game over: {self.forfeited} forfeited after {self.max_retries + 1} illegal attempts in a row; "
                "no deal."
            )
        if self.deal is None:
            return "Game over: no deal; both get 0."
        return (
            "Game over: deal. " + "; ".join(f"{a} gets {_describe(self.deal[a])}" for a in self.possible_agents) + "."
        )


def _accepts(clause: str) -> bool:
    """True when ``clause`` is the speaker accepting: "I accept", "Deal!", "agreed", not a question,
    not negated ("I can't accept"), not conditional or someone else's ("if you accept", "would you accept")."""
    words = clause.strip()
    if words.endswith("?"):
        return False
    if _DEAL.match(words.lstrip("\"'*-([ ")):
        return True
    last = _DEAL_LAST.search(words)
    if last and not _mentions(words):  # "2 books for me, deal." is an offer, read as a proposal
        before = words[: last.start()]
        if not _NEGATED.search(before) and not _NOT_MINE.search(before + " "):
            return True
    for found in _ACCEPT_WORD.finditer(words):
        before = words[: found.start()]
        if not _NEGATED.search(before) and not _NOT_MINE.search(before):
            return True
    return False


def _declines(clause: str) -> bool:
    """True when ``clause`` turns an offer down: "no deal", "I reject", "I can't accept ..."."""
    if clause.strip().endswith("?"):
        return False
    return bool(_DECLINE.search(clause)) or any(
        _NEGATED.search(clause[: found.start()]) for found in _ACCEPT_WORD.finditer(clause)
    )


def _offer_part(declining: str) -> str:
    """What a declining clause offers: nothing ("I can't accept 1 book"), or what follows a proposal
    marker in it ("I won't accept that, I propose 2 books")."""
    marker = _PROPOSAL.search(declining)
    return declining[marker.start() :] if marker else ""


def _mentions(text: str) -> list[tuple[int, int]]:
    """Every ``(item index, count)`` that ``text`` names ("2 hats", "books: 1"), in the order written."""
    found = [(m.start(), m[2], m[1]) for m in _COUNT_FIRST.finditer(text)]
    found += [(m.start(), m[1], m[2]) for m in _NAME_FIRST.finditer(text)]
    return [(ITEMS.index(item.lower() + "s"), int(number[:4])) for _, item, number in sorted(found)]


def _proposal(text: str) -> tuple[tuple[int, ...] | None, bool]:
    """The split ``text`` proposes (what the speaker takes; items not named are 0) and whether it was marked.

    Counts are read from the first proposal marker ("I propose", "how about", "counter-offer",
    "my offer", "Proposal:") that has counts after it, else from the whole text; the first count
    named for an item wins ("I propose: 1 book, 2 hats, leaving you 3 books" takes 1 book).
    """
    for marker in _PROPOSAL.finditer(text):
        mentioned = _mentions(text[marker.start() :])
        if mentioned:
            return _first_counts(mentioned), True
    mentioned = _mentions(text)
    return (_first_counts(mentioned) if mentioned else None), False


def _first_counts(mentioned: list[tuple[int, int]]) -> tuple[int, ...]:
    takes: dict[int, int] = {}
    for i, n in mentioned:
        takes.setdefault(i, n)
    return tuple(takes.get(i, 0) for i in range(len(ITEMS)))


def _compare(scores: dict[str, float]) -> dict[str, str]:
    best = max(scores.values())
    if all(v == best for v in scores.values()):
        return dict.fromkeys(scores, "draw")
    return {a: "win" if v == best else "loss" for a, v in scores.items()}


def _describe(share: tuple[int, ...]) -> str:
    return ", ".join(f"{n} {item if n != 1 else item[:-1]}" for n, item in zip(share, ITEMS))


class HagglerPlayer:
    """A scripted negotiator that knows only its own values.

    It asks for a lot early and concedes one point of value per own turn down
    to ``floor``, its reservation value: it accepts an offer worth at least its
    current demand and never settles for less than ``floor``, not even on the
    game's last turn (no deal then pays both 0). So demanding everything and
    leaving it a crumb on the last turn, an ultimatum, gets no deal, and
    holding out pays no more than haggling fairly. Among splits it would settle
    for, it leaves the other player what that player has asked for most.

    Args:
        start: the value it demands first (out of 10).
        floor: the least it ever settles for (out of 10; 5 is half the pool's worth to it).
    """

    def __init__(self, start: int = 8, floor: int = 5):
        self.start, self.floor = start, floor
        self.name = f"haggler-{start}-{floor}"

    def act(self, env: NegotiationEnv, agent: str) -> str:
        game = env.unwrapped
        my_turn = game.turn // 2
        demand = max(self.floor, self.start - my_turn)
        if game.proposal is not None and game.proposal[0] != agent:
            offered = tuple(c - t for c, t in zip(game.counts, game.proposal[1]))
            if game.value(agent, offered) >= demand:
                return '<tool_call>{"name": "accept", "arguments": {}}</tool_call>'
        wanted = np.ones(len(ITEMS))  # how much the other player seems to want each item, from its proposals
        for who, event in game.history:
            if who != agent and event.startswith(f"{who} proposes"):
                wanted += [n / c for n, c in zip(_takes_in(event), game.counts)]
        best: tuple[float, int, tuple[int, ...]] | None = None
        for takes in itertools.product(*(range(c + 1) for c in game.counts)):
            mine = game.value(agent, takes)
            if mine < demand:
                continue
            theirs = sum(w * (c - t) for w, c, t in zip(wanted, game.counts, takes))
            key = (theirs, -mine, takes)
            if best is None or key[:2] > best[:2]:
                best = key
        takes = best[2] if best is not None else game.counts
        books, hats, balls = takes
        return (
            f"I can live with this split.\n"
            '<tool_call>{"name": "propose", "arguments": '
            f'{{"books": {books}, "hats": {hats}, "balls": {balls}}}}}</tool_call>'
        )


def _takes_in(event: str) -> tuple[int, ...]:
    """What the proposer takes, read back from a proposal event."""
    part = event.split(" take ", 1)[1].split(", leaving", 1)[0]
    found = {item.lower() + "s": int(n) for n, item in _COUNT_FIRST.findall(part)}
    return tuple(found.get(item, 0) for item in ITEMS)


def env(**kwargs: Any) -> NegotiationEnv:
    """A new :class:`NegotiationEnv` (PettingZoo convention: ``negotiation_v0.env()``)."""
    return NegotiationEnv(**kwargs)
