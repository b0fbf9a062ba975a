"""A learning curve of the real SmolLM2-135M-Instruct under our GRPO trainer, on CPU.

Evaluates the model on a fixed set of episodes (same seeds, same sampler seed),
trains it with :class:`llmgym.trainers.grpo.GRPOTrainer` for a few steps, and
evaluates it again on the same episodes. Writes mean reward +- 95% CI
(1.96 x standard error) before and after, the paired difference (same seeds), the
per-step training rewards and the wall time to ``benchmarks/results/grpo_learning_curve.json``.

Default task: ``llmgym/MentalMath-v0`` (single-digit sums, "Reply with just the
number"; reward = correct 1.0 when the reply's last integer is the sum + concise
0.2 when the reply is a bare integer), single turn, 12 new tokens: the base model
is right on about a quarter of its samples at temperature 1.0, so groups carry
reward variance. The earlier default, ``llmgym/rg-spell_backward-v0`` (3-4 letter
words), stayed at ~0.06 after 30 steps: too hard for a 135M model to get signal.
Also writes ``grpo_learning_curve.png`` (training reward per step, and the
evaluation before/after with 95% CIs) beside the JSON.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/grpo_learning_curve.py [--steps 8] [--eval-episodes 64]
    HF_HUB_OFFLINE=1 python benchmarks/grpo_learning_curve.py --rollout-precision bf16 \
        --results benchmarks/results/grpo_learning_curve_bf16.json   # bf16 slot rollout copies, fp32 training
    HF_HUB_OFFLINE=1 python benchmarks/grpo_learning_curve.py --precision bf16 \
        --results benchmarks/results/grpo_learning_curve_bf16_training.json  # fp32 rollouts, bf16 autocast loss

One torch thread (``--threads 1``) is the default: on a shared 2-core machine two
threads ran a GRPO step 4x slower (OpenMP workers spin waiting for a busy core).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["evaluate", "summarize", "plot", "main"]

RESULTS = Path(__file__).resolve().parent / "results" / "grpo_learning_curve.json"
CURVE_KEYS = ("step", "groups/zero_signal", "kl", "entropy", "time/step_s", "tokens_per_s")
EVAL_SEED_OFFSET = 50_000  # training seeds are drawn from [0, EVAL_SEED_OFFSET): evaluation items are unseen


def summarize(values: list[float]) -> dict[str, float]:
    """Mean, sample std, and the 95% confidence half-width (1.96 x std / sqrt(n)) of ``values``."""
    array = np.asarray(values, dtype=float)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "std": std, "ci95": 1.96 * std / math.sqrt(len(array)), "n": int(len(array))}


def _last_reply(messages: list[dict[str, Any]]) -> str:
    """The content of the agent's last message (the env's observation may follow it)."""
    return next((m.get("content") or "" for m in reversed(messages) if m["role"] == "assistant"), "")


def evaluate(
    model: Any,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    episodes: int,
    max_tokens: int,
    temperature: float,
) -> dict[str, Any]:
    """Play ``episodes`` fixed-seed episodes with ``model``; reward statistics overall and per component."""
    from llmgym.policy import SamplingParams
    from llmgym.rollout import rollout
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    was_training = model.training
    model.eval()
    policy = TransformersPolicy(model, tokenizer, batch_size=16, name="smollm2-eval")
    try:
        played = rollout(
            env_id,
            policy,
            seeds=[EVAL_SEED_OFFSET + i for i in range(episodes)],
            env_kwargs=env_kwargs,
            sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=1234),
        )
    finally:
        model.train(was_training)
    rewards = [e.total_reward for e in played]
    components: dict[str, list[float]] = {}
    for episode in played:
        totals: dict[str, float] = {}
        for turn in episode.reward_components:
            for name, value in turn.items():
                totals[name] = totals.get(name, 0.0) + float(value)
        for name, value in totals.items():
            components.setdefault(name, []).append(value)
    return {
        "reward": summarize(rewards),
        "rewards": rewards,
        "components": {name: summarize(values) for name, values in components.items()},
        "example_replies": [_last_reply(e.messages)[:160] for e in played[:6]],
        "replies": [_last_reply(e.messages)[:80] for e in played],
    }


def plot(result: dict[str, Any], path: Path) -> bool:
    """Training reward per step and the evaluation before/after (95% CI) as a PNG; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (curve, bars) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    steps = [row["step"] for row in result["curve"]]
    for key in sorted(k for k in result["curve"][0] if k.startswith("reward/") and k.endswith("/mean")):
        values = np.array([row.get(key, np.nan) for row in result["curve"]], dtype=float)
        window = min(5, len(values))
        smoothed = np.convolve(values, np.ones(window) / window, mode="valid")
        (line,) = curve.plot(steps, values, alpha=0.3)
        curve.plot(steps[window - 1 :], smoothed, color=line.get_color(), label=f"{key} ({window}-step mean)")
    curve.set(xlabel="GRPO step", ylabel="training reward (32 samples)", title=result["env"])
    curve.legend(fontsize=7)
    names = ["reward", *result["before"]["components"]]
    for offset, phase in ((-0.2, "before"), (0.2, "after")):
        stats = [result[phase]["reward"] if n == "reward" else result[phase]["components"][n] for n in names]
        bars.bar(
            np.arange(len(names)) + offset,
            [s["mean"] for s in stats],
            0.4,
            yerr=[s["ci95"] for s in stats],
            capsize=3,
            label=phase,
        )
    bars.set_xticks(np.arange(len(names)), names)
    bars.set(title=f"eval, {result['eval']['episodes']} held-out seeds (95% CI)")
    bars.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: the task, the GRPO settings, the evaluation size and where results go."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="llmgym/MentalMath-v0")
    parser.add_argument("--env-kwargs", default="{}", help="JSON")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument(
        "--rollout-precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="the training rollouts' weights (evaluation always decodes the fp32 model)",
    )
    parser.add_argument(
        "--precision",
        choices=["auto", "bf16", "fp32"],
        default="fp32",
        help="the loss's forward passes (GRPOConfig.precision; auto follows the CPU probe); weights stay fp32",
    )
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="runs/grpo_learning_curve")
    parser.add_argument("--results", default=str(RESULTS))
    return parser.parse_args(argv)


