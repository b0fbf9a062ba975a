"""GRPO step cost, llmgym's trainer vs TRL's GRPOTrainer, same model, data and settings.

Usage::

    python benchmarks/grpo.py                       # tiny random Llama and SmolLM2-135M: 5 steps,
                                                    # 3 interleaved runs each
    python benchmarks/grpo.py --models tiny --steps 4
    python benchmarks/grpo.py --no-trl --out benchmarks/results/grpo_precision.json   # fp32 vs bf16 only

Both trainers get the same plain safetensors checkpoint (the tiny random Llama
saved once, and the SmolLM2-135M-Instruct GGUF converted by ``load_model``),
the same 16 chat prompts, 4 generations per prompt, 4 completions per step,
at most 32 completion tokens, lr 1e-6, beta 0, DAPO/token-mean loss, fp32 on
CPU, the same torch thread count and the same reward (fraction of vowels).
llmgym runs with fp32 rollouts (the trained weights, like TRL), twice: its loss's
forward passes in fp32 (``llmgym``, as TRL's) and in bf16 autocast
(``llmgym_bf16``, ``precision="bf16"``), beside the CPU probe's fp32 and bf16
matrix-product rates that ``precision="auto"`` decides by. Each trainer
runs in a fresh subprocess, so peak RSS is its own; TRL runs in
its own virtual environment (``--trl-venv``, made when missing: it sees the running
environment's packages, so both trainers use the same torch and transformers, and
``pip install trl==1.16.0`` adds only TRL's own; the set-up's seconds are printed),
never as an llmgym dependency. The first step is warm-up and not counted. Writes
``benchmarks/results/grpo.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROMPTS = [
    "Name a fruit.",
    "Say hello.",
    "What color is the sky?",
    "Count to three.",
    "Name an animal.",
    "Give me a word that rhymes with cat.",
    "What is two plus two?",
    "Name a country.",
    "Say something nice.",
    "What day comes after Monday?",
    "Name a planet.",
    "Spell the word cat.",
    "What is water made of?",
    "Name a musical instrument.",
    "Describe the sun in one word.",
    "What do bees make?",
]
TRL_VERSION = "1.16.0"


def vowel_fraction(text: str) -> float:
    """The reward both trainers optimise: the fraction of ``text``'s letters that are vowels."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- workers (run in their own processes) ----------------------------------------------------


def register_prompts_env() -> str:
    """Register the benchmark's env (one reply to one of the prompts, rewarded by its vowels); its id."""
    import gymnasium as gym

    from llmgym.env import LLMEnv
    from llmgym.rubric import Reward, Rubric

    class PromptsEnv(LLMEnv):
        """One reply to one of the 16 prompts (seed % 16), rewarded by its vowel fraction."""

        def __init__(self):
            super().__init__(max_turns=1)

        def setup(self, options):
            return PROMPTS[self.seed_used % len(PROMPTS)]

        def is_done(self):
            return True

        def build_rubric(self):
            return Rubric([Reward(lambda ctx: vowel_fraction(ctx.action_text), name="vowels")])

    PromptsEnv.system_prompt = ""
    gym.register("llmgym-bench/Prompts-v0", entry_point=PromptsEnv)
    return "llmgym-bench/Prompts-v0"


def ours_config(env_id: str, model: str, out: Path, steps: int, threads: int, precision: str, rollout_precision: str):
    """llmgym's ``GRPOConfig`` with the settings TRL gets too (group of 4, 32 tokens, lr 1e-6, beta 0, DAPO)."""
    from llmgym.trainers.config import GRPOConfig

    return GRPOConfig(
        env_id=env_id,
        model=model,
        out=str(out),
        steps=steps,
        prompts_per_step=1,
        group_size=4,
        seed_pool=len(PROMPTS),
        max_new_tokens=32,
        temperature=1.0,
        learning_rate=1e-6,
        beta=0.0,
        loss_aggregation="token_mean",
        micro_batch_size=4,
        progress=False,
        plot=False,
        save_every=10**6,
        torch_threads=threads,
        device="cpu",
        precision=precision,
        rollout_precision=rollout_precision,
    )


