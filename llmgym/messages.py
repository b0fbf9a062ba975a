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

__all__ = ["ToolCall", "Message", "system", "user", "assistant", "tool_result"]

#: A chat message: ``{"role": ..., "content": ..., ...}`` in OpenAI format.
Message = dict[str, Any]


@dataclass
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
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as err:
                raise ValueError(f"tool call {function['name']!r}: arguments are not valid JSON ({err.msg})") from None
            except RecursionError:
                raise ValueError(f"tool call {function['name']!r}: arguments are nested too deeply") from None
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
