"""Regression tests from the session-4 review of core (tools, rollout, ...)."""

from __future__ import annotations

import enum
from typing import Literal, Optional, Union

import gymnasium as gym

from llmgym.policy import Generation, Policy
from llmgym.rollout import rollout
from llmgym.tools import tool


@tool
def _union(pick: Union[int, str], level: Optional[Literal[1, 2]] = None) -> str:
    """Echo a union.

    Args:
        pick: a number or a name.
        level: 1 or 2.
    """
    return repr((pick, level))


def test_union_errors_name_the_member_type_not_the_boolean_check():
    # the agent read "pick.function-before[_refuse_bool(), int]: ..." where it used to read "pick.int: ..."
    content = _union.call({"pick": True}).content
    assert "pick.int: Input should be a number, not a boolean" in content, content
    assert "function-before" not in content and "_refuse_bool" not in content
    assert "function-before" not in _union.call({"pick": 1.5}).content
    assert _union.call({"pick": 3, "level": 2}).content == "(3, 2)"


class _Level(enum.Enum):
    LOW = 1
    HIGH = 2


class _Count(enum.IntEnum):
    ONE = 1
    TWO = 2


class _Color(enum.Enum):
    RED = "red"


@tool
def _enums(level: _Level, count: _Count = _Count.ONE, counts: Optional[list[_Count]] = None, color: _Color = _Color.RED) -> str:
    """Echo enums.

    Args:
        level: 1 or 2.
        count: 1 or 2.
        counts: 1s and 2s.
        color: a colour.
    """
    return repr((level, count, counts, color))


def test_enums_of_numbers_refuse_json_booleans_as_numeric_literals_do():
    # the schema says {"enum": [1, 2], "type": "integer"}: true used to be Level.LOW
    for arguments in ({"level": True}, {"level": 1, "count": True}, {"level": 1, "counts": [1, True]}):
        result = _enums.call(arguments)
        assert not result.ok and "not a boolean" in result.content, (arguments, result.content)
    assert _enums.call({"level": 2, "count": "2", "counts": [1], "color": "red"}).content == (
        "(<_Level.HIGH: 2>, <_Count.TWO: 2>, [<_Count.ONE: 1>], <_Color.RED: 'red'>)"
    )
    assert _enums.parameters["$defs"]["_Level"] == {"enum": [1, 2], "type": "integer"}


class _Say(Policy):
    async def agenerate(self, request):
        return Generation(message={"role": "assistant", "content": "hi"})


class _NoDeclaredSpace(gym.Env):
    """A text env that never declares an action space: rollout played it before the Text check came in."""

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.turns = 0
        return "start", {}

    def step(self, action):
        self.turns += 1
        return f"got {action}", 1.0, self.turns >= 2, False, {}


def test_an_env_declaring_no_action_space_is_still_played():
    episodes = rollout(_NoDeclaredSpace, _Say(), seeds=2)
    assert [e.turn_rewards for e in episodes] == [[1.0, 1.0], [1.0, 1.0]]
    assert all("error" not in e.metadata for e in episodes)


def test_checker_state_comparison_treats_nan_numpy_scalars_as_equal():
    # float NaN and NaN arrays were the same state, but np.float32(nan) read as "nan vs nan": a false nondeterminism
    import numpy as np

    from llmgym.checker import _first_difference

    for nan in (float("nan"), np.float32("nan"), np.float64("nan"), complex("nan"), np.datetime64("NaT")):
        assert _first_difference({"score": [nan]}, {"score": [nan]}) == "", nan
    assert "vs" in _first_difference(np.float32(1.0), np.float32("nan"))
    assert "vs" in _first_difference(np.float32("nan"), np.float32(1.0))
    assert _first_difference(np.float32(2.0), np.float32(2.0)) == ""