def ours_summary(history: list[dict], precision: str, rollout_precision: str) -> dict:
    """Step time, tokens/s (whole step and training part), peak RSS and reward of llmgym's steps after warm-up."""
    timed = history[1:]
    seconds = sum(m["time/step_s"] for m in timed)
    tokens = sum(m["tokens/total"] for m in timed)
    # the training loop's peak (metrics are taken before the final checkpoint is written; TRL saves nothing)
    peak = max(m["memory/peak_rss_mb"] for m in history)
    return {
        "s_per_step": seconds / len(timed),
        "tokens_per_s": tokens / seconds,
        "peak_rss_mb": peak,
        "completion_tokens_per_step": sum(m["tokens/generated"] for m in timed) / len(timed),
        "generation_s_per_step": sum(m["time/generation_s"] for m in timed) / len(timed),
        "train_s_per_step": sum(m["time/train_s"] for m in timed) / len(timed),
        # the loss and optimizer part alone (the rollouts decode in fp32 either way)
        "train_tokens_per_s": tokens / sum(m["time/train_s"] for m in timed),
        "logp_mismatch": sum(m["logp_mismatch"] for m in history) / len(history),
        "precision": precision,
        "rollout_precision": rollout_precision,
        "reward_mean": sum(m["reward/mean"] for m in history) / len(history),
    }


def run_ours(model: str, steps: int, threads: int, precision: str = "fp32", rollout_precision: str = "fp32") -> dict:
    """Train ``model`` ``steps`` steps with llmgym's ``GRPOTrainer``; its :func:`ours_summary`."""
    import torch

    from llmgym.trainers.grpo import GRPOTrainer

    torch.set_num_threads(threads)
    env_id = register_prompts_env()
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"llmgym-bench-grpo-{os.getpid()}"
    trainer = GRPOTrainer(ours_config(env_id, model, out, steps, threads, precision, rollout_precision))
    try:
        history = trainer.train()
    finally:
        trainer.close()
        shutil.rmtree(out, ignore_errors=True)  # its checkpoints are ~2 GB for SmolLM2; the metrics are in history
    return ours_summary(history, precision, rollout_precision)


def trl_step_timer():
    """A TRL callback that keeps each step's start time (``marks``, then the end of training) and ``num_tokens``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.marks: list[float] = []
            self.tokens: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "num_tokens" in logs:
                self.tokens.append(float(logs["num_tokens"]))

        def on_train_end(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

    return StepTimer()


def trl_reward(completions, **kwargs) -> list[float]:
    """:func:`vowel_fraction` of each completion, in TRL's reward-function signature."""
    return [vowel_fraction(c[0]["content"] if isinstance(c, list) else c) for c in completions]


def trl_prompts():
    """The prompts as TRL's dataset of chats."""
    from datasets import Dataset

    # the same chat as llmgym's env renders: an empty system message (else the template adds its default one)
    chats = [[{"role": "system", "content": ""}, {"role": "user", "content": p}] for p in PROMPTS]
    return Dataset.from_dict({"prompt": chats})


def trl_config(output_dir: str, steps: int):
    """TRL's ``GRPOConfig`` with llmgym's settings (fp32 on CPU, no checkpoints)."""
    import trl

    return trl.GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=32,
        learning_rate=1e-6,
        beta=0.0,
        loss_type="dapo",
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        bf16=False,
        seed=0,
        temperature=1.0,
        disable_tqdm=True,
    )


def run_trl(model: str, steps: int, threads: int) -> dict:
    """Train ``model`` ``steps`` steps with TRL's ``GRPOTrainer``; step time, tokens/s and peak RSS after warm-up."""
    import tempfile

    import torch
    import trl
    from transformers import AutoTokenizer

    torch.set_num_threads(threads)
    output_dir = tempfile.mkdtemp(prefix="llmgym-bench-trl-")
    timer = trl_step_timer()
    data = trl_prompts()
    config = trl_config(output_dir, steps)
    tokenizer = AutoTokenizer.from_pretrained(model)
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=trl_reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    try:
        trainer.train()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    seconds = timer.marks[-1] - timer.marks[1]  # from the start of step 2 to the end
    counted = timer.tokens[-1] - timer.tokens[0] if len(timer.tokens) >= 2 else float("nan")
    return {
        "s_per_step": seconds / (steps - 1),
        "tokens_per_s": counted / seconds,
        "peak_rss_mb": peak_rss_mb(),
        "trl_version": trl.__version__,
    }


