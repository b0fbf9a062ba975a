"""The CPU probe: real fp32 and bf16 matrix-product rates, measured once per process and thread count, and the
margin bf16 must beat fp32 by."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmgym.wrappers import hardware  # noqa: E402
from llmgym.wrappers.hardware import BF16_MARGIN, MatmulRates, matmul_rates  # noqa: E402


@pytest.fixture
def threads():
    """Restore torch's thread count after a test changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_probe_measures_both_precisions_once_per_thread_count(threads, monkeypatch):
    torch.set_num_threads(1)
    rates = matmul_rates()
    assert rates.threads == 1 and rates.size == 1024
    assert rates.fp32_gflops > 0.1 and rates.bf16_gflops > 0.1  # a real product takes well under 20 s
    assert rates.bf16_speedup == pytest.approx(rates.bf16_gflops / rates.fp32_gflops)
    timed = []
    real_counter = hardware.time.perf_counter
    monkeypatch.setattr(hardware.time, "perf_counter", lambda: timed.append(1) or real_counter())
    assert matmul_rates() is rates  # cached: nothing timed again
    assert not timed
    torch.set_num_threads(3)  # another thread count is another machine, as far as the products go (none probed 3)
    assert matmul_rates().threads == 3 and timed


def test_bf16_counts_as_faster_only_past_the_margin():
    assert MatmulRates(fp32_gflops=203.0, bf16_gflops=842.0, threads=2, size=1024).bf16_is_faster()
    assert not MatmulRates(fp32_gflops=239.0, bf16_gflops=147.0, threads=2, size=1024).bf16_is_faster()
    just_below = MatmulRates(fp32_gflops=100.0, bf16_gflops=100.0 * BF16_MARGIN - 1, threads=2, size=1024)
    assert not just_below.bf16_is_faster() and just_below.bf16_is_faster(margin=1.0)
    assert MatmulRates(100.0, 150.0, 2, 1024).as_dict() == {
        "fp32_gflops": 100.0,
        "bf16_gflops": 150.0,
        "threads": 2,
        "size": 1024,
        "bf16_speedup": 1.5,
    }
