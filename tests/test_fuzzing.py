"""llmgym.fuzzing: sampled tool arguments satisfy the tool's JSON schema."""

from __future__ import annotations

import enum
from typing import Annotated

import jsonschema
import numpy as np
import pydantic
from typing_extensions import TypedDict

from llmgym import tool
from llmgym.fuzzing import sample_arguments


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int


@tool
def paint(
    color: Color,
    at: Point,
    count: Annotated[int, pydantic.Field(gt=0, lt=3)],
    depth: Annotated[int, pydantic.Field(le=-5)],
    ratio: Annotated[float, pydantic.Field(gt=0.5, le=0.6)],
    code: Annotated[str, pydantic.Field(min_length=7, max_length=8)],
    tags: Annotated[list[str], pydantic.Field(min_length=2)],
) -> str:
    """Paint a point.

    Args:
        color: the colour (an Enum: a $ref into $defs).
        at: where (a nested object: a $ref too).
        count: exclusive bounds.
        depth: only a negative maximum.
        ratio: exclusive minimum, inclusive maximum.
        code: string length bounds.
        tags: at least two.
    """
    return "ok"


def test_sample_arguments_follow_refs_exclusive_bounds_and_lengths():
    """Regression: ``$ref`` was read as a string, exclusive bounds and length limits were ignored, and a lone negative
    maximum still drew from 0..9: every sample of this tool was invalid."""
    schema = paint.parameters
    for seed in range(20):
        arguments = sample_arguments(schema, np.random.default_rng(seed))
        jsonschema.validate(arguments, schema)
        assert paint.call(arguments).ok, (arguments, paint.call(arguments).content)
