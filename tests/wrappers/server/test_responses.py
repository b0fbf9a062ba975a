"""What ``llmgym serve``'s responses hold.

Streams carry what the full response does (the usage chunk, logprobs, the echoed prompt), on the
transformers and llama.cpp backends; ``top_logprobs`` without ``logprobs`` is a 400, as in vLLM.
"""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("fastapi")

from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
            yield base_url
    finally:
        policy.close()


def _sse(base_url: str, path: str, body: dict) -> list[dict]:
    events = []
    with httpx.stream("POST", f"{base_url}{path}", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[len("data: ") :]))
    return events


@pytest.mark.parametrize(
    "path, extra",
    [
        ("/completions", {"prompt": "Once upon"}),
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_streams_with_include_usage_end_with_a_usage_chunk_and_null_usage_before(tiny, path, extra):
    body = {**extra, "max_tokens": 3, "n": 2, "seed": 0, "stream": True, "stream_options": {"include_usage": True}}
    events = _sse(tiny, path, body)
    *chunks, last = events
    assert last["choices"] == [] and last["usage"]["completion_tokens"] >= 2
    assert last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"]
    assert chunks and all(chunk["usage"] is None for chunk in chunks)  # as OpenAI
    plain = _sse(tiny, path, {**body, "stream_options": None})
    assert all("usage" not in chunk for chunk in plain)


def test_streamed_completions_carry_logprobs_like_the_full_response(tiny):
    body = {
        "prompt": "Once upon a time",
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": 2,
        "return_tokens_as_token_ids": True,
    }
    full = httpx.post(f"{tiny}/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]
    chunks = [e["choices"][0] for e in _sse(tiny, "/completions", {**body, "stream": True})]
    *pieces, final = chunks
    assert final["logprobs"] is None and final["finish_reason"] == "length"
    assert all(piece["logprobs"] is not None for piece in pieces)
    streamed = {key: [x for piece in pieces for x in piece["logprobs"][key]] for key in full}
    assert streamed["tokens"] == full["tokens"] and all(t.startswith("token_id:") for t in streamed["tokens"])
    assert streamed["text_offset"] == full["text_offset"]
    assert streamed["token_logprobs"] == pytest.approx(full["token_logprobs"], abs=1e-3)
    assert [list(top) for top in streamed["top_logprobs"]] == [list(top) for top in full["top_logprobs"]]
    plain = _sse(tiny, "/completions", {**body, "stream": True, "logprobs": None})
    assert all(e["choices"][0]["logprobs"] is None for e in plain)


def test_echo_on_the_llama_cpp_backend_uses_its_detokenizer_not_a_500():
    pytest.importorskip("llama_cpp")
    from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy
    from llmgym.wrappers.models import tiny_random_gguf

    policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=256)
    body = {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}
    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
            plain = httpx.post(f"{base_url}/completions", json=body, timeout=60)
            echoed = httpx.post(f"{base_url}/completions", json={**body, "echo": True}, timeout=60)
            streamed = _sse(base_url, "/completions", {**body, "echo": True, "stream": True})
    finally:
        policy.close()
    assert echoed.status_code == 200, echoed.text
    generated = plain.json()["choices"][0]["text"]
    text = echoed.json()["choices"][0]["text"]
    assert "Once upon a time" in text and text.endswith(generated) and len(text) > len(generated)
    assert "".join(e["choices"][0]["text"] for e in streamed if e["choices"]) == text


def test_streamed_completions_echo_the_prompt_like_the_full_response(tiny):
    body = {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0, "echo": True}
    full = httpx.post(f"{tiny}/completions", json=body, timeout=60).json()["choices"][0]["text"]
    streamed = _sse(tiny, "/completions", {**body, "stream": True})
    assert full.startswith("Once upon a time")
    assert "".join(e["choices"][0]["text"] for e in streamed) == full


def test_top_logprobs_without_logprobs_is_a_clear_400_as_in_vllm(tiny):
    messages = [{"role": "user", "content": "hi"}]
    response = httpx.post(
        f"{tiny}/chat/completions", json={"messages": messages, "max_tokens": 2, "top_logprobs": 2}, timeout=60
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "top_logprobs" and "logprobs" in response.json()["error"]["message"]
    for extra in ({"top_logprobs": 0}, {"top_logprobs": 2, "logprobs": True}):
        ok = httpx.post(f"{tiny}/chat/completions", json={"messages": messages, "max_tokens": 2, **extra}, timeout=60)
        assert ok.status_code == 200, ok.text
