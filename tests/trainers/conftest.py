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
        from llmgym.trainers import grpo
    except ImportError:  # no torch: the test skips itself
        yield device
        return
    resolve = grpo.resolve_device
    monkeypatch.setattr(grpo, "resolve_device", lambda name: resolve(device if name == "auto" else name))
    yield device
