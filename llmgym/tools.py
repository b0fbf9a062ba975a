"""Tools: plain Python functions an agent may call.

Holds the :func:`tool` decorator and :class:`Tool`, and
:func:`strip_schema_titles` (shared with the MCP bridge). A tool's JSON schema is
derived from its type hints and Google-style docstring; its arguments are
validated by pydantic's compiled validator (for a ``TypedDict`` of the
arguments, which returns a plain dict: about 3x cheaper than building a model
instance) before the function runs. Whatever
goes wrong inside a call (bad arguments, an exception in the body) comes back
as a :class:`ToolResult` with ``ok=False`` and a message the agent can act on.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import json
import pickle
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import docstring_parser
import pydantic
from pydantic_core import PydanticCustomError
from typing_extensions import NotRequired, TypedDict

from llmgym.parsing import show_value

__all__ = ["Tool", "ToolResult", "ToolError", "strip_schema_titles", "tool"]


class ToolError(Exception):
    """Raise inside a tool to send the agent an error message (the call counts as failed)."""


@dataclass(slots=True)
class ToolResult:
    """What a tool call returned: the text the agent sees and whether it worked."""

    content: str
    ok: bool = True
    value: Any = None


class Tool:
    """A function with a JSON schema and argument validation.

    Use the :func:`tool` decorator rather than building one by hand. A tool
    defined on an environment class binds to the instance like a method.

    Example:
        >>> @tool
        ... def add(a: int, b: int = 0) -> int:
        ...     '''Add two integers.
        ...
        ...     Args:
        ...         a: the first number.
        ...         b: the second number.
        ...     '''
        ...     return a + b
        >>> add.schema["function"]["parameters"]["required"]
        ['a']
        >>> add.call({"a": 2, "b": 3}).content
        '5'
        >>> add.call({"a": "two"}).ok
        False
    """

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, max_output_chars: int = 8192):
        self.fn = fn
        self.name = name or fn.__name__
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"tool {self.name!r}: async functions are not supported (step() is synchronous and would "
                "get an un-awaited coroutine); write a plain def that does the work, or serve the tool "
                "from an MCP server (llmgym.mcp runs the event loop for you)"
            )
        self.max_output_chars = max_output_chars
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        self.description = " ".join(part for part in (doc.short_description, doc.long_description) if part).strip()
        param_docs = {p.arg_name: p.description or "" for p in doc.params}
        hints = get_type_hints(fn, include_extras=True)  # keep Annotated[..., Field(ge=...)] constraints
        fields: dict[str, Any] = {}
        params = list(inspect.signature(fn).parameters.values())
        if params and params[0].name == "self":
            params = params[1:]
        for param in params:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args/**kwargs are not supported; name every argument")
            if param.kind is param.POSITIONAL_ONLY:  # tools are called with keyword arguments
                raise TypeError(
                    f"tool {self.name!r}: positional-only argument {param.name!r} is not supported; drop the '/'"
                )
            if param.name not in hints:
                raise TypeError(f"tool {self.name!r}: argument {param.name!r} needs a type hint")
            hints[param.name] = _json_scalars(hints[param.name])
            info = pydantic.Field(description=param_docs.get(param.name) or None)
            if param.default is param.empty:
                fields[param.name] = Annotated[hints[param.name], info]
            else:  # optional: pydantic fills the default in, and the schema shows it
                info = pydantic.Field(param.default, description=param_docs.get(param.name) or None)
                fields[param.name] = NotRequired[Annotated[hints[param.name], info]]
        arguments_type = TypedDict(f"{self.name}_arguments", fields)  # type: ignore[operator]
        arguments_type.__pydantic_config__ = pydantic.ConfigDict(extra="forbid")  # type: ignore[attr-defined]
        self._adapter = pydantic.TypeAdapter(arguments_type)
        parameters = self._adapter.json_schema()
        strip_schema_titles(parameters)
        parameters.setdefault("properties", {})
        parameters.setdefault("required", [])
        self.parameters = parameters
        functools.update_wrapper(self, fn)

    @property
    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated arguments, converted to the annotated types.

        Raises:
            ToolError: the arguments do not match the schema.
        """
        if not isinstance(arguments, dict):
            raise ToolError(f"arguments for {self.name} must be a JSON object")
        try:
            return self._adapter.validate_python(arguments)
        except pydantic.ValidationError as err:
            raise ToolError(self._invalid(err)) from None

    def _invalid(self, err: pydantic.ValidationError) -> str:
        problems = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in err.errors()[:5])
        return f"invalid arguments for {self.name}: {problems}"

    def call(self, arguments: dict[str, Any], bound_to: Any = None) -> ToolResult:
        """Validate ``arguments`` (as :meth:`validate`) and run the tool; never raises for the agent's mistakes."""
        try:
            kwargs = self.validate(arguments)
        except ToolError as err:
            return ToolResult(f"Error: {err}", ok=False)
        try:  # separate from validation: an error raised inside the body is the tool failing, not bad arguments
            value = self.fn(**kwargs) if bound_to is None else self.fn(bound_to, **kwargs)
        except ToolError as err:
            return ToolResult(f"Error: {err}", ok=False)
        except Exception as err:  # the agent's input broke the tool body: report it, keep the episode alive
            return ToolResult(f"Error: {self.name} failed: {type(err).__name__}: {err}", ok=False)
        try:
            content = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        except Exception:  # a cycle, non-string keys, a broken __str__: show the value as Python writes it
            content = show_value(value)
        if len(content) > self.max_output_chars:
            content = content[: self.max_output_chars] + f"\n[output truncated at {self.max_output_chars} characters]"
        return ToolResult(content, True, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return BoundTool(self, instance)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled by reference: ``fn`` alone cannot be, its qualified name leads to this Tool, not to the function
        return _find_tool, (self.fn.__module__, self.fn.__qualname__, self.name)


class BoundTool:
    """A :class:`Tool` defined on a class, bound to one instance."""

    def __init__(self, tool: Tool, instance: Any):
        self.tool, self.instance = tool, instance
        self.name, self.schema = tool.name, tool.schema

    def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Validate ``arguments`` and run the tool on the instance (see :meth:`Tool.call`)."""
        return self.tool.call(arguments, self.instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tool.fn(self.instance, *args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return BoundTool, (self.tool, self.instance)


def _find_tool(module: str, qualname: str, name: str) -> Tool:
    """The :class:`Tool` defined at ``module.qualname`` (how a pickled tool is found again)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not isinstance(found, Tool) or found.name != name:
        raise pickle.UnpicklingError(f"{module}.{qualname} is no longer the tool {name!r}")
    return found


def _refuse_bool(value: Any) -> Any:
    if value is True or value is False:
        raise PydanticCustomError("number_type", "Input should be a number, not a boolean")
    return value


_NUMBER = pydantic.BeforeValidator(_refuse_bool)


def _json_scalars(hint: Any) -> Any:
    """``hint`` with JSON's booleans and numbers kept apart, however deep in unions, lists and dicts.

    pydantic's lax mode reads ``true`` as the integer 1 and ``1`` or ``"yes"`` as ``True``;
    the schema the agent sees says ``integer``/``number``/``boolean``, so those are refused.
    Numeric strings (``"3"`` for an int) stay accepted, as pydantic and FastMCP accept them.
    """
    metadata: tuple[Any, ...] = ()
    # the check goes after the metadata: before it, pydantic drops Field(ge=...) from the schema
    if get_origin(hint) is Annotated:
        hint, metadata = get_args(hint)[0], hint.__metadata__
    if hint is bool:
        return Annotated[(bool, *metadata, pydantic.Strict())]
    if hint is int or hint is float:
        return Annotated[(hint, *metadata, _NUMBER)]
    origin, args = get_origin(hint), get_args(hint)
    choices: Any = None
    if origin is typing.Literal:  # Literal[1, 2] takes True as 1 (True == 1)
        choices = args
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):  # so does an enum of numbers (IntEnum too)
        choices = [member.value for member in hint]
    if choices is not None:
        numbers = any(type(c) in (int, float) for c in choices) and not any(type(c) is bool for c in choices)
        return Annotated[(hint, *metadata, _NUMBER)] if numbers else _annotate(hint, metadata)
    if not args:
        return _annotate(hint, metadata)
    new = tuple(_json_scalars(a) if a is not Ellipsis else a for a in args)
    if new != args and (origin is typing.Union or origin is types.UnionType):
        hint = typing.Union[new]  # noqa: UP007  (built from a tuple at run time: `|` cannot spell that)
    elif new != args and origin in (list, set, frozenset, tuple, dict):
        hint = origin[new]
    return _annotate(hint, metadata)  # other generics (Sequence[int], ...) keep pydantic's own rules


