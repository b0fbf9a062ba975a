"""Multi-agent rollouts: play policies and scripted players against each other.

Holds :func:`play_match` / :func:`aplay_match` (many games at once, one
:class:`~llmgym.Episode` per agent per game), :func:`win_matrix` (every
player against every other, both seats) and :class:`WinMatrix`.

A player is either an LLM :class:`~llmgym.policy.Policy` (asked through
``agenerate`` with the agent's own chat: system prompt, then what it read
and what it answered, turn by turn) or a scripted player with
``act(env, agent) -> str`` (:class:`~llmgym.envs.multiagent.base.ScriptedPlayer`).
The same policy object may play both seats (self-play).

Each agent's episode holds its chat, the reward of each of its turns (an AEC
agent's reward since its previous move is credited to that move; the final
result to its last move), the token ids its policy generated (when the policy
returns them, with the same prefix contract as :mod:`llmgym.rollout`) and
``metadata["outcome"]`` (``"win"``, ``"draw"``, ``"loss"``), ``metadata["agent"]``
and ``metadata["players"]`` (agent -> player name): what a GRPO trainer needs to
train one side or both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from pettingzoo import AECEnv, ParallelEnv

from llmgym.episode import Episode
from llmgym.messages import Message, assistant, system, user
from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout import run_sync
from llmgym.rollout_tokens import TokenRecord

__all__ = ["play_match", "aplay_match", "win_matrix", "WinMatrix", "player_name"]

OUTCOMES = ("win", "draw", "loss")


def player_name(player: Any) -> str:
    """A player's name for records: its ``name`` attribute, else its class name."""
    return str(getattr(player, "name", "") or type(player).__name__)


class _PolicyFailure(Exception):
    """A policy raised while choosing a move; the game stops and its episodes record the error."""


@dataclass
class _Seat:
    """One agent's side of one game while it is played."""

    agent: str
    player: Any
    messages: list[Message]
    pending: list[str] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    early_reward: float = 0.0
    tokens: TokenRecord = field(default_factory=TokenRecord)
    policy_seconds: float = 0.0

    def flush(self) -> None:
        """Turn the observations not yet shown into the next user message.

        The first observation of a game repeats the rules that are already the
        system prompt (a PettingZoo user sees no system prompt); that copy is dropped.
        """
        if not self.pending:
            return
        text = "\n\n".join(self.pending)
        prompt = self.messages[0]["content"] if self.messages and self.messages[0]["role"] == "system" else ""
        if prompt and len(self.messages) == 1:
            text = text.replace(prompt + "\n", "", 1)
        self.messages.append(user(text))
        self.pending = []

    def credit(self, reward: float) -> None:
        if self.turn_rewards:
            self.turn_rewards[-1] += float(reward)
        else:
            self.early_reward += float(reward)

    async def act(self, env: Any, tools: list[dict[str, Any]], sampling: SamplingParams) -> str | dict[str, Any]:
        self.flush()
        tick = time.perf_counter()
        if isinstance(self.player, Policy):
            request = PolicyRequest(list(self.messages), tools, sampling, self.tokens.prefix())
            try:
                generation = await self.player.agenerate(request)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a failing policy ends this game, not the match
                raise _PolicyFailure(f"{self.agent}: {type(err).__name__}: {err}") from err
            if not isinstance(generation, Generation):
                raise TypeError(f"{type(self.player).__name__}.agenerate returned {type(generation).__name__}, not a Generation")
            self.tokens.add(generation, len(self.turn_rewards) + 1, request.prefix_token_ids)
            message = generation.message
            action: str | dict[str, Any] = message if message.get("tool_calls") else str(message.get("content") or "")
            self.messages.append(dict(message) if message.get("tool_calls") else assistant(str(action)))
        else:
            action = self.player.act(env, self.agent)
            self.messages.append(assistant(action))
        self.policy_seconds += time.perf_counter() - tick
        self.turn_rewards.append(0.0)
        return action


async def _play_aec(env: AECEnv, seats: dict[str, _Seat], sampling: SamplingParams) -> str | None:
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        seat = seats[agent]
        seat.credit(reward)
        seat.pending.append(observation["text"])
        if terminated or truncated:
            env.step(None)
            continue
        try:
            action = await seat.act(env, info.get("tools", []), sampling)
        except _PolicyFailure as err:
            return str(err)
        env.step(action)
    return None


