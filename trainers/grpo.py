"""GRPO with turn-level credit assignment, in plain PyTorch, readable top to bottom.

Holds :class:`GRPOTrainer` and :func:`main` (``python -m llmgym.trainers.grpo
--config cfg.toml``, also under ``torchrun``). One step:

1. draw ``prompts_per_step`` env seeds (each rank plays its share) and roll
   out ``group_size`` episodes per seed with the current weights: in-process
   (the policy shares the trained model) or on an OpenAI-compatible server that
   received the newest LoRA adapter;
2. compute group-relative advantages with turn-level credit
   (:mod:`llmgym.trainers.advantages`); groups without signal are counted,
   optionally replaced by fresh seeds, and left out of the loss;
3. score exactly the episodes' token ids (never re-tokenized text) and
   minimize the clipped surrogate (:mod:`llmgym.trainers.losses`), gradients
   accumulated over micro-batches and summed over ranks;
4. log metrics, checkpoint, push the adapter to the server.

Data parallelism: every rank holds the whole model; after its micro-batches
each rank's gradients are summed with one flat ``all_reduce`` (the loss is
normalized by whole-batch counts, so the sum is the whole batch's gradient).
That is what ``DistributedDataParallel`` does, without its requirement that
every rank run the same number of backward passes, which filtering zero-signal
groups would break. With ``fsdp=True`` the weights, gradients and optimizer
state are sharded instead (:mod:`llmgym.trainers.distributed`): in-process
generation gathers the full weights, short ranks run empty padding
micro-batches, checkpoints are written shard by shard. With
``async_generation=True`` a server generates the next step's episodes while
this one trains (:mod:`llmgym.trainers.overlap`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist

from llmgym.episode import Episode
from llmgym.policy import SamplingParams
from llmgym.rollout import rollout
from llmgym.trainers.advantages import Advantages, compute_advantages, cut_short, merge_advantage_stats
from llmgym.trainers.batch import collate
from llmgym.trainers.checkpoint import (
    check_resume_config, latest_checkpoint, load_checkpoint, save_checkpoint, save_weights, tidy_checkpoints,
)
from llmgym.trainers.config import GRPOConfig, ServerConfigError, load_config
from llmgym.trainers.curriculum import Curriculum, group_solve_rates
from llmgym.trainers.distributed import (
    full_weights, gather_episodes, gather_objects, global_grad_norm, init_distributed, load_sharded_checkpoint,
    local_parameter_count, pad_micro_batches, save_full_weights, save_sharded_checkpoint, shard_model, sum_ranks,
)
from llmgym.trainers.losses import TokenScorer, grpo_loss
from llmgym.trainers.metrics import MetricsLogger, peak_memory_mb, plot_metrics, reward_stats
from llmgym.trainers.overlap import Prefetched, RolloutPrefetcher, overlap_stats

__all__ = ["GRPOTrainer", "main", "load_policy_model", "resolve_env_id", "resolve_device", "add_lora"]


def resolve_env_id(env_id: str) -> str:
    """Accept Gymnasium's ``"module:Env-v0"`` form: import ``module`` (it registers the env), return the id."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    return env_id


def load_policy_model(name: str, device: str) -> tuple[Any, Any]:
    """``(model, tokenizer)``: ``tiny-random`` builds a tiny random Llama, anything else goes to ``load_model``.

    The tiny Llama's weights are always those of ``TINY_RANDOM_SEED``, not the run's seed: the weights
    ``llmgym serve --model tiny-random`` decodes with, where a run with ``base_url`` generates.
    """
    from llmgym.wrappers.models import TINY_RANDOM, TINY_RANDOM_SEED, load_model, tiny_random_model

    if name == TINY_RANDOM:
        return tiny_random_model(TINY_RANDOM_SEED, device=device)
    return load_model(name, device=device)


