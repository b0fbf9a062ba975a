"""The rubric's generated scorer gives what looping over its rewards gives: values, totals and errors.

:class:`~llmgym.Rubric` writes its ``score`` out as straight-line code once (scoring runs every step);
``reference_score`` below is the loop it replaces, kept here as the definition.
"""

from __future__ import annotations

import copy
import fractions
import math
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.rubric import Reward, Rubric, _show, format_error


def reference_score(rewards: list[Reward], ctx) -> tuple[float, dict[str, float]]:
    """The rubric's rule, as a loop: every reward on the last turn, "turn" rewards before it."""
    components: dict[str, float] = {}
    total = 0.0
    for reward in rewards:
        if reward.when == "end" and not ctx.done:
            continue
        value = reward.fn(ctx)
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"reward {reward.name!r} returned {_show(value)}; a reward must be a number") from None
        components[reward.name] = value
        total += reward.weight * value
    if not math.isfinite(total):
        for name, value in components.items():
            if not math.isfinite(value):
                raise ValueError(f"reward {name!r} returned {value}; rewards must be finite")
        raise ValueError(f"the rewards sum to {total} (components {components}); rewards must be finite")
    return total, components


def _outcome(score, ctx):
    try:
        total, components = score(ctx)
    except Exception as err:  # noqa: BLE001 (the kind and the message are what is compared)
        return type(err).__name__, str(err)
    return repr(total), type(total).__name__, repr(components), [type(v).__name__ for v in components.values()]


VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-10**6, 10**6),
    st.booleans(),
    st.floats(-1e6, 1e6).map(np.float64),
    st.integers(-100, 100).map(np.int64),
    st.sampled_from([fractions.Fraction(1, 3), "0.5", "abc", None, [1.0], 10**400]),
)
WEIGHTS = st.one_of(st.floats(-10, 10), st.integers(-3, 3), st.just(0.0), st.just(1e308))
NAMES = st.text(min_size=1, max_size=12)  # quotes, newlines, code: names are values, never written into the scorer


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, VALUES, WEIGHTS, st.sampled_from(["turn", "end"])), max_size=6, unique_by=lambda r: r[0]),
       st.booleans())
def test_the_generated_scorer_matches_the_loop(specs, done):
    rewards = [Reward(lambda ctx, v=value: v, weight=weight, when=when, name=name) for name, value, weight, when in specs]
    ctx = SimpleNamespace(done=done)
    assert _outcome(Rubric(rewards).score, ctx) == _outcome(lambda c: reference_score(rewards, c), ctx)


def test_rewards_are_called_in_order_and_a_failure_stops_the_rest():
    calls = []

    def record(name, value):
        def fn(ctx):
            calls.append(name)
            if isinstance(value, Exception):
                raise value
            return value
        return fn

    rubric = Rubric([Reward(record("a", 1.0), name="a"), Reward(record("b", 2.0), when="end", name="b"),
                     Reward(record("c", RuntimeError("judge down")), name="c"), Reward(record("d", 4.0), name="d")])
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


@pytest.mark.parametrize("duplicate", [lambda r: pickle.loads(pickle.dumps(r)), copy.deepcopy], ids=["pickle", "deepcopy"])
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
    assert rubric.score(ctx) == copy.deepcopy(rubric).score(ctx) == pickle.loads(pickle.dumps(rubric)).score(ctx) == (1.0, {"_half": 0.5})


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


def test_a_failing_reward_shows_its_line_of_the_scorer_in_the_traceback():
    import traceback

    rubric = Rubric([Reward(_half), Reward(lambda ctx: 1 / 0, name="broken")])
    with pytest.raises(ZeroDivisionError) as caught:
        rubric.score(SimpleNamespace(done=False))
    assert "v1 = f1(ctx)" in "".join(traceback.format_tb(caught.tb))