def evaluate_held_out(
    phase: str, model: Any, tokenizer: Any, args: argparse.Namespace, env_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """:func:`evaluate` on the held-out seeds with the command line's settings; prints the reward of ``phase``."""
    evaluation = evaluate(
        model, tokenizer, args.env, env_kwargs, args.eval_episodes, args.max_new_tokens, args.temperature
    )
    print(f"{phase}: {evaluation['reward']}", flush=True)
    return evaluation


def training_config(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> Any:
    """The ``GRPOConfig`` the model trains under: SmolLM2 on CPU, training seeds below the held-out ones."""
    from llmgym.trainers.config import GRPOConfig

    return GRPOConfig(
        env_id=args.env,
        env_kwargs=env_kwargs,
        model="smollm2-135m",
        out=args.out,
        steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        seed_pool=EVAL_SEED_OFFSET,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        learning_rate=args.learning_rate,
        lora=args.lora,
        lora_r=16,
        lora_alpha=32,
        micro_batch_size=8,
        save_every=max(args.steps, 1),
        plot=True,
        progress=False,
        torch_threads=args.threads,
        device="cpu",
        precision=args.precision,
        rollout_precision=args.rollout_precision,
    )


def eval_settings(args: argparse.Namespace) -> dict[str, Any]:
    """How the before and after evaluations sample: the episodes, their seeds and the sampler."""
    return {
        "episodes": args.eval_episodes,
        "seeds": f"{EVAL_SEED_OFFSET}..{EVAL_SEED_OFFSET + args.eval_episodes - 1}",
        "temperature": args.temperature,
        "sampler_seed": 1234,
        "max_new_tokens": args.max_new_tokens,
    }


def train_settings(config: Any) -> dict[str, Any]:
    """The training config's fields that the curve depends on."""
    fields = (
        "steps",
        "prompts_per_step",
        "group_size",
        "max_new_tokens",
        "temperature",
        "learning_rate",
        "lora",
        "loss_aggregation",
        "scale_rewards",
        "beta",
        "precision",
        "rollout_precision",
    )
    return {k: getattr(config, k) for k in fields}


def learning_curve_result(
    args: argparse.Namespace,
    env_kwargs: dict[str, Any],
    trainer: Any,
    history: list[dict[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
    seconds: dict[str, float],
) -> dict[str, Any]:
    """The results file: the settings, the evaluations before and after, their paired difference and the curve."""
    import torch

    difference = summarize([b - a for a, b in zip(before["rewards"], after["rewards"])])
    return {
        "model": "SmolLM2-135M-Instruct (load_model('smollm2-135m'), float32, CPU)",
        "env": args.env,
        "env_kwargs": env_kwargs,
        "eval": eval_settings(args),
        "train": train_settings(trainer.config),
        "precision_chosen": trainer.precision.as_dict(),
        "before": before,
        "after": after,
        "paired_difference": difference,
        "improved": bool(difference["mean"] - difference["ci95"] > 0),
        "curve": [{k: v for k, v in m.items() if k.startswith("reward/") or k in CURVE_KEYS} for m in history],
        "seconds": seconds,
        "torch_threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }


def write_results(result: dict[str, Any], path: Path) -> None:
    """The JSON and its PNG beside it; prints the paired difference and the wall time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, path.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("paired_difference", "improved", "seconds")}, indent=1))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    import llmgym  # noqa: F401  registers the envs
    from llmgym.trainers.grpo import GRPOTrainer
    from llmgym.wrappers.models import load_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    env_kwargs = json.loads(args.env_kwargs)
    started = time.perf_counter()
    model, tokenizer = load_model("smollm2-135m", device="cpu")
    before = evaluate_held_out("before", model, tokenizer, args, env_kwargs)
    evaluated = time.perf_counter()
    trainer = GRPOTrainer(training_config(args, env_kwargs), model=model, tokenizer=tokenizer)
    history = trainer.train()
    trainer.close()
    trained = time.perf_counter()
    after = evaluate_held_out("after", trainer.model, tokenizer, args, env_kwargs)
    finished = time.perf_counter()
    seconds = {
        "eval_before": evaluated - started,
        "train": trained - evaluated,
        "eval_after": finished - trained,
        "total": finished - started,
    }
    result = learning_curve_result(args, env_kwargs, trainer, history, before, after, seconds)
    write_results(result, Path(args.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
