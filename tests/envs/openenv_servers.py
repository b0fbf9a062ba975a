"""Servers for the OpenEnv tests: ``llmgym serve-env`` as a process, OpenEnv's template echo env in a thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path

import pytest

from tests.servers import free_port, wait_healthy


def need_openenv() -> None:
    """Skip unless OpenEnv's server and client import (openenv 0.10 needs mcp<2 through fastmcp 3)."""
    try:
        import openenv.core.env_server  # noqa: F401
        from openenv import GenericEnvClient  # noqa: F401
    except ImportError as err:
        pytest.skip(f"openenv is not usable here: {err}")


def start_serve_env(env_id: str, *args: str) -> tuple[subprocess.Popen, str]:
    """``llmgym serve-env ENV_ID ARGS`` on a free loopback port; returns the process and its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llmgym", "serve-env", env_id, "--port", str(port), "--log-level", "warning", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
    except BaseException:
        process.kill()
        raise
    return process, url


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def echo_env_module(folder: Path) -> str:
    """OpenEnv's template environment (the echo env ``openenv init`` writes), rendered into ``folder``.

    Returns the module name of its app (``folder`` is put on ``sys.path``).
    """
    template = resources.files("openenv.cli.templates") / "openenv_env"
    names = {"__ENV_NAME__": "echo_env", "__ENV_CLASS_NAME__": "Echo", "__ENV_TITLE_NAME__": "Echo"}
    package = folder / "echo_env"
    (package / "server").mkdir(parents=True, exist_ok=True)
    for source, target in [
        ("models.py", "models.py"),
        ("server/__ENV_NAME___environment.py", "server/echo_env_environment.py"),
        ("server/app.py", "server/app.py"),
    ]:
        text = template.joinpath(source).read_text()
        for placeholder, value in names.items():
            text = text.replace(placeholder, value)
        (package / target).write_text(text)
    (package / "__init__.py").write_text("")
    (package / "server" / "__init__.py").write_text("")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return "echo_env.server.app"


class ThreadedServer:
    """A FastAPI app under uvicorn in a thread of this process (stopped with :meth:`stop`)."""

    def __init__(self, app: object):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_healthy(self.url, timeout=30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
