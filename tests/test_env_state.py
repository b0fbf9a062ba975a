"""Tests for llmgym.env_state: an env's plain-data state, and where two states differ."""

from __future__ import annotations

import numpy as np

from llmgym.env_state import first_difference, plain_state


def test_first_difference_treats_nan_numpy_scalars_as_equal():
    """Regression: ``np.float32(nan)`` read as "nan vs nan", a false nondeterminism (float NaN and NaN arrays did
    not)."""
    for nan in (float("nan"), np.float32("nan"), np.float64("nan"), complex("nan"), np.datetime64("NaT")):
        assert first_difference({"score": [nan]}, {"score": [nan]}) == "", nan
    assert "vs" in first_difference(np.float32(1.0), np.float32("nan"))
    assert "vs" in first_difference(np.float32("nan"), np.float32(1.0))
    assert first_difference(np.float32(2.0), np.float32(2.0)) == ""


def test_first_difference_treats_nan_arrays_as_equal():
    assert first_difference({"a": np.array([1.0, np.nan])}, {"a": np.array([1.0, np.nan])}) == ""
    assert first_difference(np.array(["x"]), np.array(["x"])) == ""
    assert "arrays differ" in first_difference(np.array([1.0]), np.array([2.0]))


def test_plain_state_copies_plain_data_and_leaves_out_objects():
    class Env:
        def __init__(self):
            self.board = np.zeros(3)
            self.history = [("crane", 1.0)]
            self.scores = {"a": {1, 2}}
            self.rng = np.random.default_rng(0)
            self.mixed = [1, object()]

    env = Env()
    state = plain_state(env)
    assert set(state) == {"board", "history", "scores"}
    env.board[0] = 5.0
    env.history.append(("slate", 0.0))
    assert state["board"][0] == 0.0 and state["history"] == [("crane", 1.0)]
    assert state["scores"] == {"a": frozenset({1, 2})}
