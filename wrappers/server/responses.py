"""The bodies and event streams of ``llmgym serve``'s responses, built from the policy's generations.

Holds :func:`chat_response` and :func:`chat_stream` (``/v1/chat/completions``),
:func:`completion_response` and :func:`completion_stream` (``/v1/completions``),
and :func:`event_stream`, the ``text/event-stream`` response around a stream.
Tool calls in a reply come back as OpenAI ``tool_calls``; logprobs blocks are
built in the chat or the legacy completions format
(:mod:`~llmgym.wrappers.server.protocol`); a stream sends one chunk per token
when the tokens decode to the reply's text. Whatever can refuse a request (a
policy without log-probs, ``echo`` on a backend that cannot score prompts) is
computed before the first chunk, so a refusal is a 4xx, not a broken stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from llmgym.policy import Generation
from llmgym.wrappers.server.backend import ServedModel
from llmgym.wrappers.server.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    assistant_reply,
    chat_logprobs,
    completion_logprobs,
    usage,
)

__all__ = ["chat_response", "chat_stream", "completion_response", "completion_stream", "event_stream"]


def _reply(generation: Generation, parse_tools: bool) -> tuple[dict[str, Any], bool]:
    message, called = assistant_reply(
        generation.message.get("content") or "", parse_tools, generation.message.get("tool_calls")
    )
    if generation.message.get("reasoning_content"):
        message["reasoning_content"] = generation.message["reasoning_content"]
    return message, called


def _token_fields(backend: ServedModel, generation: Generation, as_ids: bool, top: int) -> dict[str, Any]:
    """The chat ``logprobs`` block of a generation."""
    _check_logprobs(generation)
    alternatives = generation.metadata.get("top_logprobs") if top else None
    return chat_logprobs(generation.token_ids, generation.logprobs, alternatives, backend.token_text, as_ids)


def _completion_fields(backend: ServedModel, body: CompletionRequest, generation: Generation) -> dict[str, Any]:
    """The legacy ``logprobs`` block of a completion choice; with ``echo`` it covers prompt + completion."""
    _check_logprobs(generation)
    ids, logprobs = list(generation.token_ids), list(generation.logprobs)
    tops = list(generation.metadata.get("top_logprobs") or [{} for _ in ids]) if body.logprobs else None
    if body.echo:
        if "prompt_logprobs" not in generation.metadata:
            raise APIError(400, "This backend does not score prompts; ask without echo or without logprobs.", "echo")
        prompt = list(generation.prompt_token_ids or [])
        ids, logprobs = prompt + ids, generation.metadata["prompt_logprobs"] + logprobs
        if tops is not None:
            tops = generation.metadata["prompt_top_logprobs"] + tops
    return completion_logprobs(ids, logprobs, tops, backend.token_text, bool(body.return_tokens_as_token_ids))


def _check_logprobs(generation: Generation) -> None:
    if generation.token_ids is None or generation.logprobs is None:
        raise APIError(400, "This backend does not return log-probs; ask without logprobs.", "logprobs")


def _block_slice(block: dict[str, Any] | None, start: int, stop: int | None = None) -> dict[str, Any] | None:
    """Positions ``start:stop`` of a logprobs block (every field of both formats is a per-token list)."""
    if block is None:
        return None
    return {key: None if value is None else value[start:stop] for key, value in block.items()}


def chat_response(
    backend: ServedModel,
    body: ChatCompletionRequest,
    generations: list[Generation],
    parse_tools: bool,
    response_id: str,
    name: str,
) -> dict[str, Any]:
    choices = []
    for index, generation in enumerate(generations):
        message, called = _reply(generation, parse_tools)
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "logprobs": _token_fields(
                backend, generation, bool(body.return_tokens_as_token_ids), body.top_logprobs or 0
            )
            if body.logprobs
            else None,
            "finish_reason": "tool_calls" if called else generation.finish_reason,
        }
        if body.return_token_ids:
            choice["token_ids"] = generation.token_ids
        choices.append(choice)
    response: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": choices,
        "usage": _usage(generations),
    }
    if body.return_token_ids:
        response["prompt_token_ids"] = generations[0].prompt_token_ids
    return response


def _usage(generations: list[Generation]) -> dict[str, int] | None:
    """The request's token counts; ``None`` (JSON null, as OpenAI's schema allows) when the policy has no tokens.

    A policy without a tokenizer (``--backend scripted``) reports no token ids:
    a count of 0 would read as "generated nothing", so the counts are left unknown.
    """
    prompt = generations[0].prompt_token_ids
    if prompt is None or any(g.token_ids is None for g in generations):
        return None
    return usage(len(prompt), sum(len(g.token_ids or []) for g in generations))


def event_stream(chunks: Iterator[str]) -> Any:
    """A ``text/event-stream`` response of ``chunks``, the first made now: the chunk builders compute
    whatever can refuse the request before their first chunk, so a refusal is a 4xx, not a broken stream.

    The stream yields to the event loop between chunks, so uvicorn notices a client that has gone and
    Starlette ends the stream within a chunk or two. Without the yield every chunk goes out in one run
    of the loop, and each write to the dead socket logs asyncio's "socket.send() raised exception.".
    """
    from starlette.responses import StreamingResponse

    first = next(chunks)

    async def paced() -> AsyncIterator[str]:
        yield first
        for chunk in chunks:
            await asyncio.sleep(0)
            yield chunk

    return StreamingResponse(paced(), media_type="text/event-stream")


class _Chunks:
    """The ``data:`` lines of one stream, all with the same id, object, creation time and model.

    As OpenAI: with ``stream_options.include_usage`` every chunk has ``"usage": null``, and
    a last one with no choices carries the usage.
    """

    def __init__(self, response_id: str, object_name: str, model: str, stream_options: Any) -> None:
        self.head = {"id": response_id, "object": object_name, "created": int(time.time()), "model": model}
        self.include_usage = bool(stream_options and stream_options.include_usage)

    def __call__(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        data = {**self.head, "choices": choices, **({"usage": None} if self.include_usage else {}), **extra}
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def chat_stream(
    backend: ServedModel,
    body: ChatCompletionRequest,
    generations: list[Generation],
    parse_tools: bool,
    response_id: str,
    name: str,
) -> Iterator[str]:
    chunk = _Chunks(response_id, "chat.completion.chunk", name, body.stream_options)
    as_ids = bool(body.return_tokens_as_token_ids)
    replies = [_reply(generation, parse_tools) for generation in generations]
    # built before the first chunk, so what refuses the request is a 400
    blocks = [
        _token_fields(backend, generation, as_ids, body.top_logprobs or 0) if body.logprobs and not called else None
        for generation, (_, called) in zip(generations, replies)
    ]
    for index, (generation, (message, called), block) in enumerate(zip(generations, replies, blocks)):
        first_extra = {"prompt_token_ids": generation.prompt_token_ids} if body.return_token_ids and index == 0 else {}
        yield chunk(
            [{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
            **first_extra,
        )
        if message.get("reasoning_content"):
            yield chunk(
                [{"index": index, "delta": {"reasoning_content": message["reasoning_content"]}, "finish_reason": None}]
            )
        if called:
            # Tool calls are known only once the whole text is there: prose first, then the calls.
            if message.get("content"):
                yield chunk([{"index": index, "delta": {"content": message["content"]}, "finish_reason": None}])
            calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            yield chunk([{"index": index, "delta": {"tool_calls": calls}, "finish_reason": None}])
        else:
            for piece in _pieces(backend, generation, block):
                if not body.return_token_ids:
                    piece.pop("token_ids", None)
                yield chunk([{"index": index, "finish_reason": None, **piece}])
        final: dict[str, Any] = {
            "index": index,
            "delta": {},
            "finish_reason": "tool_calls" if called else generation.finish_reason,
        }
        if called and body.return_token_ids:
            final["token_ids"] = generation.token_ids
        yield chunk([final])
    if chunk.include_usage:
        yield chunk([], usage=_usage(generations))
    yield "data: [DONE]\n\n"


def _pieces(backend: ServedModel, generation: Generation, block: dict[str, Any] | None) -> list[dict]:
    """One delta per generated token when the tokens decode to the reply's text, else one delta for all.

    ``block`` (chat or completion format, one entry per generated token) is split among the deltas.
    """
    text = generation.message.get("content") or ""
    ids = generation.token_ids or []
    deltas = _token_deltas(backend, ids)
    if not ids or "".join(deltas) != text:
        piece: dict[str, Any] = {"delta": {"content": text}, "token_ids": ids or None}
        if block is not None:
            piece["logprobs"] = block
        return [piece] if text or ids else []
    pieces = []
    for i, (token_id, delta) in enumerate(zip(ids, deltas)):
        piece = {"delta": {"content": delta}, "token_ids": [token_id]}
        if block is not None:
            piece["logprobs"] = _block_slice(block, i, i + 1)
        pieces.append(piece)
    return pieces


def _token_deltas(backend: ServedModel, ids: list[int]) -> list[str]:
    """The text each token adds, decoding a few tokens at a time (vLLM's and TGI's incremental detokenization).

    Each step decodes the window since the token before the last emitted one, with and without the
    new token: linear in the reply, where decoding every prefix took seconds for a few thousand tokens.
    A token that ends inside a character (``"\ufffd"``) adds ``""`` until the character is complete.
    """
    deltas: list[str] = []
    start = emitted = 0  # the window starts at ids[start]; ids[:emitted] are in the deltas
    for i in range(len(ids)):
        before = backend.decode(ids[start:emitted])
        after = backend.decode(ids[start : i + 1])
        if len(after) > len(before) and (not after.endswith("\ufffd") or i == len(ids) - 1):
            deltas.append(after[len(before) :])
            start, emitted = emitted, i + 1
        else:
            deltas.append("")
    return deltas


def completion_response(
    backend: ServedModel,
    body: CompletionRequest,
    generations: list[Generation],
    prompt_tokens: int,
    response_id: str,
    name: str,
) -> dict[str, Any]:
    choices = []
    for index, generation in enumerate(generations):
        text = generation.message.get("content") or ""
        if body.echo:
            text = backend.decode(generation.prompt_token_ids or [], special=True) + text
        choice: dict[str, Any] = {
            "index": index,
            "text": text,
            "logprobs": _completion_fields(backend, body, generation) if body.logprobs is not None else None,
            "finish_reason": generation.finish_reason,
        }
        if body.return_token_ids:
            choice["prompt_token_ids"] = generation.prompt_token_ids
            choice["token_ids"] = generation.token_ids
        choices.append(choice)
    return {
        "id": response_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": name,
        "choices": choices,
        "usage": _completion_usage(generations, prompt_tokens),
    }


def _completion_usage(generations: list[Generation], prompt_tokens: int) -> dict[str, int] | None:
    if any(g.token_ids is None for g in generations):  # a policy without tokens: unknown, as in _usage
        return None
    return usage(prompt_tokens, sum(len(g.token_ids or []) for g in generations))


def completion_stream(
    backend: ServedModel,
    body: CompletionRequest,
    generations: list[Generation],
    prompt_tokens: int,
    response_id: str,
    name: str,
) -> Iterator[str]:
    chunk = _Chunks(response_id, "text_completion", name, body.stream_options)
    # built before the first chunk, so what refuses the request is a 400
    blocks = [
        _completion_fields(backend, body, generation) if body.logprobs is not None else None
        for generation in generations
    ]
    for index, (generation, block) in enumerate(zip(generations, blocks)):
        echoed = len(generation.prompt_token_ids or []) if body.echo else 0
        if body.echo:  # the prompt first, with its own logprobs block (the prompt's positions of the full one)
            yield chunk(
                [
                    {
                        "index": index,
                        "text": backend.decode(generation.prompt_token_ids or [], special=True),
                        "logprobs": _block_slice(block, 0, echoed),
                        "finish_reason": None,
                    }
                ]
            )
        for piece in _pieces(backend, generation, _block_slice(block, echoed)):
            choice: dict[str, Any] = {
                "index": index,
                "text": piece["delta"]["content"],
                "logprobs": piece.get("logprobs"),
                "finish_reason": None,
            }
            if body.return_token_ids:
                choice["token_ids"] = piece.get("token_ids")
            yield chunk([choice])
        yield chunk([{"index": index, "text": "", "logprobs": None, "finish_reason": generation.finish_reason}])
    if chunk.include_usage:
        yield chunk([], usage=_completion_usage(generations, prompt_tokens))
    yield "data: [DONE]\n\n"
