"""The warm sandbox worker: a long-lived interpreter that runs each submitted program in a fresh fork.

Run by :class:`llmgym.sandbox.SubprocessSandbox` as ``python -I _worker.py``;
it imports only the standard library (and the modules named in ``preload``)
so that it starts fast and a fork of it costs a few milliseconds.

Protocol (JSON lines, one object per line): the parent writes a config line,
the worker answers ``{"ready": true, "isolation": {...}}``; then for every
request ``{"code", "files", "limits"}`` it answers one result object.

Isolation set up once per worker (when running as root): a private mount
namespace with empty size-capped tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm``
and over every path in ``hide_paths`` (the llmgym sources, hidden tests), the
interpreter's own folders bound back where a private home or those tmpfs hide
them (:class:`_InterpreterFolders`), and private network and IPC namespaces
(only a downed loopback). Per call, the child forks, makes a fresh work dir,
applies rlimits, sets ``no_new_privs``, drops to a sandbox-only uid (so
``RLIMIT_NPROC`` counts only its own processes, it cannot signal the worker or
the caller, and cannot read root's ``/proc/*/environ``; in a user namespace it
drops every capability instead), clears the environment and runs the code as
the ``__main__`` module, then exits the way the interpreter does (non-daemon
threads joined, ``atexit`` handlers run, stdio flushed). ``/proc`` shows the
program only its own processes. The worker is a child subreaper: when any
descendant outlives the call, every process of the sandbox uid is killed. The
temp mounts are replaced by fresh ones after each call, once its result is
sent.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import json
import linecache
import os
import resource
import select
import shutil
import signal
import sys
import time
import traceback
import types

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
PR_CAPBSET_DROP = 24
LINUX_CAPABILITY_VERSION_3 = 0x20080522
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MNT_DETACH = 0x2
PR_SET_CHILD_SUBREAPER = 36
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
PROGRAM_NAME = "main.py"  # the program's file, next to (not in) its work dir: ``__file__`` and ``sys.argv[0]``
LONGEST_WAIT_S = 3600.0  # one select() at most; a larger timeout overflows
PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY
SAFE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp/work",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def setup_isolation(config: dict) -> tuple[dict, _InterpreterFolders]:
    """Enter private namespaces where the OS allows; returns what is enforced, and the interpreter's folders."""
    report = {
        "network": False,
        "private_tmp": False,
        "hidden_paths": [],
        "uid": None,
        "read_only_root": False,
        "user_namespace": False,
        "pid_namespace": False,
        "processes_hidden": False,
    }
    if not config.get("namespaces", True):
        return report, _InterpreterFolders()
    if os.geteuid() != 0:  # unprivileged: become root of a user namespace of our own, if the OS allows it
        try:
            _enter_user_namespace()
        except OSError as err:
            report["user_namespace_error"] = str(err)
            return report, _InterpreterFolders()
        report["user_namespace"] = report["pid_namespace"] = True
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare(CLONE_NEWNET | CLONE_NEWIPC)")
        report["network"] = True
    except OSError as err:
        report["network_error"] = str(err)
    interpreter = _InterpreterFolders()
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
        report["read_only_root"] = _read_only_root()
        try:  # a failure here breaks imports, not containment: the mounts below must happen regardless
            # the uid drop makes the program "other" to every file: a private home on the interpreter's path stops it
            interpreter.open(private_homes=bool(config.get("uid")) and not report["user_namespace"])
        except OSError as err:
            report["interpreter_error"] = str(err)
        for path in SCRATCH_DIRS:
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, _tmpfs_options(config))
        report["private_tmp"] = True
        try:
            report["interpreter_paths"] = interpreter.mount()
        except OSError as err:
            report["interpreter_error"] = str(err)
        report["hidden_paths"] = _hide([p for p in config.get("hide_paths", []) if os.path.isdir(p)])
    except OSError as err:
        report["private_tmp_error"] = str(err)
    try:
        report["processes_hidden"] = _hide_processes(report)
    except OSError as err:
        report["processes_hidden_error"] = str(err)
    if config.get("uid") and not report["user_namespace"]:
        report["uid"] = int(config["uid"])
    return report, interpreter


