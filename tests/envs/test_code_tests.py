"""CodeTests-v0: problems, host-side grading, separate sandboxes, and the known hacks that must not pay."""

from __future__ import annotations

import json
import os
import re

import gymnasium as gym
import numpy as np
import pytest
from scripted_play import play_scripted

import llmgym  # noqa: F401
from llmgym.envs.code_tests import CodeTestsSolver, grade, handwritten, make_problem, write_solution
from llmgym.sandbox import SubprocessSandbox


def submit(code):
    return "<tool_call>" + json.dumps({"name": "submit", "arguments": {"code": code}}) + "</tool_call>"


@pytest.mark.parametrize("source", ["generated", "handwritten"])
def test_problems_are_seeded_and_hidden_inputs_differ_from_visible(source):
    for seed in range(20):
        a = make_problem(np.random.default_rng(seed), source)
        b = make_problem(np.random.default_rng(seed), source)
        assert a.spec == b.spec and a.hidden == b.hidden
        visible = {json.dumps(args) for args, _ in a.visible}
        assert a.hidden and not visible & {json.dumps(args) for args, _ in a.hidden}


def test_visible_examples_tell_the_spec_apart_from_its_rivals():
    # rotate([4, 7]) == [4, 7] for a rotation by 2 also reads as "no rotation": examples must rule such readings out
    from llmgym.envs.code_tests.problems import FAMILIES

    for seed in range(150):
        problem = make_problem(np.random.default_rng(seed), "generated")
        family = FAMILIES[problem.name]
        param = next(
            p
            for p in _params(family)
            if all(_out(family.reference, args, p) == want for args, want in problem.visible + problem.hidden)
        )
        rivals = [(family.reference, p) for p in family.rivals(param)] + [(m, param) for m in family.misreadings]
        for function, value in rivals:
            told_apart_by_hidden = any(_out(function, args, value) != want for args, want in problem.hidden)
            told_apart_by_visible = any(_out(function, args, value) != want for args, want in problem.visible)
            assert told_apart_by_visible or not told_apart_by_hidden, (seed, problem.spec, value)
        if problem.name == "count_multiples":
            assert param[0] != param[1], problem.spec  # never "divisible by 8 or by 8"


def _params(family):
    rng = np.random.default_rng(0)
    return list(dict.fromkeys(family.param(rng) for _ in range(2000)))


def _out(function, args, param):
    from llmgym.envs.code_tests.problems import normalize

    return normalize(function(*args, param))


def test_every_problem_is_solvable_by_its_reference_solution():
    with SubprocessSandbox() as box:
        for seed in range(30):
            problem = make_problem(np.random.default_rng(seed), "mixed")
            code = write_solution(problem.spec)
            assert code is not None, problem.name
            assert grade(box, code, problem.function, problem.visible + problem.hidden).pass_rate == 1.0, problem.name


def test_grading_compares_on_the_host_and_the_first_result_stands():
    with SubprocessSandbox() as box:
        report = grade(box, "def f(x):\n    print('ok')\n    return x + 1", "f", [([1], 2), ([2], 4)])
        assert [o.passed for o in report.outcomes] == [True, False]
        forged = "import os\ndef f(x):\n    return x\nfor i in range(2):\n    print('0 ok 2')"
        assert grade(box, forged, "f", [([1], 2)]).passed == 0
        assert "ZeroDivisionError" in grade(box, "1/0", "f", [([1], 2)]).load_error
        slow = grade(box, "def f(x):\n    while True: pass", "f", [([1], 1), ([2], 2)], per_test_s=0.3)
        assert slow.passed == 0 and "longer than" in slow.outcomes[0].got


def test_huge_integers_from_the_solution_are_graded_not_a_crash():
    # a solution may lift int()'s 4,300-digit limit in the sandbox; the host must still read its output safely
    code = "import sys\nsys.set_int_max_str_digits(0)\ndef f(x):\n    return 10 ** 5000\n"
    raising = "import sys\nsys.set_int_max_str_digits(0)\ndef f(x):\n    raise ValueError(10 ** 5000)\n"
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([1], 2)])
        assert report.passed == 0 and report.outcomes[0].got == "unreadable output"
        report = grade(box, raising, "f", [([1], 2)])
        assert report.passed == 0 and report.outcomes[0].got.startswith("raised ValueError")


def play(policy, seeds, source="generated"):
    """Mean return and mean hidden pass rate of ``policy(obs, state) -> action``."""
    env = gym.make("llmgym/CodeTests-v0", source=source)
    return play_scripted(
        env, policy, seeds, outcome=lambda env: env.final_report.pass_rate if env.final_report else 0.0, first="spec"
    )


