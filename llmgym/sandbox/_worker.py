"""The warm sandbox worker: a long-lived interpreter that runs each submitted program in a fresh fork.

Run by :class:`llmgym.sandbox.SubprocessSandbox` as ``python -I _worker.py``;
it imports only the standard library (and the modules named in ``preload``)
so that it starts fast and a fork of it costs a few milliseconds.

Protocol (JSON lines, one object per line): the parent writes a config line,
the worker answers ``{"ready": true, "isolation": {...}}``; then for every
request ``{"code", "files", "limits"}`` it answers one result object.

Isolation is set up once per worker (private mount, network and IPC namespaces,
size-capped tmpfs on the temp dirs and over ``hide_paths``, the interpreter's
folders bound back: ``_isolation.py`` beside this file). Per call, the child
forks, makes a fresh work dir, applies rlimits, sets ``no_new_privs``, drops to
a sandbox-only uid (so ``RLIMIT_NPROC`` counts only its own processes, it cannot
signal the worker or the caller, and cannot read root's ``/proc/*/environ``; in
a user namespace it drops every capability instead), clears the environment and
runs the code as the ``__main__`` module, then exits the way the interpreter
does (non-daemon threads joined, ``atexit`` handlers run, stdio flushed).
``/proc`` shows the program only its own processes. The worker is a child
subreaper: when any descendant outlives the call, every process of the sandbox
uid is killed. The temp mounts are replaced by fresh ones after each call, once
its result is sent.
"""

from __future__ import annotations

import atexit
import builtins
import importlib.util
import json
import linecache
import os
import resource
import select
import signal
import sys
import time
import traceback
import types

__all__: list[str] = []

