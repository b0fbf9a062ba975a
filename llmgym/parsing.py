"""Reading an agent's action: text, tool calls, and what was wrong with them.

Holds :func:`parse_action`, which accepts either assistant text (tool calls
written in the text protocol ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
one or more) or an OpenAI assistant message ``dict`` with native
``tool_calls``. It never raises for the agent's mistakes: problems are listed
in :attr:`ParsedAction.errors` so the environment can answer them.

Reasoning has one reading, :data:`THINK_BLOCK`, shared by every part of llmgym that
sets it apart: :func:`without_thinking` (what an environment reads as the answer),
:func:`thoughts` (what the thinking-token count measures) and
:func:`without_leading_thinking` (a reply that may quote the tags, such as a judge's
verdict). :func:`show_value` and :func:`clip_text` are how messages quote a value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from llmgym.messages import Message, ToolCall, assistant, loads_json

__all__ = [
    "ParsedAction",
    "parse_action",
    "parse_text_tool_calls",
    "text_protocol_content",
    "without_thinking",
    "without_leading_thinking",
    "thoughts",
    "THINK_BLOCK",
    "show_value",
    "clip_text",
    "TOOL_CALL_OPEN",
    "TOOL_CALL_CLOSE",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)  # split() keeps the bodies
_ALLOWED_KEYS = frozenset({"name", "arguments"})

#: A reasoning block: ``<think>`` to the next ``</think>``, or to the end of the text when the
#: reasoning was cut off before it closed; group ``thought`` is what is inside. The tags are
#: matched exactly, as chat templates write them and vLLM's reasoning parsers read them.
THINK_BLOCK = re.compile(r"<think>(?P<thought>.*?)(?:</think>|\Z)", re.DOTALL)


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

    A call drafted while reasoning is not made (vLLM's reasoning parsers leave it out of the
    content its tool parsers read): ``<think>`` blocks, and an unclosed one to the end, stay
    in the prose, unread.

    Example:
        >>> prose, calls, errors = parse_text_tool_calls(
        ...     'Trying crane. <tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>')
        >>> prose, calls[0].name, calls[0].arguments, errors
        ('Trying crane.', 'guess', {'word': 'crane'}, [])
        >>> parse_text_tool_calls('<tool_call>{"name": "guess"')[2]
        ['a <tool_call> block is not closed with </tool_call>']
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    pieces = _said_and_thought(text)  # only what was said is read
    blocks = 0
    for i in range(0, len(pieces), 2):
        pieces[i], blocks = _read_blocks(pieces[i], id_prefix, blocks, calls, errors)
    return "".join(pieces).strip(), calls, errors


def without_thinking(text: str) -> str:
    """``text`` without its reasoning: every :data:`THINK_BLOCK`, closed or running to the end.

    What an environment's ``on_text`` reads: an answer written while reasoning is not the answer.

    Example:
        >>> without_thinking("<think>maybe 41</think>The answer is 42. <think>or 43")
        'The answer is 42. '
    """
    return THINK_BLOCK.sub("", text)


def without_leading_thinking(text: str) -> str:
    """``text`` without the :data:`THINK_BLOCK` it opens with (after any whitespace); the rest as it is.

    For a reply that may quote the tags after its reasoning, such as a judge's JSON verdict on a
    reasoning model's transcript: :func:`without_thinking` would cut the quote out of the JSON.

    Example:
        >>> without_leading_thinking('<think>fair?</think>\\n{"reasoning": "it wrote <think>", "score": 3}')
        '\\n{"reasoning": "it wrote <think>", "score": 3}'
        >>> without_leading_thinking("no reasoning <think>here</think>")
        'no reasoning <think>here</think>'
    """
    block = THINK_BLOCK.match(text, len(text) - len(text.lstrip()))
    return text[block.end() :] if block else text


def thoughts(text: str) -> list[str]:
    """What is inside each :data:`THINK_BLOCK` of ``text``, in order: the reasoning the thinking tokens count.

    Example:
        >>> thoughts("<think>a</think>said<think>b, cut off")
        ['a', 'b, cut off']
    """
    return [block["thought"] for block in THINK_BLOCK.finditer(text)]


def _said_and_thought(text: str) -> list[str]:
    """``text`` in pieces, said, thought, said, ..., said: each thought a whole :data:`THINK_BLOCK`, tags included."""
    pieces, said_from = [], 0
    for block in THINK_BLOCK.finditer(text):
        pieces += [text[said_from : block.start()], block[0]]
        said_from = block.end()
    return [*pieces, text[said_from:]]


def _read_blocks(text: str, id_prefix: str, first: int, calls: list[ToolCall], errors: list[str]) -> tuple[str, int]:
    """Read the ``<tool_call>`` blocks of ``text``, numbered from ``first``, into ``calls`` or ``errors``.

    Returns the prose around them and the next block number.
    """
    pieces = _BLOCK.split(text)  # prose, block, prose, block, ..., prose
    for number, body in enumerate(pieces[1::2], start=first):
        call, error = _read_block(body.strip(), f"{id_prefix}_{number}")
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
    prose = "".join(pieces[0::2])
    if TOOL_CALL_OPEN in prose:
        errors.append(f"a {TOOL_CALL_OPEN} block is not closed with {TOOL_CALL_CLOSE}")
    elif TOOL_CALL_CLOSE in prose:
        errors.append(f"a {TOOL_CALL_CLOSE} has no matching {TOOL_CALL_OPEN}")
    return prose, first + len(pieces) // 2


def _read_block(body: str, call_id: str) -> tuple[ToolCall | None, str]:
    """One stripped ``<tool_call>`` body as a call, or the error to report: fences, bad JSON, wrong keys or types."""
    if body.startswith("```"):
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
    try:
        data = loads_json(body)
    except json.JSONDecodeError as err:
        return None, f"tool call is not valid JSON ({err.msg} at character {err.pos}): {clip_text(body)}"
    except RecursionError:
        return None, "tool call JSON is nested too deeply"
    if not isinstance(data, dict):
        return None, f"tool call must be a JSON object with name and arguments, got {clip_text(body)}"
    if not data.keys() <= _ALLOWED_KEYS:
        return None, f"tool call has unexpected keys {sorted(set(data) - _ALLOWED_KEYS)}; use only name and arguments"
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


def clip_text(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters and ``...``: how error messages quote what they refuse.

    Example:
        >>> clip_text("x" * 100, 5)
        'xxxxx...'
    """
    return text if len(text) <= limit else text[:limit] + "..."


def show_value(value: Any) -> str:
    """``value`` as Python writes it (``repr``), or its type when its ``__repr__`` raises.

    How llmgym shows a value it cannot use as it is: a tool result JSON cannot write, a
    reward that is not a number (quoted with :func:`clip_text`).

    Example:
        >>> show_value({(1, 2): "b"})
        "{(1, 2): 'b'}"
        >>> class Broken:
        ...     def __repr__(self):
        ...         raise RuntimeError("no")
        >>> show_value(Broken())
        '<Broken value that cannot be shown: RuntimeError>'
    """
    try:
        return repr(value)
    except Exception as err:  # a broken __repr__ must not hide what the message is about
        return f"<{type(value).__name__} value that cannot be shown: {type(err).__name__}>"
