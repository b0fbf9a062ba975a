"""llmgym.sandbox regressions: programs run as a real ``__main__`` with python's teardown, forked callers,
hidden host processes, cleanup time, limit validation, and the Docker backend against a fake engine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from llmgym.sandbox import DockerSandbox, SandboxLimits, SubprocessSandbox, shared_sandbox
from llmgym.sandbox import docker_backend, subprocess_backend

ROOT = os.geteuid() == 0
LIMITS = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=512, max_output_bytes=10_000)


@pytest.fixture(scope="module")
def sandbox():
    with SubprocessSandbox(LIMITS) as box:
        yield box


# -- 1. the program is the __main__ module -------------------------------------------------------------------


def test_a_failing_unittest_fails(sandbox):
    code = "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(1, 2)\nunittest.main()"
    result = sandbox.run(code)
    assert result.exit_code == 1 and "Ran 1 test" in result.stderr and "FAILED (failures=1)" in result.stderr


def test_doctest_and_pickle_see_the_program_as_main(sandbox):
    code = (
        "import doctest, os, pickle, __main__\n"
        "def double(x):\n"
        '    """\n    >>> double(2)\n    4\n    """\n'
        "    return 2 * x\n"
        "class Point:\n    pass\n"
        "print(doctest.testmod())\n"
        "print(type(pickle.loads(pickle.dumps(Point()))).__qualname__, __main__.double is double)\n"
        "print(sorted(os.listdir('.')))\n"
    )
    result = sandbox.run(code, files={"data.txt": "x"})
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "TestResults(failed=0, attempted=1)",
        "Point True",
        "['data.txt']",  # the program's own file is not among its files
    ]


def test_program_file_holds_the_code(sandbox):
    code = "import sys\nprint(open(__file__).read().splitlines()[0])\nprint(sys.argv == [__file__])"
    result = sandbox.run(code)
    assert result.stdout == "import sys\nTrue\n"


def test_tracebacks_show_only_the_programs_frames(sandbox):
    result = sandbox.run("def f():\n    1 / 0\nf()")
    assert result.stderr.startswith("Traceback") and "_worker.py" not in result.stderr
    assert 'File "<sandbox>", line 2, in f' in result.stderr and "ZeroDivisionError" in result.error


def test_a_custom_excepthook_prints_the_uncaught_error(sandbox):
    code = "import sys\nsys.excepthook = lambda kind, value, tb: print('hook', kind.__name__)\nraise KeyError(1)"
    result = sandbox.run(code)
    assert result.exit_code == 1 and result.stdout == "hook KeyError\n"


# -- 4. teardown as python does it ----------------------------------------------------------------------------


def test_atexit_handlers_and_non_daemon_threads_run_before_exit(sandbox):
    code = (
        "import atexit, threading, time\n"
        "atexit.register(print, 'atexit ran')\n"
        "def late():\n    time.sleep(0.3)\n    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "print('main done')\n"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "main done\nthread done\natexit ran\n"


def test_output_buffered_before_stdout_is_replaced_is_kept(sandbox):
    result = sandbox.run("import io, sys\nprint('hi')\nsys.stdout = io.StringIO()\nprint('lost, as in python')")
    assert result.ok and result.stdout == "hi\n"


def test_sys_exit_with_a_message_and_a_failing_atexit_handler(sandbox):
    code = "import atexit, sys\natexit.register(lambda: 1 / 0)\nsys.exit('bye')"
    result = sandbox.run(code)
    assert result.exit_code == 1 and result.stderr.startswith("bye\n")
    assert "Exception ignored in atexit callback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_a_thread_that_never_ends_hits_the_wall_clock(sandbox):
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\nprint('started')"
    result = sandbox.run(code, limits=LIMITS.replace(wall_time_s=3))  # time to print 'started' on a busy machine
    assert result.timed_out and result.stdout == "started\n"
    assert sandbox.run("print('next')").stdout == "next\n"


def test_the_code_tests_harness_still_grades():
    from llmgym.envs.code_tests.harness import grade

    with SubprocessSandbox(LIMITS) as box:
        report = grade(box, "def add(a, b):\n    return a + b", "add", [([1, 2], 3), ([2, 2], 5)])
        exits = grade(box, "import sys\ndef add(a, b):\n    sys.exit(0)", "add", [([1, 2], 3)])
    assert report.passed == 1 and report.outcomes[1].got == "4"
    assert exits.passed == 0


# -- 2. a forked process never uses, kills or deletes its parent's workers -----------------------------------


def _in_child(body) -> int:
    """Run ``body()`` in a forked child; its exit status is 0 when it returned True."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            status = 0 if body() else 1
        finally:
            os._exit(status)
    return pid


