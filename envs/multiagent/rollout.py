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

An exception from a player or from the env (its factory, ``reset``, ``step``,
``outcome``, ``close``) ends that game only: both agents' episodes record
``metadata["error"]`` and ``metadata["error_source"]`` (``"policy"`` or ``"env"``),
their outcome is ``"unfinished"``, and the other games go on. Ctrl-C, a
cancellation and :class:`~llmgym.rollout.TokenMismatchError` still stop the match.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pettingzoo import AECEnv, ParallelEnv

from llmgym.episode import Episode
from llmgym.messages import Message, assistant, system, user
from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout.engine import run_sync
from llmgym.rollout.play import describe_error
from llmgym.rollout.tokens import TokenMismatchError, TokenRecord

__all__ = ["play_match", "aplay_match", "win_matrix", "WinMatrix", "player_name"]

OUTCOMES = ("win", "draw", "loss")


def player_name(player: Any) -> str:
    """A player's name for records: its ``name`` attribute, else its class name."""
    return str(getattr(player, "name", "") or type(player).__name__)


class _GameFailure(Exception):
    """A player or the env raised; the game stops and its episodes record the error.

    Attributes:
        source: ``"policy"`` (a player) or ``"env"``, for ``metadata["error_source"]``.
        description: ``"Type: message"`` (a player's prefixed with its agent), for ``metadata["error"]``.
    """

    def __init__(self, source: str, description: str):
        super().__init__(description)
        self.source, self.description = source, description


@contextmanager
def _env_errors() -> Iterator[None]:
    """Turn an exception the env raises inside the block into a failure of this game only.

    A :class:`TokenMismatchError` (a wrapper refusing the tokens) stops the match, as in single-agent rollouts.
    """
    try:
        yield
    except (_GameFailure, TokenMismatchError):
        raise
    except Exception as err:
        raise _GameFailure("env", describe_error(err)) from err


def _check_players(agents: Iterable[str], players: dict[str, Any]) -> None:
    """Check that ``players`` seats exactly the game's ``agents``.

    Raises:
        ValueError: an agent has no player, or a player names no agent of the game.
    """
    missing = set(agents) - set(players)
    extra = set(players) - set(agents)
    if missing or extra:
        raise ValueError(
            f"players must name every agent of the game exactly: missing {sorted(missing)}, unknown {sorted(extra)}"
        )


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
            except TokenMismatchError:
                raise
            except Exception as err:  # a failing policy ends this game, not the match
                raise _GameFailure("policy", f"{self.agent}: {describe_error(err)}") from err
            if not isinstance(generation, Generation):
                raise TypeError(
                    f"{type(self.player).__name__}.agenerate returned {type(generation).__name__}, not a Generation"
                )
            self.tokens.add(generation, len(self.turn_rewards) + 1, request.prefix_token_ids)
            message = generation.message
            action: str | dict[str, Any] = message if message.get("tool_calls") else str(message.get("content") or "")
            self.messages.append(dict(message) if message.get("tool_calls") else assistant(str(action)))
        else:
            try:
                action = self.player.act(env, self.agent)
            except Exception as err:  # a scripted player's bug ends this game too
                raise _GameFailure("policy", f"{self.agent}: {describe_error(err)}") from err
            self.messages.append(assistant(action))
        self.policy_seconds += time.perf_counter() - tick
        self.turn_rewards.append(0.0)
        return action


async def _play_aec(env: AECEnv, seats: dict[str, _Seat], seed: int, sampling: SamplingParams) -> None:
    """Play an AEC game to its end.

    Raises:
        _GameFailure: a player or the env raised.
    """
    with _env_errors():
        env.reset(seed=seed)
        turns = iter(env.agent_iter())
    while True:
        with _env_errors():  # what the env says is read here: a bad reward or observation is its failure
            agent = next(turns, None)
            if agent is None:
                return
            observation, reward, terminated, truncated, info = env.last()
            seat = seats[agent]
            seat.credit(reward)
            seat.pending.append(observation["text"])
            if terminated or truncated:
                env.step(None)
                continue
            tools = info.get("tools", [])
        action = await seat.act(env, tools, sampling)
        with _env_errors():
            env.step(action)


