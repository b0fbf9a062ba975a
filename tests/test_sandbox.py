"""llmgym.sandbox: limits, isolation, hostile programs, the warm pool, interrupted runs, and shared sandboxes and their
copies. The worker's own behaviour is in test_sandbox_worker.py, the Docker backend in test_sandbox_docker.py."""

from __future__ import annotations

import copy
import os
import pickle
import signal
import threading
import time
from pathlib import Path

import pytest

from llmgym.sandbox import (
    DockerSandbox,
    ExecutionResult,
    LazySandbox,
    SandboxLimits,
    SubprocessSandbox,
    default_hidden_paths,
    make_sandbox,
    shared_sandbox,
)
from llmgym.sandbox import shared as shared_module

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="namespaces and the uid drop need root")
LIMITS = SandboxLimits(wall_time_s=3, cpu_time_s=1, memory_mb=512, max_output_bytes=10_000)


@pytest.fixture(scope="module")
def sandbox():
    with SubprocessSandbox(LIMITS) as box:
        yield box


def test_runs_code_and_returns_output(sandbox):
    result = sandbox.run("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)")
    assert result.ok and result.stdout == "42\n" and result.stderr == "warn\n"
    assert result.exit_code == 0 and not result.timed_out and result.error == ""


def test_files_land_in_a_fresh_private_work_dir(sandbox):
    result = sandbox.run(
        "import os; print(open('data/x.txt').read(), sorted(os.listdir('.')))", files={"data/x.txt": "hi"}
    )
    assert result.stdout.strip() == "hi ['data']"
    leftover = sandbox.run("import os; print(sorted(os.listdir('.')))")
    assert leftover.stdout.strip() == "[]"  # nothing survives from the previous run


def test_file_names_cannot_leave_the_work_dir(sandbox):
    result = sandbox.run("print('ran')", files={"../escape.txt": "x"})
    assert not result.ok and "leaves the work dir" in result.error


def test_program_error_is_reported_with_traceback(sandbox):
    result = sandbox.run("1 / 0")
    assert result.exit_code == 1 and "ZeroDivisionError" in result.stderr and "ZeroDivisionError" in result.error
    assert "_worker.py" not in result.stderr  # the worker's own frames are not shown
    text = result.to_text()
    assert text.startswith("stderr:") and "Error: exited with status 1" in text


def test_sys_exit_status_is_kept(sandbox):
    assert sandbox.run("import sys; sys.exit(3)").exit_code == 3
    assert sandbox.run("import sys; sys.exit(0)").ok


def test_infinite_loop_hits_the_cpu_limit(sandbox):
    result = sandbox.run("while True: pass", limits=LIMITS.replace(wall_time_s=30))  # room for a busy machine
    assert not result.ok and "CPU time limit" in result.error


def test_sleeping_program_hits_the_wall_clock(sandbox):
    start = time.monotonic()
    result = sandbox.run("import time; time.sleep(3600)", limits=LIMITS.replace(wall_time_s=1))
    assert result.timed_out and "time limit exceeded" in result.error
    # stopped at the wall clock, not at the program's end (room for a busy machine)
    assert time.monotonic() - start < 60


def test_memory_bomb_is_contained(sandbox):
    result = sandbox.run("x = bytearray(4 * 1024**3)")
    assert not result.ok and "memory limit exceeded" in result.error


def test_huge_output_is_capped(sandbox):
    result = sandbox.run("while True: print('x' * 1000)")
    assert result.output_truncated and "output limit exceeded" in result.error
    assert len(result.stdout) <= LIMITS.max_output_bytes


def test_file_size_limit(sandbox):
    result = sandbox.run("open('big', 'wb').write(b'x' * 40 * 1024 * 1024)", limits=LIMITS.replace(file_size_mb=1))
    assert not result.ok and "file size limit exceeded" in result.error


def test_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("LLMGYM_TEST_SECRET", "hunter2")
    result = sandbox.run("import os; print(dict(os.environ))")
    assert "hunter2" not in result.stdout and "LLMGYM_TEST_SECRET" not in result.stdout


