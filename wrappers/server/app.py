"""``llmgym serve``: any llmgym policy behind vLLM's OpenAI-compatible HTTP API.

Holds :func:`create_app` (the FastAPI app), :func:`serve` (run it with
uvicorn) and :func:`serve_in_thread`. What each endpoint does is in
:mod:`~llmgym.wrappers.server.routes`, the response bodies and streams in
:mod:`~llmgym.wrappers.server.responses`. Endpoints, as ``vllm serve`` has them:

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

Concurrent requests are batched, a big request's generations a batch at a
time so that it does not hold up the others, and a request may ask for at most
``max_choices_per_request`` generations (see :class:`~llmgym.wrappers.server.backend.ServedModel`).
Bad input gets a 4xx with an OpenAI-style error body and never takes the
server down; a bug gets a logged 500 with the same body, and either way the
client's kept-alive connection stays open. A client that disconnects only
loses its own request. Streaming sends the OpenAI chunk sequence once the
(batched) generation is done, one chunk per token, and stops within a chunk
or two when its client goes.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at runtime.
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from llmgym.policy import Policy
from llmgym.wrappers.server import routes
from llmgym.wrappers.server.backend import DEFAULT_MAX_CHOICES, ServedModel
from llmgym.wrappers.server.protocol import APIError

__all__ = ["create_app", "serve", "serve_in_thread"]

_INSTALL_HINT = 'llmgym serve needs fastapi and uvicorn: pip install "llmgym[serve]"'
_logger = logging.getLogger(__name__)


def create_app(
    policy_or_backend: Policy | ServedModel,
    model_name: str = "smollm2-135m",
    max_batch_size: int = 16,
    batch_wait_s: float = 0.005,
    enable_auto_tool_choice: bool = True,
    max_choices_per_request: int = DEFAULT_MAX_CHOICES,
) -> Any:
    """The FastAPI app serving a policy.

    Args:
        policy_or_backend: an llmgym :class:`~llmgym.policy.Policy`, or a
            :class:`~llmgym.wrappers.server.backend.ServedModel` already wrapping one.
        model_name: the name clients pass as ``model``.
        max_batch_size: most requests generated together, and most generations of one
            request submitted at a time.
        batch_wait_s: how long a batch waits for more requests to join.
        enable_auto_tool_choice: accept ``tools``; ``False`` refuses them with
            a 400, as ``vllm serve`` does without ``--enable-auto-tool-choice``
            (clients then fall back to the text protocol).
        max_choices_per_request: most generations (prompts x ``n``) one request may ask
            for; more is a 400.

    Raises:
        ImportError: fastapi is missing (names the extra to install).
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err

    backend = (
        policy_or_backend
        if isinstance(policy_or_backend, ServedModel)
        else ServedModel(policy_or_backend, model_name, max_batch_size, batch_wait_s, max_choices_per_request)
    )

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await backend.start()
        yield
        await backend.stop()

    app = FastAPI(title="llmgym serve", lifespan=lifespan)
    app.router.route_class = _answering_route()
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
        return routes.models(backend)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await routes.chat_completions(backend, request, enable_auto_tool_choice)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await routes.completions(backend, request)

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Any:
        return await routes.load_lora_adapter(backend, request)

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Any:
        return await routes.unload_lora_adapter(backend, request)

    return app


def _answering_route() -> type:
    """FastAPI's route class, answering errors itself: an :class:`APIError` with its status, anything else with a
    logged 500.

    An exception left to Starlette reaches its ServerErrorMiddleware, which sends the 500 and then
    re-raises (so servers can log it), and uvicorn closes the connection: the client's next request on
    its kept-alive connection would fail with "connection reset".
    """
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from fastapi.routing import APIRoute

    class Route(APIRoute):
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

    return Route


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
