"""Batched local decoding against one plain llama-cpp-python stream of the same model, in one run.

Measures, with SmolLM2-135M-Instruct, each engine on its default threads (llama.cpp: half
the cores, whose spinning workers want a core to spare; torch: every core) unless
``--threads`` sets them:

- ``single_stream``: plain ``llama_cpp.Llama.create_completion`` on the shipped Q4_1 GGUF,
  one sequence, with half the cores' threads and with every core; the faster is the
  reference every ratio divides by;
- ``eval_cN``: :func:`llmgym.rollout.rollout` on Wordle at N = 1, 4, 16 concurrent
  episodes, ``--waves`` x N episodes in all (4 by default: an eval runs more
  episodes than it runs at once, as the README's 32 at 16), as ``llmgym eval``
  builds the policy (N = 1: ``LlamaCppPolicy``, one stream; N > 1: the batched
  policy with N slots on each engine of ``--engines``, ``TorchSlotPolicy`` on torch
  and ``LlamaCppBatchPolicy`` on llama.cpp, ``_llama.cpp`` suffixed to the llama.cpp
  engine's rows); aggregate generated
  tokens/s and the prompt tokens evaluated per turn (first turn vs later turns:
  later turns should evaluate only the env's reply); ``eval_c16_rerun``: the same
  eval again, to check that the same seeds give the same tokens;
  ``eval_c16_one_wave``: 16 episodes only, whose end is a tail of ever fewer rows;
- ``serve_cN``: an ``llmgym serve`` subprocess (its default 16 slots) at N = 1, 16, 64
  concurrent one-turn episodes (``--waves`` x N requests) through the OpenAI client,
  and the server's peak RSS;
- ``trainer_rollout_bf16``: the GRPO trainer's in-process rollouts
  (``TransformersPolicy`` as the trainer builds it, 4 Wordle prompts x groups of 4)
  on bf16 slot copies;
- ``batch16``: 16 requests generated as one batch by the batched policy on each engine;
- ``limit``: FLOPs per token (2 x parameters) x the best tokens/s, against measured
  ``torch.matmul`` rates (fp32, and bf16, the torch engine's arithmetic) with the same
  threads: how far the batch is from the machine's compute; and the memory bound a
  16-row step meets first (it reads the bf16 weights once and each row's keys and
  values), from a measured copy bandwidth.

Every case runs in a fresh process (:func:`isolated`). The machine's speed drifts over a
run (the same eval, the same tokens, ran at 394 and at 348 tokens/s minutes apart), so the
reference is measured again right before each eval, serve and trainer case
(``reference_beside_tokens_per_s``), and each such case's ratio is printed against both. Results go to
``benchmarks/results/llamacpp_batch.json``; ratios print at the end.
The load average is recorded: on a shared machine absolute numbers move with it.

Run: ``python benchmarks/llamacpp_batch.py [--max-tokens 128] [--max-turns 3] [--threads 1]``
``[--engines torch,llama.cpp]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llmgym  # noqa: F401  registers the envs
from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout import rollout

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "llamacpp_batch.json"
ENV_ID = "llmgym/Wordle-v0"


class Recording(Policy):
    """Delegates to a policy and keeps each turn's prompt accounting."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.returns_tokens = inner, inner.name, True
        self.max_concurrency = inner.max_concurrency
        self.turns: list[dict[str, int]] = []

    async def agenerate(self, request: PolicyRequest) -> Generation:
        out = await self.inner.agenerate(request)
        self.turns.append(
            {
                "first_turn": request.prefix_token_ids is None,
                "prompt": len(out.prompt_token_ids),
                # the transformers policy evaluates every prompt whole
                "processed": out.metadata.get("prompt_tokens_processed", len(out.prompt_token_ids)),
            }
        )
        return out


