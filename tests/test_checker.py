"""Tests for llmgym.checker and ``llmgym check``: it passes a good env and catches each kind of broken one."""

from __future__ import annotations

import time
from typing import Any

import pytest

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
        "gymnasium", "determinism", "fuzz", "rewards", "episode_jsonl", "budgets", "tool_schemas", "timing",
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
    assert "Did you mean: llmgym/Wordle-v0?" in capsys.readouterr().err


def test_cli_exits_1_on_a_failing_env(capsys):
    llmgym.register("llmgym-test/Endless-v0", EndlessEnv, kwargs={"max_turns": 3})
    assert main(["check", "llmgym-test/Endless-v0", "--episodes", "1", "--json"]) == 1
    assert '"status": "FAIL"' in capsys.readouterr().out
