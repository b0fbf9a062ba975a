"""``llmgym/CodeTests-v0``: write a function from a spec; graded by hidden tests in a sandbox.

Holds :class:`CodeTestsEnv`; its docstring documents the environment in Gymnasium's
sections, how it could be gamed included (:mod:`.harness` does the grading).
"""

from __future__ import annotations

import math
from typing import Any

from llmgym.env import LLMEnv
from llmgym.envs.code_tests.harness import GradeReport, grade
from llmgym.envs.code_tests.problems import CodeProblem, make_problem
from llmgym.rubric import Reward, Rubric, TurnContext, format_error
from llmgym.sandbox import Sandbox, SandboxLimits, shared_sandbox
from llmgym.tools import ToolError, tool

__all__ = ["CodeTestsEnv"]

MAX_CODE_CHARS = 20_000


class CodeTestsEnv(LLMEnv):
    """Write a Python function to a spec; reward is the fraction of hidden tests it passes.

    ## Description

    Each episode draws a problem (:mod:`.problems`: seeded generated families and a
    hand-written set). The agent writes Python source defining the named function;
    ``run_examples`` runs it on the visible examples in the sandbox and shows what
    passed; ``submit`` ends the episode and grades the source on hidden tests (inputs
    the agent never saw) in a separate grading sandbox that none of the agent's
    ``run_examples`` calls ever ran in.

    ## Action Space

    ``Text``: assistant text with ``<tool_call>`` blocks, or an OpenAI assistant
    message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the spec with its visible examples, then each tool's result.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``hidden_pass_rate`` | 1.0 | end | fraction of hidden tests the submission passed (0: none submitted) |
    | ``format_error`` | -0.1 | turn | 1 when the turn's action was malformed |
    | ``visible_pass_rate`` | 0 | turn | metric: fraction of visible examples passed by this turn's ``run_examples`` |
    | ``submitted`` | 0 | end | metric: 1 when the agent submitted |

    How it could be gamed, and why that does not pay: expected outputs never enter
    the sandbox, only inputs do, and the host compares the returned values, so
    ``sys.exit(0)``, ``os._exit``, printing "passed", monkeypatching builtins or
    ``json``, and reading the harness's frames all leave tests without a correct
    result; a result line that is missing or malformed fails. Each test is a sandbox
    run of its own, timed and killed by the sandbox from outside it, so nothing the
    solution changes in its own process (the harness's frames and globals included)
    stretches a test's time limit. The tests are not files the program can read or
    edit: llmgym's sources, where the hand-written tests live, are hidden inside the
    sandbox. Special-casing the visible examples fails, because the hidden inputs are
    drawn apart from them (never equal to one). Memorising examples across episodes
    fails too: every problem, hand-written ones included, draws its inputs fresh from
    the episode's rng (a table of 400 episodes' examples scores about 0.06 on new
    seeds). A ``pass`` body returns None, which passes only the tests whose answer is
    None: ``kth_largest`` on a list with fewer than k distinct values, about 0.18 of
    that family's hidden tests on average (up to 0.58), about 0.02 over ``mixed``
    problems. The visible pass rate pays nothing, so fitting the examples is worth
    nothing by itself. ``tests/envs/test_code_tests.py`` checks that such policies
    score far below the scripted honest solver.

    ## Starting State

    A problem of ``source`` drawn with ``self.np_random``, its examples and hidden
    tests generated from the same rng.

    ## Episode End

    - Terminated: the agent called ``submit``.
    - Truncated: ``max_turns`` turns or the token budget ran out (``hidden_pass_rate`` 0).

    ## Arguments

    Args:
        source: ``"generated"``, ``"handwritten"`` or ``"mixed"`` problems.
        n_hidden: hidden tests per problem.
        max_turns: turn budget.
        sandbox_backend: ``"subprocess"``, ``"docker"`` or ``"auto"``.
        per_test_timeout_s: wall time one test may take, loading the code included (each test is a sandbox run of
            its own, timed by the sandbox from outside it: a clock the solution cannot stop or change).
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    Sandboxes (warm pools shared by the process's CodeTests envs, one for the
    agent's runs and one for grading) start on the first tool call;
    :meth:`close` releases them.

    ## Version History

    - v0: initial release.
    """

    description = (
        "Write a function from a spec; run it on visible examples, then be graded on hidden tests in a fresh sandbox."
    )
    system_prompt = (
        "You are a careful Python programmer. Write the requested function. Call run_examples with your source "
        "code to test it on the examples, fix it if needed, then call submit with the final source code. "
        "Submit ends the task; your score is the fraction of hidden tests (different inputs) that pass. Call tools as "
        '<tool_call>{"name": "run_examples", "arguments": {"code": "def f(x):\\n    return x"}}</tool_call>.'
    )

    def __init__(
        self,
        source: str = "mixed",
        n_hidden: int = 12,
        max_turns: int = 8,
        sandbox_backend: str = "subprocess",
        per_test_timeout_s: float = 1.0,
        **kwargs: Any,
    ):
        if source not in ("generated", "handwritten", "mixed"):
            raise ValueError(f"source must be 'generated', 'handwritten' or 'mixed', got {source!r}")
        if n_hidden < 1:
            raise ValueError(f"n_hidden must be >= 1, got {n_hidden}")
        if not (isinstance(per_test_timeout_s, (int, float)) and 0 < per_test_timeout_s < math.inf):
            raise ValueError(f"per_test_timeout_s must be a positive number of seconds, got {per_test_timeout_s!r}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.source, self.n_hidden = source, n_hidden
        self.sandbox_backend = sandbox_backend
        self.per_test_timeout_s = per_test_timeout_s
        self._sandboxes: dict[str, Sandbox] = {}
        self.problem: CodeProblem | None = None
        self.final_report: GradeReport | None = None
        self.example_runs: dict[int, float] = {}  # turn -> visible pass rate

    def setup(self, options: dict[str, Any] | None) -> str:
        self.problem = make_problem(self.np_random, self.source, n_hidden=self.n_hidden)
        self.final_report = None
        self.example_runs = {}
        return self.problem.spec

    def _sandbox(self, role: str) -> Sandbox:
        """The agent's sandbox (``"agent"``) or the grading one (``"grader"``): separate pools, started lazily."""
        if role not in self._sandboxes:  # pools are shared by every CodeTests env of the process, per role
            limits = SandboxLimits(wall_time_s=10, cpu_time_s=10, memory_mb=512)
            options = {"pool_size": 4} if self.sandbox_backend == "subprocess" else {}
            self._sandboxes[role] = shared_sandbox(self.sandbox_backend, limits, role=f"code_tests.{role}", **options)
        return self._sandboxes[role]

    @tool(max_output_chars=6000)
    def run_examples(self, code: str) -> str:
        """Run your source code on the visible examples and see which pass.

        Args:
            code: Python source that defines the requested function.
        """
        problem = self._check(code)
        report = grade(self._sandbox("agent"), code, problem.function, problem.visible, self.per_test_timeout_s)
        self.example_runs[len(self.turn_contexts) + 1] = report.pass_rate
        return _describe(report, problem.function)

    @tool
    def submit(self, code: str) -> str:
        """Submit your final source code (ends the task); it is graded on hidden tests.

        Args:
            code: Python source that defines the requested function.
        """
        problem = self._check(code)
        self.final_report = grade(
            self._sandbox("grader"), code, problem.function, problem.hidden, self.per_test_timeout_s
        )
        return f"Submitted. Hidden tests passed: {self.final_report.passed}/{len(problem.hidden)}."

    def _check(self, code: str) -> CodeProblem:
        if self.problem is None:
            raise ToolError("no problem: call reset() first")
        if len(code) > MAX_CODE_CHARS:
            raise ToolError(f"code too long ({len(code)} characters; limit {MAX_CODE_CHARS})")
        if not code.strip():
            raise ToolError(f"code is empty; define the function {self.problem.function}")
        return self.problem

    def is_done(self) -> bool:
        return self.final_report is not None

    def close(self) -> None:
        for sandbox in self._sandboxes.values():
            sandbox.close()
        self._sandboxes = {}
        super().close()

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(
                    lambda ctx: self.final_report.pass_rate if self.final_report else 0.0,
                    weight=1.0,
                    when="end",
                    name="hidden_pass_rate",
                ),
                Reward(format_error, weight=-0.1),
                Reward(self._visible, weight=0.0, name="visible_pass_rate"),
                Reward(lambda ctx: 1.0 if self.final_report else 0.0, weight=0.0, when="end", name="submitted"),
            ]
        )

    def _visible(self, ctx: TurnContext) -> float:
        return self.example_runs.get(ctx.turn, 0.0)


def _describe(report: GradeReport, function: str) -> str:
    lines = []
    if report.load_error:
        lines.append(f"Your code failed before the tests ran: {report.load_error}")
    for outcome in report.outcomes:
        call = f"{function}({', '.join(repr(a) for a in outcome.args)})"
        mark = "PASS" if outcome.passed else "FAIL"
        lines.append(f"{mark} {call}: expected {outcome.expected!r}, got {outcome.got}")
    lines.append(f"{report.passed}/{len(report.outcomes)} examples passed.")
    stderr = "".join(run.stderr for run in report.runs).strip()  # one run per example; a run's problem is in its line
    if stderr:
        lines.append("stderr:\n" + stderr[-1500:])
    return "\n".join(lines)
