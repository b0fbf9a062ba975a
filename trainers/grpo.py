"""GRPO with turn-level credit assignment, in plain PyTorch, readable top to bottom.

Holds :class:`GRPOTrainer` and :func:`main` (``python -m llmgym.trainers.grpo
--config cfg.toml``, also under ``torchrun``). :meth:`GRPOTrainer.train` is one
loop, and each stage of a step is one call in it, in this order:

1. collect: draw ``prompts_per_step`` env seeds (each rank plays its share) and
   play ``group_size`` episodes per seed with the current weights, replacing
   groups without signal by fresh seeds (:mod:`llmgym.trainers.collect`).
   Where the episodes are generated, in this process or on an OpenAI-compatible
   server that gets the newest LoRA adapter, is the business of the
   :class:`~llmgym.trainers.generation.Generator`;
2. advantages: group-relative, with turn-level credit, computed once for the
   step (:mod:`llmgym.trainers.advantages`); groups without signal stay out of the loss;
3. loss and optimizer: score exactly the episodes' token ids (never re-tokenized
   text) and minimize the clipped surrogate (:mod:`llmgym.trainers.losses`),
   gradients accumulated over micro-batches and summed over ranks, then one
   AdamW step, ``num_iterations`` times;
4. push weights: the generator gets the new weights;
5. log the step's metrics, every rank's numbers summed;
6. save a checkpoint every ``save_every`` steps.

Three variants are branches of the loop you can see: ``fsdp`` (gather the full
weights around generation), ``base_url`` (a server generator, chosen in
:meth:`GRPOTrainer.__init__`) and ``async_generation`` (a
:class:`~llmgym.trainers.overlap.RolloutPrefetcher` plays the next step's first
round while this one trains). A multi-agent game given as ``game`` is trained by self-play: a
:class:`~llmgym.trainers.self_play.SelfPlayGenerator` plays the step's games against the opponent
mix, groups the episodes by (seed, seat), and snapshots and rates the policy between steps.

Data parallelism: every rank holds the whole model; after its micro-batches
each rank's gradients are summed with one flat ``all_reduce`` (the loss is
normalized by whole-batch counts, so the sum is the whole batch's gradient).
That is what ``DistributedDataParallel`` does, without its requirement that
every rank run the same number of backward passes, which filtering zero-signal
groups would break. With ``fsdp=True`` the weights, gradients and optimizer
state are sharded instead (:mod:`llmgym.trainers.distributed`): in-process
generation gathers the full weights, short ranks run empty padding
micro-batches, checkpoints are written shard by shard.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
import torch.distributed as dist

from llmgym.episode import Episode
from llmgym.policy import Policy
from llmgym.progress import ProgressBar
from llmgym.trainers.advantages import Advantages, compute_advantages, merge_advantage_stats
from llmgym.trainers.batch import EpisodeBatch, collate
from llmgym.trainers.checkpoint import (
    check_resume_config,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_weights,
    tidy_checkpoints,
)
from llmgym.trainers.collect import EpisodeCollector, Rollouts, rollout_metrics
from llmgym.trainers.config import RESUMABLE_CHANGES, GRPOConfig, ServerConfigError, load_config
from llmgym.trainers.curriculum import Curriculum
from llmgym.trainers.distributed import (
    full_weights,
    gather_objects,
    global_grad_norm,
    init_distributed,
    load_sharded_checkpoint,
    local_parameter_count,
    pad_micro_batches,
    save_full_weights,
    save_sharded_checkpoint,
    shard_model,
    sum_ranks,
)
from llmgym.trainers.generation import Generator, InProcessGenerator, ServerGenerator
from llmgym.trainers.losses import LossSums, TokenScorer, grpo_loss
from llmgym.trainers.metrics import MetricsLogger, StepClock, peak_memory_mb, plot_metrics
from llmgym.trainers.model import add_lora, load_policy_model, resolve_device
from llmgym.trainers.opponents import check_game
from llmgym.trainers.overlap import Prefetched, RolloutPrefetcher
from llmgym.trainers.precision import choose_precision
from llmgym.trainers.samples import SampleLogger, with_advantages
from llmgym.trainers.self_play import SelfPlayGenerator

__all__ = ["GRPOTrainer", "main", "resolve_env_id"]

NO_UPDATE = {
    "loss": 0.0,
    "kl": 0.0,
    "clip_fraction": 0.0,
    "entropy": 0.0,
    "grad_norm": 0.0,
    "is_weight/mean": 1.0,
    "ratio/mean": 1.0,
    "logp_mismatch": 0.0,
    "tokens/trained": 0.0,
}
"""The loss metrics of a step whose every group lacked signal (no optimizer step was taken)."""


def resolve_env_id(env_id: str) -> str:
    """Accept Gymnasium's ``"module:Env-v0"`` form: import ``module`` (it registers the env), return the id."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    return env_id


