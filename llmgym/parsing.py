"""Reading an agent's action: text, tool calls, and what was wrong with them.

Holds :func:`parse_action`, which accepts either assistant text (tool calls
written in the text protocol ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
one or more) or an OpenAI assistant message ``dict`` with native
``tool_calls``. It never raises for the agent's mistakes: problems are listed
in :attr:`ParsedAction.errors` so the environment can answer them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from llmgym.messages import Message, ToolCall, assistant, loads_json

__all__ = ["ParsedAction", "parse_action", "parse_text_tool_calls", "read_single_call", "read_text_tool_calls", "text_protocol_content", "without_thinking", "TOOL_CALL_OPEN", "TOOL_CALL_CLOSE"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)
_ALLOWED_KEYS = frozenset({"name", "arguments"})
_OPEN_LEN, _CLOSE_LEN = len(TOOL_CALL_OPEN), len(TOOL_CALL_CLOSE)
_TAG_END = "tool_call>"  # in both tags
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_THINK_BLOCK = re.compile(r"(<think>.*?</think>)", re.DOTALL)  # split() keeps the blocks


@dataclass(slots=True)
class ParsedAction:
    """An action taken apart: prose, tool calls, problems, and the message to record."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    message: Message = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing about the format was wrong."""
        return not self.errors


def parse_text_tool_calls(text: str, id_prefix: str = "call") -> tuple[str, list[ToolCall], list[str]]:
    """Split assistant text into prose, tool calls and format errors.

    Example:
        >>> prose, calls, errors = parse_text_tool_calls(
        ...     'Trying crane. <tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>')
        >>> prose, calls[0].name, calls[0].arguments, errors
        ('Trying crane.', 'guess', {'word': 'crane'}, [])
        >>> parse_text_tool_calls('<tool_call>{"name": "guess"')[2]
        ['a <tool_call> block is not closed with </tool_call>']
    """
    single = read_single_call(text)
    if single is not None:
        prose, name, arguments = single
        return prose, [ToolCall(name, arguments, f"{id_prefix}_0")], []
    return read_text_tool_calls(text, id_prefix)


def read_text_tool_calls(text: str, id_prefix: str = "call") -> tuple[str, list[ToolCall], list[str]]:
    """:func:`parse_text_tool_calls` without its :func:`read_single_call` shortcut (for a caller that tried it)."""
    if TOOL_CALL_OPEN not in text and TOOL_CALL_CLOSE not in text:
        return text.strip(), [], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    if _THINK_OPEN not in text:
        return _scan(text, id_prefix, 0, calls, errors)[0].strip(), calls, errors
    # a call drafted while reasoning is not made (vLLM's reasoning parsers leave it out of the
    # content its tool parsers read): <think> blocks, and an unclosed one to the end, stay in the prose, unread
    parts = [(part, not (part.startswith(_THINK_OPEN) and part.endswith(_THINK_CLOSE)))
             for part in _THINK_BLOCK.split(text)]
    last, read = parts[-1]
    if read and _THINK_OPEN in last:  # only the last part can hold a <think> that is never closed
        cut = last.index(_THINK_OPEN)
        parts[-1:] = [(last[:cut], True), (last[cut:], False)]
    prose_parts, blocks = [], 0
    for part, read in parts:
        if read:
            part, blocks = _scan(part, id_prefix, blocks, calls, errors)
        prose_parts.append(part)
    return "".join(prose_parts).strip(), calls, errors


def read_single_call(text: str) -> tuple[str, str, dict[str, Any]] | None:
    """``(prose, name, arguments)`` when ``text`` is the usual action, else ``None``.

    The usual action holds one ``<tool_call>`` block of the form ``{"name": "...", "arguments": {...}}``,
    no other tool-call tag and no ``<think>``. :func:`parse_text_tool_calls` reads it the same way;
    this is its shortcut, without the general scan (the parse runs every step).

    Example:
        >>> read_single_call('Trying crane. <tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>')
        ('Trying crane.', 'guess', {'word': 'crane'})
        >>> read_single_call('<tool_call>{"name": "guess"}</tool_call>') is None  # no arguments: the general parse says so
        True
    """
    before, opened, rest = text.partition(TOOL_CALL_OPEN)
    if not opened or _THINK_OPEN in text:
        return None
    inner, closed, after = rest.partition(TOOL_CALL_CLOSE)
    # the two tags found here and no other "tool_call>" (a stray one in prose is left to the general path); checking
    # the three pieces is checking the whole text: "tool_call>" has one "t" and one ">", so an occurrence that crossed
    # into a tag would be that tag's own ending
    if not closed or _TAG_END in inner or _TAG_END in after or _TAG_END in before:
        return None
    try:  # JSON's own whitespace around the object is read as such; anything else (fences...) fails here
        data = from_json(inner)
        name, arguments = data["name"], data["arguments"]  # only a dict gets this far: JSON's other values raise
    except (ValueError, TypeError, KeyError, IndexError):  # not JSON, not an object, a key missing
        return None
    if len(data) != 2 or type(name) is not str or type(arguments) is not dict:
        return None
    if not before and not after:  # the block alone: no prose
        return "", name, arguments
    return (before + after).strip(), name, arguments


