"""Tests for llmgym.checker and ``llmgym check``: it passes a good env and catches each kind of broken one."""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any

import pytest
from cli_runs import WORDLE, one_line_error

import llmgym
from llmgym import LLMEnv, Reward, Rubric, tool
from llmgym.checker import CheckReport, check_env, hostile_actions, sample_arguments
from llmgym.cli import main
from llmgym.envs.wordle.solver import WordleSolver


class EchoEnv(LLMEnv):
    """A small, correct env: echo a secret number back with the ``say`` tool."""

    def setup(self, options: dict[str, Any] | None) -> str:
        self.secret = int(self.np_random.integers(100))
        self.said: list[int] = []
        return f"Say the number {self.secret}."

    @tool
    def say(self, number: int) -> str:
        """Say a number.

        Args:
            number: the number to say.
        """
        self.said.append(number)
        return "right" if number == self.secret else "wrong"

    def is_done(self) -> bool:
        return bool(self.said) and self.said[-1] == self.secret

    def build_rubric(self) -> Rubric:
        return Rubric([Reward(lambda ctx: float(self.is_done()), when="end", name="solved")])


class ClockEnv(EchoEnv):
    """Broken: the observation depends on the wall clock."""

    def setup(self, options: dict[str, Any] | None) -> str:
        return super().setup(options) + f" (it is {time.perf_counter_ns()})"


class FragileEnv(EchoEnv):
    """Broken: plain text with a control character crashes it."""

    def on_text(self, text: str) -> str:
        if "\x00" in text:
            raise ValueError("unexpected NUL")
        return super().on_text(text)


class BonusEnv(EchoEnv):
    """Broken: adds reward outside the rubric, so components no longer explain it."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + 0.5, terminated, truncated, info


class EndlessEnv(EchoEnv):
    """Broken: ignores the turn budget."""

    def step(self, action):
        obs, reward, terminated, _, info = super().step(action)
        return obs, reward, terminated, False, info


class UndocumentedEnv(EchoEnv):
    """Broken: a tool with no docstring, so the model gets no description."""

    @tool
    def shout(self, text: str) -> str:
        return text.upper()


class TupleRecordEnv(EchoEnv):
    """Broken: the episode record holds a tuple, which comes back from JSON as a list."""

    def episode(self, env_id=None):
        record = super().episode(env_id)
        record.metadata["secret"] = (self.secret,)
        return record


def checked(env_class: type[LLMEnv], **kwargs: Any) -> CheckReport:
    return check_env(env_class(max_turns=4), episodes=2, **kwargs)


def test_wordle_passes_every_check_with_its_solver():
    report = check_env("llmgym/Wordle-v0", episodes=3, agent=WordleSolver().act)
    assert report.passed, report
    assert [r.name for r in report.results] == [
        "gymnasium",
        "determinism",
        "fuzz",
        "rewards",
        "episode_jsonl",
        "budgets",
        "tool_schemas",
        "timing",
    ]
    assert report.steps_per_second > 100
    assert "range [-0.1, 1." in report["rewards"].summary  # the solver's wins were checked too


def test_a_correct_custom_env_passes():
    report = checked(EchoEnv)
    assert report.passed, report


@pytest.mark.parametrize(
    ("env_class", "failing"),
    [
        (ClockEnv, "determinism"),
        (FragileEnv, "fuzz"),
        (BonusEnv, "rewards"),
        (EndlessEnv, "budgets"),
        (UndocumentedEnv, "tool_schemas"),
        (TupleRecordEnv, "episode_jsonl"),
    ],
)
def test_each_broken_env_fails_its_check_with_a_fix(env_class, failing):
    report = checked(env_class)
    assert not report.passed
    assert failing in [r.name for r in report.failures], report
    result = report[failing]
    assert result.status == "FAIL" and result.fix
    assert "FAIL" in str(report) and "fix:" in str(report)


def test_fuzz_names_the_action_that_broke_the_env():
    details = checked(FragileEnv)["fuzz"].details
    assert any(line.startswith("control characters: raised ValueError") for line in details), details


def test_hostile_actions_cover_every_tool():
    schemas = EchoEnv().tool_schemas
    labels = [label for label, _, _ in hostile_actions(schemas, __import__("numpy").random.default_rng(0))]
    assert "say: missing required arguments" in labels and "say: wrong argument types" in labels
    assert "1 MB string" in labels and "unknown tool" in labels


def test_sample_arguments_match_the_schema():
    import jsonschema
    import numpy as np

    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 5},
            "mode": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        },
        "required": ["n", "mode", "tags", "maybe"],
    }
    for seed in range(5):
        jsonschema.validate(sample_arguments(schema, np.random.default_rng(seed)), schema)


def test_cli_exit_status(capsys):
    assert main(["check", "llmgym/Wordle-v0", "--episodes", "1"]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["check", "llmgym/Wordl-v0"]) == 2
    assert "Did you mean: llmgym/Wordle-v0" in capsys.readouterr().err


def test_cli_exits_1_on_a_failing_env(capsys):
    llmgym.register("llmgym-test/Endless-v0", EndlessEnv, kwargs={"max_turns": 3})
    assert main(["check", "llmgym-test/Endless-v0", "--episodes", "1", "--json"]) == 1
    assert '"status": "FAIL"' in capsys.readouterr().out


def test_check_env_closes_every_env_it_makes():
    """Regression: check_gymnasium and check_tool_schemas made an env and never closed it (a sandbox or MCP process
    leaked)."""
    import gymnasium as gym

    from llmgym import LLMEnv
    from llmgym.checker import check_env

    made: list[LeakEnv] = []

    class LeakEnv(LLMEnv):
        description = "An env that counts closes."

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.closed = False
            made.append(self)

        def setup(self, options):
            return "Say something."

        def close(self):
            self.closed = True

    gym.register("llmgym-test/LeakCheck-v0", entry_point=LeakEnv, kwargs={"max_turns": 3})
    try:
        assert check_env("llmgym-test/LeakCheck-v0", episodes=1).passed
    finally:
        gym.registry.pop("llmgym-test/LeakCheck-v0")
    assert len(made) > 5 and all(env.closed for env in made)


class DrawsFromRandom(LLMEnv):
    """Honestly nondeterministic: the task comes from ``random``."""

    description = "a nondeterministic test env"
    system_prompt = "Guess."

    def __init__(self, **kwargs):
        super().__init__(max_turns=3, **kwargs)

    @tool
    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: a number.
        """
        return "ok"

    def setup(self, options):
        return f"target {random.random()}"

    def build_rubric(self):
        return Rubric([Reward(lambda ctx: 0.0, name="zero")])


