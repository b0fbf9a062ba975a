"""`/v1/completions` on the llama.cpp backend, fast: a tiny random GGUF behind a real `llmgym serve`."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("fastapi")

from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy  # noqa: E402
from llmgym.wrappers.models import tiny_random_gguf  # noqa: E402
from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402


def test_token_id_prompt_gives_ids_and_logprobs():
    policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=256)
    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
            body = {"model": "tiny", "prompt": [1, 2, 3, 4], "max_tokens": 5, "temperature": 0,
                    "return_token_ids": True, "logprobs": 0}
            first = httpx.post(f"{base_url}/completions", json=body, timeout=60)
            again = httpx.post(f"{base_url}/completions", json=body, timeout=60)
            bad = httpx.post(f"{base_url}/completions", json={**body, "prompt": [10**9]}, timeout=60)
    finally:
        policy.close()
    assert first.status_code == 200, first.text
    choice = first.json()["choices"][0]
    assert 1 <= len(choice["token_ids"]) <= 5
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])
    assert again.json()["choices"][0]["token_ids"] == choice["token_ids"]  # greedy: the same continuation
    assert bad.status_code == 400 and "error" in bad.json()
