"""The Docker sandbox (llmgym/sandbox/docker_backend.py), mostly against a fake engine: runs take turns on the
shared container, inputs go through stdin, output is read up to the cap, limits and timeouts, forked callers,
the bootstrap that runs in the container. The real engine's tests are in test_sandbox_docker_engine.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import types

import pytest
from forking import in_forked_child

from llmgym.sandbox import DockerSandbox, SandboxLimits, docker_backend

ROOT = os.geteuid() == 0
LIMITS = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=512, max_output_bytes=10_000)


def _frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


class _FakeContainer:
    def __init__(self, engine: _FakeEngine, name: str):
        self.engine, self.id = engine, name

    def exec_run(self, cmd, **kwargs):  # only the cleanup goes through exec_run
        assert cmd == docker_backend._CLEANUP
        with self.engine.lock:
            self.engine.cleanups.append((self.id, self.engine.active))
        self.engine.killed.set()  # kill -9 -1
        return 0, (b"", b"")

    def remove(self, force=False):
        self.engine.removed.append(self.id)


class _FakeEngine:
    """Just enough of docker.DockerClient: each exec reads the job from its socket and runs ``program(job, send)``."""

    def __init__(self, program, start_delay: float = 0.0):
        self.program, self.start_delay = program, start_delay
        self.lock = threading.Lock()
        self.killed = threading.Event()
        self.active = self.most_active = 0
        self.containers_started, self.cleanups, self.removed, self.commands, self.jobs = [], [], [], [], []
        self.sent_bytes = 0
        self._execs: dict[str, dict] = {}
        self.images = types.SimpleNamespace(get=lambda image: None)
        self.containers = types.SimpleNamespace(run=self._run_container)
        self.api = types.SimpleNamespace(
            exec_create=self._exec_create, exec_start=self._exec_start, exec_inspect=self._exec_inspect
        )

    def _run_container(self, image, command, **kwargs):
        time.sleep(self.start_delay)
        with self.lock:
            self.containers_started.append(image)
            return _FakeContainer(self, f"container-{len(self.containers_started)}")

    def _exec_create(self, container_id, cmd, **kwargs):
        assert kwargs["stdin"] is True
        self.killed.clear()
        with self.lock:
            self.commands.append(cmd)
            exec_id = f"exec-{len(self.commands)}"
            self._execs[exec_id] = {"thread": None, "code": None}
        return {"Id": exec_id}

    def _exec_start(self, exec_id, socket=False, **kwargs):
        assert socket
        ours, theirs = _socketpair()
        thread = threading.Thread(target=self._serve, args=(exec_id, theirs), daemon=True)
        self._execs[exec_id]["thread"] = thread
        thread.start()
        return ours

    def _exec_inspect(self, exec_id):
        entry = self._execs[exec_id]
        return {"Running": entry["thread"].is_alive(), "ExitCode": entry["code"]}

    def _serve(self, exec_id, conn):
        reader = conn.makefile("rb")
        size = int(reader.readline())
        job = json.loads(reader.read(size))
        with self.lock:
            self.jobs.append(job)
            self.active += 1
            self.most_active = max(self.most_active, self.active)

        def send(stream: int, data: bytes) -> None:
            conn.sendall(_frame(stream, data))
            self.sent_bytes += len(data)

        try:
            self._execs[exec_id]["code"] = self.program(job, send)
        except OSError:  # the reader hung up (output cap)
            self._execs[exec_id]["code"] = 137
        finally:
            with self.lock:
                self.active -= 1
            conn.close()


def _socketpair():
    return socket.socketpair()


@pytest.fixture
def fake_docker(monkeypatch):
    """A stand-in ``docker`` module: the backend only needs its error classes when a client is given."""
    errors = types.SimpleNamespace(
        ImageNotFound=type("ImageNotFound", (Exception,), {}), DockerException=type("DockerException", (Exception,), {})
    )
    monkeypatch.setitem(sys.modules, "docker", types.SimpleNamespace(errors=errors))


def _echo(job, send):
    time.sleep(0.2)
    send(1, f"ran {len(job['code'])}\n".encode())
    return 0


def test_docker_runs_take_turns_on_the_shared_container(fake_docker):
    engine = _FakeEngine(_echo)
    box = DockerSandbox(LIMITS, client=engine)
    results = []
    threads = [threading.Thread(target=lambda: results.append(box.run("print(1)"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.stdout for r in results] == ["ran 8\n"] * 3 and all(r.ok for r in results)
    assert engine.most_active == 1  # never two programs at once
    assert len(engine.cleanups) == 3 and all(active == 0 for _, active in engine.cleanups)  # no cleanup mid-run


def test_docker_first_runs_at_once_start_one_container(fake_docker):
    engine = _FakeEngine(_echo, start_delay=0.3)
    box = DockerSandbox(LIMITS, client=engine)
    threads = [threading.Thread(target=box.run, args=("print(1)",)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(engine.containers_started) == 1
    box.close()
    assert engine.removed == ["container-1"]


def test_docker_large_inputs_go_through_stdin_not_argv(fake_docker):
    engine = _FakeEngine(lambda job, send: send(1, str(len(job["files"]["big.txt"])).encode()) or 0)
    box = DockerSandbox(LIMITS, client=engine)
    big = "x" * 300_000  # over Linux's 128 KiB limit on one argument
    result = box.run("print(open('big.txt').read())", files={"big.txt": big})
    assert result.ok and result.stdout == "300000"
    assert engine.jobs[0] == {"code": "print(open('big.txt').read())", "files": {"big.txt": big}}
    assert max(len(part) for part in engine.commands[0]) < 4096


def test_docker_output_is_read_up_to_the_cap_only(fake_docker):
    def flood(job, send):
        while True:
            send(1, b"x" * 4096)

    engine = _FakeEngine(flood)
    box = DockerSandbox(LIMITS, client=engine)
    start = time.monotonic()
    result = box.run("while True: print('x' * 4096)")
    assert result.output_truncated and "output limit exceeded" in result.error
    assert len(result.stdout) == LIMITS.max_output_bytes and time.monotonic() - start < 5
    assert engine.cleanups  # the program is killed
    assert engine.sent_bytes < LIMITS.max_output_bytes + 8 * 1024 * 1024  # not everything it wrote was read


def test_docker_exit_status_and_stderr(fake_docker):
    engine = _FakeEngine(lambda job, send: send(2, b"Traceback...\nZeroDivisionError: division by zero\n") or 1)
    result = DockerSandbox(LIMITS, client=engine).run("1 / 0")
    assert (
        result.exit_code == 1 and result.stderr.endswith("division by zero\n") and "ZeroDivisionError" in result.error
    )


def test_docker_engine_that_never_answers_is_a_timeout(fake_docker, monkeypatch):
    monkeypatch.setattr(docker_backend, "_GRACE_S", 0.2)
    engine = _FakeEngine(None)
    engine.program = lambda job, send: 137 if engine.killed.wait(10) else 0  # ends when the cleanup kills it
    start = time.monotonic()
    result = DockerSandbox(LIMITS, client=engine).run("print(1)", limits=LIMITS.replace(wall_time_s=0.3))
    assert result.timed_out and "time limit exceeded" in result.error and time.monotonic() - start < 5


def test_docker_huge_limits_mean_unlimited(fake_docker):
    engine = _FakeEngine(_echo)
    huge = SandboxLimits(wall_time_s=1e300, cpu_time_s=1e300, memory_mb=10**15, file_size_mb=10**15)
    assert DockerSandbox(LIMITS, client=engine).run("print(1)", limits=huge).ok
    script = engine.commands[0][2]
    assert script.startswith(
        "{ ulimit -St unlimited && ulimit -Ht unlimited && ulimit -f unlimited && ulimit -v unlimited;"
    )
    assert 'exec timeout -s KILL 1e+07 "$py"' in script


def test_docker_sandbox_in_a_forked_child_starts_its_own_container(fake_docker):
    engine = _FakeEngine(_echo)
    box = DockerSandbox(LIMITS, client=engine)
    assert box.run("print(1)").ok
    parent_container = box._container

    def child():
        ok = box.run("print(2)").ok and box._container is not parent_container
        box.close()
        return ok and engine.removed == ["container-2"] and all(c == "container-2" for c, _ in engine.cleanups[1:])

    pid = in_forked_child(child)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert box._container is parent_container and engine.removed == []


@pytest.mark.skipif(not ROOT or not os.path.exists("/usr/bin/unshare"), reason="needs root to mount a private /work")
def test_docker_bootstrap_runs_the_program_as_main(tmp_path):
    """The bootstrap that runs in the container, run here in a private mount namespace with its own /work and /tmp."""
    job = json.dumps(
        {"code": "import sys\nprint(__name__, __file__, sys.argv, open('d/x.txt').read())", "files": {"d/x.txt": "hi"}}
    ).encode()
    python = os.path.realpath(sys.executable)  # a virtualenv's link may sit in the /tmp this covers; -I needs no venv
    if python.startswith(("/tmp/", "/work/")):
        pytest.skip(f"the interpreter ({python}) lies in a folder this test covers with a tmpfs")
    script = f'mount -t tmpfs none /work && mount -t tmpfs none /tmp && cd /work && exec {python} -I -c "$0"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, docker_backend._BOOTSTRAP],
        input=b"%d\n" % len(job) + job,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "__main__ /tmp/main.py ['/tmp/main.py'] hi\n"


def test_docker_without_an_engine_says_so(monkeypatch):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/llmgym-test/docker.sock")
    with DockerSandbox(LIMITS) as sandbox:
        result = sandbox.run("print(1)")
    assert not result.ok and result.exit_code is None
    assert result.error.startswith(
        "sandbox unavailable: no Docker engine answers at unix:///nonexistent/llmgym-test/docker.sock ("
    )
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

    with DockerSandbox(LIMITS, image="python:3.11-slim", client=Client()) as sandbox:
        result = sandbox.run("print(1)")
    assert started == []
    assert result.error == (
        "sandbox unavailable: the image 'python:3.11-slim' is not present locally and is never "
        "pulled at run time: run `docker pull python:3.11-slim` first, or build one with no registry "
        "(`bash scripts/sandbox-image.sh`) and pass image= or set LLMGYM_SANDBOX_IMAGE"
    )


def test_docker_image_defaults_to_the_environment_variable(monkeypatch):
    monkeypatch.setenv("LLMGYM_SANDBOX_IMAGE", "llmgym-sandbox:local")
    assert DockerSandbox(LIMITS).image == "llmgym-sandbox:local"
    assert DockerSandbox(LIMITS, image="other:tag").image == "other:tag"
    monkeypatch.delenv("LLMGYM_SANDBOX_IMAGE")
    assert DockerSandbox(LIMITS).image == "python:3.11-slim"
