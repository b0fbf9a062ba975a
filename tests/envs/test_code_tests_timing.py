"""CodeTests: a solution that reaches the harness's frames or globals, or ignores the alarm, cannot stretch a test's
time limit.

Each attack below does the slow work (0.5 s per test against a 0.25 s limit)
and tampers with the grading program's own state: its bound clock, its start
time, its alarm, or the nonce and inputs it writes results under. Against
a harness that timed tests inside the solution's process, every one of them
passed every test; the sandbox now times each test's run from outside it.
"""

from __future__ import annotations

import pytest

from llmgym.envs.code_tests.harness import grade
from llmgym.sandbox import SubprocessSandbox

PER_TEST_S = 0.25
CASES = [([1], 1), ([2], 2)]
SLOW_BODY = "def f(x):\n    time.sleep(0.5)\n    return x\n"

ATTACKS = {
    # rebind the harness's clock and alarm in its module globals, before any test runs
    "module_globals": (
        "import sys, time\n"
        "harness = sys.modules['__main__'].__dict__\n"
        "harness['_monotonic'] = lambda: 0.0\n"
        "harness['_setitimer'] = lambda *args: None\n" + SLOW_BODY
    ),
    "caller_frame": (
        "import sys, time\n"
        "harness = sys._getframe(1).f_globals\n"
        "harness['_monotonic'] = lambda: 0.0\n"
        "harness['_setitimer'] = lambda *args: None\n" + SLOW_BODY
    ),
    "gc_objects": (
        "import gc, time\n"
        "for harness in [o for o in gc.get_objects() if isinstance(o, dict) and '_setitimer' in o]:\n"
        "    harness['_monotonic'] = lambda: 0.0\n"
        "    harness['_setitimer'] = lambda *args: None\n" + SLOW_BODY
    ),
    # inside the call: stop the alarm, then move the test's start time into the future
    "inspect_start_time": (
        "import inspect, signal, time\n"
        "def f(x):\n"
        "    signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "    inspect.stack()[1].frame.f_globals['_started'] = float('inf')\n"
        "    time.sleep(0.5)\n"
        "    return x\n"
    ),
    # at load, before any test's clock starts: compute every answer slowly, write the results under the
    # harness's nonce (read from the grading program), and leave
    "results_before_the_clock": (
        "import json, os, re, sys, time\n"
        "harness = sys.modules['__main__']\n"
        "nonce = re.search(r\"'([0-9a-f]{16})'\", open(harness.__file__).read()).group(1)\n"
        "cases = getattr(harness, '_CASES', None) or [getattr(harness, '_ARGS', [0])]\n"
        "for index, args in enumerate(cases):\n"
        "    time.sleep(0.5)\n"
        "    value = json.dumps(args[0])\n"
        "    os.write(1, f'{nonce} {index} ok {value}\\n{nonce} ok {value}\\n'.encode())\n"
        "os._exit(0)\n"
    ),
}


@pytest.fixture(scope="module")
def box():
    with SubprocessSandbox() as sandbox:
        yield sandbox


def test_the_same_cases_pass_when_answered_in_time(box):
    # the attacks' answers are right: they fail only on time (a generous limit: a busy machine is slow to fork)
    assert grade(box, "def f(x):\n    return x\n", "f", CASES, per_test_s=30).passed == len(CASES)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_tampering_with_the_harness_does_not_escape_the_time_limit(box, attack):
    report = grade(box, ATTACKS[attack], "f", CASES, per_test_s=PER_TEST_S)
    assert report.passed == 0, [outcome.got for outcome in report.outcomes]
    assert all(outcome.got == f"took longer than {PER_TEST_S:g} s" for outcome in report.outcomes)


def test_a_test_is_timed_with_loading_the_solution_included(box):
    # slow module-level work counts against each test: at load, a solution could read its test's input
    code = "import time\ntime.sleep(3600)\ndef f(x):\n    return x\n"
    report = grade(box, code, "f", CASES, per_test_s=PER_TEST_S)
    assert report.passed == 0 and len(report.runs) == len(CASES)
    assert all(run.timed_out and run.duration_s < 60 for run in report.runs)  # killed at the limit, not after the load


def test_a_solution_that_ignores_the_alarm_still_times_out():
    """Regression: a solution that ignored the per-test alarm ran past the per-test time limit."""
    code = (
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "def f(x):\n    time.sleep(0.8)\n    return x\n"
    )
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([i], i) for i in range(4)], per_test_s=0.3)
    assert report.passed == 0
    assert all("took longer than 0.3 s" in outcome.got for outcome in report.outcomes)


def test_a_solution_that_ignores_the_alarm_inside_the_call_still_times_out():
    code = (
        "import signal, time\n"
        "def f(x):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    time.sleep(0.8)\n    return x\n"
    )
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([1], 1), ([2], 2)], per_test_s=0.3)
    assert report.passed == 0
