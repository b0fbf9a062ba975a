"""Tool schema derivation, argument validation and its error messages, and what ``@tool`` refuses."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

import jsonschema
import pydantic
import pytest

from llmgym.tools import ToolError, tool


@tool
def search(
    query: str, limit: int = 5, mode: Literal["bm25", "exact"] = "bm25", tags: list[str] | None = None
) -> list[str]:
    """Search the corpus.

    Longer explanation of the search.

    Args:
        query: what to look for.
        limit: how many results.
        mode: the ranking.
        tags: only documents with these tags.
    """
    return [query] * limit


def test_schema_is_derived_from_hints_and_docstring():
    schema = search.schema
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "search"
    assert function["description"].startswith("Search the corpus.")
    params = function["parameters"]
    jsonschema.Draft202012Validator.check_schema(params)
    assert params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string", "description": "what to look for."}
    assert params["properties"]["limit"]["type"] == "integer" and params["properties"]["limit"]["default"] == 5
    assert params["properties"]["mode"]["enum"] == ["bm25", "exact"]
    assert params["additionalProperties"] is False


def test_validate_converts_types_and_fills_defaults():
    assert search.validate({"query": "x", "limit": "3"}) == {"query": "x", "limit": 3, "mode": "bm25", "tags": None}


def test_constraints_in_annotations_are_enforced_and_in_the_schema():
    @tool
    def pick(count: Annotated[int, pydantic.Field(ge=1, le=3)], name: str = "a") -> str:
        """Pick some.

        Args:
            count: how many.
            name: which.
        """
        return name * count

    count = pick.parameters["properties"]["count"]
    assert count["minimum"] == 1 and count["maximum"] == 3 and count["description"] == "how many."
    assert pick.call({"count": 2}).content == "aa"
    assert "count: Input should be less than or equal to 3" in pick.call({"count": 4}).content


def test_valid_call_runs_and_serializes():
    result = search.call({"query": "x", "limit": 2})
    assert result.ok and result.content == '["x", "x"]' and result.value == ["x", "x"]


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({}, "query: Field required"),
        ({"query": 3}, "query: Input should be a valid string"),
        ({"query": "x", "limit": "many"}, "limit"),
        ({"query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": "x", "extra": 1}, "extra: Extra inputs are not permitted"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_arguments_give_agent_readable_errors(arguments, fragment):
    result = search.call(arguments)
    assert not result.ok
    assert result.content.startswith("Error: ")
    assert fragment in result.content


def test_exceptions_in_the_body_become_error_results():
    @tool
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    result = divide.call({"a": 1, "b": 0})
    assert not result.ok and "ZeroDivisionError" in result.content

    @tool
    def refuse(x: int) -> str:
        """Always refuses."""
        raise ToolError("not today")

    assert refuse.call({"x": 1}).content == "Error: not today"


def test_output_is_capped():
    @tool(max_output_chars=10)
    def shout(text: str) -> str:
        """Repeat."""
        return text * 100

    content = shout.call({"text": "ab"}).content
    assert content.startswith("ab" * 5) and "truncated at 10" in content


def test_missing_type_hint_is_a_programming_error():
    with pytest.raises(TypeError, match="needs a type hint"):

        @tool
        def untyped(x):  # noqa: ANN001
            """No hints."""
            return x


def test_property_named_title_survives():
    @tool
    def rename(title: str) -> str:
        """Rename."""
        return title

    assert "title" in rename.parameters["properties"]


def test_tools_bind_to_env_instances():
    class Counter:
        def __init__(self):
            self.n = 0

        @tool
        def bump(self, by: int) -> int:
            """Add to the counter."""
            self.n += by
            return self.n

    a, b = Counter(), Counter()
    assert a.bump.call({"by": 2}).content == "2"
    assert b.bump.call({"by": 5}).content == "5"
    assert a.n == 2 and "self" not in Counter.bump.parameters["properties"]


def test_output_that_json_cannot_write_is_shown_not_raised():
    # json.dumps(default=str) still raises on a cycle or non-string keys; that escaped step()
    @tool
    def cyclic() -> dict:
        """A dict that holds itself."""
        value: dict = {"a": 1}
        value["self"] = value
        return value

    @tool
    def tuple_keys() -> dict:
        """A dict keyed by tuples."""
        return {(1, 2): "b"}

    class Unshowable:
        def __str__(self) -> str:
            raise RuntimeError("no")

        __repr__ = __str__

    @tool
    def unshowable() -> object:
        """An object that cannot be printed."""
        return Unshowable()

    class NoStr:
        def __str__(self) -> str:  # json.dumps(default=str) raises on it
            raise RuntimeError("no")

        def __repr__(self) -> str:
            return "NoStr()"

    @tool
    def no_str() -> object:
        """An object that prints only with repr."""
        return NoStr()

    assert cyclic.call({}).content == "{'a': 1, 'self': {...}}"
    assert tuple_keys.call({}).content == "{(1, 2): 'b'}"
    assert no_str.call({}).content == "NoStr()"  # repr, as the rubric quotes a value (was the "cannot be shown" note)
    result = unshowable.call({})
    assert result.ok and result.content == "<Unshowable value that cannot be shown: RuntimeError>"


def test_titles_are_stripped_from_schemas_only_never_from_data():
    from llmgym.tools import strip_schema_titles

    schema = {
        "title": "args",
        "type": "object",
        "properties": {
            "title": {"title": "Title", "type": "string"},
            "doc": {"title": "Doc", "type": "object", "default": {"title": "Untitled"}},
            "tags": {"title": "Tags", "type": "array", "items": {"title": "Tag", "$ref": "#/$defs/title"}},
            "pick": {"anyOf": [{"title": "A", "type": "integer"}, {"type": "null"}], "enum": [{"title": 1}, None]},
        },
        "$defs": {"title": {"title": "TitleDef", "type": "string"}},
    }
    strip_schema_titles(schema)
    assert "title" not in schema and set(schema["properties"]) == {"title", "doc", "tags", "pick"}
    assert schema["properties"]["doc"] == {"type": "object", "default": {"title": "Untitled"}}
    assert schema["properties"]["tags"]["items"] == {"$ref": "#/$defs/title"}
    pick = schema["properties"]["pick"]
    assert pick["anyOf"][0] == {"type": "integer"} and pick["enum"][0] == {"title": 1}
    assert schema["$defs"] == {"title": {"type": "string"}}


@tool
def _typed(
    count: int,
    ratio: float,
    flag: bool,
    maybe: int | None = None,
    counts: list[int] = [],  # noqa: B006  the schema's "default": [] is under test
    at_least_one: Annotated[int, pydantic.Field(ge=1)] = 1,
    level: Literal[1, 2] = 1,
    flags: dict[str, bool] = {},  # noqa: B006  the schema's "default": {} is under test
) -> str:
    """Echo typed arguments.

    Args:
        count: an integer.
        ratio: a number.
        flag: a boolean.
        maybe: an integer or null.
        counts: integers.
        at_least_one: an integer >= 1.
        level: 1 or 2.
        flags: booleans by name.
    """
    return repr((count, ratio, flag, maybe, counts, at_least_one, level, flags))


BASE = {"count": 1, "ratio": 0.5, "flag": True}


@pytest.mark.parametrize(
    "override",
    [
        {"count": True},
        {"ratio": False},
        {"flag": 1},
        {"flag": "yes"},
        {"maybe": True},
        {"counts": [1, True]},
        {"at_least_one": True},
        {"level": True},
        {"flags": {"a": 0}},
    ],
)
def test_json_booleans_and_numbers_are_not_interchangeable(override):
    # the schema says integer/number/boolean: pydantic's lax mode alone would take true as 1 and 1 as true
    result = _typed.call({**BASE, **override})
    assert not result.ok and "invalid arguments for _typed" in result.content, result.content


def test_numbers_and_numeric_strings_are_still_accepted_and_schema_unchanged():
    assert _typed.call(
        {"count": "3", "ratio": 2, "flag": False, "maybe": None, "counts": [1, "2"], "level": 2}
    ).content == ("(3, 2.0, False, None, [1, 2], 1, 2, {})")
    properties = _typed.parameters["properties"]
    assert properties["at_least_one"] == {
        "default": 1,
        "minimum": 1,
        "type": "integer",
        "description": "an integer >= 1.",
    }
    assert properties["counts"]["items"] == {"type": "integer"} and properties["flag"]["type"] == "boolean"
    assert _typed.call({**BASE, "at_least_one": 0}).ok is False


def test_async_tools_are_refused_at_decoration():
    with pytest.raises(TypeError, match="async functions are not supported.*MCP"):

        @tool
        async def fetch(x: int) -> int:
            """Fetch."""
            return x


def test_positional_only_tool_arguments_are_refused_at_decoration():
    with pytest.raises(TypeError, match="positional-only argument 'a'"):

        @tool
        def po(a: int, /) -> int:
            """Echo."""
            return a


@tool
def _union(pick: int | str, level: Literal[1, 2] | None = None) -> str:
    """Echo a union.

    Args:
        pick: a number or a name.
        level: 1 or 2.
    """
    return repr((pick, level))


def test_union_errors_name_the_member_type_not_the_boolean_check():
    """Regression: the agent read "pick.function-before[_refuse_bool(), int]: ..." where it used to read "pick.int:
    ..."."""
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
def _enums(
    level: _Level, count: _Count = _Count.ONE, counts: list[_Count] | None = None, color: _Color = _Color.RED
) -> str:
    """Echo enums.

    Args:
        level: 1 or 2.
        count: 1 or 2.
        counts: 1s and 2s.
        color: a colour.
    """
    return repr((level, count, counts, color))


def test_enums_of_numbers_refuse_json_booleans_as_numeric_literals_do():
    """Regression: the schema says {"enum": [1, 2], "type": "integer"}, yet ``true`` used to be ``_Level.LOW``."""
    for arguments in ({"level": True}, {"level": 1, "count": True}, {"level": 1, "counts": [1, True]}):
        result = _enums.call(arguments)
        assert not result.ok and "not a boolean" in result.content, (arguments, result.content)
    assert _enums.call({"level": 2, "count": "2", "counts": [1], "color": "red"}).content == (
        "(<_Level.HIGH: 2>, <_Count.TWO: 2>, [<_Count.ONE: 1>], <_Color.RED: 'red'>)"
    )
    assert _enums.parameters["$defs"]["_Level"] == {"enum": [1, 2], "type": "integer"}
