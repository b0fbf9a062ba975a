"""The arithmetic of a trainer's forward passes: fp32, or bf16 autocast where the machine multiplies bf16 faster.

Holds :func:`choose_precision` (a config's ``precision`` setting and the device ->
a :class:`Precision`), :class:`Precision` (what was chosen, why, the probe's
numbers, and :meth:`Precision.autocast`, the context the loss's forward passes
run in).

bf16 here is ``torch.autocast``: the weights, their gradients and the optimizer
state stay fp32 (the master copy), the matrix products of the forward pass (and
their backward) run in bf16, and the scorer takes its log-softmax in fp32. On a
CPU ``"auto"`` follows :func:`~llmgym.wrappers.hardware.matmul_rates`, a probe of
this machine: bf16 where its products are at least
:data:`~llmgym.wrappers.hardware.BF16_MARGIN` times as fast as fp32's, else fp32,
as the ``avx512_bf16`` flag alone can mean a gain or a loss (docs/training.md). On
CUDA ``"auto"`` is bf16, as the trainers have always done there.

Example:
    >>> import torch
    >>> choose_precision("fp32", torch.device("cpu")).dtype
    'fp32'
    >>> choose_precision("auto", torch.device("cpu")).dtype in ("bf16", "fp32")
    True
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import torch

from llmgym.trainers.config import PRECISIONS
from llmgym.wrappers.hardware import BF16_MARGIN, MatmulRates, matmul_rates

__all__ = ["Precision", "choose_precision"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Precision:
    """The precision a run's forward passes use, and why."""

    dtype: str
    """``"bf16"`` (autocast, fp32 master weights) or ``"fp32"``."""
    device_type: str
    """The torch device type the autocast is for (``"cpu"``, ``"cuda"``...)."""
    reason: str
    """Why this one, in words (logged, and written to the run's ``config.json``)."""
    rates: MatmulRates | None = None
    """The CPU probe's numbers where ``"auto"`` consulted it."""

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context the loss's forward passes run in: bf16 autocast, or nothing for fp32."""
        if self.dtype == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=torch.bfloat16)

    def as_dict(self) -> dict[str, Any]:
        """The choice and the probe's numbers, for a run's ``config.json``."""
        return {"dtype": self.dtype, "reason": self.reason, "matmul": self.rates.as_dict() if self.rates else None}


def choose_precision(setting: str, device: torch.device) -> Precision:
    """Resolve a config's ``precision`` for ``device``, probing the CPU's matrix products where ``setting`` is auto.

    Args:
        setting: ``"auto"``, ``"bf16"`` or ``"fp32"`` (:data:`~llmgym.trainers.config.PRECISIONS`).
        device: the device the model trains on.

    Raises:
        ValueError: ``setting`` is not one of them.
    """
    if setting not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {setting!r}")
    if setting != "auto":
        chosen = Precision(setting, device.type, f"precision={setting!r} in the config")
    elif device.type == "cuda":
        chosen = Precision("bf16", "cuda", "auto on CUDA: bf16 autocast")
    elif device.type != "cpu":  # bf16 autocast was never measured there: keep what the trainers always did
        chosen = Precision("fp32", device.type, f"auto on {device.type}: fp32")
    else:
        rates = matmul_rates()
        faster = rates.bf16_is_faster()
        chosen = Precision(
            "bf16" if faster else "fp32",
            "cpu",
            f"auto on this CPU: bf16 products {rates.bf16_speedup:.2f}x fp32's "
            f"({rates.bf16_gflops:.0f} vs {rates.fp32_gflops:.0f} GFLOP/s, torch threads: {rates.threads}; "
            f"bf16 needs >= {BF16_MARGIN}x)",
            rates,
        )
    logger.info("training precision %s: %s", chosen.dtype, chosen.reason)
    return chosen
