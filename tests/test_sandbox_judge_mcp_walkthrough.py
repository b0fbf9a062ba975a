"""Regressions found walking through docs/sandbox.md, docs/judge.md and docs/mcp.md as a new user."""

from __future__ import annotations

import copy
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from llmgym.sandbox import DockerSandbox, LazySandbox, SandboxLimits, SubprocessSandbox, shared_sandbox
from llmgym.sandbox import shared as shared_module

SMALL = SandboxLimits(wall_time_s=20, cpu_time_s=2, memory_mb=256, max_processes=8)


class _Interrupted(BaseException):
    """Stands in for KeyboardInterrupt (pytest treats a real one as the end of the session)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_interrupted_run_kills_its_worker_and_program():
    # Ctrl-C during run() left the worker and the program running until the wall clock, even after close()
    sandbox = SubprocessSandbox(SMALL)
    sandbox.start()
    worker_pid = sandbox._idle[0].proc.pid

    def interrupt(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(_Interrupted):
            sandbox.run("import time; time.sleep(100)")
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    try:
        assert not _alive(worker_pid)
        result = sandbox.run("print('after')")  # a fresh worker serves the next run
        assert result.ok and result.stdout == "after\n"
    finally:
        sandbox.close()


def test_files_must_be_text_with_a_clear_error():
    with SubprocessSandbox(SMALL) as sandbox:  # no worker starts: the check comes first
        with pytest.raises(TypeError, match=r"files\['data.bin'\] must be text \(str\), got bytes \(decode bytes"):
            sandbox.run("print(1)", files={"data.bin": b"\x00\x01"})
        assert not sandbox._idle
    with pytest.raises(TypeError, match=r"files\['n'\] must be text \(str\), got int"):
        DockerSandbox(SMALL).run("print(1)", files={"n": 3})


def test_docker_without_an_engine_says_so(monkeypatch):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/llmgym-test/docker.sock")
    with DockerSandbox(SMALL) as sandbox:
        result = sandbox.run("print(1)")
    assert not result.ok and result.exit_code is None
    assert result.error.startswith("sandbox unavailable: no Docker engine answers at "
                                   "unix:///nonexistent/llmgym-test/docker.sock (")
    assert "make_sandbox('subprocess')" in result.error


def test_docker_never_pulls_a_missing_image():
    docker = pytest.importorskip("docker")
    started = []

    class Images:
        def get(self, name):
            raise docker.errors.ImageNotFound(f"No such image: {name}")

    class Containers:
        def run(self, *args, **kwargs):  # the SDK's run() pulls a missing image, then starts it
            started.append(args)

    class Client:
        images, containers = Images(), Containers()

    with DockerSandbox(SMALL, image="python:3.11-slim", client=Client()) as sandbox:
        result = sandbox.run("print(1)")
    assert started == []
    assert result.error == ("sandbox unavailable: the image 'python:3.11-slim' is not present locally and is never "
                            "pulled at run time: run `docker pull python:3.11-slim` first")


def test_shared_and_lazy_sandboxes_copy_after_their_first_run():
    # MathTools could be deep-copied or pickled before its first python call, not after (a thread lock)
    lazy = LazySandbox("subprocess", SMALL, role="walkthrough-copy")
    assert lazy.run("print(1)").stdout == "1\n"
    key = lazy._handle._key
    twin = copy.deepcopy(lazy)
    clone = pickle.loads(pickle.dumps(lazy))
    try:
        assert twin._handle._sandbox is lazy._handle._sandbox is clone._handle._sandbox
        assert shared_module._pools[key][1] == 3
        assert twin.run("print(2)").stdout == "2\n"
        assert clone.run("print(3)").stdout == "3\n"
    finally:
        twin.close()
        clone.close()
    assert lazy.run("print(4)").stdout == "4\n"
    lazy.close()
    assert key not in shared_module._pools

    handle = shared_sandbox("subprocess", SMALL, role="walkthrough-copy-closed")
    handle.close()
    assert copy.deepcopy(handle)._closed


def test_mcp_toolset_refuses_copies_with_a_clear_error():
    pytest.importorskip("mcp")
    from llmgym.mcp import MCPToolset

    server = str(Path(__file__).with_name("mcp_server_for_tests.py"))
    with MCPToolset(sys.executable, [server], timeout=5) as toolset:
        for attempt in (copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="holds a running MCP server .* cannot be copied or pickled"):
                attempt(toolset)
        start = time.monotonic()
        assert toolset.call("add", {"a": 1, "b": 2}).content == "3"  # still usable
        assert time.monotonic() - start < 5
