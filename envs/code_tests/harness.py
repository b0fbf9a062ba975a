"""Running a candidate solution on test inputs in the sandbox, and grading it on the host.

Holds :func:`grading_program` (the program sent to the sandbox) and
:func:`grade` (run it and compare on the host). The design keeps every
expected output out of the sandbox: the program receives only the inputs,
calls the candidate function on each under a per-test alarm (a test that
took longer by ``time.monotonic``, bound before the solution loads, counts as
timed out even when the solution ignored the alarm), and writes each
return value as JSON on a line tagged with a random nonce. The host then
compares those values with the reference outputs. So a candidate that exits
early, prints "passed", patches builtins, or reads the harness's frames
gains nothing: results that are missing, malformed or wrong count as failed.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from llmgym.messages import loads_json
from llmgym.sandbox import ExecutionResult, Sandbox

__all__ = ["CaseOutcome", "GradeReport", "grading_program", "grade"]

_TEMPLATE = '''\
import json as _json, os as _os, signal as _signal, time as _time
_out, _write, _dumps, _setitimer = _os.dup(1), _os.write, _json.dumps, _signal.setitimer
_monotonic, _install = _time.monotonic, _signal.signal
def _emit(text):
    _write(_out, (text + "\\n").encode("utf-8", "replace"))
class _Timeout(BaseException):
    pass
def _on_alarm(signum, frame):
    raise _Timeout("test took longer than {per_test_s} s")
_NONCE = {nonce!r}
_CASES = _json.loads({cases!r})
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
    _emit(_NONCE + " load " + _json.dumps(type(_error).__name__ + ": " + str(_error)[:300]))
    _os._exit(0)
for _index, _args in enumerate(_CASES):
    try:
        _install(_signal.SIGALRM, _on_alarm)  # again per test: the solution may have ignored the alarm
        _started = _monotonic()
        _setitimer(_signal.ITIMER_REAL, {per_test_s})
        _value = _function(*_args)
        _setitimer(_signal.ITIMER_REAL, 0)
        if _monotonic() - _started > {per_test_s}:  # the alarm is the fast path; this clock decides
            raise _Timeout("test took longer than {per_test_s} s")
        _emit(_NONCE + " " + str(_index) + " ok " + _dumps(_value))
    except BaseException as _error:
        _setitimer(_signal.ITIMER_REAL, 0)
        _emit(_NONCE + " " + str(_index) + " error " + _dumps(type(_error).__name__ + ": " + str(_error)[:200]))
_os._exit(0)
'''


@dataclass
class CaseOutcome:
    """One test: its arguments, the expected value, what came back, and whether it passed."""

    args: list[Any]
    expected: Any
    passed: bool = False
    got: str = "no result"


@dataclass
class GradeReport:
    """All tests of one run, plus the run itself."""

    outcomes: list[CaseOutcome] = field(default_factory=list)
    load_error: str = ""
    run: ExecutionResult | None = None

    @property
    def passed(self) -> int:
        """Tests passed."""
        return sum(o.passed for o in self.outcomes)

    @property
    def pass_rate(self) -> float:
        """Fraction of tests passed (0 with no tests)."""
        return self.passed / len(self.outcomes) if self.outcomes else 0.0


def grading_program(function: str, inputs: list[list[Any]], nonce: str, per_test_s: float = 1.0) -> str:
    """The sandbox program that calls ``function`` from ``solution.py`` on each input."""
    return _TEMPLATE.format(nonce=nonce, cases=json.dumps(inputs), function=function, per_test_s=float(per_test_s))


def grade(sandbox: Sandbox, code: str, function: str, cases: list[tuple[list[Any], Any]], per_test_s: float = 1.0) -> GradeReport:
    """Run ``code`` on the cases' inputs in ``sandbox``; compare its outputs with the expected ones here.

    Example:
        >>> from llmgym.sandbox import SubprocessSandbox
        >>> with SubprocessSandbox() as box:
        ...     report = grade(box, "def double(x):\\n    return 2 * x", "double", [([2], 4), ([5], 11)])
        >>> report.passed, report.outcomes[1].got
        (1, '10')
    """
    nonce = secrets.token_hex(8)
    program = grading_program(function, [list(args) for args, _ in cases], nonce, per_test_s)
    limits = sandbox.limits.replace(wall_time_s=per_test_s * len(cases) + 3.0, cpu_time_s=per_test_s * len(cases) + 2.0)
    run = sandbox.run(program, files={"solution.py": code}, limits=limits)
    report = GradeReport([CaseOutcome(list(args), expected) for args, expected in cases], run=run)
    for line in run.stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3 or parts[0] != nonce:
            continue
        if parts[1] == "load":
            report.load_error = _loads(" ".join(parts[2:]))
            continue
        if not (parts[1].isascii() and parts[1].isdigit()) or int(parts[1]) >= len(cases) or len(parts) < 4:  # "²".isdigit()
            continue
        outcome = report.outcomes[int(parts[1])]
        if outcome.got != "no result":  # the first result of a test stands; no later line can overwrite it
            continue
        if parts[2] == "ok":
            try:
                value = loads_json(parts[3])  # json.loads's result; an over-long integer is a JSONDecodeError too
            except (json.JSONDecodeError, RecursionError):  # nested deeper than the host reads: this test fails, not the run
                outcome.got = "unreadable output"
                continue
            outcome.got = repr(value)  # Python, as the examples in the prompt are written (False, None, 'text')
            outcome.passed = value == outcome.expected and type(value) is type(outcome.expected)
        else:
            outcome.got = f"raised {_loads(parts[3])}"
    return report


def _loads(text: str) -> str:
    try:
        value = loads_json(text)
    except (json.JSONDecodeError, RecursionError):
        return text[:200]
    return value if isinstance(value, str) else str(value)
