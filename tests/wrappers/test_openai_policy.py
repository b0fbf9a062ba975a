"""OpenAIPolicy against real ``llmgym serve`` servers on loopback (no mocks).

Covers the tool-call round trip through whole Wordle episodes (native and
text protocol, and the automatic fallback), token ids and log-probs parsed
from vLLM's fields, several base URLs with failover, bounded concurrency,
clear errors for an unreachable server or a missing ``openai`` package, the
token record of a chat server that re-renders the chat, and the models a
server lists (what ``llmgym eval --base-url`` checks ``--model`` against).
"""

from __future__ import annotations

import socket
import sys

import pytest

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout import rollout
from llmgym.wrappers.openai_policy import OpenAIPolicy, to_text_protocol
from llmgym.wrappers.scripted import load_scripted
from llmgym.wrappers.server import create_app, serve_in_thread

START = [{"role": "user", "content": "Guess the five-letter word. You have 6 guesses."}]
WORDLE = "llmgym/Wordle-v0"


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
    request = PolicyRequest(
        [{"role": "user", "content": "Hello"}], sampling=SamplingParams(temperature=0.8, max_tokens=6, seed=4)
    )
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
    requests = [
        PolicyRequest([{"role": "user", "content": f"q{i}"}], sampling=SamplingParams(max_tokens=3, seed=i))
        for i in range(8)
    ]
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
        client = OpenAIPolicy(
            "wordle-bot", base_url=[wordle_server, second, _dead_url()], max_retries=0, return_tokens=False
        )
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
    chat = to_text_protocol(
        [{"role": "system", "content": "Rules."}, {"role": "assistant", "content": text, "tool_calls": [call]}], tools
    )
    assert chat[0]["content"].startswith("Rules.") and "guess" in chat[0]["content"]
    assert chat[1]["content"].count("<tool_call>") == 1


# -- token ids through chat completions -----------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from llmgym.wrappers.models import tiny_random_model

    return tiny_random_model(seed=0)


def transformers_policy(tiny, **kwargs):
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    return TransformersPolicy(*tiny, **kwargs)


def test_a_chat_server_rollout_drops_the_token_record_instead_of_failing(tiny):
    """Regression: without tokenizer=, multi-turn rollouts on servers that re-render the chat used to crash."""
    pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from llmgym.wrappers.openai_policy import OpenAIPolicy
    from llmgym.wrappers.server import create_app, serve_in_thread

    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=3)
    with serve_in_thread(create_app(transformers_policy(tiny), model_name="tiny", batch_wait_s=0.01)) as url:
        policy = OpenAIPolicy("tiny", base_url=url)
        try:
            episode = rollout(WORDLE, policy, seeds=[0], sampling=sampling)[0]
        finally:
            policy.close()
    # the server's re-tokenized history differs from the ids generated on turn 1
    assert "error" not in episode.metadata and episode.num_turns == 10
    assert episode.token_ids == [] and episode.metadata["token_ids_dropped"].startswith("turn 2: ")
    assert "prefix_reused=False" in episode.metadata["token_ids_dropped"]


class _Echo(Policy):
    """Answers with token ids; a prompt holding ``BAD`` is refused with a message that says "extra"."""

    name = "echo"
    returns_tokens = True

    def generate(self, requests):
        if any("BAD" in r.messages[-1]["content"] for r in requests):
            raise ValueError("the prompt has an extra long line")
        return [
            Generation({"role": "assistant", "content": "ok"}, prompt_token_ids=[1, 2], token_ids=[3], logprobs=[-0.1])
            for _ in requests
        ]


def test_one_unrelated_400_does_not_turn_token_collection_off():
    """Regression: a 400 saying "extra" used to turn token ids off even after the server had returned them."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from llmgym.wrappers.openai_policy import OpenAIPolicy
    from llmgym.wrappers.server import create_app, serve_in_thread

    def ask(policy, text):
        return policy.generate([PolicyRequest([{"role": "user", "content": text}])])[0]

    with serve_in_thread(create_app(_Echo(), model_name="echo", batch_wait_s=0.005)) as url:
        policy = OpenAIPolicy("echo", base_url=url, max_retries=0)
        try:
            assert ask(policy, "hi").token_ids == [3] and policy.return_tokens is True
            with pytest.raises(openai.BadRequestError):
                ask(policy, "BAD")
            assert policy.return_tokens is True and ask(policy, "hi").token_ids == [3]
        finally:
            policy.close()


# -- the models a server lists (llmgym eval --base-url --model) ------------------------------


class _ModelsOnly:
    """A stub OpenAI-compatible server: ``/v1/models`` lists ``cards``; chat requests get a 500."""

    def __init__(self, cards):
        import http.server
        import json
        import threading

        body = json.dumps({"object": "list", "data": cards}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("owner", ["vllm", "llmgym"])
def test_eval_refuses_a_model_that_a_strict_server_does_not_list(owner, capsys):
    pytest.importorskip("openai")
    import argparse

    from llmgym.cli import CLIError
    from llmgym.cli._policies import build_policy

    stub = _ModelsOnly([{"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": owner}])
    try:
        args = argparse.Namespace(policy=None, base_url=[stub.url], model="gpt-4", api_key=None, concurrency=1)
        with pytest.raises(CLIError, match="does not serve model 'gpt-4'; it serves: Qwen/Qwen3-8B"):
            build_policy(args)
    finally:
        stub.close()


def test_eval_tries_a_model_that_ollama_or_llama_server_does_not_list(capsys):
    # Ollama lists "llama3.2:latest" and serves "llama3.2"; llama.cpp's llama-server lists its file and
    # serves any name. Refusing every unlisted --model (meant for vLLM's 404s) refused those runs.
    pytest.importorskip("openai")
    import argparse

    from llmgym.cli._policies import build_policy

    for cards in (
        [{"id": "llama3.2:latest", "object": "model", "owned_by": "library"}],
        [{"id": "models/qwen.gguf", "object": "model", "owned_by": "llamacpp"}],
    ):
        stub = _ModelsOnly(cards)
        try:
            args = argparse.Namespace(policy=None, base_url=[stub.url], model="llama3.2", api_key=None, concurrency=1)
            policy = build_policy(args)
            assert policy.model == "llama3.2"
            assert f"does not list model 'llama3.2' (it lists: {cards[0]['id']}); trying it anyway" in (
                capsys.readouterr().err
            )
        finally:
            stub.close()
