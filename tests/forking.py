"""Run a test's body in a forked child process."""

import os


def in_forked_child(body) -> int:
    """Run ``body()`` in a forked child; its exit status is 0 when it returned True. Returns the child's pid."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            status = 0 if body() else 1
        finally:
            os._exit(status)
    return pid
