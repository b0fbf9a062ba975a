"""The subprocess sandbox: a pool of warm worker interpreters, one fresh fork per run.

Holds :class:`SubprocessSandbox`. Each worker is ``python -I _worker.py``
started with a scrubbed environment; it sets up its isolation once (private
network and mount namespaces when running as root) and then forks a child
for every program, so a call costs milliseconds instead of an interpreter
start. A worker that dies, hangs past its deadline or answers garbage is
killed and replaced; the caller gets an error result, never an exception.

What is enforced (see :meth:`SubprocessSandbox.isolation` at runtime):

* always: wall-clock limit (the process group and, with the uid drop, every
  process of the sandbox uid are killed), ``RLIMIT_CPU``, ``RLIMIT_AS``,
  ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, output cap, fresh work dir that is
  wiped after the run, scrubbed environment (no inherited variables).
* as root (the uid drop): a random unprivileged uid per worker, so
  ``RLIMIT_NPROC`` holds (root ignores it), the program cannot signal the
  caller or read its ``/proc/PID/environ``, and cannot write where that uid
  has no permission; a private network namespace (no network at all); empty
  tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm``; llmgym's own sources hidden;
  the interpreter's folders bound back where a private home or the private
  ``/tmp`` would hide them (and nothing else of that home);
  a ``/proc`` that lists only the program's own processes (no command line of
  another process, e.g. an API key in the caller's arguments, is readable).
* not as root: no network isolation, no process-count limit, and the
  program runs as the caller's user (it can signal the caller's processes
  and write wherever that user can). Use the Docker backend there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from llmgym.sandbox.base import ExecutionResult, Sandbox, SandboxError, SandboxLimits, check_files, describe_failure

__all__ = ["SubprocessSandbox", "default_hidden_paths"]

WORKER_SCRIPT = str(Path(__file__).with_name("_worker.py"))
_WORKER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_GRACE_S = 5.0
_START_TIMEOUT_S = 60.0
_CLEANUP_TIMEOUT_S = 60.0  # a worker still removing the last run's files after this is replaced
_LONGEST_WAIT_S = 3600.0  # one select() at most; a larger timeout overflows


def default_hidden_paths() -> list[str]:
    """llmgym's sources (the whole checkout when installed from one): hidden from programs, as they hold hidden tests.

    A folder that holds the interpreter (a virtualenv inside the checkout) is never hidden.
    """
    interpreter = [os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.executable)]
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and not any(p.startswith(str(checkout) + os.sep) for p in interpreter):
        return [str(checkout)]
    paths = []
    for name in ("llmgym", "llmgym.envs", "llmgym.wrappers", "llmgym.trainers"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            paths.append(str(Path(location).resolve()))
    return sorted(set(paths))


class _Worker:
    """One warm worker process and its JSON-lines pipe."""

    def __init__(self, python: str, config: dict[str, Any]):
        self.owner_pid = os.getpid()
        self.cleaning = False  # after a run the worker removes its files, then says {"clean": true}
        self.scratch = tempfile.mkdtemp(prefix="llmgym-sandbox-")
        os.chmod(self.scratch, 0o711)
        try:
            self.proc = subprocess.Popen(
                [python, "-I", WORKER_SCRIPT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=_WORKER_ENV,
                cwd=self.scratch,
                start_new_session=True,
                bufsize=0,
            )
        except OSError as err:  # no such interpreter: a setup problem, and the scratch dir must not stay behind
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise SandboxError(f"the sandbox worker did not start ({python} -I {WORKER_SCRIPT}): {err}") from err
        self._buffer = bytearray()
        self.calls = 0
        ready = self.exchange({**config, "scratch": self.scratch}, _START_TIMEOUT_S)
        if not ready or not ready.get("ready"):
            self.kill()
            raise SandboxError(f"the sandbox worker did not start ({python} -I {WORKER_SCRIPT})")
        self.isolation: dict[str, Any] = ready["isolation"]

    def exchange(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send one line, read one line; None when the worker died or did not answer in time."""
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
        except (BrokenPipeError, OSError, ValueError):
            return None
        return self._read_reply(timeout)

    def settled(self) -> bool:
        """Alive and done cleaning up after its last run (waiting for that up to ``_CLEANUP_TIMEOUT_S``)."""
        if self.cleaning:
            self.cleaning = False
            if self._read_reply(_CLEANUP_TIMEOUT_S) != {"clean": True}:
                return False
        return self.alive()

    def _read_reply(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(min(remaining, _LONGEST_WAIT_S)):
                    return None
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return None
                self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            return None
        return reply if isinstance(reply, dict) else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if os.getpid() != self.owner_pid:  # a forked copy: the process, its uid and its scratch dir are the parent's
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        uid = getattr(self, "isolation", {}).get("uid")
        if uid is not None:
            _kill_uid(uid)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _kill_uid(uid: int) -> None:
    """Kill stragglers of a sandbox uid (a dead worker cannot reap its children)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, 9)
        except BaseException:  # noqa: BLE001
            pass
        os._exit(0)
    os.waitpid(pid, 0)


class SubprocessSandbox(Sandbox):
    """Run untrusted Python in forks of warm, isolated worker interpreters.

    Args:
        limits: default limits of a run (each :meth:`run` may override them).
        pool_size: most workers alive at once (concurrent runs beyond it wait).
        warm: keep workers between runs; ``False`` starts a fresh worker per run (slow, for comparison).
        preload: modules the workers import once (``"sympy"``) so a program's import is instant.
        hide_paths: folders to hide from programs (default: llmgym's own sources, see :func:`default_hidden_paths`).
        isolate: use namespaces and the uid drop where the OS allows (``False`` only for debugging).
        python: the interpreter to run workers with.

    No process starts until the first :meth:`run`. In a process forked from the
    one that made it, the sandbox starts workers of its own and never uses,
    signals or deletes the parent's.

    Example:
        >>> with SubprocessSandbox(SandboxLimits(wall_time_s=5)) as sandbox:
        ...     result = sandbox.run("print(sum(range(10)))")
        >>> result.stdout, result.ok
        ('45\\n', True)
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        pool_size: int = 1,
        warm: bool = True,
        preload: tuple[str, ...] | list[str] = (),
        hide_paths: list[str] | None = None,
        isolate: bool = True,
        python: str = sys.executable,
    ):
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.limits = limits or SandboxLimits()
        self.pool_size, self.warm, self.python = pool_size, warm, python
        self.config = {
            "preload": list(preload),
            "hide_paths": default_hidden_paths() if hide_paths is None else [str(p) for p in hide_paths],
            "namespaces": isolate,
            "tmpfs_mb": 64,
        }
        self.isolate = isolate
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(pool_size)
        self._closed = False
        self._owner_pid = os.getpid()
        self.restarts = 0
        self._isolation: dict[str, Any] | None = None

    def _new_worker(self) -> _Worker:
        uid = random.SystemRandom().randrange(1 << 20, 1 << 30) if self.isolate and os.geteuid() == 0 else None
        worker = _Worker(self.python, {**self.config, "uid": uid})
        self._isolation = worker.isolation
        return worker

    def _leave_parent_workers(self) -> None:
        """In a process forked from the owner: forget the owner's workers (never use, signal or delete them).

        New locks too: another thread of the parent may have held one at the fork.
        """
        if os.getpid() == self._owner_pid:
            return
        self._idle = []  # dropping the handles only closes this process's copies of their pipes
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.pool_size)
        self._owner_pid = os.getpid()

    def start(self) -> None:
        """Start the pool's workers now rather than on the first run."""
        self._leave_parent_workers()
        with self._lock:
            while len(self._idle) < self.pool_size and self.warm:
                self._idle.append(self._new_worker())

    def run(
        self, code: str, files: dict[str, str] | None = None, limits: SandboxLimits | None = None
    ) -> ExecutionResult:
        if self._closed:
            raise RuntimeError("this sandbox is closed")
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        limits = limits or self.limits
        request = {"code": code, "files": check_files(files), "limits": _limits_dict(limits)}
        self._leave_parent_workers()
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            try:
                if worker is not None and not worker.settled():  # died, or stuck cleaning up after its last run
                    worker.kill()
                    worker = None
                    self.restarts += 1
                if worker is None:
                    worker = self._new_worker()
            except SandboxError as err:
                return ExecutionResult(error=f"sandbox unavailable: {err}")
            except BaseException:  # Ctrl-C while waiting for the cleanup
                if worker is not None:
                    worker.kill()
                raise
            try:
                reply = worker.exchange(request, limits.wall_time_s + _GRACE_S)
            except BaseException:  # Ctrl-C while waiting: the program must not run on unwatched
                worker.kill()
                raise
            worker.calls += 1
            worker.cleaning = True
            healthy = reply is not None and "sandbox_error" not in reply and worker.alive()
            if healthy and self.warm and not self._closed:
                with self._lock:
                    self._idle.append(worker)
            else:
                worker.kill()
                if not healthy:
                    self.restarts += 1
        if reply is None:
            return ExecutionResult(error="the program crashed its sandbox worker (it was replaced)")
        if "sandbox_error" in reply:
            return ExecutionResult(error=f"sandbox failure: {reply['sandbox_error']}")
        result = ExecutionResult(
            **{k: reply[k] for k in ("stdout", "stderr", "exit_code", "timed_out", "output_truncated", "duration_s")}
        )
        result.extra["cpu_s"] = reply.get("cpu_s", 0.0)
        result.error = describe_failure(result, limits)
        return result

    def isolation(self) -> dict[str, Any]:
        """What the workers enforce, as reported by a worker (starts one if none ran yet)."""
        if self._isolation is None:
            self.start() if self.warm else self._new_worker().kill()
        report = dict(self._isolation or {})
        dropped = report.get("uid") is not None
        pidns = bool(report.get("pid_namespace"))
        return {
            "backend": "subprocess",
            "uid_drop": dropped,
            "user_namespace": bool(report.get("user_namespace")),
            "pid_namespace_per_run": pidns,
            "network_isolated": bool(report.get("network")),
            "private_tmp": bool(report.get("private_tmp")),
            "read_only_root": bool(report.get("read_only_root")),
            "hidden_paths": report.get("hidden_paths", []),
            "interpreter_paths": report.get("interpreter_paths", []),
            "processes_hidden": bool(report.get("processes_hidden")),
            "process_limit": dropped or pidns,
            "can_signal_caller": not (dropped or pidns),
            "rlimits": ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE"]
            + (["RLIMIT_NPROC"] if dropped or pidns else []),
        }

    def close(self) -> None:
        self._closed = True
        self._leave_parent_workers()
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


def _limits_dict(limits: SandboxLimits) -> dict[str, Any]:
    return {
        "wall_time_s": limits.wall_time_s,
        "cpu_time_s": limits.cpu_time_s,
        "memory_mb": limits.memory_mb,
        "file_size_mb": limits.file_size_mb,
        "max_processes": limits.max_processes,
        "max_open_files": limits.max_open_files,
        "max_output_bytes": limits.max_output_bytes,
    }
