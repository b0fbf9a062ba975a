"""`llmgym serve` on the batched llama.cpp policy: concurrent requests join one running batch (tiny random GGUF)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("fastapi")

from llmgym.wrappers.llamacpp_batch import LlamaCppBatchPolicy  # noqa: E402
from llmgym.wrappers.models import tiny_random_gguf  # noqa: E402
from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402


def chat(seed: int, **extra) -> dict:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": f"episode {seed}"}],
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": seed,
        "logprobs": True,
        **extra,
    }


def test_concurrent_requests_are_decoded_together_and_match_requests_sent_alone():
    policy = LlamaCppBatchPolicy(tiny_random_gguf(seed=0), slots=4, n_ctx=256, weights="q8_0")  # batch-invariant

    async def send_all(base_url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            requests = [client.post(f"{base_url}/chat/completions", json=chat(i)) for i in range(4)]
            requests.append(
                client.post(
                    f"{base_url}/completions",
                    json={"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0, "logprobs": 2},
                )
            )
            return await asyncio.gather(*requests)

    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
            together = asyncio.run(send_all(base_url))
            widest = policy.widest_step
            alone = [httpx.post(f"{base_url}/chat/completions", json=chat(i), timeout=60) for i in range(4)]
            bad = httpx.post(f"{base_url}/chat/completions", json=chat(0, top_p=0), timeout=60)
    finally:
        policy.close()
    assert all(r.status_code == 200 for r in together), [r.text for r in together]
    assert widest >= 2  # requests shared a llama_decode step
    for batched, single in zip(together, alone):
        assert batched.json()["choices"][0]["message"] == single.json()["choices"][0]["message"]
        assert batched.json()["choices"][0]["logprobs"] == single.json()["choices"][0]["logprobs"]
    completion = together[4].json()["choices"][0]
    assert len(completion["logprobs"]["top_logprobs"]) == len(completion["logprobs"]["tokens"]) == 4
    assert bad.status_code == 400 and "top_p" in bad.text
