"""benchmarks/wordle_agent.py with tiny budgets on tiny-random: every stage runs, its outputs load, a rerun skips
finished stages, and a stage folder made by another command is refused rather than reused. No numbers asserted.

Slow-marked: every stage is a subprocess that loads torch and trains or plays, 5.6 min on a 2-core AVX2-only CPU
(past the default run's 300 s timeout there); ``.ci/run`` runs it explicitly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("matplotlib")

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "wordle_agent.py"
GRPO = ["grpo-outcome-s0", "grpo-turn-s0", "grpo-rebn-s0"]
STAGES = ["teacher", "sft", *GRPO, "eval-random", "eval-teacher", "eval-base", "eval-sft"] + [f"eval-{g}" for g in GRPO]
STAGES += ["all400-sft"]  # the tiny recipe's every-answer evaluation: as many games as its eval_episodes


def run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), "--tiny", "--model", "tiny-random", "--out", str(out)]
    command += ["--results", str(out / "results.json"), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_every_stage_runs_and_a_rerun_skips_them(tmp_path):
    out = tmp_path / "run"
    done = run(out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for stage in STAGES:
        assert json.loads((out / stage / "stage.json").read_text())["args"][0] in ("eval", "train")
    assert (out / "sft" / "final" / "adapter_config.json").is_file()
    for name in GRPO:
        assert (out / name / "final" / "adapter_config.json").is_file()
    results = json.loads((out / "results.json").read_text())
    models = {"random", "teacher", "base", "sft", *GRPO, "grpo-outcome", "grpo-turn", "grpo-rebn"}
    assert set(results["models"]) == models and results["held_out_seeds"] == 2
    assert set(results["models"]["sft"]) >= {"solved", "consistent", "repeats", "valid", "guesses_when_solved"}
    arms = {"grpo-outcome - sft", "grpo-turn - sft", "grpo-rebn - sft"}
    arms |= {"grpo-turn - grpo-outcome", "grpo-rebn - grpo-outcome", "grpo-rebn - grpo-turn"}
    assert set(results["paired"]) == {"sft - base"} | arms
    assert results["every_answer"]["answers"] == 2 and set(results["every_answer"]["models"]) == {"sft"}
    assert any("val_loss" in row for row in results["sft_curve"])
    assert all(results["grpo_curves"][name] for name in GRPO) and set(results["stage_wall_s"]) == set(STAGES)
    assert (out / "results.png").stat().st_size > 1000

    again = run(out)
    assert again.returncode == 0 and again.stdout.count("skipped") == len(STAGES)

    longer = run(out, "--grpo-steps", "2")  # trains on from step 1; the GRPO adapters' evaluations run again
    assert longer.returncode == 0, longer.stdout[-2000:] + longer.stderr[-2000:]
    assert "--steps 2" in longer.stdout and "--resume" in longer.stdout
    assert longer.stdout.count("skipped") == len(STAGES) - 2 * len(GRPO)
    assert json.loads((out / "results.json").read_text())["grpo_curves"][GRPO[0]][-1]["step"] == 2

    record = json.loads((out / "eval-grpo-turn-s0" / "stage.json").read_text())
    record["args"][-1] = "elsewhere"
    (out / "eval-grpo-turn-s0" / "stage.json").write_text(json.dumps(record))
    refused = run(out, "--grpo-steps", "2")
    assert refused.returncode != 0 and "was made by another command" in refused.stderr
