"""What an ``llmgym eval`` run leaves behind, for episodes and for games alike.

Holds :func:`report_summary` (``OUT/summary.json``, ``--plot``'s ``OUT/rewards.png``, the printed table
or ``--json``), :func:`plot_rewards`, :func:`exit_status` (0, or 1 with the first error, or a usage
error when everything failed) and :func:`fmt` (a number as the tables show it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmgym.cli import EXTRA_FOR_MODULE, CLIError

__all__ = ["report_summary", "plot_rewards", "exit_status", "fmt"]


def report_summary(
    summary: dict[str, Any],
    args: argparse.Namespace,
    out: Path,
    plotted: list[Any],
    print_table: Callable[[dict[str, Any]], None],
) -> None:
    """Write ``OUT/summary.json``; with ``--plot`` also ``OUT/rewards.png`` of ``plotted`` (its path joins
    ``summary["run"]``); print the summary as JSON (``--json``) or with ``print_table``."""
    saved = out / "summary.json"
    saved.write_text(json.dumps(summary, indent=2) + "\n")  # first: a plot that fails must not lose the summary
    if args.plot:
        title = f"{summary['run']['env_id']} · {summary['run']['policy']}"
        summary["run"]["plot"] = str(plot_rewards(plotted, out / "rewards.png", title=title))
        saved.write_text(json.dumps(summary, indent=2) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(summary)


def exit_status(failed: int, total: int, unit: str, episodes: Iterable[Any], retry: str = "") -> int:
    """The exit status of a run of ``total`` units (episodes, games) of which ``failed`` failed.

    0 when none failed; 1, after a note with the first error among ``episodes``, when some did.

    Raises:
        CLIError: every unit failed.
    """
    if not failed:
        return 0
    first = next(e.metadata["error"] for e in episodes if "error" in e.metadata)
    if failed == total:
        raise CLIError(f"every {unit} failed; the first error: {first}")
    print(f"llmgym: {failed} of {total} {unit}s failed (first error: {first}){retry}")
    return 1


def fmt(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; ``-`` for none.

    Example:
        >>> fmt(0.12345), fmt(None), fmt(2.5, 1)
        ('0.123', '-', '2.5')
    """
    return "-" if value is None else f"{value:.{digits}f}"


def plot_rewards(episodes: list[Any], path: Path, title: str = "") -> Path:
    """Write a PNG with one histogram per reward component (per-episode totals) and one of the total reward.

    Raises:
        CLIError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError(f'--plot needs matplotlib: pip install "llmgym[{EXTRA_FOR_MODULE["matplotlib"]}]"') from None
    done = [e for e in episodes if "error" not in e.metadata]
    names = sorted({name for e in done for c in e.reward_components for name in c})
    series = [("total reward", [e.total_reward for e in done])]
    series += [(name, [e.component_totals().get(name, 0.0) for e in done]) for name in names]
    columns = min(3, len(series))
    rows = (len(series) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False)
    for axis, (name, values) in zip(axes.flat, series):
        axis.hist(values, bins=min(20, max(5, len(set(values)))), color="tab:blue", edgecolor="white")
        axis.set_title(name)
        axis.set_xlabel("per-episode total")
        axis.set_ylabel("episodes")
    for axis in list(axes.flat)[len(series) :]:
        axis.axis("off")
    figure.suptitle(f"{title} ({len(done)} episodes)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
