"""Rollout throughput on Wordle: local backends and ``llmgym serve`` at several concurrencies.

Measures episodes/s and generated tokens/s of :func:`llmgym.rollout.rollout` with

- ``llamacpp``: the default CPU backend (llama.cpp, SmolLM2-135M-Instruct GGUF), in-process,
  one episode at a time (``llmgym eval``'s default for it); ``llamacpp_c8``: 8 at once;
- ``transformers_batched``: transformers, 8 concurrent episodes batched by the policy's micro-batcher;
- ``transformers_sequential``: transformers, one episode and one request at a time;
- ``serve_cN``: an ``llmgym serve`` subprocess (llama.cpp backend) through the
  OpenAI client at N = 1, 8, 32, 64 concurrent episodes;
- ``serve_scripted_cN``: the same server with its scripted backend (no model):
  the ceiling of the engine + HTTP path.

"Outside the model" is what the rollout's own process spends on env steps,
tool-call parsing and bookkeeping: the event-loop thread's CPU time for the
in-process backends (the model runs in other threads), and the whole client
process's CPU time for the server runs (the model runs in another process).
``outside_model_fraction`` divides it by the wall time. Server-side request
handling (HTTP, chat template) is not separated from the model there.

The model replies are mostly not valid guesses (SmolLM2-135M is tiny), so
episodes run to the turn budget; ``--max-turns`` and ``--max-tokens`` bound the
work. Results go to ``benchmarks/results/rollout.json``.

The machine's load average is recorded with the results: on a shared machine the
absolute numbers move with it, the ratios (measured minutes apart) less so.

Batched llama.cpp decoding (eval at 1/4/16 episodes, serve at 1/16/64 requests, against one
plain llama-cpp-python stream, with the compute limit) is ``--only llamacpp_batch``, which runs
``benchmarks/llamacpp_batch.py``.

Run: ``python benchmarks/rollout.py [--max-tokens 24] [--max-turns 2] [--only serve,llamacpp]``
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
import urllib.request
from pathlib import Path
from typing import Any

import llmgym  # noqa: F401  registers the envs
from llmgym.policy import Policy, SamplingParams
from llmgym.rollout import rollout

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "rollout.json"
ENV_ID = "llmgym/Wordle-v0"
CASES = ("llamacpp", "transformers", "serve", "serve_scripted", "llamacpp_batch")


def measure(
    policy: Policy,
    *,
    concurrency: int,
    episodes: int,
    sampling: SamplingParams,
    max_turns: int,
    client_process_is_outside: bool = False,
) -> dict[str, Any]:
    """Run ``episodes`` Wordle episodes at ``concurrency`` and time them."""
    loop_cpu, process_cpu, start = time.thread_time(), time.process_time(), time.perf_counter()
    records = rollout(
        ENV_ID,
        policy,
        seeds=episodes,
        max_concurrency=concurrency,
        sampling=sampling,
        env_kwargs={"max_turns": max_turns},
    )
    wall = time.perf_counter() - start
    loop_cpu = time.thread_time() - loop_cpu
    process_cpu = time.process_time() - process_cpu
    failed = [e.metadata["error"] for e in records if "error" in e.metadata]
    tokens = sum(e.metadata.get("generated_tokens") or 0 for e in records)
    turns = sum(e.num_turns for e in records)
    outside = process_cpu if client_process_is_outside else loop_cpu
    return {
        "concurrency": concurrency,
        "episodes": episodes,
        "failed": len(failed),
        "first_error": failed[0] if failed else None,
        "turns": turns,
        "generated_tokens": tokens,
        "wall_s": round(wall, 3),
        "episodes_per_s": round(episodes / wall, 3),
        "turns_per_s": round(turns / wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
        "env_s": round(sum(e.timing["env_s"] for e in records), 4),
        "outside_model_s": round(outside, 3),
        "outside_model_fraction": round(outside / wall, 4),
        "mean_reward": round(sum(e.total_reward for e in records) / episodes, 4),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """An ``llmgym serve`` subprocess on a free loopback port, stopped on exit."""

    def __init__(self, backend: str, model: str | None = None, max_batch_size: int = 64, engine: str | None = None):
        self.port = _free_port()
        command = [
            sys.executable,
            "-c",
            "import sys; from llmgym.cli import main; sys.exit(main())",
            "serve",
            "--backend",
            backend,
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            "--max-batch-size",
            str(max_batch_size),
        ]
        if model:
            command += ["--model", model]
        if engine:
            command += ["--engine", engine]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Server:
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llmgym serve exited: {self.process.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2):
                    return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("llmgym serve did not come up in 180 s")

    def peak_rss_mb(self) -> float:
        """The server process's peak resident memory so far (VmHWM), in MB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
        return float("nan")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _run_case(name: str, results: dict[str, Any], work: Any) -> None:
    print(f"-- {name}", flush=True)
    try:
        results[name] = work()
    except Exception as err:  # a backend that cannot run here is reported, not fatal
        results[name] = {"skipped": f"{type(err).__name__}: {err}"[:500]}
    print(f"   {json.dumps(results[name])}", flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens per turn (default 24)")
    parser.add_argument("--max-turns", type=int, default=2, help="turns per episode (default 2)")
    parser.add_argument("--episodes", type=int, default=8, help="episodes for the local backends (default 8)")
    parser.add_argument("--sequential-episodes", type=int, default=2, help="episodes for sequential transformers")
    parser.add_argument("--concurrency", default="1,8,32,64", help="server concurrencies (default 1,8,32,64)")
    parser.add_argument(
        "--serve-max-turns",
        type=int,
        default=1,
        help="turns per episode in the server sweep (default 1: 64 episodes must fit the time budget)",
    )
    parser.add_argument("--only", default=",".join(CASES), help=f"cases to run, of {','.join(CASES)}")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    args.only = set(args.only.split(","))
    unknown = args.only - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {','.join(CASES)}")
    return args


def local_cases(args: argparse.Namespace, sampling: SamplingParams, results: dict[str, Any]) -> None:
    """The in-process backends of ``--only`` (``llamacpp``, ``transformers``), each loaded and warmed up once."""
    common = {"sampling": sampling, "max_turns": args.max_turns}
    loaded: dict[str, Policy] = {}

    def local(backend: str) -> Policy:
        if backend not in loaded:
            from llmgym.wrappers.models import load_policy

            loaded[backend] = load_policy(backend)
            measure(loaded[backend], concurrency=1, episodes=1, **common)  # warm-up
        return loaded[backend]

    cases = []
    if "llamacpp" in args.only:
        # one sequence at a time with a one-request KV cache: concurrency 1 is its best case (eval's default)
        cases += [("llamacpp", "llama.cpp", 1, args.episodes), ("llamacpp_c8", "llama.cpp", 8, args.episodes)]
    if "transformers" in args.only:
        cases += [
            ("transformers_batched", "transformers", 8, args.episodes),
            ("transformers_sequential", "transformers", 1, args.sequential_episodes),
        ]
    try:
        for name, backend, concurrency, episodes in cases:
            _run_case(
                name,
                results,
                lambda backend=backend, concurrency=concurrency, episodes=episodes: measure(
                    local(backend), concurrency=concurrency, episodes=episodes, **common
                ),
            )
    finally:
        for policy in loaded.values():
            policy.close()


def server_cases(args: argparse.Namespace, sampling: SamplingParams, results: dict[str, Any]) -> None:
    """``serve_cN`` and ``serve_scripted_cN`` of ``--only``: an ``llmgym serve`` subprocess at each concurrency."""
    from llmgym.wrappers.openai_policy import OpenAIPolicy

    levels = [int(c) for c in args.concurrency.split(",")]
    for backend, case in (("llama.cpp", "serve"), ("scripted", "serve_scripted")):
        if case not in args.only:
            continue
        try:
            server = Server(backend).__enter__()
        except Exception as err:
            results[case] = {"skipped": f"{type(err).__name__}: {err}"[:500]}
            print(f"-- {case}: {results[case]}", flush=True)
            continue
        try:
            for level in levels:
                # enough episodes to keep every slot busy; the scripted server is fast, so play more
                episodes = max(level, 4) * (4 if backend == "scripted" else 1)
                policy = OpenAIPolicy("smollm2-135m", base_url=server.url, return_tokens=False, max_concurrency=level)
                try:
                    _run_case(
                        f"{case}_c{level}",
                        results,
                        lambda policy=policy, level=level, episodes=episodes: measure(
                            policy,
                            concurrency=level,
                            episodes=episodes,
                            client_process_is_outside=True,
                            sampling=sampling,
                            max_turns=args.serve_max_turns,
                        ),
                    )
                finally:
                    policy.close()
        finally:
            server.__exit__()


#: the ratios the results are judged by, and their targets
TARGETS = {
    "llamacpp_vs_transformers_batched_tokens_per_s": ">= 4",
    "transformers_batched_vs_sequential_tokens_per_s": ">= 3",
    "serve_c32_outside_model_fraction": "< 0.05",
}


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The ratios of :data:`TARGETS` that the cases run give."""

    def tps(name: str) -> float | None:
        return results.get(name, {}).get("tokens_per_s") or None

    found = {}
    if tps("llamacpp") and tps("transformers_batched"):
        found["llamacpp_vs_transformers_batched_tokens_per_s"] = round(tps("llamacpp") / tps("transformers_batched"), 2)
    if tps("transformers_batched") and tps("transformers_sequential"):
        found["transformers_batched_vs_sequential_tokens_per_s"] = round(
            tps("transformers_batched") / tps("transformers_sequential"), 2
        )
    if "outside_model_fraction" in results.get("serve_c32", {}):
        found["serve_c32_outside_model_fraction"] = results["serve_c32"]["outside_model_fraction"]
    return found


def main() -> None:
    args = parse_args()
    sampling = SamplingParams(temperature=0.7, max_tokens=args.max_tokens, seed=0)
    results: dict[str, Any] = {}
    load_before = [round(x, 2) for x in os.getloadavg()]
    if "llamacpp_batch" in args.only:  # its own script and results file: batched vs single-stream llama.cpp
        subprocess.run([sys.executable, str(HERE / "llamacpp_batch.py")], check=True)
        args.only.discard("llamacpp_batch")
        if not args.only:
            return
    local_cases(args, sampling, results)
    server_cases(args, sampling, results)
    found = ratios(results)
    report = {
        "benchmark": "rollout",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "python": platform.python_version(),
        "load_average_before_after": [load_before, [round(x, 2) for x in os.getloadavg()]],
        "env": ENV_ID,
        "settings": {
            "max_tokens": args.max_tokens,
            "max_turns": args.max_turns,
            "temperature": 0.7,
            "episodes": args.episodes,
            "sequential_episodes": args.sequential_episodes,
            "serve_max_turns": args.serve_max_turns,
        },
        "results": results,
        "ratios": found,
        "targets": TARGETS,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print("\nratios (target):")
    for name, value in found.items():
        print(f"  {name}: {value} ({TARGETS[name]})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