def test_a_forked_child_does_not_kill_the_parents_run():
    box = SubprocessSandbox(LIMITS)
    try:
        assert box.run("print(0)").ok
        worker = box._idle[0]
        scratch = worker.scratch

        def child():
            time.sleep(0.3)  # the parent's run is under way
            result = box.run("print('child')")
            box.close()
            return result.stdout == "child\n"

        pid = _in_child(child)
        result = box.run("import time\ntime.sleep(1.2)\nprint('parent')")
        _, status = os.waitpid(pid, 0)
        assert result.stdout == "parent\n" and result.ok, result.error
        assert os.waitstatus_to_exitcode(status) == 0
        assert box.restarts == 0 and box._idle == [worker] and worker.alive() and os.path.isdir(scratch)
        assert box.run("print(1)").stdout == "1\n"
    finally:
        box.close()


def test_a_shared_handle_in_a_forked_child_uses_workers_of_its_own():
    handle = shared_sandbox(limits=LIMITS, role="session6-fork")
    try:
        assert handle.run("print(0)").ok
        pool = handle._sandbox
        worker_pids = [w.proc.pid for w in pool._idle]

        def child():
            ok = handle.run("print('child')").stdout == "child\n"
            mine = [w.proc.pid for w in pool._idle]
            handle.close()
            return ok and mine and not set(mine) & set(worker_pids)

        pid = _in_child(child)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert [w.proc.pid for w in pool._idle] == worker_pids and all(w.alive() for w in pool._idle)
        assert all(os.path.isdir(w.scratch) for w in pool._idle)  # the child deleted nothing of the parent's
        assert handle.run("print(1)").stdout == "1\n" and pool.restarts == 0
    finally:
        handle.close()


# -- 3. the program cannot see other processes ---------------------------------------------------------------

_SCAN_PROC = (
    "import os\n"
    "found = []\n"
    "for pid in os.listdir('/proc'):\n"
    "    try:\n"
    "        if b'sk-SESSION6' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
    "            found.append(pid)\n"
    "    except OSError:\n"
    "        pass\n"
    "print(found, str(os.getpid()) in os.listdir('/proc'))\n"
)


