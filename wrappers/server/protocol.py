"""The wire format of ``llmgym serve``: requests, errors and responses, as vLLM's OpenAI server has them.

Holds the pydantic request models (:class:`ChatCompletionRequest`,
:class:`CompletionRequest`, :class:`LoadLoRARequest`,
:class:`UnloadLoRARequest`), :class:`APIError` with its OpenAI-style body
``{"error": {"message", "type", "param", "code"}}``, :func:`parse_body`
(raw bytes to a validated request, or a 400 naming the bad field), and the
builders of chat messages, logprobs and usage blocks. Unknown request fields
are accepted and ignored, as OpenAI and vLLM do.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from llmgym.messages import Message
from llmgym.parsing import parse_text_tool_calls

__all__ = [
    "APIError",
    "ChatCompletionRequest",
    "CompletionRequest",
    "LoadLoRARequest",
    "NamedToolChoice",
    "UnloadLoRARequest",
    "parse_body",
    "MAX_JSON_DEPTH",
    "flatten_content",
    "assistant_reply",
    "chat_logprobs",
    "completion_logprobs",
    "usage",
]

#: How deeply a request body may nest objects and lists (tool parameter schemas rarely pass 20).
MAX_JSON_DEPTH = 100

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class APIError(Exception):
    """An error answered as ``{"error": {...}}`` with an HTTP status.

    Example:
        >>> APIError(404, "The model 'x' does not exist.", param="model").body()["error"]["type"]
        'NotFoundError'
    """

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body."""
        kind = _ERROR_TYPES.get(self.status, "BadRequestError" if self.status < 500 else "InternalServerError")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", strict=False)


