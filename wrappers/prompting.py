"""Chat prompts for local policies: the tool protocol and token-exact continuation.

Holds :func:`template_supports_tools`, :func:`prepare_messages` (OpenAI
messages made safe for a chat template, with the text tool-call protocol
injected into the system message when the template has no tool support) and
:func:`check_request` (clear errors for malformed requests) and
:func:`continuation_text` (the text to append to ``prefix_token_ids`` for the
messages added since the last generation).

Token-exact continuation, the method: let *k* be the last assistant message.
Its content is replaced by a sentinel and the template is rendered twice, on
``messages[:k+1]`` (*head*) and on all messages with the generation prompt
(*full*). ``full[len(head):]`` is the text of the new messages; the text after
the sentinel in *head* is the template's closing glue after an assistant turn
(``<|im_end|>\\n``), minus the end-of-turn token the model generated itself.
Limits: the template must render earlier turns the same whatever follows
(true of common templates once the assistant content is the sentinel; templates
that rewrite earlier turns are detected and :func:`continuation_text` returns
``None``); the prefix is trusted to hold exactly the earlier turns.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from llmgym.messages import Message
from llmgym.policy import PolicyRequest, SamplingParams, tool_protocol_prompt

__all__ = ["Render", "check_request", "template_supports_tools", "prepare_messages", "last_assistant_index", "continuation_text"]

#: ``render(messages, add_generation_prompt) -> text``: a chat template with tools already bound.
Render = Callable[[list[Message], bool], str]

_SENTINEL = "LLMGYMASSISTANTTURN7F3A"
_TOOLS_VARIABLE = re.compile(r"\btools\b")


def template_supports_tools(template: str | None) -> bool:
    """Whether a Jinja chat template renders a ``tools`` list (native tool calling).

    Example:
        >>> template_supports_tools("{% for m in messages %}{{ m.content }}{% endfor %}")
        False
        >>> template_supports_tools("{% if tools %}{{ tools | tojson }}{% endif %}")
        True
    """
    return bool(template) and bool(_TOOLS_VARIABLE.search(template))


def prepare_messages(messages: list[Message], tools: list[dict[str, Any]], native_tools: bool) -> list[Message]:
    """Copy messages into a form every chat template accepts.

    ``None`` content becomes ``""``; without native tool support the text
    tool-call protocol (:func:`~llmgym.policy.tool_protocol_prompt`) is
    appended to the system message (one is added when there is none).

    Raises:
        ValueError: a message is not a dict with a string ``role``.

    Example:
        >>> tools = [{"type": "function", "function": {"name": "guess", "parameters": {}}}]
        >>> out = prepare_messages([{"role": "user", "content": "hi"}], tools, native_tools=False)
        >>> out[0]["role"], "<tool_call>" in out[0]["content"], out[1]["content"]
        ('system', True, 'hi')
    """
    prepared: list[Message] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {index} must be a dict with a string 'role', got {message!r:.80}")
        message = copy.deepcopy(message)
        if message.get("content") is None:
            message["content"] = ""
        prepared.append(message)
    if tools and not native_tools:
        protocol = tool_protocol_prompt(tools)
        if prepared and prepared[0]["role"] == "system":
            prepared[0]["content"] = f"{prepared[0]['content']}\n\n{protocol}" if prepared[0]["content"] else protocol
        else:
            prepared.insert(0, {"role": "system", "content": protocol})
    return prepared


def last_assistant_index(messages: list[Message]) -> int:
    """Index of the last assistant message, or -1."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return index
    return -1


def continuation_text(render: Render, messages: list[Message], generated_end: str = "") -> str | None:
    """Text that follows the last assistant turn's generated tokens, up to the next generation prompt.

    Args:
        render: the chat template (see :data:`Render`).
        messages: prepared messages (see :func:`prepare_messages`) holding at
            least one assistant message: the turn the prefix ends with.
        generated_end: the text of the end-of-turn token the model generated
            last (``"<|im_end|>"``), ``""`` when generation stopped otherwise.

    Returns:
        The text to tokenize and append to the prefix, or ``None`` when the
        template renders the earlier turns differently once more messages follow.

    Raises:
        ValueError: no assistant message (a prefix needs one).

    Example:
        >>> def render(messages, add_generation_prompt):
        ...     text = "".join(f"<{m['role']}>{m['content']}<end>\\n" for m in messages)
        ...     return text + ("<assistant>" if add_generation_prompt else "")
        >>> msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
        ...         {"role": "user", "content": "again"}]
        >>> continuation_text(render, msgs, generated_end="<end>")
        '\\n<user>again<end>\\n<assistant>'
    """
    k = last_assistant_index(messages)
    if k < 0:
        raise ValueError("prefix_token_ids was given but the messages hold no assistant turn for it to end with")
    marked = list(messages)
    marked[k] = {"role": "assistant", "content": _SENTINEL}
    head = render(marked[: k + 1], False)
    full = render(marked, True)
    at = head.rfind(_SENTINEL)
    if at < 0 or not full.startswith(head):
        return None
    closing = head[at + len(_SENTINEL):]
    if generated_end and closing.startswith(generated_end):
        closing = closing[len(generated_end):]
    return closing + full[len(head):]


def check_request(request: PolicyRequest) -> None:
    """Raise a clear error for a malformed request (wrong types, impossible sampling settings).

    Raises:
        TypeError: not a :class:`~llmgym.policy.PolicyRequest`, or wrongly typed fields.
        ValueError: ``max_tokens < 1``, ``temperature < 0``, ``top_p`` outside (0, 1].
    """
    if not isinstance(request, PolicyRequest):
        raise TypeError(f"expected a PolicyRequest, got {type(request).__name__}")
    if not isinstance(request.messages, list):
        raise TypeError(f"messages must be a list of dicts, got {type(request.messages).__name__}")
    sampling = request.sampling
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    if sampling.max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {sampling.max_tokens}")
    if sampling.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {sampling.temperature}")
    if not 0 < sampling.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {sampling.top_p}")
    if not isinstance(sampling.stop, (list, tuple)) or not all(isinstance(s, str) for s in sampling.stop):
        raise TypeError("stop must be a list of strings")
