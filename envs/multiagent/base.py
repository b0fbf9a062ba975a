"""The shared machinery of llmgym's turn-based text games (PettingZoo AEC).

Holds :class:`TextAECEnv`, a ``pettingzoo.AECEnv`` whose observations are
text (``{"text": str}``) and whose actions are assistant text or an OpenAI
assistant-message ``dict`` (the TextArena adapter builds on it too);
:class:`TextGameEnv`, the two-player games on top of it;
:class:`ScriptedPlayer`, the interface of the built-in opponents;
:func:`observation_space`, :func:`clip_observation` (every observation fits
its space), :func:`without_thinking` (a player's ``<think>`` reasoning is
never read as a move nor shown to the other player), :func:`checked_penalty`
and :func:`play_human`.

A game subclass supplies the rules (:meth:`TextGameEnv.new_game`,
:meth:`TextGameEnv.read_call`, :meth:`TextGameEnv.read_text`,
:meth:`TextGameEnv.apply`) and the text the players read; the base class
does the rest: parsing tool calls with :func:`llmgym.parse_action`, illegal
moves (a penalty, a retry observation for the same player, a forfeit after
``max_retries`` retries), the turn order, PettingZoo's reward bookkeeping and
the end of the game.

Why observations are ``{"text": str}`` and not a bare ``str``: PettingZoo's
``api_test`` compares ``observation_space.dtype`` with ``observation.dtype``
(a Python ``str`` has none) unless the observation is a dict, in which case
only an ``"observation"`` key is checked. A ``Dict`` space with a ``"text"``
key is plain Gymnasium, contains exactly what the agent reads, and passes.
"""

from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from typing import Any, ClassVar, Protocol

from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv

from llmgym.parsing import parse_action
from llmgym.parsing import without_thinking as parsing_without_thinking
from llmgym.spaces import Text
from llmgym.tools import Tool, ToolError

__all__ = [
    "TextAECEnv",
    "TextGameEnv",
    "ScriptedPlayer",
    "observation_space",
    "clip_observation",
    "without_thinking",
    "checked_penalty",
    "play_human",
    "PLAYERS",
]

#: Agent names of the two-player games.
PLAYERS: tuple[str, str] = ("player_0", "player_1")
_THINK_CLOSE = "</think>"


def observation_space(max_chars: int) -> spaces.Dict:
    """The observation space of every llmgym multi-agent env: ``{"text": Text}``.

    Example:
        >>> space = observation_space(100)
        >>> space.contains({"text": "Your move. 🙂"}), space.contains("Your move.")
        (True, False)
    """
    return spaces.Dict({"text": Text(max_length=max_chars)})