def single_stream(model: str, threads: int, tokens: int) -> dict[str, Any]:
    """Plain llama-cpp-python: one sequence, ``tokens`` sampled tokens (end-of-text banned), after a warm-up."""
    import llama_cpp

    llm = llama_cpp.Llama(model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False)
    prompt = "<|im_start|>user\nTell me a long story about a dragon.<|im_end|>\n<|im_start|>assistant\n"
    ban = {llm.token_eos(): -1e9, 2: -1e9}
    llm.create_completion(prompt, max_tokens=8, temperature=0.7, seed=0, logit_bias=ban)
    rates = []
    for seed in range(3):
        llm.reset()
        start = time.perf_counter()
        out = llm.create_completion(prompt, max_tokens=tokens, temperature=0.7, seed=seed, logit_bias=ban)
        rates.append(out["usage"]["completion_tokens"] / (time.perf_counter() - start))
    llm.close()
    return {"tokens_per_s": round(sorted(rates)[1], 2), "runs": [round(r, 2) for r in rates], "threads": threads}


def timed_rollout(
    policy: Any, seeds: int, group_size: int, concurrency: int, sampling: SamplingParams, max_turns: int
) -> tuple[list[Any], dict[str, Any]]:
    """Wordle episodes of ``policy`` after a one-episode warm-up: the episodes, and their aggregate generated
    tokens/s with the prompt tokens evaluated per turn (first turn vs later turns: later turns should evaluate
    only the env's reply)."""
    recording = Recording(policy)
    recording.max_concurrency = concurrency
    rollout(ENV_ID, recording, seeds=1, sampling=sampling, env_kwargs={"max_turns": 1})  # warm-up
    recording.turns.clear()
    start = time.perf_counter()
    records = rollout(
        ENV_ID,
        recording,
        seeds=seeds,
        group_size=group_size,
        max_concurrency=concurrency,
        sampling=sampling,
        env_kwargs={"max_turns": max_turns},
    )
    wall = time.perf_counter() - start
    generated = sum(e.metadata.get("generated_tokens") or 0 for e in records)
    numbers = {
        "failed": sum("error" in e.metadata for e in records),
        "generated_tokens": generated,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(generated / wall, 2),
    }
    first = [t for t in recording.turns if t["first_turn"]]
    later = [t for t in recording.turns if not t["first_turn"]]
    for when, turns in (("first", first), ("later", later)):
        numbers[f"{when}_turn_prompt_tokens_mean"] = round(sum(t["prompt"] for t in turns) / max(1, len(turns)), 1)
        numbers[f"{when}_turn_processed_mean"] = round(sum(t["processed"] for t in turns) / max(1, len(turns)), 1)
    return records, numbers


