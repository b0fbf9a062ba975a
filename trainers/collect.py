"""One GRPO step's episodes: draw env seeds, play a group per seed, replace groups without signal.

Holds :class:`EpisodeCollector` and its result :class:`Rollouts`. A step draws
``prompts_per_step`` env seeds (the same draw on every rank; each rank plays
its share) and plays ``group_size`` episodes per seed through a
:class:`~llmgym.trainers.generation.Generator`. Episodes a policy error cut
short are dropped and counted. A group whose episodes all score alike carries
no signal (:func:`~llmgym.trainers.advantages.group_signal`); up to
``resample_zero_signal`` times such groups are replaced by groups of fresh
seeds, never a seed the step has played already (DAPO's dynamic sampling).
Groups left out by ``mask_truncated`` are not replaced: new seeds would not
make a cut reply fit.

The collector computes no advantages: the trainer does, once, from
:class:`Rollouts`. Data parallelism: each rank holds whole groups;
:attr:`Rollouts.everyone` is every rank's episodes (gathered here, a
collective), so ``scale_rewards="batch"`` and the logged rewards describe the
global batch, not one rank's share; :meth:`Rollouts.counts` are this rank's,
which the trainer sums over ranks before :func:`rollout_metrics` reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmgym.episode import Episode
from llmgym.trainers.advantages import cut_short, group_key, group_signal
from llmgym.trainers.config import GRPOConfig
from llmgym.trainers.curriculum import Curriculum, group_solve_rates
from llmgym.trainers.distributed import gather_episodes
from llmgym.trainers.generation import Generator
from llmgym.trainers.metrics import reward_stats

__all__ = ["EpisodeCollector", "Rollouts", "rollout_metrics"]


@dataclass
class Rollouts:
    """One step's episodes, and what happened while they were played.

    Attributes:
        episodes: this rank's episodes to train on.
        everyone: every rank's ``episodes``, in rank order.
        errors: this rank's episodes dropped because a policy error cut them short (every round).
        first_groups: this rank's groups in the first round, before any was replaced.
        first_zero_signal: how many of them carried no signal.
        first_solve_rates: every rank's first-round groups' fractions of solved episodes.
        resampled: how many of this rank's groups were replaced by groups of fresh seeds.
        curriculum: the curriculum's metrics after this step (empty without a curriculum).
    """

    episodes: list[Episode]
    everyone: list[Episode]
    errors: int
    first_groups: int
    first_zero_signal: int
    first_solve_rates: list[float]
    resampled: int
    curriculum: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, float]:
        """This rank's counts, which :func:`rollout_metrics` reports summed over the ranks."""
        return {
            "episodes/errors": float(self.errors),
            "groups/first": float(self.first_groups),
            "groups/zero_signal": float(self.first_zero_signal),
            "groups/resampled": float(self.resampled),
            "tokens/total": float(sum(len(e.token_ids) for e in self.episodes)),
            "tokens/generated": float(sum(sum(e.mask) for e in self.episodes)),
        }


def rollout_metrics(
    rollouts: Rollouts, counts: dict[str, float], advantage_stats: dict[str, float] | None = None
) -> dict[str, float]:
    """The logged numbers of a step's episodes.

    Args:
        rollouts: the step's rollouts (its rewards are read from :attr:`Rollouts.everyone`).
        counts: :meth:`Rollouts.counts` summed over the ranks (one rank: its own).
        advantage_stats: the whole batch's advantage statistics
            (:func:`~llmgym.trainers.advantages.merge_advantage_stats`), logged among them.
    """
    everyone = rollouts.everyone
    stats = reward_stats(everyone)
    stats.update(advantage_stats or {})
    stats.update(
        {
            "episodes/errors": counts["episodes/errors"],
            "episodes/turns_mean": float(np.mean([e.num_turns for e in everyone])) if everyone else 0.0,
            "episodes/truncated_fraction": float(np.mean([e.truncated for e in everyone])) if everyone else 0.0,
            # both of the first round (before resampling): how often the policy's groups carry no signal
            "groups/zero_signal": counts["groups/zero_signal"],
            "groups/zero_signal_fraction": counts["groups/zero_signal"] / max(counts["groups/first"], 1.0),
            "groups/resampled": counts["groups/resampled"],
            "groups/all_solved": float(sum(rate == 1.0 for rate in rollouts.first_solve_rates)),
            "groups/all_failed": float(sum(rate == 0.0 for rate in rollouts.first_solve_rates)),
            "tokens/total": counts["tokens/total"],
            "tokens/generated": counts["tokens/generated"],
        }
    )
    stats.update(rollouts.curriculum)
    return stats


