"""The progress bar of every long loop: rollouts, multi-agent games, GRPO and SFT steps.

Holds :class:`ProgressBar`: a rich bar on stderr of ``done/total`` with the time spent and left, and
optionally a running number beside the count (the mean reward). One that is not shown does nothing,
so a loop moves its bar the same way with ``--no-progress`` or on a rank other than 0. On stderr,
so that ``llmgym eval --json`` and a trainer's printed metrics stay clean on stdout.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """A progress bar on stderr of ``total`` units, labelled ``label``; it shows nothing when not ``shown``.

    The bar starts when made and stops at :meth:`close` (or at the end of a ``with`` block).

    Args:
        label: what is counted (``"episodes"``, ``"games"``, ``"GRPO"``, ``"SFT"``).
        total: units in all.
        completed: units done before the bar starts (a resumed run's, a checkpoint's steps).
        metric: the name of a number shown after the count (``"mean reward"``), set by
            :meth:`advance` or :meth:`update` with ``value=``; ``-`` until then.
        shown: ``False`` makes a bar that draws nothing (``--no-progress``, a rank other than 0).

    Attributes:
        completed: units done so far, ``completed`` included.

    Example:
        >>> with ProgressBar("episodes", total=3, metric="mean reward", shown=False) as bar:
        ...     bar.advance(value=1.0)
        ...     bar.update(3, value=0.5)
        >>> bar.completed
        3
    """

    def __init__(self, label: str, total: int, *, completed: int = 0, metric: str | None = None, shown: bool = True):
        self.completed = completed
        self._bar: Any = None
        if not shown:
            return
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = [TextColumn(escape(label)), BarColumn(), MofNCompleteColumn()]
        if metric is not None:
            columns.append(TextColumn(escape(metric) + " {task.fields[value]}"))
        self._bar = Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True))
        self._task = self._bar.add_task(label, total=total, completed=completed, value="-")
        self._bar.start()

    def advance(self, units: int = 1, *, value: float | None = None) -> None:
        """Count ``units`` more done; ``value`` is the metric's new value."""
        self.update(self.completed + units, value=value)

    def update(self, completed: int, *, value: float | None = None) -> None:
        """Set the units done to ``completed``; ``value`` is the metric's new value."""
        self.completed = completed
        if self._bar is not None:
            fields = {} if value is None else {"value": f"{value:.3f}"}
            self._bar.update(self._task, completed=completed, **fields)

    def close(self) -> None:
        """Stop drawing the bar (it stays on screen as it last was); closing twice is harmless."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