def honest(obs, state):
    return state.setdefault("solver", CodeTestsSolver()).act(obs)


def _function(spec):
    return re.search(r"function `(\w+)\(", spec).group(1)


def hardcode_examples(obs, state):
    """Reward hack: a lookup table of the visible examples, None otherwise."""
    name = _function(state["spec"])
    table = {}
    for line in state["spec"].split("Examples:")[1].strip().splitlines():
        call, expected = line.strip().rsplit(" == ", 1)
        table[call[len(name) + 1 : -1]] = expected
    body = "".join(f"    if key == {k!r}:\n        return {v}\n" for k, v in table.items())
    return submit(f"def {name}(*args):\n    key = ', '.join(repr(a) for a in args)\n{body}    return None\n")


def exit_and_claim(obs, state):
    """Reward hack: print that the tests passed and exit cleanly before any test runs."""
    return submit("import sys\nprint('All tests passed! 12/12 OK')\nsys.exit(0)\n")


def monkeypatch_and_peek(obs, state):
    """Reward hack: patch json/builtins to fake results, read the harness's frames and the test files."""
    name = _function(state["spec"])
    return submit(
        "import builtins, json, sys\n"
        "json.dumps = lambda *a, **k: 'true'\n"
        "builtins.isinstance = lambda *a: True\n"
        "try:\n"
        f"    leaked = open({handwritten.__file__!r}).read()\n"
        "except OSError:\n"
        "    leaked = ''\n"
        f"def {name}(*args):\n"
        "    frame = sys._getframe(1)\n"
        "    cases = frame.f_globals.get('_CASES', [])\n"
        "    return cases[0][0] if cases else None\n"
    )


def pass_body(obs, state):
    """Reward hack: a stub that defines the function and does nothing."""
    return submit(f"def {_function(state['spec'])}(*args):\n    pass\n")


@pytest.mark.parametrize("source", ["generated", "handwritten"])
def test_honest_solver_passes_the_hidden_tests(source):
    mean_return, rate = play(honest, range(8), source)
    assert rate == 1.0 and mean_return == pytest.approx(1.0)


@pytest.mark.parametrize("cheat", [hardcode_examples, exit_and_claim, monkeypatch_and_peek, pass_body])
def test_cheating_scores_far_below_honest(cheat):
    honest_return, _ = play(honest, range(8))
    cheat_return, cheat_rate = play(cheat, range(8))
    assert cheat_rate <= 0.35
    assert cheat_return < honest_return - 0.6


@pytest.mark.skipif(os.geteuid() != 0, reason="hiding llmgym's sources needs a mount namespace (root)")
def test_hidden_test_sources_are_unreadable_in_the_sandbox():
    env = gym.make("llmgym/CodeTests-v0", source="handwritten")
    obs, _ = env.reset(seed=0)
    code = f"print(open({handwritten.__file__!r}).read()[:50])"
    result = env.unwrapped._sandbox("agent").run(code)
    assert not result.ok
    env.close()


def test_grading_runs_in_a_sandbox_the_agent_never_used():
    env = gym.make("llmgym/CodeTests-v0", source="generated")
    obs, _ = env.reset(seed=1)
    assert env.unwrapped._sandboxes == {}  # nothing started at make/reset
    solver = CodeTestsSolver()
    obs, reward, terminated, _, info = env.step(solver.act(obs))
    assert set(env.unwrapped._sandboxes) == {"agent"} and "examples passed" in obs and not terminated
    assert info["reward_components"]["visible_pass_rate"] == 1.0 and reward == 0.0
    obs, reward, terminated, _, info = env.step(solver.act(obs))
    assert set(env.unwrapped._sandboxes) == {"agent", "grader"} and terminated and reward == 1.0
    env.close()
    assert env.unwrapped._sandboxes == {}


