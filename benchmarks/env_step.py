"""Wordle env step: its median time, and the env's share of an evaluation's wall time.

An LLM turn takes 10-1000 ms; an env step takes microseconds. This script guards that the
env stays a rounding error of an evaluation, with two numbers:

- ``step``: p50 and p90 of ``env.step`` over ``--episodes`` Wordle episodes of the same six
  tool-call guesses, through ``gymnasium.make`` (Gymnasium's wrappers included). The budget:
  the script exits 1 when the p50 passes 50 µs.
- ``eval``: a rollout of ``--eval-episodes`` Wordle episodes with ``llmgym eval``'s default
  policy (SmolLM2-135M-Instruct on llama.cpp, temperature 0.7, 256 tokens a turn, one
  episode at a time); the env's share is the episodes' ``timing["env_s"]`` over their
  ``timing["wall_s"]``. ``--model tiny-random`` plays a tiny random model instead, in seconds;
  ``--eval-episodes 0`` skips the rollout.

Results go to ``benchmarks/results/env_step.json``.

Run: ``python benchmarks/env_step.py [--episodes 2000] [--eval-episodes 4] [--model tiny-random]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import llmgym  # noqa: F401  registers the envs
from llmgym.policy import SamplingParams
from llmgym.rollout import rollout

RESULTS = Path(__file__).resolve().parent / "results" / "env_step.json"
ENV_ID = "llmgym/Wordle-v0"
GUESSES = ["crane", "pilot", "dumpy", "fight", "swept", "vouch"]
STEP_BUDGET_US = 50.0


def time_steps(episodes: int) -> dict[str, Any]:
    """p50 and p90 of one ``env.step``, in µs, over ``episodes`` scripted episodes."""
    env = gym.make(ENV_ID)
    calls = [{"name": "guess", "arguments": {"word": word}} for word in GUESSES]
    actions = [f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls]
    step_ns = []
    for seed in range(episodes):
        env.reset(seed=seed)
        for action in actions:
            start = time.perf_counter_ns()
            _, _, terminated, truncated, _ = env.step(action)
            step_ns.append(time.perf_counter_ns() - start)
            if terminated or truncated:
                break
    step_ns.sort()
    return {
        "episodes": episodes,
        "steps": len(step_ns),
        "p50_us": step_ns[len(step_ns) // 2] / 1e3,
        "p90_us": step_ns[int(len(step_ns) * 0.9)] / 1e3,
    }


def time_eval(episodes: int, backend: str, model: str | None) -> dict[str, Any]:
    """The env's share of a rollout's wall time, from the episodes' own timing."""
    from llmgym.wrappers.models import load_policy

    policy = load_policy(backend, model)
    try:
        sampling = SamplingParams(temperature=0.7, max_tokens=256, seed=0)
        records = rollout(ENV_ID, policy, seeds=episodes, max_concurrency=1, sampling=sampling)
    finally:
        policy.close()
    env_s = sum(e.timing["env_s"] for e in records)
    wall_s = sum(e.timing["wall_s"] for e in records)
    turns = sum(e.num_turns for e in records)
    return {
        "backend": backend,
        "model": model or "SmolLM2-135M-Instruct (default)",
        "episodes": episodes,
        "failed": sum("error" in e.metadata for e in records),
        "turns": turns,
        "env_s": env_s,
        "wall_s": wall_s,
        "env_share": env_s / wall_s,
        "env_ms_per_episode": env_s / episodes * 1e3,
        "wall_s_per_episode": wall_s / episodes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2000, help="scripted episodes for the step time (default 2000)")
    parser.add_argument(
        "--eval-episodes", type=int, default=4, help="model episodes for the env's share (default 4; 0 skips)"
    )
    parser.add_argument("--backend", default="llama.cpp", help="policy backend for the eval (default llama.cpp)")
    parser.add_argument("--model", default=None, help="model for the eval (default SmolLM2-135M-Instruct; tiny-random)")
    args = parser.parse_args()

    step = time_steps(args.episodes)
    step["budget_p50_us"] = STEP_BUDGET_US
    step["within_budget"] = step["p50_us"] <= STEP_BUDGET_US
    print(
        f"step: p50 {step['p50_us']:.1f} µs, p90 {step['p90_us']:.1f} µs over {step['steps']} steps "
        f"(budget: p50 <= {STEP_BUDGET_US:.0f} µs: {'met' if step['within_budget'] else 'MISSED'})",
        flush=True,
    )
    results: dict[str, Any] = {"step": step}
    if args.eval_episodes > 0:
        results["eval"] = evaluation = time_eval(args.eval_episodes, args.backend, args.model)
        print(
            f"eval: env {evaluation['env_s'] * 1e3:.1f} ms of {evaluation['wall_s']:.1f} s wall over "
            f"{evaluation['episodes']} episodes ({evaluation['turns']} turns): env share {evaluation['env_share']:.4%}"
        )

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "env_step",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                "python": platform.python_version(),
                "command": " ".join(["python", "benchmarks/env_step.py", *sys.argv[1:]]),
                "load_average": list(os.getloadavg()),
                **results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")
    return 0 if step["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
