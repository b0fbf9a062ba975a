"""Sandboxes shared by every environment of a process.

Holds :func:`shared_sandbox` and :class:`LazySandbox`. A training run may hold hundreds of
environments; giving each its own warm workers would cost a process (and its
memory) per environment. Environments instead ask for a shared sandbox: one
pool per distinct setting (backend, limits, options, role), reference
counted, stopped when its last holder closes. Every run is a fresh fork, so
sharing a pool shares no state between episodes. A process forked after a
pool was made never reuses its parent's workers. An environment whose tool may
never be called holds a :class:`LazySandbox`, which joins its pool on the first run.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from llmgym.sandbox.base import ExecutionResult, Sandbox, SandboxLimits

__all__ = ["shared_sandbox", "SharedSandbox", "LazySandbox"]

_lock = threading.Lock()
_pools: dict[tuple, list[Any]] = {}  # key -> [sandbox, holders, owner pid]


class SharedSandbox(Sandbox):
    """A handle on a shared sandbox: runs go to the pool; :meth:`close` releases this handle only."""

    def __init__(self, key: tuple, sandbox: Sandbox):
        self._key, self._sandbox = key, sandbox
        self.limits = sandbox.limits
        self._closed = False

    def run(
        self, code: str, files: dict[str, str] | None = None, limits: SandboxLimits | None = None
    ) -> ExecutionResult:
        if self._closed:
            raise RuntimeError("this sandbox handle is closed")
        return self._sandbox.run(code, files, limits)

    def isolation(self) -> dict[str, Any]:
        return self._sandbox.isolation()

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy (deepcopy, or pickled into another process) is another handle on the pool with these settings
        return _rejoin, (self._key, self._closed)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _lock:
            entry = _pools.get(self._key)
            if entry is None or entry[0] is not self._sandbox:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _pools[self._key]
        self._sandbox.close()


def shared_sandbox(
    backend: str = "subprocess", limits: SandboxLimits | None = None, role: str = "", **kwargs: Any
) -> SharedSandbox:
    """A handle on the process-wide sandbox with these settings (made on first use).

    Args:
        backend: ``"subprocess"``, ``"docker"`` or ``"auto"`` (see :func:`~llmgym.sandbox.make_sandbox`).
        limits: default limits of each run.
        role: separates pools with the same settings (CodeTests grades in a pool its agents never use).
        **kwargs: backend options (plain, hashable values: ``preload=("sympy",)``, ``pool_size=4``).

    Example:
        >>> a, b = shared_sandbox(role="doc"), shared_sandbox(role="doc")
        >>> a.run("print(7)").stdout, a._sandbox is b._sandbox
        ('7\\n', True)
        >>> a.close(); b.close()
    """
    from llmgym.sandbox import make_sandbox

    limits = limits or SandboxLimits()
    key = (backend, limits, role, tuple(sorted(kwargs.items())))
    with _lock:
        entry = _pools.get(key)
        if entry is None or entry[2] != os.getpid():
            entry = _pools[key] = [make_sandbox(backend, limits, **kwargs), 0, os.getpid()]
        entry[1] += 1
        return SharedSandbox(key, entry[0])


def _rejoin(key: tuple, closed: bool) -> SharedSandbox:
    """A new handle on the pool of ``key`` (how a :class:`SharedSandbox` is copied or unpickled)."""
    backend, limits, role, options = key
    handle = shared_sandbox(backend, limits, role, **dict(options))
    if closed:
        handle.close()
    return handle


class LazySandbox(Sandbox):
    """A shared sandbox joined on the first :meth:`run`; :meth:`close` leaves it (a later run joins again).

    Args:
        backend, limits, role, **options: as for :func:`shared_sandbox`.

    Example:
        >>> sandbox = LazySandbox(role="doc-lazy")
        >>> sandbox.started, sandbox.run("print(6 * 7)").stdout, sandbox.started
        (False, '42\\n', True)
        >>> sandbox.close(); sandbox.started
        False
    """

    def __init__(
        self, backend: str = "subprocess", limits: SandboxLimits | None = None, role: str = "", **options: Any
    ):
        self._settings = (backend, limits or SandboxLimits(), role, options)
        self.limits = self._settings[1]
        self._handle: SharedSandbox | None = None

    @property
    def started(self) -> bool:
        """Whether this sandbox holds its pool now."""
        return self._handle is not None

    def run(
        self, code: str, files: dict[str, str] | None = None, limits: SandboxLimits | None = None
    ) -> ExecutionResult:
        return self._joined().run(code, files, limits)

    def isolation(self) -> dict[str, Any]:
        return self._joined().isolation()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _joined(self) -> SharedSandbox:
        if self._handle is None:
            backend, limits, role, options = self._settings
            self._handle = shared_sandbox(backend, limits, role, **options)
        return self._handle
