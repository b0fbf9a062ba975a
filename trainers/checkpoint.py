"""Checkpoints of a training run: weights, optimizer, RNG, progress.

Holds :func:`save_checkpoint`, :func:`load_checkpoint`,
:func:`latest_checkpoint`, :func:`save_weights` and :func:`check_resume_config`
(may a run resume with these settings?), and :func:`replace_checkpoint` (a
written folder renamed into place, safe to kill at any moment), which the
sharded saver of ``trainers/distributed.py`` shares. A checkpoint is a folder
``checkpoints/step_000012/`` with

- ``model.safetensors`` (every weight) or ``adapter.safetensors`` (the LoRA
  weights only, peft's state dict),
- ``optimizer.pt`` (the optimizer's state),
- ``rng.pt`` (torch's CPU and CUDA RNG states),
- ``trainer_state.json`` (step, episodes seen, the env-seed sampler's state).

It is written to a temporary folder, ``trainer_state.json`` last, and renamed
into place; a checkpoint is deleted by renaming it away and removing
``trainer_state.json`` first. So a folder holding ``trainer_state.json`` is
whole, and a run killed at any moment of a save leaves at most ``keep``
checkpoints and one to resume from; :func:`tidy_checkpoints`, called when a
trainer opens its run folder, removes what such a kill left behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "tidy_checkpoints",
    "save_weights",
    "is_peft",
    "check_resume_config",
    "replace_checkpoint",
    "quiet_hf_progress",
]

_STATE = "trainer_state.json"
logger = logging.getLogger(__name__)


def is_peft(model: nn.Module) -> bool:
    """Whether ``model`` is a peft model (LoRA adapter around a base model)."""
    return hasattr(model, "peft_config") and callable(getattr(model, "get_base_model", None))


def _save_model_weights(model: nn.Module, folder: Path) -> None:
    from safetensors.torch import save_file, save_model

    if is_peft(model):
        from peft import get_peft_model_state_dict

        state = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model).items()}
        save_file(state, str(folder / "adapter.safetensors"))
    else:
        save_model(model, str(folder / "model.safetensors"))


def _load_model_weights(model: nn.Module, folder: Path) -> None:
    """Load the checkpoint's weights into ``model``.

    Raises:
        FileNotFoundError: the folder lacks the weights file this model needs.
        ValueError: the weights do not fit the model (another model, LoRA rank or target modules).
    """
    from safetensors.torch import load_file, load_model

    device = str(next(model.parameters()).device)
    if is_peft(model):
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        path = folder / "adapter.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{folder} holds no adapter.safetensors: was the run trained with lora=True?")
        saved = load_file(str(path), device=device)
        expected = get_peft_model_state_dict(model)
        # peft loads with strict=False: adapters of other target modules would be skipped without a word
        if saved.keys() != expected.keys() or any(saved[k].shape != expected[k].shape for k in saved):
            raise ValueError(_mismatch(path, saved, expected))
        set_peft_model_state_dict(model, saved)
    else:
        path = folder / "model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{folder} holds no model.safetensors: was the run trained with lora=False?")
        try:
            load_model(model, str(path), device=device)
        except RuntimeError:  # torch's message lists every tensor over many lines
            raise ValueError(_mismatch(path, load_file(str(path)), model.state_dict())) from None


def _mismatch(path: Path, saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> str:
    """One line on how the weights in ``path`` differ from the model's (``expected``)."""
    shapes = [k for k in saved if k in expected and saved[k].shape != expected[k].shape]
    problems = []
    if shapes:
        name = shapes[0]
        problems.append(
            f"{len(shapes)} of other shapes (e.g. {name}: {list(saved[name].shape)} saved, "
            f"{list(expected[name].shape)} in the model)"
        )
    stored = {expected[k].data_ptr() for k in saved.keys() & expected.keys()}
    # tied weights are saved once
    missing = [k for k in expected.keys() - saved.keys() if expected[k].data_ptr() not in stored]
    unexpected = saved.keys() - expected.keys()
    if unexpected:
        problems.append(f"{len(unexpected)} the model lacks (e.g. {min(unexpected)})")
    if missing:
        problems.append(f"{len(missing)} the checkpoint lacks (e.g. {min(missing)})")
    return (
        f"the weights in {path} do not fit this model ({'; '.join(problems) or 'see torch.load_state_dict'}): "
        "resume with the model and LoRA settings (lora_r, lora_target_modules) the run was trained with"
    )


