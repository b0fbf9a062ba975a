"""Who the trained policy meets in self-play GRPO: the opponent mix, the snapshot pool, the game's bots.

Holds :func:`parse_opponents` (``--opponents self=0.5,pool=0.3,random=0.2``), the checks of the
self-play settings (:func:`check_self_play_settings` when a
:class:`~llmgym.trainers.config.GRPOConfig` is made, :func:`check_game` when the trainer gets its
game; both before any model loads), :func:`draw_opponent` (one game's opponent from the weighted
mix) and :class:`SnapshotPool` (frozen LoRA snapshots of the trained policy in
``<out>/pool/step-<n>``).

An opponent kind is ``self`` (the current policy in every seat), ``pool`` (a frozen snapshot drawn
from the pool) or the name of one of the game's scripted players
(:func:`~llmgym.envs.multiagent.evaluation.scripted_players`: ``random``, ``mcts``, ``minimax``...).
This module imports neither torch nor the envs (the trainers never do: the game comes from the
caller, docs/architecture.md): the config checks run in the light ``llmgym train`` front end.

Example:
    >>> parse_opponents("self=0.5, pool=0.3,random=0.2")
    {'self': 0.5, 'pool': 0.3, 'random': 0.2}
    >>> import numpy as np
    >>> draw_opponent({"self": 1.0, "random": 1.0}, np.random.default_rng(0)) in {"self", "random"}
    True
"""

from __future__ import annotations

import copy
import math
import re
import shutil
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SELF",
    "POOL",
    "POKER_IDS",
    "SELF_PLAY_DEFAULTS",
    "parse_opponents",
    "check_self_play_settings",
    "check_game",
    "draw_opponent",
    "SnapshotPool",
]

#: The current policy in every seat (every seat's episodes train).
SELF = "self"
#: A frozen snapshot of the policy drawn from the pool.
POOL = "pool"
#: The games whose NashConv ``exploitability_every`` can compute (every information state is scored).
POKER_IDS = ("llmgym/ma-os-KuhnPoker-v0", "llmgym/ma-os-LeducPoker-v0")
#: The self-play settings and their defaults: a single-agent run must leave them so.
SELF_PLAY_DEFAULTS: dict[str, Any] = {
    "opponents": {SELF: 1.0},
    "snapshot_every": 0,
    "pool_size": 4,
    "rate_every": 0,
    "rate_games": 8,
    "exploitability_every": 0,
}
_SNAPSHOT = re.compile(r"step-(\d+)")


def parse_opponents(text: str) -> dict[str, float]:
    """The mix ``--opponents`` names: ``KIND=WEIGHT`` items separated by commas (a bare ``KIND`` weighs 1).

    Raises:
        ValueError: an item that is not ``KIND=NUMBER``, or a kind given twice.
    """
    mix: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        kind, sep, weight = (part.strip() for part in item.partition("="))
        if not kind:
            raise ValueError(f"--opponents needs KIND=WEIGHT items separated by commas, got {text!r}")
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"--opponents: the weight of {kind!r} must be a number, got {weight!r}") from None
        if kind in mix:
            raise ValueError(f"--opponents names {kind!r} twice; give each kind once")
        mix[kind] = value
    return mix