class GRPOTrainer:
    """Trains a policy on an llmgym environment with GRPO.

    Args:
        config: the run's settings.
        model: an already loaded model to train (default: ``config.model``).
        tokenizer: its tokenizer (required with ``model``).
        resume: continue from the newest checkpoint in ``config.out`` (same run).

    Example (a 2-step run of a tiny random model; see ``tests/trainers/test_grpo.py``)::

        GRPOTrainer(GRPOConfig(env_id="llmgym/Wordle-v0", model="tiny-random", steps=2)).train()
    """

    def __init__(self, config: GRPOConfig, model: Any = None, tokenizer: Any = None, resume: bool = False):
        self.config = config
        self.rank, self.world = init_distributed(need_group=config.fsdp)
        if config.fsdp and config.prompts_per_step < self.world:
            # a rank without seeds never generates inside full_weights() and its FSDP collectives then mismatch (a hang)
            raise ValueError(
                f"prompts_per_step={config.prompts_per_step} is smaller than the {self.world} ranks; with fsdp = true every "
                f"rank needs a seed: set prompts_per_step >= {self.world}"
            )
        self.device = resolve_device(config.device)
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        torch.manual_seed(config.seed)
        self.env_id = resolve_env_id(config.env_id)
        self.curriculum = None
        if config.curriculum_kwarg is not None:
            self.curriculum = Curriculum(config.curriculum_kwarg, config.curriculum_levels, config.curriculum_promote_at,
                                         config.curriculum_demote_at, config.curriculum_window, config.solve_threshold)
        probe = gym.make(self.env_id, **self._env_kwargs())
        self.max_turns = int(getattr(probe.unwrapped, "max_turns", 1))
        probe.close()
        if self.curriculum is not None:
            self._check_curriculum_levels()
        self.max_loss_tokens = config.max_loss_tokens or config.max_new_tokens * self.max_turns
        self.out = Path(config.out)
        if self.rank == 0:  # what a run killed while saving left: temporary folders, a checkpoint renamed away
            tidy_checkpoints(self.out / "checkpoints", config.keep_checkpoints)
        if self.world > 1:
            dist.barrier()
        resume_from = self._checkpoint_to_resume() if resume else None  # a missing one is an error before the model load

        load_device = "cpu" if config.fsdp else str(self.device)  # FSDP moves each shard to the device as it shards
        if model is None:
            model, tokenizer = load_policy_model(config.model, load_device)
        elif tokenizer is None:
            raise TypeError("GRPOTrainer(model=...) also needs tokenizer=")
        model.to(load_device)
        if config.lora:
            model = add_lora(model, config)
        self.model, self.tokenizer = model, tokenizer
        self.model.train()
        share_prefix = config.share_prefix and not config.fsdp  # FSDP units expect one forward per backward
        self.scorer = TokenScorer(self.model, share_prefix=share_prefix)
        self.reference = None
        if config.beta > 0 and not config.lora:  # with LoRA the reference is the base model, adapter off
            frozen = copy.deepcopy(self.model).eval().requires_grad_(False)
            self.reference = TokenScorer(frozen, share_prefix=share_prefix)
            if config.fsdp:
                shard_model(self.reference, frozen, self.device)
        if config.fsdp:
            shard_model(self.scorer, self.model, self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # fused AdamW: one kernel over all tensors (5x faster than the per-tensor default on CPU: 0.11 vs 0.57 s for SmolLM2-135M)
        fused = self.device.type in ("cpu", "cuda") and all(p.is_floating_point() for p in self.params)
        self.optimizer = torch.optim.AdamW(self.params, lr=config.learning_rate, weight_decay=config.weight_decay, fused=fused or None)
        self.autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if config.bf16 and self.device.type == "cuda" else contextlib.nullcontext()
        )
        self.step, self.episodes_seen = 0, 0
        self.seed_sampler = np.random.default_rng(config.seed)
        if resume_from is not None:
            self._resume(resume_from)
        self.metrics = None
        if self.rank == 0:
            sinks = sorted(set(config.report_to) | ({"tensorboard"} if config.tensorboard else set()))
            self.metrics = MetricsLogger(self.out, resume_step=self.step if resume else None, report_to=sinks,
                                         run_config=dataclasses.asdict(config), wandb_project=config.wandb_project)
        self.policy = self._make_policy()
        self.prefetcher = RolloutPrefetcher(lambda step, seeds: self._rollout(seeds, step, first_group=0)) if config.async_generation else None
        self._sampler_state_before_prefetch: dict[str, Any] | None = None
        self._drawn_seeds: list[int] = []  # the newest draw of env seeds, all ranks' shares

    def _check_curriculum_levels(self) -> None:
        """Make (and close) an env at every curriculum level, so a bad level is a config error now, not after a promotion."""
        kwarg = self.config.curriculum_kwarg
        for level in self.config.curriculum_levels[1:]:  # the first level's env is the probe above
            try:
                gym.make(self.env_id, **{**self.config.env_kwargs, kwarg: level}).close()
            except (ValueError, TypeError, gym.error.Error) as err:
                message = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise ValueError(f"curriculum_levels: {kwarg}={level!r} is refused by {self.env_id}: {message}") from None

    # -- the loop -------------------------------------------------------------------

    def train(self) -> list[dict[str, Any]]:
        """Run the remaining steps; returns every step's metrics (rank 0; other ranks get ``[]``)."""
        config, history = self.config, []
        if self.rank == 0:
            (self.out / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=1))
        progress = _progress_bar(config.steps, self.step) if config.progress and self.rank == 0 else None
        run_start, previous_train = time.perf_counter(), None
        try:
            while self.step < config.steps:
                started = time.perf_counter()
                prefetched = self.prefetcher.take(self.step) if self.prefetcher else None
                with full_weights(self.scorer) if config.fsdp and config.base_url is None else contextlib.nullcontext():
                    episodes, advantages, sampling_stats = self._collect(self.step, prefetched.episodes if prefetched else None)
                generated = time.perf_counter()
                if self.prefetcher and self.step + 1 < config.steps:
                    self._sampler_state_before_prefetch = self.seed_sampler.bit_generator.state
                    self.prefetcher.start(self.step + 1, self._local_seeds(), policy_version=self.step)
                train_stats = self._optimize(episodes, advantages)
                optimized = time.perf_counter()
                self.step += 1
                self.episodes_seen += int(sampling_stats.pop("episodes/global"))
                if config.base_url is not None:
                    if self.prefetcher:
                        self.prefetcher.wait()  # the server must not swap adapters under the prefetch's requests
                        if self.world > 1:
                            dist.barrier()  # ... of any rank: rank 0 pushes only once every rank's prefetch is done
                    self._push_adapter()
                metrics = {"step": self.step, "episodes_seen": self.episodes_seen, **sampling_stats, **train_stats}
                metrics["time/generation_s"] = generated - started
                metrics["time/train_s"] = optimized - generated
                metrics["time/step_s"] = time.perf_counter() - started
                metrics["time/optimizer_end_s"] = optimized - run_start
                metrics["tokens_per_s"] = metrics["tokens/total"] / metrics["time/step_s"]
                if self.prefetcher:
                    metrics.update(overlap_stats(prefetched, self.step, run_start, previous_train))
                    previous_train = (generated, optimized)
                metrics.update(peak_memory_mb())
                if self.rank == 0:
                    self.metrics.log(metrics)
                    history.append(metrics)
                if self.step % config.save_every == 0 or self.step == config.steps:
                    self.save()
                if progress is not None:
                    progress[0].update(progress[1], completed=self.step, reward=f"{metrics.get('reward/mean', 0.0):.3f}")
        finally:
            if progress is not None:
                progress[0].stop()
        if config.fsdp:
            folder = save_full_weights(self.model, self.tokenizer, self.out / "final")
            shards = gather_objects(local_parameter_count(self.model), self.world)
            if self.rank == 0:
                total = sum(p.numel() for p in self.model.parameters())
                (folder / "fsdp_shards.json").write_text(json.dumps({"local_parameters": shards, "parameters": total}))
            return history
        checksums = self._rank_checksums()
        if self.rank == 0:
            folder = save_weights(self.model, self.tokenizer, self.out / "final")
            (folder / "rank_checksums.json").write_text(json.dumps(checksums))
        if len(set(checksums)) > 1:
            raise RuntimeError(f"the ranks' weights diverged (checksums {checksums}); data parallelism is broken")
        return history

    def _rank_checksums(self) -> list[float]:
        """A checksum of the trained weights from every rank (they must agree)."""
        value = float(sum(p.detach().double().sum() for p in self.params))
        if self.world == 1:
            return [value]
        values: list[float] = [0.0] * self.world
        dist.all_gather_object(values, value)
        return values

    # -- 1. episodes ----------------------------------------------------------------

    def _local_seeds(self) -> list[int]:
        """Draw the next step's env seeds (the same draw on all ranks); returns this rank's share."""
        seeds = self.seed_sampler.choice(self.config.seed_pool, size=self.config.prompts_per_step, replace=False).tolist()
        self._drawn_seeds = seeds  # the step's seeds on every rank: resampling never plays one of them again
        return seeds[self.rank :: self.world]

    def _collect(self, step: int, prefetched: list[Episode] | None = None) -> tuple[list[Episode], Advantages, dict[str, float]]:
        """Roll out this rank's groups (or take the ``prefetched`` first round); replace zero-signal groups up to ``resample_zero_signal`` times."""
        config = self.config
        resample_rng = np.random.default_rng([config.seed, step, self.rank])
        episodes = prefetched if prefetched is not None else self._rollout(self._local_seeds(), step, first_group=0)
        if episodes and all(_unusable(e) for e in episodes):
            reasons = {e.metadata.get("error") or e.metadata.get("token_ids_dropped") or "no token ids" for e in episodes}
            raise RuntimeError(f"no episode of step {step + 1} can be trained on: {sorted(map(str, reasons))[:3]}")
        errors = sum(1 for e in episodes if _unusable(e))
        episodes = [e for e in episodes if not _unusable(e)]
        advantages = self._advantages(episodes)
        zero_signal_first, groups_first, replaced = advantages.zero_signal_groups, advantages.groups, 0
        first_rates = gather_episodes(group_solve_rates(episodes, config.solve_threshold), self.world)  # before resampling
        used = set(getattr(self, "_drawn_seeds", [])) | {e.seed for e in episodes}  # (tests build trainers bare)
        for attempt in range(config.resample_zero_signal):
            empty = sorted({e.group for e, keep in zip(episodes, advantages.keep)
                            if not keep and not (config.mask_truncated and cut_short(e))})
            fresh = _fresh_seeds(resample_rng, config.seed_pool, len(empty), used)
            if not fresh:
                break
            used.update(fresh)
            replaced_groups = set(empty[: len(fresh)])  # a nearly exhausted seed pool replaces only some
            next_group = 1 + max((e.group for e in episodes), default=-1)
            played = self._rollout(fresh, step, next_group, attempt + 1)
            errors += sum(1 for e in played if _unusable(e))
            new = [e for e in played if not _unusable(e)]
            episodes = [e for e in episodes if e.group not in replaced_groups] + new
            replaced += len(fresh)
            advantages = self._advantages(episodes)
        everyone = gather_episodes(episodes, self.world)
        if self.world > 1 and config.scale_rewards == "batch":  # the std of the whole batch, not of this rank's share
            advantages = self._advantages(episodes, batch_rewards=[e.turn_rewards for e in everyone])
        stats = reward_stats(everyone)
        stats.update(merge_advantage_stats(gather_objects(advantages.stat_sums, self.world)))  # the global batch's
        stats.update({
            "episodes/global": float(len(everyone)),
            "episodes/errors": float(sum_ranks(errors, self.world)),
            "episodes/turns_mean": float(np.mean([e.num_turns for e in everyone])) if everyone else 0.0,
            "episodes/truncated_fraction": float(np.mean([e.truncated for e in everyone])) if everyone else 0.0,
            # both of the first sampling (before resampling): how often the policy's groups carry no signal
            "groups/zero_signal": float(sum_ranks(zero_signal_first, self.world)),
            "groups/zero_signal_fraction": sum_ranks(zero_signal_first, self.world) / max(sum_ranks(groups_first, self.world), 1.0),
            "groups/resampled": float(sum_ranks(replaced, self.world)),
            "groups/all_solved": float(sum(rate == 1.0 for rate in first_rates)),
            "groups/all_failed": float(sum(rate == 0.0 for rate in first_rates)),
            "tokens/total": float(sum_ranks(sum(len(e.token_ids) for e in episodes), self.world)),
            "tokens/generated": float(sum_ranks(sum(sum(e.mask) for e in episodes), self.world)),
        })
        if self.curriculum is not None:
            stats.update(self.curriculum.update(first_rates))  # the next step plays the new level
        return episodes, advantages, stats

    def _env_kwargs(self) -> dict[str, Any]:
        """The env's keyword arguments, with the curriculum's current level when there is one."""
        return self.curriculum.env_kwargs(self.config.env_kwargs) if self.curriculum else dict(self.config.env_kwargs)

    def _rollout(self, seeds: list[int], step: int, first_group: int, attempt: int = 0) -> list[Episode]:
        if not seeds:
            return []
        sampling = SamplingParams(
            temperature=self.config.temperature, top_p=self.config.top_p, max_tokens=self.config.max_new_tokens,
            seed=int(np.random.SeedSequence([self.config.seed, step, self.rank, attempt]).generate_state(1)[0] >> 1),
        )
        was_training = self.model.training
        if self.config.base_url is None:  # in-process generation; a server rollout may run beside training (async_generation)
            self.model.eval()
        try:
            episodes = rollout(
                self.env_id, self.policy, seeds=list(dict.fromkeys(seeds)), group_size=self.config.group_size,
                sampling=sampling, env_kwargs=self._env_kwargs(), max_concurrency=self.config.concurrency,
            )
        finally:
            if self.config.base_url is None:
                self.model.train(was_training)
        for episode in episodes:
            episode.group = first_group + (episode.group or 0)
        return episodes

    def _advantages(self, episodes: list[Episode], batch_rewards: list[list[float]] | None = None) -> Advantages:
        return compute_advantages(
            episodes, scale_rewards=self.config.scale_rewards, turn_lambda=self.config.turn_lambda,
            mask_truncated=self.config.mask_truncated, batch_rewards=batch_rewards,
        )

    # -- 2. optimization --------------------------------------------------------------

    def _optimize(self, episodes: list[Episode], advantages: Advantages) -> dict[str, float]:
        """``num_iterations`` optimizer steps on the kept episodes; returns loss statistics."""
        config = self.config
        kept = [(e, a) for e, a, keep in zip(episodes, advantages.token_advantages, advantages.keep) if keep]
        micro = [kept[i : i + config.micro_batch_size] for i in range(0, len(kept), config.micro_batch_size)]
        batches = [collate([e for e, _ in chunk], [a for _, a in chunk]).to(self.device) for chunk in micro]
        if self.config.fsdp and self.world > 1:  # FSDP collectives need the same number of passes on every rank
            batches = pad_micro_batches(batches, self.device)
        counts = torch.tensor([float(len(kept)), float(sum(b.mask.sum() for b in batches))], dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(counts)
        num_sequences, num_tokens = int(counts[0]), float(counts[1])
        if num_sequences == 0:  # every group lacked signal: nothing to learn from this step
            return {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "entropy": 0.0, "grad_norm": 0.0,
                    "is_weight/mean": 1.0, "ratio/mean": 1.0, "logp_mismatch": 0.0, "tokens/trained": 0.0}
        if config.base_url is None:
            self.policy.weights_changed()  # int8 rollout copies are stale from here on: freed while training, rebuilt next rollout
        old_logps: list[torch.Tensor] = []
        ref_logps: list[torch.Tensor | None] = []
        sums = torch.zeros(8, dtype=torch.float64)  # loss, tokens, clipped, kl, is_weight, ratio, entropy, mismatch
        grad_norm = 0.0
        for iteration in range(config.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for index, batch in enumerate(batches):
                with self.autocast:
                    logp, entropy = self.scorer(batch.input_ids, batch.attention_mask, batch.mask, with_entropy=iteration == 0)
                if iteration == 0:
                    old_logps.append(logp.detach())
                    ref_logps.append(self._reference_logp(batch) if config.beta > 0 else None)
                loss, terms = grpo_loss(
                    logp, old_logps[index], batch.advantages, batch.mask,
                    generator_logp=batch.generator_logp if batch.has_generator_logp else None,
                    ref_logp=ref_logps[index], epsilon_low=config.epsilon_low, epsilon_high=config.epsilon_high,
                    beta=config.beta, is_cap=config.is_cap, aggregation=config.loss_aggregation,
                    num_sequences=num_sequences, num_tokens=num_tokens, max_tokens=self.max_loss_tokens,
                )
                loss.backward()
                if iteration == config.num_iterations - 1:
                    ent = float((entropy * batch.mask).sum()) if entropy is not None else 0.0
                    sums += torch.tensor([loss.item(), terms.tokens, terms.clipped, terms.kl, terms.is_weight, terms.ratio, ent,
                                          terms.mismatch], dtype=torch.float64)
                elif iteration == 0 and entropy is not None:
                    sums[6] += float((entropy * batch.mask).sum())
            self._all_reduce_gradients()
            grad_norm = global_grad_norm(self.params, config.max_grad_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # free the gradients' memory for the next rollout
        if self.world > 1:
            dist.all_reduce(sums)
        tokens = max(float(sums[1]), 1.0)
        return {
            "loss": float(sums[0]), "kl": float(sums[3]) / tokens, "clip_fraction": float(sums[2]) / tokens,
            "is_weight/mean": float(sums[4]) / tokens, "ratio/mean": float(sums[5]) / tokens,
            "entropy": float(sums[6]) / tokens, "grad_norm": grad_norm, "tokens/trained": float(sums[1]),
            "logp_mismatch": float(sums[7]) / tokens,  # mean |logp_generator - logp_trainer|: ~0 for fp32 rollouts
        }

    @torch.no_grad()
    def _reference_logp(self, batch: Any) -> torch.Tensor:
        with self.autocast:
            if self.reference is not None:
                return self.reference(batch.input_ids, batch.attention_mask, batch.mask)[0]
            with self.model.disable_adapter():
                return self.scorer(batch.input_ids, batch.attention_mask, batch.mask)[0]

    def _all_reduce_gradients(self) -> None:
        """Sum every rank's gradients (one flat buffer); ranks without episodes contribute zeros.

        Under FSDP the backward passes already reduce-scattered them.
        """
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.world == 1 or self.config.fsdp:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        dist.all_reduce(flat)
        offset = 0
        for p in self.params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    # -- 3. generation backends, checkpoints ---------------------------------------------

    def _make_policy(self) -> Any:
        config = self.config
        if config.base_url is None:
            from llmgym.wrappers.transformers_policy import TransformersPolicy

            batch = min(config.concurrency, max(1, config.prompts_per_step * config.group_size // self.world))
            # decode on the training thread: one OpenMP pool instead of two fighting over the cores
            return TransformersPolicy(self.model, self.tokenizer, batch_size=batch, name=f"grpo:{config.model}",
                                      rollout_precision=config.rollout_precision, generate_inline=True)
        from llmgym.wrappers.openai_policy import OpenAIPolicy

        self._push_adapter()
        return OpenAIPolicy(config.lora_name, base_url=config.base_url, api_key=config.api_key,
                            return_tokens=True, max_concurrency=config.concurrency, tokenizer=self.tokenizer)

    def _push_adapter(self) -> None:
        """Save the adapter and load it on the server under ``lora_name`` (replacing the previous one)."""
        target = (self.out / "adapter_push").resolve()
        if self.config.fsdp:
            save_full_weights(self.model, None, target)
        if self.rank == 0:
            folder = target if self.config.fsdp else save_weights(self.model, None, target)
            body = {"lora_name": self.config.lora_name, "lora_path": str(folder), "load_inplace": True}
            request = urllib.request.Request(
                self.config.base_url.rstrip("/") + "/load_lora_adapter", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.config.api_key}"},
            )
            try:
                urllib.request.urlopen(request, timeout=120).read()
            except urllib.error.HTTPError as err:
                raise ServerConfigError(f"the server refused the LoRA adapter: {err.code} {err.read()[:300]!r}") from None
            except urllib.error.URLError as err:
                raise ConnectionError(f"cannot reach {self.config.base_url} to push the adapter: {err.reason}") from None
        if self.world > 1:
            dist.barrier()

    def save(self) -> Path | None:
        """Checkpoint the run (rank 0 writes, or every rank its shards under FSDP) and redraw the plot."""
        folder = None
        # a pending prefetch has drawn the next step's seeds already; a resumed run must draw them again
        sampler = self._sampler_state_before_prefetch if self.prefetcher and self.prefetcher.pending_step is not None else None
        state = {"episodes_seen": self.episodes_seen, "seed_sampler": sampler or self.seed_sampler.bit_generator.state}
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        save = save_sharded_checkpoint if self.config.fsdp else save_checkpoint
        if self.config.fsdp or self.rank == 0:  # under FSDP every rank writes its shards
            folder = save(self.out / "checkpoints", self.step, self.model, self.optimizer, state, self.config.keep_checkpoints)
        if self.rank == 0 and self.config.plot:
            try:
                plot_metrics(self.metrics.path, self.out / "rewards.png")
            except ImportError:
                pass  # matplotlib is optional; metrics.jsonl holds the same numbers
        if self.world > 1:
            dist.barrier()
        return folder

    def _checkpoint_to_resume(self) -> Path:
        """The newest checkpoint, if the settings that define the run are those saved in ``config.json``.

        The others may change: the number of steps (to train on), how the run is logged,
        saved and computed, and the learning rate and weight decay, whose configured values
        replace those in the checkpoint's optimizer state (docs/training.md).

        Raises:
            FileNotFoundError: there is no checkpoint.
            ValueError: a setting that defines the run differs.
        """
        folder = latest_checkpoint(self.out / "checkpoints")
        if folder is None:
            raise FileNotFoundError(f"--resume: no checkpoint under {self.out / 'checkpoints'}; give the --out of the run "
                                    "to resume, or start it without --resume")
        may_change = {
            "steps", "out", "save_every", "keep_checkpoints", "plot", "progress", "tensorboard", "report_to", "wandb_project",
            "torch_threads", "device", "bf16", "micro_batch_size", "share_prefix", "rollout_precision", "base_url", "api_key",
            "lora_name", "concurrency", "async_generation", "learning_rate", "weight_decay",
        }
        check_resume_config(self.out / "config.json", dataclasses.asdict(self.config), may_change)
        return folder

    def _resume(self, folder: Path) -> None:
        """Continue from checkpoint ``folder``: weights, optimizer, RNG, progress."""
        load = load_sharded_checkpoint if self.config.fsdp else load_checkpoint
        state = load(folder, self.model, self.optimizer)
        for group in self.optimizer.param_groups:  # load_state_dict brought the saved ones back
            group["lr"], group["weight_decay"] = self.config.learning_rate, self.config.weight_decay
        self.step, self.episodes_seen = int(state["step"]), int(state["episodes_seen"])
        self.seed_sampler.bit_generator.state = state["seed_sampler"]
        if ("curriculum" in state) != (self.curriculum is not None):
            saved = state["curriculum"].get("kwarg") if "curriculum" in state else None
            raise ValueError(
                f"{folder} was saved with curriculum_kwarg={saved!r}, the config has {self.config.curriculum_kwarg!r}; "
                "resume with the same curriculum settings"
            )
        if self.curriculum is not None:
            self.curriculum.load_state_dict(state["curriculum"])

    def close(self) -> None:
        """Close the metrics file, the prefetch thread and the policy."""
        if self.prefetcher is not None:
            self.prefetcher.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.config.base_url is not None:
            self.policy.close()


# -- helpers ---------------------------------------------------------------------------


def _unusable(episode: Episode) -> bool:
    """Episodes a policy error cut short, or without token ids, cannot be trained on."""
    return "error" in episode.metadata or not episode.token_ids


def add_lora(model: Any, config: Any) -> Any:
    """Wrap ``model`` in a peft LoRA adapter configured by ``config.lora_*``."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ImportError('lora=True needs peft: pip install "llmgym[train]"') from err
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=config.lora_target_modules, task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def resolve_device(name: str) -> torch.device:
    """``auto`` = this rank's CUDA device when available, else CPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cpu")
    return torch.device(name)


def _fresh_seeds(rng: np.random.Generator, pool: int, count: int, used: set[int]) -> list[int]:
    """Up to ``count`` distinct seeds of ``[0, pool)`` not in ``used`` (fewer when the pool runs out)."""
    if count <= 0:
        return []
    if pool <= 4 * (len(used) + count):  # a small pool: choose among what is left
        left = [seed for seed in range(pool) if seed not in used]
        return [int(seed) for seed in rng.choice(left, size=min(count, len(left)), replace=False)] if left else []
    fresh: list[int] = []
    while len(fresh) < count:  # most of the pool is unused: a rejected draw is rare
        seed = int(rng.integers(0, pool))
        if seed not in used and seed not in fresh:
            fresh.append(seed)
    return fresh


def _progress_bar(total: int, done: int) -> tuple[Any, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    bar = Progress(TextColumn("GRPO"), BarColumn(), MofNCompleteColumn(), TextColumn("reward {task.fields[reward]}"),
                   TimeElapsedColumn(), TimeRemainingColumn())
    task = bar.add_task("train", total=total, completed=done, reward="-")
    bar.start()
    return bar, task


def main(argv: list[str] | None = None) -> int:
    """``python -m llmgym.trainers.grpo --config cfg.toml [--resume]`` (also under ``torchrun``)."""
    parser = argparse.ArgumentParser(prog="python -m llmgym.trainers.grpo", description="GRPO on an llmgym environment.")
    parser.add_argument("--config", required=True, help="TOML file with GRPOConfig keys")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in out/")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        gym.spec(resolve_env_id(config.env_id))  # an unknown env id or module: before any model is loaded
        trainer = GRPOTrainer(config, resume=args.resume)  # makes one env (its kwargs checked) before loading the model
    except (OSError, ValueError, TypeError, ImportError, gym.error.Error, ServerConfigError) as err:
        if dist.is_initialized():
            dist.destroy_process_group()
        parser.error(str(err))  # a usage error, as `llmgym train grpo` reports it: one line, exit 2, no traceback
    try:
        trainer.train()
    finally:
        trainer.close()
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