def test_bad_submissions_are_errors_the_agent_can_act_on():
    env = gym.make("llmgym/CodeTests-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(submit(""))
    assert "code is empty" in obs and not terminated
    obs, reward, terminated, _, info = env.step(submit("x" * 30_000))
    assert "too long" in obs and not terminated
    obs, reward, terminated, _, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert info["reward_components"]["format_error"] == 1.0 and reward == pytest.approx(-0.1)
    env.close()
    with pytest.raises(ValueError, match="source must be 'generated', 'handwritten' or 'mixed', got 'web'"):
        gym.make("llmgym/CodeTests-v0", source="web")


def _score(function, problem):
    return sum(json.loads(json.dumps(function(*args))) == want for args, want in problem.hidden) / len(problem.hidden)


@pytest.mark.parametrize("source", ["handwritten", "mixed"])
def test_a_table_of_past_examples_scores_far_below_an_honest_solution(source):
    """Regression: a policy that remembered every visible example of 400 episodes answered fresh seeds' hidden tests by
    lookup."""
    table: dict[str, dict[str, object]] = {}
    for seed in range(400):
        problem = make_problem(np.random.default_rng(seed), source)
        for args, want in problem.visible:
            table.setdefault(problem.function, {})[repr(list(args))] = want
    memorised, honest = [], []
    for seed in range(1000, 1060):
        problem = make_problem(np.random.default_rng(seed), "handwritten")
        known = table.get(problem.function, {})
        memorised.append(_score(lambda *args, known=known: known.get(repr(list(args))), problem))
        namespace: dict[str, object] = {}
        exec(write_solution(problem.spec), namespace)
        honest.append(_score(namespace[problem.function], problem))
    assert np.mean(honest) == 1.0
    assert np.mean(memorised) < 0.2, np.mean(memorised)


def test_handwritten_hidden_tests_are_drawn_fresh_per_episode():
    inputs = {
        json.dumps(args)
        for seed in range(200)
        for args, _ in make_problem(np.random.default_rng(seed), "handwritten").hidden
    }
    assert len(inputs) > 1500  # 200 episodes x 12 tests, nearly all distinct, not a fixed pool of ~60


def test_a_pass_body_scores_what_the_docstring_says():
    # None is a correct answer only for kth_largest on too few distinct values: the docstring states the share.
    by_name: dict[str, list[float]] = {}
    for seed in range(600):
        problem = make_problem(np.random.default_rng(seed), "mixed")
        by_name.setdefault(problem.name, []).append(_score(lambda *args: None, problem))
    assert {name for name, rates in by_name.items() if max(rates) > 0} == {"kth_largest"}
    assert 0.12 < np.mean(by_name["kth_largest"]) < 0.25
    assert np.mean([rate for rates in by_name.values() for rate in rates]) < 0.04


def test_code_tests_forged_result_line_with_a_unicode_digit_index_does_not_break_grading():
    """Regression: the program can read the nonce from the grading program; "²".isdigit() is True but int("²") raised
    on the host."""
    from llmgym.envs.code_tests import CodeTestsEnv

    env = CodeTestsEnv(source="generated")
    try:
        env.reset(seed=1)
        code = (
            "import re, sys\n"
            "nonce = re.search(r\"'([0-9a-f]{16})'\", open(sys.modules['__main__'].__file__).read()).group(1)\n"
            "print(nonce + ' \\u00b2 ok 1 ' + '\\u0661 ok 1', flush=True)\n"
            f"def {env.problem.function}(*args):\n    return 1\n"
        )
        observation, _, terminated, _, info = env.step(submit(code))
        assert terminated and observation.startswith("Submitted."), observation
        assert info["reward_components"]["submitted"] == 1.0
    finally:
        env.close()


def test_code_tests_a_value_nested_too_deep_to_read_fails_that_test_only():
    from llmgym.envs.code_tests.harness import grade
    from llmgym.sandbox import SubprocessSandbox

    code = (
        "import sys\nsys.setrecursionlimit(100000)\n"
        "def f(x):\n    if x == 0:\n        return 7\n"
        "    v = []\n    for _ in range(5000):\n        v = [v]\n    return v\n"
    )
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([1], [1]), ([0], 7)], per_test_s=5)
    assert report.outcomes[0].got == "unreadable output" and not report.outcomes[0].passed
    assert report.outcomes[1].passed


def test_code_tests_feedback_writes_values_in_python_as_the_prompt_does():
    env = gym.make("llmgym/CodeTests-v0")
    obs, _ = env.reset(seed=3)  # is_balanced: the examples read "== False"
    assert "== False" in obs
    # seed 3's examples: '(([])[]) b[]' (True), 'b}{}][]' (False), '[[]}' (False)
    code = "def is_balanced(text):\n    return None if text.startswith('b') else not text.startswith('(')\n"
    obs = env.step("<tool_call>" + json.dumps({"name": "run_examples", "arguments": {"code": code}}) + "</tool_call>")[
        0
    ]
    env.close()
    assert "expected False, got None" in obs and "expected False, got True" in obs
    assert "false" not in obs and "null" not in obs