@needs_root
def test_caller_environ_is_unreadable(sandbox):
    result = sandbox.run(f"print(open('/proc/{os.getpid()}/environ').read())")
    # the caller's /proc entry is hidden (hidepid / the run's own PID namespace), or at least unreadable
    assert not result.ok and ("No such file or directory" in result.stderr or "Permission denied" in result.stderr)


@needs_root
def test_fork_bomb_is_contained(sandbox):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = sandbox.run(bomb, limits=LIMITS.replace(wall_time_s=1.5))
    assert not result.ok
    assert sandbox.run("print('still here')").stdout == "still here\n"


@needs_root
def test_escaped_daemon_is_killed_after_the_run(sandbox):
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint(os.getuid())"
    result = sandbox.run(code)
    uid = int(result.stdout)
    deadline = time.monotonic() + 30  # the worker kills and reaps before it answers; a busy machine may lag
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_of(uid) == []


def _processes_of(uid: int) -> list[Path]:
    return [p for p in Path("/proc").iterdir() if p.name.isdigit() and _uid_of(p) == uid]


def _uid_of(proc: Path) -> int | None:
    try:
        lines = (proc / "status").read_text().splitlines()
        return int(next(line for line in lines if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return None


@needs_root
def test_cannot_write_outside_the_work_dir(sandbox, tmp_path):
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)
    result = sandbox.run(f"open({str(target)!r}, 'w').write('x')\nopen('/tmp/x', 'w').write('x')")
    assert not result.ok and not target.exists()
    assert "Permission denied" in result.stderr or "No such file" in result.stderr


@needs_root
def test_no_network(sandbox):
    result = sandbox.run("import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)")
    assert not result.ok and ("unreachable" in result.stderr or "OSError" in result.stderr)
    assert sandbox.isolation()["network_isolated"] is True


@needs_root
def test_killing_the_parent_and_everyone_fails(sandbox):
    result = sandbox.run("import os; os.kill(os.getppid(), 9)")
    assert "Operation not permitted" in result.stderr
    sandbox.run("import os, signal; os.kill(-1, signal.SIGKILL)")
    assert sandbox.run("print('alive')").stdout == "alive\n"


@needs_root
def test_llmgym_sources_are_hidden(sandbox):
    hidden = default_hidden_paths()
    assert hidden
    source = Path(__file__).resolve().parents[1] / "llmgym" / "env.py"
    result = sandbox.run(f"print(open({str(source)!r}).read()[:20])")
    assert not result.ok
    assert not sandbox.run("import llmgym").ok


def test_isolation_report_says_what_is_enforced(sandbox):
    report = sandbox.isolation()
    assert report["backend"] == "subprocess"
    assert report["uid_drop"] is ROOT
    assert report["process_limit"] is (report["uid_drop"] or report["pid_namespace_per_run"])
    assert "RLIMIT_AS" in report["rlimits"]


def test_damaged_worker_is_replaced():
    with SubprocessSandbox(LIMITS, isolate=False) as box:
        assert box.run("print(1)").ok
        result = box.run("import os, signal; os.kill(os.getppid(), signal.SIGKILL)")
        assert "crashed its sandbox worker" in result.error and box.restarts == 1
        assert box.run("print(2)").stdout == "2\n"


def test_pool_runs_concurrent_calls_in_fresh_forks_of_warm_workers():
    with SubprocessSandbox(LIMITS, pool_size=2, preload=["fractions"]) as box:
        box.start()
        results: list[ExecutionResult] = []
        threads = [threading.Thread(target=lambda i=i: results.append(box.run(f"print({i})"))) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(r.stdout for r in results) == [f"{i}\n" for i in range(4)]
        # a call is a fork of a worker that imported `preload` once (no interpreter start), and a fresh one each time
        first = box.run("import sys\nprint('fractions' in sys.modules)\nsys.modules['fractions'].mark = 1")
        second = box.run("import fractions\nprint(hasattr(fractions, 'mark'))")
        assert (first.stdout, second.stdout) == ("True\n", "False\n") and box.restarts == 0


def test_cold_mode_and_closed_sandbox():
    box = SubprocessSandbox(LIMITS, warm=False)
    assert box.run("print('cold')").stdout == "cold\n"
    box.close()
    with pytest.raises(RuntimeError, match="this sandbox is closed"):
        box.run("print(1)")
    with pytest.raises(TypeError, match="code must be str, got bytes"):
        SubprocessSandbox().run(b"print(1)")


def test_bad_limits_and_backend_names():
    with pytest.raises(ValueError, match="memory_mb must be > 0, got 0"):
        SandboxLimits(memory_mb=0)
    with pytest.raises(ValueError, match="backend must be 'subprocess', 'docker' or 'auto', got 'vm'"):
        make_sandbox("vm")
    with pytest.raises(ValueError, match="pool_size must be >= 1, got 0"):
        SubprocessSandbox(pool_size=0)


_UNPRIVILEGED_PROBE = """
import json, os
from llmgym.sandbox import SandboxLimits, SubprocessSandbox
with SubprocessSandbox(SandboxLimits(wall_time_s=5)) as box:
    out = {"euid": os.geteuid(), "isolation": box.isolation()}
    out["pids"] = box.run("import os; print(os.getpid(), os.getppid())").stdout.split()
    out["kill_all"] = box.run("import os, signal; os.kill(-1, signal.SIGKILL)").ok
    out["kill_parent"] = box.run("import os; os.kill(os.getppid(), 9)").error
    out["write"] = box.run("open('/etc/llmgym-escape', 'w')").stderr.strip().splitlines()[-1]
    out["net"] = box.run("import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)").ok
    out["caps"] = box.run("print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')])").stdout
    out["undo_mounts"] = box.run("import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                                 "print(libc.umount2(b'/tmp', 2), libc.mount(None, b'/', None, 0x1020, None))").stdout
    out["after"] = box.run("print('alive')").stdout
    out["restarts"] = box.restarts
print(json.dumps(out))
"""


@pytest.mark.skipif(not ROOT, reason="simulating an unprivileged user needs root to create the user namespace")
def test_unprivileged_user_gets_user_and_pid_namespaces():
    """As a non-root user the workers enter a user namespace; each run is PID 1 of its own PID namespace."""
    import json
    import subprocess
    import sys

    command = ["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, "-c", _UNPRIVILEGED_PROBE]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1]
        )
    except FileNotFoundError:
        pytest.skip("no unshare command")
    if done.returncode != 0 and "unshare" in done.stderr and "llmgym" not in done.stderr:
        pytest.skip(f"cannot simulate an unprivileged user here: {done.stderr.strip()[:200]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["euid"] == 1000
    report = out["isolation"]
    assert report["user_namespace"] and report["pid_namespace_per_run"] and report["network_isolated"]
    assert report["can_signal_caller"] is False and report["read_only_root"]
    assert out["pids"] == ["1", "0"]  # the program is alone in its PID namespace
    assert out["kill_parent"] and not out["net"]
    assert "Read-only file system" in out["write"]
    # root of its user namespace, but with no capability: it cannot unmount the private /tmp or make / writable
    assert out["caps"] == str(["0000000000000000"] * 5) + "\n" and out["undo_mounts"] == "-1 -1\n"
    assert out["after"] == "alive\n" and out["restarts"] == 0


def test_shared_sandboxes_are_reference_counted():
    from llmgym.sandbox import shared_sandbox

    a, b = shared_sandbox(limits=LIMITS, role="test"), shared_sandbox(limits=LIMITS, role="test")
    other = shared_sandbox(limits=LIMITS, role="test-other")
    assert a._sandbox is b._sandbox and other._sandbox is not a._sandbox
    assert a.run("print(1)").stdout == "1\n"
    pool = a._sandbox
    a.close()
    a.close()  # closing a handle twice releases it once
    assert b.run("print(2)").stdout == "2\n" and not pool._closed
    b.close()
    assert pool._closed
    with pytest.raises(RuntimeError, match="this sandbox handle is closed"):
        b.run("print(3)")
    other.close()
    fresh = shared_sandbox(limits=LIMITS, role="test")
    assert fresh._sandbox is not pool and fresh.run("print(4)").stdout == "4\n"
    fresh.close()


def test_lazy_sandbox_joins_the_shared_pool_on_first_run_and_leaves_on_close():
    from llmgym.sandbox import LazySandbox, shared_sandbox

    lazy = LazySandbox("subprocess", LIMITS, role="test-lazy")
    assert not lazy.started and lazy.limits == LIMITS
    holder = shared_sandbox(limits=LIMITS, role="test-lazy")
    assert lazy.run("print(5)").stdout == "5\n" and lazy._handle._sandbox is holder._sandbox
    lazy.close()
    assert not lazy.started and not holder._sandbox._closed  # only its own handle is released
    assert lazy.run("print(6)").stdout == "6\n" and lazy.started  # a run after close joins again
    lazy.close()
    holder.close()
    assert holder._sandbox._closed


def test_syntax_error_is_the_programs_error_not_a_sandbox_failure(sandbox):
    result = sandbox.run("x = 1 +\n")
    assert result.exit_code == 1 and "SyntaxError" in result.stderr and "SyntaxError" in result.error
    assert "sandbox" not in result.error.replace("<sandbox>", "") and "_worker.py" not in result.stderr
    assert result.stderr.startswith('  File "<sandbox>", line 1')
    null = sandbox.run("print(1)\x00")
    assert null.exit_code == 1 and "null bytes" in null.stderr and "setup" not in null.error


def test_missing_interpreter_is_an_error_result_and_leaves_no_scratch_dir(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    box = SubprocessSandbox(LIMITS, python=str(tmp_path / "no-such-python"))
    result = box.run("print(1)")
    assert not result.ok and "sandbox unavailable" in result.error and "no-such-python" in result.error
    assert list(tmp_path.iterdir()) == []
    box.close()


def test_a_file_holding_a_lone_surrogate_is_written_not_a_setup_failure(sandbox):
    # "\ud800" is valid in a JSON tool argument; the file gets its surrogatepass bytes, the run goes on
    result = sandbox.run('print(open("data.txt", "rb").read())', files={"data.txt": "a\ud800"})
    assert result.exit_code == 0 and result.stdout.strip() == "b'a\\xed\\xa0\\x80'"


@pytest.mark.parametrize("name", ["wall_time_s", "cpu_time_s", "memory_mb", "max_output_bytes"])
def test_infinite_limits_are_refused(name):
    with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be finite, got inf"):
        SandboxLimits(**{name: float("inf")})
    with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be > 0, got nan"):
        SandboxLimits(**{name: float("nan")})


def test_huge_finite_limits_run(sandbox):
    huge = SandboxLimits(
        wall_time_s=1e300,
        cpu_time_s=1e300,
        memory_mb=10**15,
        file_size_mb=10**15,
        max_processes=10**20,
        max_open_files=10**9,
    )
    result = sandbox.run("print('ok')", limits=huge)
    assert result.ok and result.stdout == "ok\n", result.error


class _Interrupted(BaseException):
    """Stands in for KeyboardInterrupt (pytest treats a real one as the end of the session)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_interrupted_run_kills_its_worker_and_program():
    """Regression: Ctrl-C during run() left the worker and the program running until the wall clock, even after
    close()."""
    sandbox = SubprocessSandbox(LIMITS)
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
    with SubprocessSandbox(LIMITS) as sandbox:  # no worker starts: the check comes first
        with pytest.raises(TypeError, match=r"files\['data.bin'\] must be text \(str\), got bytes \(decode bytes"):
            sandbox.run("print(1)", files={"data.bin": b"\x00\x01"})
        assert not sandbox._idle
    with pytest.raises(TypeError, match=r"files\['n'\] must be text \(str\), got int"):
        DockerSandbox(LIMITS).run("print(1)", files={"n": 3})


def test_shared_and_lazy_sandboxes_copy_after_their_first_run():
    """Regression: MathTools could be deep-copied or pickled before its first python call, not after (a thread lock)."""
    lazy = LazySandbox("subprocess", LIMITS, role="copy-after-first-run")
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

    handle = shared_sandbox("subprocess", LIMITS, role="copy-when-closed")
    handle.close()
    assert copy.deepcopy(handle)._closed
