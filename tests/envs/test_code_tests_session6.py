"""CodeTests regressions: memorising hand-written examples across episodes, and an ignored per-test alarm."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmgym.envs.code_tests.harness import grade
from llmgym.envs.code_tests.problems import make_problem
from llmgym.envs.code_tests.solver import write_solution
from llmgym.sandbox import SubprocessSandbox


def _score(function, problem):
    return sum(json.loads(json.dumps(function(*args))) == want for args, want in problem.hidden) / len(problem.hidden)


@pytest.mark.parametrize("source", ["handwritten", "mixed"])
def test_a_table_of_past_examples_scores_far_below_an_honest_solution(source):
    # The policy of /tmp/reghunt/memo.py, graded on the host: remember every visible example of 400 episodes,
    # then answer fresh seeds' hidden tests by lookup.
    table: dict[str, dict[str, object]] = {}
    for seed in range(400):
        problem = make_problem(np.random.default_rng(seed), source)
        for args, want in problem.visible:
            table.setdefault(problem.function, {})[repr(list(args))] = want
    memorised, honest = [], []
    for seed in range(1000, 1060):
        problem = make_problem(np.random.default_rng(seed), "handwritten")
        known = table.get(problem.function, {})
        memorised.append(_score(lambda *args: known.get(repr(list(args))), problem))
        namespace: dict[str, object] = {}
        exec(write_solution(problem.spec), namespace)
        honest.append(_score(namespace[problem.function], problem))
    assert np.mean(honest) == 1.0
    assert np.mean(memorised) < 0.2, np.mean(memorised)


def test_handwritten_hidden_tests_are_drawn_fresh_per_episode():
    inputs = {json.dumps(args) for seed in range(200) for args, _ in make_problem(np.random.default_rng(seed), "handwritten").hidden}
    assert len(inputs) > 1500  # 200 episodes x 12 tests, nearly all distinct, not a fixed pool of ~60


def test_a_solution_that_ignores_the_alarm_still_times_out():
    code = ("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "def f(x):\n    time.sleep(0.8)\n    return x\n")
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([i], i) for i in range(4)], per_test_s=0.3)
    assert report.passed == 0
    assert all("took longer than 0.3 s" in outcome.got for outcome in report.outcomes)


def test_a_solution_that_ignores_the_alarm_inside_the_call_still_times_out():
    code = ("import signal, time\n"
            "def f(x):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    time.sleep(0.8)\n    return x\n")
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([1], 1), ([2], 2)], per_test_s=0.3)
    assert report.passed == 0


def test_a_pass_body_scores_what_the_docstring_says():
    # None is a correct answer only for kth_largest on too few distinct values: the docstring states the share.
    by_name: dict[str, list[float]] = {}
    for seed in range(600):
        problem = make_problem(np.random.default_rng(seed), "mixed")
        by_name.setdefault(problem.name, []).append(_score(lambda *args: None, problem))
    assert {name for name, rates in by_name.items() if max(rates) > 0} == {"kth_largest"}
    assert 0.12 < np.mean(by_name["kth_largest"]) < 0.25
    assert np.mean([rate for rates in by_name.values() for rate in rates]) < 0.04


def test_wiki_search_docstring_counts_the_passages_a_world_has():
    import gymnasium as gym

    import llmgym  # noqa: F401  (registers the envs)
    from llmgym.envs.wiki_search import env as wiki_env

    env = gym.make("llmgym/WikiSearch-v0")
    sizes = set()
    for seed in range(5):
        env.reset(seed=seed)
        sizes.add(len(env.unwrapped.world.passages))
    env.close()
    assert sizes == {56}
    assert "each of the 56\nreads" in wiki_env.__doc__