class EpisodeCollector:
    """Plays each step's groups through ``generator`` and draws the env seeds they start from.

    Args:
        config: the run's settings (``seed``, ``seed_pool``, ``prompts_per_step``,
            ``resample_zero_signal``, ``solve_threshold``, the advantage settings).
        generator: plays the episodes.
        rank: this process's rank.
        world: the number of ranks.
        curriculum: updated with every step's first-round solve rates, if given.

    Attributes:
        seed_sampler: draws the steps' env seeds, in step order (a checkpoint stores its state).
    """

    def __init__(
        self,
        config: GRPOConfig,
        generator: Generator,
        rank: int = 0,
        world: int = 1,
        curriculum: Curriculum | None = None,
    ):
        self.config, self.generator, self.rank, self.world, self.curriculum = config, generator, rank, world, curriculum
        self.seed_sampler = np.random.default_rng(config.seed)
        self._drawn: list[int] = []  # the newest draw, every rank's share: resampling never plays one of them

    def draw_seeds(self) -> list[int]:
        """Draw the next step's env seeds (the same draw on every rank); returns this rank's share."""
        self._drawn = self.seed_sampler.choice(
            self.config.seed_pool, size=self.config.prompts_per_step, replace=False
        ).tolist()
        return self._drawn[self.rank :: self.world]

    def sampler_state(self) -> dict[str, Any]:
        """The seed sampler's state, to checkpoint."""
        return self.seed_sampler.bit_generator.state

    def load_sampler_state(self, state: dict[str, Any]) -> None:
        """Continue the seed draws of a checkpointed run."""
        self.seed_sampler.bit_generator.state = state

    def collect(self, step: int, first_round: list[Episode] | None = None) -> Rollouts:
        """Play the 0-based ``step``'s groups: the first round, then up to ``resample_zero_signal`` rounds.

        Each later round replaces the groups without signal. Every rank must call it
        (it gathers every rank's episodes and solve rates).

        Args:
            step: the 0-based step.
            first_round: the first round's episodes when they were generated ahead
                (``async_generation``); ``None`` draws seeds and plays them now.

        Raises:
            RuntimeError: no episode of the step can be trained on (every one failed).
        """
        config = self.config
        episodes = first_round if first_round is not None else self.generator.rollout(self.draw_seeds(), step)
        if episodes and all(_unusable(e) for e in episodes):
            reasons = {
                e.metadata.get("error") or e.metadata.get("token_ids_dropped") or "no token ids" for e in episodes
            }
            raise RuntimeError(f"no episode of step {step + 1} can be trained on: {sorted(map(str, reasons))[:3]}")
        errors = sum(1 for e in episodes if _unusable(e))
        episodes = [e for e in episodes if not _unusable(e)]
        signal = group_signal(episodes, config.turn_lambda)
        first_groups, first_zero_signal, resampled = len(signal), sum(not s for s in signal.values()), 0
        first_solve_rates = gather_episodes(group_solve_rates(episodes, config.solve_threshold), self.world)
        resample_rng = np.random.default_rng([config.seed, step, self.rank])
        used = set(self._drawn) | {e.seed for e in episodes}
        for attempt in range(1, config.resample_zero_signal + 1):
            # groups without signal; with mask_truncated, not those whose every episode is cut short anyway
            empty = sorted(
                {e.group for e in episodes if not signal[group_key(e)] and not (config.mask_truncated and cut_short(e))}
            )
            fresh = _fresh_seeds(resample_rng, config.seed_pool, len(empty), used)
            if not fresh:
                break
            used.update(fresh)
            episodes, dropped = self._replace(episodes, set(empty[: len(fresh)]), fresh, step, attempt)
            errors, resampled = errors + dropped, resampled + len(fresh)
            signal = group_signal(episodes, config.turn_lambda)
        rollouts = Rollouts(
            episodes=episodes,
            everyone=gather_episodes(episodes, self.world),
            errors=errors,
            first_groups=first_groups,
            first_zero_signal=first_zero_signal,
            first_solve_rates=first_solve_rates,
            resampled=resampled,
        )
        if self.curriculum is not None:  # the next step plays the new level
            rollouts.curriculum = self.curriculum.update(first_solve_rates)
        return rollouts

    def _replace(
        self, episodes: list[Episode], replaced: set[Any], fresh: list[int], step: int, attempt: int
    ) -> tuple[list[Episode], int]:
        """``episodes`` with the groups ``replaced`` swapped for groups of ``fresh`` seeds; and how many failed."""
        next_group = 1 + max((e.group for e in episodes), default=-1)
        played = self.generator.rollout(fresh, step, attempt)
        for episode in played:
            episode.group = next_group + (episode.group or 0)
        kept = [e for e in episodes if e.group not in replaced] + [e for e in played if not _unusable(e)]
        return kept, sum(1 for e in played if _unusable(e))


def _unusable(episode: Episode) -> bool:
    """Episodes a policy error cut short, or without token ids, cannot be trained on."""
    return "error" in episode.metadata or not episode.token_ids


def _fresh_seeds(rng: np.random.Generator, pool: int, count: int, used: set[int]) -> list[int]:
    """Up to ``count`` distinct seeds of ``[0, pool)`` not in ``used`` (fewer when the pool runs out)."""
    if count <= 0:
        return []
    if pool <= 4 * (len(used) + count):  # a small pool: choose among what is left
        left = [seed for seed in range(pool) if seed not in used]
        return [int(seed) for seed in rng.choice(left, size=min(count, len(left)), replace=False)] if left else []
    fresh: list[int] = []
    while len(fresh) < count:  # most of the pool is unused: a rejected draw is rare
        seed = int(rng.integers(0, pool))
        if seed not in used and seed not in fresh:
            fresh.append(seed)
    return fresh