def _hide(paths: list) -> list:
    """Cover each folder with an empty read-only tmpfs (after the interpreter's binds: hiding wins); returns them."""
    for path in paths:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=1k,mode=0555")
    return paths


def _hide_processes(report: dict) -> bool:
    """Keep the caller's processes (and their command lines) out of the program's ``/proc``.

    With the uid drop, a fresh ``/proc`` with ``hidepid=invisible`` shows the
    sandbox uid only its own processes (another's ``/proc/PID`` is
    ``ENOENT``). In a user namespace the program runs as
    the caller's own uid, which ``hidepid`` does not hide from, so each run
    mounts the ``/proc`` of its own PID namespace instead (see
    :func:`_mount_run_proc`); this checks once that the kernel allows it.
    """
    if not report["private_tmp"]:  # no mount namespace of our own: /proc stays the host's
        return False
    if not report["user_namespace"]:
        _mount("proc", "/proc", "proc", PROC_FLAGS, "hidepid=2")  # "invisible" since Linux 5.8
        return True
    pid = os.fork()
    if pid == 0:
        try:
            _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            inner = os.fork()
            if inner == 0:
                mounted = False
                try:
                    _mount_run_proc()
                    mounted = True
                finally:
                    os._exit(0 if mounted else 1)
            _relay(inner)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError("cannot mount a /proc of a run's own PID namespace (another /proc mount hides part of it?)")
    return True


def _mount_run_proc() -> None:
    """In a run's PID namespace: a mount namespace of its own whose ``/proc`` lists only this namespace's processes."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount("proc", "/proc", "proc", PROC_FLAGS, None)


def _tmpfs_options(config: dict) -> str:
    return f"size={int(config.get('tmpfs_mb', 64))}m,mode=0755"


def _enter_user_namespace() -> None:
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _read_only_root() -> bool:
    """Make every mount read-only (``mount_setattr``, Linux 5.12+); the tmpfs mounted afterwards stay writable."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    ret = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    return ret == 0


class _InterpreterFolders:
    """The folders this interpreter imports from, bound back into the worker's mount namespace where a mount hides them.

    A program needs to read the standard library and site-packages, wherever
    they live. Two things can stop it: the uid drop, when they sit under a
    folder only its owner may enter (pyenv or conda in a mode-700 home), and
    the private tmpfs on ``/tmp``, ``/var/tmp`` and ``/dev/shm``, when they sit
    there (a virtualenv in ``/tmp``). Each such folder is opened (``O_PATH``)
    before anything covers it; a private home is then covered by an empty
    root-owned tmpfs, and every folder is bind-mounted from its handle at its
    own path, read-only like the rest of the root. So the program reads exactly
    the interpreter's folders and nothing else of the home (no ``.ssh``), and
    no permission on the host changes: the binds exist only in this worker's
    mount namespace and die with it. The handles stay open, so a scratch dir
    replaced after a run gets its folders back (:meth:`bind_back`).
    """

    def __init__(self) -> None:
        self.handles: dict[str, int] = {}  # folder -> O_PATH handle on it, opened before any mount covered it
        self.homes: list[str] = []  # private folders to cover with an empty tmpfs

    def open(self, private_homes: bool) -> None:
        """Find the folders a mount will hide (``private_homes``: also those under a folder others cannot enter)."""
        for path in interpreter_paths():
            scratch = any(_is_under(path, d) for d in SCRATCH_DIRS)
            home = _private_ancestor(path) if private_homes else None
            if home and not any(_is_under(home, d) for d in SCRATCH_DIRS):  # in a scratch dir the tmpfs covers it
                self.homes.append(home)
            if scratch or home:
                self.handles[path] = os.open(path, os.O_PATH | os.O_DIRECTORY)

    def mount(self) -> list[str]:
        """Cover each private home with an empty tmpfs, then bind every folder back; returns the folders bound."""
        for home in sorted(set(self.homes)):
            _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        return self.bind_back(os.sep)

    def bind_back(self, under: str) -> list[str]:
        """Bind each folder that lies under ``under`` (a freshly mounted tmpfs) back at its path; returns them."""
        bound = [path for path in sorted(self.handles) if _is_under(path, under)]
        for path in bound:
            _make_dirs(path)
            _mount(f"/proc/self/fd/{self.handles[path]}", path, None, MS_BIND | MS_REC, None)
        return bound


