"""Regression tests for bugs found in review of the trainers (one test per bug, each fast)."""

from __future__ import annotations

import numpy as np
import pytest

from llmgym.episode import Episode
from llmgym.trainers import collect, grpo
from llmgym.trainers.advantages import compute_advantages
from llmgym.trainers.collect import EpisodeCollector
from llmgym.trainers.config import GRPOConfig
from llmgym.trainers.generation import Generator

from tests.trainers.toy_env import ENV_REF


class ScriptedGenerator(Generator):
    """Plays no env: round ``attempt`` (0 = the first, then resampling rounds) returns ``rounds[attempt]``."""

    def __init__(self, config: GRPOConfig, rounds: list[list[Episode]]):
        super().__init__(config, env_id="scripted", curriculum=None, rank=0)
        self.rounds = rounds

    def rollout(self, seeds, step, attempt=0):
        return list(self.rounds[attempt])


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
    monkeypatch.setattr(collect, "sum_ranks", lambda value, world: float(value))
    whole = compute_advantages(local + other_rank, scale_rewards="batch", turn_lambda=0.0)
    rank1 = compute_advantages(other_rank, scale_rewards="batch", turn_lambda=0.0, batch_rewards=[[1.0], [0.0], [10.0], [0.0]])
    monkeypatch.setattr(collect, "gather_objects", lambda value, world: [value, rank1.stat_sums])
    rollouts = collector.collect(0)
    advantages = rollouts.advantages(config)
    stats = rollouts.metrics(advantages)
    np.testing.assert_allclose(advantages.outcome, whole.outcome[:2])
    # the logged advantage statistics are the global batch's too, not rank 0's share
    assert stats["episodes/kept"] == 4 and stats["advantage/abs_max"] == pytest.approx(np.abs(whole.outcome).max())
    assert advantages.outcome[0] == pytest.approx(0.5 / (np.std([1.0, 0.0, 10.0, 0.0], ddof=1) + 1e-4))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(max_loss_tokens=-5), "max_loss_tokens"),  # Dr. GRPO's normalizer: negative would flip the loss's sign
        (dict(max_grad_norm=0.0), "max_grad_norm"),  # clipping to 0 would zero every gradient: no learning
        (dict(concurrency=0), "concurrency"),  # was reported as the policy's batch_size
    ],
)
def test_config_rejects_values_that_silently_break_training(settings, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**settings)
    GRPOConfig(max_loss_tokens=None, max_grad_norm=None)  # None keeps its documented meaning


def test_sft_config_rejects_a_zero_clipping_norm():
    from llmgym.trainers.config import SFTConfig

    with pytest.raises(ValueError, match="max_grad_norm"):
        SFTConfig(max_grad_norm=0.0)


def test_episode_errors_of_resampled_groups_are_counted(monkeypatch):
    """``episodes/errors`` counts the episodes dropped in every rollout round, resampling rounds included."""
    rounds = [
        [one_turn(0, 1.0), one_turn(0, 1.0)],  # zero signal: resampled once
        [one_turn(0, 1.0), Episode("x", seed=7, group=0, turn_rewards=[0.0], metadata={"error": "boom"})],
    ]
    config = GRPOConfig(turn_lambda=0.0, prompts_per_step=1, group_size=2, resample_zero_signal=1)
    rollouts = EpisodeCollector(config, ScriptedGenerator(config, rounds)).collect(0)
    stats = rollouts.metrics(rollouts.advantages(config))
    assert stats["groups/resampled"] == 1 and stats["episodes/errors"] == 1


def resume_with(tmp_path, monkeypatch, saved_curriculum, config_curriculum):
    """A trainer resumed from a checkpoint saved with or without a curriculum, configured with or without one."""
    pytest.importorskip("transformers")
    from llmgym.trainers.curriculum import Curriculum

    folder = tmp_path / "checkpoints" / "step_000001"
    folder.mkdir(parents=True)
    state = {"step": 1, "episodes_seen": 4, "seed_sampler": np.random.default_rng(0).bit_generator.state}
    if saved_curriculum:
        state["curriculum"] = Curriculum("difficulty", [1, 2]).state_dict()
    (folder / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(grpo, "load_checkpoint", lambda folder, model, optimizer: state)
    curriculum = dict(curriculum_kwarg="difficulty", curriculum_levels=[1, 2]) if config_curriculum else {}
    config = GRPOConfig(env_id=ENV_REF, model="tiny-random", out=str(tmp_path), progress=False, **curriculum)
    trainer = grpo.GRPOTrainer(config, resume=True)
    trainer.close()
    return trainer


@pytest.mark.parametrize("saved, configured", [(True, False), (False, True)])
def test_resume_with_or_without_a_curriculum_the_checkpoint_lacks_is_an_error(tmp_path, monkeypatch, saved, configured):
    """docs/training.md: resuming with another curriculum kwarg is an error (none counts as another)."""
    with pytest.raises(ValueError, match="curriculum"):
        resume_with(tmp_path, monkeypatch, saved, configured)
    trainer = resume_with(tmp_path / "same", monkeypatch, saved, saved)  # the same settings resume
    assert trainer.step == 1


@pytest.mark.parametrize("field, value", [("keep_checkpoints", 0), ("top_p", 0.0), ("top_p", 1.5)])
def test_config_rejects_checkpoint_count_and_top_p_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        GRPOConfig(env_id="llmgym/Wordle-v0", **{field: value})


def test_load_config_checks_types_and_converts_lossless_values(tmp_path):
    from llmgym.trainers.config import SFTConfig, load_config

    path = tmp_path / "cfg.toml"
    path.write_text('env_id = "llmgym/Wordle-v0"\nsteps = "5"\nlearning_rate = 1\n')
    config = load_config(path)
    assert config.steps == 5 and isinstance(config.learning_rate, float)
    path.write_text('env_id = "llmgym/Wordle-v0"\nmicro_batch_size = 2.5\nreport_to = "wandb"\n')
    with pytest.raises(ValueError, match=r"micro_batch_size: .*fractional.*; report_to: .*list"):
        load_config(path)
    path.write_text('env_id = "llmgym/Wordle-v0"\n')
    with pytest.raises(ValueError, match="steps: .*integer"):  # command-line overrides are checked too
        load_config(path, steps="five")
    path.write_text('episodes = "runs/e.jsonl"\nepochs = "two"\n')
    with pytest.raises(ValueError, match="epochs: .*integer"):
        load_config(path, SFTConfig)