async def _play_parallel(env: ParallelEnv, seats: dict[str, _Seat], seed: int, sampling: SamplingParams) -> None:
    """Play a Parallel game to its end.

    Raises:
        _GameFailure: a player or the env raised.
    """
    with _env_errors():
        observations, infos = env.reset(seed=seed)
        for agent, observation in observations.items():
            seats[agent].pending.append(observation["text"])
    while True:
        with _env_errors():
            if not env.agents:
                return
            acting = [a for a in env.agents if infos[a].get("needs_action", True)]
            tools = {a: infos[a].get("tools", []) for a in acting}
        moves = [asyncio.ensure_future(seats[a].act(env, tools[a], sampling)) for a in acting]
        try:
            chosen = await asyncio.gather(*moves)
        except BaseException:
            # the other seats' moves are moot: stop them, or they write into the finished episodes later
            for move in moves:
                move.cancel()
            await asyncio.gather(*moves, return_exceptions=True)
            raise
        with _env_errors():
            actions = {a: "" for a in env.agents} | dict(zip(acting, chosen))
            observations, rewards, _, _, infos = env.step(actions)
            for agent, reward in rewards.items():
                seats[agent].credit(reward)
            for agent, observation in observations.items():
                if observation["text"]:
                    seats[agent].pending.append(observation["text"])


async def _play_game(
    env_factory: Callable[[], Any],
    players: dict[str, Any],
    seed: int,
    group: int,
    sampling: SamplingParams,
    env_id: str,
) -> dict[str, Episode]:
    """One game: one episode per agent. A player's or the env's exception ends this game only.

    Raises:
        ValueError: ``players`` does not name exactly the game's agents.
    """
    start = time.perf_counter()
    env = game = None
    seats = {a: _Seat(a, p, []) for a, p in players.items()}  # until the env says who plays and what they read
    tools: list[dict[str, Any]] = []
    outcome: dict[str, str] = {}
    error: tuple[str, str] | None = None  # (where it came from, what it was)
    try:
        with _env_errors():
            env = env_factory()
            game = env.unwrapped
            agents = list(game.possible_agents)
            prompt = getattr(game, "system_prompt", "")
            tools = list(getattr(game, "tool_schemas", []))
        _check_players(agents, players)
        seats = {a: _Seat(a, players[a], [system(prompt)] if prompt else []) for a in agents}
        if isinstance(game, ParallelEnv):
            await _play_parallel(env, seats, seed, sampling)
        else:
            await _play_aec(env, seats, seed, sampling)
        with _env_errors():
            outcome = game.outcome() if hasattr(game, "outcome") else {}
    except _GameFailure as err:
        error = (err.source, err.description)
    finally:
        if env is not None:
            try:
                with _env_errors():
                    env.close()
            except _GameFailure as err:
                error = error or (err.source, err.description)
    game_name = env_id or (type(game).__name__ if game is not None else _factory_name(env_factory))
    return _episodes(seats, players, (game_name, seed, group, tools), outcome if error is None else {}, error, start)