def interpreter_paths() -> list[str]:
    """The folders a program reads to import the standard library and installed packages, none inside another.

    Taken from this interpreter (the one that runs the programs): its prefixes,
    its executable's folder (a program may start ``sys.executable``) and every
    ``sys.path`` entry, ``.pth`` additions included.
    """
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
        *sys.path,
    }
    existing = [p if os.path.isdir(p) else os.path.dirname(p) for p in paths if p and os.path.exists(p)]  # zip: folder
    folders = {os.path.realpath(p) for p in existing} - {os.sep}
    return [p for p in sorted(folders) if not any(q != p and _is_under(p, q) for q in folders)]


def _is_under(path: str, folder: str) -> bool:
    return folder == os.sep or path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _private_ancestor(path: str) -> str | None:
    """The first folder above ``path`` that a user other than its owner cannot enter, if any."""
    parts = path.split(os.sep)[1:]
    for depth in range(1, len(parts)):
        ancestor = os.sep + os.path.join(*parts[:depth])
        if not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def _make_dirs(path: str) -> None:
    """Create the missing folders of ``path`` (in a tmpfs of ours), root-owned and open to all whatever the umask."""
    current = os.sep
    for part in path.split(os.sep)[1:]:
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current)
            os.chmod(current, 0o755)


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
        sys.argv = [program]
        if pidns:  # the program runs as PID 1 of a namespace of its own: it sees and can signal only its own processes
            _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            inner = os.fork()
            if inner:
                _relay(inner)
            if run_proc:
                _mount_run_proc()
            _drop_capabilities()
    except BaseException:  # noqa: BLE001  a setup failure is reported as the run's error
        try:
            os.write(2, ("sandbox setup failed: " + traceback.format_exc(limit=2)).encode())
        finally:
            os._exit(120)
    _run_as_main(request["code"], program)


def _drop_capabilities() -> None:
    """Give up every capability for good (the bounding set too, so running a program cannot grant them back).

    In a user namespace the program is its root: with ``CAP_SYS_ADMIN`` it could
    unmount the private ``/tmp`` and the hidden paths, or make ``/`` writable again.
    """
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:  # EINVAL past the kernel's last capability
            break
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")  # effective, permitted, inheritable: none


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


def clean_scratch(report: dict, scratch: str, tmpfs_options: str, interpreter: _InterpreterFolders) -> None:
    """Remove everything the last run left (its work dir, program file, temp files).

    A private temp mount that holds anything is replaced by a fresh empty
    tmpfs, which takes the same short time however many files the program
    made, and gets back the interpreter's folders that lie in it (and the
    hidden paths among them); without private mounts the work dir is deleted
    file by file.
    """
    if not report.get("private_tmp"):
        shutil.rmtree(os.path.join(scratch, "work"), ignore_errors=True)
        try:
            os.unlink(os.path.join(scratch, PROGRAM_NAME))
        except OSError:
            pass
        return
    for path in SCRATCH_DIRS:
        if os.path.isdir(path) and os.listdir(path):
            _check(_libc.umount2(path.encode(), MNT_DETACH), f"umount {path}")
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
            interpreter.bind_back(under=path)
            _hide([hidden for hidden in report["hidden_paths"] if _is_under(hidden, path)])


def run_request(request: dict, report: dict, scratch: str) -> dict:
    """Fork a child for one program, watch it, and return its result (the caller cleans up after sending it)."""
    limits = request["limits"]
    uid = report.get("uid")
    workdir = os.path.join(scratch, "work")
    pidns = bool(report.get("pid_namespace"))
    cap = int(limits["max_output_bytes"])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _child(
            request,
            workdir,
            os.path.join(scratch, PROGRAM_NAME),
            uid,
            pidns,
            pidns and bool(report.get("processes_hidden")),
            out_w,
            err_w,
        )
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
        ready, _, _ = select.select(watch, [], [], min(remaining, LONGEST_WAIT_S))
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
    report, interpreter = setup_isolation(config)
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
        _write(result)  # first: however long the cleanup takes, it is not the run's time
        clean_scratch(report, scratch, _tmpfs_options(config), interpreter)
        _write({"clean": True})  # the parent sends the next request after this line


if __name__ == "__main__":
    main()
