"""Chat messages and tool calls in the OpenAI chat format.

Holds :class:`ToolCall` (one call the agent asked for) and helpers that build
the plain ``dict`` messages llmgym keeps in ``info["messages"]`` and in
episodes. Messages stay plain dicts in OpenAI format so they go straight to
any chat-completions client, tokenizer chat template or JSONL file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall", "Message", "system", "user", "assistant", "tool_result", "loads_json"]

#: A chat message: ``{"role": ..., "content": ..., ...}`` in OpenAI format.
Message = dict[str, Any]


def loads_json(text: str) -> Any:
    """``json.loads(text)``, whose every failure to read the text is a ``json.JSONDecodeError``.

    ``json.loads`` raises a bare ``ValueError`` for an integer longer than Python converts
    (``sys.get_int_max_str_digits()``, 4,300 digits by default); callers that answer bad JSON
    with an error observation would not expect it.

    Raises:
        json.JSONDecodeError: ``text`` is not JSON, or holds an integer that is too long.
        RecursionError: nested too deeply.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as err:
        raise json.JSONDecodeError(f"a number is too long ({err})", text, 0) from None


@dataclass(slots=True)
class ToolCall:
    """One tool call: the tool's name, its arguments and the call's id.

    Example:
        >>> call = ToolCall("guess", {"word": "crane"}, id="call_0")
        >>> call.to_openai()["function"]
        {'name': 'guess', 'arguments': '{"word": "crane"}'}
        >>> ToolCall.from_openai(call.to_openai()) == call
        True
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The call as an entry of an OpenAI assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> ToolCall:
        """Read an OpenAI ``tool_calls`` entry.

        Raises:
            ValueError: the entry is not a function call with a name and a JSON
                object of arguments.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a tool call must be an object, got {type(data).__name__}")
        function = data.get("function", data)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError("a tool call needs function.name (a string)")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = loads_json(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as err:
                raise ValueError(f"tool call {function['name']!r}: arguments are not valid JSON ({err.msg})") from None
            except RecursionError:
                raise ValueError(f"tool call {function['name']!r}: arguments are nested too deeply") from None
        elif isinstance(arguments, dict):  # given as a Python dict: it must be JSON, as the transcript records it
            try:
                json.dumps(arguments)
            except (TypeError, ValueError, RecursionError) as err:
                reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
                raise ValueError(f"tool call {function['name']!r}: arguments must be JSON ({reason})") from None
        if not isinstance(arguments, dict):
            raise ValueError(f"tool call {function['name']!r}: arguments must be a JSON object")
        return cls(name=function["name"], arguments=arguments, id=str(data.get("id") or ""))


def system(content: str) -> Message:
    """A system message."""
    return {"role": "system", "content": content}


def user(content: str) -> Message:
    """A user message (what the environment says when no tool was called)."""
    return {"role": "user", "content": content}


def assistant(content: str, tool_calls: list[ToolCall] | None = None) -> Message:
    """An assistant message, with ``tool_calls`` when there are any."""
    message: Message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [call.to_openai() for call in tool_calls]
    return message


def tool_result(call: ToolCall, content: str) -> Message:
    """The ``tool`` message answering ``call``."""
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
