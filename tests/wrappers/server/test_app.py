"""``llmgym serve`` on loopback: a real uvicorn server backed by the tiny random Llama or a scripted policy.

Covers chat completions, streaming, tool-call extraction, logprobs and token
ids (vLLM's field names), raw completions, request batching, malformed and
aborted requests, LoRA load/unload, and the ``llmgym serve`` command.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.scripted import load_scripted
from llmgym.wrappers.server import create_app, serve_in_thread
from tests.servers import free_port

GUESS_TOOL = {
    "type": "function",
    "function": {"name": "guess", "description": "Guess a word.", "parameters": {"type": "object"}},
}
LLMGYM = [sys.executable, "-c", "import sys; from llmgym.cli import main; sys.exit(main())"]
START = [{"role": "user", "content": "Guess the five-letter word. You have 6 guesses."}]


@pytest.fixture(scope="module")
def tiny():
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    app = create_app(policy, model_name="tiny", max_batch_size=16, batch_wait_s=0.02)
    with serve_in_thread(app) as base_url:
        yield base_url, app.state.backend, policy


@pytest.fixture(scope="module")
def scripted():
    app = create_app(load_scripted("wordle"), model_name="wordle-bot")
    with serve_in_thread(app) as base_url:
        yield base_url


def chat(base_url: str, **body) -> httpx.Response:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)


def sse_events(base_url: str, path: str, body: dict) -> list:
    events = []
    with httpx.stream("POST", f"{base_url}{path}", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                payload = line[len("data: ") :]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_health_and_models(tiny):
    base_url, _, _ = tiny
    assert httpx.get(base_url.removesuffix("/v1") + "/health").status_code == 200
    models = httpx.get(f"{base_url}/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"]


def test_chat_completion_returns_vllm_token_fields(tiny):
    base_url, _, policy = tiny
    messages = [{"role": "user", "content": "Say something."}]
    body = chat(
        base_url,
        model="tiny",
        messages=messages,
        max_tokens=6,
        seed=3,
        logprobs=True,
        top_logprobs=3,
        return_token_ids=True,
    ).json()
    choice = body["choices"][0]
    assert body["object"] == "chat.completion" and choice["finish_reason"] == "length"
    assert body["prompt_token_ids"] == policy.build_prompt(PolicyRequest(messages))
    assert len(choice["token_ids"]) == 6 == len(choice["logprobs"]["content"])
    assert body["usage"] == {
        "prompt_tokens": len(body["prompt_token_ids"]),
        "completion_tokens": 6,
        "total_tokens": len(body["prompt_token_ids"]) + 6,
    }
    assert choice["message"]["content"] == policy.tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
    for token_id, entry in zip(choice["token_ids"], choice["logprobs"]["content"]):
        assert entry["token"] == policy.tokenizer.decode([token_id]) and entry["logprob"] < 0
        top = [alt["logprob"] for alt in entry["top_logprobs"]]
        assert len(top) == 3 and top == sorted(top, reverse=True)
        assert entry["logprob"] <= top[0] + 1e-4  # the chosen token is never likelier than the best one


def test_same_seed_same_tokens_and_logprobs_as_the_policy(tiny):
    base_url, _, policy = tiny
    messages = [{"role": "user", "content": "Count."}]
    direct = policy.generate([PolicyRequest(messages, sampling=SamplingParams(temperature=0.7, max_tokens=5, seed=11))])
    body = chat(
        base_url,
        messages=messages,
        temperature=0.7,
        max_tokens=5,
        seed=11,
        logprobs=True,
        return_token_ids=True,
        return_tokens_as_token_ids=True,
    ).json()
    choice = body["choices"][0]
    assert choice["token_ids"] == direct[0].token_ids
    assert [e["token"] for e in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in direct[0].token_ids]
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == pytest.approx(direct[0].logprobs, abs=1e-4)


def test_streaming_matches_the_full_response(tiny):
    base_url, _, _ = tiny
    body = {
        "messages": [{"role": "user", "content": "Stream."}],
        "max_tokens": 6,
        "seed": 5,
        "logprobs": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    full = chat(base_url, **body).json()
    events = sse_events(base_url, "/chat/completions", {**body, "stream": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == full["prompt_token_ids"]
    pieces = [c["choices"][0] for c in chunks if c["choices"]]
    text = "".join(p["delta"].get("content") or "" for p in pieces)
    ids = [t for p in pieces for t in p.get("token_ids") or []]
    assert text == full["choices"][0]["message"]["content"]
    assert ids == full["choices"][0]["token_ids"]
    assert [p["finish_reason"] for p in pieces][-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_completions_take_text_or_token_ids(tiny):
    base_url, _, policy = tiny
    prompt_ids = policy.tokenizer("The cat sat on")["input_ids"]
    answers = []
    for prompt in ("The cat sat on", prompt_ids):
        response = httpx.post(
            f"{base_url}/completions",
            json={"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 2, "return_token_ids": True},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert choice["prompt_token_ids"] == prompt_ids and len(choice["token_ids"]) == 4
        assert len(choice["logprobs"]["token_logprobs"]) == 4 and len(choice["logprobs"]["top_logprobs"][0]) == 2
        answers.append((choice["text"], choice["token_ids"]))
    assert answers[0] == answers[1]
    bad = httpx.post(f"{base_url}/completions", json={"prompt": [10**9], "max_tokens": 2}, timeout=60)
    assert bad.status_code == 400 and "out of range" in bad.json()["error"]["message"]


def test_concurrent_requests_are_answered_and_batched(tiny):
    base_url, backend, _ = tiny
    before = backend.largest_batch
    backend.largest_batch = 0
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(
            pool.map(
                lambda i: chat(base_url, messages=[{"role": "user", "content": f"n{i}"}], max_tokens=4, seed=i),
                range(8),
            )
        )
    assert [r.status_code for r in responses] == [200] * 8
    assert all(r.json()["choices"][0]["message"]["content"] is not None for r in responses)
    assert backend.largest_batch > 1, "concurrent requests should share a batch"
    backend.largest_batch = max(before, backend.largest_batch)


@pytest.mark.parametrize(
    "payload, param",
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b"", None),
        (json.dumps({"model": "tiny"}).encode(), "messages"),
        (json.dumps({"messages": "hello"}).encode(), "messages"),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), "messages.0.role"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).encode(), "temperature"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}).encode(), "max_tokens"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9}).encode(), "max_tokens"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}).encode(),
            "tools.0.function",
        ),
        (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(), "messages"),
    ],
)
def test_malformed_requests_get_openai_style_400(tiny, payload, param):
    base_url, _, _ = tiny
    response = httpx.post(
        f"{base_url}/chat/completions", content=payload, headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400 and error["message"]
    assert error["param"] == param
    assert chat(base_url, max_tokens=1).status_code == 200  # still serving


def test_unknown_model_and_route_are_404(tiny):
    base_url, _, _ = tiny
    response = chat(base_url, model="gpt-17", max_tokens=1)
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"
    assert httpx.get(f"{base_url}/nothing-here").json()["error"]["code"] == 404


def _send_raw(base_url: str, body: dict) -> socket.socket:
    host, port = base_url.removeprefix("http://").removesuffix("/v1").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def _read_response(sock: socket.socket) -> str:
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
        data.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]
    ):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed early: {data!r}"
        data += chunk
    return data.decode()


class GatedPolicy(Policy):
    """Answers ``done: <last message>``, but only once the test opens the gate: keeps the model "busy" on demand."""

    name = "gated"

    def __init__(self):
        self.entered, self.gate, self.seen = threading.Event(), threading.Event(), []

    def generate(self, requests):
        self.entered.set()
        assert self.gate.wait(timeout=60)
        self.seen.extend(r.messages[-1]["content"] for r in requests)
        return [Generation({"role": "assistant", "content": f"done: {r.messages[-1]['content']}"}) for r in requests]


def test_aborted_requests_never_reach_the_model_and_do_not_break_the_server():
    policy = GatedPolicy()
    app = create_app(policy, model_name="gated", batch_wait_s=0)
    with serve_in_thread(app) as base_url:
        busy = _send_raw(base_url, {"messages": [{"role": "user", "content": "A"}]})
        assert policy.entered.wait(timeout=30)
        for name, stream in (("B", False), ("C", True)):  # queued behind A, then their clients hang up
            _send_raw(base_url, {"messages": [{"role": "user", "content": name}], "stream": stream}).close()
        host, port = base_url.removeprefix("http://").removesuffix("/v1").split(":")
        with socket.create_connection((host, int(port))) as sock:  # a body that never arrives in full
            sock.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"mess')
        time.sleep(0.5)  # the server notices the closed connections
        policy.gate.set()
        reply = _read_response(busy)
        busy.close()
        assert reply.startswith("HTTP/1.1 200") and "done: A" in reply
        assert (
            chat(base_url, messages=[{"role": "user", "content": "D"}]).json()["choices"][0]["message"]["content"]
            == "done: D"
        )
    assert policy.seen == ["A", "D"] and app.state.backend.dropped == 2


def test_n_choices_and_stop(tiny):
    base_url, _, _ = tiny
    body = chat(base_url, max_tokens=3, n=3, seed=1, temperature=1.0).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    full = chat(base_url, max_tokens=8, temperature=0).json()["choices"][0]["message"]["content"]
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    cut = chat(base_url, max_tokens=8, temperature=0, stop=stop).json()["choices"][0]
    assert cut["finish_reason"] == "stop" and cut["message"]["content"] == full[: full.index(stop)]


def test_lora_load_use_unload(tiny, tmp_path):
    peft = pytest.importorskip("peft")
    base_url, backend, policy = tiny
    model = policy.model
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapter_model = peft.get_peft_model(type(model)(model.config), config)
    adapter_model.save_pretrained(tmp_path / "adapter")
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "logprobs": True}

    def logprobs(name: str) -> list[float]:
        response = chat(base_url, model=name, **request)
        assert response.status_code == 200, response.text
        return [e["logprob"] for e in response.json()["choices"][0]["logprobs"]["content"]]

    base = logprobs("tiny")
    load = httpx.post(f"{base_url}/load_lora_adapter", json={"lora_name": "a1", "lora_path": str(tmp_path / "adapter")})
    assert load.status_code == 200 and "a1" in load.text
    assert [m["id"] for m in httpx.get(f"{base_url}/models").json()["data"]] == ["tiny", "a1"]
    assert logprobs("a1") != pytest.approx(base, abs=1e-3)
    assert logprobs("tiny") == pytest.approx(base, abs=1e-5)
    again = httpx.post(
        f"{base_url}/load_lora_adapter", json={"lora_name": "a1", "lora_path": str(tmp_path / "adapter")}
    )
    assert again.status_code == 400 and "already" in again.json()["error"]["message"]
    missing = httpx.post(f"{base_url}/load_lora_adapter", json={"lora_name": "a2", "lora_path": str(tmp_path / "nope")})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "lora_path"
    assert httpx.post(f"{base_url}/unload_lora_adapter", json={"lora_name": "a1"}).status_code == 200
    assert chat(base_url, model="a1", **request).status_code == 404
    assert httpx.post(f"{base_url}/unload_lora_adapter", json={"lora_name": "a1"}).status_code == 404
    assert logprobs("tiny") == pytest.approx(base, abs=1e-5)


def test_tool_calls_come_back_as_openai_tool_calls(scripted):
    body = chat(scripted, messages=START, tools=[GUESS_TOOL]).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "guess" and call["id"]
    assert len(json.loads(call["function"]["arguments"])["word"]) == 5
    plain = chat(scripted, messages=START, tools=[GUESS_TOOL], tool_choice="none").json()["choices"][0]
    assert plain["finish_reason"] == "stop" and "<tool_call>" in plain["message"]["content"]


def test_streamed_tool_calls(scripted):
    events = sse_events(scripted, "/chat/completions", {"messages": START, "tools": [GUESS_TOOL], "stream": True})
    deltas = [e["choices"][0] for e in events[:-1]]
    calls = [c for d in deltas for c in d["delta"].get("tool_calls") or []]
    assert calls[0]["index"] == 0 and calls[0]["function"]["name"] == "guess"
    assert deltas[-1]["finish_reason"] == "tool_calls" and events[-1] == "[DONE]"


def test_a_policy_without_tokens_reports_no_usage_rather_than_zero_tokens(scripted):
    # a scripted policy has no tokenizer: "usage": {"completion_tokens": 0} would say it generated nothing
    assert chat(scripted, messages=START).json()["usage"] is None
    events = sse_events(
        scripted, "/chat/completions", {"messages": START, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert events[-2]["choices"] == [] and events[-2]["usage"] is None


def test_logprobs_from_a_policy_without_tokens_is_a_clear_400(scripted):
    response = chat(scripted, messages=START, logprobs=True)
    assert response.status_code == 400 and "log-probs" in response.json()["error"]["message"]


def test_tools_refused_like_vllm_without_auto_tool_choice():
    app = create_app(load_scripted("wordle"), model_name="w", enable_auto_tool_choice=False)
    with serve_in_thread(app) as base_url:
        response = chat(base_url, messages=START, tools=[GUESS_TOOL])
        assert response.status_code == 400 and "tool" in response.json()["error"]["message"]
        assert chat(base_url, messages=START).status_code == 200


def test_cli_serve_scripted_backend():
    port = free_port()
    process = subprocess.Popen(
        [
            *LLMGYM,
            "serve",
            "--backend",
            "scripted",
            "--model",
            "wordle",
            "--model-name",
            "bot",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline, "llmgym serve did not come up"
            time.sleep(0.2)
        body = chat(f"http://127.0.0.1:{port}/v1", model="bot", messages=START, tools=[GUESS_TOOL]).json()
        assert body["choices"][0]["finish_reason"] == "tool_calls"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_cli_serve_rejects_a_bad_port():
    result = subprocess.run([*LLMGYM, "serve", "--port", "70000"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--port" in result.stderr


def test_cli_serve_names_the_missing_extra():
    code = "import sys; sys.modules['fastapi'] = None; from llmgym.cli import main; sys.exit(main())"
    result = subprocess.run(
        [sys.executable, "-c", code, "serve", "--backend", "scripted"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and 'pip install "llmgym[serve]"' in result.stderr


@pytest.mark.slow
def test_real_smollm2_behind_llama_cpp():
    from llmgym.wrappers.models import load_policy
    from llmgym.wrappers.openai_policy import OpenAIPolicy

    policy = load_policy("llama.cpp")
    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    try:
        with serve_in_thread(create_app(policy, model_name="smollm2-135m")) as base_url:
            client = OpenAIPolicy("smollm2-135m", base_url=base_url)
            try:
                out = client.generate([PolicyRequest(question, sampling=SamplingParams(temperature=0, max_tokens=24))])[
                    0
                ]
            finally:
                client.close()
            assert "paris" in out.message["content"].lower()
            assert out.token_ids and len(out.logprobs) == len(out.token_ids) and out.prompt_token_ids
            events = sse_events(
                base_url,
                "/chat/completions",
                {"messages": question, "temperature": 0, "max_tokens": 24, "stream": True},
            )
            streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
            assert streamed == out.message["content"]
            completion = httpx.post(
                f"{base_url}/completions",
                json={
                    "prompt": "The capital of France is",
                    "max_tokens": 4,
                    "temperature": 0,
                    "return_token_ids": True,
                    "logprobs": 0,
                },
                timeout=60,
            ).json()["choices"][0]
            assert "paris" in completion["text"].lower() and len(completion["token_ids"]) == 4
            assert len(completion["logprobs"]["token_logprobs"]) == 4
    finally:
        policy.close()