_NUMBER_LABEL = re.compile(r"function-before\[_refuse_bool\(\), (.*)\]")


def _where(loc: tuple[Any, ...]) -> str:
    """An error's location as the agent reads it: ``x.int``, not ``x.function-before[_refuse_bool(), int]``.

    pydantic names a union member by its validator, and the boolean check is one wrapped around it.
    """
    return ".".join(_NUMBER_LABEL.sub(r"\1", str(part)) for part in loc) or "arguments"


def _annotate(hint: Any, metadata: tuple[Any, ...]) -> Any:
    return Annotated[(hint, *metadata)] if metadata else hint


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, max_output_chars: int = 8192) -> Any:
    """Make a function (or an environment method) a :class:`Tool`.

    Works bare (``@tool``) or with options (``@tool(name="search")``).

    Raises:
        TypeError: ``fn`` is async, takes ``*args``, ``**kwargs`` or positional-only
            arguments, or has an argument without a type hint.
    """
    if fn is None:
        return lambda f: Tool(f, name=name, max_output_chars=max_output_chars)
    return Tool(fn, name=name, max_output_chars=max_output_chars)


_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")  # name -> schema
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")  # [schema, ...]
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")  # one schema


def strip_schema_titles(schema: Any) -> None:
    """Drop pydantic's auto-generated ``title`` keys (noise in a prompt) from a schema and its sub-schemas, in place.

    Only schema keywords are walked: a property or definition named ``title`` and
    data such as ``default`` or ``enum`` values keep their keys.

    Example:
        >>> schema = {"title": "args", "properties": {"title": {"title": "Title", "type": "string"}}}
        >>> strip_schema_titles(schema)
        >>> schema
        {'properties': {'title': {'type': 'string'}}}
    """
    if not isinstance(schema, dict):
        return
    schema.pop("title", None)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                strip_schema_titles(sub)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                strip_schema_titles(sub)
    for key in _SUBSCHEMAS:
        strip_schema_titles(schema.get(key))
