"""GRPO on an llmgym environment in one file: roll out groups, compare them, take a clipped step.

What it leaves out, on purpose, so that the whole loop reads top to bottom: no
data parallelism or FSDP (one process, one device); no generation on a vLLM
server (the model being trained decodes its own episodes, in-process); no
checkpoints or resume; no curriculum and no resampling of groups without
signal; no KL to a reference model, no LoRA, no bf16 autocast, no metrics
file. The trainer in ``trainers/grpo.py`` (``llmgym train grpo``) has all of
them, built from the same public pieces this file uses:

- :func:`llmgym.rollout.rollout` plays ``group_size`` episodes per env seed and
  records each token-exactly: ``token_ids``, ``mask`` (1 = a token the policy
  generated) and the generator's ``logprobs``;
- :func:`llmgym.trainers.advantages.compute_advantages` turns rewards into
  per-token advantages: the episode's total against its group's, plus
  ``turn_lambda`` times each turn's reward against the group's on that turn;
- :func:`llmgym.trainers.batch.collate` pads episodes into tensors,
  :class:`llmgym.trainers.losses.TokenScorer` recomputes the log-probs of exactly
  those tokens (never re-tokenized text), and
  :func:`llmgym.trainers.losses.grpo_loss` is the clipped surrogate.

The model stays in eval mode throughout, as in the trainer: dropout off, so the
log-probs it is trained on are those of the distribution it sampled from.

Run: ``python examples/grpo_minimal.py`` (SmolLM2-135M on MentalMath), or
``python examples/grpo_minimal.py --model tiny-random --steps 2`` (seconds on a CPU;
a random model never answers right, so its groups carry no signal and it learns nothing).
With the defaults on a CPU (one torch thread, ~11 min on a busy 2-core machine) the
training reward went from 0.13 at step 1 to 0.35 over steps 1-10 and 0.66 over steps 41-50.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import docstring_parser
import numpy as np
import torch

import llmgym  # noqa: F401  (registers the llmgym/ envs)
from llmgym.policy import SamplingParams
from llmgym.rollout import rollout
from llmgym.trainers.advantages import compute_advantages
from llmgym.trainers.batch import collate
from llmgym.trainers.losses import TokenScorer, grpo_loss
from llmgym.wrappers.models import DEFAULT_MODEL, TINY_RANDOM, TINY_RANDOM_SEED, load_model, tiny_random_model
from llmgym.wrappers.transformers_policy import TransformersPolicy


@dataclass
class Args:
    env_id: str = "llmgym/MentalMath-v0"
    """the environment id (a single-turn one; multi-turn envs run unchanged)"""
    model: str = DEFAULT_MODEL
    """a name, checkpoint directory or .gguf file for load_model, or tiny-random (a tiny random Llama)"""
    seed: int = 0
    """seeds the draw of env seeds, the sampling and torch"""
    steps: int = 50
    """training steps, each one rollout and its updates"""
    prompts_per_step: int = 4
    """env seeds (distinct questions) per step"""
    group_size: int = 8
    """episodes per env seed: GRPO's G, the group each advantage is relative to"""
    max_new_tokens: int = 12
    """most tokens the policy generates per turn"""
    temperature: float = 1.0
    """sampling temperature of the rollouts"""
    turn_lambda: float = 1.0
    """weight of the turn-level advantage (0: plain outcome-only GRPO)"""
    num_iterations: int = 2
    """optimizer steps on each step's episodes; from the second on the ratio leaves 1 and clipping acts"""
    micro_batch_size: int = 8
    """episodes per forward and backward pass (gradients accumulate over the step's episodes)"""
    learning_rate: float = 5e-5
    """AdamW learning rate"""
    epsilon_low: float = 0.2
    """lower clip range of the probability ratio"""
    epsilon_high: float = 0.28
    """upper clip range (higher than the lower one: DAPO's clip-higher)"""
    max_grad_norm: float = 1.0
    """gradients are clipped to this global norm"""


def parse_args(argv: list[str] | None = None) -> Args:
    """Args from the command line: a ``--flag`` per field, whose help is the field's docstring."""
    docs = {param.arg_name: param.description for param in docstring_parser.parse_from_object(Args).params}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Args):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=type(field.default),
            default=field.default,
            help=f"{docs[field.name]} (default: {field.default})",
        )
    return Args(**vars(parser.parse_args(argv)))


