"""Trainer tests import their toy env as ``tests.trainers.toy_env``: put the repository root on ``sys.path``.

``python -m pytest`` does that by itself; a bare ``pytest`` does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
