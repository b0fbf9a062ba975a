"""The benchmarks' staged pipelines: each stage one ``llmgym`` command, run once and recorded.

Holds :func:`flags`, :func:`run_stage` and :func:`mean_ci`, shared by
``wordle_agent.py`` and ``turn_credit.py``. A stage leaves ``stage.json`` (its
command and wall time) in its folder when it finishes; a rerun skips it, a
killed one resumes (``--resume`` for evaluations and GRPO runs, whose stage
names start with ``eval-`` and ``grpo``; anything else starts over), and a
folder made by a different command is refused, except a GRPO run asked for
more ``--steps``: it trains on from its last checkpoint.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def flags(**values: Any) -> list[str]:
    """Command-line flags: ``flags(max_tokens=8, lora=True)`` -> ``["--max-tokens", "8", "--lora"]``."""
    args = []
    for key, value in values.items():
        args.append("--" + key.replace("_", "-"))
        if value is not True:
            args.append(str(value))
    return args


def _resume_args(name: str, folder: Path) -> list[str]:
    """How a killed stage continues: evaluations and GRPO resume, SFT starts over."""
    if name.startswith("eval-") and (folder / "episodes.jsonl").is_file():
        return ["--resume"]
    if name.startswith("grpo") and any((folder / "checkpoints").glob("*")):
        return ["--resume"]
    if folder.exists():
        shutil.rmtree(folder)
    return []


def run_stage(name: str, args: list[str], folder: Path, logs: Path, threads: int) -> dict[str, Any]:
    """Run one stage unless it already finished with the same arguments; its ``stage.json`` record.

    Two pipelines sharing a run folder take turns on a stage (a lock file in ``logs``): the second
    waits for the first and then finds the stage done.
    """
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _run_stage_locked(name, args, folder, logs, threads)


def _run_stage_locked(name: str, args: list[str], folder: Path, logs: Path, threads: int) -> dict[str, Any]:
    record_path = folder / "stage.json"
    earlier = 0.0  # wall seconds of a GRPO run that now trains on
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if name.startswith("grpo") and _more_steps(record["args"], args):
            earlier = record["wall_s"]
            record_path.unlink()  # trains on from its last checkpoint (--resume): steps do not define a run
        elif record["args"] != args:
            raise SystemExit(
                f"{folder} was made by another command:\n  {shlex.join(record['args'])}\n"
                f"now:\n  {shlex.join(args)}\ndelete it or choose another --out"
            )
        else:
            print(f"[{name}] done before ({record['wall_s']:.0f} s), skipped", flush=True)
            return {**record, "ran": False}
    command = [sys.executable, "-m", "llmgym", *args, *_resume_args(name, folder)]
    # one torch/OpenMP thread per process: on a small shared CPU, spinning OpenMP workers waiting for a busy
    # core made an SFT step 10x slower (5 s -> 68 s per step with other work beside it)
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    print(f"[{name}] llmgym {shlex.join(command[3:])}", flush=True)
    logs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(logs / f"{name}.log", "a") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=environment)
    if done.returncode != 0:
        tail = (logs / f"{name}.log").read_text()[-3000:]
        raise SystemExit(f"[{name}] failed with exit status {done.returncode}; the log ends:\n{tail}")
    record = {"args": args, "wall_s": earlier + time.perf_counter() - start}
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"[{name}] {record['wall_s']:.0f} s", flush=True)
    return {**record, "ran": True}


def _more_steps(recorded: list[str], now: list[str]) -> bool:
    """``now`` is the ``recorded`` GRPO command with a larger ``--steps``."""

    def split(args: list[str]) -> tuple[list[str], int]:
        at = args.index("--steps")
        return args[:at] + args[at + 2 :], int(args[at + 1])

    (rest, before), (rest_now, after) = split(recorded), split(now)
    return rest == rest_now and after > before


def mean_ci(values: list[float]) -> dict[str, float]:
    """Mean and the 95% CI half-width (1.96 x standard error) of ``values``."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "ci95": 1.96 * std / math.sqrt(n), "n": n}
