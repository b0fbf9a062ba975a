"""benchmarks/turn_credit.py with tiny budgets on tiny-random: every stage of the three arms runs, the report and
its plot are written from the evaluations, a rerun skips every stage, and each arm's GRPO run got its own
credit settings. No numbers asserted (tiny-random learns nothing in one step)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "turn_credit.py"
RUNS = ["or-s0", "mr-s0", "mt-s0"]


def run(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), "--tiny", "--model", "tiny-random", "--out", str(out)]
    command += ["--results", str(out / "results.json")]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_three_arms_run_report_and_rerun_skips(tmp_path):
    out = tmp_path / "run"
    done = run(out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())["settings"]["convert"]
    assert results["env_kwargs"] == {"convert": True}
    assert set(results["arms"]) == {"base", "sft", "or", "mr", "mt"} and results["held_out_seeds"] == 2
    assert set(results["runs"]) == set(RUNS) and set(results["paired"]) == {"mt-or", "mt-mr", "mr-or"}
    for stats in results["arms"].values():
        assert set(stats) == {"tool_call", "tool_success", "tool_found", "accuracy", "reward"}
    assert all(len(results["curves"][name]) == 1 for name in RUNS)
    assert (out / "results.png").stat().st_size > 1000
    settings = {
        name: json.loads((out / "convert" / f"grpo-{name}" / "stage.json").read_text())["args"] for name in RUNS
    }
    lambdas = {name: args[args.index("--turn-lambda") + 1] for name, args in settings.items()}
    env_kwargs = {name: json.loads(args[args.index("--env-kwargs") + 1]) for name, args in settings.items()}
    assert lambdas == {"or-s0": "0.0", "mr-s0": "0.0", "mt-s0": "1.0"}
    convert = {"convert": True}
    assert env_kwargs == {"or-s0": {**convert, "turn_rewards": False}, "mr-s0": convert, "mt-s0": convert}

    again = run(out)
    assert again.returncode == 0 and again.stdout.count("skipped") == len(results["stage_wall_s"])
