"""Trainer tests import their toy env as ``tests.trainers.toy_env``: put the repository root on ``sys.path``.

``python -m pytest`` does that by itself; a bare ``pytest`` does not. Every
trainer test runs with one torch thread (:func:`one_torch_thread`), and a
trainer's ``device="auto"`` means ``$LLMGYM_TEST_DEVICE`` (default ``cpu``, so
the suite runs the same on a machine with a GPU; ``cuda`` for the tests marked
``gpu``, as ``benchmarks/gpu_check.py`` runs them) (:func:`test_device`).
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
