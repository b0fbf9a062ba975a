"""What each endpoint of ``llmgym serve`` does with a request: validate it, generate, build the response.

Holds one coroutine per route, called by the thin endpoints of
:func:`~llmgym.wrappers.server.app.create_app` with the app's
:class:`~llmgym.wrappers.server.backend.ServedModel`:
:func:`chat_completions`, :func:`completions`, :func:`models`,
:func:`load_lora_adapter` and :func:`unload_lora_adapter`. A request is read
and validated here (:func:`~llmgym.wrappers.server.protocol.parse_body`; a bad
one is an :class:`~llmgym.wrappers.server.protocol.APIError`), turned into the
policy's request and sampling settings, and generated while the client is
watched: a client that disconnects cancels its own generations (a 499), no one
else's. A request's generations (prompts x ``n``) are bounded in number and fed
to the model a batch at a time
(:meth:`~llmgym.wrappers.server.backend.ServedModel.generate_all`), so a big
request does not keep the others waiting. The bodies and streams come from
:mod:`~llmgym.wrappers.server.responses`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from llmgym.policy import Generation, PolicyRequest, SamplingParams
from llmgym.wrappers.server import responses
from llmgym.wrappers.server.backend import ServedModel
from llmgym.wrappers.server.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    LoadLoRARequest,
    NamedToolChoice,
    UnloadLoRARequest,
    flatten_content,
    parse_body,
)

__all__ = [
    "chat_completions",
    "completions",
    "models",
    "load_lora_adapter",
    "unload_lora_adapter",
    "DEFAULT_MAX_TOKENS",
]

#: ``max_tokens`` when a request gives none.
DEFAULT_MAX_TOKENS = 512


def models(backend: ServedModel) -> dict[str, Any]:
    """``GET /v1/models``: the served model, then each loaded LoRA adapter (its ``parent`` the model)."""
    created = int(time.time())
    cards = [
        {
            "id": backend.model_name,
            "object": "model",
            "created": created,
            "owned_by": "llmgym",
            "root": backend.model_name,
            "parent": None,
        }
    ]
    cards += [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "llmgym",
            "root": path,
            "parent": backend.model_name,
        }
        for name, path in backend.adapters.items()
    ]
    return {"object": "list", "data": cards}


async def chat_completions(backend: ServedModel, request: Any, enable_auto_tool_choice: bool) -> Any:
    """``POST /v1/chat/completions``: a chat completion, or its event stream.

    Raises:
        APIError: a request this server refuses (400), an unknown model (404), a client gone (499).
    """
    body = parse_body(await _read_body(request), ChatCompletionRequest)
    adapter = backend.resolve_model(body.model)
    if body.top_logprobs and not body.logprobs:  # as vLLM; silently ignoring it would hide the mistake
        raise APIError(400, "When using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    if body.tools and body.tool_choice != "none" and not enable_auto_tool_choice:
        raise APIError(
            400,
            '"auto" tool choice requires --enable-auto-tool-choice; this server does not parse tool calls.',
            "tools",
        )
    if (body.logprobs or body.return_token_ids) and not backend.policy.returns_tokens:
        raise APIError(
            400,
            f"The {backend.policy.name} policy does not return token ids or log-probs; "
            "ask without logprobs and return_token_ids.",
            "logprobs",
        )
    backend.check_choices(1, body.n)
    policy_request, parse_tools = _policy_request(body)
    if (body.max_completion_tokens or body.max_tokens) is not None:
        # unset: DEFAULT_MAX_TOKENS, which generation stops short of where the context ends (as vLLM's default)
        backend.check_max_tokens(policy_request.sampling.max_tokens)
    top = (body.top_logprobs or 0) if body.logprobs else 0
    starts = [
        functools.partial(backend.generate, _with_seed(policy_request, _nth_seed(body.seed, i)), adapter, top)
        for i in range(body.n)
    ]
    generations = await _run_all(request, backend, starts)
    response_id = f"chatcmpl-{uuid.uuid4().hex}"
    name = body.model or backend.model_name
    if body.stream:
        return responses.event_stream(responses.chat_stream(backend, body, generations, parse_tools, response_id, name))
    return responses.chat_response(backend, body, generations, parse_tools, response_id, name)


async def completions(backend: ServedModel, request: Any) -> Any:
    """``POST /v1/completions``: text or token-id prompts continued (or, with ``echo``, scored), or the event stream.

    Raises:
        APIError: a request this server refuses (400), an unknown model (404), a client gone (499).
    """
    body = parse_body(await _read_body(request), CompletionRequest)
    adapter = backend.resolve_model(body.model)
    if body.max_tokens == 0 and not body.echo:  # vLLM: "max_tokens must be at least 1"
        raise APIError(
            400,
            "max_tokens must be at least 1; 0 is only allowed with echo (the prompt is scored, nothing is generated).",
            "max_tokens",
        )
    backend.check_choices(len(body.prompts()), body.n)  # before tokenizing what may be thousands of prompts
    prompts = [backend.encode(prompt) if isinstance(prompt, str) else list(prompt) for prompt in body.prompts()]
    sampling = _sampling(body, body.max_tokens)
    samplings = [_fitted(backend, sampling, len(prompt_ids), body.max_tokens is None) for prompt_ids in prompts]
    score_prompt = body.echo and body.logprobs is not None
    starts = [
        functools.partial(
            backend.complete,
            prompt_ids,
            _seeded(fitted, _nth_seed(body.seed, i)),
            adapter,
            body.logprobs or 0,
            score_prompt,
        )
        for prompt_ids, fitted in zip(prompts, samplings)
        for i in range(body.n)
    ]
    generations = await _run_all(request, backend, starts)
    response_id = f"cmpl-{uuid.uuid4().hex}"
    name = body.model or backend.model_name
    prompt_tokens = sum(len(prompt_ids) for prompt_ids in prompts)
    if body.stream:
        return responses.event_stream(
            responses.completion_stream(backend, body, generations, prompt_tokens, response_id, name)
        )
    return responses.completion_response(backend, body, generations, prompt_tokens, response_id, name)


async def load_lora_adapter(backend: ServedModel, request: Any) -> Any:
    """``POST /v1/load_lora_adapter``: load (or, with ``load_inplace``, replace) an adapter under a name."""
    from starlette.responses import PlainTextResponse

    body = parse_body(await _read_body(request), LoadLoRARequest)
    await backend.load_adapter(body.lora_name, body.lora_path, replace=body.load_inplace)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")


async def unload_lora_adapter(backend: ServedModel, request: Any) -> Any:
    """``POST /v1/unload_lora_adapter``: remove an adapter (after the batch using it)."""
    from starlette.responses import PlainTextResponse

    body = parse_body(await _read_body(request), UnloadLoRARequest)
    await backend.unload_adapter(body.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")


def _sampling(body: Any, max_tokens: int | None) -> SamplingParams:
    return SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,  # 0: echo only (completions)
        seed=body.seed,
        stop=body.stop_list(),
    )


def _fitted(backend: ServedModel, sampling: SamplingParams, prompt_tokens: int, default: bool) -> SamplingParams:
    """``sampling`` for one completion prompt: a ``max_tokens`` the client left unset stops where the context
    ends (as vLLM's default), one it set must fit the context.

    Raises:
        APIError: 400 naming ``max_tokens``: the set one does not fit, or the prompt fills the context.
    """
    if default and backend.max_model_len is not None:
        room = max(1, min(sampling.max_tokens, backend.max_model_len - prompt_tokens))
        if room != sampling.max_tokens:
            sampling = dataclasses.replace(sampling, max_tokens=room, stop=list(sampling.stop))
    backend.check_max_tokens(sampling.max_tokens, prompt_tokens)
    return sampling


def _seeded(sampling: SamplingParams, seed: int | None) -> SamplingParams:
    if seed == sampling.seed:
        return sampling
    return dataclasses.replace(sampling, seed=seed, stop=list(sampling.stop))


def _with_seed(request: PolicyRequest, seed: int | None) -> PolicyRequest:
    return PolicyRequest(request.messages, request.tools, _seeded(request.sampling, seed), request.prefix_token_ids)


def _policy_request(body: ChatCompletionRequest) -> tuple[PolicyRequest, bool]:
    """The policy's request, and whether to read tool calls out of the answer."""
    messages = []
    for message in body.messages:
        item: dict[str, Any] = {
            "role": "system" if message.role == "developer" else message.role,
            "content": flatten_content(message.content),
        }
        if message.tool_calls:
            item["tool_calls"] = message.tool_calls
        for key in ("name", "tool_call_id"):
            if getattr(message, key):
                item[key] = getattr(message, key)
        messages.append(item)
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools or []]
    choice = body.tool_choice
    if choice not in (None, "none", "auto") and not tools:  # as OpenAI and vLLM: nothing to require or name
        raise APIError(400, "tool_choice 'required' or a named function needs tools.", "tool_choice")
    if isinstance(choice, NamedToolChoice):
        wanted = choice.function.name
        tools = [t for t in tools if t["function"]["name"] == wanted]
        if not tools:
            raise APIError(400, f"tool_choice names a function that is not in tools: {wanted!r}.", "tool_choice")
    elif choice == "none":
        tools = []
    sampling = _sampling(body, body.max_completion_tokens or body.max_tokens)
    return PolicyRequest(messages=messages, tools=tools, sampling=sampling), bool(tools)


def _nth_seed(seed: int | None, i: int) -> int | None:
    """The seed of a prompt's ``i``-th choice: ``seed + i``, so each choice samples differently but reproducibly."""
    return None if seed is None else seed + i


async def _run_all(
    request: Any, backend: ServedModel, starts: list[Callable[[], Awaitable[Generation]]]
) -> list[Generation]:
    """Run one request's generations (see :meth:`ServedModel.generate_all`), in order; drop them all if the
    client leaves.

    Raises:
        APIError: 499 when the client disconnects; a generation's own error as it is.
    """
    generations = asyncio.ensure_future(backend.generate_all(starts))
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({generations, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if generations.done():
            return generations.result()
        raise APIError(499, "The client closed the request.")
    finally:
        watcher.cancel()
        generations.cancel()


async def _read_body(request: Any) -> bytes:
    from starlette.requests import ClientDisconnect

    try:
        return await request.body()
    except ClientDisconnect:
        raise APIError(499, "The client closed the request before sending its body.") from None


async def _wait_disconnect(request: Any) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(0.1)
