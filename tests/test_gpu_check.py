"""benchmarks/gpu_check.py on a CPU with a tiny model, so the GPU check (run rarely, on a lent GPU) does not rot."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_on_a_cpu_and_writes_finite_numbers(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "run", "--device", "cpu", "--tiny"]
    command += ["--no-install", "--tests", "", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("total")  # the table comes last
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    measured = report["measure"]
    assert measured["device"] == "cpu" and measured["parameters"] > 0
    numbers = [measured["matmul_tflops"], *measured["step"].values(), *measured["generate"].values()]
    assert all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers)
    for key in ("tokens_per_s", "mfu", "seconds"):
        assert measured["step"][key] > 0, key
    assert measured["generate"]["tokens_per_s"] > 0
    assert "total" in (tmp_path / "gpu_check.log").read_text()
