"""Sandbox tool-call latency: the warm pool vs a fresh interpreter per call, in one run.

Measures the wall time a caller waits for one tool call that runs a small
program and returns its output, for:

- ``warm_pool``: :class:`llmgym.sandbox.SubprocessSandbox` with a warm worker
  (a fork of a pre-started, isolated interpreter per call; all limits, the
  uid drop and namespaces as in the environments), and
  ``warm_pool_preload_sympy``, the same with ``preload=("sympy",)``;
- ``fresh_python_c``: ``subprocess.run([python, "-c", code])`` per call (no
  isolation at all: the baseline an agent framework usually starts from);
- ``cold_isolated``: the same sandbox with ``warm=False`` (a fresh isolated
  worker per call: what the pool saves);
- ``docker_warm`` and ``docker_cold`` (where an engine answers and the image is
  present: ``--docker-image``, default ``$LLMGYM_SANDBOX_IMAGE``, which
  ``scripts/sandbox-image.sh`` builds): :class:`llmgym.sandbox.DockerSandbox`
  with its container started (one ``exec`` per call, then the cleanup), and a
  new sandbox per call (container start, run, removal). Only ``print``: the
  image has no sympy.

Programs: ``print(1 + 1)`` (pure overhead) and a small sympy computation
(``import sympy`` is paid per call by a fresh interpreter and by the plain
pool's forks, once per worker by the preloading pool). Reports p50/p99 in milliseconds and writes
``benchmarks/results/sandbox.json``. Target: warm p50 under 20 ms.

Run: ``python benchmarks/sandbox.py [--calls 200] [--docker-image TAG]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from llmgym.sandbox import DockerSandbox, SandboxLimits, SubprocessSandbox, docker_available

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"
PROGRAMS = {
    "print": "print(1 + 1)",
    "sympy": "import sympy\nx = sympy.Symbol('x')\nprint(sympy.solve(x**2 - 5*x + 6, x))",
}


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p99/mean in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
        "calls": len(ordered),
    }


def time_calls(call, code: str, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        call(code)
        samples.append(time.perf_counter() - start)
    return samples


def docker_backends(image: str, limits: SandboxLimits) -> tuple[dict, list]:
    """The Docker backend's calls (warm: container started; cold: a sandbox per call) and what to close."""
    if not image or not docker_available():
        print("no Docker engine or no --docker-image: the Docker rows are skipped")
        return {}, []
    warm_box = DockerSandbox(limits, image=image)

    def warm(code: str) -> None:
        result = warm_box.run(code)
        assert result.ok, result.to_text()

    def cold(code: str) -> None:
        with DockerSandbox(limits, image=image) as box:
            result = box.run(code)
        assert result.ok, result.to_text()

    return {"docker_warm": warm, "docker_cold": cold}, [warm_box]


def local_backends(limits: SandboxLimits) -> tuple[dict, list]:
    """The calls of the subprocess backends (warm pools, plain and sympy-preloaded; a fresh ``python -c``; a cold
    isolated worker per call) and what to close; the pools are started."""
    plain = SubprocessSandbox(limits)  # what the environments use: no preloaded modules
    with_sympy = SubprocessSandbox(limits, preload=("sympy",))  # import sympy paid once per worker
    cold_box = SubprocessSandbox(limits, warm=False)
    for pool in (plain, with_sympy):
        pool.start()

    def warm_call(pool: SubprocessSandbox):
        def call(code: str) -> None:
            result = pool.run(code)
            assert result.ok, result.to_text()

        return call

    def fresh(code: str) -> None:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def cold(code: str) -> None:
        result = cold_box.run(code)
        assert result.ok, result.to_text()

    backends = {
        "warm_pool": warm_call(plain),
        "warm_pool_preload_sympy": warm_call(with_sympy),
        "fresh_python_c": fresh,
        "cold_isolated": cold,
    }
    return backends, [plain, with_sympy, cold_box]


def measure(backends: dict, calls: int, fresh_calls: int) -> dict[str, dict[str, dict[str, float]]]:
    """Each backend's latency percentiles per program (the Docker backends: ``print`` only), after a first call."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, code in PROGRAMS.items():
        for backend, call in backends.items():
            if backend.startswith("docker") and name != "print":
                continue
            call(code)  # first call: nothing to measure but the program's own first import
            cheap = backend == "warm_pool_preload_sympy" or (backend == "warm_pool" and name == "print")
            results.setdefault(backend, {})[name] = percentiles(time_calls(call, code, calls if cheap else fresh_calls))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per program for the warm pool")
    parser.add_argument("--fresh-calls", type=int, default=30, help="calls per program for the per-call interpreters")
    parser.add_argument(
        "--docker-image", default=os.environ.get("LLMGYM_SANDBOX_IMAGE", ""), help="the Docker rows' image"
    )
    args = parser.parse_args()
    limits = SandboxLimits(wall_time_s=20, cpu_time_s=20)
    load_before = round(os.getloadavg()[0], 2)  # the machine is shared: say how busy it was
    backends, boxes = local_backends(limits)
    isolation = boxes[0].isolation()
    docker_calls, docker_boxes = docker_backends(args.docker_image, limits)
    backends.update(docker_calls)
    results = measure(backends, args.calls, args.fresh_calls)
    for box in (*boxes, *docker_boxes):
        box.close()
    report = {
        "benchmark": "sandbox tool-call latency",
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_1m_before": load_before,
            "load_average_1m_after": round(os.getloadavg()[0], 2),
        },
        "pool": "one warm worker per pool; every call is a fresh fork with all limits and isolation",
        "isolation": isolation,
        "docker_image": args.docker_image if docker_calls else None,
        "results": results,
        "target": "warm_pool print p50 < 20 ms",
        "target_met": results["warm_pool"]["print"]["p50_ms"] < 20,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'backend':<24} {'program':<8} {'p50 ms':>9} {'p99 ms':>9}")
    for backend, programs in results.items():
        for name, stats in programs.items():
            print(f"{backend:<24} {name:<8} {stats['p50_ms']:>9.2f} {stats['p99_ms']:>9.2f}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
