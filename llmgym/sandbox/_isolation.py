"""The sandbox worker's isolation: namespaces, mounts and privileges (Linux), standard library only.

Loaded by ``_worker.py`` from its own folder, by path (the worker runs as
``python -I _worker.py``, and ``sys.path`` must stay as the program expects it),
before any mount hides this folder.

Set up once per worker (when running as root) by :func:`setup_isolation`: a
private mount namespace with empty size-capped tmpfs on ``/tmp``, ``/var/tmp``,
``/dev/shm`` and over every path in ``hide_paths`` (the llmgym sources, hidden
tests), the interpreter's own folders bound back where a private home or those
tmpfs hide them (:class:`InterpreterFolders`), and private network and IPC
namespaces (only a downed loopback). Unprivileged, the worker becomes root of a
user namespace of its own where the OS allows it. For each run, in the forked
child: :func:`enter_pid_namespace`, :func:`mount_run_proc` (a ``/proc`` showing
only the run's processes), :func:`forbid_new_privileges` and
:func:`drop_capabilities`. After each run, :func:`clean_scratch` replaces the
temp mounts with fresh ones.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys

__all__ = [
    "InterpreterFolders",
    "PROGRAM_NAME",
    "become_subreaper",
    "clean_scratch",
    "drop_capabilities",
    "enter_pid_namespace",
    "forbid_new_privileges",
    "interpreter_paths",
    "mount_run_proc",
    "setup_isolation",
]

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
PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY

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


def setup_isolation(config: dict) -> tuple[dict, InterpreterFolders]:
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
        return report, InterpreterFolders()
    if os.geteuid() != 0:  # unprivileged: become root of a user namespace of our own, if the OS allows it
        try:
            _enter_user_namespace()
        except OSError as err:
            report["user_namespace_error"] = str(err)
            return report, InterpreterFolders()
        report["user_namespace"] = report["pid_namespace"] = True
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare(CLONE_NEWNET | CLONE_NEWIPC)")
        report["network"] = True
    except OSError as err:
        report["network_error"] = str(err)
    interpreter = InterpreterFolders()
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
    :func:`mount_run_proc`); this checks once that the kernel allows it.
    """
    if not report["private_tmp"]:  # no mount namespace of our own: /proc stays the host's
        return False
    if not report["user_namespace"]:
        _mount("proc", "/proc", "proc", PROC_FLAGS, "hidepid=2")  # "invisible" since Linux 5.8
        return True
    pid = os.fork()
    if pid == 0:
        try:
            enter_pid_namespace()
            mounted = False
            try:
                mount_run_proc()
                mounted = True
            finally:
                os._exit(0 if mounted else 1)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError("cannot mount a /proc of a run's own PID namespace (another /proc mount hides part of it?)")
    return True


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


class InterpreterFolders:
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


def enter_pid_namespace() -> None:
    """Go on as PID 1 of a new PID namespace, which sees and can signal only its own processes.

    Returns in a forked child; this process waits for it and exits the way it did (it never returns).
    """
    _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    inner = os.fork()
    if inner:
        _relay(inner)


def mount_run_proc() -> None:
    """In a run's PID namespace: a mount namespace of its own whose ``/proc`` lists only this namespace's processes."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount("proc", "/proc", "proc", PROC_FLAGS, None)


def drop_capabilities() -> None:
    """Give up every capability for good (the bounding set too, so running a program cannot grant them back).

    In a user namespace the program is its root: with ``CAP_SYS_ADMIN`` it could
    unmount the private ``/tmp`` and the hidden paths, or make ``/`` writable again.
    """
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:  # EINVAL past the kernel's last capability
            break
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")  # effective, permitted, inheritable: none


def forbid_new_privileges() -> None:
    """Set ``no_new_privs``: setuid binaries (su, ping) cannot raise the program's privileges."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def become_subreaper() -> None:
    """Make orphaned descendants this process's children (to be reaped and killed here), not init's."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _relay(pid: int) -> None:
    """Wait for ``pid`` and exit the way it did (so this process's parent sees the program's status); never returns."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def clean_scratch(report: dict, scratch: str, config: dict, interpreter: InterpreterFolders) -> None:
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
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, _tmpfs_options(config))
            interpreter.bind_back(under=path)
            _hide([hidden for hidden in report["hidden_paths"] if _is_under(hidden, path)])
