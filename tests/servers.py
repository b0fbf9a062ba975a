"""Servers the tests start as processes: a free loopback port, and waiting until one answers."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen | None = None, timeout: float = 90.0) -> None:
    """Wait until ``url/health`` answers 200; an exited ``process`` is an error with its stderr's end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            said = process.stderr.read().decode()[-2000:] if process.stderr else ""
            raise RuntimeError(f"the server exited with {process.returncode}: {said}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not come up in {timeout} s")
