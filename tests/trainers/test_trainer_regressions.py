"""Regression tests for bugs found in review of the trainers (one test per bug, each fast)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llmgym.episode import Episode
from llmgym.trainers import grpo
from llmgym.trainers.advantages import compute_advantages
from llmgym.trainers.config import GRPOConfig


def one_turn(group: int, reward: float) -> Episode:
    return Episode("x", seed=group, group=group, turn_rewards=[reward], token_ids=[1, 2, 3], mask=[0, 1, 1])


def test_batch_scaling_under_data_parallel_uses_the_whole_batch_std(monkeypatch):
    """scale_rewards="batch" divides by the std of all ranks' episodes, not of this rank's share."""
    local = [one_turn(0, 1.0), one_turn(0, 0.0)]
    other_rank = [one_turn(1, 10.0), one_turn(1, 0.0)]
    trainer = grpo.GRPOTrainer.__new__(grpo.GRPOTrainer)  # only what _collect reads: no model, no envs
    trainer.config = GRPOConfig(scale_rewards="batch", turn_lambda=0.0, prompts_per_step=2, group_size=2)
    trainer.rank, trainer.world, trainer.curriculum = 0, 2, None
    trainer._local_seeds = lambda: [0]
    trainer._rollout = lambda seeds, step, first_group, attempt=0: list(local)

    def gather(items, world):  # rank 1 contributes its episodes (and, for solve rates, the same values)
        items = list(items)
        return items + (other_rank if items and isinstance(items[0], Episode) else items)

    monkeypatch.setattr(grpo, "gather_episodes", gather)
    monkeypatch.setattr(grpo, "sum_ranks", lambda value, world: float(value))
    whole = compute_advantages(local + other_rank, scale_rewards="batch", turn_lambda=0.0)
    rank1 = compute_advantages(other_rank, scale_rewards="batch", turn_lambda=0.0, batch_rewards=[[1.0], [0.0], [10.0], [0.0]])
    monkeypatch.setattr(grpo, "gather_objects", lambda value, world: [value, rank1.stat_sums])
    _, advantages, stats = trainer._collect(0)
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
    trainer = grpo.GRPOTrainer.__new__(grpo.GRPOTrainer)
    trainer.config = GRPOConfig(turn_lambda=0.0, prompts_per_step=1, group_size=2, resample_zero_signal=1)
    trainer.rank, trainer.world, trainer.curriculum = 0, 1, None
    trainer._local_seeds = lambda: [0]
    trainer._rollout = lambda seeds, step, first_group, attempt=0: [
        Episode.from_dict({**e.to_dict(), "group": first_group + e.group}) for e in rounds[attempt]]
    _, _, stats = trainer._collect(0)
    assert stats["groups/resampled"] == 1 and stats["episodes/errors"] == 1


def resume_with(tmp_path, monkeypatch, saved_curriculum, config_curriculum):
    from llmgym.trainers.curriculum import Curriculum

    folder = tmp_path / "checkpoints" / "step_000001"
    folder.mkdir(parents=True)
    state = {"step": 1, "episodes_seen": 4, "seed_sampler": np.random.default_rng(0).bit_generator.state}
    if saved_curriculum:
        state["curriculum"] = Curriculum("difficulty", [1, 2]).state_dict()
    (folder / "trainer_state.json").write_text("{}")
    monkeypatch.setattr(grpo, "load_checkpoint", lambda folder, model, optimizer: state)
    trainer = grpo.GRPOTrainer.__new__(grpo.GRPOTrainer)
    trainer.config = GRPOConfig(out=str(tmp_path))
    trainer.out, trainer.model = tmp_path, None
    trainer.optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # _resume sets the configured lr
    trainer.seed_sampler = np.random.default_rng(1)
    trainer.curriculum = Curriculum("difficulty", [1, 2]) if config_curriculum else None
    trainer._resume(trainer._checkpoint_to_resume())
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
