"""Int8 copies of a model's Linear weights, for fast CPU rollouts of the weights being trained.

Holds :class:`Int8Linears`. Decoding a small batch on a CPU is bound by
memory bandwidth: every step reads every weight. A weight-only int8 copy (one
bf16 scale per output channel) is a quarter of the fp32 bytes, multiplied with
bf16 activations by ``torch.ops.aten._weight_int8pack_mm`` (the CPU kernel of
gpt-fast's and torchao's weight-only int8; ~4x faster than fp32 for a batch of
4 on AVX512). Activations stay unquantized (bf16), which keeps the int8
model's log-probs close to fp32's. The copy is refreshed in place from the fp32
weights after each optimizer step (no new allocation), and swapped in only
while :meth:`Int8Linears.active` is open, so training never sees it.

The sampled distribution is the int8 model's: a policy using it must report
those log-probs, and a trainer corrects the mismatch with its importance
weight (``is_cap`` in :class:`~llmgym.trainers.config.GRPOConfig`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["Int8Linears"]

_CHUNK = 1 << 18  # elements quantized at a time: the fp32 temporary stays in the CPU's L2 cache


class _Int8Weight:
    """The int8 copy of one Linear layer: ``weight ~= q * scale[:, None]``."""

    def __init__(self, linear: nn.Linear, q: torch.Tensor, scale: torch.Tensor, scale32: torch.Tensor) -> None:
        self.linear = linear
        self.q, self.scale, self._scale32 = q, scale, scale32

    def refresh(self, buffer: torch.Tensor) -> None:
        """Re-quantize from the layer's current weight, chunk by chunk, into the existing tensors."""
        weight = self.linear.weight.detach()
        rows = max(1, _CHUNK // weight.shape[1])
        for start in range(0, weight.shape[0], rows):
            block = weight[start : start + rows].float()
            scratch = buffer[: block.numel()].view_as(block)
            scale = self._scale32[start : start + rows]
            torch.amax(torch.abs(block, out=scratch), dim=1, out=scale)  # abs + amax: 2x faster than an inf-norm
            scale.clamp_(min=1e-30).div_(127.0)
            rounded = scale.to(torch.bfloat16)  # the kernel's scale; rounded up so that |weight / scale| <= 127
            rounded = torch.where(
                rounded.float() < scale, torch.nextafter(rounded, torch.full_like(rounded, float("inf"))), rounded
            )
            self.scale[start : start + rows] = rounded
            torch.mul(block, rounded.float().reciprocal_()[:, None], out=scratch).round_()
            self.q[start : start + rows].copy_(scratch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``linear(x)`` with the int8 weight (``x`` rounded to bf16, the result back to ``x``'s dtype)."""
        out = _int8_matmul(x, self.q, self.scale)
        return out if self.linear.bias is None else out + self.linear.bias


def _int8_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x @ (q * scale[:, None]).T`` over ``x``'s last dimension, in bf16 on the kernel, back in ``x``'s dtype."""
    out = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), q, scale).to(x.dtype)
    return out.view(*x.shape[:-1], q.shape[0])


class Int8Linears:
    """Int8 rollout copies of every ``nn.Linear`` in a model (CPU only).

    Args:
        model: the model whose Linear layers (the tied LM head included) get copies.

    Raises:
        ValueError: the model is not on the CPU (the kernel is a CPU one; GPUs
            decode fast enough in bf16).

    Example:
        >>> from llmgym.wrappers.weights import tiny_random_model
        >>> model, _ = tiny_random_model()
        >>> int8 = Int8Linears(model)
        >>> with int8.active():
        ...     logits = model(torch.tensor([[1, 2, 3]])).logits
        >>> tuple(logits.shape)[:2], int8.nbytes > 0
        ((1, 3), True)
    """

    def __init__(self, model: nn.Module) -> None:
        devices = {p.device.type for p in model.parameters()}
        if devices != {"cpu"}:
            raise ValueError(
                f"int8 rollouts run on the CPU; the model is on {sorted(devices)} (use rollout_precision='fp32')"
            )
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError("the model has no nn.Linear layers to quantize")
        # one allocation per dtype: freed as a whole (back to the OS) when the copies are dropped, no heap holes
        shapes = [tuple(m.weight.shape) for m in linears]
        q_flat = torch.empty(sum(n * k for n, k in shapes), dtype=torch.int8)
        scale_flat = torch.empty(sum(n for n, _ in shapes), dtype=torch.bfloat16)
        scale32_flat = torch.empty(len(scale_flat), dtype=torch.float32)
        self.layers, offset, row = [], 0, 0
        for linear, (n, k) in zip(linears, shapes):
            self.layers.append(
                _Int8Weight(
                    linear,
                    q_flat[offset : offset + n * k].view(n, k),
                    scale_flat[row : row + n],
                    scale32_flat[row : row + n],
                )
            )
            offset, row = offset + n * k, row + n
        self._buffer = torch.empty(max(_CHUNK, max(k for _, k in shapes)), dtype=torch.float32)
        self._by_linear = {id(layer.linear): layer for layer in self.layers}
        self.refresh()

    @property
    def nbytes(self) -> int:
        """Bytes held by the int8 weights and their scales."""
        return sum(layer.q.nbytes + layer.scale.nbytes for layer in self.layers)

    def fused(self, linears: list[nn.Module]) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """One kernel call for Linear layers that read the same input: their outputs, concatenated.

        The copies are allocated in module order, so a layer's q/k/v (or
        gate/up) weights lie side by side and one view spans them. ``None``
        when they do not (or a layer has a bias, or no copy).
        """
        layers = [self._by_linear.get(id(linear)) for linear in linears]
        if not layers or any(layer is None or layer.linear.bias is not None for layer in layers):
            return None
        for before, after in zip(layers, layers[1:]):
            if (
                after.q.storage_offset() != before.q.storage_offset() + before.q.numel()
                or after.scale.storage_offset() != before.scale.storage_offset() + before.scale.numel()
                or after.q.shape[1] != before.q.shape[1]
            ):
                return None
        first = layers[0]
        rows, width = sum(layer.q.shape[0] for layer in layers), first.q.shape[1]
        q = torch.as_strided(first.q, (rows, width), (width, 1))
        scale = torch.as_strided(first.scale, (rows,), (1,))
        return lambda x: _int8_matmul(x, q, scale)

    @torch.no_grad()
    def refresh(self) -> None:
        """Re-quantize every copy from the model's current weights (call after an optimizer step)."""
        for layer in self.layers:
            layer.refresh(self._buffer)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Run the model's Linear layers on the int8 copies inside this block."""
        patched: list[Any] = []
        try:
            for layer in self.layers:
                layer.linear.forward = layer.forward  # an instance attribute wins over nn.Linear.forward
                patched.append(layer.linear)
            yield
        finally:
            for linear in patched:
                del linear.forward