# -- driver ---------------------------------------------------------------------------------


def ensure_trl_venv(venv: Path) -> Path:
    """The Python of a venv that holds TRL on top of the running environment's packages; prints the set-up time.

    ``--system-site-packages`` would expose the base interpreter's packages, which have no torch, and
    ``pip install trl`` would then fetch torch's multi-GB CUDA build. A ``.pth`` file adds this
    environment's site-packages instead (its own ``.pth`` files too, as for a site directory), and torch
    is pinned to the running version in the same pip command, so pip keeps that torch or fails, never
    downloading another.
    """
    import site
    import sysconfig
    from importlib import metadata

    start = time.perf_counter()
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    parent_pth = purelib / "llmgym_benchmark_parent.pth"
    if not parent_pth.exists():  # also in a venv an older version of this script made
        parents = list(dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()]))
        parent_pth.write_text("".join(f"import site; site.addsitedir({path!r})\n" for path in parents))
    probe = subprocess.run([str(python), "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True)
    if probe.stdout.strip() != TRL_VERSION:
        torch_pin = f"torch=={metadata.version('torch')}"
        subprocess.run([str(python), "-m", "pip", "install", f"trl=={TRL_VERSION}", torch_pin], check=True)
    print(f"TRL venv {venv}: set up in {time.perf_counter() - start:.1f} s", flush=True)
    return python


def checkpoints(names: list[str]) -> dict[str, str]:
    """A plain safetensors folder for each model named (``tiny``, ``smollm2``), made when missing."""
    from llmgym.wrappers.models import convert_gguf, tiny_random_model

    paths = {}
    if "tiny" in names:
        folder = HERE / ".cache" / "tiny-llama"
        if not (folder / "config.json").is_file():
            model, tokenizer = tiny_random_model(0)
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        paths["tiny"] = str(folder)
    if "smollm2" in names:
        paths["smollm2"] = str(convert_gguf())
    return paths


def worker(kind: str, python: str, model: str, steps: int, threads: int, precision: str = "fp32") -> dict:
    """Run ``kind`` (``ours`` or ``trl``) in a fresh process; its JSON line, or ``{"error": ...}``."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(REPO),
    }
    command = [
        python,
        str(Path(__file__).resolve()),
        "--worker",
        kind,
        "--model",
        model,
        "--steps",
        str(steps),
        "--threads",
        str(threads),
        "--precision",
        precision,
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode != 0:
        return {"error": result.stderr[-2000:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def probe_matmul_rates(threads: int) -> dict:
    """The CPU probe ``precision="auto"`` decides by, at the benchmark's thread count."""
    import torch

    from llmgym.wrappers.hardware import matmul_rates

    torch.set_num_threads(threads)
    return matmul_rates().as_dict()


def compare(key: str, baseline: str, runs: dict[str, list[dict]]) -> dict:
    """``key``'s tokens/s (whole step and training part) and peak RSS over ``baseline``'s: of the median runs,
    and within each interleaved repeat with the median of those."""
    ours, theirs = _median_run(runs[key]), _median_run(runs[baseline])
    if "error" in ours or "error" in theirs:
        return {}
    name = f"{key}_vs_{baseline}"
    out = {
        f"{name}_tokens_per_s_ratio": ours["tokens_per_s"] / theirs["tokens_per_s"],
        f"{name}_peak_rss_ratio": ours["peak_rss_mb"] / theirs["peak_rss_mb"],
    }
    if "train_tokens_per_s" in theirs:
        out[f"{name}_train_tokens_per_s_ratio"] = ours["train_tokens_per_s"] / theirs["train_tokens_per_s"]
    paired = [
        a["tokens_per_s"] / b["tokens_per_s"]
        for a, b in zip(runs[key], runs[baseline])
        if "error" not in a and "error" not in b
    ]
    out[f"{name}_tokens_per_s_ratio_per_repeat"] = paired
    if paired:
        out[f"{name}_tokens_per_s_ratio_per_repeat_median"] = statistics.median(paired)
    return out


def _median_run(runs: list[dict]) -> dict:
    """The run with the median tokens/s (an error if every run failed)."""
    ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["tokens_per_s"])
    return ok[(len(ok) - 1) // 2] if ok else runs[-1]


def parse_args() -> argparse.Namespace:
    """The command line (``--worker`` and its flags are the driver's, for the runs it starts)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2")
    parser.add_argument("--steps", type=int, default=5, help="steps per run (the first is warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for both trainers")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each trainer, interleaved; the median run (by tokens/s) is reported",
    )
    parser.add_argument("--trl-venv", default=str(HERE / ".venv-trl"), help="virtual environment holding TRL")
    parser.add_argument("--no-trl", action="store_true", help="only llmgym's fp32 and bf16 rows (no TRL venv)")
    parser.add_argument("--out", default=str(HERE / "results" / "grpo.json"))
    parser.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is warm-up)")
    return args


def run_worker(args: argparse.Namespace) -> None:
    """In a worker process: train once and print the run's JSON line."""
    if args.worker == "trl":
        print(json.dumps(run_trl(args.model, args.steps, args.threads)))
    else:
        print(json.dumps(run_ours(args.model, args.steps, args.threads, args.precision)))


def measure_model(path: str, args: argparse.Namespace, trl_python: str | None) -> dict:
    """Each trainer's median run on the checkpoint at ``path``, the runs' tokens/s, and the ratios between rows."""
    # Interleaved repeats: the same work varies by up to ~40% from run to run on this shared
    # 2-core VM, so each trainer runs --repeats times in turn and its median run is reported.
    kinds = [
        ("trl", "trl", trl_python, "fp32"),
        ("llmgym", "ours", sys.executable, "fp32"),
        ("llmgym_bf16", "ours", sys.executable, "bf16"),
    ][1 if args.no_trl else 0 :]
    runs: dict[str, list[dict]] = {key: [] for key, *_ in kinds}
    for _ in range(args.repeats):
        for key, kind, python, precision in kinds:
            runs[key].append(worker(kind, python, path, args.steps, args.threads, precision))
    row = {key: _median_run(values) for key, values in runs.items()}
    row["runs_tokens_per_s"] = {key: [r.get("tokens_per_s") for r in values] for key, values in runs.items()}
    # each ratio within each interleaved repeat (both rows under that repeat's load), then its median
    pairs = [("llmgym_bf16", "llmgym")] + ([] if args.no_trl else [("llmgym", "trl"), ("llmgym_bf16", "trl")])
    for key, baseline in pairs:
        row.update(compare(key, baseline, runs))
    return row


def benchmark_report(args: argparse.Namespace, probe: dict, load_before: tuple, results: dict) -> dict:
    """The results file: the shared settings, the machine and its load, and each model's row."""
    return {
        "benchmark": "GRPO step, llmgym vs TRL GRPOTrainer",
        "settings": {
            "prompts": len(PROMPTS),
            "num_generations": 4,
            "completions_per_step": 4,
            "max_completion_tokens": 32,
            "learning_rate": 1e-6,
            "beta": 0.0,
            "loss": "dapo / token_mean",
            "steps": args.steps,
            "warmup_steps": 1,
            "repeats": args.repeats,
            "torch_threads": args.threads,
            "dtype": "float32 weights and optimizer; the loss's forward passes as each row says",
            "rows": {
                "trl": "TRL's GRPOTrainer, fp32 (bf16=False)",
                "llmgym": "fp32 rollouts (the trained weights), precision='fp32'",
                "llmgym_bf16": "fp32 rollouts, precision='bf16': the loss's forward passes in bf16 autocast",
            },
            "cpu_probe": probe,
        },
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "note": "a 2-core machine shared with other jobs: timings vary with their load",
        },
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }


def main() -> int:
    """Run the benchmark (or, with ``--worker``, one run of it); see the module docstring."""
    args = parse_args()
    if args.worker:
        run_worker(args)
        return 0
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    trl_python = None if args.no_trl else str(ensure_trl_venv(Path(args.trl_venv)))
    probe = probe_matmul_rates(args.threads)
    print("CPU probe:", probe, flush=True)
    results = {}
    load_before = os.getloadavg()
    for name, path in checkpoints(names).items():
        results[name] = measure_model(path, args, trl_python)
        print(name, json.dumps(results[name], indent=1))
    report = benchmark_report(args, probe, load_before, results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
