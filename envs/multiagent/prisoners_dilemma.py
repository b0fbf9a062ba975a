"""The iterated prisoner's dilemma with a message channel, as a PettingZoo Parallel env.

Holds :class:`PrisonersDilemmaEnv`, :func:`parallel_env` (the PettingZoo-style
factory), the scripted players :class:`TitForTat`, :class:`AlwaysDefect`,
:class:`AlwaysCooperate` and :data:`PAYOFFS`.

Each round both players act at once: a move, ``C`` (cooperate) or ``D``
(defect), and an optional message the other player reads with the round's
result. Moves: ``<tool_call>{"name": "play", "arguments": {"move": "C",
"message": "..."}}</tool_call>``, or plain text whose last line names the
move (``"C"``, ``"cooperate"``, ``"I defect"``); earlier lines are the message.
A negated move is not that move: ``"I won't defect, I cooperate"`` plays C,
and a last line whose only move words are negated (``"I will not defect"``)
is an illegal action whose observation asks for a line with just C or D.
``<think>...</think>`` reasoning is neither read for the move nor shown to
the other player (:func:`~llmgym.envs.multiagent.base.without_thinking`).

Rewards per round: the payoff (both C: 3 each; both D: 1 each; D against C:
5 for the defector, 0 for the other). An illegal action costs 1 and the
player must act again while the other player's move stays locked in
(``info["needs_action"]`` says who must act; the others' actions are
ignored); a third illegal action in a row forfeits: -5 and the game ends.
The number of rounds is fixed (and told), or drawn per seed from a range
(and hidden, so there is no last round to defect in). Observations longer
than ``max_observation_chars`` keep their newest part after a note
(:func:`~llmgym.envs.multiagent.base.clip_observation`).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from llmgym.envs.multiagent.base import PLAYERS, checked_penalty, clip_observation, observation_space, without_thinking
from llmgym.parsing import parse_action
from llmgym.spaces import Text
from llmgym.tools import ToolError, tool

__all__ = ["PrisonersDilemmaEnv", "parallel_env", "TitForTat", "AlwaysDefect", "AlwaysCooperate", "PAYOFFS"]

#: (my move, their move) -> my payoff.
PAYOFFS: dict[tuple[str, str], float] = {("C", "C"): 3.0, ("C", "D"): 0.0, ("D", "C"): 5.0, ("D", "D"): 1.0}
_WORDS = {"c": "C", "cooperate": "C", "cooperation": "C", "d": "D", "defect": "D", "defection": "D"}
_TOKEN = re.compile(r"[A-Za-z]+(?:['\u2019][A-Za-z]+)*")  # "I'd" is one word, not "I" and a "d" (defect)
# a negation earlier in the same clause ("I will not defect", "I don't think I'll defect", "never D")
_NEGATION = re.compile(
    r"\b(?:not|never|no|nor|neither|cannot|"
    r"(?:do|does|did|wo|ca|could|would|should|must|might|need|is|are|was|were|have|has|had|ai)n['\u2019]?t)\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[,;:.!?()\u2013\u2014]|\s-\s|\bbut\b|\binstead\b", re.IGNORECASE)


@tool
def play(move: Literal["C", "D"], message: str = "") -> None:
    """Play this round's move.

    Args:
        move: C to cooperate, D to defect.
        message: what to tell the other player (they read it with this round's result).
    """


class PrisonersDilemmaEnv(ParallelEnv):
    """The iterated prisoner's dilemma for two text players, moving at once each round.

    Args:
        num_rounds: rounds in a game, or ``(low, high)`` to draw it per seed (then hidden from the players).
        max_retries: illegal actions a player may retry in a row; one more forfeits.
        illegal_penalty: reward charged for each illegal action (>= 0).
        forfeit_penalty: reward charged to a player that forfeits (>= 0).
        max_action_chars: longer actions are illegal (the text is not read).
        max_observation_chars: the observation space's ``max_length``.
        render_mode: ``None`` or ``"ansi"``.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi"],
        "name": "prisoners_dilemma_v0",
        "is_parallelizable": True,
    }
    tools = {play.name: play}
    system_prompt = (
        "You are playing an iterated prisoner's dilemma against another player. Each round you both choose at once: "
        "C (cooperate) or D (defect). Payoffs per round: both C: 3 each; both D: 1 each; if one defects while the "
        "other cooperates, the defector gets 5 and the cooperator 0. You may send a message with your move. Play with "
        '<tool_call>{"name": "play", "arguments": {"move": "C", "message": "..."}}</tool_call>, '
        "or write your message and end with a line that says just C or D."
    )

    def __init__(
        self,
        num_rounds: int | tuple[int, int] = 10,
        max_retries: int = 2,
        illegal_penalty: float = 1.0,
        forfeit_penalty: float = 5.0,
        max_action_chars: int = 8192,
        max_observation_chars: int = 16384,
        render_mode: str | None = None,
    ):
        if isinstance(num_rounds, int):
            low = high = num_rounds
        elif (
            isinstance(num_rounds, (tuple, list))
            and len(num_rounds) == 2
            and all(isinstance(n, int) for n in num_rounds)
        ):
            low, high = num_rounds
        else:
            raise ValueError(f"num_rounds must be an int or (low, high), got {num_rounds!r}")
        if not 1 <= low <= high:
            raise ValueError(f"num_rounds must be >= 1 with low <= high, got {num_rounds!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.round_range = (low, high)
        self.max_retries = max_retries
        self.illegal_penalty = checked_penalty("illegal_penalty", illegal_penalty)
        self.forfeit_penalty = checked_penalty("forfeit_penalty", forfeit_penalty)
        self.max_action_chars = max_action_chars
        self.render_mode = render_mode
        self.possible_agents = list(PLAYERS)
        self.observation_spaces = {a: observation_space(max_observation_chars) for a in self.possible_agents}
        self.action_spaces = {a: Text(max_length=max_action_chars) for a in self.possible_agents}
        self.tool_schemas = [play.schema]
        self.np_random, _ = seeding.np_random(None)
        self.agents: list[str] = []
        self.history: list[dict[str, str]] = []  # each round: agent -> move
        self.messages: list[dict[str, str]] = []  # each round: agent -> message
        self.forfeited: str | None = None  # the (first) player that forfeited
        self.quitters: list[str] = []  # every player that forfeited (both, when they did at once)

    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Text:
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        low, high = self.round_range
        self.num_rounds = int(self.np_random.integers(low, high + 1)) if low < high else low
        self.agents = list(self.possible_agents)
        self.history, self.messages = [], []
        self.locked: dict[str, tuple[str, str]] = {}
        self.retries = dict.fromkeys(self.agents, 0)
        self.illegal_attempts = dict.fromkeys(self.agents, 0)
        self.forfeited = None
        self.quitters = []
        length = (
            f"The game lasts {self.num_rounds} rounds."
            if low == high
            else f"The game lasts between {low} and {high} rounds; you are not told when it ends."
        )
        observations = {
            a: self._observation(a, f"{self.system_prompt}\nYou are {a}. {length}\nRound 1: your move.")
            for a in self.agents
        }
        return observations, self._infos()

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]:
        if not self.agents:
            raise RuntimeError("the game is over: call reset() before step()")
        unknown = sorted(set(actions) - set(self.agents))
        if unknown:  # a typo'd agent name would otherwise be ignored while the real agent waits
            raise ValueError(f"actions for agents not in the game: {unknown}; the agents are {self.agents}")
        rewards = dict.fromkeys(self.agents, 0.0)
        notes: dict[str, list[str]] = {a: [] for a in self.agents}
        for agent in self.agents:
            if agent in self.locked:
                continue
            if agent not in actions:
                raise ValueError(
                    f"{agent} must act this round (info['needs_action'] is True); got actions for {sorted(actions)}"
                )
            try:
                self.locked[agent] = self._read(actions[agent])
                self.retries[agent] = 0
            except ToolError as err:
                self.retries[agent] += 1
                self.illegal_attempts[agent] += 1
                rewards[agent] -= self.illegal_penalty
                left = self.max_retries + 1 - self.retries[agent]
                notes[agent].append(
                    f"Illegal action: {err}\nAct again; "
                    f"{left} more illegal action{'s' if left != 1 else ''} and you forfeit the game."
                )
        self.quitters = [a for a in self.agents if self.retries[a] > self.max_retries]
        done = False
        if self.quitters:
            self.forfeited = self.quitters[0]
            for agent in self.quitters:
                rewards[agent] -= self.forfeit_penalty
            for agent in self.agents:
                notes[agent].append(
                    f"Game over: {' and '.join(self.quitters)} forfeited after "
                    f"{self.max_retries + 1} illegal actions in a row."
                )
            done = True
        elif len(self.locked) == len(self.agents):
            done = self._play_round(rewards, notes)
        else:
            for agent in self.locked:
                waiting_for = ", ".join(a for a in self.agents if a not in self.locked)
                notes[agent].append(
                    f"Your move for round {len(self.history) + 1} is locked in; waiting for {waiting_for}."
                )
        observations = {a: self._observation(a, "\n".join(notes[a])) for a in self.agents}
        infos = self._infos()
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _play_round(self, rewards: dict[str, float], notes: dict[str, list[str]]) -> bool:
        moves = {a: self.locked[a][0] for a in self.agents}
        self.history.append(moves)
        self.messages.append({a: self.locked[a][1] for a in self.agents})
        number = len(self.history)
        for agent in self.agents:
            other = next(a for a in self.agents if a != agent)
            payoff = PAYOFFS[(moves[agent], moves[other])]
            rewards[agent] += payoff
            their_payoff = PAYOFFS[(moves[other], moves[agent])]
            line = (
                f"Round {number}: you played {moves[agent]}, {other} played {moves[other]}. "
                f"You get {payoff:g}, {other} gets {their_payoff:g}."
            )
            if self.locked[other][1]:
                line += f"\n{other} says: {self.locked[other][1]}"
            notes[agent].append(line)
        self.locked = {}
        over = number >= self.num_rounds
        for agent in self.agents:
            totals = self.scores()
            notes[agent].append(
                f"Game over after {number} rounds. Totals: "
                + ", ".join(f"{a} {totals[a]:g}" for a in self.possible_agents)
                if over
                else f"Round {number + 1}: your move."
            )
        return over

    def scores(self) -> dict[str, float]:
        """Each player's total payoff so far (penalties not counted)."""
        totals = dict.fromkeys(self.possible_agents, 0.0)
        for moves in self.history:
            for agent in self.possible_agents:
                other = next(a for a in self.possible_agents if a != agent)
                totals[agent] += PAYOFFS[(moves[agent], moves[other])]
        return totals

    def outcome(self) -> dict[str, str]:
        """A forfeit loses; otherwise the higher total payoff wins (equal totals: a draw)."""
        if self.quitters:
            return {a: "loss" if a in self.quitters else "win" for a in self.possible_agents}
        scores = self.scores()
        best = max(scores.values())
        if all(v == best for v in scores.values()):
            return dict.fromkeys(scores, "draw")
        return {a: "win" if v == best else "loss" for a, v in scores.items()}

    def _read(self, action: Any) -> tuple[str, str]:
        """``(move, message)`` of an action (its reasoning left out); raises :class:`ToolError` when it is illegal."""
        if not isinstance(action, (str, dict)):
            raise TypeError(f"an action must be str or an assistant message dict, got {type(action).__name__}")
        content = action if isinstance(action, str) else action.get("content")
        if isinstance(content, str) and len(content) > self.max_action_chars:
            raise ToolError(f"your message has {len(content)} characters; the limit is {self.max_action_chars}")
        parsed = parse_action(without_thinking(action))
        if parsed.errors:
            raise ToolError("; ".join(parsed.errors))
        if len(parsed.tool_calls) > 1:
            raise ToolError(f"one move per round: you made {len(parsed.tool_calls)} tool calls")
        if parsed.tool_calls:
            call = parsed.tool_calls[0]
            if call.name != play.name:
                raise ToolError(f"unknown tool {call.name[:64]!r}; use play")
            arguments = play.validate(call.arguments)
            parts = (parsed.content, without_thinking(arguments["message"]))
            message = " ".join(part for part in parts if part.strip())
            return arguments["move"], message.strip()[:500]
        lines = [line for line in parsed.content.splitlines() if line.strip()]
        return _move_in(lines[-1][:200] if lines else ""), "\n".join(lines[:-1]).strip()[:500]

    def _observation(self, agent: str, text: str) -> dict[str, str]:
        return {"text": clip_observation(text, self.observation_spaces[agent]["text"].max_length)}

    def _infos(self) -> dict[str, Any]:
        return {a: {"needs_action": a not in self.locked, "tools": self.tool_schemas} for a in self.agents}

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        rows = [" ".join(f"{a}={m[a]}" for a in self.possible_agents) for m in self.history]
        return "\n".join(f"round {i + 1}: {row}" for i, row in enumerate(rows)) + "\n"

    def close(self) -> None:
        """Nothing to release."""