async def _play_parallel(env: ParallelEnv, seats: dict[str, _Seat], observations: dict[str, Any], infos: dict[str, Any], sampling: SamplingParams) -> str | None:
    for agent, observation in observations.items():
        seats[agent].pending.append(observation["text"])
    while env.agents:
        acting = [a for a in env.agents if infos[a].get("needs_action", True)]
        moves = [asyncio.ensure_future(seats[a].act(env, infos[a].get("tools", []), sampling)) for a in acting]
        try:
            chosen = await asyncio.gather(*moves)
        except _PolicyFailure as err:
            # the other seats' moves are moot: stop them, or they write into the finished episodes later
            for move in moves:
                move.cancel()
            await asyncio.gather(*moves, return_exceptions=True)
            return str(err)
        actions = {a: "" for a in env.agents} | dict(zip(acting, chosen))
        observations, rewards, _, _, infos = env.step(actions)
        for agent, reward in rewards.items():
            seats[agent].credit(reward)
        for agent, observation in observations.items():
            if observation["text"]:
                seats[agent].pending.append(observation["text"])
    return None


async def _play_game(
    env_factory: Callable[[], Any], players: dict[str, Any], seed: int, group: int, sampling: SamplingParams, env_id: str,
) -> dict[str, Episode]:
    start = time.perf_counter()
    env = env_factory()
    game = env.unwrapped
    prompt = getattr(game, "system_prompt", "")
    seats = {a: _Seat(a, players[a], [system(prompt)] if prompt else []) for a in game.possible_agents}
    if isinstance(game, ParallelEnv):
        observations, infos = env.reset(seed=seed)
        error = await _play_parallel(env, seats, observations, infos, sampling)
    else:
        env.reset(seed=seed)
        error = await _play_aec(env, seats, sampling)
    outcome = game.outcome() if error is None and hasattr(game, "outcome") else {}
    names = {a: player_name(p) for a, p in players.items()}
    episodes = {}
    for agent, seat in seats.items():
        seat.flush()
        episode = Episode(
            env_id=env_id or type(game).__name__, seed=seed, messages=seat.messages,
            tools=getattr(game, "tool_schemas", []), turn_rewards=seat.turn_rewards,
            reward_components=[{"game": r} for r in seat.turn_rewards],
            terminated=error is None, truncated=error is not None, group=group, policy=names[agent],
        )
        seat.tokens.fill(episode)
        episode.timing = {"policy_s": seat.policy_seconds, "wall_s": time.perf_counter() - start}
        episode.metadata.update({"agent": agent, "players": names, "outcome": outcome.get(agent, "unfinished")})
        if seat.early_reward:
            episode.metadata["reward_before_first_turn"] = seat.early_reward
        if error is not None:
            episode.metadata["error"] = error
        episodes[agent] = episode
    env.close()
    return episodes


async def aplay_match(
    env_factory: Callable[[], Any],
    players: dict[str, Any],
    seeds: Iterable[int],
    *,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
    group_size: int = 1,
) -> list[dict[str, Episode]]:
    """Play ``group_size`` games per seed, up to ``max_concurrency`` at once; see :func:`play_match`."""
    seed_list = [int(s) for s in seeds]
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    probe = env_factory().unwrapped
    missing = set(probe.possible_agents) - set(players)
    extra = set(players) - set(probe.possible_agents)
    if missing or extra:
        raise ValueError(f"players must name every agent of the game exactly: missing {sorted(missing)}, unknown {sorted(extra)}")
    for agent, player in players.items():
        if not isinstance(player, Policy) and not callable(getattr(player, "act", None)):
            raise TypeError(f"player for {agent} must be a Policy or have act(env, agent) -> str, got {type(player).__name__}")
    sampling = sampling or SamplingParams()
    limit = asyncio.Semaphore(max_concurrency)

    async def one(group: int, member: int, seed: int) -> dict[str, Episode]:
        game_sampling = sampling
        if sampling.seed is not None:  # each game of a group samples differently, reproducibly
            entropy = [sampling.seed % 2**32, seed % 2**32, member]
            game_sampling = dataclasses.replace(sampling, seed=int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1))
        async with limit:
            return await _play_game(env_factory, players, seed, group, game_sampling, env_id)

    return list(await asyncio.gather(*(
        one(group, member, seed) for group, seed in enumerate(seed_list) for member in range(group_size)
    )))


def play_match(
    env_factory: Callable[[], Any],
    players: dict[str, Any],
    seeds: Iterable[int],
    *,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
    group_size: int = 1,
) -> list[dict[str, Episode]]:
    """Play games and return, for each game, one episode per agent.

    Args:
        env_factory: builds a fresh PettingZoo env (AEC or Parallel), e.g. ``tictactoe_v0.env``.
        players: agent -> a :class:`~llmgym.policy.Policy` or a scripted player (``act(env, agent)``).
        seeds: one game per seed.
        sampling: sampling settings for policies.
        max_concurrency: games played at once.
        env_id: the id recorded in the episodes (default: the env's class name).
        group_size: games per seed; the episodes of one seed share ``Episode.group``
            (a GRPO group). With ``sampling.seed`` set, each game of a group gets its own sampling seed.

    Raises:
        ValueError: ``players`` does not name exactly the game's agents.
        TypeError: a player is neither a policy nor scripted.

    Call :func:`aplay_match` from code that already runs an event loop.

    Example:
        >>> from llmgym.envs.multiagent import tictactoe
        >>> games = play_match(tictactoe.env, {"player_0": tictactoe.MinimaxPlayer(1),
        ...                                   "player_1": tictactoe.MinimaxPlayer(2)}, seeds=[0, 1])
        >>> [g["player_0"].metadata["outcome"] for g in games], games[0]["player_1"].total_reward
        (['draw', 'draw'], 0.0)
    """
    return run_sync(aplay_match(env_factory, players, seeds, sampling=sampling, max_concurrency=max_concurrency,
                                   env_id=env_id, group_size=group_size))


