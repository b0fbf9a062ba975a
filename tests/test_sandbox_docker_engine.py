"""The Docker sandbox against a real engine: the hostile programs of test_sandbox.py are contained with the
documented errors, each limit (CPU, file size, memory, processes, wall clock, output) stops a program that passes
it, the work dir is writable up to the file-size limit, stderr holds only the program's output, and the run after
every hostile run succeeds. The image is ``$LLMGYM_SANDBOX_IMAGE`` (``.ci/docker`` builds one with
``scripts/sandbox-image.sh``: a Debian root whose only interpreter is ``python3``); these tests skip, saying why,
when no engine answers or no image is present."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  registers the environments
from llmgym.envs.code_tests import FlawedCodeTestsSolver
from llmgym.sandbox import DockerSandbox, SandboxLimits, docker_available

LIMITS = SandboxLimits(wall_time_s=10, cpu_time_s=2, memory_mb=256, file_size_mb=1, max_output_bytes=10_000)
IMAGE = os.environ.get("LLMGYM_SANDBOX_IMAGE", "")


def _skip_reason() -> str | None:
    if not docker_available():
        return "no Docker engine answers (bash .ci/docker starts one and builds the image, as root)"
    if not IMAGE:
        return "LLMGYM_SANDBOX_IMAGE is not set (bash scripts/sandbox-image.sh builds a local image and prints its tag)"
    import docker

    try:
        docker.from_env().images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"the image {IMAGE!r} is not present locally (bash scripts/sandbox-image.sh builds it)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

HOSTILE = {
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "time limit",
    ),
    "memory hog": ("x = bytearray(1024**3)", "memory limit exceeded (256 MB)"),
    "infinite loop": ("while True: pass", "CPU time limit exceeded (2 s)"),
    "huge output": ("while True: print('x' * 1000)", "output limit exceeded (10000 bytes)"),
    "big file": ("open('big', 'wb').write(b'x' * 3 * 1024**2)", "file size limit exceeded (1 MB)"),
    "sleeper": ("import time; time.sleep(3600)", "time limit exceeded (10 s wall clock)"),
    "network": ("import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)", "Network is unreachable"),
    "write outside": ("open('/etc/passwd', 'a').write('x')", "Permission denied: '/etc/passwd'"),
    "kill everyone": ("import os, signal; os.kill(-1, signal.SIGKILL); import time; time.sleep(5)", "killed by signal"),
    "kill the reaper": ("import os, signal; os.kill(1, signal.SIGKILL)", "Operation not permitted"),
}


@pytest.fixture(scope="module")
def sandbox():
    with DockerSandbox(LIMITS, image=IMAGE) as box:
        yield box


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program_is_contained_and_the_next_run_succeeds(sandbox, name):
    code, error = HOSTILE[name]
    result = sandbox.run(code)
    assert not result.ok and error in result.error, (result.error, result.stderr[-300:])
    after = sandbox.run("import os; print('ready', sorted(os.listdir('.')))")
    assert after.ok and after.stdout == "ready []\n" and after.stderr == "", after


def test_cpu_limit_stops_the_program_before_the_wall_clock(sandbox):
    result = sandbox.run("while True: pass", limits=LIMITS.replace(wall_time_s=60))  # room for a busy machine
    assert result.error == "CPU time limit exceeded (2 s)" and not result.timed_out


def test_memory_limit_is_the_address_space(sandbox):
    assert sandbox.run("x = bytearray(100 * 1024**2); print(len(x))").ok
    result = sandbox.run("x = bytearray(300 * 1024**2)")
    assert result.error == "memory limit exceeded (256 MB)"


def test_work_dir_is_writable_up_to_the_file_size_limit(sandbox):
    code = "import os\nopen('out/f', 'wb').write(b'x' * 1000 * 1024)\n"
    code += "print(os.path.getsize('out/f'), open('in.txt').read())"
    result = sandbox.run(code, files={"out/keep": "", "in.txt": "hi"})
    assert result.ok and result.stdout == f"{1000 * 1024} hi\n" and result.stderr == ""
    assert sandbox.run("open('f', 'wb').write(b'x' * (1024**2 + 65536))").error == "file size limit exceeded (1 MB)"


def test_stderr_holds_only_the_programs_output(sandbox):
    result = sandbox.run("import sys; print('out'); print('err', file=sys.stderr)")
    assert (result.stdout, result.stderr, result.error) == ("out\n", "err\n", "")
    failed = sandbox.run("1 / 0")
    assert failed.stderr.startswith("Traceback") and "ZeroDivisionError" in failed.error
    assert "sys.stdin.buffer" not in failed.stderr  # the bootstrap's source never shows


def test_the_hosts_files_and_processes_are_out_of_sight(sandbox):
    secret = Path(__file__).resolve()
    result = sandbox.run(f"print(open({str(secret)!r}).read())")
    assert not result.ok and "No such file or directory" in result.stderr
    processes = sandbox.run("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert len(eval(processes.stdout)) <= 4  # the reaper, the shell's timeout, the program; none of the host's
    assert sandbox.run("import os; print(os.getuid())").stdout == "65534\n"


def test_program_runs_as_main_with_its_file(sandbox):
    result = sandbox.run("import sys; print(__name__, __file__, sys.argv)")
    assert result.stdout == "__main__ /tmp/main.py ['/tmp/main.py']\n"


def test_a_python3_only_image_works():
    with DockerSandbox(LIMITS, image=IMAGE) as box:
        has_python = box.run("import shutil; print(shutil.which('python'), shutil.which('python3'))")
    assert has_python.ok and has_python.stdout.split()[1].endswith("python3"), has_python


def _play_code_tests(backend: str, seed: int) -> float:
    env = gym.make("llmgym/CodeTests-v0", sandbox_backend=backend)
    try:
        solver = FlawedCodeTestsSolver()
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(solver.act(obs))
            total, done = total + reward, terminated or truncated
        return total
    finally:
        env.close()


def test_code_tests_grade_alike_on_docker_and_subprocess():
    """Seeds whose flawed solutions pass some tests (3, 7), none (4: an endless loop) and all (6)."""
    seeds = [3, 4, 6, 7]
    docker = [_play_code_tests("docker", seed) for seed in seeds]
    assert docker == [_play_code_tests("subprocess", seed) for seed in seeds]
    assert len(set(docker)) >= 3  # the seeds tell the backends apart if they grade differently
