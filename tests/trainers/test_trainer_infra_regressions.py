"""Regression tests for bugs found in review of the trainers' infrastructure (checkpoints, metrics, batching...)."""

from __future__ import annotations

import math
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from llmgym.trainers import checkpoint
from llmgym.trainers.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from llmgym.trainers.metrics import MetricsLogger, plot_metrics


def tiny() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(2, 2)
    return model, torch.optim.AdamW(model.parameters())


def names(root) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_a_run_started_over_keeps_its_checkpoint_and_resumes_from_it(tmp_path):
    """A fresh run in a folder holding an earlier run's later checkpoints pruned the one it had just written."""
    model, optimizer = tiny()
    for step in (5, 10):
        save_checkpoint(tmp_path, step, model, optimizer, {"run": "old"}, keep=2)
    folder = save_checkpoint(tmp_path, 1, model, optimizer, {"run": "new"}, keep=2)
    assert folder.is_dir()
    assert latest_checkpoint(tmp_path) == folder  # not the earlier run's step 10
    assert names(tmp_path) == ["step_000001"]


def test_checkpoints_are_ordered_by_step_number_past_six_digits(tmp_path):
    model, optimizer = tiny()
    for step in (999_999, 1_000_000, 1_000_001):
        save_checkpoint(tmp_path, step, model, optimizer, {}, keep=2)
    assert names(tmp_path) == ["step_1000000", "step_1000001"]
    assert latest_checkpoint(tmp_path).name == "step_1000001"


def test_keep_counts_the_new_checkpoint_and_the_ones_before_it(tmp_path):
    model, optimizer = tiny()
    save_checkpoint(tmp_path, 1, model, optimizer, {}, keep=3)
    save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=3)
    assert names(tmp_path) == ["step_000001", "step_000002"]
    for step in (3, 4):
        save_checkpoint(tmp_path, step, model, optimizer, {}, keep=3)
    assert names(tmp_path) == ["step_000002", "step_000003", "step_000004"]
    save_checkpoint(tmp_path, 5, model, optimizer, {}, keep=1)
    assert names(tmp_path) == ["step_000005"]


def test_a_kill_while_overwriting_a_checkpoint_leaves_a_loadable_one(tmp_path, monkeypatch):
    """Re-saving a step deleted the old folder in place: a kill mid-delete left trainer_state.json without weights."""
    model, optimizer = tiny()
    save_checkpoint(tmp_path, 1, model, optimizer, {"episodes_seen": 4}, keep=2)
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, *args, **kwargs):
        weights = Path(path) / "model.safetensors"
        if "step_000001" in Path(path).name and weights.exists():  # the old checkpoint: die after its first file
            weights.unlink()
            raise KeyboardInterrupt
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 1, model, optimizer, {"episodes_seen": 8}, keep=2)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", real_rmtree)
    folder = latest_checkpoint(tmp_path)
    assert folder is not None
    assert load_checkpoint(folder, *tiny())["step"] == 1


def test_a_save_cut_short_by_a_kill_does_not_leave_its_temporary_folder_forever(tmp_path):
    model, optimizer = tiny()
    leftover = tmp_path / ".step-killed"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"\0" * 16)
    save_checkpoint(tmp_path, 1, model, optimizer, {}, keep=2)
    assert names(tmp_path) == ["step_000001"]


class RecordingWriter:
    """A stand-in for TensorBoard's ``SummaryWriter`` (tensorboard is an optional extra)."""

    made: list[dict] = []

    def __init__(self, log_dir, purge_step=None):
        RecordingWriter.made.append({"log_dir": log_dir, "purge_step": purge_step})

    def add_scalar(self, *args):
        pass

    def close(self):
        pass


def test_a_resumed_run_purges_tensorboard_events_of_the_steps_it_redoes(tmp_path, monkeypatch):
    """On resume TensorBoard kept the first attempt's later steps: two curves over the same steps."""
    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = RecordingWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    RecordingWriter.made.clear()
    MetricsLogger(tmp_path, report_to=["tensorboard"]).close()
    MetricsLogger(tmp_path, resume_step=2, report_to=["tensorboard"]).close()
    assert [w["purge_step"] for w in RecordingWriter.made] == [None, 3]  # events from step 3 on are dropped


def test_a_missing_sink_package_leaves_no_open_metrics_file(tmp_path, monkeypatch):
    """The ModuleNotFoundError for a missing tensorboard left metrics.jsonl open (a ResourceWarning, a leaked handle)."""
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if tensorboard were missing
    opened = []
    real_open = open

    def recording_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        opened.append(handle)
        return handle

    monkeypatch.setattr("builtins.open", recording_open)
    with pytest.raises(ModuleNotFoundError, match="pip install tensorboard"):
        MetricsLogger(tmp_path, report_to=["tensorboard"])
    monkeypatch.undo()
    assert opened and all(handle.closed for handle in opened)


def test_the_plot_leaves_a_gap_for_null_metrics_instead_of_drawing_zero(tmp_path, monkeypatch):
    """A step whose KL or reward was NaN (logged as null) was drawn as 0, hiding a divergence."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    drawn = []
    real_plot = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda self, x, y, *a, **k: drawn.append(list(y)) or real_plot(self, x, y, *a, **k))
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "reward/mean": 0.5, "reward/std": 0.1, "kl": 0.01}\n'
                       '{"step": 2, "reward/mean": null, "reward/std": null, "kl": null}\n')
    assert plot_metrics(metrics, tmp_path / "rewards.png").is_file()
    reward, kl = drawn
    assert reward[0] == 0.5 and math.isnan(reward[1])
    assert kl[0] == 0.01 and math.isnan(kl[1])
    metrics.write_text("")
    assert plot_metrics(metrics, tmp_path / "empty.png").is_file()  # no steps yet: an empty plot, no error


def test_trainers_package_exports_the_trainers_like_trl():
    import llmgym.trainers as trainers
    from llmgym.trainers import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer, load_config
    from llmgym.trainers.config import GRPOConfig as config_home
    from llmgym.trainers.grpo import GRPOTrainer as trainer_home

    assert GRPOTrainer is trainer_home and GRPOConfig is config_home
    assert {SFTConfig.__name__, SFTTrainer.__name__, load_config.__name__} == {"SFTConfig", "SFTTrainer", "load_config"}
    assert set(trainers.__all__) <= set(dir(trainers))
    with pytest.raises(AttributeError, match="Nope"):
        trainers.Nope  # noqa: B018


def test_saving_weights_shows_no_transformers_progress_bar(tmp_path, capfd):
    # "Writing model shards" bars broke into the trainer's own progress bar and showed with progress=False
    from transformers.utils import logging as hf_logging

    from llmgym.trainers.checkpoint import save_weights
    from llmgym.wrappers.models import tiny_random_model

    model, tokenizer = tiny_random_model(seed=0)
    assert hf_logging.is_progress_bar_enabled()
    save_weights(model, tokenizer, tmp_path / "final")
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the user's setting is restored
    assert (tmp_path / "final" / "model.safetensors").is_file()