@dataclass
class WinMatrix:
    """Results of every player against every other, from the row player's side, both seats together.

    Attributes:
        names: the players, in order.
        counts: ``counts[a][b]["win"|"draw"|"loss"]``: games ``a`` won, drew, lost against ``b``.
        mean_reward: ``mean_reward[a][b]``: ``a``'s mean total reward per finished game against ``b``
            (the games ``counts`` holds; a game stopped by a failing policy counts in neither).
    """

    names: list[str]
    counts: dict[str, dict[str, dict[str, int]]]
    mean_reward: dict[str, dict[str, float]]

    def score(self, a: str, b: str) -> float:
        """``a``'s score against ``b``: (wins + draws / 2) / games (0.5 when they never met)."""
        c = self.counts[a][b]
        games = sum(c.values())
        return (c["win"] + c["draw"] / 2) / games if games else 0.5

    def format(self) -> str:
        """A text table: each cell is the row player's wins/draws/losses against the column player."""
        width = max(12, *(len(n) for n in self.names)) + 2
        lines = ["W/D/L".ljust(width) + "".join(n.ljust(width) for n in self.names)]
        for a in self.names:
            cells = []
            for b in self.names:
                c = self.counts[a][b]
                cells.append(("-" if not sum(c.values()) else f"{c['win']}/{c['draw']}/{c['loss']}").ljust(width))
            lines.append(a.ljust(width) + "".join(cells))
        return "\n".join(lines)


def win_matrix(
    env_factory: Callable[[], Any],
    players: dict[str, Any],
    seeds: Iterable[int],
    *,
    self_play: bool = False,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
) -> tuple[WinMatrix, list[dict[str, Episode]]]:
    """Play every player against every other in both seats (and itself with ``self_play``), one game per seed.

    Args:
        env_factory: builds a fresh two-player PettingZoo env.
        players: name -> a policy or a scripted player.
        seeds: the seeds each pairing plays, in each seat.
        self_play: also play each player against itself.
        sampling: sampling settings for policies.
        max_concurrency: games played at once.
        env_id: the id recorded in the episodes.

    Returns:
        The matrix and every game's episodes.

    Example:
        >>> from llmgym.envs.multiagent import connect_four
        >>> matrix, _ = win_matrix(connect_four.env, {"deep": connect_four.NegamaxPlayer(4),
        ...                                           "shallow": connect_four.NegamaxPlayer(1)}, seeds=[0])
        >>> matrix.counts["deep"]["shallow"], matrix.score("deep", "shallow")
        ({'win': 1, 'draw': 1, 'loss': 0}, 0.75)
    """
    names = list(players)
    seed_list = [int(s) for s in seeds]
    counts = {a: {b: dict.fromkeys(OUTCOMES, 0) for b in names} for a in names}
    totals = {a: {b: 0.0 for b in names} for a in names}
    all_games: list[dict[str, Episode]] = []
    agents = list(env_factory().unwrapped.possible_agents)
    if len(agents) != 2:
        raise ValueError(f"win_matrix needs a two-player game, this one has agents {agents}")
    first, second = agents

    async def run() -> None:
        for a, b in [(a, b) for a in names for b in names if a != b or self_play]:
            games = await aplay_match(env_factory, {first: players[a], second: players[b]}, seed_list,
                                      sampling=sampling, max_concurrency=max_concurrency, env_id=env_id)
            for game in games:
                all_games.append(game)
                for name, other, agent in ((a, b, first), (b, a, second)):
                    if a == b and agent == second:
                        continue  # self-play: count each game once, from the first seat
                    outcome = game[agent].metadata["outcome"]
                    if outcome in OUTCOMES:  # an unfinished game's partial reward would skew the mean
                        counts[name][other][outcome] += 1
                        totals[name][other] += game[agent].total_reward

    run_sync(run())
    mean = {
        a: {b: totals[a][b] / max(1, sum(counts[a][b].values())) for b in names} for a in names
    }
    return WinMatrix(names, counts, mean), all_games
