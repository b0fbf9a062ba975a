"""Trainer tests import their toy env as ``tests.trainers.toy_env``: put the repository root on ``sys.path``.

``python -m pytest`` does that by itself; a bare ``pytest`` does not. Every
trainer test runs with one torch thread (:func:`one_torch_thread`).
"""

from __future__ import annotations

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