def clip_observation(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, keeping its newest (last) part after a note of what was cut.

    The end is what a player needs: the position and the request to move (or what to write after an
    illegal action); the note says the observation was cut so that the player does not read a fragment as whole.

    Example:
        >>> clip_observation("short", 100)
        'short'
        >>> clipped = clip_observation("x" * 500 + "Your move.", 60)
        >>> clipped
        '[observation truncated: 494 characters cut]\\nxxxxxxYour move.'
        >>> len(clipped)
        60
    """
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    while True:  # the note takes room too: cut until it fits (at most a few rounds, as the count gains digits)
        note = f"[observation truncated: {cut} characters cut]\n"
        if len(note) >= limit:  # a tiny space: the newest text alone
            return text[len(text) - limit :]
        if len(text) - cut + len(note) <= limit:
            return note + text[cut:]
        cut = len(text) - limit + len(note)


def without_thinking(action: str | dict[str, Any]) -> str | dict[str, Any]:
    """An action without its reasoning, which is private: neither read for a move nor relayed to another player.

    Removed from text (an action string, or a message dict's ``content``): every closed
    ``<think>...</think>`` block, everything before a ``</think>`` whose ``<think>`` was in the prompt
    (templates such as DeepSeek-R1's open the block there), and an unclosed ``<think>`` to the end (the
    reasoning was cut off before an answer). A message dict also loses its ``reasoning_content``.

    Example:
        >>> without_thinking("<think>my values: book=2</think>I propose: 2 books")
        'I propose: 2 books'
        >>> without_thinking("book=2, so...</think>I propose: 2 books"), without_thinking("I propose <think>2 books")
        ('I propose: 2 books', 'I propose ')
        >>> without_thinking({"role": "assistant", "content": "<think>hm</think>C", "reasoning_content": "hm"})
        {'role': 'assistant', 'content': 'C'}
    """
    if isinstance(action, dict):
        content = action.get("content")
        message = {key: value for key, value in action.items() if key != "reasoning_content"}
        if isinstance(content, str):
            message["content"] = without_thinking(content)
        return message
    text = parsing_without_thinking(action)  # closed blocks, and an unclosed <think> to the end
    close = text.rfind(_THINK_CLOSE)  # a </think> left has its <think> in the prompt: what came before is reasoning
    return text if close < 0 else text[close + len(_THINK_CLOSE) :]


def checked_penalty(name: str, value: float) -> float:
    """A move penalty as a ``float``; a ``ValueError`` naming the argument when it is negative.

    Example:
        >>> checked_penalty("illegal_penalty", 1)
        1.0
    """
    if not value >= 0 or not math.isfinite(value):  # NaN fails the first test, inf the second
        raise ValueError(f"{name} is charged as a negative reward; give a finite number >= 0, got {value}")
    return float(value)


class ScriptedPlayer(Protocol):
    """A built-in player: reads the game state an honest player could know and returns an action text."""

    name: str

    def act(self, env: Any, agent: str) -> str:
        """The action ``agent`` takes now in ``env`` (a game's unwrapped env)."""


class TextAECEnv(AECEnv):
    """A PettingZoo AEC env whose agents read text and answer with text.

    Holds what every llmgym text AEC env shares: the ``{"text": Text}``
    observation and ``Text`` action spaces, an inbox of texts per agent that
    :meth:`observe` joins, and PettingZoo's reward bookkeeping at the start of
    an episode (:meth:`_open_episode`) and of a step (:meth:`_begin_step`).
    A subclass fills the inboxes and ends the game (``game_over``).

    Args:
        agents: the agent names (``possible_agents``).
        max_action_chars: the action space's ``max_length``.
        max_observation_chars: the observation space's ``max_length``; longer text keeps its newest part.
        render_mode: ``None`` or ``"ansi"``.
    """

    def __init__(self, agents: list[str], max_action_chars: int, max_observation_chars: int, render_mode: str | None):
        super().__init__()
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_action_chars = max_action_chars
        self.render_mode = render_mode
        self.possible_agents = list(agents)
        self.observation_spaces = {a: observation_space(max_observation_chars) for a in self.possible_agents}
        self.action_spaces = {a: Text(max_length=max_action_chars) for a in self.possible_agents}
        self.np_random, _ = seeding.np_random(None)
        self.agents: list[str] = []
        self.game_over = True
        self._inbox: dict[str, list[str]] = {}

    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Text:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> dict[str, str]:
        text = "\n\n".join(self._inbox.get(agent, []))
        return {"text": clip_observation(text, self.observation_spaces[agent]["text"].max_length)}

    def _open_episode(self, info: dict[str, Any]) -> None:
        """Every agent plays again: zero rewards, no ending, a copy of ``info`` each."""
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: dict(info) for a in self.agents}
        self.game_over = False

    def _begin_step(self, action: str | dict[str, Any] | None) -> str | None:
        """The agent to move, its step's rewards cleared and its inbox read; ``None`` when the step was a dead agent's.

        Raises:
            RuntimeError: no game is running (before the first ``reset()``, or every agent has left).
            TypeError: a live agent's action is neither text nor an assistant message.
        """
        if not self.agents:  # else an AttributeError or KeyError on agent_selection
            raise RuntimeError("no game is running: call reset() before step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return None
        if not isinstance(action, (str, dict)):
            raise TypeError(
                f"{agent} is still playing: its action must be str or an assistant message dict, "
                f"got {type(action).__name__}"
            )
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self._inbox[agent] = []
        return agent


class TextGameEnv(TextAECEnv, metaclass=ABCMeta):
    """A turn-based text game for two players, PettingZoo AEC.

    Abstract: a game subclasses it and defines the rules (the methods under "what a game
    provides"); building ``TextGameEnv`` itself, or a subclass that leaves one out, is a
    ``TypeError`` that names the missing methods.

    Args:
        max_retries: illegal attempts a player may retry in a row; one more forfeits the game.
        illegal_penalty: reward charged for each illegal attempt (a positive number).
        max_action_chars: longer actions are illegal attempts (the text is not read).
        max_observation_chars: the observation space's ``max_length``; longer text is clipped.
        render_mode: ``None`` or ``"ansi"``.

    Rewards: each illegal attempt costs ``illegal_penalty``; at the end the
    winner gets +1 and the loser -1 (a draw 0), unless a subclass scores the
    end itself (:meth:`final_rewards`). A forfeit is a loss.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "name": "text_game_v0", "is_parallelizable": False}
    #: Tool functions (for schemas and argument validation only; the game reads their arguments).
    game_tools: ClassVar[tuple[Tool, ...]] = ()
    #: Forward the prose of an action to the opponent as a chat message.
    relay_prose: ClassVar[bool] = False
    #: The system prompt for an LLM playing this game.
    system_prompt: ClassVar[str] = ""

    def __init__(
        self,
        max_retries: int = 2,
        illegal_penalty: float = 0.1,
        max_action_chars: int = 8192,
        max_observation_chars: int = 16384,
        render_mode: str | None = None,
    ):
        super().__init__(list(PLAYERS), max_action_chars, max_observation_chars, render_mode)
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.max_retries = max_retries
        self.illegal_penalty = checked_penalty("illegal_penalty", illegal_penalty)
        self.tools = {t.name: t for t in self.game_tools}
        self.tool_schemas = [t.schema for t in self.game_tools]
        self.winner: str | None = None
        self.forfeited: str | None = None
        self.history: list[tuple[str, str]] = []  # (agent, move as text) of the legal moves

    # -- what a game provides ------------------------------------------------------

    @abstractmethod
    def new_game(self, options: dict[str, Any] | None) -> str:
        """Set up a new game with ``self.np_random``; return the agent who moves first."""

    @abstractmethod
    def rules(self, agent: str) -> str:
        """The first text ``agent`` reads: the rules and anything private to it."""

    @abstractmethod
    def state_text(self, agent: str) -> str:
        """The position as ``agent`` sees it (board, standing offer...)."""

    @abstractmethod
    def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> Any:
        """The move a validated tool call stands for; raise :class:`~llmgym.ToolError` if illegal."""

    @abstractmethod
    def read_text(self, agent: str, text: str) -> Any:
        """The move plain text stands for; raise :class:`~llmgym.ToolError` if there is none or it is illegal."""

    @abstractmethod
    def apply(self, agent: str, move: Any) -> str:
        """Play a legal move; return how it reads to both players (``"player_0 played b2"``)."""

    @abstractmethod
    def next_agent(self, agent: str) -> str | None:
        """Who moves after ``agent``'s legal move; ``None`` once the game is over (set ``self.winner``)."""

    def final_rewards(self) -> dict[str, float]:
        """Rewards at the end of a game that was not forfeited (default: +1 / -1, draw 0)."""
        if self.winner is None:
            return dict.fromkeys(self.possible_agents, 0.0)
        return {a: 1.0 if a == self.winner else -1.0 for a in self.possible_agents}

    def outcome(self) -> dict[str, str]:
        """``"win"``, ``"draw"`` or ``"loss"`` for each agent of a finished game (default: from :attr:`winner`)."""
        if self.winner is None:
            return dict.fromkeys(self.possible_agents, "draw")
        return {a: "win" if a == self.winner else "loss" for a in self.possible_agents}

    def forfeit_rewards(self, loser: str) -> dict[str, float]:
        """Rewards when ``loser`` forfeits (default: -1 for it, +1 for the other)."""
        return {a: -1.0 if a == loser else 1.0 for a in self.possible_agents}

    def your_turn(self, agent: str) -> str:
        """The line that asks ``agent`` to move."""
        return f"{self.state_text(agent)}\nYour move, {agent}."

    def result_text(self) -> str:
        """How the game ended, for both players."""
        if self.forfeited is not None:
            return (
                f"Game over: {self.forfeited} forfeited after {self.max_retries + 1} illegal attempts in a row; "
                f"{self.winner} wins."
            )
        return f"Game over: {self.winner} wins." if self.winner else "Game over: draw."

    # -- the PettingZoo API --------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        self._open_episode({"tools": self.tool_schemas})
        self.winner = self.forfeited = None
        self.history = []
        self.retries = dict.fromkeys(self.agents, 0)
        self.illegal_attempts = dict.fromkeys(self.agents, 0)
        self.agent_selection = self.new_game(options)
        self._inbox = {a: [self.rules(a)] for a in self.agents}
        self._inbox[self.agent_selection].append(self.your_turn(self.agent_selection))

    def step(self, action: str | dict[str, Any] | None) -> None:
        agent = self._begin_step(action)
        if agent is None:
            return
        move, error, prose = self._read(agent, action)
        if error is not None:
            self._illegal(agent, error)
        else:
            self._play(agent, move, prose)
        self._accumulate_rewards()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if not self.agents and self.game_over:
            return self.result_text() + "\n"
        return self.state_text(self.agent_selection) + "\n"

    def close(self) -> None:
        """Nothing to release."""

    # -- internals -----------------------------------------------------------------

    def _read(self, agent: str, action: str | dict[str, Any]) -> tuple[Any, str | None, str]:
        """``(move, error, prose)`` for an action; ``error`` is ``None`` when the move is legal.

        The prose (relayed to the other player when :attr:`relay_prose`) and the move are read
        from the action :func:`without_thinking`.
        """
        content = action if isinstance(action, str) else action.get("content")
        if isinstance(content, str) and len(content) > self.max_action_chars:
            return None, f"your message has {len(content)} characters; the limit is {self.max_action_chars}", ""
        parsed = parse_action(without_thinking(action))
        if parsed.errors:
            return None, "; ".join(parsed.errors), parsed.content
        try:
            if len(parsed.tool_calls) > 1:
                raise ToolError(f"one move per turn: you made {len(parsed.tool_calls)} tool calls")
            if parsed.tool_calls:
                call = parsed.tool_calls[0]
                handler = self.tools.get(call.name)
                if handler is None:
                    raise ToolError(f"unknown tool {call.name[:64]!r}; use {', '.join(self.tools)}")
                return self.read_call(agent, call.name, handler.validate(call.arguments)), None, parsed.content
            return self.read_text(agent, parsed.content), None, parsed.content
        except ToolError as err:
            return None, str(err), parsed.content

    def _illegal(self, agent: str, error: str) -> None:
        self.retries[agent] += 1
        self.illegal_attempts[agent] += 1
        self.rewards[agent] -= self.illegal_penalty
        if self.retries[agent] > self.max_retries:
            self.forfeited = agent
            self.winner = self._other(agent)
            self._finish(self.forfeit_rewards(agent), f"Illegal move: {error}")
            return
        left = self.max_retries + 1 - self.retries[agent]
        self._inbox[agent].append(
            f"Illegal move: {error}\nYou are still to move; "
            f"{left} more illegal attempt{'s' if left != 1 else ''} and you forfeit the game.\n" + self.your_turn(agent)
        )

    def _play(self, agent: str, move: Any, prose: str) -> None:
        self.retries[agent] = 0
        event = self.apply(agent, move)
        self.history.append((agent, event))
        for other in self.agents:
            if other != agent:
                self._inbox[other].append(event)
                if self.relay_prose and prose.strip():
                    self._inbox[other].append(f"{agent} says: {prose.strip()[:1000]}")
        following = self.next_agent(agent)
        if following is None:
            self._finish(self.final_rewards(), "")
            return
        self.agent_selection = following
        self._inbox[following].append(self.your_turn(following))

    def _finish(self, rewards: dict[str, float], note: str) -> None:
        self.game_over = True
        for a in self.agents:
            self.rewards[a] += rewards[a]
            self.terminations[a] = True
            ending = [note] if note and a == self.forfeited else []
            self._inbox[a].extend([*ending, self.state_text(a), self.result_text()])

    def _other(self, agent: str) -> str:
        return next(a for a in self.possible_agents if a != agent)


def play_human(
    env: TextGameEnv, human: str = "player_0", opponent: ScriptedPlayer | None = None, seed: int | None = None
) -> dict[str, float]:
    """Play a game in the terminal: you type moves for ``human``, ``opponent`` (or a second human) plays the other side.

    Returns:
        Each agent's total reward.
    """
    env.reset(seed=seed)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, _ = env.last()
        totals[agent] += float(reward)
        if terminated or truncated:
            if agent == human or opponent is None:
                print(observation["text"])
            env.step(None)
            continue
        if agent == human or opponent is None:
            print(f"\n--- {agent} ---\n{observation['text']}")
            action = input(f"{agent}> ")
        else:
            action = opponent.act(env, agent)
        env.step(action)
    print(f"\nTotal rewards: {totals}")
    return totals
