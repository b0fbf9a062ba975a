"""Sharded data parallelism (FSDP2) for the trainers, with PyTorch's own ``fully_shard``.

Holds :func:`init_distributed` (join the ``torchrun`` process group),
:func:`shard_model` (one FSDP unit per decoder layer plus the root),
:func:`local_parameter_count`, :func:`full_weights` (gather every parameter for
in-process generation), :func:`pad_micro_batches` (every rank runs the same
number of forward/backward passes), :func:`global_grad_norm`, :func:`save_full_weights`
and the sharded checkpoints :func:`save_sharded_checkpoint` /
:func:`load_sharded_checkpoint` (``torch.distributed.checkpoint``: each rank
writes and reads its own shards, so no rank ever holds the whole optimizer state).

Why these choices:

- The FSDP root is the :class:`~llmgym.trainers.losses.TokenScorer`, not the
  language model: the scorer calls the decoder and the output head directly,
  so only hooks on the scorer see every use of the embedding, final norm and
  head (tied or not).
- Gradients are *summed* over ranks (divide factor 1, sum-only collectives):
  the loss is normalized by whole-batch counts, as in the plain data-parallel
  path, and Gloo has neither ``AVG`` nor ``PREMUL_SUM``.
- Generation runs with full weights (:func:`full_weights`): FSDP would
  otherwise all-gather a layer at every decoding step, and ranks generating
  different numbers of tokens would call different numbers of collectives
  (a hang). The peak memory of generation is therefore the full model.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from llmgym.episode import Episode
from llmgym.trainers.batch import EpisodeBatch
from llmgym.trainers.checkpoint import quiet_hf_progress, replace_checkpoint

__all__ = [
    "init_distributed",
    "shard_model",
    "is_sharded",
    "local_parameter_count",
    "full_weights",
    "pad_micro_batches",
    "global_grad_norm",
    "full_state_dict",
    "save_full_weights",
    "save_sharded_checkpoint",
    "load_sharded_checkpoint",
    "gather_episodes",
    "gather_objects",
    "sum_ranks",
]

SHARDED_FOLDER = "sharded"
"""Subfolder of a checkpoint that holds the ``torch.distributed.checkpoint`` shards."""


def init_distributed(need_group: bool = False) -> tuple[int, int]:
    """``(rank, world_size)``; joins the process group when launched by ``torchrun``.

    Args:
        need_group: create a one-process group when not under ``torchrun``
            (FSDP needs a device mesh even on one process).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and not need_group:
        return 0, 1
    if not dist.is_initialized():
        # NCCL for CUDA tensors (gradients), gloo for the CPU ones the trainer also reduces (counts, loss sums)
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if world == 1 and "MASTER_ADDR" not in os.environ:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        else:
            dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a transformers causal LM (inside a peft wrapper too)."""
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise TypeError(f"fsdp=True needs a transformers decoder with .layers; {type(base).__name__} has none")
    return list(layers)


def shard_model(scorer: nn.Module, model: nn.Module, device: torch.device) -> nn.Module:
    """Shard ``model``'s parameters over all ranks: one FSDP unit per decoder layer, ``scorer`` as the root.

    Parameters are replaced in place by ``DTensor`` shards on ``device`` (the
    model may still be on the CPU: each unit moves there as it is sharded), so
    build the optimizer afterwards. A warm-up forward settles which module is
    the root before anything else (generation) runs a layer.

    Returns:
        ``scorer``, now an ``FSDPModule``.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in _decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(scorer, mesh=mesh)
    for module in scorer.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum, like the plain data-parallel path
            module.set_force_sum_reduction_for_comms(True)
    with torch.no_grad():
        ids = torch.zeros(1, 2, dtype=torch.long, device=device)
        scorer(ids, torch.ones_like(ids), torch.zeros_like(ids))
    scorer.reshard()  # the root keeps its weights gathered after forward; the optimizer must see the shards
    return scorer


