"""``llmgym serve``: any llmgym policy behind vLLM's OpenAI-compatible HTTP API (imports as ``llmgym.wrappers.server``).

``from llmgym.wrappers.server import create_app, serve_in_thread`` is the entry
point; the modules, from the HTTP layer down to the model:

- ``app``: :func:`create_app` (the FastAPI app), :func:`serve`, :func:`serve_in_thread`.
- ``routes``: what each endpoint does with a request.
- ``responses``: the response bodies and event streams.
- ``protocol``: the wire format: request models, errors, logprobs and usage blocks.
- ``backend``: :class:`~llmgym.wrappers.server.backend.ServedModel`, the policy made
  servable: request batching, LoRA adapters, token helpers.
- ``complete``: raw ``/v1/completions`` on token ids, and prompt scoring.
- ``lora``: LoRA adapters loaded onto the served model through peft.

Needs the ``serve`` extra (fastapi, uvicorn) to run an app.
"""

from llmgym.wrappers.server.app import create_app, serve, serve_in_thread
from llmgym.wrappers.server.routes import DEFAULT_MAX_TOKENS

__all__ = ["create_app", "serve", "serve_in_thread", "DEFAULT_MAX_TOKENS"]
