"""The policy model the trainers train: loading it, placing it, giving it a LoRA adapter.

Holds :func:`load_policy_model`, :func:`resolve_device` and :func:`add_lora`,
shared by the GRPO and SFT trainers (:mod:`llmgym.trainers.grpo`,
:mod:`llmgym.trainers.sft`), which otherwise know nothing of each other.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["load_policy_model", "resolve_device", "add_lora"]


def load_policy_model(name: str, device: str) -> tuple[Any, Any]:
    """``(model, tokenizer)``: ``tiny-random`` builds a tiny random Llama, anything else goes to ``load_model``.

    The tiny Llama's weights are always those of ``TINY_RANDOM_SEED``, not the run's seed: the weights
    ``llmgym serve --model tiny-random`` decodes with, where a run with ``base_url`` generates.
    """
    from llmgym.wrappers.models import TINY_RANDOM, TINY_RANDOM_SEED, load_model, tiny_random_model

    if name == TINY_RANDOM:
        return tiny_random_model(TINY_RANDOM_SEED, device=device)
    return load_model(name, device=device)


def resolve_device(name: str) -> torch.device:
    """``auto`` = this rank's CUDA device when available, else CPU.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cpu")
    return torch.device(name)


def add_lora(model: Any, config: Any) -> Any:
    """Wrap ``model`` in a peft LoRA adapter.

    The adapter is ``config.init_adapter``'s weights (trainable) when set, else a fresh one
    configured by ``config.lora_*``.

    Raises:
        ImportError: peft is missing (``pip install "llmgym[train]"``).
    """
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError as err:
        raise ImportError('lora=True needs peft: pip install "llmgym[train]"') from err
    if getattr(config, "init_adapter", None):
        return PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True)
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)
