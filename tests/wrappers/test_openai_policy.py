"""OpenAIPolicy against real ``llmgym serve`` servers on loopback (no mocks).

Covers the tool-call round trip through whole Wordle episodes (native and
text protocol, and the automatic fallback), token ids and log-probs parsed
from vLLM's fields, several base URLs with failover, bounded concurrency, and
clear errors for an unreachable server or a missing ``openai`` package.
"""

from __future__ import annotations

import socket
import sys

import pytest

from llmgym.policy import PolicyRequest, SamplingParams
from llmgym.rollout import rollout
from llmgym.wrappers.openai_policy import OpenAIPolicy, to_text_protocol
from llmgym.wrappers.scripted import load_scripted
from llmgym.wrappers.server import create_app, serve_in_thread

START = [{"role": "user", "content": "Guess the five-letter word. You have 6 guesses."}]


@pytest.fixture(scope="module")
def wordle_server():
    with serve_in_thread(create_app(load_scripted("wordle"), model_name="wordle-bot")) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def tiny_server():
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    app = create_app(policy, model_name="tiny", batch_wait_s=0.02)
    with serve_in_thread(app) as base_url:
        yield base_url, policy, app.state.backend


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there once the socket is closed


@pytest.mark.parametrize("native_tools", [None, False])
def test_wordle_episodes_round_trip_tool_calls(wordle_server, native_tools):
    policy = OpenAIPolicy("wordle-bot", base_url=wordle_server, native_tools=native_tools)
    try:
        episodes = rollout("llmgym/Wordle-v0", policy, seeds=[1, 2])
    finally:
        policy.close()
    assert all(not e.metadata.get("error") for e in episodes), [e.metadata.get("error") for e in episodes]
    assert all(e.component_totals()["solved"] == 1.0 for e in episodes)
    assert all(e.component_totals()["format_error"] == 0.0 for e in episodes)
    # The server cannot give token ids, so the policy stopped asking for them.
    assert policy.return_tokens is False
    if native_tools is None:
        assert policy.native_tools is True
        assert all(m.get("tool_calls") for e in episodes for m in e.messages if m["role"] == "assistant")
    else:
        assert all("<tool_call>" in m["content"] for e in episodes for m in e.messages if m["role"] == "assistant")


def test_falls_back_to_the_text_protocol_when_tools_are_refused():
    app = create_app(load_scripted("wordle"), model_name="w", enable_auto_tool_choice=False)
    with serve_in_thread(app) as base_url:
        policy = OpenAIPolicy("w", base_url=base_url)
        try:
            episodes = rollout("llmgym/Wordle-v0", policy, seeds=[5, 6])
        finally:
            policy.close()
    assert policy.native_tools is False
    assert all(e.component_totals()["solved"] == 1.0 for e in episodes)


def test_token_ids_and_logprobs_match_the_served_policy(tiny_server):
    base_url, served, _ = tiny_server
    request = PolicyRequest([{"role": "user", "content": "Hello"}],
                            sampling=SamplingParams(temperature=0.8, max_tokens=6, seed=4))
    client = OpenAIPolicy("tiny", base_url=base_url)
    try:
        remote = client.generate([request])[0]
    finally:
        client.close()
    local = served.generate([request])[0]
    assert client.returns_tokens and client.return_tokens is not False
    assert remote.token_ids == local.token_ids and len(remote.token_ids) == 6
    assert remote.prompt_token_ids == local.prompt_token_ids
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-4)
    assert remote.message["content"] == local.message["content"]
    assert remote.finish_reason == "length" and remote.metadata["base_url"] == base_url


def test_concurrent_requests_from_sync_and_async_callers(tiny_server):
    import asyncio

    base_url, _, backend = tiny_server
    backend.largest_batch = 0
    client = OpenAIPolicy("tiny", base_url=base_url, max_concurrency=3)
    requests = [PolicyRequest([{"role": "user", "content": f"q{i}"}], sampling=SamplingParams(max_tokens=3, seed=i))
                for i in range(8)]
    try:
        batch = client.generate(requests)

        async def from_another_loop():
            return await asyncio.gather(*(client.agenerate(r) for r in requests))

        again = asyncio.run(from_another_loop())
    finally:
        client.close()
    assert len(batch) == 8 and all(len(g.token_ids) == 3 for g in batch)
    assert 1 < backend.largest_batch <= 3  # concurrent, but never more than max_concurrency in flight
    assert [g.token_ids for g in again] == [g.token_ids for g in batch]  # seeded: the same answers


def test_several_base_urls_share_the_load_and_fail_over(wordle_server):
    with serve_in_thread(create_app(load_scripted("wordle"), model_name="wordle-bot")) as second:
        client = OpenAIPolicy("wordle-bot", base_url=[wordle_server, second, _dead_url()], max_retries=0,
                              return_tokens=False)
        try:
            out = client.generate([PolicyRequest(START) for _ in range(12)])
        finally:
            client.close()
    used = {g.metadata["base_url"] for g in out}
    assert used == {wordle_server, second}
    assert all("<tool_call>" in g.message["content"] for g in out)


def test_unreachable_server_names_the_url():
    url = _dead_url()
    client = OpenAIPolicy("m", base_url=url, max_retries=1, timeout=5)
    try:
        with pytest.raises(ConnectionError, match=url.replace(".", r"\.")):
            client.generate([PolicyRequest(START)])
    finally:
        client.close()


def test_a_slow_server_is_a_timeout_not_an_unreachable_server():
    import time

    from llmgym.policy import Generation, Policy

    class Slow(Policy):
        def generate(self, requests):
            time.sleep(1.5)
            return [Generation({"role": "assistant", "content": "x"}) for _ in requests]

    with serve_in_thread(create_app(Slow(), model_name="slow")) as url:
        client = OpenAIPolicy("slow", base_url=url, timeout=0.3, max_retries=0, return_tokens=False)
        try:
            with pytest.raises(TimeoutError, match=r"did not answer within timeout=0\.3 s") as err:
                client.generate([PolicyRequest(START)])
            assert "Is it running" not in str(err.value)
        finally:
            client.close()


def test_missing_openai_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # what an environment without the package looks like
    with pytest.raises(ImportError, match=r'pip install "llmgym\[openai\]"'):
        OpenAIPolicy("m")


def test_bad_arguments():
    with pytest.raises(ValueError, match="base_url"):
        OpenAIPolicy("m", base_url=[])
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIPolicy("m", max_concurrency=0)


def test_text_protocol_keeps_the_system_prompt_and_existing_blocks():
    tools = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]
    text = '<tool_call>{"name": "guess", "arguments": {"word": "slate"}}</tool_call>'
    call = {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "slate"}'}}
    chat = to_text_protocol([{"role": "system", "content": "Rules."},
                             {"role": "assistant", "content": text, "tool_calls": [call]}], tools)
    assert chat[0]["content"].startswith("Rules.") and "guess" in chat[0]["content"]
    assert chat[1]["content"].count("<tool_call>") == 1