def eval_case(
    concurrency: int, episodes: int, sampling: SamplingParams, max_turns: int, threads: int, engine: str
) -> tuple[dict, list[list[int]]]:
    """The eval's numbers, and each episode's tokens (to compare a rerun with)."""
    from llmgym.wrappers.models import load_policy

    slots = {"slots": concurrency, "engine": engine} if concurrency > 1 else {}
    policy = load_policy("llama.cpp", None, n_threads=threads, **slots)
    records, numbers = timed_rollout(policy, episodes, 1, concurrency, sampling, max_turns)
    policy.close()
    numbers = {
        "concurrency": concurrency,
        "engine": engine if concurrency > 1 else "llama.cpp single stream",
        "episodes": episodes,
        **numbers,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    return numbers, [list(e.token_ids) for e in sorted(records, key=lambda e: e.seed)]


def serve_cases(
    levels: list[int], sampling: SamplingParams, engine: str, suffix: str, waves: int, reference: Callable[[], float]
) -> dict[str, Any]:
    from rollout import Server, measure  # benchmarks/rollout.py: the llmgym serve subprocess and its timing

    from llmgym.wrappers.openai_policy import OpenAIPolicy

    results: dict[str, Any] = {}
    with Server("llama.cpp", max_batch_size=16, engine=engine) as server:
        for level in levels:
            policy = OpenAIPolicy("smollm2-135m", base_url=server.url, return_tokens=False, max_concurrency=level)
            measure(policy, concurrency=1, episodes=1, sampling=sampling, max_turns=1)  # warm-up
            name = f"serve_c{level}{suffix}"
            requests = max(level * waves, 4)
            beside = reference()  # the server idle meanwhile
            results[name] = measure(policy, concurrency=level, episodes=requests, sampling=sampling, max_turns=1)
            results[name]["reference_beside_tokens_per_s"] = beside
            results[name]["engine"] = engine
            policy.close()
            print(f"-- {name}: {json.dumps(results[name])}", flush=True)
        results[f"serve_peak_rss_mb{suffix}"] = server.peak_rss_mb()
    return results


def one_batch_rate(policy: Any, tokens: int) -> dict[str, Any]:
    """Aggregate generated tokens/s of one batch of 16 story requests (after a warm-up of two)."""
    requests = [
        PolicyRequest(
            [{"role": "user", "content": f"Tell me a long story about {i}."}],
            sampling=SamplingParams(temperature=0.7, max_tokens=tokens, seed=i),
        )
        for i in range(16)
    ]
    policy.generate(requests[:2])
    start = time.perf_counter()
    outs = policy.generate(requests)
    wall = time.perf_counter() - start
    generated = sum(len(o.token_ids) for o in outs)
    rate = round(generated / wall, 2)
    return {"batch": 16, "generated_tokens": generated, "wall_s": round(wall, 2), "tokens_per_s": rate}


def trainer_rollout_case(precision: str, prompts: int, group: int, sampling: SamplingParams, max_turns: int) -> dict:
    """The GRPO trainer's in-process rollouts: ``TransformersPolicy`` on the fp32 SmolLM2 as the trainer builds it
    (decoding on the calling thread, batches of ``prompts x group``), Wordle in groups of ``group`` episodes."""
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    episodes = prompts * group
    policy = TransformersPolicy(None, batch_size=episodes, rollout_precision=precision, generate_inline=True)
    _, numbers = timed_rollout(policy, prompts, group, episodes, sampling, max_turns)
    return {"rollout_precision": precision, "episodes": episodes, "group_size": group, **numbers}


def batch_rate(threads: int | None, tokens: int, engine: str) -> dict[str, Any]:
    """The batched policy of ``engine`` at 16 sequences (the requests of :func:`one_batch_rate`), and the model's
    parameter count (from the llama.cpp model both policies tokenize with)."""
    from llmgym.wrappers.llamacpp_policy import import_llama_cpp

    policy = batch_policy(engine, slots=16, n_ctx=1024, n_threads=threads)
    try:
        parameters = import_llama_cpp().llama_model_n_params(policy.llm.model)
        return {**one_batch_rate(policy, tokens), "parameters": parameters}
    finally:
        policy.close()


def batch_policy(engine: str, **kwargs: Any) -> Any:
    """The batched local policy of ``engine``: :class:`TorchSlotPolicy` for ``"torch"``, else
    :class:`LlamaCppBatchPolicy` on that engine."""
    if engine == "torch":
        from llmgym.wrappers.torch_slot_policy import TorchSlotPolicy

        return TorchSlotPolicy(**kwargs)
    from llmgym.wrappers.llamacpp_batch import LlamaCppBatchPolicy

    return LlamaCppBatchPolicy(engine=engine, **kwargs)


def matmul_rate(threads: int, dtype: str = "float32", size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of a square ``torch.matmul`` in ``dtype`` on ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size).to(getattr(torch, dtype)), torch.randn(size, size).to(getattr(torch, dtype))
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def memory_rate(gigabytes: float = 0.5, repeats: int = 5) -> float:
    """Bytes/s a copy of a large bf16 tensor moves (read + write): the bandwidth a decoding step is bound by."""
    import torch

    source = torch.ones(int(gigabytes * 2**30) // 2, dtype=torch.bfloat16)
    target = torch.empty_like(source)
    target.copy_(source)
    start = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source)
    return 2 * source.nbytes * repeats / (time.perf_counter() - start)


def isolated(case: Callable[..., Any], *args: Any) -> Any:
    """``case(*args)`` in a fresh process: a thread pool that llama.cpp or torch left in this one (spinning on its
    cores) would slow the next case down (a batch of 16 on the torch engine ran 1.5x slower after the single
    stream had run here), and each case is then what one ``llmgym`` command does."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(case, *args).result()


class Reference:
    """The single stream every ratio divides by, measured again right before a case on its best thread count:
    this machine's speed drifts over a run (the same eval, the same tokens, ran at 394 and at 348 tokens/s
    minutes apart)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def measure(self) -> float:
        from llmgym.wrappers.weights import default_gguf_path

        return isolated(single_stream, str(default_gguf_path()), self.threads, 128)["tokens_per_s"]

    def beside(self, case: Callable[..., Any], *case_args: Any) -> Any:
        """``case(*case_args)`` in a fresh process, with the reference measured right before it."""
        rate = self.measure()
        out = isolated(case, *case_args)
        (out[0] if isinstance(out, tuple) else out)["reference_beside_tokens_per_s"] = rate
        return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=128, help="most tokens per turn (default 128)")
    parser.add_argument("--max-turns", type=int, default=3, help="turns per eval episode (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: each engine's own)")
    parser.add_argument("--eval", default="1,4,16", help="eval concurrencies (default 1,4,16)")
    parser.add_argument("--serve", default="1,16,64", help="serve concurrencies (default 1,16,64)")
    parser.add_argument("--waves", type=int, default=4, help="episodes per slot in eval and serve (default 4)")
    parser.add_argument("--skip", default="", help="parts to skip: eval,serve,trainer")
    parser.add_argument(
        "--engines",
        default="torch,llama.cpp",
        help="batched engines (torch: TorchSlotPolicy; llama.cpp: LlamaCppBatchPolicy), the first unsuffixed",
    )
    parser.add_argument("--out", default=str(RESULTS))
    return parser.parse_args()


