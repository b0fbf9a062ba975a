"""``llmgym serve``: any llmgym policy behind vLLM's OpenAI-compatible HTTP API.

Holds :func:`create_app` (the FastAPI app) and :func:`serve` (run it with
uvicorn). Endpoints, as ``vllm serve`` has them:

- ``POST /v1/chat/completions``: chat with ``tools``/``tool_choice``
  (tools reach the policy, which renders them with its chat template or the
  text protocol; ``<tool_call>`` blocks in the output come back as OpenAI
  ``tool_calls`` with ``finish_reason="tool_calls"``), ``stream``,
  ``logprobs``/``top_logprobs``, ``n``, and vLLM's ``return_token_ids``
  (``prompt_token_ids`` on the response, ``token_ids`` on each choice) and
  ``return_tokens_as_token_ids`` (logprob tokens as ``"token_id:123"``).
- ``POST /v1/completions``: ``prompt`` as text or token ids, or a list of
  either (transformers and llama.cpp backends); ``echo`` with ``logprobs``
  scores the prompt too (the first prompt token's entries are ``null``), and
  ``max_tokens: 0`` with ``echo`` only scores it: what lm-evaluation-harness's
  ``local-completions`` model asks for log-likelihoods.
- ``GET /v1/models``, ``GET /health``.
- ``POST /v1/load_lora_adapter`` ``{lora_name, lora_path}`` and
  ``POST /v1/unload_lora_adapter`` ``{lora_name}`` (transformers backend):
  requests with ``model=<lora_name>`` then use the adapter.

Concurrent requests are batched (see :class:`~llmgym.wrappers.server_backend.ServedModel`).
Bad input gets a 4xx with an OpenAI-style error body and never takes the
server down; a bug gets a logged 500 with the same body, and either way the
client's kept-alive connection stays open. A client that disconnects only
loses its own request. Streaming sends the OpenAI chunk sequence once the
(batched) generation is done, one chunk per token, and stops within a chunk
or two when its client goes.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at runtime.
import asyncio
import dataclasses
import json
import logging
import threading
import time
import uuid
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.server_backend import ServedModel
from llmgym.wrappers.server_protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    LoadLoRARequest,
    NamedToolChoice,
    UnloadLoRARequest,
    assistant_reply,
    chat_logprobs,
    completion_logprobs,
    flatten_content,
    parse_body,
    usage,
)

__all__ = ["create_app", "serve", "serve_in_thread", "DEFAULT_MAX_TOKENS"]

#: ``max_tokens`` when a request gives none.
DEFAULT_MAX_TOKENS = 512
_INSTALL_HINT = 'llmgym serve needs fastapi and uvicorn: pip install "llmgym[serve]"'
_logger = logging.getLogger(__name__)


def create_app(
    policy_or_backend: Policy | ServedModel,
    model_name: str = "smollm2-135m",
    max_batch_size: int = 16,
    batch_wait_s: float = 0.005,
    enable_auto_tool_choice: bool = True,
) -> Any:
    """The FastAPI app serving a policy.

    Args:
        policy_or_backend: an llmgym :class:`~llmgym.policy.Policy`, or a
            :class:`~llmgym.wrappers.server_backend.ServedModel` already wrapping one.
        model_name: the name clients pass as ``model``.
        max_batch_size: most requests generated together.
        batch_wait_s: how long a batch waits for more requests to join.
        enable_auto_tool_choice: accept ``tools``; ``False`` refuses them with
            a 400, as ``vllm serve`` does without ``--enable-auto-tool-choice``
            (clients then fall back to the text protocol).

    Raises:
        ImportError: fastapi is missing (names the extra to install).
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, PlainTextResponse
        from fastapi.routing import APIRoute
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err

    class Route(APIRoute):
        """Answers errors itself: an :class:`APIError` with its status, anything else with a logged 500.

        An exception left to Starlette reaches its ServerErrorMiddleware, which sends the 500 and then
        re-raises (so servers can log it), and uvicorn closes the connection: the client's next request on
        its kept-alive connection would fail with "connection reset".
        """

        def get_route_handler(self) -> Any:
            handler = super().get_route_handler()

            async def answer(request: Request) -> Any:
                try:
                    return await handler(request)
                except APIError as err:
                    return JSONResponse(err.body(), status_code=err.status)
                except Exception as err:  # noqa: BLE001  a bug: logged, answered, and the server goes on
                    _logger.exception("%s %s failed", request.method, request.url.path)
                    error = APIError(500, f"Internal error: {type(err).__name__}: {err}")
                    return JSONResponse(error.body(), status_code=500)

            return answer

    backend = (
        policy_or_backend
        if isinstance(policy_or_backend, ServedModel)
        else ServedModel(policy_or_backend, model_name, max_batch_size, batch_wait_s)
    )

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await backend.start()
        yield
        await backend.stop()

    app = FastAPI(title="llmgym serve", lifespan=lifespan)
    app.router.route_class = Route
    app.state.backend = backend

    @app.exception_handler(404)
    async def not_found(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse(APIError(404, f"No route {request.method} {request.url.path}.").body(), status_code=404)

    @app.exception_handler(405)
    async def bad_method(request: Request, err: Exception) -> JSONResponse:
        error = APIError(405, f"Method {request.method} is not allowed on {request.url.path}.")
        return JSONResponse(error.body(), status_code=405)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        created = int(time.time())
        cards = [{"id": backend.model_name, "object": "model", "created": created, "owned_by": "llmgym",
                  "root": backend.model_name, "parent": None}]
        cards += [{"id": name, "object": "model", "created": created, "owned_by": "llmgym",
                   "root": path, "parent": backend.model_name} for name, path in backend.adapters.items()]
        return {"object": "list", "data": cards}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        body = parse_body(await _read_body(request), ChatCompletionRequest)
        adapter = backend.resolve_model(body.model)
        if body.top_logprobs and not body.logprobs:  # as vLLM; silently ignoring it would hide the mistake
            raise APIError(400, "When using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
        if body.tools and body.tool_choice != "none" and not enable_auto_tool_choice:
            raise APIError(400, '"auto" tool choice requires --enable-auto-tool-choice; this server does not '
                           "parse tool calls.", "tools")
        if (body.logprobs or body.return_token_ids) and not backend.policy.returns_tokens:
            raise APIError(400, f"The {backend.policy.name} policy does not return token ids or log-probs; "
                           "ask without logprobs and return_token_ids.", "logprobs")
        policy_request, parse_tools = _policy_request(body)
        if (body.max_completion_tokens or body.max_tokens) is not None:
            # unset: DEFAULT_MAX_TOKENS, which generation stops short of where the context ends (as vLLM's default)
            backend.check_max_tokens(policy_request.sampling.max_tokens)
        top = (body.top_logprobs or 0) if body.logprobs else 0
        generations = await _generate_n(request, body.n, body.seed, lambda seed: backend.generate(
            _with_seed(policy_request, seed), adapter, top))
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        name = body.model or backend.model_name
        if body.stream:
            return _event_stream(_chat_stream(backend, body, generations, parse_tools, response_id, name))
        return _chat_response(backend, body, generations, parse_tools, response_id, name)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = parse_body(await _read_body(request), CompletionRequest)
        adapter = backend.resolve_model(body.model)
        if body.max_tokens == 0 and not body.echo:  # vLLM: "max_tokens must be at least 1"
            raise APIError(400, "max_tokens must be at least 1; 0 is only allowed with echo (the prompt is scored, "
                           "nothing is generated).", "max_tokens")
        prompts = [backend.encode(prompt) if isinstance(prompt, str) else list(prompt) for prompt in body.prompts()]
        sampling = _sampling(body, body.max_tokens)
        samplings = [_fitted(backend, sampling, len(prompt_ids), body.max_tokens is None) for prompt_ids in prompts]
        score_prompt = body.echo and body.logprobs is not None
        generations = await _run_all(request, [
            backend.complete(prompt_ids, _seeded(fitted, None if body.seed is None else body.seed + i), adapter,
                             body.logprobs or 0, score_prompt)
            for prompt_ids, fitted in zip(prompts, samplings) for i in range(body.n)])
        response_id = f"cmpl-{uuid.uuid4().hex}"
        name = body.model or backend.model_name
        prompt_tokens = sum(len(prompt_ids) for prompt_ids in prompts)
        if body.stream:
            return _event_stream(
                _completion_stream(backend, body, generations, prompt_tokens, response_id, name))
        return _completion_response(backend, body, generations, prompt_tokens, response_id, name)

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Any:
        body = parse_body(await _read_body(request), LoadLoRARequest)
        await backend.load_adapter(body.lora_name, body.lora_path, replace=body.load_inplace)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Any:
        body = parse_body(await _read_body(request), UnloadLoRARequest)
        await backend.unload_adapter(body.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    return app


def serve(app: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Run ``app`` with uvicorn until interrupted (binds loopback by default)."""
    try:
        import uvicorn
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    uvicorn.run(app, host=host, port=port, log_level=log_level)


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn on a background thread; yields its ``/v1`` base URL.

    ``port=0`` takes a free port. The server stops when the block ends.

    Example:
        >>> from llmgym.wrappers.scripted import load_scripted
        >>> import httpx
        >>> with serve_in_thread(create_app(load_scripted("wordle"), "wordle")) as base_url:
        ...     httpx.get(f"{base_url}/models").json()["data"][0]["id"]
        'wordle'
    """
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="llmgym-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


# -- requests -----------------------------------------------------------------


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
        item: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role,
                                "content": flatten_content(message.content)}
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


def _reply(generation: Generation, parse_tools: bool) -> tuple[dict[str, Any], bool]:
    message, called = assistant_reply(
        generation.message.get("content") or "", parse_tools, generation.message.get("tool_calls"))
    if generation.message.get("reasoning_content"):
        message["reasoning_content"] = generation.message["reasoning_content"]
    return message, called


async def _generate_n(request: Any, n: int, seed: int | None, start: Any) -> list[Generation]:
    """Run ``n`` generations (seeds ``seed``, ``seed+1``... when seeded); drop them if the client leaves."""
    return await _run_all(request, [start(None if seed is None else seed + i) for i in range(n)])


async def _run_all(request: Any, generations: list[Any]) -> list[Generation]:
    """Await the ``generations`` (coroutines) together, in order; drop them all if the client leaves.

    Raises:
        APIError: 499 when the client disconnects; a generation's own error as it is.
    """
    tasks = [asyncio.ensure_future(generation) for generation in generations]
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        while True:
            await asyncio.wait({*tasks, watcher}, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task.done() and task.exception() is not None:
                    raise task.exception()
            if all(task.done() for task in tasks):
                return [task.result() for task in tasks]
            if watcher.done():
                raise APIError(499, "The client closed the request.")
    finally:
        watcher.cancel()
        for task in tasks:
            task.cancel()


async def _read_body(request: Any) -> bytes:
    from starlette.requests import ClientDisconnect

    try:
        return await request.body()
    except ClientDisconnect:
        raise APIError(499, "The client closed the request before sending its body.") from None


async def _wait_disconnect(request: Any) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(0.1)


# -- responses ----------------------------------------------------------------


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


def _chat_response(backend: ServedModel, body: ChatCompletionRequest, generations: list[Generation],
                   parse_tools: bool, response_id: str, name: str) -> dict[str, Any]:
    choices = []
    for index, generation in enumerate(generations):
        message, called = _reply(generation, parse_tools)
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "logprobs": _token_fields(backend, generation, bool(body.return_tokens_as_token_ids),
                                      body.top_logprobs or 0) if body.logprobs else None,
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


def _event_stream(chunks: Iterator[str]) -> Any:
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


def _chat_stream(backend: ServedModel, body: ChatCompletionRequest, generations: list[Generation],
                 parse_tools: bool, response_id: str, name: str) -> Iterator[str]:
    created = int(time.time())
    # as OpenAI: with include_usage every chunk has "usage": null, and a last one with no choices carries it
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        data = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": name,
                "choices": choices, **({"usage": None} if include_usage else {}), **extra}
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

    as_ids = bool(body.return_tokens_as_token_ids)
    replies = [_reply(generation, parse_tools) for generation in generations]
    blocks = [_token_fields(backend, generation, as_ids, body.top_logprobs or 0) if body.logprobs and not called
              else None for generation, (_, called) in zip(generations, replies)]  # 400s: before the first chunk
    for index, (generation, (message, called), block) in enumerate(zip(generations, replies, blocks)):
        first_extra = {"prompt_token_ids": generation.prompt_token_ids} if body.return_token_ids and index == 0 else {}
        yield chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                      "logprobs": None, "finish_reason": None}], **first_extra)
        if message.get("reasoning_content"):
            yield chunk([{"index": index, "delta": {"reasoning_content": message["reasoning_content"]},
                          "finish_reason": None}])
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
        final: dict[str, Any] = {"index": index, "delta": {}, "finish_reason":
                                 "tool_calls" if called else generation.finish_reason}
        if called and body.return_token_ids:
            final["token_ids"] = generation.token_ids
        yield chunk([final])
    if include_usage:
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
            deltas.append(after[len(before):])
            start, emitted = emitted, i + 1
        else:
            deltas.append("")
    return deltas


