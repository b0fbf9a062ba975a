"""Run metrics: one JSONL line per step, optional TensorBoard and Weights & Biases, a PNG of the curves.

Holds :class:`MetricsLogger`, :func:`plot_metrics`, :func:`reward_stats`,
:func:`peak_memory_mb` and :class:`StepClock` (a step's ``time/*`` metrics).
TensorBoard and W&B are imported only when a run reports to them; a missing
one raises ``ModuleNotFoundError`` naming the extra to install (the CLI
prints it as its usual one-line hint).
"""

from __future__ import annotations

import json
import math
import os
import resource
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from llmgym.episode import Episode

__all__ = ["MetricsLogger", "plot_metrics", "reward_stats", "peak_memory_mb", "StepClock"]


def reward_stats(episodes: list[Episode]) -> dict[str, float]:
    """Mean and std of the total reward and of each component's per-episode total.

    Example:
        >>> eps = [Episode("x", turn_rewards=[1.0], reward_components=[{"solved": 1.0}]),
        ...        Episode("x", turn_rewards=[0.0], reward_components=[{"solved": 0.0}])]
        >>> reward_stats(eps)["reward/solved/mean"], reward_stats(eps)["reward/std"]
        (0.5, 0.5)
    """
    if not episodes:
        return {}
    totals = np.array([e.total_reward for e in episodes])
    stats = {"reward/mean": float(totals.mean()), "reward/std": float(totals.std())}
    per_episode = [e.component_totals() for e in episodes]
    for name in sorted({n for c in per_episode for n in c}):
        values = np.array([c.get(name, 0.0) for c in per_episode])
        stats[f"reward/{name}/mean"] = float(values.mean())
        stats[f"reward/{name}/std"] = float(values.std())
    return stats


def peak_memory_mb() -> dict[str, float]:
    """Peak resident memory of this process (and peak CUDA memory when CUDA is in use), in MiB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"memory/peak_rss_mb": rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024}
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["memory/peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    except ImportError:
        pass
    return out


class StepClock:
    """The wall-clock marks of each training step, as metrics.

    Example:
        >>> clock = StepClock()
        >>> clock.start(); clock.generated(); clock.optimized()
        >>> sorted(clock.metrics(tokens=10.0))
        ['time/generation_s', 'time/optimizer_end_s', 'time/step_s', 'time/train_s', 'tokens_per_s']
    """

    def __init__(self) -> None:
        self.run_start = time.perf_counter()
        self._started = self._generated = self._optimized = self.run_start

    def start(self) -> None:
        """A step begins."""
        self._started = time.perf_counter()

    def generated(self) -> None:
        """Its episodes are there."""
        self._generated = time.perf_counter()

    def optimized(self) -> None:
        """Its optimizer steps are done."""
        self._optimized = time.perf_counter()

    @property
    def train_window(self) -> tuple[float, float]:
        """When the step's training began and ended (``time.perf_counter()``)."""
        return self._generated, self._optimized

    def metrics(self, tokens: float) -> dict[str, float]:
        """The step's timings so far; ``tokens`` counts those of the step's episodes."""
        step_s = time.perf_counter() - self._started
        return {
            "time/generation_s": self._generated - self._started,
            "time/train_s": self._optimized - self._generated,
            "time/step_s": step_s,
            "time/optimizer_end_s": self._optimized - self.run_start,
            "tokens_per_s": tokens / step_s,
        }