def save_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write the checkpoint of ``step`` under ``root`` and keep only the newest ``keep``.

    Args:
        root: the run's ``checkpoints`` folder.
        step: the number of finished steps.
        model: the trained model (peft models save only their adapter).
        optimizer: its optimizer.
        state: JSON-ready progress (step, episodes seen, sampler state...).
        keep: checkpoints to keep, newest first (at least 1): this one and the
            ``keep - 1`` before it; those of later steps (an earlier run in the same folder) are deleted.

    Returns:
        The checkpoint's folder.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tidy_checkpoints(root)
    target = root / f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=".step-", dir=root))
    try:
        _save_model_weights(model, tmp)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, tmp / "rng.pt")
        (tmp / _STATE).write_text(json.dumps({**state, "step": step}, indent=1))  # last: the folder is whole
        replace_checkpoint(tmp, target, keep)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def tidy_checkpoints(root: str | os.PathLike[str], keep: int | None = None) -> None:
    """Clean up what a run killed while saving left under ``root``; call it when a run opens its folder.

    - A checkpoint renamed away whole that is newer than every one in view (killed between
      displacing it and renaming its successor into place) is put back.
    - Temporary folders, renamed-away checkpoints and ``step_*`` folders without
      ``trainer_state.json`` (cut short while being deleted) are deleted.
    - With ``keep``, so are the oldest checkpoints beyond ``keep`` (a run resumed with a
      smaller ``keep_checkpoints``).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> for name in ("step_000001", "step_000002", "step_000003", ".step-k1ll3d"):
        ...     (root / name).mkdir()
        ...     _ = (root / name / "trainer_state.json").write_text("{}")
        >>> tidy_checkpoints(root, keep=2)
        >>> sorted(p.name for p in root.iterdir())
        ['step_000002', 'step_000003']
    """
    root = Path(root)
    if not root.is_dir():
        return
    renamed_away = {root / p.name[1 : -len(".old")]: p for p in root.glob(".step_*.old") if (p / _STATE).is_file()}
    steps = {_step_of(original): original for original in renamed_away if _step_of(original) is not None}
    in_view = _whole_checkpoints(root)
    if steps and (not in_view or max(steps) > _step_of(in_view[-1])):
        os.replace(renamed_away[steps[max(steps)]], steps[max(steps)])
    for leftover in root.glob(".step*"):
        _discard(leftover)
    for folder in _checkpoint_folders(root):
        if not (folder / _STATE).is_file():
            _discard(folder)
    if keep is not None:
        for folder in _whole_checkpoints(root)[: -max(keep, 1)]:
            _discard(folder)


def _step_of(folder: Path) -> int | None:
    """The step of a ``step_NNNNNN`` folder (``None`` for other names)."""
    digits = folder.name[len("step_") :]
    return int(digits) if folder.name.startswith("step_") and digits.isdigit() else None


def _checkpoint_folders(root: Path) -> list[Path]:
    """The ``step_*`` folders under ``root``, oldest step first.

    By number: ``step_1000000`` follows ``step_999999``.
    """
    return sorted((p for p in root.glob("step_*") if p.is_dir() and _step_of(p) is not None), key=_step_of)


def _whole_checkpoints(root: Path) -> list[Path]:
    """The ``step_*`` folders under ``root`` that hold ``trainer_state.json``, oldest first.

    That file is written last: a folder that holds it holds everything.
    """
    return [p for p in _checkpoint_folders(root) if (p / _STATE).is_file()]


def _rename_away(folder: Path) -> Path:
    """Rename checkpoint ``folder`` to the hidden ``.NAME.old``; returns the new path.

    The rename is atomic: it leaves the view whole.
    """
    hidden = folder.with_name(f".{folder.name}.old")
    if hidden.exists():
        _discard(hidden)
    os.replace(folder, hidden)
    return hidden


def _discard(folder: Path) -> None:
    """Delete ``folder`` for good: ``trainer_state.json`` first, so that it stops being a checkpoint at once and a
    kill midway never leaves one that looks whole (nor one :func:`tidy_checkpoints` would put back); then it leaves
    the view, then the rest goes."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        (folder / _STATE).unlink()
    if not folder.name.startswith("."):
        folder = _rename_away(folder)
    shutil.rmtree(folder, ignore_errors=True)


def replace_checkpoint(tmp: Path, target: Path, keep: int | None = None) -> None:
    """Rename the finished folder ``tmp`` to ``target``, displacing an existing ``target``; with ``keep``, keep
    ``target`` and the ``keep - 1`` newest checkpoints before it, never more than ``keep`` at any moment.

    The order makes a kill at any point safe: checkpoints of later steps than ``target`` (an
    earlier run in the same folder, which this run started over: ``--resume`` must not load
    them) are deleted; those ``target`` displaces (an older ``target``, the oldest beyond
    ``keep - 1``) are renamed away whole; ``tmp`` is renamed into place; the renamed-away
    ones are deleted. Deleting a displaced checkpoint in place instead could be cut short,
    leaving ``trainer_state.json`` without weights; and renaming ``tmp`` first would leave
    ``keep + 1`` checkpoints to a kill before the prune.
    """
    root, step = target.parent, _step_of(target)
    displaced = [target] if target.exists() else []
    if keep is not None:
        for folder in _checkpoint_folders(root):
            if _step_of(folder) > step:
                _discard(folder)
        older = [p for p in _whole_checkpoints(root) if _step_of(p) < step]
        displaced += older[: max(0, len(older) - max(keep, 1) + 1)]
    renamed_away = [_rename_away(folder) for folder in displaced]
    os.replace(tmp, target)
    for folder in renamed_away:
        _discard(folder)


def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint under ``root``, or ``None``."""
    root = Path(root)
    if not root.is_dir():
        return None
    done = _whole_checkpoints(root)
    return done[-1] if done else None


