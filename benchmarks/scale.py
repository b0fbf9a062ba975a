"""Beyond one process: episodes/s and the orchestration cost of a turn, envs in process vs env servers vs Ray actors.

Every mode plays the same scripted Wordle episodes (``llmgym/Wordle-v0``, the built-in solver,
3-5 turns) through :func:`llmgym.rollout.rollout`, against a real HTTP inference server that
answers at once: ``llmgym serve --backend scripted`` (the solver behind the OpenAI API) in its own
process, reached by :class:`~llmgym.wrappers.openai_policy.OpenAIPolicy`. So the numbers measure
llmgym, not a model. Modes:

- ``in-process``: the env in the rollout's process (the reference);
- ``env-server``: each env a session of ``llmgym serve-env llmgym/Wordle-v0`` (OpenEnv's server, its own
  process), played through ``llmgym/OpenEnv-v0`` (OpenEnv's WebSocket client);
- ``ray``: each env on a Ray actor (``rollout(..., ray=True)``, a local Ray with 2 CPUs).

At each concurrency (episodes in flight) every mode plays ``2 x concurrency`` episodes. Reported:
episodes/s (Ray's include starting one actor per episode in flight); a turn's wall time as the
rollout sees it (``wall_s / turns`` summed over episodes); its env part (``timing["env_s"]`` per turn:
reset and step, with the round trip and the wait for a thread); and the overhead of a mode: its env
time per turn minus the in-process env time per turn measured in the same run, in ms and as a share
of a typical 1 s LLM turn (a ~100-token reply of an 8B model on vLLM). The whole turn time is not
compared: it is mostly the inference server's queue, which depends on how fast episodes arrive.

Ray is skipped above ``--ray-max`` concurrency: one worker process per actor (~100 MB each) would not
fit this machine at 256; the JSON says so.

Results go to ``benchmarks/results/scale.json``. Needs the ``openenv`` and ``ray`` extras (the
OpenEnv mode is skipped with the reason when openenv does not import).

Run: ``python benchmarks/scale.py [--concurrency 64 256] [--ray-max 64]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

import llmgym  # noqa: F401  registers the envs
from llmgym.policy import SamplingParams
from llmgym.rollout import rollout
from llmgym.wrappers.openai_policy import OpenAIPolicy

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
ENV_ID = "llmgym/Wordle-v0"
TYPICAL_TURN_S = 1.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], health: str) -> subprocess.Popen:
    """``python -m llmgym ARGS`` in its own process, once ``health`` answers 200."""
    process = subprocess.Popen(
        [sys.executable, "-m", "llmgym", *args, "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llmgym {' '.join(args)} exited with {process.returncode}")
        try:
            if httpx.get(health, timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    process.kill()
    raise TimeoutError(health)


def measure(mode: str, concurrency: int, base_url: str, env_url: str | None) -> dict[str, Any]:
    """Play ``2 x concurrency`` episodes in ``mode``; the numbers of the run."""
    policy = OpenAIPolicy("wordle", base_url=base_url, return_tokens=False, max_concurrency=concurrency)
    options: dict[str, Any] = {"max_concurrency": concurrency, "sampling": SamplingParams(temperature=0.0)}
    env = ENV_ID
    if mode == "env-server":
        env, options["env_kwargs"] = "llmgym/OpenEnv-v0", {"base_url": env_url}
    elif mode == "ray":
        options["ray"] = True
    started = time.perf_counter()
    try:
        episodes = rollout(env, policy, seeds=2 * concurrency, **options)
    finally:
        policy.close()
    wall = time.perf_counter() - started
    failed = [e.metadata["error"] for e in episodes if "error" in e.metadata]
    turns = sum(len(e.turn_rewards) for e in episodes)
    return {
        "mode": mode,
        "concurrency": concurrency,
        "episodes": len(episodes),
        "failed": len(failed),
        "first_error": failed[0] if failed else None,
        "turns": turns,
        "wall_s": wall,
        "episodes_per_s": len(episodes) / wall,
        "turn_ms": 1000 * sum(e.timing["wall_s"] for e in episodes) / turns,
        "env_ms_per_turn": 1000 * sum(e.timing["env_s"] for e in episodes) / turns,
        "policy_ms_per_turn": 1000 * sum(e.timing["policy_s"] for e in episodes) / turns,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--ray-max", type=int, default=64, help="largest concurrency Ray actors are measured at")
    args = parser.parse_args()

    skipped: dict[str, str] = {}
    base_url = f"http://127.0.0.1:{free_port()}"
    processes = [start_inference_server(base_url)]
    env_url = None
    try:
        env_url, env_server = start_env_server(sessions=max(args.concurrency))
        processes.append(env_server)
    except ImportError as err:
        skipped["env-server"] = f"openenv does not import: {err}"
    try:
        ray = start_ray()
    except ImportError as err:
        ray = None
        skipped["ray"] = f"ray does not import: {err}"

    runs = []
    try:
        for concurrency in args.concurrency:
            modes = modes_at(concurrency, env_url, ray is not None, args.ray_max, skipped)
            runs += measure_modes(modes, concurrency, base_url, env_url)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        if ray is not None:
            ray.shutdown()
    write_results(runs, skipped)
    return 0


def start_inference_server(base_url: str) -> subprocess.Popen:
    """``llmgym serve --backend scripted``: the Wordle solver behind the OpenAI API, answering at once."""
    return start(
        ["serve", "--backend", "scripted", "--model", "wordle", "--model-name", "wordle"]
        + ["--port", base_url.rsplit(":", 1)[1], "--max-batch-size", "256"],
        f"{base_url}/health",
    )


def start_env_server(sessions: int) -> tuple[str, subprocess.Popen]:
    """``llmgym serve-env`` (OpenEnv's server) for Wordle: its URL and process.

    Raises:
        ImportError: openenv is not installed.
    """
    import openenv.core.env_server  # noqa: F401

    env_url = f"http://127.0.0.1:{free_port()}"
    process = start(
        ["serve-env", ENV_ID, "--port", env_url.rsplit(":", 1)[1], "--max-sessions", str(sessions)],
        f"{env_url}/health",
    )
    return env_url, process


def start_ray() -> Any:
    """The ``ray`` module, with a local Ray of 2 CPUs started.

    Raises:
        ImportError: ray is not installed.
    """
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    return ray


def modes_at(concurrency: int, env_url: str | None, has_ray: bool, ray_max: int, skipped: dict[str, str]) -> list[str]:
    """The modes measured at ``concurrency``; a Ray mode left out for memory is recorded in ``skipped``."""
    modes = ["in-process"] + (["env-server"] if env_url else [])
    if has_ray and concurrency <= ray_max:
        modes.append("ray")
    elif has_ray:
        skipped[f"ray@{concurrency}"] = "one worker process per actor (~100 MB each): over this machine's memory"
    return modes


def measure_modes(modes: list[str], concurrency: int, base_url: str, env_url: str | None) -> list[dict[str, Any]]:
    """Each mode's run at ``concurrency``, printed, with its env overhead per turn over the in-process run."""
    by_mode: dict[str, dict[str, Any]] = {}
    for mode in modes:
        run = measure(mode, concurrency, f"{base_url}/v1", env_url)
        reference = by_mode.get("in-process", run)
        run["overhead_ms_per_turn"] = run["env_ms_per_turn"] - reference["env_ms_per_turn"]
        run["overhead_share_of_typical_turn"] = run["overhead_ms_per_turn"] / (1000 * TYPICAL_TURN_S)
        by_mode[mode] = run
        print(
            f"{mode:>10} @ {concurrency:>3}: {run['episodes_per_s']:7.1f} episodes/s, "
            f"turn {run['turn_ms']:7.1f} ms "
            f"(env {run['env_ms_per_turn']:6.2f} ms), overhead {run['overhead_ms_per_turn']:+7.1f} ms/turn, "
            f"failed {run['failed']}",
            flush=True,
        )
    return list(by_mode.values())


def write_results(runs: list[dict[str, Any]], skipped: dict[str, str]) -> None:
    """The runs and what was skipped, with the machine and date, into :data:`RESULTS`."""
    result = {
        "benchmark": "scale",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "load_average": os.getloadavg(),
        "env_id": ENV_ID,
        "typical_turn_s": TYPICAL_TURN_S,
        "runs": runs,
        "skipped": skipped,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    sys.exit(main())
