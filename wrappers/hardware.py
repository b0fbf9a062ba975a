"""What this machine's CPU multiplies fastest, measured rather than read from its flags.

Holds :func:`matmul_rates`, a probe that times a few 1024 x 1024 matrix products in
fp32 and in bf16 with torch's current thread count (cached per process and thread
count), :class:`MatmulRates`, its result, and :data:`BF16_MARGIN`, how much faster
bf16 must be for a default to choose it.

Why measure: the ``avx512_bf16`` flag does not say how fast bf16 is. Machines of the
same kind, all with the flag, measured bf16 products several times faster than fp32
(with AMX) and slower (without; docs/training.md). The defaults that follow the probe
are the trainers' ``precision="auto"``
(:func:`llmgym.trainers.precision.choose_precision`) and the local engine
(:func:`llmgym.wrappers.slot_batching.default_engine`).

Example:
    >>> rates = matmul_rates()
    >>> rates.fp32_gflops > 0 and rates.bf16_gflops > 0
    True
    >>> matmul_rates() is rates  # measured once per process and thread count
    True
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MatmulRates", "matmul_rates", "BF16_MARGIN"]

#: How many times faster than fp32 bf16 products must be for a default to choose bf16: the casts around them and
#: the kernels that stay fp32 (softmax, norms) take back part of the gain, and a probe of a fraction of a second
#: on a shared machine is noisy.
BF16_MARGIN = 1.2

_SIZE = 1024  # large enough to reach a kernel's steady rate, small enough that one product takes ~10-50 ms
_REPEATS = 3  # timed products per precision, after one warm-up each; the fastest counts (others ran under load)


@dataclass(frozen=True)
class MatmulRates:
    """Matrix-product rates measured on this machine's CPU (see :func:`matmul_rates`)."""

    fp32_gflops: float
    """GFLOP/s of a ``size`` x ``size`` fp32 product."""
    bf16_gflops: float
    """GFLOP/s of the same product in bf16."""
    threads: int
    """``torch.get_num_threads()`` when measured."""
    size: int
    """The side of the square matrices."""

    @property
    def bf16_speedup(self) -> float:
        """``bf16_gflops / fp32_gflops``: above 1 bf16 is the faster."""
        return self.bf16_gflops / self.fp32_gflops

    def bf16_is_faster(self, margin: float = BF16_MARGIN) -> bool:
        """Whether bf16 products beat fp32 ones by at least ``margin`` times."""
        return self.bf16_speedup >= margin

    def as_dict(self) -> dict[str, Any]:
        """The numbers, rounded, for a run's config or a benchmark's results."""
        return {
            **{k: round(v, 1) if isinstance(v, float) else v for k, v in asdict(self).items()},
            "bf16_speedup": round(self.bf16_speedup, 2),
        }


def matmul_rates() -> MatmulRates:
    """The CPU's fp32 and bf16 matrix-product rates at torch's current thread count.

    Measured on the first call for each thread count (about 8 products of 1024 x 1024,
    0.1-0.5 s), then cached for the process: the answer does not change while it runs,
    and a trainer that calls ``torch.set_num_threads`` gets a measurement of its own.

    Raises:
        ModuleNotFoundError: torch is not installed.
    """
    import torch

    return _measure(torch.get_num_threads())


@functools.cache
def _measure(threads: int) -> MatmulRates:
    """Time ``_REPEATS`` products per precision, alternating them so that a burst of load hits both alike."""
    import torch

    generator = torch.Generator().manual_seed(0)
    operands = {
        dtype: [torch.randn(_SIZE, _SIZE, generator=generator).to(dtype) for _ in range(2)]
        for dtype in (torch.float32, torch.bfloat16)
    }
    best = dict.fromkeys(operands, float("inf"))
    with torch.inference_mode():
        for a, b in operands.values():  # warm-up: oneDNN builds its bf16 kernel on the first call
            torch.matmul(a, b)
        for _ in range(_REPEATS):
            for dtype, (a, b) in operands.items():
                started = time.perf_counter()
                torch.matmul(a, b)
                best[dtype] = min(best[dtype], time.perf_counter() - started)
    flops = 2 * _SIZE**3
    return MatmulRates(
        fp32_gflops=flops / best[torch.float32] / 1e9,
        bf16_gflops=flops / best[torch.bfloat16] / 1e9,
        threads=threads,
        size=_SIZE,
    )
