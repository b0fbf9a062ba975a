"""Self-play GRPO: one policy plays every seat of a multi-agent game, against itself, its snapshots or bots.

Holds :class:`SelfPlayGenerator`, the :class:`~llmgym.trainers.generation.Generator` the GRPO
trainer plays a multi-agent id (:data:`llmgym.envs.multiagent.MULTIAGENT_ENVS`) with, the
:class:`ScheduledGame` it plans, :class:`GameCounts` (a step's results by seat and opponent) and
:func:`role_group`. The game itself comes from the caller, as
:class:`~llmgym.envs.multiagent.evaluation.MultiAgentGame` (``llmgym train grpo`` makes it): the
trainers never import the envs (docs/architecture.md).

A step plays ``prompts_per_step`` seeds x ``group_size`` games through the game's ``play``
(:func:`~llmgym.envs.multiagent.rollout.aplay_match`), each game's opponent drawn from the
``opponents`` mix (:mod:`llmgym.trainers.opponents`) with a generator seeded by (run seed, step,
rank, round), so a resumed run plays the same games. Against ``self`` the trained policy sits in
every seat and every seat's episode trains; against anything else it takes seat 0 in one game of
the seed and seat 1 in the next, and only its own episodes train. Each player's chat already says
which seat it plays (the envs tell it), so one policy can learn every role.

A step's games are played at once (up to ``concurrency``): the trained policy decodes every seat it
plays through its one batched policy, each pool snapshot through its own. Generation is dominated by
the prompts, not the replies: an OpenSpiel game's chat starts with some 400 tokens of rules, for a
reply of a few tokens. With ``rollout_precision="bf16"`` the trained policy and the snapshots keep a
KV cache slot per episode, so a turn evaluates only what no slot holds yet (the rules are shared by
every chat); with ``fp32`` every turn evaluates the whole chat again (docs/self-play.md, The budget).

Role-conditioned advantages (SPIRAL, arXiv 2506.24119): a trained episode's GRPO group is its
(seed, seat) pair, :func:`role_group`, so each seat is compared with the same seat's other games.
A baseline shared by the seats would credit the seat's own expected return (Kuhn poker's second
player wins 1/18 a hand at equilibrium) to the actions of every episode of that seat.

A game an env or OpenSpiel error stopped keeps its trained episodes with ``metadata["error"]``: the
collector counts them in ``episodes/errors`` and leaves them out of the loss. A seat that never
moved (the other player forfeited first) has nothing to train and is left out, not counted as an
error; its result still counts in the step's game metrics.

Left out: generation on a server (``base_url``), FSDP, Ray envs and curricula (refused by the
config checks: the frozen snapshots and the ratings need the trained weights in this process).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist

from llmgym.episode import Episode
from llmgym.policy import SamplingParams
from llmgym.rollout import run_sync
from llmgym.trainers.config import GRPOConfig
from llmgym.trainers.curriculum import Curriculum
from llmgym.trainers.distributed import sum_ranks
from llmgym.trainers.generation import Generator
from llmgym.trainers.opponents import POOL, SELF, SnapshotPool, draw_opponent

__all__ = ["SelfPlayGenerator", "ScheduledGame", "GameCounts", "role_group", "RATINGS_FILE", "OUTCOMES"]

#: A finished game's outcomes, as the multi-agent envs record them in ``metadata["outcome"]``.
OUTCOMES = ("win", "draw", "loss")

#: One row per rating round, in the run folder.
RATINGS_FILE = "ratings.jsonl"


def role_group(seed_group: int, agent_index: int, num_agents: int) -> int:
    """The GRPO group of a trained episode: one per (seed, seat), so the baseline is the seat's own.

    Example:
        >>> [role_group(g, a, 2) for g in (0, 1) for a in (0, 1)]
        [0, 1, 2, 3]
    """
    return seed_group * num_agents + agent_index


@dataclass(frozen=True)
class ScheduledGame:
    """One game of a step, as planned before it is played.

    Attributes:
        group: the index of its seed among the round's seeds.
        seed: the env seed.
        member: the game's place among the seed's ``group_size`` games.
        kind: the opponent kind (``self``, ``pool`` or a scripted player's name).
        trained: the agents the trained policy plays.
        snapshot: the pool snapshot's step when ``kind`` is ``pool``.
    """

    group: int
    seed: int
    member: int
    kind: str
    trained: tuple[str, ...]
    snapshot: int | None = None


class GameCounts:
    """A step's game results as sums under fixed keys, the same on every rank (so ranks can sum them).

    Args:
        agents: the game's agents.
        kinds: the opponent kinds of the mix.
    """

    def __init__(self, agents: list[str], kinds: list[str]):
        self.agents, self.kinds = agents, kinds
        self.values = self._zeros()

    def _zeros(self) -> dict[str, float]:
        keys = ["games/finished", "games/failed", "turns", "illegal_moves"]
        keys += [f"seat/{a}/{k}" for a in self.agents for k in ("reward_sum", "episodes")]
        keys += [f"opponent/{kind}/{o}" for kind in self.kinds for o in OUTCOMES]
        return dict.fromkeys(keys, 0.0)

    def add_game(self, game: ScheduledGame, episodes: dict[str, Episode]) -> None:
        """Count one game from the trained seats' side (a failed game only as failed)."""
        if any("error" in e.metadata for e in episodes.values()):
            self.values["games/failed"] += 1
            return
        self.values["games/finished"] += 1
        for agent in game.trained:
            episode = episodes[agent]
            reward = episode.total_reward + episode.metadata.get("reward_before_first_turn", 0.0)
            self.values[f"seat/{agent}/reward_sum"] += reward
            self.values[f"seat/{agent}/episodes"] += 1
            if episode.metadata.get("outcome") in OUTCOMES:
                self.values[f"opponent/{game.kind}/{episode.metadata['outcome']}"] += 1
            self.values["turns"] += episode.num_turns
            self.values["illegal_moves"] += episode.metadata.get("illegal_moves", 0)

    def take(self) -> dict[str, float]:
        """The counts so far, which start again from zero."""
        values, self.values = self.values, self._zeros()
        return values

    def metrics(self, counts: dict[str, float]) -> dict[str, float]:
        """The logged numbers of :meth:`take`'s counts (summed over ranks).

        ``seat/<agent>/reward`` (mean total reward of the trained policy's episodes in that seat),
        ``opponent/<kind>/games`` and ``win_rate``, ``draw_rate``, ``loss_rate`` (from the trained
        policy's side; against ``self`` every game counts once per seat), ``legal_action_rate`` (the
        share of the trained policy's turns whose reply was a legal move), ``games/finished|failed``.
        """
        metrics = {"games/finished": counts["games/finished"], "games/failed": counts["games/failed"]}
        for agent in self.agents:
            if counts[f"seat/{agent}/episodes"]:
                metrics[f"seat/{agent}/reward"] = counts[f"seat/{agent}/reward_sum"] / counts[f"seat/{agent}/episodes"]
        for kind in self.kinds:
            games = sum(counts[f"opponent/{kind}/{o}"] for o in OUTCOMES)
            if games:
                metrics[f"opponent/{kind}/games"] = games
                metrics.update({f"opponent/{kind}/{o}_rate": counts[f"opponent/{kind}/{o}"] / games for o in OUTCOMES})
        if counts["turns"]:
            metrics["legal_action_rate"] = 1.0 - counts["illegal_moves"] / counts["turns"]
        return metrics


class SelfPlayGenerator(Generator):
    """Plays the steps' games of a multi-agent id: the trained policy against the opponent mix.

    Args:
        trained: the generator of the trained policy (in-process); its policy plays the trained seats.
        game: the game (:class:`~llmgym.envs.multiagent.evaluation.MultiAgentGame`): ``agents``, ``scripted``,
            ``play``, ``league`` and ``nash_conv``.
        model: the trained (peft) model: snapshots are taken of it, the exploitability is read from it.
        tokenizer: its tokenizer.
        out: the run folder (``pool/``, ``ratings.jsonl``).
        saved: the checkpoint state of a resumed run; ``None`` starts the pool with the initial weights.
        world: the number of ranks.
        config, env_id, curriculum, rank: as for :class:`~llmgym.trainers.generation.Generator`.
    """

    def __init__(
        self,
        trained: Generator,
        game: Any,
        model: Any,
        tokenizer: Any,
        out: Path,
        saved: dict[str, Any] | None,
        config: GRPOConfig,
        env_id: str,
        curriculum: Curriculum | None,
        rank: int,
        world: int,
    ):
        super().__init__(config, env_id, curriculum, rank)
        self.trained, self.policy, self.game = trained, trained.policy, game
        self.model, self.tokenizer, self.out, self.world = model, tokenizer, Path(out), world
        self.agents: list[str] = list(game.agents)
        self.counts = GameCounts(self.agents, list(config.opponents))
        self.scripted = {kind: game.scripted[kind]() for kind in config.opponents if kind in game.scripted}
        self.pool = (
            SnapshotPool(self.out / "pool", config.pool_size, config.model, config.rollout_precision)
            if config.snapshot_every
            else None
        )
        self.batch_size = min(config.concurrency, config.prompts_per_step * config.group_size)
        self._start(saved)

    def _start(self, saved: dict[str, Any] | None) -> None:
        """A new run snapshots the initial weights and drops an old run's ratings; a resumed one restores its pool.

        Raises:
            ValueError: the checkpoint holds no self-play state (it is not a self-play run's).
        """
        ratings = self.out / RATINGS_FILE
        if saved is None:
            if self.pool is not None:
                self.pool.add(0, self.model, write=self.rank == 0)
            if self.rank == 0:
                ratings.unlink(missing_ok=True)
        else:
            if "self_play" not in saved:
                raise ValueError(f"the checkpoint in {self.out} holds no self-play state: resume it as it was trained")
            if self.pool is not None:
                self.pool.load_state_dict(saved["self_play"]["pool"])
            if self.rank == 0 and ratings.is_file():  # the rounds after the checkpoint are redone
                rows = [r for r in ratings.read_text().splitlines() if r and json.loads(r)["step"] <= saved["step"]]
                ratings.write_text("".join(f"{r}\n" for r in rows))
        self.tidy_pool()
        if self.world > 1:
            dist.barrier()

    # -- playing a step's games --------------------------------------------------------

    def rollout(self, seeds: list[int], step: int, attempt: int = 0) -> list[Episode]:
        """Play ``group_size`` games per distinct seed; returns the trained policy's episodes, grouped by role."""
        if not seeds:
            return []
        games = self.schedule(list(dict.fromkeys(seeds)), step, attempt)
        played = run_sync(self._play_all(games, step, attempt))
        episodes: list[Episode] = []
        for game, result in zip(games, played):
            self.counts.add_game(game, result)
            for agent in game.trained:
                episode = result[agent]
                if not episode.turn_rewards and "error" not in episode.metadata:
                    continue  # the game ended before this seat moved: nothing to train
                episode.group = role_group(game.group, self.agents.index(agent), len(self.agents))
                episode.metadata.update(opponent=game.kind, seed_group=game.group)
                episodes.append(episode)
        return episodes

    def schedule(self, seeds: list[int], step: int, attempt: int) -> list[ScheduledGame]:
        """The round's games: each one's opponent drawn from the mix; against another player, seats alternate."""
        config = self.config
        rng = np.random.default_rng([config.seed, step, self.rank, attempt])
        games = []
        for group, seed in enumerate(seeds):
            against = 0  # the seed's games against another player so far
            for member in range(config.group_size):
                kind = draw_opponent(config.opponents, rng)
                trained = tuple(self.agents)
                if kind != SELF:
                    trained, against = (self.agents[against % len(self.agents)],), against + 1
                snapshot = self.pool.steps[int(rng.integers(len(self.pool.steps)))] if kind == POOL else None
                games.append(ScheduledGame(group, int(seed), member, kind, trained, snapshot))
        return games

    async def _play_all(self, games: list[ScheduledGame], step: int, attempt: int) -> list[Any]:
        limit = asyncio.Semaphore(self.config.concurrency)
        return list(
            await asyncio.gather(*(self._play(game, self._sampling(game, step, attempt), limit) for game in games))
        )

    async def _play(
        self, game: ScheduledGame, sampling: SamplingParams, limit: asyncio.Semaphore
    ) -> dict[str, Episode]:
        """One game: each agent's episode (``metadata["illegal_moves"]``: its replies the env refused)."""
        opponent = self._opponent(game)
        players = {a: self.policy if a in game.trained else opponent for a in self.agents}
        async with limit:
            return await self.game.play(players, game.seed, sampling)

    def _opponent(self, game: ScheduledGame) -> Any:
        if game.kind == SELF:
            return self.policy
        if game.kind == POOL:
            return self.pool.policy(game.snapshot, self.model, self.tokenizer, self.batch_size)
        return self.scripted[game.kind]

    def _sampling(self, game: ScheduledGame, step: int, attempt: int) -> SamplingParams:
        """The game's sampling, seeded by (run seed, step, rank, round, seed group, member): runs repeat."""
        config = self.config
        entropy = [config.seed, step, self.rank, attempt, game.group, game.member]
        seed = int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)
        return SamplingParams(
            temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_new_tokens, seed=seed
        )

    # -- between steps ----------------------------------------------------------------------

    def before_update(self) -> None:
        self.trained.before_update()

    def after_update(self, version: int) -> None:
        """The trained policy gets the new weights; every ``snapshot_every`` steps they join the pool."""
        self.trained.after_update(version)
        if self.pool is not None and version % self.config.snapshot_every == 0:
            self.pool.add(version, self.model, write=self.rank == 0)
            if self.world > 1:
                dist.barrier()

    def step_metrics(self, step: int) -> dict[str, float]:
        """The step's game metrics (:meth:`GameCounts.metrics`), and the ratings and NashConv when due.

        Every rank must call it (the counts are summed over ranks); rank 0 plays the rating league.
        """
        config = self.config
        metrics = self.counts.metrics(sum_ranks(self.counts.take(), self.world))
        if self.rank == 0 and config.rate_every and step % config.rate_every == 0:
            metrics.update(self.rate(step))
        if self.rank == 0 and config.exploitability_every and step % config.exploitability_every == 0:
            metrics["exploitability/nash_conv"] = self.game.nash_conv(self.model, self.tokenizer)
        if self.world > 1:
            dist.barrier()
        return metrics

    def rate(self, step: int) -> dict[str, float]:
        """A league of the current policy, the game's scripted players and the pool's snapshots, rated.

        Each pair plays ``rate_games`` seeds in both seats, seeds from ``seed_pool`` on (never a training
        seed), the same every round. Appends a row to ``ratings.jsonl``; returns ``rating/<player>/ordinal``
        for every player and ``rating/current/score``.
        """
        config = self.config
        players: dict[str, Any] = {"current": self.policy}
        players.update({kind: factory() for kind, factory in self.game.scripted.items()})
        for snapshot in self.pool.steps if self.pool is not None else []:
            if snapshot != step:  # the snapshot of this very step is the current policy
                policy = self.pool.policy(snapshot, self.model, self.tokenizer, self.batch_size)
                players[SnapshotPool.name(snapshot)] = policy
        seed = int(np.random.SeedSequence([config.seed, step, 1]).generate_state(1)[0] >> 1)
        sampling = SamplingParams(
            temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_new_tokens, seed=seed
        )
        result = self.game.league(players, config.rate_games, config.seed_pool, sampling, config.concurrency)
        standings = [{**r.__dict__, "games": r.games, "score": r.score} for r in result.standings()]
        row = {"step": step, "games_per_pair": config.rate_games, "seed": config.seed_pool}
        row.update(failed_games=result.failed_games, standings=standings, scores=result.scores())
        with (self.out / RATINGS_FILE).open("a") as file:
            file.write(json.dumps(row) + "\n")
        metrics = {f"rating/{r.name}/ordinal": r.ordinal for r in result.standings()}
        if result.ratings["current"].score is not None:
            metrics["rating/current/score"] = result.ratings["current"].score
        return metrics

    # -- checkpoints ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores: the pool's snapshots."""
        return {"pool": self.pool.state_dict() if self.pool is not None else None}

    def tidy_pool(self) -> None:
        """Delete the snapshot folders the pool (as the newest checkpoint holds it) no longer lists (rank 0)."""
        if self.pool is not None and self.rank == 0:
            self.pool.tidy()

    def close(self) -> None:
        self.trained.close()
