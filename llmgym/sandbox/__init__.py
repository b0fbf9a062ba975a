"""Sandboxes: run untrusted Python (an agent's code) with limits, isolated from the caller.

Holds the shared types (:class:`SandboxLimits`, :class:`ExecutionResult`,
:class:`Sandbox`), the backends (:class:`SubprocessSandbox`, a pool of warm
forking workers, the default; :class:`DockerSandbox`, used when an engine
answers), :func:`make_sandbox`, which picks one, and :func:`shared_sandbox`,
one reference-counted pool per setting for all environments of a process
(:class:`LazySandbox` joins it on first use). A program's failure
(timeout, memory, crash, a killed worker) comes back as an
:class:`ExecutionResult` with ``error`` set, never as an exception.

Example:
    >>> with make_sandbox(limits=SandboxLimits(wall_time_s=5)) as sandbox:
    ...     print(sandbox.run("import os; print(sorted(os.environ))").stdout.strip())
    ['HOME', 'LANG', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PATH']
"""

from __future__ import annotations

from typing import Any, Literal

from llmgym.sandbox.base import ExecutionResult, Sandbox, SandboxError, SandboxLimits
from llmgym.sandbox.docker_backend import DockerSandbox, docker_available
from llmgym.sandbox.shared import LazySandbox, SharedSandbox, shared_sandbox
from llmgym.sandbox.subprocess_backend import SubprocessSandbox, default_hidden_paths

__all__ = [
    "ExecutionResult",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SubprocessSandbox",
    "DockerSandbox",
    "docker_available",
    "default_hidden_paths",
    "make_sandbox",
    "shared_sandbox",
    "SharedSandbox",
    "LazySandbox",
]


def make_sandbox(
    backend: Literal["subprocess", "docker", "auto"] = "subprocess",
    limits: SandboxLimits | None = None,
    **kwargs: Any,
) -> Sandbox:
    """A sandbox of the chosen backend; ``"auto"`` picks Docker when an engine answers, else subprocess.

    Args:
        backend: ``"subprocess"`` (default), ``"docker"`` or ``"auto"``.
        limits: default limits of each run.
        **kwargs: passed to the backend's constructor.
    """
    if backend == "auto":
        backend = "docker" if docker_available() else "subprocess"
    if backend == "subprocess":
        return SubprocessSandbox(limits, **kwargs)
    if backend == "docker":
        return DockerSandbox(limits, **kwargs)
    raise ValueError(f"backend must be 'subprocess', 'docker' or 'auto', got {backend!r}")
