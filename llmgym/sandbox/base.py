"""What every sandbox backend shares: limits, the result of a run, the interface.

Holds :class:`SandboxLimits` (time, memory, file size, processes, output),
:class:`ExecutionResult` (stdout, stderr, exit status, what went wrong, and
:meth:`ExecutionResult.to_text`, the observation an agent reads) and
:class:`Sandbox`, the abstract backend with ``run(code, files)`` and ``close()``.
"""

from __future__ import annotations

import math
import signal
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["SandboxLimits", "ExecutionResult", "Sandbox", "SandboxError"]


class SandboxError(RuntimeError):
    """The sandbox itself could not run (no worker could start): a setup problem, not the program's fault."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one run.

    Example:
        >>> SandboxLimits(wall_time_s=2).replace(memory_mb=256).memory_mb
        256
    """

    wall_time_s: float = 10.0
    """Wall-clock limit; the whole process tree is killed when it passes."""
    cpu_time_s: float = 10.0
    """CPU seconds (``RLIMIT_CPU``); the kernel sends SIGXCPU, then SIGKILL."""
    memory_mb: int = 1024
    """Address space (``RLIMIT_AS``); allocations beyond it fail with ``MemoryError``."""
    file_size_mb: int = 16
    """Largest file the program may write (``RLIMIT_FSIZE``)."""
    max_processes: int = 32
    """Processes and threads of the sandbox uid (``RLIMIT_NPROC``; needs the uid drop, see ``isolation``)."""
    max_open_files: int = 128
    """Open file descriptors (``RLIMIT_NOFILE``)."""
    max_output_bytes: int = 65_536
    """Bytes kept per stream; a program that writes more is stopped."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {value!r}")
            if not math.isfinite(value):  # an unlimited run is not a sandbox: give a large finite limit instead
                raise ValueError(f"SandboxLimits.{name} must be finite, got {value!r}")

    def replace(self, **changes: Any) -> SandboxLimits:
        """A copy with some limits changed."""
        return replace(self, **changes)


@dataclass
class ExecutionResult:
    """The outcome of one sandboxed run.

    Attributes:
        stdout: what the program printed (capped at ``max_output_bytes``).
        stderr: its error stream (a traceback when it raised).
        exit_code: the exit status; negative = killed by that signal; None = never ran.
        timed_out: the wall-clock limit was hit.
        output_truncated: the program wrote more than the cap and was stopped.
        error: why the run failed, in words ("" when it exited 0).
        duration_s: wall time of the run.
    """

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    output_truncated: bool = False
    error: str = ""
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the program ran to completion and exited 0."""
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated and not self.error

    def to_text(self, max_chars: int = 4000) -> str:
        """The result as an observation for an agent: output, then what went wrong.

        Example:
            >>> ExecutionResult(stdout="4\\n", exit_code=0).to_text()
            '4'
            >>> print(ExecutionResult(stderr="Traceback...\\nZeroDivisionError: division by zero", exit_code=1,
            ...                       error="exited with status 1").to_text())
            stderr:
            Traceback...
            ZeroDivisionError: division by zero
            Error: exited with status 1
        """
        parts = []
        out, err = self.stdout.rstrip("\n"), self.stderr.rstrip("\n")
        if out:
            parts.append(_clip(out, max_chars) if not err else "stdout:\n" + _clip(out, max_chars))
        if err:
            parts.append("stderr:\n" + _clip(err, max_chars))
        if self.error:
            parts.append(f"Error: {self.error}")
        return "\n".join(parts) if parts else "(no output)"


def check_files(files: dict[str, str] | None) -> dict[str, str]:
    """``files`` as a plain dict; a ``TypeError`` naming the file whose content is not text."""
    files = dict(files or {})
    for name, text in files.items():
        if not isinstance(text, str):
            hint = " (decode bytes first, e.g. data.decode())" if isinstance(text, (bytes, bytearray)) else ""
            raise TypeError(f"files[{name!r}] must be text (str), got {type(text).__name__}{hint}")
    return files


def describe_failure(result: ExecutionResult, limits: SandboxLimits) -> str:
    """Fill in :attr:`ExecutionResult.error` from the exit status and streams."""
    if result.timed_out:
        return f"time limit exceeded ({limits.wall_time_s:g} s wall clock); the program was killed"
    if result.output_truncated:
        return f"output limit exceeded ({limits.max_output_bytes} bytes); the program was stopped"
    code = result.exit_code
    if code is None or code == 0:
        return ""
    tail = result.stderr[-2000:]
    if "MemoryError" in tail:
        return f"memory limit exceeded ({limits.memory_mb} MB)"
    if "[Errno 27] File too large" in tail:
        return f"file size limit exceeded ({limits.file_size_mb} MB)"
    if code < 0:
        sig = -code
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and result.extra.get("cpu_s", 0.0) >= limits.cpu_time_s):
            return f"CPU time limit exceeded ({limits.cpu_time_s:g} s)"
        if sig == signal.SIGXFSZ:
            return f"file size limit exceeded ({limits.file_size_mb} MB)"
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return f"killed by signal {name}"
    if code == 120 and tail.startswith("sandbox setup failed"):
        return "the sandbox could not set up this run: " + tail.splitlines()[-1]
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    return f"exited with status {code}" + (f": {last[:300]}" if last else "")


class Sandbox(ABC):
    """A place to run untrusted Python. Backends: subprocess (warm pool) and Docker.

    Use as a context manager, or call :meth:`close` when done.
    """

    limits: SandboxLimits

    @abstractmethod
    def run(
        self, code: str, files: dict[str, str] | None = None, limits: SandboxLimits | None = None
    ) -> ExecutionResult:
        """Run ``code`` as a fresh ``__main__`` in a fresh work dir holding ``files``.

        Never raises for the program's faults.
        """

    @abstractmethod
    def close(self) -> None:
        """Stop every process the sandbox started."""

    def isolation(self) -> dict[str, Any]:
        """What this backend enforces (network, private temp, uid drop...)."""
        return {}

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  interpreter shutdown
            pass


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"
