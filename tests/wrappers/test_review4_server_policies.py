"""Session-4 review regressions: the server and the local policies."""

from __future__ import annotations

import pytest


def test_a_cached_model_id_keeps_its_id_as_the_policy_name(fake_hf_cache):
    # load_model loads an id from its cache snapshot folder; the policy was then named after the
    # snapshot's commit hash (config.name_or_path = .../snapshots/<hash>) instead of the model.
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    fake_hf_cache("acme/TinyChat-1M")
    policy = TransformersPolicy("acme/TinyChat-1M", device="cpu")
    assert policy.name == "TinyChat-1M"
    assert policy.model.config.name_or_path == "acme/TinyChat-1M"


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

    for cards in ([{"id": "llama3.2:latest", "object": "model", "owned_by": "library"}],
                  [{"id": "models/qwen.gguf", "object": "model", "owned_by": "llamacpp"}]):
        stub = _ModelsOnly(cards)
        try:
            args = argparse.Namespace(policy=None, base_url=[stub.url], model="llama3.2", api_key=None, concurrency=1)
            policy = build_policy(args)
            assert policy.model == "llama3.2"
            assert f"does not list model 'llama3.2' (it lists: {cards[0]['id']}); trying it anyway" in (
                capsys.readouterr().err)
        finally:
            stub.close()


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
            chat = httpx.post(f"{base_url}/chat/completions", timeout=120, json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "seed": 0, "temperature": 0})
            assert chat.status_code == 200, chat.text
            usage = chat.json()["usage"]
            assert usage["total_tokens"] <= 64
            completion = httpx.post(f"{base_url}/completions", timeout=120, json={
                "model": "tiny", "prompt": ["hi there", "a longer prompt than the other"], "seed": 0})
            assert completion.status_code == 200, completion.text
            assert completion.json()["usage"]["completion_tokens"] <= 2 * 64
            too_many = httpx.post(f"{base_url}/completions", timeout=120, json={
                "model": "tiny", "prompt": "hi there", "max_tokens": 63})
            assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "max_tokens"
            full = httpx.post(f"{base_url}/completions", timeout=120, json={"model": "tiny", "prompt": [42] * 64})
            assert full.status_code == 400 and full.json()["error"]["param"] == "max_tokens"
    finally:
        policy.close()


def test_a_seeded_completion_is_the_same_alone_or_in_a_list_of_prompts():
    # transformers /v1/completions ran prompts of equal sampling (same seed) as one model.generate batch,
    # whose rows share one generator: "hello" with seed 1 gave other tokens beside "bye there" than alone.
    pytest.importorskip("fastapi")
    pytest.importorskip("transformers")
    import httpx

    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server import create_app, serve_in_thread
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
        def texts(prompt, **body):
            response = httpx.post(f"{base_url}/completions", timeout=120,
                                  json={"model": "tiny", "prompt": prompt, "max_tokens": 6, **body})
            assert response.status_code == 200, response.text
            return [choice["text"] for choice in response.json()["choices"]]

        alone = texts("hello", seed=1)
        assert texts(["hello", "bye there", "a third prompt"], seed=1)[0] == alone[0]
        assert texts(["bye", "hello"], seed=1, n=2)[2] == alone[0]
        greedy = texts("hello", temperature=0)
        assert texts(["hello", "bye there"], temperature=0, seed=5)[0] == greedy[0]
