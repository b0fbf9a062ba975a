"""The subprocess sandbox's warm workers (llmgym/sandbox/_worker.py): a program runs as the real ``__main__``
and ends with Python's own teardown, cannot see other processes, is not charged for the cleanup after it,
and a forked caller never uses, kills or deletes its parent's workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forking import in_forked_child

from llmgym.sandbox import SandboxLimits, SubprocessSandbox, shared_sandbox, subprocess_backend

ROOT = os.geteuid() == 0
LIMITS = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=512, max_output_bytes=10_000)


@pytest.fixture(scope="module")
def sandbox():
    with SubprocessSandbox(LIMITS) as box:
        yield box


# -- the program is the __main__ module ------------------------------------------------------------------


def test_a_failing_unittest_fails(sandbox):
    code = (
        "import unittest\nclass T(unittest.TestCase):\n"
        "    def test_a(self):\n        self.assertEqual(1, 2)\nunittest.main()"
    )
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


def test_the_program_imports_what_plain_python_would(sandbox):
    """The worker loads its ``_isolation`` module by path: the program's ``sys.path`` is that of ``python -I``,
    and neither that module nor the worker's folder is there for it to import."""
    code = (
        "import json, sys\n"
        "print(json.dumps([sys.path, [name for name in sys.modules if 'isolation' in name]]))\n"
        "try:\n    import _isolation\nexcept ImportError:\n    print('no _isolation')\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    plain = subprocess.run(
        [sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    path, loaded = json.loads(result.stdout.splitlines()[0])
    assert path == json.loads(plain.stdout) and loaded == []
    assert result.stdout.splitlines()[1] == "no _isolation"


def test_a_custom_excepthook_prints_the_uncaught_error(sandbox):
    code = "import sys\nsys.excepthook = lambda kind, value, tb: print('hook', kind.__name__)\nraise KeyError(1)"
    result = sandbox.run(code)
    assert result.exit_code == 1 and result.stdout == "hook KeyError\n"


def test_the_code_tests_harness_still_grades():
    from llmgym.envs.code_tests.harness import grade

    with SubprocessSandbox(LIMITS) as box:
        report = grade(box, "def add(a, b):\n    return a + b", "add", [([1, 2], 3), ([2, 2], 5)])
        exits = grade(box, "import sys\ndef add(a, b):\n    sys.exit(0)", "add", [([1, 2], 3)])
    assert report.passed == 1 and report.outcomes[1].got == "4"
    assert exits.passed == 0


# -- teardown as python does it ------------------------------------------------------------------------


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


# -- the program cannot see other processes ------------------------------------------------------------


_SCAN_PROC = (
    "import os\n"
    "found = []\n"
    "for pid in os.listdir('/proc'):\n"
    "    try:\n"
    "        if b'sk-HIDDEN-CALLER-KEY' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
    "            found.append(pid)\n"
    "    except OSError:\n"
    "        pass\n"
    "print(found, str(os.getpid()) in os.listdir('/proc'))\n"
)


@pytest.mark.skipif(not ROOT, reason="the private /proc needs root or a user namespace; see the unprivileged probe")
def test_other_processes_command_lines_are_hidden(sandbox):
    secret = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--api-key", "sk-HIDDEN-CALLER-KEY"]
    )
    try:
        deadline = time.monotonic() + 30  # the new command line is in place a moment after Popen returns
        while (
            b"sk-HIDDEN-CALLER-KEY" not in Path(f"/proc/{secret.pid}/cmdline").read_bytes()
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        assert b"sk-HIDDEN-CALLER-KEY" in Path(f"/proc/{secret.pid}/cmdline").read_bytes()
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
secret = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", "sk-HIDDEN-CALLER-KEY"])
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
    command = [
        "unshare",
        "--user",
        "--map-user=1000",
        "--map-group=1000",
        sys.executable,
        "-c",
        _UNPRIVILEGED_PROBE,
        _SCAN_PROC,
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1]
        )
    except FileNotFoundError:
        pytest.skip("no unshare command")
    if done.returncode != 0 and "unshare" in done.stderr and "llmgym" not in done.stderr:
        pytest.skip(f"cannot simulate an unprivileged user here: {done.stderr.strip()[:200]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["isolation"]["user_namespace"] and out["isolation"]["processes_hidden"]
    assert out["scan"] == "[] True\n" and out["pids"] == "['1']\n"


# -- cleanup after a run is not the run's time -----------------------------------------------------------


def test_a_run_that_leaves_many_files_is_a_timeout_not_a_crash(monkeypatch):
    # the cleanup of ~100k files takes longer than this grace; it must not be mistaken for a hung worker
    monkeypatch.setattr(subprocess_backend, "_GRACE_S", 0.5)
    code = (
        "i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n"
        "    if i % 10000 == 0:\n        print(i, flush=True)"
    )
    with SubprocessSandbox(LIMITS.replace(wall_time_s=2)) as box:
        box.start()
        result = box.run(code)
        assert result.timed_out and "time limit exceeded" in result.error and "10000\n" in result.stdout
        assert box.restarts == 0
        after = box.run("import os; print(os.listdir('.'))")
        assert after.stdout == "[]\n" and box.restarts == 0


# -- a forked process never uses, kills or deletes its parent's workers -------------------------------


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

        pid = in_forked_child(child)
        result = box.run("import time\ntime.sleep(1.2)\nprint('parent')")
        _, status = os.waitpid(pid, 0)
        assert result.stdout == "parent\n" and result.ok, result.error
        assert os.waitstatus_to_exitcode(status) == 0
        assert box.restarts == 0 and box._idle == [worker] and worker.alive() and os.path.isdir(scratch)
        assert box.run("print(1)").stdout == "1\n"
    finally:
        box.close()


def test_a_shared_handle_in_a_forked_child_uses_workers_of_its_own():
    handle = shared_sandbox(limits=LIMITS, role="forked-child")
    try:
        assert handle.run("print(0)").ok
        pool = handle._sandbox
        worker_pids = [w.proc.pid for w in pool._idle]

        def child():
            ok = handle.run("print('child')").stdout == "child\n"
            mine = [w.proc.pid for w in pool._idle]
            handle.close()
            return ok and mine and not set(mine) & set(worker_pids)

        pid = in_forked_child(child)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert [w.proc.pid for w in pool._idle] == worker_pids and all(w.alive() for w in pool._idle)
        assert all(os.path.isdir(w.scratch) for w in pool._idle)  # the child deleted nothing of the parent's
        assert handle.run("print(1)").stdout == "1\n" and pool.restarts == 0
    finally:
        handle.close()