def _move_in(line: str) -> str:
    """The move a plain-text line names: its one move word that no earlier word of its clause negates.

    Raises:
        ToolError: both moves named, only negated moves ("I will not defect"), or none.

    Example:
        >>> _move_in("I defect"), _move_in("I won't defect, I cooperate"), _move_in("D, not C")
        ('D', 'C', 'D')
    """
    named: set[str] = set()
    negated: list[str] = []
    for word in _TOKEN.finditer(line):
        move = _WORDS.get(word[0].lower())
        if move is None:
            continue
        clause = _CLAUSE_END.split(line[: word.start()])[-1]
        if _NEGATION.search(clause):
            negated.append(word[0])
        else:
            named.add(move)
    if len(named) == 1:
        return named.pop()
    if named:
        problem = "both C and D named"
    elif negated:
        problem = f"{negated[0]!r} is negated, and a negated move is neither C nor D"
    else:
        problem = "no move found"
    raise ToolError(f"{problem}; end with a line that says just C or D")


class TitForTat:
    """Cooperates first, then copies the other player's last move."""

    name = "tit-for-tat"

    def act(self, env: PrisonersDilemmaEnv, agent: str) -> str:
        game = env.unwrapped
        if not game.history:
            return "Let's cooperate.\nC"
        other = next(a for a in game.possible_agents if a != agent)
        return game.history[-1][other]


class AlwaysDefect:
    """Defects every round."""

    name = "always-defect"

    def act(self, env: PrisonersDilemmaEnv, agent: str) -> str:
        return "I will cooperate, trust me.\nD"


class AlwaysCooperate:
    """Cooperates every round."""

    name = "always-cooperate"

    def act(self, env: PrisonersDilemmaEnv, agent: str) -> str:
        return '<tool_call>{"name": "play", "arguments": {"move": "C"}}</tool_call>'


def parallel_env(**kwargs: Any) -> PrisonersDilemmaEnv:
    """A new :class:`PrisonersDilemmaEnv` (PettingZoo convention: ``prisoners_dilemma_v0.parallel_env()``)."""
    return PrisonersDilemmaEnv(**kwargs)
