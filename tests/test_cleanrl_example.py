"""Runs examples/cleanrl_style_wordle.py with a tiny budget: the plain Gymnasium loop works end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_cleanrl_style_example_plays_and_learns(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("cleanrl_style_wordle", None)
    import cleanrl_style_wordle as example

    summary = example.main(example.Args(episodes=24, num_envs=4, seed=1))
    assert summary["episodes"] >= 24
    # the consistent-guess follow-up solves almost every game: returns well above a failed game's
    assert summary["first_quarter_return"] > 1.0 and summary["last_quarter_return"] > 1.0
    probs = [summary[f"p_{w}"] for w in example.Args().openers]
    assert np.isclose(sum(probs), 1.0) and max(probs) > 1 / len(probs)  # REINFORCE moved the opener policy
    assert "p_crane" in capsys.readouterr().out
