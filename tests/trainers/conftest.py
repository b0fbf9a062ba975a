"""Trainer tests import their toy env as ``tests.trainers.toy_env``: put the repository root on ``sys.path``.

``python -m pytest`` does that by itself; a bare ``pytest`` does not. Every
trainer test runs with one torch thread (:func:`one_torch_thread`), and a
trainer's ``device="auto"`` means ``$LLMGYM_TEST_DEVICE`` (default ``cpu``, so
the suite runs the same on a machine with a GPU; ``cuda`` for the tests marked
``gpu``, as ``benchmarks/gpu_check.py`` runs them) (:func:`test_device`). On a CPU a
trainer's ``precision="auto"`` means ``$LLMGYM_TEST_PRECISION`` (default ``fp32``), not
what a probe of the machine finds (:func:`test_precision`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# cuBLAS picks its reduction order per call unless it is given a fixed workspace; the deterministic
# tests (deterministic_kernels) need it set before CUDA starts. Harmless on a CPU.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Two shared cores: one torch thread avoids oversubscription (several times faster here)."""
    try:
        import torch
    except ImportError:  # a test without torch skips itself
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def test_device(monkeypatch):
    """Resolve the trainers' ``device="auto"`` to ``$LLMGYM_TEST_DEVICE`` (default ``cpu``); returns that device.

    Subprocesses (``torchrun`` tests) do not see it: theirs resolves ``auto`` as the library does.
    """
    device = os.environ.get("LLMGYM_TEST_DEVICE", "cpu")
    try:
        from llmgym.trainers import grpo, model, sft
    except ImportError:  # no torch: the test skips itself
        yield device
        return
    resolve = model.resolve_device
    for trainer in (grpo, sft):
        monkeypatch.setattr(trainer, "resolve_device", lambda name: resolve(device if name == "auto" else name))
    yield device


@pytest.fixture(autouse=True)
def test_precision(monkeypatch):
    """Resolve the trainers' ``precision="auto"`` on a CPU to ``$LLMGYM_TEST_PRECISION`` (default ``fp32``).

    So the tests that compare the trainer's log-probs with the sampler's to 2e-4 pass on every CPU,
    whichever precision a probe of it would pick; the probe's own choice is tested on its own.
    """
    precision = os.environ.get("LLMGYM_TEST_PRECISION", "fp32")
    try:
        from llmgym.trainers import grpo, sft
        from llmgym.trainers import precision as module
    except ImportError:  # no torch: the test skips itself
        yield precision
        return
    choose = module.choose_precision

    def choose_for_tests(setting, device):
        return choose(precision if setting == "auto" and device.type == "cpu" else setting, device)

    for trainer in (grpo, sft):
        monkeypatch.setattr(trainer, "choose_precision", choose_for_tests)
    yield precision


@pytest.fixture
def deterministic_kernels():
    """Deterministic kernels for tests that compare two runs to 1e-6.

    On CUDA an embedding's backward adds rows with atomics in whatever order the
    threads finish, so two identical runs differ in the last bits, and Adam
    magnifies that for rows with tiny gradients. On a CPU this changes nothing.
    """
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(False)
