"""Rubric scoring: which rewards count when, their values and totals, errors, and copies."""

from __future__ import annotations

import copy
import fractions
import pickle
from types import SimpleNamespace

import numpy as np
import pytest

from llmgym.rubric import Reward, Rubric, format_error


def test_turn_rewards_every_turn_end_rewards_on_the_last_and_weights_multiply():
    rubric = Rubric(
        [
            Reward(lambda ctx: 1.0, weight=0.5, name="turn"),
            Reward(lambda ctx: 2.0, weight=-1.0, when="end", name="end"),
            Reward(lambda ctx: 3.0, weight=0.0, name="metric"),
        ]
    )
    assert rubric.score(SimpleNamespace(done=False)) == (0.5, {"turn": 1.0, "metric": 3.0})
    assert rubric.score(SimpleNamespace(done=True)) == (-1.5, {"turn": 1.0, "end": 2.0, "metric": 3.0})
    assert rubric.weights() == {"turn": 0.5, "end": -1.0, "metric": 0.0}


@pytest.mark.parametrize(
    "value, expected",
    [
        (True, 1.0),
        (3, 3.0),
        (np.float64(0.25), 0.25),
        (np.int64(2), 2.0),
        (np.float32(0.5), 0.5),
        (fractions.Fraction(1, 4), 0.25),
    ],
)
def test_components_are_plain_floats_whatever_number_a_reward_returns(value, expected):
    total, components = Rubric([Reward(lambda ctx: value, weight=2.0, name="r")]).score(SimpleNamespace(done=False))
    assert components == {"r": expected} and type(components["r"]) is float
    assert total == 2 * expected and type(total) is float


def test_a_non_finite_total_of_finite_components_is_refused():
    rubric = Rubric([Reward(lambda ctx: 1.0, weight=1e308, name="a"), Reward(lambda ctx: 1.0, weight=1e308, name="b")])
    with pytest.raises(ValueError, match="the rewards sum to inf"):
        rubric.score(SimpleNamespace(done=False))


def test_rewards_are_called_in_order_and_a_failure_stops_the_rest():
    calls = []

    def record(name, value):
        def fn(ctx):
            calls.append(name)
            if isinstance(value, Exception):
                raise value
            return value

        return fn

    rubric = Rubric(
        [
            Reward(record("a", 1.0), name="a"),
            Reward(record("b", 2.0), when="end", name="b"),
            Reward(record("c", RuntimeError("judge down")), name="c"),
            Reward(record("d", 4.0), name="d"),
        ]
    )
    with pytest.raises(RuntimeError, match="judge down"):
        rubric.score(SimpleNamespace(done=True))
    assert calls == ["a", "b", "c"]
    calls.clear()
    with pytest.raises(RuntimeError):
        rubric.score(SimpleNamespace(done=False))
    assert calls == ["a", "c"]


def test_an_empty_rubric_scores_zero():
    assert Rubric([]).score(SimpleNamespace(done=True)) == (0.0, {})


def test_a_rubric_of_thousands_of_rewards_scores():
    rubric = Rubric([Reward(lambda ctx: 1, weight=0.5, name=f"r{i}") for i in range(3000)])
    total, components = rubric.score(SimpleNamespace(done=False))
    assert total == 1500.0 and len(components) == 3000 and components["r2999"] == 1.0


def _half(ctx) -> float:
    return 0.5


@pytest.mark.parametrize("duplicate", [pickle.loads, copy.deepcopy], ids=["pickle", "deepcopy"])
def test_a_copied_rubric_scores_as_the_original(duplicate):
    rubric = Rubric([Reward(_half, weight=2.0), Reward(format_error, weight=-1.0, when="end")])
    twin = duplicate(pickle.dumps(rubric)) if duplicate is pickle.loads else duplicate(rubric)
    ctx = SimpleNamespace(done=True, format_errors=["bad"])
    assert twin.score(ctx) == rubric.score(ctx) == (0.0, {"_half": 0.5, "format_error": 1.0})
    assert [r.name for r in twin.rewards] == ["_half", "format_error"]


class _Counter:
    """A stateful reward: what a copy must score with is the copy's own state."""

    def __init__(self):
        self.count = 0

    def reward(self, ctx) -> float:
        return float(self.count)


@pytest.mark.parametrize(
    "duplicate", [lambda r: pickle.loads(pickle.dumps(r)), copy.deepcopy], ids=["pickle", "deepcopy"]
)
def test_a_copied_rubric_scores_with_its_own_reward_functions(duplicate):
    counter = _Counter()
    rubric = Rubric([Reward(counter.reward, name="count")])
    twin = duplicate(rubric)
    twin.rewards[0].fn.__self__.count = 7  # the copy's own counter
    ctx = SimpleNamespace(done=False)
    assert rubric.score(ctx) == (0.0, {"count": 0.0}) and twin.score(ctx) == (7.0, {"count": 7.0})


def test_a_reward_changed_after_the_rubric_is_built_is_not_seen_by_the_rubric_or_its_copies():
    rubric = Rubric([Reward(_half, weight=2.0)])
    rubric.rewards[0].weight = 10.0
    ctx = SimpleNamespace(done=False)
    assert (
        rubric.score(ctx)
        == copy.deepcopy(rubric).score(ctx)
        == pickle.loads(pickle.dumps(rubric)).score(ctx)
        == (1.0, {"_half": 0.5})
    )


def test_a_subclass_that_scores_its_own_way_still_copies():
    class Fixed(Rubric):
        def __init__(self):  # no Rubric.__init__: no rewards of its own
            self.value = 1.0

        def score(self, ctx):
            return self.value, {"fixed": self.value}

    twin = copy.deepcopy(Fixed())
    assert twin.score(SimpleNamespace(done=True)) == (1.0, {"fixed": 1.0})


def test_a_reward_name_must_be_a_string():
    with pytest.raises(TypeError, match="a reward's name must be a string"):
        Reward(_half, name=["x"])


def test_a_failing_reward_shows_its_own_line_in_the_traceback():
    import traceback

    rubric = Rubric([Reward(_half), Reward(lambda ctx: 1 / 0, name="broken")])
    with pytest.raises(ZeroDivisionError) as caught:
        rubric.score(SimpleNamespace(done=False))
    assert 'Reward(lambda ctx: 1 / 0, name="broken")' in "".join(traceback.format_tb(caught.tb))


def test_think_re_is_a_deprecated_name_of_the_one_reasoning_pattern():
    import llmgym.rubric
    from llmgym.parsing import THINK_BLOCK

    with pytest.warns(DeprecationWarning, match="llmgym.parsing.THINK_BLOCK"):
        assert llmgym.rubric.THINK_RE is THINK_BLOCK
    assert "THINK_RE" not in llmgym.rubric.__all__
    with pytest.raises(AttributeError, match="no attribute 'THINK_SOMETHING'"):
        llmgym.rubric.THINK_SOMETHING  # noqa: B018
