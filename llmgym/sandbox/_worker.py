"""The warm sandbox worker: a long-lived interpreter that runs each submitted program in a fresh fork.

Run by :class:`llmgym.sandbox.SubprocessSandbox` as ``python -I _worker.py``;
it imports only the standard library (and the modules named in ``preload``)
so that it starts fast and a fork of it costs a few milliseconds.

Protocol (JSON lines, one object per line): the parent writes a config line,
the worker answers ``{"ready": true, "isolation": {...}}``; then for every
request ``{"code", "files", "limits"}`` it answers one result object.

Isolation set up once per worker (when running as root): a private mount
namespace with empty size-capped tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm``
and over every path in ``hide_paths`` (the llmgym sources, hidden tests), and
private network and IPC namespaces (only a downed loopback). Per call, the
child forks, makes a fresh work dir, applies rlimits, sets ``no_new_privs``,
drops to a sandbox-only uid (so ``RLIMIT_NPROC`` counts only its own
processes, it cannot signal the worker or the caller, and cannot read root's
``/proc/*/environ``), clears the environment and ``exec``s the code. The
worker is a child subreaper: when any descendant outlives the call, every
process of the sandbox uid is killed. The temp mounts are wiped after each call.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import shutil
import signal
import sys
import time
import traceback

__all__: list[str] = []

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
SYS_MOUNT_SETATTR = 442
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
PR_SET_NO_NEW_PRIVS = 38
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MNT_DETACH = 0x2
PR_SET_CHILD_SUBREAPER = 36
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp/work",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {target}")


def setup_isolation(config: dict) -> dict:
    """Enter private namespaces where the OS allows; returns what is enforced."""
    report = {"network": False, "private_tmp": False, "hidden_paths": [], "uid": None, "read_only_root": False,
              "user_namespace": False, "pid_namespace": False}
    if not config.get("namespaces", True):
        return report
    if os.geteuid() != 0:  # unprivileged: become root of a user namespace of our own, if the OS allows it
        try:
            _enter_user_namespace()
        except OSError as err:
            report["user_namespace_error"] = str(err)
            return report
        report["user_namespace"] = report["pid_namespace"] = True
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare(CLONE_NEWNET | CLONE_NEWIPC)")
        report["network"] = True
    except OSError as err:
        report["network_error"] = str(err)
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
        report["read_only_root"] = _read_only_root()
        size = f"size={int(config.get('tmpfs_mb', 64))}m,mode=0755"
        for path in SCRATCH_DIRS:
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, size)
        report["private_tmp"] = True
        if not report["user_namespace"]:  # in a user namespace the program keeps the caller's own access
            report["exposed"] = _expose_interpreter(config.get("expose_paths", []))
        for path in config.get("hide_paths", []):
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=1k,mode=0555")
                report["hidden_paths"].append(path)
    except OSError as err:
        report["private_tmp_error"] = str(err)
    if config.get("uid") and not report["user_namespace"]:
        report["uid"] = int(config["uid"])
    return report


def _enter_user_namespace() -> None:
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _read_only_root() -> bool:
    """Make every mount read-only (``mount_setattr``, Linux 5.12+); the tmpfs mounted afterwards stay writable."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    ret = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    return ret == 0


def _expose_interpreter(paths: list) -> list:
    """Let the sandbox uid reach the interpreter under a private dir (pyenv in ``/root``).

    For the first ancestor of each path that others cannot traverse, mount an
    empty tmpfs over it and bind back only the child on the path: the rest of
    that folder (``/root/.ssh``...) stays invisible.
    """
    needed: dict = {}
    for path in paths:
        parts = os.path.realpath(path).split(os.sep)[1:]
        for depth in range(1, len(parts)):
            ancestor = os.sep + os.path.join(*parts[:depth])
            if not os.stat(ancestor).st_mode & 0o001:
                needed.setdefault(ancestor, set()).add(parts[depth])
                break
    stash = "/tmp/.stash"
    for ancestor, children in sorted(needed.items()):
        os.makedirs(stash, exist_ok=True)
        _mount(ancestor, stash, None, MS_BIND | MS_REC, None)
        _mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=1k,mode=0755")
        for child in sorted(children):
            os.makedirs(os.path.join(ancestor, child), exist_ok=True)
            _mount(os.path.join(stash, child), os.path.join(ancestor, child), None, MS_BIND | MS_REC, None)
        _check(_libc.umount2(stash.encode(), MNT_DETACH), f"umount {stash}")
        os.rmdir(stash)
    exposed = sorted(needed)
    return exposed