class GRPOTrainer:
    """Trains a policy on an llmgym environment with GRPO.

    Args:
        config: the run's settings.
        model: an already loaded model to train (default: ``config.model``).
        tokenizer: its tokenizer (required with ``model``).
        resume: continue from the newest checkpoint in ``config.out`` (same run).
        game: a multi-agent game to train by self-play (``config.env_id``'s
            :class:`~llmgym.envs.multiagent.evaluation.MultiAgentGame`, which ``llmgym train grpo`` makes;
            :mod:`llmgym.trainers.self_play`); ``None`` for a single-agent env.

    Example (a 2-step run of a tiny random model; see ``tests/trainers/test_grpo.py``)::

        GRPOTrainer(GRPOConfig(env_id="llmgym/Wordle-v0", model="tiny-random", steps=2)).train()
    """

    def __init__(
        self, config: GRPOConfig, model: Any = None, tokenizer: Any = None, resume: bool = False, game: Any = None
    ):
        self.config = config
        check_game(config, game)  # self-play settings need a game, and the kinds of its mix must exist
        self.rank, self.world = init_distributed(need_group=config.fsdp)
        if config.fsdp and config.prompts_per_step < self.world:
            # a rank without seeds never generates inside full_weights() and its FSDP collectives then mismatch (a hang)
            raise ValueError(
                f"prompts_per_step={config.prompts_per_step} is smaller than the {self.world} ranks; "
                f"with fsdp = true every rank needs a seed: set prompts_per_step >= {self.world}"
            )
        self.device = resolve_device(config.device)
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        torch.manual_seed(config.seed)
        self.env_id = resolve_env_id(config.env_id)
        self.game, self.self_play = game, game is not None  # self-play: one policy in every seat of a game
        self.curriculum = Curriculum.from_config(config) if config.curriculum_kwarg is not None else None
        self.max_turns = self._check_env()
        self.max_loss_tokens = config.max_loss_tokens or config.max_new_tokens * self.max_turns
        self.out = Path(config.out)
        if self.rank == 0:  # what a run killed while saving left: temporary folders, a checkpoint renamed away
            tidy_checkpoints(self.out / "checkpoints", config.keep_checkpoints)
        if self.world > 1:
            dist.barrier()
        # a missing one is an error before the model load
        resume_from = self._checkpoint_to_resume() if resume else None
        self._build_model(model, tokenizer)
        self.step, self.episodes_seen = 0, 0
        saved = self._resume(resume_from) if resume_from is not None else None
        self.metrics, self.samples = None, None
        if self.rank == 0:
            self.metrics = MetricsLogger(
                self.out,
                resume_step=self.step if resume else None,
                report_to=config.report_to,
                run_config=self._run_config(),
                wandb_project=config.wandb_project,
            )
            self.samples = SampleLogger(self.out, resume_step=self.step if resume else None)
        # generation: in this process with the trained weights, or on the server at base_url (made with the
        # resumed weights: a server gets them first)
        self.generator: Generator
        shared = dict(config=config, env_id=self.env_id, curriculum=self.curriculum, rank=self.rank, world=self.world)
        if config.base_url is None:
            self.generator = InProcessGenerator(self.model, self.tokenizer, **shared)
        else:
            self.generator = ServerGenerator(self.model, self.tokenizer, out=self.out, **shared)
        if self.self_play:  # the trained policy's games against the opponent mix (trainers/self_play.py)
            self.generator = SelfPlayGenerator(
                self.generator, game, self.model, self.tokenizer, self.out, saved, **shared
            )
        # FSDP with in-process generation: the full weights are gathered once around each step's generation
        self.gathers_weights = config.fsdp and config.base_url is None
        # async generation: a thread plays the next step's first round on the server (no collectives, no model)
        self.prefetcher = (
            RolloutPrefetcher(lambda step, seeds: self.generator.rollout(seeds, step))
            if config.async_generation
            else None
        )
        self.collector = EpisodeCollector(config, self.generator, self.rank, self.world, self.curriculum)
        if saved is not None:
            self.collector.load_sampler_state(saved["seed_sampler"])

    @property
    def policy(self) -> Policy:
        """The policy that generates the episodes (the :attr:`generator`'s)."""
        return self.generator.policy

    def _check_env(self) -> int:
        """Make (and close) the env at every curriculum level (one env without one); returns its ``max_turns``.

        So a bad level is a config error now, not after a promotion.
        """
        config, kwarg = self.config, self.config.curriculum_kwarg
        if self.self_play:  # the game made its env (and so checked its kwargs) when it was made
            return self.game.max_turns
        levels = config.curriculum_levels if self.curriculum is not None else [None]
        max_turns = 1
        for index, level in enumerate(levels):
            kwargs = config.env_kwargs if level is None else {**config.env_kwargs, kwarg: level}
            try:
                env = gym.make(self.env_id, **kwargs)
            except (ValueError, TypeError, gym.error.Error) as err:
                if level is None or index == 0:  # the first env's error is the env's own, as without a curriculum
                    raise
                message = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise ValueError(
                    f"curriculum_levels: {kwarg}={level!r} is refused by {self.env_id}: {message}"
                ) from None
            if index == 0:
                max_turns = int(getattr(env.unwrapped, "max_turns", 1))
            env.close()
        return max_turns

    def _build_model(self, model: Any, tokenizer: Any) -> None:
        """Load the model (unless given), add LoRA, wrap it in scorers, shard it (FSDP), make the optimizer."""
        config = self.config
        load_device = "cpu" if config.fsdp else str(self.device)  # FSDP moves each shard to the device as it shards
        if model is None:
            model, tokenizer = load_policy_model(config.model, load_device)
        elif tokenizer is None:
            raise TypeError("GRPOTrainer(model=...) also needs tokenizer=")
        model.to(load_device)
        if config.lora:
            model = add_lora(model, config)
        self.model, self.tokenizer = model, tokenizer
        # Eval mode for rollouts and loss alike: dropout off, so the log-probs the loss scores are those of the
        # distribution the episodes were sampled from (old_logp equals the generator's log-prob up to float
        # rounding, tested in tests/trainers/test_grpo.py), the ratio starts at 1 and the importance weight
        # measures only real mismatch. Gradients flow the same in eval mode. TRL's GRPO turns dropout off too.
        self.model.eval()
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
        # fused AdamW: one kernel over all tensors
        # (5x faster than the per-tensor default on CPU: 0.11 vs 0.57 s for SmolLM2-135M)
        fused = self.device.type in ("cpu", "cuda") and all(p.is_floating_point() for p in self.params)
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.learning_rate, weight_decay=config.weight_decay, fused=fused or None
        )
        # the loss's forward passes in bf16 autocast where this device multiplies bf16 faster (config.precision)
        self.precision = choose_precision(config.precision, self.device)
        self.autocast = self.precision.autocast()

    # -- the loop -------------------------------------------------------------------

    def train(self) -> list[dict[str, Any]]:
        """Run the remaining steps; returns every step's metrics (rank 0; other ranks get ``[]``)."""
        config, history, clock = self.config, [], StepClock()
        if self.rank == 0:
            (self.out / "config.json").write_text(json.dumps(self._run_config(), indent=1))
        shown = config.progress and self.rank == 0
        with ProgressBar("GRPO", config.steps, completed=self.step, metric="reward", shown=shown) as progress:
            while self.step < config.steps:
                clock.start()
                # 1. collect: group_size episodes per env seed with the current weights, groups without signal
                #    replaced by fresh seeds; with async_generation the first round was played during the last step
                prefetched = self.prefetcher.take(self.step) if self.prefetcher is not None else None
                with full_weights(self.scorer) if self.gathers_weights else contextlib.nullcontext():
                    rollouts = self.collector.collect(self.step, prefetched.episodes if prefetched else None)
                if self.prefetcher is not None and self.step + 1 < config.steps:
                    self._prefetch(self.step + 1)  # the next step's first round generates while this one trains
                clock.generated()
                # 2. advantages: group-relative outcome plus turn-level credit for every policy token, once;
                #    with scale_rewards="batch" the scale is every rank's batch
                advantages = compute_advantages(
                    rollouts.episodes,
                    scale_rewards=config.scale_rewards,
                    turn_lambda=config.turn_lambda,
                    mask_truncated=config.mask_truncated,
                    batch_rewards=[e.turn_rewards for e in rollouts.everyone],
                    estimator=config.advantage_estimator,
                    gamma=config.gamma,
                )
                # 3. loss and optimizer: num_iterations clipped-surrogate steps on the groups with signal
                losses = self.optimize(rollouts.episodes, advantages)
                clock.optimized()
                self.step += 1
                self.episodes_seen += len(rollouts.everyone)
                # 4. push weights: the next rollouts use the new ones; a server swaps adapters only once
                #    every rank's prefetch is done
                if self.prefetcher is not None:
                    self.prefetcher.wait(self.world)
                self.generator.after_update(self.step)
                # 5. log: the whole batch's numbers, every rank's summed (collectives: every rank calls this)
                metrics = self._step_metrics(rollouts, advantages, losses, clock, prefetched)
                if self.self_play:  # results by seat and opponent; the rating league and NashConv when due
                    metrics.update(self.generator.step_metrics(self.step))
                if self.rank == 0:
                    self._log(metrics, rollouts.episodes, advantages)
                    history.append(metrics)
                progress.update(self.step, value=metrics.get("reward/mean", 0.0))
                # 6. save
                if self.step % config.save_every == 0 or self.step == config.steps:
                    self.save()
        self._save_final_weights()
        return history

    def _prefetch(self, step: int) -> None:
        """Start generating the 0-based ``step``'s first round in the background (``async_generation``)."""
        seed_state = self.collector.sampler_state()  # a checkpoint taken before the step draws these seeds again
        self.prefetcher.start(step, self.collector.draw_seeds(), policy_version=self.step, seed_state=seed_state)

    def optimize(self, episodes: list[Episode], advantages: Advantages) -> dict[str, float]:
        """``num_iterations`` optimizer steps on the kept episodes; returns the loss metrics.

        Every rank must call it: the batch's counts, the gradients and the loss sums are summed over ranks.
        """
        config = self.config
        batches, num_sequences, num_tokens = self._micro_batches(episodes, advantages)
        if num_sequences == 0:  # every group lacked signal: nothing to learn from this step
            return dict(NO_UPDATE)
        self.generator.before_update()
        old_logps: list[torch.Tensor] = []
        ref_logps: list[torch.Tensor | None] = []
        sums, grad_norm = LossSums(), 0.0  # loss terms of the last iteration, entropy of the first
        for iteration in range(config.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            # loss: score exactly the episodes' tokens and back-propagate the surrogate, micro-batch by micro-batch
            for index, batch in enumerate(batches):
                with self.autocast:
                    logp, entropy = self.scorer(
                        batch.input_ids, batch.attention_mask, batch.mask, with_entropy=iteration == 0
                    )
                if iteration == 0:  # the policy before this step's updates: the ratio's denominator
                    old_logps.append(logp.detach())
                    ref_logps.append(self._reference_logp(batch) if config.beta > 0 else None)
                    if entropy is not None:
                        sums.entropy += float((entropy * batch.mask).sum())
                loss, terms = grpo_loss(
                    logp,
                    old_logps[index],
                    batch.advantages,
                    batch.mask,
                    generator_logp=batch.generator_logp if batch.has_generator_logp else None,
                    ref_logp=ref_logps[index],
                    epsilon_low=config.epsilon_low,
                    epsilon_high=config.epsilon_high,
                    beta=config.beta,
                    is_cap=config.is_cap,
                    aggregation=config.loss_aggregation,
                    num_sequences=num_sequences,
                    num_tokens=num_tokens,
                    max_tokens=self.max_loss_tokens,
                )
                loss.backward()
                if iteration == config.num_iterations - 1:
                    sums.add(loss.item(), terms)
            # optimizer: every rank's gradients summed, clipped to max_grad_norm, one AdamW step
            self._all_reduce_gradients()
            grad_norm = global_grad_norm(self.params, config.max_grad_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # free the gradients' memory for the next rollout
        return sums.over_ranks(self.world).metrics(grad_norm)

    def _micro_batches(self, episodes: list[Episode], advantages: Advantages) -> tuple[list[EpisodeBatch], int, float]:
        """The kept episodes as micro-batches on the device; and the whole batch's sequence and token counts.

        Under FSDP short ranks get empty padding micro-batches (every rank runs as many passes).
        """
        config = self.config
        kept = [(e, a) for e, a, keep in zip(episodes, advantages.token_advantages, advantages.keep) if keep]
        micro = [kept[i : i + config.micro_batch_size] for i in range(0, len(kept), config.micro_batch_size)]
        batches = [collate([e for e, _ in chunk], [a for _, a in chunk]).to(self.device) for chunk in micro]
        if config.fsdp and self.world > 1:  # FSDP collectives need the same number of passes on every rank
            batches = pad_micro_batches(batches, self.device)
        counts = torch.tensor([float(len(kept)), float(sum(b.mask.sum() for b in batches))], dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(counts)
        return batches, int(counts[0]), float(counts[1])

    @torch.no_grad()
    def _reference_logp(self, batch: EpisodeBatch) -> torch.Tensor:
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

    def _step_metrics(
        self,
        rollouts: Rollouts,
        advantages: Advantages,
        losses: dict[str, float],
        clock: StepClock,
        prefetched: Prefetched | None,
    ) -> dict[str, Any]:
        """The step's logged numbers; every rank must call it (its counts are summed, its statistics gathered)."""
        counts = sum_ranks(rollouts.counts(), self.world)
        advantage_stats = merge_advantage_stats(gather_objects(advantages.stat_sums, self.world))
        metrics = {
            "step": self.step,
            "episodes_seen": self.episodes_seen,
            **rollout_metrics(rollouts, counts, advantage_stats),
            **losses,
        }
        metrics.update(clock.metrics(counts["tokens/total"]))
        if self.prefetcher is not None:
            metrics.update(self.prefetcher.metrics(prefetched, self.step, clock.run_start, clock.train_window))
        metrics.update(peak_memory_mb())
        return metrics

    def _log(self, metrics: dict[str, Any], episodes: list[Episode], advantages: Advantages) -> None:
        """Write the step's metrics, and its first ``sample_groups`` groups with every token's advantage (rank 0)."""
        self.metrics.log(metrics)
        sampled = with_advantages(episodes, advantages, self.step, self.config.sample_groups, self.tokenizer)
        self.samples.log(sampled)

    # -- checkpoints ----------------------------------------------------------------------

    def save(self) -> Path | None:
        """Checkpoint the run (rank 0 writes, or every rank its shards under FSDP) and redraw the plot."""
        folder = None
        # with a prefetch pending, the seed sampler as it was before the prefetch drew the next step's seeds
        seed_state = self.prefetcher.seed_state if self.prefetcher is not None else None
        state = {"episodes_seen": self.episodes_seen, "seed_sampler": seed_state or self.collector.sampler_state()}
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        if self.self_play:
            state["self_play"] = self.generator.state_dict()
        save = save_sharded_checkpoint if self.config.fsdp else save_checkpoint
        if self.config.fsdp or self.rank == 0:  # under FSDP every rank writes its shards
            folder = save(
                self.out / "checkpoints", self.step, self.model, self.optimizer, state, self.config.keep_checkpoints
            )
        if self.self_play:  # snapshots this checkpoint no longer lists
            self.generator.tidy_pool()
        if self.rank == 0 and self.config.plot:
            try:
                plot_metrics(self.metrics.path, self.out / "rewards.png")
            except ImportError:
                pass  # matplotlib is optional; metrics.jsonl holds the same numbers
        if self.world > 1:
            dist.barrier()
        return folder

    def _save_final_weights(self) -> None:
        """Write the trained model to ``out/final``, with the ranks' weight checksums.

        Under FSDP the ranks' shard sizes are written instead of checksums.

        Raises:
            RuntimeError: the ranks' weights differ (data parallelism is broken).
        """
        if self.config.fsdp:
            folder = save_full_weights(self.model, self.tokenizer, self.out / "final")
            shards = gather_objects(local_parameter_count(self.model), self.world)
            if self.rank == 0:
                total = sum(p.numel() for p in self.model.parameters())
                (folder / "fsdp_shards.json").write_text(json.dumps({"local_parameters": shards, "parameters": total}))
            return
        checksums = self._rank_checksums()
        if self.rank == 0:
            folder = save_weights(self.model, self.tokenizer, self.out / "final", base=self.config.model)
            (folder / "rank_checksums.json").write_text(json.dumps(checksums))
        if len(set(checksums)) > 1:
            raise RuntimeError(f"the ranks' weights diverged (checksums {checksums}); data parallelism is broken")

    def _rank_checksums(self) -> list[float]:
        """A checksum of the trained weights from every rank (they must agree)."""
        value = float(sum(p.detach().double().sum() for p in self.params))
        if self.world == 1:
            return [value]
        values: list[float] = [0.0] * self.world
        dist.all_gather_object(values, value)
        return values

    def _run_config(self) -> dict[str, Any]:
        """The settings as saved in ``config.json`` and sent to W&B, with the precision chosen and why."""
        return {**dataclasses.asdict(self.config), "precision_chosen": self.precision.as_dict()}

    def _checkpoint_to_resume(self) -> Path:
        """The newest checkpoint, if the settings that define the run are those saved in ``config.json``.

        Only the fields of :data:`~llmgym.trainers.config.RESUMABLE_CHANGES` may differ (docs/training.md).

        Raises:
            FileNotFoundError: there is no checkpoint.
            ValueError: a setting that defines the run differs.
        """
        folder = latest_checkpoint(self.out / "checkpoints")
        if folder is None:
            raise FileNotFoundError(
                f"--resume: no checkpoint under {self.out / 'checkpoints'}; give the --out of the run "
                "to resume, or start it without --resume"
            )
        check_resume_config(self.out / "config.json", dataclasses.asdict(self.config), RESUMABLE_CHANGES)
        return folder

    def _resume(self, folder: Path) -> dict[str, Any]:
        """Continue from checkpoint ``folder``: weights, optimizer, RNG, progress; returns the saved state."""
        load = load_sharded_checkpoint if self.config.fsdp else load_checkpoint
        state = load(folder, self.model, self.optimizer)
        for group in self.optimizer.param_groups:  # load_state_dict brought the saved ones back
            group["lr"], group["weight_decay"] = self.config.learning_rate, self.config.weight_decay
        self.step, self.episodes_seen = int(state["step"]), int(state["episodes_seen"])
        if ("curriculum" in state) != (self.curriculum is not None):
            saved = state["curriculum"].get("kwarg") if "curriculum" in state else None
            raise ValueError(
                f"{folder} was saved with curriculum_kwarg={saved!r}, the config has {self.config.curriculum_kwarg!r}; "
                "resume with the same curriculum settings"
            )
        if self.curriculum is not None:
            self.curriculum.load_state_dict(state["curriculum"])
        return state

    def close(self) -> None:
        """Stop the prefetch thread, close the generator (its server connections) and the metrics files."""
        if self.prefetcher is not None:
            self.prefetcher.close()
        self.generator.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.samples is not None:
            self.samples.close()


# -- helpers ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m llmgym.trainers.grpo --config cfg.toml [--resume]`` (also under ``torchrun``)."""
    parser = argparse.ArgumentParser(
        prog="python -m llmgym.trainers.grpo", description="GRPO on an llmgym environment."
    )
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
