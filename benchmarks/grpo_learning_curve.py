"""A learning curve of the real SmolLM2-135M-Instruct under our GRPO trainer, on CPU.

Evaluates the model on a fixed set of episodes (same seeds, same sampler seed),
trains it with :class:`llmgym.trainers.grpo.GRPOTrainer` for a few steps, and
evaluates it again on the same episodes. Writes mean reward +- 95% CI
(1.96 x standard error) before and after, the paired difference (same seeds), the
per-step training rewards and the wall time to ``benchmarks/results/grpo_learning_curve.json``.

Default task: ``llmgym/rg-spell_backward-v0`` with 3-4 letter words (reasoning-gym's
verifier; reward = correct in [0, 1] + 0.1 format when the answer is in
``<answer>`` tags), single turn, short replies: the base model scores ~0.08 there,
so groups carry signal and the reward can move within a CPU budget.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/grpo_learning_curve.py [--steps 8] [--eval-episodes 32]
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

__all__ = ["evaluate", "summarize", "main"]

RESULTS = Path(__file__).resolve().parent / "results" / "grpo_learning_curve.json"
EVAL_SEED_OFFSET = 50_000  # training seeds are drawn from [0, EVAL_SEED_OFFSET): evaluation items are unseen


def summarize(values: list[float]) -> dict[str, float]:
    """Mean, sample std, and the 95% confidence half-width (1.96 x std / sqrt(n)) of ``values``."""
    array = np.asarray(values, dtype=float)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "std": std, "ci95": 1.96 * std / math.sqrt(len(array)), "n": int(len(array))}


def evaluate(model: Any, tokenizer: Any, env_id: str, env_kwargs: dict[str, Any], episodes: int, max_tokens: int,
             temperature: float) -> dict[str, Any]:
    """Play ``episodes`` fixed-seed episodes with ``model``; reward statistics overall and per component."""
    from llmgym.policy import SamplingParams
    from llmgym.rollout import rollout
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    was_training = model.training
    model.eval()
    policy = TransformersPolicy(model, tokenizer, batch_size=16, name="smollm2-eval")
    try:
        played = rollout(env_id, policy, seeds=[EVAL_SEED_OFFSET + i for i in range(episodes)], env_kwargs=env_kwargs,
                         sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=1234))
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
        "example_replies": [e.messages[-1]["content"][:160] for e in played[:4]],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="llmgym/rg-spell_backward-v0")
    parser.add_argument("--env-kwargs", default='{"config": {"min_word_len": 3, "max_word_len": 4}}', help="JSON")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="runs/grpo_learning_curve")
    parser.add_argument("--results", default=str(RESULTS))
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    import llmgym  # noqa: F401  registers the envs
    from llmgym.trainers.config import GRPOConfig
    from llmgym.trainers.grpo import GRPOTrainer
    from llmgym.wrappers.models import load_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    env_kwargs = json.loads(args.env_kwargs)
    started = time.perf_counter()
    model, tokenizer = load_model("smollm2-135m", device="cpu")
    before = evaluate(model, tokenizer, args.env, env_kwargs, args.eval_episodes, args.max_new_tokens, args.temperature)
    print(f"before: {before['reward']}", flush=True)
    evaluated = time.perf_counter()
    config = GRPOConfig(
        env_id=args.env, env_kwargs=env_kwargs, model="smollm2-135m", out=args.out, steps=args.steps,
        prompts_per_step=args.prompts_per_step, group_size=args.group_size, seed_pool=EVAL_SEED_OFFSET,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, learning_rate=args.learning_rate,
        lora=args.lora, lora_r=16, lora_alpha=32, micro_batch_size=8, save_every=max(args.steps, 1), plot=True,
        progress=False, torch_threads=args.threads, device="cpu", bf16=False,
    )
    trainer = GRPOTrainer(config, model=model, tokenizer=tokenizer)
    history = trainer.train()
    trainer.close()
    trained = time.perf_counter()
    after = evaluate(trainer.model, tokenizer, args.env, env_kwargs, args.eval_episodes, args.max_new_tokens, args.temperature)
    print(f"after: {after['reward']}", flush=True)
    difference = summarize([b - a for a, b in zip(before["rewards"], after["rewards"])])
    result = {
        "model": "SmolLM2-135M-Instruct (load_model('smollm2-135m'), float32, CPU)",
        "env": args.env, "env_kwargs": env_kwargs,
        "eval": {"episodes": args.eval_episodes, "seeds": f"{EVAL_SEED_OFFSET}..{EVAL_SEED_OFFSET + args.eval_episodes - 1}",
                 "temperature": args.temperature, "sampler_seed": 1234, "max_new_tokens": args.max_new_tokens},
        "train": {k: getattr(config, k) for k in ("steps", "prompts_per_step", "group_size", "max_new_tokens", "temperature",
                                                  "learning_rate", "lora", "loss_aggregation", "scale_rewards", "beta")},
        "before": before, "after": after, "paired_difference": difference,
        "improved": bool(difference["mean"] - difference["ci95"] > 0),
        "curve": [{k: m.get(k) for k in ("step", "reward/mean", "reward/std", "groups/zero_signal", "kl", "entropy",
                                         "time/step_s", "tokens_per_s")} for m in history],
        "seconds": {"eval_before": evaluated - started, "train": trained - evaluated, "eval_after": time.perf_counter() - trained,
                    "total": time.perf_counter() - started},
        "torch_threads": args.threads, "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
    }
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("paired_difference", "improved", "seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