def load_checkpoint(
    folder: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restore weights, optimizer and RNG from ``folder``; returns the saved progress state.

    Raises:
        FileNotFoundError: the folder lacks the weights this model needs.
    """
    folder = Path(folder)
    _load_model_weights(model, folder)
    device = next(model.parameters()).device
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location=device, weights_only=True))
    rng = torch.load(folder / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return json.loads((folder / _STATE).read_text())


def check_resume_config(
    saved_path: str | os.PathLike[str], current: dict[str, Any], may_change: Collection[str]
) -> dict[str, tuple[Any, Any]]:
    """Compare a run's saved settings with those it resumes with; returns the changed fields (name -> (saved, now)).

    Fields that only one side has (a config file of another llmgym version) are not
    compared, and neither is anything when ``saved_path`` does not exist. The changes
    that are allowed are logged as one warning.

    Args:
        saved_path: the run's ``config.json``.
        current: the settings now (``dataclasses.asdict(config)``).
        may_change: fields that may differ (more steps, other logging...).

    Raises:
        ValueError: a field outside ``may_change`` differs (each one named with both
            values), or ``saved_path`` is not a JSON object.

    Example:
        >>> import tempfile
        >>> saved = Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = saved.write_text('{"env_id": "llmgym/Wordle-v0", "seed": 0, "steps": 2}')
        >>> check_resume_config(saved, {"env_id": "llmgym/Wordle-v0", "seed": 0, "steps": 5}, may_change={"steps"})
        {'steps': (2, 5)}
        >>> try:
        ...     check_resume_config(saved, {"env_id": "llmgym/Wordle-v0", "seed": 7, "steps": 2}, may_change={"steps"})
        ... except ValueError as err:
        ...     print(str(err).split(": ")[1].split(";")[0])
        seed 0 -> 7
    """
    saved_path = Path(saved_path)
    if not saved_path.is_file():
        return {}
    try:
        saved = json.loads(saved_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {saved_path} to compare the run's settings: {err}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{saved_path} is not a JSON object of settings")
    current = json.loads(json.dumps(current))  # tuples as lists, as in the saved file
    changed = {
        name: (saved[name], current[name])
        for name in sorted(saved.keys() & current.keys())
        if saved[name] != current[name]
    }
    refused = [f"{name} {old!r} -> {new!r}" for name, (old, new) in changed.items() if name not in may_change]
    if refused:
        raise ValueError(
            f"cannot resume the run in {saved_path.parent} with other settings: {', '.join(refused)}; "
            f"resume with the settings in {saved_path}, or start a new run in another folder"
        )
    if changed:
        logger.warning(
            "resuming %s with changed settings: %s",
            saved_path.parent,
            ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in changed.items()),
        )
    return changed


def save_weights(model: nn.Module, tokenizer: Any, folder: str | os.PathLike[str], base: str | None = None) -> Path:
    """Save a model for use elsewhere: a transformers checkpoint, or a peft adapter folder.

    ``load_model(folder)`` loads either back (an adapter onto its base, merged);
    ``peft.PeftModel.from_pretrained``, vLLM's ``--lora-modules`` and ``/v1/load_lora_adapter``
    read adapters. ``base``: the model name an adapter records as its base
    (``base_model_name_or_path``; the trainers pass their ``model`` setting, e.g. ``smollm2``).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if base is not None:
        for adapter in getattr(model, "peft_config", {}).values():
            adapter.base_model_name_or_path = base
    with quiet_hf_progress():
        model.save_pretrained(str(folder))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


@contextlib.contextmanager
def quiet_hf_progress() -> Iterator[None]:
    """No transformers "Writing model shards" bar while saving: the trainer's own progress bar (or
    ``progress=False``) says what the user sees; the setting is restored afterwards."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