def _apply_limits(limits: dict, nproc: bool) -> None:
    cpu = max(1, int(limits["cpu_time_s"] + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    size = int(limits["file_size_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["max_open_files"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc:  # root ignores RLIMIT_NPROC; a sandbox uid, or the root of our own user namespace, does not
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["max_processes"]) + 2,) * 2)


def _child(request: dict, workdir: str, uid: int | None, pidns: bool, out_w: int, err_w: int) -> None:
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
            # surrogatepass: a lone surrogate (valid in JSON) is written as is; reading it back is the program's business
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
                handle.write(content)
        if uid is not None:
            for root, dirs, names in os.walk(workdir):
                for entry in [root, *(os.path.join(root, n) for n in dirs + names)]:
                    os.chown(entry, uid, uid)
        os.chdir(workdir)
        _apply_limits(request["limits"], uid is not None or pidns)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries (su, ping) cannot raise privileges
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.environ.clear()
        os.environ.update(SAFE_ENV, HOME=workdir)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        sys.stdin = open(os.devnull)  # noqa: SIM115
        sys.argv = ["<sandbox>"]
        if pidns:  # the program runs as PID 1 of a namespace of its own: it sees and can signal only its own processes
            _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            inner = os.fork()
            if inner:
                _relay(inner)
    except BaseException:  # noqa: BLE001  a setup failure is reported as the run's error
        try:
            os.write(2, ("sandbox setup failed: " + traceback.format_exc(limit=2)).encode())
        finally:
            os._exit(120)
    try:
        code = compile(request["code"], "<sandbox>", "exec")
    except (SyntaxError, ValueError) as exc:  # the program's own fault (null bytes: ValueError): shown as python would
        traceback.print_exception(type(exc), exc, None)
        sys.stderr.flush()
        os._exit(1)
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001  the program's own error: show it like python would
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    os._exit(status & 0xFF)


def _relay(pid: int) -> None:
    """Wait for the program and exit the way it did (the worker sees its status); never returns."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


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


def _wipe(paths: list[str]) -> None:
    for base in paths:
        try:
            entries = os.listdir(base)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(base, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def run_request(request: dict, report: dict, scratch: str) -> dict:
    """Fork a child for one program, watch it, and return its result."""
    limits = request["limits"]
    uid = report.get("uid")
    workdir = os.path.join(scratch, "work")
    cap = int(limits["max_output_bytes"])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _child(request, workdir, uid, bool(report.get("pid_namespace")), out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    pidfd = os.pidfd_open(pid)
    buffers = {out_r: bytearray(), err_r: bytearray()}
    open_fds = {out_r, err_r}
    deadline = start + float(limits["wall_time_s"])
    timed_out = overflow = exited = False
    status = None
    while open_fds or not exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        watch = list(open_fds) + ([] if exited else [pidfd])
        ready, _, _ = select.select(watch, [], [], remaining)
        for fd in ready:
            if fd == pidfd:
                exited = True
                _, status, usage = os.wait4(pid, 0)
                if _has_descendants() and uid is not None:  # a daemon lives on: it must not keep the pipes open
                    _kill_uid(uid)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            buffers[fd] += chunk
            if len(buffers[fd]) > cap:
                overflow = True
        if overflow:
            break
    if not exited or open_fds:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if uid is not None:
            _kill_uid(uid)
    if status is None:
        _, status, usage = os.wait4(pid, 0)
    if _has_descendants():
        _reap_orphans(uid)
    duration = time.monotonic() - start
    for fd in (out_r, err_r, pidfd):
        os.close(fd)
    exit_code = os.waitstatus_to_exitcode(status)
    _wipe([workdir] if not report.get("private_tmp") else list(SCRATCH_DIRS))
    return {
        "stdout": bytes(buffers[out_r][:cap]).decode("utf-8", "replace"),
        "stderr": bytes(buffers[err_r][:cap]).decode("utf-8", "replace"),
        "exit_code": exit_code,
        "timed_out": timed_out,
        "output_truncated": overflow,
        "duration_s": duration,
        "cpu_s": usage.ru_utime + usage.ru_stime,
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
        data = data[os.write(1, data):]


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
    report = setup_isolation(config)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come back to us to be reaped, not to init
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
        _write(result)


if __name__ == "__main__":
    main()