def check_self_play_settings(config: Any) -> None:
    """The self-play settings that need no game: the mix's weights, the ranges, what each setting needs.

    Called when a :class:`~llmgym.trainers.config.GRPOConfig` is made; the kinds of the mix and whether the
    env is a game at all are checked by :func:`check_game` when the trainer gets its game.

    Raises:
        ValueError: naming the setting, its value and what is allowed.
    """
    _check_weights(config.opponents)
    for name in ("snapshot_every", "rate_every", "exploitability_every"):
        if getattr(config, name) < 0:
            raise ValueError(f"{name} must be >= 0 (0 = off), got {getattr(config, name)}")
    for name in ("pool_size", "rate_games"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
    if POOL in config.opponents and config.snapshot_every == 0:
        raise ValueError(
            "opponents has 'pool', but snapshot_every is 0: set snapshot_every = N to snapshot the policy into "
            "the pool every N steps"
        )
    if config.snapshot_every and not config.lora:
        raise ValueError("snapshot_every needs lora=True: the pool holds snapshots of the LoRA adapter")
    if config.exploitability_every and config.env_id not in POKER_IDS:
        raise ValueError(
            f"exploitability_every needs a game whose every information state can be scored "
            f"({', '.join(POKER_IDS)}), not {config.env_id!r}"
        )
    if config.rate_every and find_spec("openskill") is None:
        raise ValueError('rate_every needs openskill to rate the league: pip install "llmgym[openspiel]"')


def _check_weights(opponents: dict[str, float]) -> None:
    """A non-empty mix, each kind with a finite weight > 0."""
    if not opponents:
        raise ValueError("opponents must name at least one kind, e.g. {self = 1.0}")
    for kind, weight in opponents.items():
        if not (isinstance(weight, (int, float)) and not isinstance(weight, bool) and math.isfinite(weight)):
            raise ValueError(f"opponents: the weight of {kind!r} must be a finite number, got {weight!r}")
        if weight <= 0:
            raise ValueError(f"opponents: the weight of {kind!r} must be > 0 (leave a kind out instead), got {weight}")


def check_game(config: Any, game: Any | None) -> None:
    """The self-play settings against the game the trainer got (``None``: a single-agent env).

    Args:
        config: the run's settings.
        game: the multi-agent game (:class:`~llmgym.envs.multiagent.evaluation.MultiAgentGame`), or ``None``.

    Raises:
        ValueError: a self-play setting without a game; a kind the game does not have; a setting self-play
            does not support; a rating league with nobody to rate against.
    """
    if game is None:  # single-agent: a self-play setting would be ignored
        for name, default in SELF_PLAY_DEFAULTS.items():
            if getattr(config, name) != default:
                raise ValueError(
                    f"{name}={getattr(config, name)!r} is a self-play setting: it needs a multi-agent env id "
                    f"(llmgym/ma-*, `llmgym list`), and {config.env_id!r} is single-agent"
                )
        return
    allowed = [SELF, POOL, *sorted(game.scripted)]
    unknown = [kind for kind in config.opponents if kind not in allowed]
    if unknown:
        raise ValueError(f"opponents: unknown kind {unknown[0]!r} for {config.env_id}; allowed: {', '.join(allowed)}")
    if config.rate_every and not config.snapshot_every and not game.scripted:
        raise ValueError(
            f"rate_every: {config.env_id} has no scripted player to rate against; set snapshot_every so that the "
            "league has the pool's snapshots"
        )
    refused = {
        "base_url": config.base_url is not None,
        "async_generation": config.async_generation,
        "fsdp": config.fsdp,
        "ray": config.ray,
        "curriculum_kwarg": config.curriculum_kwarg is not None,
    }
    for name, given in refused.items():
        if given:
            raise ValueError(
                f"{name}={getattr(config, name)!r} is not supported in self-play: a multi-agent run generates "
                "in this process with the trained weights; leave it out"
            )


def draw_opponent(mix: dict[str, float], rng: np.random.Generator) -> str:
    """One game's opponent kind, drawn from ``mix`` in proportion to its weights."""
    kinds = list(mix)
    weights = np.asarray([mix[k] for k in kinds], dtype=float)
    return kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]


