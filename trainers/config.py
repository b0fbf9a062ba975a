"""Configuration dataclasses of the trainers, documented field by field.

Holds :class:`GRPOConfig` (the GRPO trainer), :class:`SFTConfig` (the SFT
warm-up), :func:`load_config`, which reads either from a TOML file (flat
keys named like the fields; unknown keys are an error, not silently ignored),
and :class:`ServerConfigError`, a ``base_url`` server that refuses the config.
Every field is checked when a config is made, before any model loads: the
ranges and the rules between fields are here, the checks every config's
fields go through in :mod:`llmgym.trainers.config_checks`.

Example:
    >>> config = GRPOConfig(env_id="llmgym/Wordle-v0", steps=2, group_size=4)
    >>> config.loss_aggregation, config.scale_rewards
    ('token_mean', 'group')
    >>> GRPOConfig(group_size=1)
    Traceback (most recent call last):
    ...
    ValueError: group_size must be >= 2 (GRPO compares episodes within a group), got 1
    >>> GRPOConfig(learning_rate=float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: learning_rate must be a finite number, got nan
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tomllib

from llmgym.trainers.advantages import ESTIMATORS
from llmgym.trainers.config_checks import (
    AT_LEAST_1,
    NON_NEGATIVE,
    FieldTypeError,
    Ranges,
    check_device,
    check_field_types,
    check_field_values,
)
from llmgym.trainers.opponents import check_self_play_settings

__all__ = [
    "GRPOConfig",
    "SFTConfig",
    "load_config",
    "ServerConfigError",
    "LOSS_AGGREGATIONS",
    "REWARD_SCALINGS",
    "REPORT_SINKS",
    "PRECISIONS",
    "RESUMABLE_CHANGES",
]

LOSS_AGGREGATIONS = ("sequence_mean", "token_mean", "dr_grpo")
REWARD_SCALINGS = ("group", "batch", "none")
REPORT_SINKS = ("tensorboard", "wandb")
#: ``precision`` settings (:mod:`llmgym.trainers.precision`): follow a probe of the machine, or always bf16 or fp32.
PRECISIONS = ("auto", "bf16", "fp32")


RESUMABLE_CHANGES = frozenset(
    {
        "steps",
        "out",
        "save_every",
        "keep_checkpoints",
        "plot",
        "progress",
        "sample_groups",
        "tensorboard",
        "report_to",
        "wandb_project",
        "torch_threads",
        "device",
        "bf16",
        "precision",
        "micro_batch_size",
        "share_prefix",
        "rollout_precision",
        "base_url",
        "api_key",
        "lora_name",
        "concurrency",
        "async_generation",
        "learning_rate",
        "weight_decay",
        "rate_every",
        "rate_games",
        "exploitability_every",
    }
)
"""The :class:`GRPOConfig` fields a resumed run may change: the number of steps (to train on), how the run is
logged, saved, computed and rated, and the learning rate and weight decay (their configured values replace those
in the checkpoint's optimizer state). Every other field defines the run and must match its ``config.json``."""


@dataclass
class GRPOConfig:
    """Everything a GRPO run needs; a TOML file with the same keys builds one."""

    # -- what to train, where -------------------------------------------------
    env_id: str = "llmgym/Wordle-v0"
    """The registered environment id, made with ``gymnasium.make``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make`` (``max_turns``...)."""
    model: str = "smollm2"
    """``load_model`` name or path (``smollm2``, a local checkpoint); ``tiny-random`` builds a tiny random Llama
    (always the weights of ``TINY_RANDOM_SEED``, as ``llmgym serve --model tiny-random`` builds them)."""
    out: str = "runs/grpo"
    """Run folder: metrics.jsonl, checkpoints/, reward plot, final weights."""
    seed: int = 0
    """Seeds the env-seed sampler, torch and the LoRA init; same seed, same run. Not ``tiny-random``'s weights."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``..."""

    # -- sampling episodes ------------------------------------------------------
    steps: int = 50
    """Optimizer rounds: each samples a batch of groups, then updates the policy."""
    prompts_per_step: int = 4
    """Env seeds (groups) per step, over all ranks together."""
    group_size: int = 8
    """Episodes per seed (G); advantages compare episodes within a group."""
    seed_pool: int = 1_000_000
    """Env seeds are drawn uniformly from ``[0, seed_pool)``; a small pool repeats tasks."""
    max_new_tokens: int = 128
    """Most tokens generated per turn."""
    temperature: float = 1.0
    """Sampling temperature. Log-probs, the generator's and the trainer's, are the raw model's (temperature 1)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    resample_zero_signal: int = 0
    """Extra rollout rounds per step to replace groups with no signal (all rewards equal)."""

    # -- curriculum (off unless curriculum_kwarg is set) ----------------------------
    curriculum_kwarg: str | None = None
    """Env keyword argument set to the current level (``"difficulty"``); ``None`` = no curriculum."""
    curriculum_levels: list[Any] = field(default_factory=list)
    """The levels, easiest first; the run starts at the first."""
    curriculum_promote_at: float = 0.8
    """Solve rate over the window at or above which the next level starts."""
    curriculum_demote_at: float | None = None
    """Solve rate over the window below which the previous level comes back; ``None`` never demotes."""
    curriculum_window: int = 16
    """Groups played at a level before its solve rate is judged (and the window a change empties)."""
    solve_threshold: float = 1.0
    """An episode counts as solved when its total reward is at least this (curriculum and ``groups/all_*`` counts)."""

    # -- self-play (a multi-agent env id; docs/training.md, "Self-play") ------------
    opponents: dict[str, float] = field(default_factory=lambda: {"self": 1.0})
    """Who the trained policy plays, as weights of a mix drawn per game: ``self`` (itself in every seat), ``pool``
    (a frozen snapshot) or a scripted player of the game (``random``, ``mcts``, ``minimax``...)."""
    snapshot_every: int = 0
    """Snapshot the LoRA adapter into ``out/pool/step-<n>`` every this many steps (the pool starts with the
    initial weights); 0 = no pool."""
    pool_size: int = 4
    """Snapshots the pool keeps (the newest)."""
    rate_every: int = 0
    """Rate the current policy in a league against the scripted players and the pool every this many steps
    (``out/ratings.jsonl``); 0 = never."""
    rate_games: int = 8
    """Seeds each pair of the rating league plays in each seat."""
    exploitability_every: int = 0
    """Log the trained model's NashConv (Kuhn and Leduc poker) every this many steps; 0 = never."""

    # -- advantages -----------------------------------------------------------
    scale_rewards: str = "group"
    """Divide centred rewards by the group's std (``group``), the batch's std (``batch``) or not at all
    (``none``, Dr. GRPO)."""
    turn_lambda: float = 1.0
    """Weight of the turn-level advantage added to the outcome advantage of each turn's tokens (0 = plain GRPO)."""
    advantage_estimator: str = "grpo"
    """``grpo`` (group-relative outcome plus ``turn_lambda`` x turn credit) or ``rebn`` (each turn's discounted
    return normalised over the batch, GEM's ReBN; ``scale_rewards`` and ``turn_lambda`` do not apply)."""
    gamma: float = 0.9
    """Discount of the per-turn returns of ``advantage_estimator="rebn"``."""
    mask_truncated: bool = False
    """Leave episodes cut by a turn or token budget out of the loss (they still count in group statistics)."""

    # -- loss -----------------------------------------------------------------
    loss_aggregation: str = "token_mean"
    """``sequence_mean`` (GRPO), ``token_mean`` (DAPO) or ``dr_grpo`` (sum over a constant ``max_loss_tokens``)."""
    max_loss_tokens: int | None = None
    """Dr. GRPO's constant normalizer; ``None`` = ``max_new_tokens`` x the env's ``max_turns``."""
    epsilon_low: float = 0.2
    """Lower clip: the ratio is clipped below at ``1 - epsilon_low``."""
    epsilon_high: float = 0.28
    """Upper clip: the ratio is clipped above at ``1 + epsilon_high`` (DAPO's clip-higher)."""
    beta: float = 0.0
    """Weight of the k3 KL to a frozen reference; 0 loads no reference model."""
    is_cap: float | None = 2.0
    """Cap of the truncated importance weight trainer/generator (corrects inference mismatch); ``None`` disables it."""
    num_iterations: int = 1
    """Optimizer steps on each batch of episodes (PPO epochs, mu); > 1 makes the clip matter."""

    # -- optimization ---------------------------------------------------------
    learning_rate: float = 1e-6
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    micro_batch_size: int = 4
    """Episodes per forward/backward; gradients accumulate over the whole batch before a step."""
    share_prefix: bool = True
    """Run the decoder once over a micro-batch's common prefix (a group's prompt, >= 32 tokens) when scoring;
    off with ``fsdp``."""
    max_grad_norm: float | None = 1.0
    """Gradient clipping norm; ``None`` disables clipping."""
    precision: str = "auto"
    """The forward passes of the loss: ``bf16`` autocast (fp32 weights and optimizer), ``fp32``, or ``auto``: bf16 on
    CUDA, and on a CPU bf16 where a probe of its matrix products finds bf16 at least 1.2x as fast as fp32
    (:mod:`llmgym.trainers.precision`; the choice and the probe's numbers go to the run's ``config.json``)."""
    bf16: bool | None = None
    """Deprecated: use ``precision``; ``false`` warns and sets ``precision = "fp32"``, ``true`` warns and keeps it."""
    lora: bool = False
    """Train a LoRA adapter (peft) instead of every weight."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """Deprecated for GRPO, which keeps dropout off (eval mode, so the loss scores the sampled distribution):
    a value other than 0 warns and has no effect."""
    lora_target_modules: list[str] | str = "all-linear"
    """Modules that get adapters: a list of names or peft's ``all-linear``."""
    init_adapter: str | None = None
    """Start from this peft LoRA adapter folder (e.g. an SFT run's ``final/``) instead of a fresh adapter: its
    rank, alpha and target modules are used (``lora_*`` ignored). Needs ``lora=True`` and ``beta = 0`` (the
    reference of a LoRA run is the base model with the adapter off, which here is not where training starts)."""

    # -- generation backend -----------------------------------------------------
    base_url: str | None = None
    """An OpenAI-compatible server (vLLM, ``llmgym serve``) to generate on; ``None`` = in-process with the
    trained weights."""
    api_key: str = "EMPTY"
    """Key sent to ``base_url``."""
    lora_name: str = "llmgym-grpo"
    """Name the adapter is loaded under on the server (needs ``lora=True``)."""
    concurrency: int = 16
    """Concurrent requests in flight to ``base_url``."""
    ray: bool = False
    """Play each episode's environment on a Ray actor (``rollout(..., ray=True)``, the ``ray`` extra): for heavy
    envs; generation stays where it is. An episode whose actor dies is replayed up to ``worker_retries`` times."""
    worker_retries: int = 2
    """With ``ray``: times an episode is replayed on a fresh actor after its actor died, before it counts as failed."""
    rollout_precision: str = "fp32"
    """In-process rollouts with the trained fp32 weights (``fp32``), or with a bf16 copy (LoRA merged) decoded
    with a KV cache slot per episode, so later turns evaluate only their new tokens (``bf16``, a plain Llama on a
    CPU with AVX512-BF16). With bf16 the log-probs are the copy's and the ``is_cap`` importance weight corrects
    the mismatch, logged as ``logp_mismatch``. ``int8`` is deprecated: it warns and runs as ``fp32``."""

    # -- logging and checkpoints ------------------------------------------------
    save_every: int = 25
    """Checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept; older ones are deleted."""
    plot: bool = True
    """Write ``rewards.png`` (reward and KL curves) at each checkpoint."""
    progress: bool = True
    """Show a rich progress bar (rank 0)."""
    sample_groups: int = 1
    """Groups of each step written to ``samples.jsonl`` with the advantage of every token (for ``llmgym view``);
    0 writes none."""
    tensorboard: bool = False
    """Deprecated: use ``report_to = ["tensorboard"]``, which ``true`` is turned into (with a warning)."""
    torch_threads: int | None = None
    """``torch.set_num_threads`` on CPU (>= 1); ``None`` keeps torch's default."""

    # -- scale and overlap -----------------------------------------------------------
    fsdp: bool = False
    """Shard weights, gradients and optimizer state over the ranks (FSDP2, one unit per decoder layer);
    see docs/training.md."""
    async_generation: bool = False
    """With ``base_url``: generate step k+1's episodes on the server while step k trains (one step stale,
    importance-corrected)."""
    report_to: list[str] = field(default_factory=list)
    """Metric sinks besides ``metrics.jsonl``: ``"tensorboard"`` (``out/tensorboard``), ``"wandb"``
    (needs ``llmgym[wandb]``)."""
    wandb_project: str | None = None
    """W&B project; ``None`` = ``$WANDB_PROJECT`` or ``"llmgym"``. The run is named after ``out`` and
    resumes with it."""

    def __post_init__(self) -> None:
        check_field_values(self, _GRPO_RANGES)
        _deprecate_options(self)
        _deprecate_bf16(self)
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {LOSS_AGGREGATIONS}, got {self.loss_aggregation!r}")
        if self.scale_rewards not in REWARD_SCALINGS:
            raise ValueError(f"scale_rewards must be one of {REWARD_SCALINGS}, got {self.scale_rewards!r}")
        if self.advantage_estimator not in ESTIMATORS:
            raise ValueError(f"advantage_estimator must be one of {ESTIMATORS}, got {self.advantage_estimator!r}")
        if self.seed_pool < self.prompts_per_step:
            raise ValueError(f"seed_pool ({self.seed_pool}) must be >= prompts_per_step ({self.prompts_per_step})")
        _check_curriculum(self)
        check_self_play_settings(self)
        _check_rollout_precision(self)
        _check_init_adapter(self)
        _check_generation_server(self)
        unknown_sinks = sorted(set(self.report_to) - set(REPORT_SINKS))
        if isinstance(self.report_to, str) or unknown_sinks:
            raise ValueError(f"report_to must be a list drawn from {REPORT_SINKS}, got {self.report_to!r}")
        check_device(self.device)


def _check_curriculum(config: GRPOConfig) -> None:
    """The curriculum's levels and rates when ``curriculum_kwarg`` is set; no ``curriculum_*`` setting when not."""
    if config.curriculum_kwarg is None:  # the curriculum is off: a level or a rate given for it would be ignored
        for spec in dataclasses.fields(config):
            if spec.name.startswith("curriculum_") and getattr(config, spec.name) != _default(spec):
                raise ValueError(
                    f"{spec.name}={getattr(config, spec.name)!r} needs curriculum_kwarg, the env keyword "
                    "argument the levels go to; without it there is no curriculum"
                )
        return
    from llmgym.trainers.curriculum import check_curriculum

    check_curriculum(
        config.curriculum_kwarg,
        config.curriculum_levels,
        config.curriculum_promote_at,
        config.curriculum_demote_at,
        config.curriculum_window,
    )
    if config.curriculum_kwarg in config.env_kwargs:
        raise ValueError(f"env_kwargs sets {config.curriculum_kwarg!r}, which the curriculum controls: remove it")


def _default(f: dataclasses.Field) -> Any:
    """The field's default value (a fresh one for a ``default_factory``)."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _check_rollout_precision(config: GRPOConfig) -> None:
    """``fp32`` or ``bf16``; bf16 rollout copies need in-process rollouts and whole weights on each rank."""
    if config.rollout_precision not in ("fp32", "bf16"):
        raise ValueError(f"rollout_precision must be 'fp32' or 'bf16', got {config.rollout_precision!r}")
    if config.rollout_precision != "fp32" and config.base_url is not None:
        raise ValueError(
            f"rollout_precision={config.rollout_precision!r} is for in-process rollouts; "
            "the server at base_url decodes with its own weights"
        )
    if config.rollout_precision != "fp32" and config.fsdp:
        raise ValueError(
            f"rollout_precision={config.rollout_precision!r} needs whole weights on each rank; "
            "it does not combine with fsdp=True"
        )


def _check_init_adapter(config: GRPOConfig) -> None:
    """An ``init_adapter`` is a LoRA adapter folder, trained with ``lora=True`` and no KL term."""
    if config.init_adapter is None:
        return
    if not config.lora:
        raise ValueError("init_adapter needs lora=True: it starts the LoRA adapter from that folder")
    if config.beta > 0:
        raise ValueError(
            "init_adapter needs beta = 0: with LoRA the KL reference is the base model without any adapter, "
            "not the adapter training starts from"
        )
    if not os.path.isfile(os.path.join(config.init_adapter, "adapter_config.json")):
        raise ValueError(f"init_adapter={config.init_adapter!r} is not a LoRA adapter folder (no adapter_config.json)")


def _check_generation_server(config: GRPOConfig) -> None:
    """Generating on ``base_url`` needs a LoRA run; ``async_generation`` needs ``base_url``."""
    if config.base_url is not None and not config.lora:
        raise ValueError(
            "generating on base_url needs lora=True: the server receives the trained LoRA adapter each step"
        )
    if config.async_generation and config.base_url is None:
        raise ValueError("async_generation=True needs base_url: only a server can generate while the trainer trains")


def _deprecate_options(config: GRPOConfig) -> None:
    """Warn about settings that are going away, and turn each into what replaces it (kept for one release)."""
    if config.tensorboard and isinstance(config.report_to, list):
        warnings.warn(
            'GRPOConfig.tensorboard is deprecated: set report_to = ["tensorboard"] instead (done for you now)',
            DeprecationWarning,
            stacklevel=4,
        )
        config.report_to = sorted(set(config.report_to) | {"tensorboard"})
        config.tensorboard = False
    if config.rollout_precision == "int8":
        warnings.warn(
            "rollout_precision='int8' is deprecated and runs as 'fp32': the int8 rollout copies were removed, "
            "as the bf16 slot copies decode faster (rollout_precision='bf16', a plain Llama on a CPU with "
            "AVX512-BF16; docs/benchmarks.md)",
            DeprecationWarning,
            stacklevel=4,
        )
        config.rollout_precision = "fp32"
    if config.lora_dropout != 0:
        warnings.warn(
            f"lora_dropout={config.lora_dropout} has no effect in GRPO and is deprecated for it: the trainer keeps "
            "dropout off so that the log-probs it trains on are those of the distribution it sampled",
            DeprecationWarning,
            stacklevel=4,
        )


def _deprecate_bf16(config: GRPOConfig | SFTConfig) -> None:
    """Check ``precision``; turn the deprecated ``bf16`` switch into it (kept for one release).

    ``bf16 = true`` was bf16 autocast on CUDA and fp32 on a CPU, which ``precision = "auto"``
    keeps on CUDA; ``bf16 = false`` was fp32 everywhere, which is ``precision = "fp32"``.
    """
    if config.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {config.precision!r}")
    if config.bf16 is None:
        return
    if config.precision != "auto":
        raise ValueError(f"set precision={config.precision!r} or the deprecated bf16={config.bf16}, not both")
    replacement = "auto" if config.bf16 else "fp32"
    warnings.warn(
        f"{type(config).__name__}.bf16 is deprecated: set precision = {replacement!r} instead (done for you now); "
        'precision = "auto" trains in bf16 on CUDA, and on a CPU where a probe finds bf16 products faster',
        DeprecationWarning,
        stacklevel=4,
    )
    config.precision, config.bf16 = replacement, None


@dataclass
class SFTConfig:
    """An SFT warm-up run on recorded episodes."""

    episodes: str = ""
    """Episodes JSONL to learn from (``llmgym eval`` output, a teacher's episodes...)."""
    model: str = "smollm2"
    """``load_model`` name or path; ``tiny-random`` builds a tiny random Llama
    (always ``TINY_RANDOM_SEED``'s weights)."""
    out: str = "runs/sft"
    """Run folder: metrics.jsonl and the final weights."""
    min_reward: float | None = None
    """Keep only episodes whose total reward is at least this; ``None`` keeps all."""
    epochs: int = 1
    """Passes over the kept episodes (at most, with ``patience``)."""
    val_fraction: float = 0.0
    """Fraction of the kept episodes held out (drawn with ``seed``) for a validation loss after every epoch,
    in ``metrics.jsonl`` as ``val_loss``; 0 holds none out."""
    patience: int | None = None
    """With a validation set: stop after this many epochs without a lower validation loss. The final weights
    are then the best epoch's; ``None`` trains every epoch and keeps the last."""
    learning_rate: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    batch_size: int = 8
    """Episodes per optimizer step."""
    micro_batch_size: int = 4
    """Episodes per forward/backward; gradients accumulate up to ``batch_size``."""
    max_grad_norm: float | None = 1.0
    """Gradient clipping norm; ``None`` disables clipping."""
    max_length: int = 2048
    """Episodes longer than this many tokens are cut (their policy tokens beyond it are not trained on)."""
    lora: bool = False
    """Train a LoRA adapter (peft) instead of every weight."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator."""
    lora_dropout: float = 0.0
    """Deprecated for GRPO, which keeps dropout off (eval mode, so the loss scores the sampled distribution):
    a value other than 0 warns and has no effect."""
    lora_target_modules: list[str] | str = "all-linear"
    """Modules that get adapters."""
    precision: str = "auto"
    """As :attr:`GRPOConfig.precision`: ``bf16`` autocast, ``fp32``, or ``auto`` (bf16 on CUDA; on a CPU, bf16
    where a probe finds its products at least 1.2x as fast as fp32's). Written to the run's ``config.json``."""
    bf16: bool | None = None
    """Deprecated: use ``precision``; ``false`` warns and sets ``precision = "fp32"``, ``true`` warns and keeps it."""
    device: str = "auto"
    """``auto``, ``cpu``, ``cuda``..."""
    seed: int = 0
    """Shuffling and init seed (the LoRA init; not ``tiny-random``'s weights)."""
    progress: bool = True
    """Show a rich progress bar."""

    def __post_init__(self) -> None:
        check_field_values(self, _SFT_RANGES)
        _deprecate_bf16(self)
        check_device(self.device)


#: (field, test, what the test allows) for the fields of both configs
_SHARED_RANGES: Ranges = (
    ("seed", lambda v: 0 <= v < 2**64, "in [0, 2**64) (torch and Gymnasium seeds are non-negative)"),
    ("out", lambda v: v != "", "a folder path, not empty ('' would write into the working directory)"),
    ("micro_batch_size", *AT_LEAST_1),
    ("learning_rate", *NON_NEGATIVE),
    ("weight_decay", *NON_NEGATIVE),
    ("max_grad_norm", lambda v: v > 0, "> 0 or None (no clipping; 0 would zero every gradient)"),
    ("lora_r", *AT_LEAST_1),
    ("lora_alpha", lambda v: v >= 1, ">= 1 (the adapter's scale is lora_alpha / lora_r; 0 would train nothing)"),
    ("lora_dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("lora_target_modules", lambda v: len(v) > 0, "'all-linear' or a non-empty list of module names"),
)
_GRPO_RANGES: Ranges = _SHARED_RANGES + (
    ("group_size", lambda v: v >= 2, ">= 2 (GRPO compares episodes within a group)"),
    *(
        (name, *AT_LEAST_1)
        for name in (
            "steps",
            "prompts_per_step",
            "max_new_tokens",
            "num_iterations",
            "save_every",
            "concurrency",
            "keep_checkpoints",
        )
    ),
    ("seed_pool", lambda v: 1 <= v < 2**63, "in [1, 2**63) (numpy draws the env seeds from it)"),
    ("temperature", lambda v: v > 0, "> 0 for GRPO (it needs diverse samples and finite log-probs)"),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("resample_zero_signal", *NON_NEGATIVE),
    ("sample_groups", *NON_NEGATIVE),
    ("worker_retries", *NON_NEGATIVE),
    (
        "turn_lambda",
        lambda v: v >= 0,
        ">= 0 (0 = plain GRPO; a negative weight would reverse the turn-level advantage)",
    ),
    (
        "max_loss_tokens",
        lambda v: v >= 1,
        ">= 1 or None (max_new_tokens x max_turns; a negative normalizer flips the loss's sign)",
    ),
    ("gamma", lambda v: 0 <= v <= 1, "in [0, 1] (the discount of rebn's per-turn returns)"),
    ("epsilon_low", *NON_NEGATIVE),
    ("epsilon_high", *NON_NEGATIVE),
    ("beta", lambda v: v >= 0, ">= 0 (0 loads no reference model)"),
    ("is_cap", lambda v: v > 0, "> 0 or None (no importance weight)"),
    ("torch_threads", lambda v: v >= 1, ">= 1 or None (torch's default)"),
)
_SFT_RANGES: Ranges = _SHARED_RANGES + tuple((name, *AT_LEAST_1) for name in ("epochs", "batch_size", "max_length"))


ConfigT = TypeVar("ConfigT", GRPOConfig, SFTConfig)


def load_config(path: str | Path, cls: type[ConfigT] = GRPOConfig, **overrides: Any) -> ConfigT:  # type: ignore[assignment]
    """Build a config from a TOML file with flat keys named like the fields.

    Args:
        path: the TOML file.
        cls: :class:`GRPOConfig` or :class:`SFTConfig`.
        **overrides: fields that win over the file (command-line flags).

    Raises:
        ValueError: the file has a key that is not a field of ``cls``, or a value of the
            wrong type (``steps = "five"``, ``micro_batch_size = 2.5``); values that convert
            losslessly are converted (``steps = "5"``).
    """
    with open(path, "rb") as file:
        data = tomllib.load(file)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{path}: unknown {cls.__name__} keys {unknown}; valid keys: {sorted(names)}")
    data.update(overrides)
    try:
        return cls(**check_field_types(cls, data))
    except FieldTypeError as err:
        raise ValueError(f"{path}: {err}") from None


class ServerConfigError(RuntimeError):
    """The generation server at ``base_url`` refused what the config asks of it (loading the LoRA adapter).

    A usage error like an unreachable ``base_url`` (the command line reports it in one line), kept
    apart from ``RuntimeError`` so that a genuine internal error still shows its traceback.
    """
