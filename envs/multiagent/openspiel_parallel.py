"""OpenSpiel's simultaneous-move games (Goofspiel, Blotto...) as PettingZoo Parallel text games.

Holds :class:`OpenSpielParallelEnv`. Each round every player who must act (all of them at a
simultaneous node; the one to move at a turn-based node, if the game has some) picks one of its
own legal actions, as text or with ``play(action)``; when all have, the joint action is applied
with ``state.apply_actions`` and chance events are drawn from the env's ``np_random``. As in
:mod:`.prisoners_dilemma`, an illegal reply costs ``illegal_penalty`` and its player acts again
while the others' actions stay locked in (``info["needs_action"]`` says who must act); one
more than ``max_retries`` in a row forfeits: the game's lowest utility for that player, its
highest for the others. Otherwise the rewards are OpenSpiel's returns at the end. Each player
reads its own view (:meth:`~.openspiel_text.OpenSpielText.view`); the actions of a round are
relayed by name only in games of perfect information. An exception from OpenSpiel while the
joint action is applied ends the game without a result (rewards 0, outcome ``"unfinished"``).

Example:
    >>> game = OpenSpielParallelEnv("goofspiel", {"num_cards": 3})
    >>> observations, infos = game.reset(seed=0)
    >>> observations["player_0"]["text"].splitlines()[-5:-1]
    ['Legal actions:', '[P0]Bid: 1', '[P0]Bid: 2', '[P0]Bid: 3']
    >>> _, rewards, terminations, _, _ = game.step({"player_0": "[P0]Bid: 3", "player_1": "[P1]Bid: 1"})
    >>> rewards, terminations["player_0"]
    ({'player_0': 0.0, 'player_1': 0.0}, False)
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyspiel
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from llmgym.envs.multiagent.base import checked_penalty, clip_observation, observation_space, without_thinking
from llmgym.envs.multiagent.openspiel_text import OpenSpielText, play
from llmgym.parsing import parse_action
from llmgym.spaces import Text
from llmgym.tools import ToolError

__all__ = ["OpenSpielParallelEnv"]


class OpenSpielParallelEnv(ParallelEnv):
    """An OpenSpiel game with simultaneous moves for text players, PettingZoo Parallel.

    Agent ``player_<i>`` plays OpenSpiel's player ``i`` (:attr:`seats`).

    Args:
        game: an OpenSpiel game name (``"goofspiel"``).
        params: the game's parameters (``{"num_cards": 4}``).
        max_retries: illegal actions a player may retry in a row; one more forfeits.
        illegal_penalty: reward charged for each illegal action (>= 0).
        max_action_chars: longer actions are illegal (the text is not read).
        max_observation_chars: the observation space's ``max_length``; longer text keeps its newest part.
        render_mode: ``None`` or ``"ansi"``.

    Raises:
        ValueError: see :func:`~.openspiel_text.load_game`, or bad settings.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "name": "openspiel_parallel_v0"}

    def __init__(
        self,
        game: str = "goofspiel",
        params: dict[str, Any] | None = None,
        max_retries: int = 2,
        illegal_penalty: float = 0.1,
        max_action_chars: int = 8192,
        max_observation_chars: int = 16384,
        render_mode: str | None = None,
    ):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.text = OpenSpielText(game, params)
        self.max_retries = max_retries
        self.illegal_penalty = checked_penalty("illegal_penalty", illegal_penalty)
        self.max_action_chars = max_action_chars
        self.render_mode = render_mode
        self.system_prompt = self.text.system_prompt
        self.possible_agents = [f"player_{i}" for i in range(self.text.num_players)]
        #: agent -> the OpenSpiel player it plays (fixed: ``player_<i>`` plays ``i``).
        self.seats: dict[str, int] = {agent: i for i, agent in enumerate(self.possible_agents)}
        self.observation_spaces = {a: observation_space(max_observation_chars) for a in self.possible_agents}
        self.action_spaces = {a: Text(max_length=max_action_chars) for a in self.possible_agents}
        self.tool_schemas = [play.schema]
        self.np_random, _ = seeding.np_random(None)
        self.agents: list[str] = []
        self.state = self.text.game.new_initial_state()
        self.locked: dict[int, int] = {}  # OpenSpiel player -> its legal action this round
        self.quitters: list[str] = []
        self.error: str | None = None

    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Text:
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        self.agents = list(self.possible_agents)
        self.state = self.text.game.new_initial_state()
        self.text.apply_chance(self.state, self.np_random)
        self.locked, self.quitters, self.error = {}, [], None
        self.retries = dict.fromkeys(self.agents, 0)
        self.illegal_attempts = dict.fromkeys(self.agents, 0)
        observations = {
            a: self._observation(a, [self.text.rules(p), self.text.observation_text(self.state, p)])
            for p, a in enumerate(self.agents)
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
        for player in self._waiting():
            agent = self.possible_agents[player]
            if agent not in actions:
                raise ValueError(
                    f"{agent} must act now (info['needs_action'] is True); got actions for {sorted(actions)}"
                )
            try:
                self.locked[player] = self._read(player, actions[agent])
                self.retries[agent] = 0
            except ToolError as err:
                self._illegal(agent, str(err), rewards, notes)
        self.quitters = [a for a in self.agents if self.retries[a] > self.max_retries]
        if self.quitters:
            done = self._forfeit(rewards, notes)
        elif not self._waiting():
            done = self._play_round(rewards, notes)
        else:
            done = False
            for player in self.locked:
                notes[self.possible_agents[player]].append("Your action is locked in; waiting for the others.")
        observations = {a: self._observation(a, notes[a]) for a in self.agents}
        infos = self._infos()
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _waiting(self) -> list[int]:
        """The OpenSpiel players who must still act this round."""
        return [p for p in self.text.acting(self.state) if p not in self.locked]

    def _read(self, player: int, action: Any) -> int:
        """The legal action of ``player`` that ``action`` stands for; :class:`ToolError` when there is none."""
        if not isinstance(action, (str, dict)):
            raise TypeError(f"an action must be str or an assistant message dict, got {type(action).__name__}")
        content = action if isinstance(action, str) else action.get("content")
        if isinstance(content, str) and len(content) > self.max_action_chars:
            raise ToolError(f"your message has {len(content)} characters; the limit is {self.max_action_chars}")
        parsed = parse_action(without_thinking(action))
        if parsed.errors:
            raise ToolError("; ".join(parsed.errors))
        if len(parsed.tool_calls) > 1:
            raise ToolError(f"one action per round: you made {len(parsed.tool_calls)} tool calls")
        reply = parsed.content
        if parsed.tool_calls:
            call = parsed.tool_calls[0]
            if call.name != play.name:
                raise ToolError(f"unknown tool {call.name[:64]!r}; use play")
            reply = play.validate(call.arguments)["action"]
        try:
            return self.text.read_action(self.state, player, reply)
        except ValueError as err:
            raise ToolError(str(err)) from None

    def _illegal(self, agent: str, error: str, rewards: dict[str, float], notes: dict[str, list[str]]) -> None:
        self.retries[agent] += 1
        self.illegal_attempts[agent] += 1
        rewards[agent] -= self.illegal_penalty
        left = self.max_retries + 1 - self.retries[agent]
        notes[agent].append(
            f"Illegal action: {error}\nAct again; {left} more illegal action{'s' if left != 1 else ''} "
            f"and you forfeit the game.\n{self.text.observation_text(self.state, self.possible_agents.index(agent))}"
        )

    def _forfeit(self, rewards: dict[str, float], notes: dict[str, list[str]]) -> bool:
        returns = self.text.forfeit_returns([self.possible_agents.index(a) for a in self.quitters])
        for player, agent in enumerate(self.agents):
            rewards[agent] += returns[player]
            notes[agent].append(
                f"Game over: {' and '.join(self.quitters)} forfeited after {self.max_retries + 1} illegal actions "
                "in a row."
            )
        return True

    def _play_round(self, rewards: dict[str, float], notes: dict[str, list[str]]) -> bool:
        """Apply the locked-in actions; the round's report in ``notes``; whether the game is over."""
        played = {
            p: self.text.action_names(self.state, p)[self.state.legal_actions(p).index(a)]
            for p, a in self.locked.items()
        }
        try:
            if self.state.is_simultaneous_node():
                self.state.apply_actions([self.locked.get(p, 0) for p in range(self.text.num_players)])
            else:
                self.state.apply_action(next(iter(self.locked.values())))
            self.text.apply_chance(self.state, self.np_random)
        except pyspiel.SpielError as err:  # the engine failed, not a player: end this game without a result
            self.error = f"SpielError: {err}"
        self.locked = {}
        for player, agent in enumerate(self.agents):
            if self.text.perfect_information:
                notes[agent].append("Played: " + ", ".join(f"player {p} {name}" for p, name in played.items()) + ".")
            if self.error is not None:
                notes[agent].append(f"Game over without a result: OpenSpiel failed ({self.error}).")
                continue
            notes[agent].append(self.text.observation_text(self.state, player))
            if self.state.is_terminal():
                rewards[agent] += float(self.state.returns()[player])
                values = ", ".join(f"player {p}: {v:g}" for p, v in enumerate(self.state.returns()))
                notes[agent].append(f"Game over. Returns: {values}.")
        return self.error is not None or self.state.is_terminal()

    def outcome(self) -> dict[str, str]:
        """A forfeit loses; otherwise the highest return wins (all equal: a draw); ``"unfinished"`` after an error."""
        if self.error is not None:
            return dict.fromkeys(self.possible_agents, "unfinished")
        if self.quitters:
            return {a: "loss" if a in self.quitters else "win" for a in self.possible_agents}
        returns = dict(zip(self.possible_agents, self.state.returns()))
        best = max(returns.values())
        if all(v == best for v in returns.values()):
            return dict.fromkeys(returns, "draw")
        return {a: "win" if v == best else "loss" for a, v in returns.items()}

    def _observation(self, agent: str, texts: list[str]) -> dict[str, str]:
        text = "\n\n".join(t for t in texts if t)
        return {"text": clip_observation(text, self.observation_spaces[agent]["text"].max_length)}

    def _infos(self) -> dict[str, Any]:
        waiting = {self.possible_agents[p] for p in self._waiting()}
        return {a: {"needs_action": a in waiting, "tools": self.tool_schemas} for a in self.agents}

    def render(self) -> str | None:
        """The whole state as OpenSpiel prints it (a spectator's view)."""
        if self.render_mode != "ansi":
            return None
        return f"{self.state}\n"

    def close(self) -> None:
        """Nothing to release."""