LONGEST_WAIT_S = 3600.0  # one select() at most; a larger timeout overflows
SAFE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp/work",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def _load_isolation() -> types.ModuleType:
    """``_isolation.py`` from this file's folder, loaded by its path, before any mount hides the folder.

    Not through ``sys.path``: ``python -I`` leaves the script's folder off it, and it stays
    off, so a program imports what it would under plain ``python -I`` (never llmgym's files)
    and the interpreter's folders read from ``sys.path`` are the interpreter's only.
    """
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_isolation.py")
    spec = importlib.util.spec_from_file_location("llmgym_sandbox_isolation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


isolation = _load_isolation()


def _apply_limits(limits: dict, nproc: bool) -> None:
    cpu = min(max(1, int(limits["cpu_time_s"] + 0.999)), 1 << 32)  # more overflows the kernel's count in ns
    _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    memory = int(limits["memory_mb"]) * 1024 * 1024
    _set_limit(resource.RLIMIT_AS, memory, memory)
    size = int(limits["file_size_mb"]) * 1024 * 1024
    _set_limit(resource.RLIMIT_FSIZE, size, size)
    _set_limit(resource.RLIMIT_NOFILE, int(limits["max_open_files"]), int(limits["max_open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc:  # root ignores RLIMIT_NPROC; a sandbox uid, or the root of our own user namespace, does not
        _set_limit(resource.RLIMIT_NPROC, int(limits["max_processes"]) + 2, int(limits["max_processes"]) + 2)


def _set_limit(kind: int, soft: int, hard: int) -> None:
    """Set an rlimit, capped at what the worker may grant (its own hard limit; a huge value means that one)."""
    _, ceiling = resource.getrlimit(kind)
    ceiling = 1 << 62 if ceiling == resource.RLIM_INFINITY else ceiling
    resource.setrlimit(kind, (min(soft, ceiling), min(hard, ceiling)))


def _child(
    request: dict, workdir: str, program: str, uid: int | None, pidns: bool, run_proc: bool, out_w: int, err_w: int
) -> None:
    """Runs in the forked child: never returns."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        for name, content in (request.get("files") or {}).items():
            path = os.path.normpath(os.path.join(workdir, name))
            if not path.startswith(workdir + os.sep):
                raise ValueError(f"file name {name!r} leaves the work dir")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # surrogatepass: a lone surrogate (valid in JSON) is written as is;
            # reading it back is the program's business
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
                handle.write(content)
        with open(program, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(request["code"])
        os.chmod(program, 0o644)  # readable by the sandbox uid, which does not own it
        if uid is not None:
            for root, dirs, names in os.walk(workdir):
                for entry in [root, *(os.path.join(root, n) for n in dirs + names)]:
                    os.chown(entry, uid, uid)
        os.chdir(workdir)
        _apply_limits(request["limits"], uid is not None or pidns)
        isolation.forbid_new_privileges()  # setuid binaries (su, ping) cannot raise privileges
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.environ.clear()
        os.environ.update(SAFE_ENV, HOME=workdir)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        sys.stdin = open(os.devnull)  # noqa: SIM115
        sys.argv = [program]
        if pidns:  # the program runs as PID 1 of a namespace of its own: it sees and can signal only its own processes
            isolation.enter_pid_namespace()
            if run_proc:
                isolation.mount_run_proc()
            isolation.drop_capabilities()
    except BaseException:  # noqa: BLE001  a setup failure is reported as the run's error
        try:
            os.write(2, ("sandbox setup failed: " + traceback.format_exc(limit=2)).encode())
        finally:
            os._exit(120)
    _run_as_main(request["code"], program)


def _run_as_main(source: str, program: str) -> None:
    """Run ``source`` the way ``python -I program`` runs a file, exit status and teardown included; never returns.

    The program is a fresh ``__main__`` module (so ``unittest.main()``,
    ``doctest.testmod()`` and pickling its classes work) with ``__file__``
    set; its code is named ``<sandbox>`` in tracebacks. At exit, as the
    interpreter does: non-daemon threads are joined, ``atexit`` handlers run,
    and the current and original stdio are flushed.
    """
    try:
        code = compile(source, "<sandbox>", "exec")
    except (SyntaxError, ValueError) as exc:  # the program's own fault (null bytes: ValueError): shown as python would
        traceback.print_exception(type(exc), exc, None)
        _exit(1)
    # source lines for the traceback module (unittest, logging); never expired, as the code has no file of that name
    linecache.cache["<sandbox>"] = (len(source), None, source.splitlines(True), "<sandbox>")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=program, __cached__=None, __builtins__=builtins)
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(code, main.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001  the program's own error: shown like python would
        _print_uncaught(exc, exc.__traceback__.tb_next)
        status = 1
    threading = sys.modules.get("threading")  # never imported: no thread to wait for
    if threading is not None:
        _flush()  # what main printed survives a thread that runs into the wall clock
        try:
            threading._shutdown()
        except BaseException as exc:  # noqa: BLE001  python reports an error while joining and goes on
            _print_uncaught(exc, exc.__traceback__)
    atexit._run_exitfuncs()  # prints a failing handler's error, as python does
    _exit(status)


def _exit_status(exc: SystemExit) -> int:
    """The process status ``SystemExit`` gives, as python computes it (a non-int code is printed, status 1)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _print_uncaught(exc: BaseException, tb: types.TracebackType | None) -> None:
    exc.with_traceback(tb)  # the default hook prints the exception's own traceback, whatever it is given
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:  # noqa: BLE001  a broken excepthook: python falls back to the default print
        traceback.print_exception(type(exc), exc, tb)


def _exit(status: int) -> None:
    _flush()
    os._exit(status & 0xFF)


def _flush() -> None:
    """Flush the program's stdio and the original streams (a replaced ``sys.stdout`` must not lose output)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001  closed or broken: nothing more to save
            pass


def _kill_uid(uid: int) -> None:
    """Kill every process of the sandbox uid (escaped daemons, fork bombs) from a short-lived fork."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:  # noqa: BLE001
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _has_descendants() -> bool:
    """True while a process we started lives on (we are a subreaper, so every orphan is our child)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _reap_orphans(uid: int | None) -> None:
    """Collect the zombies of killed descendants so they stop counting against ``RLIMIT_NPROC``."""
    deadline = time.monotonic() + 2.0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if uid is None or time.monotonic() > deadline:
                return
            if uid is not None:
                _kill_uid(uid)
            time.sleep(0.001)


def run_request(request: dict, report: dict, scratch: str) -> dict:
    """Fork a child for one program, watch it, and return its result (the caller cleans up after sending it)."""
    limits = request["limits"]
    uid = report.get("uid")
    pidns = bool(report.get("pid_namespace"))
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _child(
            request,
            os.path.join(scratch, "work"),
            os.path.join(scratch, isolation.PROGRAM_NAME),
            uid,
            pidns,
            pidns and bool(report.get("processes_hidden")),
            out_w,
            err_w,
        )
    os.close(out_w)
    os.close(err_w)
    run = _Run(pid, out_r, err_r, uid)
    cap = int(limits["max_output_bytes"])
    run.watch(start + float(limits["wall_time_s"]), cap)
    run.stop()
    duration = time.monotonic() - start
    run.close()
    return run.result(cap, duration)


class _Run:
    """One forked program seen from the worker: its output so far, its exit status and resource use."""

    def __init__(self, pid: int, out_r: int, err_r: int, uid: int | None) -> None:
        self.pid, self.out_r, self.err_r, self.uid = pid, out_r, err_r, uid
        self.pidfd = os.pidfd_open(pid)  # readable once the program has exited
        self.output = {out_r: bytearray(), err_r: bytearray()}
        self.open_fds = {out_r, err_r}
        self.status: int | None = None  # set once the program has exited
        self.usage: resource.struct_rusage | None = None
        self.timed_out = self.overflow = False

    def watch(self, deadline: float, cap: int) -> None:
        """Read its output until it exits with its pipes closed, the wall clock runs out, or it writes over ``cap``."""
        while self.open_fds or self.status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                return
            watch = list(self.open_fds) + ([] if self.status is not None else [self.pidfd])
            ready, _, _ = select.select(watch, [], [], min(remaining, LONGEST_WAIT_S))
            for fd in ready:
                if fd == self.pidfd:
                    _, self.status, self.usage = os.wait4(self.pid, 0)
                    if _has_descendants() and self.uid is not None:  # a daemon lives on, holding the pipes open
                        _kill_uid(self.uid)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.open_fds.discard(fd)
                    continue
                self.output[fd] += chunk
                if len(self.output[fd]) > cap:
                    self.overflow = True
            if self.overflow:
                return

    def stop(self) -> None:
        """Kill what is left of it (it ran out of time, wrote too much, or a daemon holds its pipes) and reap it all."""
        if self.status is None or self.open_fds:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            if self.uid is not None:
                _kill_uid(self.uid)
        if self.status is None:
            _, self.status, self.usage = os.wait4(self.pid, 0)
        if _has_descendants():
            _reap_orphans(self.uid)

    def close(self) -> None:
        """Close its output pipes and its pidfd."""
        for fd in (self.out_r, self.err_r, self.pidfd):
            os.close(fd)

    def result(self, cap: int, duration: float) -> dict:
        """The result object the worker answers, each stream cut at ``cap`` bytes."""
        return {
            "stdout": bytes(self.output[self.out_r][:cap]).decode("utf-8", "replace"),
            "stderr": bytes(self.output[self.err_r][:cap]).decode("utf-8", "replace"),
            "exit_code": os.waitstatus_to_exitcode(self.status),
            "timed_out": self.timed_out,
            "output_truncated": self.overflow,
            "duration_s": duration,
            "cpu_s": self.usage.ru_utime + self.usage.ru_stime,
        }


def _read_line(buffer: bytearray) -> bytes | None:
    while b"\n" not in buffer:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def _write(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def main() -> None:
    """Read the config, set up isolation, then serve requests until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    buffer = bytearray()
    line = _read_line(buffer)
    if line is None:
        return
    config = json.loads(line)
    for name in config.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001  a missing optional module only makes calls slower
            pass
    report, interpreter = isolation.setup_isolation(config)
    isolation.become_subreaper()  # orphans come back to us to be reaped, not to init
    scratch = "/tmp" if report["private_tmp"] else config["scratch"]
    os.chdir("/")
    _write({"ready": True, "isolation": report})
    while True:
        line = _read_line(buffer)
        if line is None:
            return
        try:
            result = run_request(json.loads(line), report, scratch)
        except Exception as err:  # noqa: BLE001  report and stay alive; the parent decides
            result = {"sandbox_error": f"{type(err).__name__}: {err}"}
        _write(result)  # first: however long the cleanup takes, it is not the run's time
        isolation.clean_scratch(report, scratch, config, interpreter)
        _write({"clean": True})  # the parent sends the next request after this line


if __name__ == "__main__":
    main()
