"""The episode collector (llmgym/trainers/collect.py): a step's rollouts, zero-signal resampling, its logged numbers.

The generators here play no env: they return scripted episodes, round by round.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmgym.episode import Episode
from llmgym.trainers import collect
from llmgym.trainers.advantages import compute_advantages, merge_advantage_stats
from llmgym.trainers.collect import EpisodeCollector, rollout_metrics
from llmgym.trainers.config import GRPOConfig
from llmgym.trainers.generation import Generator


class ScriptedGenerator(Generator):
    """Plays no env: round ``attempt`` (0 = the first, then resampling rounds) returns ``rounds[attempt]``."""

    def __init__(self, config: GRPOConfig, rounds: list[list[Episode]]):
        super().__init__(config, env_id="scripted", curriculum=None, rank=0)
        self.rounds = rounds

    def rollout(self, seeds, step, attempt=0):
        return list(self.rounds[attempt])


def step_advantages(config: GRPOConfig, rollouts):
    """The step's advantages as the trainer computes them (the batch scale over every rank's episodes)."""
    return compute_advantages(
        rollouts.episodes,
        scale_rewards=config.scale_rewards,
        turn_lambda=config.turn_lambda,
        mask_truncated=config.mask_truncated,
        batch_rewards=[e.turn_rewards for e in rollouts.everyone],
    )


def one_rank_metrics(rollouts, advantages):
    """The logged numbers of a one-rank run."""
    return rollout_metrics(rollouts, rollouts.counts(), advantages.stats)


def one_turn(group: int, reward: float) -> Episode:
    return Episode("x", seed=group, group=group, turn_rewards=[reward], token_ids=[1, 2, 3], mask=[0, 1, 1])


def test_batch_scaling_under_data_parallel_uses_the_whole_batch_std(monkeypatch):
    """scale_rewards="batch" divides by the std of all ranks' episodes, not of this rank's share."""
    local = [one_turn(0, 1.0), one_turn(0, 0.0)]
    other_rank = [one_turn(1, 10.0), one_turn(1, 0.0)]
    config = GRPOConfig(scale_rewards="batch", turn_lambda=0.0, prompts_per_step=2, group_size=2)
    collector = EpisodeCollector(config, ScriptedGenerator(config, [local]), rank=0, world=2)

    def gather(items, world):  # rank 1 contributes its episodes (and, for solve rates, the same values)
        items = list(items)
        return items + (other_rank if items and isinstance(items[0], Episode) else items)

    monkeypatch.setattr(collect, "gather_episodes", gather)
    whole = compute_advantages(local + other_rank, scale_rewards="batch", turn_lambda=0.0)
    rank1 = compute_advantages(
        other_rank, scale_rewards="batch", turn_lambda=0.0, batch_rewards=[[1.0], [0.0], [10.0], [0.0]]
    )
    rollouts = collector.collect(0)
    advantages = step_advantages(config, rollouts)
    # what the trainer logs: every rank's advantage sums merged
    stats = rollout_metrics(rollouts, rollouts.counts(), merge_advantage_stats([advantages.stat_sums, rank1.stat_sums]))
    np.testing.assert_allclose(advantages.outcome, whole.outcome[:2])
    # the logged advantage statistics are the global batch's too, not rank 0's share
    assert stats["episodes/kept"] == 4 and stats["advantage/abs_max"] == pytest.approx(np.abs(whole.outcome).max())
    assert advantages.outcome[0] == pytest.approx(0.5 / (np.std([1.0, 0.0, 10.0, 0.0], ddof=1) + 1e-4))


def test_episode_errors_of_resampled_groups_are_counted(monkeypatch):
    """``episodes/errors`` counts the episodes dropped in every rollout round, resampling rounds included."""
    rounds = [
        [one_turn(0, 1.0), one_turn(0, 1.0)],  # zero signal: resampled once
        [one_turn(0, 1.0), Episode("x", seed=7, group=0, turn_rewards=[0.0], metadata={"error": "boom"})],
    ]
    config = GRPOConfig(turn_lambda=0.0, prompts_per_step=1, group_size=2, resample_zero_signal=1)
    rollouts = EpisodeCollector(config, ScriptedGenerator(config, rounds)).collect(0)
    stats = one_rank_metrics(rollouts, step_advantages(config, rollouts))
    assert stats["groups/resampled"] == 1 and stats["episodes/errors"] == 1


# -- zero-signal resampling -------------------------------------------------------------------


def reply(group: int, reward: float, finish: str = "stop", seed: int | None = None) -> Episode:
    return Episode(
        "x",
        seed=group if seed is None else seed,
        group=group,
        turn_rewards=[reward],
        token_ids=[1, 2, 3],
        mask=[0, 1, 1],
        metadata={"finish_reasons": [finish]},
    )


class ResampleGenerator(Generator):
    """Plays no env: every group of the first round has no signal, groups of fresh seeds do."""

    def __init__(self, config: GRPOConfig):
        super().__init__(config, env_id="scripted", curriculum=None, rank=0)
        self.played: list[list[int]] = []

    def rollout(self, seeds, step, attempt=0):
        self.played.append(list(seeds))
        distinct = list(dict.fromkeys(seeds))  # as the real rollout: one group per distinct seed
        return [reply(i, float(attempt > 0 and j == 0), seed=s) for i, s in enumerate(distinct) for j in range(2)]


def collect_step(**settings):
    """Collect step 0 with a :class:`ResampleGenerator`: ``(rollouts, advantages, metrics, seeds played per round)``."""
    config = GRPOConfig(turn_lambda=0.0, group_size=2, **settings)
    generator = ResampleGenerator(config)
    rollouts = EpisodeCollector(config, generator).collect(0)
    advantages = step_advantages(config, rollouts)
    return rollouts, advantages, one_rank_metrics(rollouts, advantages), generator.played


def test_resampling_plays_distinct_unused_seeds_and_counts_what_it_played():
    """Regression: zero-signal resampling used to draw seeds already played, or the same fresh seed twice."""
    rollouts, _, stats, played = collect_step(prompts_per_step=2, seed_pool=3, resample_zero_signal=2)
    first, fresh = played  # only the seed the draw left is fresh; never a played one again, never twice
    assert len(first) == 2 and sorted(first + fresh) == [0, 1, 2]
    assert stats["groups/resampled"] == 1 and len(rollouts.everyone) == 4
    assert {e.seed for e in rollouts.episodes} == {first[1], fresh[0]}


def test_resampled_fresh_seeds_are_distinct_in_a_large_pool():
    rollouts, _, stats, played = collect_step(prompts_per_step=2, seed_pool=2**40, resample_zero_signal=1)
    first, fresh = played
    assert len(set(fresh)) == 2 and not set(fresh) & set(first)
    assert stats["groups/resampled"] == 2 and {e.seed for e in rollouts.episodes} == set(fresh)
    assert len(rollouts.episodes) == 4


def test_zero_signal_count_and_fraction_both_describe_the_first_sampling():
    _, advantages, stats, _ = collect_step(prompts_per_step=2, seed_pool=100, resample_zero_signal=1)
    assert advantages.zero_signal_groups == 0  # the final batch: both groups replaced by groups with signal
    assert stats["groups/zero_signal"] == 2 and stats["groups/zero_signal_fraction"] == 1.0