def test_check_skips_determinism_for_an_env_registered_nondeterministic(capsys):
    """Regression: the determinism check failed an env registered with ``nondeterministic=True``."""
    from llmgym.checker import check_env

    llmgym.register("llmgym-checker-test/Honest-v0", DrawsFromRandom, nondeterministic=True)
    llmgym.register("llmgym-checker-test/Hidden-v0", DrawsFromRandom)
    report = check_env("llmgym-checker-test/Honest-v0", episodes=1)
    assert report["determinism"].status == "SKIP" and "nondeterministic=True" in report["determinism"].summary
    assert report.passed, str(report)
    assert check_env("llmgym-checker-test/Hidden-v0", episodes=1)["determinism"].status == "FAIL"
    assert main(["check", "llmgym-checker-test/Honest-v0", "--episodes", "1"]) == 0
    assert "SKIP  determinism" in capsys.readouterr().out


_instances = itertools.count()


class HiddenStateEnv(LLMEnv):
    """Broken: the hidden target differs between two runs with the same seed, but no observation shows it."""

    def setup(self, options: dict[str, Any] | None) -> str:
        self.target = 1000 + next(_instances)  # stands for random.randint: not seeded by reset(seed=)
        return "Guess the hidden number."

    @tool
    def guess(self, number: int) -> str:
        """Guess the hidden number.

        Args:
            number: the guess.
        """
        return "lower" if number < self.target else "not lower"  # every sampled guess is below the target

    def build_rubric(self) -> Rubric:
        return Rubric([Reward(lambda ctx: 0.0, name="nothing")])


class SetupRaisesEnv(HiddenStateEnv):
    """Broken: setup raises."""

    def setup(self, options: dict[str, Any] | None) -> str:
        raise KeyError("oops in setup")


def test_determinism_catches_hidden_state_the_observations_do_not_show():
    report = check_env(HiddenStateEnv())
    determinism = report["determinism"]
    assert determinism.passed is False, report
    assert "reset self.target" in determinism.summary
    assert "self.np_random" in determinism.fix


def test_an_env_raising_in_setup_shows_one_traceback_and_times_nothing():
    report = check_env(SetupRaisesEnv())
    raised = [r for r in report.results if r.name != "timing"]
    assert all(r.passed is False and "KeyError: 'oops in setup'" in r.summary for r in raised), report
    assert any("raise KeyError" in line for line in raised[0].details)
    assert all(not r.details and "same error as the gymnasium check" in r.fix for r in raised[1:])
    assert report["timing"].status == "SKIP"


def test_check_takes_env_kwargs_like_the_other_commands(capsys):
    assert main(["check", WORDLE, "--episodes", "1", "--env-kwargs", '{"max_turns": 3}', "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    assert main(["check", WORDLE, "--episodes", "1", "--kwargs", '{"max_turns": 3}', "--json"]) == 0  # the old name
    capsys.readouterr()


@pytest.mark.parametrize("kwargs", ['{"colour": 1}', '{"max_turns": -1}'])
def test_check_with_kwargs_the_env_refuses_is_a_usage_error(kwargs, capsys):
    assert main(["check", WORDLE, "--env-kwargs", kwargs]) == 2  # was "FAIL make", exit 1: as if the env were broken
    assert "does not take these --env-kwargs" in one_line_error(capsys)