def main(args: Args) -> tuple[Any, list[dict[str, float]]]:
    """Train for ``args.steps`` steps; returns the trained model and every step's logged numbers."""
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.model == TINY_RANDOM:
        model, tokenizer = tiny_random_model(TINY_RANDOM_SEED, device=device)
    else:
        model, tokenizer = load_model(args.model, device=device)
    episodes_per_step = args.prompts_per_step * args.group_size
    # the policy decodes with the very weights being trained, all of a step's episodes in one batch,
    # on this thread (a CPU then runs one pool of threads, not one for decoding and one for training)
    policy = TransformersPolicy(model, tokenizer, batch_size=episodes_per_step, generate_inline=True)
    scorer = TokenScorer(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    rng = np.random.default_rng(args.seed)
    history: list[dict[str, float]] = []

    for step in range(1, args.steps + 1):
        started = time.perf_counter()

        # collect: G episodes for each of a few fresh env seeds, sampled from the current weights
        seeds = rng.choice(1_000_000, size=args.prompts_per_step, replace=False).tolist()
        sampling = SamplingParams(
            temperature=args.temperature, max_tokens=args.max_new_tokens, seed=int(rng.integers(2**31))
        )
        episodes = rollout(
            args.env_id,
            policy,
            seeds=seeds,
            group_size=args.group_size,
            sampling=sampling,
            max_concurrency=episodes_per_step,
        )
        errors = [e.metadata["error"] for e in episodes if "error" in e.metadata]
        if errors:  # rollout records a failed episode instead of raising; training would trip on it less clearly
            raise RuntimeError(f"{len(errors)} of {len(episodes)} episodes failed; the first: {errors[0]}")

        # advantages: each episode against the others of its group, one value per token (0 off the policy's tokens);
        # groups whose episodes all scored alike carry no signal and are left out
        advantages = compute_advantages(episodes, turn_lambda=args.turn_lambda)
        kept = [(e, a) for e, a, keep in zip(episodes, advantages.token_advantages, advantages.keep) if keep]
        chunks = [kept[i : i + args.micro_batch_size] for i in range(0, len(kept), args.micro_batch_size)]
        batches = [collate([e for e, _ in chunk], [a for _, a in chunk]).to(device) for chunk in chunks]  # (B, T) each
        # the loss is a mean over the whole step's tokens
        num_tokens = float(sum(batch.mask.sum() for batch in batches))

        # optimize: the clipped policy-gradient loss over the policy's tokens, num_iterations optimizer steps
        # (with no batches, every group lacked signal: nothing to learn, and the steps change nothing)
        old_logps: list[torch.Tensor] = []
        for iteration in range(args.num_iterations):
            optimizer.zero_grad(set_to_none=True)
            loss_sum, clipped = 0.0, 0.0
            for index, batch in enumerate(batches):
                logp, _ = scorer(batch.input_ids, batch.attention_mask, batch.mask)  # (B, T), 0 off the mask
                if iteration == 0:
                    old_logps.append(logp.detach())  # the policy before this step's updates: the ratio's denominator
                loss, terms = grpo_loss(
                    logp,
                    old_logps[index],
                    batch.advantages,
                    batch.mask,
                    # the generator's own log-probs: a capped importance weight for any gap between decoder and scorer
                    generator_logp=batch.generator_logp if batch.has_generator_logp else None,
                    epsilon_low=args.epsilon_low,
                    epsilon_high=args.epsilon_high,
                    num_tokens=num_tokens,
                )
                loss.backward()
                loss_sum, clipped = loss_sum + loss.item(), clipped + terms.clipped
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # free the gradients' memory before the next rollout

        # log: one line per step (loss and clip fraction of the last optimizer step)
        seconds = time.perf_counter() - started
        metrics = {
            "step": float(step),
            "reward_mean": float(np.mean([e.total_reward for e in episodes])),
            "loss": loss_sum,
            "clip_fraction": clipped / max(num_tokens, 1.0),
            "episodes_kept": float(len(kept)),
            "tokens_per_s": sum(len(e.token_ids) for e in episodes) / seconds,
        }
        history.append(metrics)
        print(
            f"step {step:>3}/{args.steps}  reward {metrics['reward_mean']:.3f}  loss {loss_sum:+.4f}  "
            f"clip {metrics['clip_fraction']:.3f}  kept {len(kept):>2}/{len(episodes)}  "
            f"tokens/s {metrics['tokens_per_s']:,.0f}",
            flush=True,
        )

    return model, history


if __name__ == "__main__":
    main(parse_args())
