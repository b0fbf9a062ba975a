"""Training metrics (llmgym/trainers/metrics.py): the TensorBoard sink on resume and when missing; the reward plot."""

from __future__ import annotations

import math
import sys
import types

import pytest

from llmgym.trainers.metrics import MetricsLogger, plot_metrics


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
    """The ModuleNotFoundError for a missing tensorboard left metrics.jsonl open (a ResourceWarning, a leaked
    handle)."""
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
    monkeypatch.setattr(
        Axes, "plot", lambda self, x, y, *a, **k: drawn.append(list(y)) or real_plot(self, x, y, *a, **k)
    )
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        '{"step": 1, "reward/mean": 0.5, "reward/std": 0.1, "kl": 0.01}\n'
        '{"step": 2, "reward/mean": null, "reward/std": null, "kl": null}\n'
    )
    assert plot_metrics(metrics, tmp_path / "rewards.png").is_file()
    reward, kl = drawn
    assert reward[0] == 0.5 and math.isnan(reward[1])
    assert kl[0] == 0.01 and math.isnan(kl[1])
    metrics.write_text("")
    assert plot_metrics(metrics, tmp_path / "empty.png").is_file()  # no steps yet: an empty plot, no error
