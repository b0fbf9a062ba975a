"""Regression tests for bugs found in RuleDiscovery, WikiSearch, CodeTests and the adapters."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import llmgym  # noqa: F401
from llmgym.envs.wiki_search import WikiSearchEnv


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_wiki_search_short_hedge_of_every_country_is_wrong():
    # there are three countries: answering all three (5 words allowed for a 1-word gold) was always "correct"
    for seed in range(5):
        env = WikiSearchEnv(kinds=["employer_hq_country"])
        env.reset(seed=seed)
        countries = sorted({city["country"] for city in env.world.cities.values()})
        *_, info = env.step(call("answer", text=" or ".join(countries)))
        assert info["reward_components"]["correct"] == 0.0
        env.reset(seed=seed)
        *_, info = env.step(call("answer", text=f"the {env.question.answer}."))
        assert info["reward_components"]["correct"] == 1.0


def test_wiki_search_hedged_years_and_rivers_are_wrong_but_gold_with_filler_is_right():
    env = WikiSearchEnv(kinds=["birthplace_founded", "founder_birthplace_river"])
    for seed in range(6):
        env.reset(seed=seed)
        gold = env.question.answer
        other = next(str(c["founded"]) for c in env.world.cities.values() if str(c["founded"]) != gold) \
            if gold.isdigit() else next(f"{c['river']} River" for c in env.world.cities.values() if f"{c['river']} River" != gold)
        *_, info = env.step(call("answer", text=f"{gold}, {other}"))
        assert info["reward_components"]["correct"] == 0.0
        env.reset(seed=seed)
        *_, info = env.step(call("answer", text=f"It is {gold}"))
        assert info["reward_components"]["correct"] == 1.0


def test_rule_discovery_unhashable_difficulty_is_a_clear_value_error():
    import pytest

    from llmgym.envs.rule_discovery import RuleDiscoveryEnv

    with pytest.raises(ValueError, match="difficulty"):
        RuleDiscoveryEnv(difficulty=["easy"])
    env = RuleDiscoveryEnv()
    for bad in (["easy"], {"level": 1}):
        with pytest.raises(ValueError, match="difficulty"):
            env.reset(seed=0, options={"difficulty": bad})
    observation, _ = env.reset(seed=0, options={"difficulty": "easy"})
    assert observation.startswith("Difficulty: easy.")


def test_textarena_non_finite_invalid_penalty_is_refused_at_construction():
    import pytest

    pytest.importorskip("textarena")
    from llmgym.envs.adapters.textarena import TextArenaEnv

    for bad in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ValueError, match="invalid_penalty"):
            TextArenaEnv("GuessTheNumber-v0", invalid_penalty=bad)
    env = TextArenaEnv("GuessTheNumber-v0", invalid_penalty=0.0)
    env.reset(seed=0)
    assert env.step("")[1] == 0.0


def test_reasoning_gym_index_option_refuses_bools_and_takes_numpy_ints():
    import numpy as np
    import pytest

    pytest.importorskip("reasoning_gym")
    from llmgym.envs.adapters.reasoning_gym import ReasoningGymEnv

    env = ReasoningGymEnv("chain_sum", config={"size": 10})
    for bad in (True, False, 1.0, "1"):
        with pytest.raises(ValueError, match="index"):
            env.reset(options={"index": bad})
    question, _ = env.reset(options={"index": np.int64(3)})
    assert env.index == 3 and type(env.index) is int and question == env.dataset[3]["question"]


def test_code_tests_forged_result_line_with_a_unicode_digit_index_does_not_break_grading():
    # the program can read the nonce from the grading program; "²".isdigit() is True but int("²") raised on the host
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
        observation, _, terminated, _, info = env.step(call("submit", code=code))
        assert terminated and observation.startswith("Submitted."), observation
        assert info["reward_components"]["submitted"] == 1.0
    finally:
        env.close()


def test_multiagent_penalties_must_be_finite():
    import pytest

    from llmgym.envs.multiagent.base import checked_penalty

    for value in (float("nan"), float("inf"), -0.5):
        with pytest.raises(ValueError, match="finite number >= 0"):
            checked_penalty("illegal_penalty", value)
    assert checked_penalty("illegal_penalty", 2) == 2.0


@pytest.mark.parametrize(("env_id", "kwargs", "message"), [
    ("llmgym/Wordle-v0", {"max_guesses": 0}, "max_guesses"),  # played one turn that could never guess
    ("llmgym/Wordle-v0", {"max_guesses": -1}, "max_guesses"),
    ("llmgym/Wordle-v0", {"max_guesses": 2.5}, "max_guesses"),
    ("llmgym/CodeTests-v0", {"per_test_timeout_s": 0}, "per_test_timeout_s"),  # every test would time out
    ("llmgym/CodeTests-v0", {"per_test_timeout_s": -1.0}, "per_test_timeout_s"),
    ("llmgym/CodeTests-v0", {"per_test_timeout_s": float("nan")}, "per_test_timeout_s"),
])
def test_degenerate_env_arguments_are_refused(env_id, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make(env_id, **kwargs)