def is_sharded(module: nn.Module) -> bool:
    """Whether ``module`` has FSDP-sharded (``DTensor``) parameters."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def local_parameter_count(module: nn.Module) -> int:
    """Parameters (elements) this rank stores: its shards under FSDP, everything otherwise."""
    from torch.distributed.tensor import DTensor

    return sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in module.parameters())


@contextlib.contextmanager
def full_weights(scorer: nn.Module) -> Iterator[None]:
    """Gather every parameter of a sharded ``scorer`` for the block (in-process generation).

    Inside, each FSDP unit holds its full parameters and does not reshard after
    forward, so ``model.generate`` runs without collectives and ranks may
    generate different numbers of tokens. Every rank must enter the block.
    """
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in scorer.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.unshard()
    scorer.set_reshard_after_forward(False)
    try:
        yield
    finally:
        scorer.set_reshard_after_forward(True)
        # the root's default: its weights are needed again in backward
        scorer.set_reshard_after_forward(False, recurse=False)
        for unit in units:
            unit.reshard()


def pad_micro_batches(batches: list[EpisodeBatch], device: torch.device) -> list[EpisodeBatch]:
    """Append empty micro-batches so every rank has as many as the rank with the most.

    FSDP all-gathers in every forward and reduce-scatters in every backward, so
    all ranks must run the same number of them; filtering zero-signal groups
    leaves ranks with different numbers of episodes. A padding micro-batch has
    a zero loss mask: it contributes nothing to the loss, the gradients or the
    statistics, only the collectives.
    """
    count = torch.tensor([len(batches)], dtype=torch.long, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    missing = int(count[0]) - len(batches)
    if missing <= 0:
        return batches
    if batches:
        template = batches[-1]
        empty = EpisodeBatch(
            template.input_ids,
            template.attention_mask,
            torch.zeros_like(template.mask),
            torch.zeros_like(template.advantages),
            template.generator_logp,
            template.has_generator_logp,
        )
    else:
        ids = torch.zeros(1, 2, dtype=torch.long, device=device)
        empty = EpisodeBatch(
            ids,
            torch.ones_like(ids),
            torch.zeros_like(ids),
            torch.zeros(1, 2, device=device),
            torch.zeros(1, 2, device=device),
            False,
        )
    return batches + [empty] * missing


def global_grad_norm(params: list[torch.Tensor], max_norm: float | None) -> float:
    """The global gradient norm (over every rank's shards under FSDP); clips to ``max_norm`` unless ``None``."""
    if max_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    full = getattr(norm, "full_tensor", None)
    return float(full() if callable(full) else norm)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s whole state dict on the CPU of rank 0 (other ranks get ``{}``); every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_full_weights(model: nn.Module, tokenizer: Any, folder: str | os.PathLike[str]) -> Path:
    """:func:`~llmgym.trainers.checkpoint.save_weights` for a sharded model: gather, rank 0 writes.

    Writes a transformers checkpoint (or a peft adapter folder) that loads
    without FSDP. Every rank must call it.
    """
    folder = Path(folder)
    state = full_state_dict(model)
    first_name: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if first_name.setdefault(id(param), name) != name:
            # a tied weight (the output head): gathered as a copy, saved once like transformers does
            state.pop(name, None)
    if dist.get_rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        with quiet_hf_progress():
            model.save_pretrained(str(folder), state_dict=state)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(folder))
    dist.barrier()
    return folder


def save_sharded_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write the checkpoint of ``step``: every rank its shards of weights and optimizer, rank 0 the rest.

    The layout matches :func:`~llmgym.trainers.checkpoint.save_checkpoint`
    (``trainer_state.json``, ``rng.pt``), with ``sharded/`` in place of
    ``model.safetensors`` and ``optimizer.pt``. The folder is written under a
    temporary name and renamed into place by rank 0. Every rank must call it.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(root)
    target, tmp = root / f"step_{step:06d}", root / f".step_{step:06d}.partial"
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(tmp / SHARDED_FOLDER))
    if dist.get_rank() == 0:
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({**state, "step": step}, indent=1))
        replace_checkpoint(tmp, target, keep)
    dist.barrier()
    return target


def load_sharded_checkpoint(
    folder: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restore a :func:`save_sharded_checkpoint` folder into a sharded model and its optimizer.

    The world size may differ from the run that saved it (the checkpoint
    reader reshards). Returns the saved progress state.

    Raises:
        FileNotFoundError: the folder was not written with ``fsdp=True``.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    folder = Path(folder)
    if not (folder / SHARDED_FOLDER).is_dir():
        raise FileNotFoundError(f"{folder} holds no {SHARDED_FOLDER}/ shards: was the run trained with fsdp=True?")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    loaded = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(loaded, checkpoint_id=str(folder / SHARDED_FOLDER))
    set_state_dict(model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optimizer"])
    rng = torch.load(folder / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return json.loads((folder / "trainer_state.json").read_text())


def gather_episodes(episodes: list[Episode], world: int) -> list[Episode]:
    """Every rank's episodes, in rank order."""
    if world == 1:
        return list(episodes)
    parts: list[list[Episode]] = [[] for _ in range(world)]
    dist.all_gather_object(parts, episodes)
    return [e for part in parts for e in part]


def gather_objects(value: Any, world: int) -> list[Any]:
    """``value`` from every rank, in rank order."""
    if world == 1:
        return [value]
    values: list[Any] = [None] * world
    dist.all_gather_object(values, value)
    return values


def sum_ranks(values: dict[str, float], world: int) -> dict[str, float]:
    """Each of ``values`` summed over the ranks, in one ``all_reduce`` (every rank must call it with the same keys)."""
    if world == 1:
        return {key: float(value) for key, value in values.items()}
    tensor = torch.tensor([float(value) for value in values.values()], dtype=torch.float64)
    dist.all_reduce(tensor)
    return dict(zip(values, tensor.tolist()))