def _episodes(
    seats: dict[str, _Seat],
    players: dict[str, Any],
    game: tuple[str, int, int, list[dict[str, Any]]],
    outcome: dict[str, str],
    error: tuple[str, str] | None,
    start: float,
) -> dict[str, Episode]:
    """Each seat's episode of one game; ``game`` is what they share: (env id, seed, group, tools)."""
    env_id, seed, group, tools = game
    names = {a: player_name(p) for a, p in players.items()}
    episodes = {}
    for agent, seat in seats.items():
        seat.flush()
        episode = Episode(
            env_id=env_id,
            seed=seed,
            messages=seat.messages,
            tools=list(tools),
            turn_rewards=seat.turn_rewards,
            reward_components=[{"game": r} for r in seat.turn_rewards],
            terminated=error is None,
            truncated=error is not None,
            group=group,
            policy=names[agent],
        )
        seat.tokens.fill(episode)
        episode.timing = {"policy_s": seat.policy_seconds, "wall_s": time.perf_counter() - start}
        episode.metadata.update({"agent": agent, "players": names, "outcome": outcome.get(agent, "unfinished")})
        if seat.early_reward:
            episode.metadata["reward_before_first_turn"] = seat.early_reward
        if error is not None:
            episode.metadata["error_source"], episode.metadata["error"] = error
        episodes[agent] = episode
    return episodes


def _factory_name(env_factory: Callable[[], Any]) -> str:
    """A name for the env of a game whose env could not be built: the factory's."""
    return str(getattr(env_factory, "__name__", "") or type(env_factory).__name__)


