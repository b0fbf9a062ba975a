"""TextArena's multi-player games as PettingZoo AEC envs with text observations.

Holds :class:`TextArenaAECEnv` and :func:`aec_env`. Observations are
``{"text": str}`` in a ``Dict`` space, as in :mod:`llmgym.envs.multiagent`
(PettingZoo's ``api_test`` needs a dict observation; see its base module);
actions are text (or an OpenAI assistant-message ``dict``, whose content is
read). Agents are ``player_0`` ... ``player_{n-1}`` for TextArena's players
0 ... n-1. Needs the ``textarena`` and ``multiagent`` extras.

Each agent reads the messages it received since its previous move (never a
previous episode's). Rewards are incremental: an invalid move costs its
player ``invalid_penalty`` on that step; TextArena's outcome (+1 / -1, draw
0, or the game's own scores) is paid to every player on the last step. The
game's own rules decide invalid moves: TextArena lets a player retry once,
and a second invalid move in a row loses the game.

Example:
    >>> from llmgym.envs.adapters.textarena_aec import aec_env
    >>> env = aec_env("TicTacToe-v0")
    >>> env.reset(seed=0)
    >>> env.agent_selection, "[4]" in env.observe(env.agent_selection)["text"]
    ('player_0', True)
"""

from __future__ import annotations

from typing import Any, ClassVar

from gymnasium.utils import seeding

from llmgym.envs.adapters.textarena import (
    IsolatedRandom,
    as_reward,
    format_action,
    is_invalid_move_notice,
    make_game,
    render_messages,
)
from llmgym.envs.multiagent.base import TextAECEnv, checked_penalty, without_thinking

__all__ = ["TextArenaAECEnv", "aec_env"]


class TextArenaAECEnv(TextAECEnv):
    """A TextArena multi-player game, PettingZoo AEC (spaces, inboxes and reward bookkeeping of :class:`TextAECEnv`).

    Args:
        game: TextArena's id (``"TicTacToe-v0"``).
        num_players: players (the game decides which counts it accepts).
        game_kwargs: passed to ``ta.make`` (plain data).
        invalid_penalty: reward charged to a player on each step TextArena calls its move invalid.
        max_action_chars: longer actions are cut to this length before the game reads them.
        max_observation_chars: the observation space's ``max_length``; longer text keeps its newest part.
        render_mode: ``None`` or ``"ansi"``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "name": "textarena_v0", "is_parallelizable": False}

    def __init__(
        self,
        game: str,
        num_players: int = 2,
        game_kwargs: dict[str, Any] | None = None,
        invalid_penalty: float = 0.1,
        max_action_chars: int = 8192,
        max_observation_chars: int = 16384,
        render_mode: str | None = None,
    ):
        super().__init__(
            [f"player_{i}" for i in range(num_players)], max_action_chars, max_observation_chars, render_mode
        )
        self.game = game
        self.num_players = num_players
        self.invalid_penalty = checked_penalty("invalid_penalty", invalid_penalty)
        self._random = IsolatedRandom()
        with self._random.active():
            self.ta_env = make_game(game, **dict(game_kwargs or {}))
            try:
                self.ta_env.reset(num_players=num_players, seed=0)
            except AssertionError as err:
                raise ValueError(f"TextArena game {game!r} cannot be played by {num_players} players: {err}") from err

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        game_seed = int(self.np_random.integers(2**31))
        self._random.seed(game_seed)
        with self._random.active():
            self.ta_env.reset(num_players=self.num_players, seed=game_seed)
        self._open_episode({})
        self._inbox = {a: [] for a in self.agents}
        self._collect()
        self.agent_selection = self.possible_agents[self.ta_env.state.current_player_id]

    def step(self, action: str | dict[str, Any] | None) -> None:
        agent = self._begin_step(action)
        if agent is None:
            return
        action = without_thinking(action)  # reasoning is private: not sent to the game, so never shown to the others
        content = action if isinstance(action, str) else action.get("content")
        text = content[: self.max_action_chars] if isinstance(content, str) else ""
        player = self.possible_agents.index(agent)
        was_flagged = bool(self.ta_env.state.game_info.get(player, {}).get("invalid_move"))
        with self._random.active():
            try:
                done, _ = self.ta_env.step(format_action(text))
            except Exception as err:  # a game bug on odd input ends the game for everyone; it must not crash the caller
                self._end(
                    f"The game could not process {agent}'s move "
                    f"({type(err).__name__}: {str(err)[:200]}); game stopped.",
                    truncated=True,
                )
                self._accumulate_rewards()
                return
            received = self._collect()
            # a retry notice, or the flag TextArena sets when an invalid move loses or eliminates the player
            # (many-player games go on after an elimination, so the flag is read on every step, not only the last)
            flagged = not was_flagged and bool(self.ta_env.state.game_info.get(player, {}).get("invalid_move"))
            if flagged or any(is_invalid_move_notice(m) for m in received.get(player, [])):
                self.rewards[agent] -= self.invalid_penalty
            if done:
                outcome, game_info = self.ta_env.close()
                for pid, value in (outcome or {}).items():
                    if 0 <= pid < self.num_players:
                        self.rewards[self.possible_agents[pid]] += as_reward(value)
                reason = next((info.get("reason") for info in game_info.values() if info.get("reason")), None)
                self._end(f"Game over: {reason}" if reason else "Game over.", truncated=False)
            else:
                self.agent_selection = self.possible_agents[self.ta_env.state.current_player_id]
        self._accumulate_rewards()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self.observe(self.agent_selection)["text"] + "\n" if self.agents else "Game over.\n"

    def close(self) -> None:
        """Nothing to release (the TextArena game holds no resources)."""

    def _collect(self) -> dict[int, list[tuple[int, str, Any]]]:
        """Move the messages TextArena queued for each player into its inbox; returns them by player."""
        state = self.ta_env.state
        received = {}
        for pid in range(self.num_players):
            messages, state.observations[pid] = state.observations.get(pid, []), []
            received[pid] = messages
            text = render_messages(messages, pid, state.role_mapping)
            if text:
                self._inbox[self.possible_agents[pid]].append(text)
        return received

    def _end(self, note: str, truncated: bool) -> None:
        self.game_over = True
        for agent in self.agents:
            (self.truncations if truncated else self.terminations)[agent] = True
            self._inbox[agent].append(note)


def aec_env(game: str, num_players: int = 2, **kwargs: Any) -> TextArenaAECEnv:
    """A TextArena multi-player game as a PettingZoo AEC env (see :class:`TextArenaAECEnv`).

    Example:
        >>> env = aec_env("Nim-v0")
        >>> env.possible_agents
        ['player_0', 'player_1']
    """
    return TextArenaAECEnv(game, num_players=num_players, **kwargs)
