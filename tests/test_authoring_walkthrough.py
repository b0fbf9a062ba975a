"""Regressions from walking through docs/authoring.md: breaking a scaffolded env on purpose must be reported clearly."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from llmgym import LLMEnv, Reward, Rubric, tool
from llmgym.checker import check_env
from llmgym.scaffold import names_for

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


def test_a_plugin_that_calls_sys_exit_only_warns(tmp_path):
    (tmp_path / "exiting_plugin.py").write_text("import sys\nsys.exit('bad plugin')\n")
    info = tmp_path / "exiting_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: exiting_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[llmgym.envs]\nexiting = exiting_plugin:register\n")
    script = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import llmgym
        print([str(w.message) for w in caught if "plugin" in str(w.message)])
        print("llmgym/Wordle-v0" in llmgym.list_envs())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    warning, wordle = result.stdout.splitlines()
    assert "'exiting'" in warning and "SystemExit: bad plugin" in warning
    assert wordle == "True"


def test_a_keyword_project_name_is_refused_as_a_keyword():
    with pytest.raises(ValueError, match="'class' is a Python keyword"):
        names_for("class")


def test_the_scaffolded_checker_test_prints_the_whole_report(tmp_path):
    from llmgym.scaffold import scaffold

    tests = (scaffold("walk-env", tmp_path) / "tests" / "test_env.py").read_text()
    assert "assert report.passed, str(report)" in tests