def _completion_response(backend: ServedModel, body: CompletionRequest, generations: list[Generation],
                         prompt_tokens: int, response_id: str, name: str) -> dict[str, Any]:
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
    return {"id": response_id, "object": "text_completion", "created": int(time.time()), "model": name,
            "choices": choices, "usage": _completion_usage(generations, prompt_tokens)}


def _completion_usage(generations: list[Generation], prompt_tokens: int) -> dict[str, int] | None:
    if any(g.token_ids is None for g in generations):  # a policy without tokens: unknown, as in _usage
        return None
    return usage(prompt_tokens, sum(len(g.token_ids or []) for g in generations))


def _completion_stream(backend: ServedModel, body: CompletionRequest, generations: list[Generation],
                       prompt_tokens: int, response_id: str, name: str) -> Iterator[str]:
    created = int(time.time())
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        data = {"id": response_id, "object": "text_completion", "created": created, "model": name,
                "choices": choices, **({"usage": None} if include_usage else {}), **extra}
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

    blocks = [_completion_fields(backend, body, generation) if body.logprobs is not None else None
              for generation in generations]  # 400s: before the first chunk
    for index, (generation, block) in enumerate(zip(generations, blocks)):
        echoed = len(generation.prompt_token_ids or []) if body.echo else 0
        if body.echo:  # the prompt first, with its own logprobs block (the prompt's positions of the full one)
            yield chunk([{"index": index, "text": backend.decode(generation.prompt_token_ids or [], special=True),
                          "logprobs": _block_slice(block, 0, echoed), "finish_reason": None}])
        for piece in _pieces(backend, generation, _block_slice(block, echoed)):
            choice: dict[str, Any] = {"index": index, "text": piece["delta"]["content"],
                                      "logprobs": piece.get("logprobs"), "finish_reason": None}
            if body.return_token_ids:
                choice["token_ids"] = piece.get("token_ids")
            yield chunk([choice])
        yield chunk([{"index": index, "text": "", "logprobs": None, "finish_reason": generation.finish_reason}])
    if include_usage:
        yield chunk([], usage=_completion_usage(generations, prompt_tokens))
    yield "data: [DONE]\n\n"
