"""Trainers (imports as ``llmgym.trainers``): GRPO with turn-level credit, SFT warm-up.

``from llmgym.trainers import GRPOTrainer, GRPOConfig`` works as in TRL; the classes are
imported on first use, so ``import llmgym.trainers`` alone does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["GRPOConfig", "GRPOTrainer", "SFTConfig", "SFTTrainer", "load_config"]

_HOMES = {
    "GRPOConfig": "llmgym.trainers.config",
    "SFTConfig": "llmgym.trainers.config",
    "load_config": "llmgym.trainers.config",
    "GRPOTrainer": "llmgym.trainers.grpo",
    "SFTTrainer": "llmgym.trainers.sft",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'llmgym.trainers' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