def _null_is_default(cls: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """A ``mode="before"`` validator: OpenAI's schema makes ``n``, ``stream``, ``logprobs``, ``echo``... nullable,
    and an explicit ``null`` means the default."""
    return cls.model_fields[info.field_name].default if value is None else value


class ChatMessageIn(_Request):
    """One message of a chat request (OpenAI format)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ToolFunction(_Request):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolIn(_Request):
    type: Literal["function"] = "function"
    function: ToolFunction


class _ChosenFunction(_Request):
    name: str


class NamedToolChoice(_Request):
    """``tool_choice`` naming one function: ``{"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"] = "function"
    function: _ChosenFunction


class StreamOptions(_Request):
    include_usage: bool | None = False


class _Sampling(_Request):
    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)  # int64, as vLLM
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None

    _defaults = field_validator("n", "stream", mode="before")(_null_is_default)

    def stop_list(self) -> list[str]:
        """``stop`` as a list."""
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessageIn] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[ToolIn] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    _chat_defaults = field_validator("logprobs", mode="before")(_null_is_default)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: ``prompt`` is text or token ids, or a list of either (one choice set per prompt).

    ``max_tokens`` may be 0 with ``echo`` (as in OpenAI's legacy API and vLLM):
    the prompt comes back, scored with ``logprobs``, and nothing is generated.
    """

    prompt: str | list[int] | list[str] | list[list[int]] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=0)
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False

    _completion_defaults = field_validator("echo", mode="before")(_null_is_default)

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each text or token ids.

        Example:
            >>> CompletionRequest(prompt=[[1, 2], [3]]).prompts(), CompletionRequest(prompt="hi").prompts()
            ([[1, 2], [3]], ['hi'])
        """
        if isinstance(self.prompt, str) or all(isinstance(item, int) for item in self.prompt):
            return [self.prompt]
        return list(self.prompt)


class LoadLoRARequest(_Request):
    """``POST /v1/load_lora_adapter``."""

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False

    _lora_defaults = field_validator("load_inplace", mode="before")(_null_is_default)


class UnloadLoRARequest(_Request):
    """``POST /v1/unload_lora_adapter``."""

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None


def parse_body(raw: bytes, model: type[BaseModel]) -> Any:
    """Validate a raw JSON body against ``model``.

    Raises:
        APIError: 400 when the body is not JSON, not an object, nests deeper than
            :data:`MAX_JSON_DEPTH`, holds a string that is not Unicode text, or a
            field is missing or of the wrong type (``param`` names the field).

    Example:
        >>> parse_body(b'{"lora_name": "a", "lora_path": "/tmp/a"}', LoadLoRARequest).lora_name
        'a'
        >>> try:
        ...     parse_body(b'{"lora_name": 3}', LoadLoRARequest)
        ... except APIError as err:
        ...     print(err.status, err.param)
        400 lora_name
    """
    try:
        data = json.loads(raw)
    except RecursionError:  # json's decoder gives up near Python's recursion limit (~1,000 levels)
        raise APIError(400, f"The request body nests deeper than {MAX_JSON_DEPTH} levels.") from None
    except ValueError as err:  # also bytes that are not UTF-8, and integers longer than Python reads
        raise APIError(400, f"The request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise APIError(400, f"The request body must be a JSON object, got {type(data).__name__}.")
    _check_json(data)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        raise APIError(400, f"Invalid request: {param}: {first['msg']}", param=param) from None


def _check_json(data: Any) -> None:
    """Refuse JSON that later steps cannot take: nesting past :data:`MAX_JSON_DEPTH` (validation, the chat
    template and the response encoder all recurse) and strings with lone surrogates (``"\\ud800"`` parses,
    but is not text: no tokenizer or UTF-8 encoder takes it).

    Raises:
        APIError: 400.
    """
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise APIError(
                    400,
                    'The request body has a string with a lone surrogate escape (e.g. "\\ud800"); '
                    "send valid Unicode text.",
                ) from None
        elif isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise APIError(400, f"The request body nests deeper than {MAX_JSON_DEPTH} levels.")
            items = [*value, *value.values()] if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)


def flatten_content(content: str | list[dict[str, Any]] | None) -> str:
    """The text of a message's ``content`` (text parts joined; other parts are refused).

    Raises:
        APIError: 400 for a non-text content part.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise APIError(400, f"Only text content parts are supported, got {part.get('type')!r}.", "messages")
        texts.append(part["text"])
    return "".join(texts)


def assistant_reply(text: str, parse_tools: bool, native_calls: list[dict[str, Any]] | None) -> tuple[Message, bool]:
    """The response message for generated ``text`` and whether it calls tools.

    With ``parse_tools``, ``<tool_call>`` blocks become OpenAI ``tool_calls``
    and the prose around them stays as ``content`` (``None`` when empty), as
    vLLM's tool parsers return them. Blocks that do not parse stay in the text.

    Example:
        >>> message, called = assistant_reply(
        ...     'Hm. <tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>', True, None)
        >>> called, message["content"], message["tool_calls"][0]["function"]["name"]
        (True, 'Hm.', 'guess')
    """
    if native_calls:
        return {"role": "assistant", "content": text or None, "tool_calls": native_calls}, True
    if parse_tools:
        prose, calls, errors = parse_text_tool_calls(text, id_prefix=f"chatcmpl-tool-{uuid.uuid4().hex[:12]}")
        if calls and not errors:
            return {
                "role": "assistant",
                "content": prose or None,
                "tool_calls": [call.to_openai() for call in calls],
            }, True
    return {"role": "assistant", "content": text}, False


def chat_logprobs(
    token_ids: list[int],
    logprobs: list[float],
    top: list[dict[int, float]] | None,
    token_text: Any,
    as_ids: bool,
) -> dict[str, Any]:
    """The ``logprobs`` block of a chat choice (``{"content": [...]}``)."""

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = token_text(token_id)
        return {
            "token": f"token_id:{token_id}" if as_ids else text,
            "logprob": max(float(logprob), -9999.0),
            "bytes": list(text.encode("utf-8")),
        }

    content = []
    for index, (token_id, logprob) in enumerate(zip(token_ids, logprobs)):
        item = entry(token_id, logprob)
        alternatives = top[index] if top else {}
        item["top_logprobs"] = [entry(t, lp) for t, lp in alternatives.items()]
        content.append(item)
    return {"content": content}


def completion_logprobs(
    token_ids: list[int],
    logprobs: list[float | None],
    top: list[dict[int, float] | None] | None,
    token_text: Any,
    as_ids: bool,
) -> dict[str, Any]:
    """The legacy ``logprobs`` block of a completion choice, as OpenAI and vLLM build it.

    ``top_logprobs[i]`` holds the chosen token first, then its alternatives
    ``top[i]`` (so up to ``logprobs + 1`` entries; only the chosen token when
    ``top`` is ``None``). A position without a log-prob (the first token of an
    echoed prompt) has ``None`` in ``token_logprobs`` and ``top_logprobs``.
    ``text_offset`` counts characters from the first token's start.

    Example:
        >>> block = completion_logprobs([5, 7], [None, -0.5], [None, {8: -0.1, 7: -0.5}], lambda t: f"<{t}>", False)
        >>> block["token_logprobs"], block["top_logprobs"], block["text_offset"]
        ([None, -0.5], [None, {'<7>': -0.5, '<8>': -0.1}], [0, 3])
    """

    def name(token_id: int) -> str:
        return f"token_id:{token_id}" if as_ids else token_text(token_id)

    def clamp(logprob: float) -> float:
        return max(float(logprob), -9999.0)  # -inf is not JSON

    tokens = [name(t) for t in token_ids]
    offsets, position = [], 0
    for token_id in token_ids:
        offsets.append(position)
        position += len(token_text(token_id))
    tops: list[dict[str, float] | None] = []
    for index, (token_id, logprob) in enumerate(zip(token_ids, logprobs)):
        if logprob is None:
            tops.append(None)
            continue
        entry = {name(token_id): clamp(logprob)}
        for alternative, value in ((top[index] or {}) if top else {}).items():
            entry.setdefault(name(alternative), clamp(value))
        tops.append(entry)
    return {
        "tokens": tokens,
        "token_logprobs": [None if lp is None else clamp(lp) for lp in logprobs],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """An OpenAI ``usage`` block."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