@pytest.mark.skipif(not ROOT, reason="the private /proc needs root or a user namespace; see the unprivileged probe")
def test_other_processes_command_lines_are_hidden(sandbox):
    secret = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", "sk-SESSION6"])
    try:
        deadline = time.monotonic() + 30  # the new command line is in place a moment after Popen returns
        while b"sk-SESSION6" not in Path(f"/proc/{secret.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert b"sk-SESSION6" in Path(f"/proc/{secret.pid}/cmdline").read_bytes()
        result = sandbox.run(_SCAN_PROC)
    finally:
        secret.kill()
        secret.wait()
    assert result.stdout == "[] True\n", result.stderr  # nothing found; the program still sees itself
    assert sandbox.isolation()["processes_hidden"] is True
    environ = sandbox.run(f"print(open('/proc/{os.getpid()}/environ').read())")  # the caller's: not there at all
    assert not environ.ok and "No such file or directory" in environ.stderr


_UNPRIVILEGED_PROBE = """
import json, subprocess, sys, time
from llmgym.sandbox import SandboxLimits, SubprocessSandbox
secret = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", "sk-SESSION6"])
try:
    with SubprocessSandbox(SandboxLimits(wall_time_s=5)) as box:
        out = {"isolation": box.isolation(), "scan": box.run(sys.argv[1]).stdout,
               "pids": box.run("import os; print(sorted(p for p in os.listdir('/proc') if p.isdigit()))").stdout}
finally:
    secret.kill()
print(json.dumps(out))
"""


@pytest.mark.skipif(not ROOT, reason="simulating an unprivileged user needs root to create the user namespace")
def test_unprivileged_runs_see_only_their_own_pid_namespace():
    command = ["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, "-c", _UNPRIVILEGED_PROBE,
               _SCAN_PROC]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    except FileNotFoundError:
        pytest.skip("no unshare command")
    if done.returncode != 0 and "unshare" in done.stderr and "llmgym" not in done.stderr:
        pytest.skip(f"cannot simulate an unprivileged user here: {done.stderr.strip()[:200]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["isolation"]["user_namespace"] and out["isolation"]["processes_hidden"]
    assert out["scan"] == "[] True\n" and out["pids"] == "['1']\n"


# -- 5. cleanup after a run is not the run's time ------------------------------------------------------------


def test_a_run_that_leaves_many_files_is_a_timeout_not_a_crash(monkeypatch):
    # the cleanup of ~100k files takes longer than this grace; it must not be mistaken for a hung worker
    monkeypatch.setattr(subprocess_backend, "_GRACE_S", 0.5)
    code = "i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n    if i % 10000 == 0:\n        print(i, flush=True)"
    with SubprocessSandbox(LIMITS.replace(wall_time_s=2)) as box:
        box.start()
        result = box.run(code)
        assert result.timed_out and "time limit exceeded" in result.error and "10000\n" in result.stdout
        assert box.restarts == 0
        after = box.run("import os; print(os.listdir('.'))")
        assert after.stdout == "[]\n" and box.restarts == 0


# -- 6. limits are validated up front ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["wall_time_s", "cpu_time_s", "memory_mb", "max_output_bytes"])
def test_infinite_limits_are_refused(name):
    with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be finite, got inf"):
        SandboxLimits(**{name: float("inf")})
    with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be > 0, got nan"):
        SandboxLimits(**{name: float("nan")})


def test_huge_finite_limits_run(sandbox):
    huge = SandboxLimits(wall_time_s=1e300, cpu_time_s=1e300, memory_mb=10**15, file_size_mb=10**15,
                         max_processes=10**20, max_open_files=10**9)
    result = sandbox.run("print('ok')", limits=huge)
    assert result.ok and result.stdout == "ok\n", result.error


# -- 7. the Docker backend, against a fake engine ------------------------------------------------------------


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
        self.api = types.SimpleNamespace(exec_create=self._exec_create, exec_start=self._exec_start,
                                         exec_inspect=self._exec_inspect)

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
    errors = types.SimpleNamespace(ImageNotFound=type("ImageNotFound", (Exception,), {}),
                                   DockerException=type("DockerException", (Exception,), {}))
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
    assert result.exit_code == 1 and result.stderr.endswith("division by zero\n") and "ZeroDivisionError" in result.error


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
    assert script.startswith("ulimit -t unlimited -f unlimited -v unlimited; exec timeout -s KILL 1e+07 ")


def test_docker_sandbox_in_a_forked_child_starts_its_own_container(fake_docker):
    engine = _FakeEngine(_echo)
    box = DockerSandbox(LIMITS, client=engine)
    assert box.run("print(1)").ok
    parent_container = box._container

    def child():
        ok = box.run("print(2)").ok and box._container is not parent_container
        box.close()
        return ok and engine.removed == ["container-2"] and all(c == "container-2" for c, _ in engine.cleanups[1:])

    pid = _in_child(child)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert box._container is parent_container and engine.removed == []


@pytest.mark.skipif(not ROOT or not os.path.exists("/usr/bin/unshare"), reason="needs root to mount a private /work")
def test_docker_bootstrap_runs_the_program_as_main(tmp_path):
    """The bootstrap that runs in the container, run here in a private mount namespace with its own /work and /tmp."""
    job = json.dumps({"code": "import sys\nprint(__name__, __file__, sys.argv, open('d/x.txt').read())",
                      "files": {"d/x.txt": "hi"}}).encode()
    python = os.path.realpath(sys.executable)  # a virtualenv's link may sit in the /tmp this covers; -I needs no venv
    if python.startswith(("/tmp/", "/work/")):
        pytest.skip(f"the interpreter ({python}) lies in a folder this test covers with a tmpfs")
    script = f'mount -t tmpfs none /work && mount -t tmpfs none /tmp && cd /work && exec {python} -I -c "$0"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           docker_backend._BOOTSTRAP], input=b"%d\n" % len(job) + job, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "__main__ /tmp/main.py ['/tmp/main.py'] hi\n"
