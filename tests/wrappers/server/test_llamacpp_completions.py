"""`/v1/completions` on the llama.cpp backend, fast: a tiny random GGUF behind a real `llmgym serve`; chat and
completions without ``max_tokens`` on a small context."""

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
            body = {
                "model": "tiny",
                "prompt": [1, 2, 3, 4],
                "max_tokens": 5,
                "temperature": 0,
                "return_token_ids": True,
                "logprobs": 0,
            }
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


def test_chat_top_logprobs_come_from_the_logits_each_token_was_sampled_from():
    policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=256)
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
        "seed": 1,
    }
    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
            greedy = httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)
            sampled = httpx.post(f"{base_url}/chat/completions", json={**body, "temperature": 1.0}, timeout=60)
            plain = httpx.post(
                f"{base_url}/chat/completions", json={**body, "temperature": 1.0, "top_logprobs": 0}, timeout=60
            )
    finally:
        policy.close()
    assert greedy.status_code == 200, greedy.text
    content = greedy.json()["choices"][0]["logprobs"]["content"]
    assert content
    for item in content:
        tops = item["top_logprobs"]
        assert len(tops) == 3
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        assert tops[0]["token"] == item["token"] and tops[0]["logprob"] == item["logprob"]  # greedy: the best one
    # asking for alternatives does not change what is sampled: the same seed gives the same tokens and log-probs
    assert sampled.status_code == 200 and plain.status_code == 200
    with_tops = sampled.json()["choices"][0]["logprobs"]["content"]
    without = plain.json()["choices"][0]["logprobs"]["content"]
    assert [(t["token"], t["logprob"]) for t in with_tops] == [(t["token"], t["logprob"]) for t in without]
    assert all(t["top_logprobs"] == [] for t in without)
    assert all(t["logprob"] <= t["top_logprobs"][0]["logprob"] for t in with_tops)


def test_requests_without_max_tokens_fit_a_small_context():
    # `llmgym serve --max-model-len 256`: a request without max_tokens got the 512-token default checked
    # against the context and a 400 ("asks for 512 new tokens"), chat and completions alike; vLLM's default
    # is what the context has room for. A max_tokens the client sets is still checked.
    pytest.importorskip("fastapi")
    pytest.importorskip("llama_cpp")
    import httpx

    from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy
    from llmgym.wrappers.models import tiny_random_gguf
    from llmgym.wrappers.server import create_app, serve_in_thread

    policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=64)
    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
            chat = httpx.post(
                f"{base_url}/chat/completions",
                timeout=120,
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "seed": 0, "temperature": 0},
            )
            assert chat.status_code == 200, chat.text
            usage = chat.json()["usage"]
            assert usage["total_tokens"] <= 64
            completion = httpx.post(
                f"{base_url}/completions",
                timeout=120,
                json={"model": "tiny", "prompt": ["hi there", "a longer prompt than the other"], "seed": 0},
            )
            assert completion.status_code == 200, completion.text
            assert completion.json()["usage"]["completion_tokens"] <= 2 * 64
            too_many = httpx.post(
                f"{base_url}/completions", timeout=120, json={"model": "tiny", "prompt": "hi there", "max_tokens": 63}
            )
            assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "max_tokens"
            full = httpx.post(f"{base_url}/completions", timeout=120, json={"model": "tiny", "prompt": [42] * 64})
            assert full.status_code == 400 and full.json()["error"]["param"] == "max_tokens"
    finally:
        policy.close()
