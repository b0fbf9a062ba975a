"""One run at a time writes a JSONL file of episodes: the lock a run holds on its output.

Holds :func:`hold_output` (a context manager that holds a file's lock, or refuses) and
:class:`OutputInUseError` (what a second run gets, naming the holder's pid).

The lock is ``fcntl.flock`` on ``.NAME.lock`` beside the file ``NAME``, which the holder's pid is
written into. The kernel drops a flock when its process ends, however it ends (``kill -9``
too), so a folder is never left locked by a run that is gone. The lock file is removed when
its hold ends, with the folders made for it if they are still empty (a run refused before it
wrote anything leaves nothing behind); one a killed run left is taken over by the next.
Within one process the lock is shared (``llmgym eval`` holds it over its whole run, and the
rollout it starts holds it again): it keeps *other* processes out. POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["hold_output", "lock_path", "OutputInUseError"]


@dataclasses.dataclass
class _Hold:
    """This process's hold on one lock file."""

    descriptor: int  # open while held: closing it releases the flock
    made: list[Path]  # the folders made for the lock file, innermost first
    count: int = 0  # nested holds


_held: dict[str, _Hold] = {}  # by the lock file's real path
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
    key = os.path.realpath(lock)
    with _held_guard:
        hold = _held.get(key)
        if hold is None:
            made = [folder for folder in (lock.parent, *lock.parent.parents) if not folder.exists()]
            try:
                hold = _held[key] = _Hold(_acquire(lock, Path(path)), made)
            except BaseException:
                _remove_folders(made)
                raise
        hold.count += 1
    try:
        yield
    finally:
        with _held_guard:
            hold.count -= 1
            if hold.count == 0:
                del _held[key]
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()  # before the flock is released: whoever takes it next finds the file gone
                os.close(hold.descriptor)
                _remove_folders(hold.made)


def _acquire(lock: Path, path: Path) -> int:
    """Take the flock of ``lock`` (made, with its folder, if missing) without waiting and write this pid into it.

    Returns:
        The lock file's open descriptor.

    Raises:
        OutputInUseError: another process holds it.
    """
    import fcntl  # POSIX: imported here so that importing llmgym does not need it

    while True:
        try:  # not truncated on open: while another run holds the lock, the file's pid is the one the error names
            lock.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except (FileNotFoundError, FileExistsError):
            if lock.parent.exists() and not lock.parent.is_dir():
                raise  # a file where the folder should be
            continue  # the end of another run's hold removed the folder meanwhile: make it again
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
            os.close(descriptor)
            raise OutputInUseError(path, int(holder) if holder.isdigit() else None) from None
        except BaseException:
            os.close(descriptor)
            raise
        if _is_file_at(descriptor, lock):
            break
        # the last holder removed the file between its open and flock here: a lock on it would keep no one out
        os.close(descriptor)
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
    return descriptor


def _is_file_at(descriptor: int, path: Path) -> bool:
    """Whether the open file ``descriptor`` is the one at ``path`` now (not one removed since it was opened)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (opened.st_dev, opened.st_ino) == (now.st_dev, now.st_ino)


def _remove_folders(folders: list[Path]) -> None:
    """Remove ``folders`` (innermost first) while they are empty: a run that wrote nothing leaves no folder behind."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty: the run wrote there, or another run holds a file in it
            return