class SnapshotPool:
    """Frozen snapshots of the trained LoRA adapter, the newest ``size`` kept, and a policy for each.

    A snapshot is a peft adapter folder ``folder/step-<n>`` (``llmgym eval --model`` loads it too).
    The pool's list is part of each checkpoint (:meth:`state_dict`); a snapshot that leaves the list
    keeps its folder until the next checkpoint no longer names it (:meth:`tidy`), so the newest
    checkpoint always finds its snapshots on disk.

    Args:
        folder: ``<out>/pool``.
        size: how many snapshots the pool keeps.
        base: the model name recorded in the adapters (``base_model_name_or_path``).
        rollout_precision: how a snapshot's policy decodes, as the trained policy does (the trainer's
            ``rollout_precision``): ``"bf16"`` gives each snapshot a bf16 copy with a KV cache slot per
            episode, so its later turns evaluate only their new tokens, not the whole chat again.
    """

    def __init__(self, folder: Path, size: int, base: str, rollout_precision: str = "fp32"):
        self.folder, self.size, self.base = Path(folder), size, base
        self.rollout_precision = rollout_precision
        self.steps: list[int] = []
        self._policies: dict[int, Any] = {}

    def path(self, step: int) -> Path:
        """The folder of the snapshot taken after ``step`` steps."""
        return self.folder / f"step-{step}"

    @staticmethod
    def name(step: int) -> str:
        """How records name the snapshot of ``step`` (``pool/step-5``)."""
        return f"pool/step-{step}"

    def add(self, step: int, model: Any, write: bool = True) -> None:
        """Snapshot ``model``'s adapter after ``step`` steps; the oldest leaves once the pool holds ``size``.

        ``write=False`` (ranks other than 0) only updates the list: rank 0 writes the folder.
        """
        from llmgym.trainers.checkpoint import save_weights

        if write:
            save_weights(model, None, self.path(step), base=self.base)
        self.steps = ([s for s in self.steps if s != step] + [step])[-self.size :]
        self._policies = {s: p for s, p in self._policies.items() if s in self.steps}

    def tidy(self) -> None:
        """Delete the snapshot folders the pool no longer lists."""
        if not self.folder.is_dir():
            return
        for child in self.folder.iterdir():
            match = _SNAPSHOT.fullmatch(child.name)
            if child.is_dir() and match and int(match.group(1)) not in self.steps:
                shutil.rmtree(child, ignore_errors=True)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores: the steps of the snapshots in the pool, oldest first."""
        return {"steps": list(self.steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue with a checkpoint's pool.

        Raises:
            FileNotFoundError: a snapshot the checkpoint lists is missing from ``folder``.
        """
        steps = [int(s) for s in state["steps"]]
        missing = [str(self.path(s)) for s in steps if not (self.path(s) / "adapter_config.json").is_file()]
        if missing:
            raise FileNotFoundError(
                f"the checkpoint's snapshot pool lists {', '.join(missing)}, which are missing; resume needs the "
                "run folder's pool/ as the run left it"
            )
        self.steps, self._policies = steps, {}

    def policy(self, step: int, model: Any, tokenizer: Any, batch_size: int) -> Any:
        """A policy that decodes with the snapshot of ``step`` (made once, kept while the snapshot is in the pool).

        A copy of ``model`` shares its frozen base weights (LoRA never changes them) and gets the snapshot's
        adapter weights: one adapter's memory per snapshot, not a model's (with ``rollout_precision="bf16"``
        also the bf16 copy it decodes, built once: a snapshot's weights never change).
        """
        if step not in self._policies:
            from llmgym.wrappers.transformers_policy import TransformersPolicy

            frozen = _frozen_copy(model, self.path(step))
            self._policies[step] = TransformersPolicy(
                frozen,
                tokenizer,
                batch_size=batch_size,
                name=self.name(step),
                rollout_precision=self.rollout_precision,
                generate_inline=True,
            )
        return self._policies[step]


def _frozen_copy(model: Any, folder: Path) -> Any:
    """A copy of the peft ``model`` with the adapter saved in ``folder``, in eval mode, without gradients.

    The base weights (frozen, ``requires_grad=False``) are shared with ``model``, not copied.
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    shared = {id(p): p for p in model.parameters() if not p.requires_grad}
    frozen = copy.deepcopy(model, memo=shared)
    device = str(next(model.parameters()).device)
    set_peft_model_state_dict(frozen, load_file(str(folder / "adapter_model.safetensors"), device=device))
    return frozen.eval().requires_grad_(False)