class MetricsLogger:
    """Appends one JSON line per step to ``out/metrics.jsonl``, and mirrors the numbers to TensorBoard and W&B if asked.

    Args:
        out: the run folder.
        resume_step: on resume, lines of later steps (written after the
            checkpoint the run resumes from) are dropped, so the file reads as one run.
        report_to: other sinks: ``"tensorboard"`` writes scalars to
            ``out/tensorboard``; ``"wandb"`` logs to a W&B run in ``out/wandb``
            (``WANDB_MODE=offline`` works without network), whose id is kept in
            ``out/wandb_run_id`` so a resumed run continues it.
        run_config: the run's settings, stored as the W&B run config.
        wandb_project: the W&B project (default ``$WANDB_PROJECT`` or ``"llmgym"``).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        resume_step: int | None = None,
        report_to: list[str] | tuple[str, ...] = (),
        run_config: dict[str, Any] | None = None,
        wandb_project: str | None = None,
    ):
        self.path = Path(out) / "metrics.jsonl"
        self._file = open_step_log(self.path, resume_step, _step_of)
        self._tensorboard = None
        self._wandb = None
        try:
            if "tensorboard" in report_to:
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError as err:
                    raise ModuleNotFoundError(
                        "reporting to TensorBoard needs the tensorboard package: pip install tensorboard",
                        name="tensorboard",
                    ) from err
                # on resume, TensorBoard hides the events of later steps (the run's first attempt),
                # as the JSONL drops them
                purge_step = None if resume_step is None else resume_step + 1
                self._tensorboard = SummaryWriter(str(Path(out) / "tensorboard"), purge_step=purge_step)
            if "wandb" in report_to:
                self._wandb = _start_wandb(Path(out), resume_step is not None, run_config or {}, wandb_project)
        except BaseException:
            self.close()  # a missing or failing sink: leak neither the JSONL file nor the sinks opened before it
            raise

    def log(self, metrics: dict[str, Any]) -> None:
        """Write one step's metrics (non-finite floats become ``null``)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        scalars = {
            k: v for k, v in clean.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"
        }
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, metrics["step"])
        if self._wandb is not None:
            self._wandb.log(scalars, step=int(metrics["step"]))

    def close(self) -> None:
        """Flush and close every sink (the W&B run is finished)."""
        self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _start_wandb(out: Path, resume: bool, run_config: dict[str, Any], project: str | None) -> Any:
    """A W&B run logging into ``out/wandb``; a resumed training run continues the run it started."""
    try:
        import wandb
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError('report_to=["wandb"] needs wandb: pip install "llmgym[wandb]"', name="wandb") from err
    id_file = out / "wandb_run_id"
    run_id = id_file.read_text().strip() if resume and id_file.is_file() else secrets.token_hex(4)
    id_file.write_text(run_id)
    return wandb.init(
        project=project or os.environ.get("WANDB_PROJECT", "llmgym"),
        name=out.resolve().name,
        id=run_id,
        resume="allow",
        dir=str(out),
        config=run_config,
    )


def open_step_log(path: Path, resume_step: int | None, step_of: Callable[[str], float]) -> TextIO:
    """Open a run's JSONL of per-step lines for appending: emptied for a new run; on resume, only the lines of
    steps up to ``resume_step`` kept (``step_of(line)``: a line's step, ``inf`` for a torn one, which goes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if resume_step is None:
        path.write_text("")
    elif path.exists():
        kept = [line for line in path.read_text().splitlines() if step_of(line) <= resume_step]
        path.write_text("".join(line + "\n" for line in kept))
    return open(path, "a", encoding="utf-8")


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return sys.maxsize  # a torn line from a kill: drop it


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def plot_metrics(metrics_path: str | os.PathLike[str], png_path: str | os.PathLike[str]) -> Path:
    """Plot reward (mean with a +-std band) and KL against step into a PNG.

    Raises:
        ImportError: matplotlib is missing (``pip install "llmgym[train]"``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError('plotting needs matplotlib: pip install "llmgym[train]"') from err
    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    steps = np.array([r["step"] for r in rows])
    # a missing or non-finite value (logged as null) is a gap in the curve, not a fake 0
    mean = np.array([_number(r.get("reward/mean")) for r in rows])
    std = np.array([_number(r.get("reward/std")) for r in rows])
    kl = np.array([_number(r.get("kl")) for r in rows])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(steps, mean, label="reward (mean)")
    top.fill_between(steps, mean - std, mean + std, alpha=0.25, label="+- std")
    top.set_ylabel("episode reward")
    top.legend(loc="best")
    bottom.plot(steps, kl, color="tab:red")
    bottom.set_ylabel("KL to reference (k3)")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return Path(png_path)