def _agents_of(env_factory: Callable[[], Any]) -> list[str]:
    """The agents of the game ``env_factory`` builds (one env, built and closed).

    Raises:
        Exception: whatever the factory or the env raises.
    """
    env = env_factory()
    try:
        return list(env.unwrapped.possible_agents)
    finally:
        env.close()


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
    try:
        agents: list[str] | None = _agents_of(env_factory)
    except Exception:  # each game builds its own env: it checks the players then, or records the failure
        agents = None
    if agents is not None:
        _check_players(agents, players)
    for agent, player in players.items():
        if not isinstance(player, Policy) and not callable(getattr(player, "act", None)):
            raise TypeError(
                f"player for {agent} must be a Policy or have act(env, agent) -> str, got {type(player).__name__}"
            )
    sampling = sampling or SamplingParams()
    limit = asyncio.Semaphore(max_concurrency)

    async def one(group: int, member: int, seed: int) -> dict[str, Episode]:
        game_sampling = sampling
        if sampling.seed is not None:  # each game of a group samples differently, reproducibly
            entropy = [sampling.seed % 2**32, seed % 2**32, member]
            game_sampling = dataclasses.replace(
                sampling, seed=int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)
            )
        async with limit:
            return await _play_game(env_factory, players, seed, group, game_sampling, env_id)

    return list(
        await asyncio.gather(
            *(one(group, member, seed) for group, seed in enumerate(seed_list) for member in range(group_size))
        )
    )


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

    Returns:
        One dict per game (seeds in order, ``group_size`` games each): agent -> its episode. A game
        that a player or the env stopped by raising is there too: both episodes hold
        ``metadata["error"]`` (``"Type: message"``; a player's is prefixed with its agent) and
        ``metadata["error_source"]`` (``"policy"`` or ``"env"``), and their outcome is ``"unfinished"``.

    Raises:
        ValueError: ``players`` does not name exactly the game's agents.
        TypeError: a player is neither a policy nor scripted.
        TokenMismatchError: a policy broke the token-prefix contract (Ctrl-C stops the match too).

    Call :func:`aplay_match` from code that already runs an event loop.

    Example:
        >>> from llmgym.envs.multiagent import tictactoe
        >>> games = play_match(tictactoe.env, {"player_0": tictactoe.MinimaxPlayer(1),
        ...                                   "player_1": tictactoe.MinimaxPlayer(2)}, seeds=[0, 1])
        >>> [g["player_0"].metadata["outcome"] for g in games], games[0]["player_1"].total_reward
        (['draw', 'draw'], 0.0)
    """
    return run_sync(
        aplay_match(
            env_factory,
            players,
            seeds,
            sampling=sampling,
            max_concurrency=max_concurrency,
            env_id=env_id,
            group_size=group_size,
        )
    )


@dataclass
class WinMatrix:
    """Results of every player against every other, from the row player's side, both seats together.

    Attributes:
        names: the players, in order.
        counts: ``counts[a][b]["win"|"draw"|"loss"]``: games ``a`` won, drew, lost against ``b``.
        mean_reward: ``mean_reward[a][b]``: ``a``'s mean total reward per finished game against ``b``
            (the games ``counts`` holds; a game stopped by an exception, a player's or the env's, counts in neither).
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

    @classmethod
    def from_games(
        cls, names: list[str], games: Iterable[tuple[tuple[str, Episode], tuple[str, Episode]]]
    ) -> WinMatrix:
        """The matrix of played games, each given as ``((a, a's episode), (b, b's episode))``, first seat first.

        A game counts for both players, each from its own side; a self-play game (``a == b``) counts once,
        from the first seat. A game stopped by an exception (outcome ``"unfinished"``) counts in neither
        ``counts`` nor ``mean_reward``. A seat's reward includes what it was paid before its first move
        (``metadata["reward_before_first_turn"]``: the first mover forfeited).

        Example:
            >>> def seat(outcome, reward):
            ...     return Episode("g", turn_rewards=[reward], metadata={"outcome": outcome})
            >>> m = WinMatrix.from_games(["a", "b"], [(("a", seat("win", 1.0)), ("b", seat("loss", -1.0)))])
            >>> m.counts["a"]["b"], m.counts["b"]["a"]["loss"], m.mean_reward["b"]["a"]
            ({'win': 1, 'draw': 0, 'loss': 0}, 1, -1.0)
        """
        counts = {a: {b: dict.fromkeys(OUTCOMES, 0) for b in names} for a in names}
        totals = {a: {b: 0.0 for b in names} for a in names}
        for first, second in games:
            sides = [(first, second)] if first[0] == second[0] else [(first, second), (second, first)]
            for (name, episode), (other, _) in sides:
                outcome = episode.metadata.get("outcome")
                if outcome in OUTCOMES:  # an unfinished game's partial reward would skew the mean
                    counts[name][other][outcome] += 1
                    totals[name][other] += episode.total_reward + episode.metadata.get("reward_before_first_turn", 0.0)
        mean = {a: {b: totals[a][b] / max(1, sum(counts[a][b].values())) for b in names} for a in names}
        return cls(names, counts, mean)


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
        The matrix and every game's episodes. A game stopped by an exception (a player's or the
        env's) is among the episodes, marked ``metadata["error"]``, and counts in neither
        ``counts`` nor ``mean_reward``.

    Raises:
        ValueError: the game does not have two players.
        Exception: whatever the env factory raises on its first call, made to learn the seats.

    Example:
        >>> from llmgym.envs.multiagent import connect_four
        >>> matrix, _ = win_matrix(connect_four.env, {"deep": connect_four.NegamaxPlayer(4),
        ...                                           "shallow": connect_four.NegamaxPlayer(1)}, seeds=[0])
        >>> matrix.counts["deep"]["shallow"], matrix.score("deep", "shallow")
        ({'win': 1, 'draw': 1, 'loss': 0}, 0.75)
    """
    names = list(players)
    seed_list = [int(s) for s in seeds]
    all_games: list[dict[str, Episode]] = []
    played: list[tuple[tuple[str, Episode], tuple[str, Episode]]] = []  # (name, episode) per seat, for the matrix
    agents = _agents_of(env_factory)  # the seats are needed before any game: an env that cannot be built stops here
    if len(agents) != 2:
        raise ValueError(f"win_matrix needs a two-player game, this one has agents {agents}")
    first, second = agents

    async def run() -> None:
        for a, b in [(a, b) for a in names for b in names if a != b or self_play]:
            games = await aplay_match(
                env_factory,
                {first: players[a], second: players[b]},
                seed_list,
                sampling=sampling,
                max_concurrency=max_concurrency,
                env_id=env_id,
            )
            all_games.extend(games)
            played.extend(((a, game[first]), (b, game[second])) for game in games)

    run_sync(run())
    return WinMatrix.from_games(names, played), all_games
