"""Chat prompts for local policies: the tool protocol and token-exact continuation.

Holds :class:`ChatPrompter` (requests to prompt token ids for one chat
template and tokenizer, used by every local policy; :func:`hf_chat_prompter`
builds one for a transformers tokenizer), :func:`prepare_messages` (OpenAI
messages made safe for a chat template; when the template has no tool support,
the text tool-call protocol joins the system message and earlier tool calls and
results are written in it, see :func:`text_protocol_message`),
:func:`continuation_text` (the text to append to ``prefix_token_ids`` for the
messages added since the last generation), :func:`template_supports_tools`,
:func:`template_has_tool_role`, :func:`check_request` and :func:`eos_token_ids`.

Token-exact continuation, the method: let *k* be the last assistant message.
Its content is replaced by a sentinel and the template is rendered on all
messages with the generation prompt. The text after the sentinel is the
template's closing glue after an assistant turn (``<|im_end|>\\n``), minus the
end-of-turn token the model generated itself, then the new messages. What the
template renders *before* the sentinel does not matter: the prefix holds those
turns as the model saw and wrote them, so templates that render earlier turns
differently once more follow (Qwen3 shows ``<think>`` only after the last user
message) are continued too. Limits: the template must still render the last
assistant turn's content once more messages follow (one that drops it is
detected: :func:`continuation_text` returns ``None``); the prefix is trusted to
hold exactly the earlier turns.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmgym.messages import Message
from llmgym.parsing import text_protocol_content
from llmgym.policy import PolicyRequest, SamplingParams, tool_protocol_prompt
from llmgym.wrappers.thinking import prompt_opens_thinking

__all__ = [
    "Render",
    "Prompt",
    "ChatPrompter",
    "hf_chat_prompter",
    "eos_token_ids",
    "check_request",
    "template_supports_tools",
    "template_has_tool_role",
    "text_protocol_message",
    "prepare_messages",
    "last_assistant_index",
    "continuation_text",
]

#: ``render(messages, add_generation_prompt) -> text``: a chat template with tools already bound.
Render = Callable[[list[Message], bool], str]

_SENTINEL = "LLMGYMASSISTANTTURN7F3A"
_TOOLS_VARIABLE = re.compile(r"\btools\b")
_TOOL_ROLE = re.compile(r"""(["'])tool\1""")


def template_supports_tools(template: str | None) -> bool:
    """Whether a Jinja chat template renders a ``tools`` list (native tool calling).

    Example:
        >>> template_supports_tools("{% for m in messages %}{{ m.content }}{% endfor %}")
        False
        >>> template_supports_tools("{% if tools %}{{ tools | tojson }}{% endif %}")
        True
    """
    return bool(template) and bool(_TOOLS_VARIABLE.search(template))


def template_has_tool_role(template: str | None) -> bool:
    """Whether a Jinja chat template handles ``tool`` messages itself (it names the role).

    A template that prints any role as it comes (SmolLM2's ChatML) renders a
    ``tool`` turn too, but one its model was never shown.

    Example:
        >>> template_has_tool_role("{{ '<|im_start|>' + m.role + '\\n' }}")
        False
        >>> template_has_tool_role("{% if m.role == 'tool' %}<tool_response>{% endif %}")
        True
    """
    return bool(template) and bool(_TOOL_ROLE.search(template))


def text_protocol_message(message: Message, tool_role: bool = False) -> Message:
    """One message as a template without tool support should show it.

    An assistant message's native ``tool_calls`` become ``<tool_call>`` blocks in
    its content (what :func:`~llmgym.policy.tool_protocol_prompt` asks the model to
    write); a ``tool`` result becomes a user turn wrapped in ``<tool_response>``
    (Qwen's convention) unless ``tool_role`` says the template renders tool
    messages itself. Anything else is returned as it is.

    Example:
        >>> call = {"id": "c0", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
        >>> text_protocol_message({"role": "assistant", "content": None, "tool_calls": [call]})
        {'role': 'assistant', 'content': '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'}
        >>> text_protocol_message({"role": "tool", "tool_call_id": "c0", "content": "CRANE x x G x x"})
        {'role': 'user', 'content': '<tool_response>\\nCRANE x x G x x\\n</tool_response>'}
    """
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls"):
        shown = {key: value for key, value in message.items() if key != "tool_calls"}
        shown["content"] = text_protocol_content(message)
        return shown
    if role == "tool" and not tool_role:
        return {"role": "user", "content": f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"}
    return message


def prepare_messages(
    messages: list[Message], tools: list[dict[str, Any]], native_tools: bool, tool_role: bool = False
) -> list[Message]:
    """Copy messages into a form every chat template accepts.

    ``None`` content becomes ``""`` and OpenAI content parts become their
    text. Without native tool support the text tool-call protocol
    (:func:`~llmgym.policy.tool_protocol_prompt`) is appended to the system
    message (one is added when there is none), and earlier tool calls and
    results are written in it (:func:`text_protocol_message`), so the model
    sees its own calls the way it was asked to write them.

    Args:
        messages: OpenAI chat messages.
        tools: the tools offered.
        native_tools: the template renders tools and tool calls itself.
        tool_role: the template renders ``tool`` messages itself
            (:func:`template_has_tool_role`); only read without native tools.

    Raises:
        ValueError: a message is not a dict with a string ``role``, its
            content is neither text nor content parts, or (without native
            tools) one of its ``tool_calls`` has no name or no JSON-object arguments.

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
        content = message.get("content")
        if content is None:
            message["content"] = ""
        elif isinstance(content, list):  # OpenAI content parts: keep the text ones
            message["content"] = "".join(
                part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
            )
        elif not isinstance(content, str):
            raise ValueError(f"message {index} content must be a string or a list of content parts")
        if not native_tools:
            try:
                message = text_protocol_message(message, tool_role)
            except ValueError as err:
                raise ValueError(f"message {index}: {err}") from err
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
        template does not render the last assistant turn's content once more
        messages follow (so there is no place to continue from).

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
    full = render(marked, True)
    if full.count(_SENTINEL) != 1:
        return None
    # Only what follows the sentinel: earlier turns may render otherwise now (Qwen3 drops <think> before the last
    # user message), but the prefix already holds them as they were.
    rest = full[full.index(_SENTINEL) + len(_SENTINEL) :]
    if generated_end and rest.startswith(generated_end):
        rest = rest[len(generated_end) :]
    return rest


def check_request(request: PolicyRequest) -> None:
    """Raise a clear error for a malformed request (wrong types, impossible sampling settings).

    Raises:
        TypeError: not a :class:`~llmgym.policy.PolicyRequest`, or wrongly typed fields.
        ValueError: ``max_tokens < 1``, ``temperature < 0``, ``top_p`` outside (0, 1],
            ``thinking_budget < 0``.
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
    # else it fails inside a batch, with others
    if sampling.thinking_budget is not None and sampling.thinking_budget < 0:
        raise ValueError(f"thinking_budget must be >= 0 or None, got {sampling.thinking_budget}")


@dataclass
class Prompt:
    """A request turned into prompt token ids.

    Attributes:
        request: the request (its sampling settings drive generation).
        ids: the prompt token ids.
        opens_thinking: the prompt ends inside an open ``<think>`` block.
        prefix_reused: the ids start with ``request.prefix_token_ids`` verbatim.
    """

    request: PolicyRequest
    ids: list[int]
    opens_thinking: bool = False
    prefix_reused: bool = False


class ChatPrompter:
    """Turns requests into prompt token ids for one chat template and tokenizer.

    Args:
        render: ``render(messages, native_tools_or_None, add_generation_prompt) -> text``.
        encode: text to token ids, special tokens parsed, nothing added.
        decode: token ids to text, special tokens kept.
        eos_ids: the tokens that end a turn.
        vocab_size: token ids must be below it.
        native_tools: pass tools to the template rather than the text protocol.
        tool_role: without native tools, the template renders ``tool`` messages
            itself (else they become ``<tool_response>`` user turns, see
            :func:`text_protocol_message`).
    """

    def __init__(
        self,
        render: Callable[[list[Message], list[dict[str, Any]] | None, bool], str],
        encode: Callable[[str], list[int]],
        decode: Callable[[list[int]], str],
        eos_ids: set[int],
        vocab_size: int,
        native_tools: bool,
        tool_role: bool = False,
    ) -> None:
        self._render = render
        self.encode = encode
        self.decode = decode
        self.eos_ids = eos_ids
        self.vocab_size = vocab_size
        self.native_tools = native_tools
        self.tool_role = tool_role

    def renderer(self, tools: list[dict[str, Any]]) -> Render:
        """The template with this request's tools bound (``None`` unless native tools are used)."""
        native = tools if self.native_tools and tools else None
        return lambda messages, add_generation_prompt: self._render(messages, native, add_generation_prompt)

    def prepare(self, request: PolicyRequest) -> Prompt:
        """The prompt for a request: the rendered chat, or ``prefix_token_ids`` plus the new turns.

        When the template cannot be continued (:func:`continuation_text` gives
        ``None``) the whole chat is rendered and ``prefix_reused`` is false.

        Raises:
            TypeError / ValueError: a malformed request or prefix.
        """
        check_request(request)
        messages = prepare_messages(request.messages, request.tools, self.native_tools, self.tool_role)
        render = self.renderer(request.tools)
        prefix = request.prefix_token_ids
        if prefix is not None:
            self.check_ids(prefix, "prefix_token_ids", allow_empty=True)
            generated_end = self.decode([prefix[-1]]) if prefix and prefix[-1] in self.eos_ids else ""
            delta = continuation_text(render, messages, generated_end)
            if delta is not None:
                ids = list(prefix) + self.encode(delta)
                return Prompt(request, ids, prompt_opens_thinking(self.decode(ids[-32:])), prefix_reused=True)
        text = render(messages, True)
        return Prompt(request, self.encode(text), prompt_opens_thinking(text[-200:]))

    def raw(self, ids: list[int], sampling: SamplingParams) -> Prompt:
        """A prompt given as token ids (no chat template), for raw completions.

        Raises:
            ValueError: empty, or ids outside the vocabulary.
        """
        self.check_ids(ids, "a prompt")
        request = PolicyRequest([], sampling=sampling)
        check_request(request)
        return Prompt(request, list(ids))

    def check_ids(self, ids: list[int], what: str, allow_empty: bool = False) -> None:
        """Raise ``ValueError`` unless ``ids`` is a list of token ids in the vocabulary."""
        if (
            not isinstance(ids, (list, tuple))
            or (not ids and not allow_empty)
            or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in ids)
        ):
            raise ValueError(
                f"{what} must be a {'' if allow_empty else 'non-empty '}list of ints in [0, {self.vocab_size})"
            )


def hf_chat_prompter(
    tokenizer: Any, chat_template: str | None, native_tools: bool | None, eos_ids: set[int]
) -> ChatPrompter:
    """A :class:`ChatPrompter` for a transformers tokenizer (also what vLLM's ``get_tokenizer()`` returns).

    Raises:
        ValueError: neither the tokenizer nor ``chat_template`` has a chat template.
    """
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError("the tokenizer has no chat template; pass chat_template=")

    def render(messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=template, add_generation_prompt=add_generation_prompt, tokenize=False
        )

    return ChatPrompter(
        render,
        encode=lambda text: list(tokenizer.encode(text, add_special_tokens=False)),
        decode=lambda ids: tokenizer.decode(ids),
        eos_ids=eos_ids,
        vocab_size=len(tokenizer),
        native_tools=template_supports_tools(template) if native_tools is None else native_tools,
        tool_role=template_has_tool_role(template),
    )


def eos_token_ids(*sources: Any) -> set[int]:
    """The ``eos_token_id`` values (int or list) found on configs and tokenizers.

    Raises:
        ValueError: none defines one.
    """
    ids: set[int] = set()
    for source in sources:
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the model and tokenizer define no eos_token_id; set tokenizer.eos_token")
    return ids
