"""One run at a time writes a JSONL file of episodes: the lock a run holds on its output.

Holds :func:`hold_output` (a context manager that holds a file's lock, or refuses) and
:class:`OutputInUseError` (what a second run gets, naming the holder's pid).

The lock is ``fcntl.flock`` on ``.NAME.lock`` beside the file ``NAME``, which the holder's pid is
written into. The kernel drops a flock when its process ends, however it ends (``kill -9``
too), so a folder is never left locked by a run that is gone; the lock file itself stays, empty.
Within one process the lock is shared (``llmgym eval`` holds it over its whole run, and the
rollout it starts holds it again): it keeps *other* processes out. POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["hold_output", "lock_path", "OutputInUseError"]

_held: dict[str, list[int]] = {}  # lock file (real path) -> [its descriptor, holds by this process]
_held_guard = threading.Lock()


class OutputInUseError(RuntimeError):
    """Another process holds the output: two runs appending to one file would record episodes twice.

    Attributes:
        path: the output file.
        pid: the holder's process id, ``None`` when its lock file names none.
    """

    def __init__(self, path: Path, pid: int | None):
        self.path, self.pid = path, pid
        holder = f"pid {pid}" if pid is not None else "a process that has not written its pid yet"
        super().__init__(f"{path} is being written by another run ({holder})")


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of the output ``path``: ``.NAME.lock`` in the same folder.

    Example:
        >>> lock_path("runs/eval/episodes.jsonl").as_posix()
        'runs/eval/.episodes.jsonl.lock'
    """
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def hold_output(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the output file ``path`` for this process while the block runs; refuse if another process holds it.

    Makes ``path``'s folder if it is missing. A process that already holds ``path`` holds it again
    (the lock is released when its outermost hold ends).

    Raises:
        OutputInUseError: another process holds ``path``; the error names its pid.

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp()) / "episodes.jsonl"
        >>> with hold_output(out):
        ...     print(lock_path(out).read_text() == f"{os.getpid()}\\n")
        True
    """
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(lock)
    with _held_guard:
        entry = _held.get(key)
        if entry is None:
            entry = _held[key] = [_acquire(lock, Path(path)), 0]
        entry[1] += 1
    try:
        yield
    finally:
        with _held_guard:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                os.ftruncate(entry[0], 0)  # a lock file left behind names no holder
                os.close(entry[0])  # and closing it releases the flock


def _acquire(lock: Path, path: Path) -> int:
    """Take the flock of ``lock`` without waiting and write this pid into it; return its descriptor.

    Raises:
        OutputInUseError: another process holds it.
    """
    import fcntl  # POSIX: imported here so that importing llmgym does not need it

    # not truncated on open: while another run holds the lock, the file's pid is the one the error names
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
        os.close(descriptor)
        raise OutputInUseError(path, int(holder) if holder.isdigit() else None) from None
    except BaseException:
        os.close(descriptor)
        raise
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
    return descriptor
