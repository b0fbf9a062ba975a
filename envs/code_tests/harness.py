"""Running a candidate solution on test inputs in the sandbox, and grading it on the host.

Holds :func:`grading_program` (the program sent to the sandbox) and
:func:`grade` (run it and compare on the host). Every test is a sandbox run
of its own: the program receives only that test's inputs, loads the
solution, calls the candidate function once, and writes the return value as
JSON on a line tagged with a random nonce. Neither the verdict nor the clock
lives in the process the solution runs in: the sandbox times each run from
outside it and kills it at ``per_test_s`` (loading the solution counts), and
the host compares the value with the reference output. So a candidate that
exits early, prints "passed", patches builtins, or rewrites the harness's
frames and globals (its clock, its start time, its alarm) gains nothing:
results that are missing, malformed, wrong or late count as failed, and no
state carries over from one test to the next.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from llmgym.messages import loads_json
from llmgym.sandbox import ExecutionResult, Sandbox

__all__ = ["CaseOutcome", "GradeReport", "grading_program", "grade"]

_TEMPLATE = """\
import json as _json, os as _os
_out, _write, _dumps = _os.dup(1), _os.write, _json.dumps
_ARGS = _json.loads({args!r})
def _emit(kind, text):
    _write(_out, ({nonce!r} + " " + kind + " " + text + "\\n").encode("utf-8", "replace"))
_namespace = {{"__name__": "solution"}}
try:
    with open("solution.py", encoding="utf-8") as _file:
        exec(compile(_file.read(), "solution.py", "exec"), _namespace)
    if {function!r} not in _namespace:
        raise NameError("your code does not define " + {function!r})
    _function = _namespace[{function!r}]
    if not callable(_function):
        raise TypeError({function!r} + " is not a function")
except BaseException as _error:
    _emit("load", _dumps(type(_error).__name__ + ": " + str(_error)[:300]))
    _os._exit(0)
try:
    _emit("ok", _dumps(_function(*_ARGS)))
except BaseException as _error:
    _emit("error", _dumps(type(_error).__name__ + ": " + str(_error)[:200]))
_os._exit(0)
"""


@dataclass
class CaseOutcome:
    """One test: its arguments, the expected value, what came back, and whether it passed."""

    args: list[Any]
    expected: Any
    passed: bool = False
    got: str = "no result"


@dataclass
class GradeReport:
    """All tests of one grading, plus the sandbox run of each."""

    outcomes: list[CaseOutcome] = field(default_factory=list)
    load_error: str = ""
    runs: list[ExecutionResult] = field(default_factory=list)
    """One per test, in order; fewer when the solution failed to load (the remaining tests were not run)."""

    @property
    def passed(self) -> int:
        """Tests passed."""
        return sum(o.passed for o in self.outcomes)

    @property
    def pass_rate(self) -> float:
        """Fraction of tests passed (0 with no tests)."""
        return self.passed / len(self.outcomes) if self.outcomes else 0.0


def grading_program(function: str, args: list[Any], nonce: str) -> str:
    """The sandbox program that calls ``function`` from ``solution.py`` on one test's ``args``."""
    return _TEMPLATE.format(nonce=nonce, args=json.dumps(args), function=function)


def grade(
    sandbox: Sandbox, code: str, function: str, cases: list[tuple[list[Any], Any]], per_test_s: float = 1.0
) -> GradeReport:
    """Run ``code`` on each case's inputs in ``sandbox``, a run per case; compare its outputs with the expected ones.

    The comparison is made here, outside the sandbox.

    A test's run, loading ``code`` included, may take ``per_test_s`` of wall
    time by the sandbox's clock; a run that takes longer is killed and fails.

    Example:
        >>> from llmgym.sandbox import SubprocessSandbox
        >>> with SubprocessSandbox() as box:
        ...     report = grade(box, "def double(x):\\n    return 2 * x", "double", [([2], 4), ([5], 11)])
        >>> report.passed, report.outcomes[1].got
        (1, '10')
    """
    nonce = secrets.token_hex(8)
    # CPU: a backstop to the wall clock
    limits = sandbox.limits.replace(wall_time_s=per_test_s, cpu_time_s=per_test_s + 1.0)
    report = GradeReport([CaseOutcome(list(args), expected) for args, expected in cases])
    for outcome in report.outcomes:
        run = sandbox.run(grading_program(function, outcome.args, nonce), files={"solution.py": code}, limits=limits)
        report.runs.append(run)
        kind, text = _result_line(run.stdout, nonce)
        # timed out by the sandbox's clock, out of the program's reach; whatever it printed first does not count
        if run.timed_out:
            outcome.got = f"took longer than {per_test_s:g} s"
        elif kind == "load":  # the same code fails to load on every test: leave the rest unrun
            report.load_error = _loads(text)
            break
        elif kind == "ok":
            try:
                value = loads_json(text)  # json.loads's result; an over-long integer is a JSONDecodeError too
            except (json.JSONDecodeError, RecursionError):
                # RecursionError: nested deeper than the host reads; this test fails, not the run
                outcome.got = "unreadable output"
                continue
            outcome.got = repr(value)  # Python, as the examples in the prompt are written (False, None, 'text')
            outcome.passed = value == outcome.expected and type(value) is type(outcome.expected)
        elif kind == "error":
            outcome.got = f"raised {_loads(text)}"
        elif run.error:
            outcome.got = f"no result: {run.error}"
    return report


def _result_line(stdout: str, nonce: str) -> tuple[str, str]:
    """``(kind, json text)`` of the run's first line tagged with ``nonce``; ``("", "")`` when there is none.

    The first stands: a line the solution printed earlier under the nonce can only hold a value it could have returned.
    """
    for line in stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == nonce and parts[1] in ("load", "ok", "error"):
            return parts[1], parts[2]
    return "", ""


def _loads(text: str) -> str:
    try:
        value = loads_json(text)
    except (json.JSONDecodeError, RecursionError):
        return text[:200]
    return value if isinstance(value, str) else str(value)