def without_thinking(text: str) -> str:
    """``text`` without its reasoning: closed ``<think>...</think>`` blocks and an unclosed ``<think>`` to the end.

    What an environment's ``on_text`` reads: an answer written while reasoning is not the answer.

    Example:
        >>> without_thinking("<think>maybe 41</think>The answer is 42. <think>or 43")
        'The answer is 42. '
    """
    if _THINK_OPEN not in text:
        return text
    text = _THINK_BLOCK.sub("", text)
    start = text.find(_THINK_OPEN)
    return text if start < 0 else text[:start]


def _scan(text: str, id_prefix: str, index: int, calls: list[ToolCall], errors: list[str]) -> tuple[str, int]:
    """Read the ``<tool_call>`` blocks of ``text`` into ``calls`` or ``errors``, numbering them from ``index``.

    Returns the prose around them and the next block number.
    """
    prose_parts: list[str] = []
    position = 0
    find = text.find
    start = find(TOOL_CALL_OPEN)
    while start >= 0:  # each <tool_call> up to the first </tool_call> after it
        end = find(TOOL_CALL_CLOSE, start + _OPEN_LEN)
        if end < 0:
            break
        prose_parts.append(text[position:start])
        position = end + _CLOSE_LEN
        call, error = _read_block(text[start + _OPEN_LEN : end].strip(), f"{id_prefix}_{index}")
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
        index += 1
        start = find(TOOL_CALL_OPEN, position)
    if not position:
        prose = text
    else:
        prose_parts.append(text[position:])
        prose = "".join(prose_parts)
    if TOOL_CALL_OPEN in prose:
        errors.append(f"a {TOOL_CALL_OPEN} block is not closed with {TOOL_CALL_CLOSE}")
    elif TOOL_CALL_CLOSE in prose:
        errors.append(f"a {TOOL_CALL_CLOSE} has no matching {TOOL_CALL_OPEN}")
    return prose, index


def _read_block(body: str, call_id: str) -> tuple[ToolCall | None, str]:
    """One stripped ``<tool_call>`` body as a call, or the error to report: fences, bad JSON, wrong keys or types."""
    if body.startswith("```"):
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
    try:
        data = loads_json(body)
    except json.JSONDecodeError as err:
        return None, f"tool call is not valid JSON ({err.msg} at character {err.pos}): {_clip(body)}"
    except RecursionError:
        return None, "tool call JSON is nested too deeply"
    if not isinstance(data, dict):
        return None, f"tool call must be a JSON object with name and arguments, got {_clip(body)}"
    if not data.keys() <= _ALLOWED_KEYS:
        return None, f"tool call has unexpected keys {sorted(set(data) - _ALLOWED_KEYS)}; use only name and arguments"
    name, arguments = data.get("name"), data.get("arguments", {})
    if type(name) is str and type(arguments) is dict:  # the usual case, without from_openai's checks for strings
        return ToolCall(name, arguments, call_id), ""
    try:
        return ToolCall.from_openai({"id": call_id, "function": data}), ""
    except ValueError as err:
        return None, str(err)


def parse_action(action: str | dict[str, Any], id_prefix: str = "call") -> ParsedAction:
    """Parse an action: assistant text, or an OpenAI assistant message dict.

    Native ``tool_calls`` in a dict are used as they are; when a dict has
    none, its content is read with the text protocol.

    Raises:
        TypeError: the action is neither ``str`` nor ``dict`` (a programming error).

    Example:
        >>> parsed = parse_action({"role": "assistant", "content": None, "tool_calls": [
        ...     {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": '{"word": "slate"}'}}]})
        >>> parsed.tool_calls[0].arguments, parsed.ok
        ({'word': 'slate'}, True)
    """
    if isinstance(action, str):
        prose, calls, errors = parse_text_tool_calls(action, id_prefix)
        return ParsedAction(prose, calls, errors, assistant(action, calls))
    if not isinstance(action, dict):
        raise TypeError(f"an action must be str or an OpenAI assistant message dict, got {type(action).__name__}")
    content = action.get("content")
    errors: list[str] = []
    if content is None:
        content = ""
    elif not isinstance(content, str):
        errors.append("message content must be a string")
        content = ""
    native = action.get("tool_calls") or []
    if not isinstance(native, list):
        return ParsedAction(content, [], errors + ["tool_calls must be a list"], assistant(content))
    if not native:
        prose, calls, text_errors = parse_text_tool_calls(content, id_prefix)
        return ParsedAction(prose, calls, errors + text_errors, assistant(content, calls))
    calls = []
    for index, entry in enumerate(native):
        try:
            call = ToolCall.from_openai(entry)
        except ValueError as err:
            errors.append(str(err))
            continue
        call.id = call.id or f"{id_prefix}_{index}"
        calls.append(call)
    return ParsedAction(content.strip(), calls, errors, assistant(content, calls))


def text_protocol_content(message: Message) -> str:
    """An assistant message's content with its native ``tool_calls`` written as ``<tool_call>`` blocks.

    For a model that only knows the text protocol (SFT data, a server without tool
    support). A message whose text already holds the blocks is left as it is.

    Example:
        >>> call = {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
        >>> text_protocol_content({"role": "assistant", "content": "Trying.", "tool_calls": [call]})
        'Trying.\\n<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
    """
    text = message.get("content") or ""
    if not message.get("tool_calls") or TOOL_CALL_OPEN in text:
        return text
    blocks = []
    for entry in message["tool_calls"]:
        call = ToolCall.from_openai(entry)
        payload = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        blocks.append(f"{TOOL_CALL_OPEN}{payload}{TOOL_CALL_CLOSE}")
    return "\n".join([text, *blocks]) if text else "\n".join(blocks)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