def single_streams(threads: int | None) -> dict[str, Any]:
    """The single stream on half the cores' threads (or ``threads``) and on every core's; the faster one, with both."""
    from llmgym.wrappers.weights import default_gguf_path

    every = os.cpu_count() or 1
    counts = sorted({threads or max(1, every // 2), every})
    streams = [isolated(single_stream, str(default_gguf_path()), n, 128) for n in counts]
    best = dict(max(streams, key=lambda stream: stream["tokens_per_s"]))
    best["all_thread_counts"] = streams
    print(f"-- single_stream: {best}", flush=True)
    return best


def eval_cases(
    args: argparse.Namespace, engines: list[str], suffix: dict[str, str], sampling: SamplingParams, reference: Reference
) -> dict[str, Any]:
    """``eval_cN`` on each engine; at the highest N on the first engine also a rerun (the same tokens?) and one wave
    (as many episodes as slots, so the run ends in a tail of ever fewer rows)."""
    results: dict[str, Any] = {}
    levels = [int(x) for x in args.eval.split(",")]
    for engine in engines:
        for level in levels:
            if level == 1 and engine != engines[0]:
                continue  # one episode at a time is the single-stream policy whatever the engine
            name = f"eval_c{level}{suffix[engine] if level > 1 else ''}"
            case = (eval_case, level, level * args.waves, sampling, args.max_turns, args.threads, engine)
            results[name], tokens = reference.beside(*case)
            print(f"-- {name}: {json.dumps(results[name])}", flush=True)
            if level == max(levels) and engine == engines[0]:
                rerun, again = reference.beside(*case)
                rerun["same_tokens_as_first_run"] = again == tokens
                results[f"eval_c{level}_rerun"] = rerun
                print(f"-- eval_c{level}_rerun: {json.dumps(rerun)}", flush=True)
                one_wave, _ = reference.beside(eval_case, level, level, sampling, args.max_turns, args.threads, engine)
                results[f"eval_c{level}_one_wave"] = one_wave
                print(f"-- eval_c{level}_one_wave: {json.dumps(one_wave)}", flush=True)
    return results


def limits(results: dict[str, Any], threads: int | None) -> dict[str, Any]:
    """How far the best rate is from the machine: FLOPs per token (2 x parameters) against measured
    ``torch.matmul`` rates, and the memory bound a 16-row step meets first."""
    every = os.cpu_count() or 1
    fp32 = isolated(matmul_rate, threads or every)
    bf16 = isolated(matmul_rate, threads or every, "bfloat16")
    best = max(v["tokens_per_s"] for v in results.values() if isinstance(v, dict) and "tokens_per_s" in v)
    per_token = 2 * results["batch16"]["parameters"]
    bandwidth = isolated(memory_rate)
    weight_bytes = 2 * results["batch16"]["parameters"]  # bf16
    kv_bytes_per_token = 2 * 2 * 30 * 3 * 64  # K and V, bf16, SmolLM2's 30 layers x 3 kv heads x 64
    context = 500  # Wordle's mean context at 16 episodes, 3 turns
    return {
        "memory_gb_per_s": round(bandwidth / 1e9, 1),
        # a step of 16 rows reads the bf16 weights once and each row's keys and values
        "memory_limit_tokens_per_s_16_rows_500_context": round(
            16 * bandwidth / (weight_bytes + 16 * context * kv_bytes_per_token), 1
        ),
        "flops_per_token": per_token,
        "matmul_fp32_gflops": round(fp32 / 1e9, 1),
        "matmul_bf16_gflops": round(bf16 / 1e9, 1),
        "compute_limit_tokens_per_s_fp32": round(fp32 / per_token, 1),
        "compute_limit_tokens_per_s_bf16": round(bf16 / per_token, 1),
        "best_tokens_per_s": best,
        "best_fraction_of_bf16_limit": round(best * per_token / bf16, 3),
    }


def ratios(results: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Each case's tokens/s over the single stream's, and over the reference measured beside it."""
    base = results["single_stream"]["tokens_per_s"]
    to_base = {
        name: round(value["tokens_per_s"] / base, 2)
        for name, value in results.items()
        if isinstance(value, dict) and value.get("tokens_per_s") and name != "single_stream"
    }
    to_beside = {
        name: round(value["tokens_per_s"] / value["reference_beside_tokens_per_s"], 2)
        for name, value in results.items()
        if isinstance(value, dict) and value.get("reference_beside_tokens_per_s")
    }
    return to_base, to_beside


def main() -> None:
    args = parse_args()
    skip = set(filter(None, args.skip.split(",")))
    sampling = SamplingParams(temperature=0.7, max_tokens=args.max_tokens, seed=0)
    engines = [engine for engine in args.engines.split(",") if engine]
    suffix = {engine: "" if engine == engines[0] else "_" + engine for engine in engines}
    load_before = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, Any] = {"single_stream": single_streams(args.threads)}
    reference = Reference(results["single_stream"]["threads"])
    for engine in engines:
        results[f"batch16{suffix[engine]}"] = isolated(batch_rate, args.threads, 64, engine)
        print(f"-- batch16 {engine}: {results[f'batch16{suffix[engine]}']}", flush=True)
    if "eval" not in skip:
        results.update(eval_cases(args, engines, suffix, sampling, reference))
    if "serve" not in skip:
        levels = [int(x) for x in args.serve.split(",")]
        for engine in engines:
            results.update(serve_cases(levels, sampling, engine, suffix[engine], args.waves, reference.measure))
    if "trainer" not in skip:
        results["trainer_rollout_bf16"] = reference.beside(trainer_rollout_case, "bf16", 4, 4, sampling, args.max_turns)
        print(f"-- trainer_rollout_bf16: {results['trainer_rollout_bf16']}", flush=True)
    to_base, to_beside = ratios(results)
    limit = limits(results, args.threads)
    report = {
        "benchmark": "llamacpp_batch",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "threads": args.threads or "each engine's default",
        "load_average_before_after": [load_before, [round(x, 2) for x in os.getloadavg()]],
        "settings": {
            "max_tokens": args.max_tokens,
            "max_turns": args.max_turns,
            "temperature": 0.7,
            "episodes_per_slot": args.waves,
        },
        "results": results,
        "ratios_vs_single_stream": to_base,
        "ratios_vs_reference_beside": to_beside,
        "targets": {"eval_c16": ">= 2.5", "serve_c16": ">= 2.5", "serve_c64": ">= 2.5"},
        "engines": engines,
        "limit": limit,
        "peak_rss_mb_this_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nsingle stream: {results['single_stream']['tokens_per_s']} tok/s ({reference.threads} threads)")
    print("ratios vs single stream (target >= 2.5 for eval_c16, serve_c16, serve_c64):")
    for name, value in to_base.items():
        beside = f" ({to_beside[name]} against the reference beside it)" if name in to_beside else ""
        print(f"  {name}: {value}{beside}")
    print(f"limit: {json.dumps(limit)}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
