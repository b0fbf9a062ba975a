"""``llmgym serve`` answers whatever a client sends with a 4xx and an OpenAI-style body, and keeps the connection.

Covers what a user probing the server found: bodies nested 1,000 levels deep (a 500 on every POST
endpoint, then "connection reset" on the next request), strings that are not Unicode, malformed
``tool_choice`` (a 500), LoRA loads without weights or with garbage weights (500s, half-registered
adapters), unloading an adapter that requests are using, two loads or unloads of one name at once,
generation after a load, a bug's 500 that must not close the connection, streams whose client hangs
up (they kept writing, logging asyncio's "socket.send() raised exception." per chunk), 64
concurrent clients, LoRA loads that fail part-way (a half-loaded adapter stayed listed, or was served by
the base weights), and values past what the model takes: ``max_tokens`` beyond the context, seeds outside
vLLM's int64 range.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import socket
import threading

import httpx
import pytest

pytest.importorskip("fastapi")

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.scripted import load_scripted  # noqa: E402
from llmgym.wrappers.server import create_app, serve_in_thread  # noqa: E402
from llmgym.wrappers.server.protocol import MAX_JSON_DEPTH  # noqa: E402

HI = [{"role": "user", "content": "hi"}]
CHAT = json.dumps({"messages": HI}).encode()
POST_PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"]


def _connect(base_url: str) -> socket.socket:
    host, port = base_url.removeprefix("http://").removesuffix("/v1").split(":")
    return socket.create_connection((host, int(port)), timeout=120)


def _exchange(sock: socket.socket, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    """One request on a kept-alive connection: its status and JSON body (the connection must stay open)."""
    sock.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    headers = dict(line.split(": ", 1) for line in head.decode().lower().split("\r\n")[1:])
    assert headers.get("connection") != "close", head
    while len(rest) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-response"
        rest += chunk
    return int(head.split()[1]), json.loads(rest)


def _assert_openai_error(status: int, body: dict, expected: int, param: str | None = None) -> None:
    assert status == expected, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == expected and error["message"]
    if param is not None:
        assert error["param"] == param


@pytest.fixture(scope="module")
def scripted():
    with serve_in_thread(create_app(load_scripted("wordle"), model_name="bot")) as base_url:
        yield base_url


# -- bodies that used to be 500s ------------------------------------------------------------------


@pytest.mark.parametrize("path", POST_PATHS)
def test_a_body_nested_1000_deep_is_a_400_and_the_connection_serves_the_next_request(scripted, path):
    deep = b'{"messages": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    with _connect(scripted) as sock:
        status, body = _exchange(sock, "POST", path, deep)
        _assert_openai_error(status, body, 400)
        assert f"deeper than {MAX_JSON_DEPTH} levels" in body["error"]["message"]
        status, body = _exchange(sock, "POST", "/v1/chat/completions", CHAT)
        assert status == 200 and body["choices"][0]["message"]


def _nested(depth: int) -> bytes:
    """A chat body whose first message's content parts nest ``depth`` levels in all (the body itself is one)."""
    inner = depth - 5  # body > messages > message > content parts > part
    part = '{"type": "text", "text": ' + "[" * inner + "]" * inner + "}"
    return ('{"messages": [{"role": "user", "content": [' + part + "]}]}").encode()


@pytest.mark.parametrize(
    "body, param, says",
    [
        (_nested(MAX_JSON_DEPTH + 1), None, "deeper than"),
        (_nested(MAX_JSON_DEPTH), "messages", "text content parts"),  # deep enough, refused for what it is
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', None, "lone surrogate"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\udfff"]}', None, "lone surrogate"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "seed": ' + b"9" * 5000 + b"}", None, "not valid JSON"),
        (b'\xff\xfe{"messages"', None, "not valid JSON"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature", "temperature"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}', "top_p", "top_p"),
        (b'{"messages": [{"role": "user", "content": ["hi"]}]}', "messages.0.content.str", "string"),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], '
            b'"tools": [{"function": {"name": "g", "parameters": 1}}]}',
            "tools.0.function.parameters",
            "dictionary",
        ),
    ],
)
def test_bodies_that_are_not_requests_get_a_400_and_the_connection_stays_open(scripted, body, param, says):
    with _connect(scripted) as sock:
        status, answer = _exchange(sock, "POST", "/v1/chat/completions", body)
        _assert_openai_error(status, answer, 400, param)
        assert says in answer["error"]["message"]
        assert _exchange(sock, "POST", "/v1/chat/completions", CHAT)[0] == 200


TOOLS = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "function": "x"},
        {"type": "function", "function": [1]},
        {"type": "function"},
        {"type": "retrieval", "function": {"name": "guess"}},
    ],
)
def test_a_malformed_tool_choice_is_a_400_naming_it(scripted, choice):
    """Regression: a malformed ``tool_choice`` used to be a 500."""
    response = httpx.post(
        f"{scripted}/chat/completions",
        timeout=30,
        json={"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": choice},
    )
    assert response.status_code == 400, response.text
    assert "tool_choice" in json.dumps(response.json()["error"])


def test_required_or_named_tool_choice_without_tools_is_a_400(scripted):
    for choice in ["required", {"type": "function", "function": {"name": "guess"}}]:
        response = httpx.post(
            f"{scripted}/chat/completions",
            timeout=30,
            json={"messages": [{"role": "user", "content": "hi"}], "tool_choice": choice},
        )
        assert response.status_code == 400 and "needs tools" in response.json()["error"]["message"]
    named = httpx.post(
        f"{scripted}/chat/completions",
        timeout=30,
        json={
            "messages": [{"role": "user", "content": "Guess."}],
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "guess"}},
        },
    )
    assert named.status_code == 200 and named.json()["choices"][0]["finish_reason"] == "tool_calls"


class BrokenPolicy(Policy):
    """A policy with a bug: it returns something that is not a Generation."""

    name = "broken"

    def generate(self, requests):
        return [object() for _ in requests]


def test_a_bug_is_a_logged_500_with_an_openai_body_and_the_connection_stays_open(caplog):
    with serve_in_thread(create_app(BrokenPolicy(), model_name="broken")) as base_url, _connect(base_url) as sock:
        status, body = _exchange(sock, "POST", "/v1/chat/completions", CHAT)
        _assert_openai_error(status, body, 500)
        assert "AttributeError" in body["error"]["message"]
        assert _exchange(sock, "GET", "/health")[0] == 200
    assert any(
        "POST /v1/chat/completions failed" in record.getMessage() and record.exc_info for record in caplog.records
    )


def test_messages_the_chat_template_refuses_are_a_400():
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    template = (
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with the user') }}"
        "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    policy = TransformersPolicy(*tiny_random_model(), chat_template=template)
    try:
        with serve_in_thread(create_app(policy, model_name="tiny")) as base_url, _connect(base_url) as sock:
            system_first = json.dumps({"messages": [{"role": "system", "content": "be brief"}, *HI], "max_tokens": 1})
            status, body = _exchange(sock, "POST", "/v1/chat/completions", system_first.encode())
            _assert_openai_error(status, body, 400)
            assert "must start with the user" in body["error"]["message"]
            assert (
                _exchange(sock, "POST", "/v1/chat/completions", json.dumps({"messages": HI, "max_tokens": 1}).encode())[
                    0
                ]
                == 200
            )
    finally:
        policy.close()


def test_64_concurrent_clients_are_all_served(scripted):
    def ask(i: int) -> int:
        return httpx.post(
            f"{scripted}/chat/completions", timeout=120, json={"messages": [{"role": "user", "content": f"game {i}"}]}
        ).status_code

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        assert list(pool.map(ask, range(64))) == [200] * 64


# -- LoRA adapters ---------------------------------------------------------------------------------


def _gated_tiny_policy():
    """A TransformersPolicy on the tiny random Llama whose generation waits for its ``gate`` (open at first)."""
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    class Gated(TransformersPolicy):
        def generate(self, requests):
            self.entered.set()
            assert self.gate.wait(timeout=120)
            return super().generate(requests)

    policy = Gated(*tiny_random_model())
    policy.entered, policy.gate = threading.Event(), threading.Event()
    policy.gate.set()
    return policy


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    peft = pytest.importorskip("peft")
    policy = _gated_tiny_policy()
    folder = tmp_path_factory.mktemp("adapters")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(type(policy.model)(policy.model.config), config).save_pretrained(folder / "good")
    app = create_app(policy, model_name="tiny")
    try:
        with serve_in_thread(app) as base_url:
            yield base_url, policy, folder
    finally:
        policy.close()


def _bad_adapter(folder, kind: str) -> str:
    """An adapter folder that cannot load: ``kind`` says how."""
    good, bad = folder / "good", folder / kind
    bad.mkdir(exist_ok=True)
    config = (good / "adapter_config.json").read_text()
    weights = (good / "adapter_model.safetensors").read_bytes()
    if kind == "no-weights":
        (bad / "adapter_config.json").write_text(config)
    elif kind == "garbage-weights":
        (bad / "adapter_config.json").write_text(config)
        (bad / "adapter_model.safetensors").write_bytes(b"\x00\xff garbage" * 100)
    elif kind == "weights-of-other-layers":
        from safetensors.torch import load_file, save_file

        (bad / "adapter_config.json").write_text(config)
        tensors = load_file(str(good / "adapter_model.safetensors"))
        save_file(
            {key.replace("q_proj", "k_proj"): value for key, value in tensors.items()},
            str(bad / "adapter_model.safetensors"),
        )
    elif kind == "config-not-json":
        (bad / "adapter_config.json").write_text("{not json")
        (bad / "adapter_model.safetensors").write_bytes(weights)
    elif kind == "not-lora":
        (bad / "adapter_config.json").write_text(json.dumps({**json.loads(config), "peft_type": "IA3"}))
        (bad / "adapter_model.safetensors").write_bytes(weights)
    return str(bad)


def _load(base_url: str, name: str, path: str, **extra) -> httpx.Response:
    body = {"lora_name": name, "lora_path": path, **extra}
    return httpx.post(f"{base_url}/load_lora_adapter", json=body, timeout=120)


def _logprobs(base_url: str, model: str) -> list[float] | int:
    """The greedy reply's log-probs on ``model``, or the status when it is not a 200."""
    response = httpx.post(
        f"{base_url}/chat/completions",
        timeout=120,
        json={"model": model, "messages": HI, "max_tokens": 4, "temperature": 0, "logprobs": True},
    )
    if response.status_code != 200:
        _assert_openai_error(response.status_code, response.json(), response.status_code)
        return response.status_code
    return [entry["logprob"] for entry in response.json()["choices"][0]["logprobs"]["content"]]


def _served(base_url: str) -> list[str]:
    return [card["id"] for card in httpx.get(f"{base_url}/models").json()["data"]]


@pytest.mark.parametrize(
    "kind", ["no-weights", "garbage-weights", "weights-of-other-layers", "config-not-json", "not-lora"]
)
def test_a_failed_lora_load_is_a_400_that_leaves_nothing_behind(lora_server, kind):
    base_url, _, folder = lora_server
    base = _logprobs(base_url, "tiny")
    response = _load(base_url, "x", _bad_adapter(folder, kind))
    _assert_openai_error(response.status_code, response.json(), 400, "lora_path")
    assert "Could not load the lora adapter `x`" in response.json()["error"]["message"]
    assert _served(base_url) == ["tiny"] and _logprobs(base_url, "x") == 404
    assert _logprobs(base_url, "tiny") == pytest.approx(base, abs=1e-5)
    assert _load(base_url, "x", str(folder / "good")).status_code == 200, "the name is free for a good adapter"
    assert httpx.post(f"{base_url}/unload_lora_adapter", json={"lora_name": "x"}).status_code == 200


def test_generation_after_a_load_and_unloading_an_adapter_in_use(lora_server):
    base_url, policy, folder = lora_server
    base = _logprobs(base_url, "tiny")
    assert _load(base_url, "a.b", str(folder / "good")).status_code == 200  # any name, dots too
    adapted = _logprobs(base_url, "a.b")
    assert adapted != pytest.approx(base, abs=1e-3), "the adapter changes the model"
    assert _logprobs(base_url, "tiny") == pytest.approx(base, abs=1e-5), "base requests run without it"
    assert _logprobs(base_url, "a.b") == pytest.approx(adapted, abs=1e-5)

    # A generates on the adapter while it is unloaded; B is queued behind A for the same adapter
    policy.gate.clear()
    policy.entered.clear()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        running = pool.submit(_logprobs, base_url, "a.b")
        assert policy.entered.wait(timeout=120)
        queued = pool.submit(_logprobs, base_url, "a.b")
        unload = pool.submit(httpx.post, f"{base_url}/unload_lora_adapter", json={"lora_name": "a.b"}, timeout=120)
        assert not concurrent.futures.wait([unload], timeout=0.5).done, "an unload waits for the running batch"
        policy.gate.set()
        assert running.result() == pytest.approx(adapted, abs=1e-5), "the running request finishes on the adapter"
        assert queued.result() == 404 or queued.result() == pytest.approx(adapted, abs=1e-5)
        assert unload.result().status_code == 200
    assert _logprobs(base_url, "a.b") == 404 and _served(base_url) == ["tiny"]
    assert _logprobs(base_url, "tiny") == pytest.approx(base, abs=1e-5)
    assert httpx.post(f"{base_url}/unload_lora_adapter", json={"lora_name": "a.b"}).status_code == 404


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


def _twice_at_once(post, args) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(post, args))


def test_concurrent_loads_of_one_lora_name_load_it_once_and_concurrent_unloads_give_one_404(tiny, tmp_path):
    peft = pytest.importorskip("peft")
    from llmgym.wrappers.models import tiny_random_model

    paths = []
    for name, seed in (("first", 1), ("second", 2)):
        model, _ = tiny_random_model(seed=seed)
        config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
        peft.get_peft_model(model, config).save_pretrained(tmp_path / name)
        paths.append(str(tmp_path / name))
    loads = _twice_at_once(
        lambda path: httpx.post(f"{tiny}/load_lora_adapter", json={"lora_name": "a", "lora_path": path}, timeout=60),
        paths,
    )
    cards = httpx.get(f"{tiny}/models").json()["data"]
    unloads = _twice_at_once(
        lambda _: httpx.post(f"{tiny}/unload_lora_adapter", json={"lora_name": "a"}, timeout=60), [0, 1]
    )
    # as vLLM: loading an already-loaded name is a 400, never a silent replacement of the first
    assert sorted(r.status_code for r in loads) == [200, 400]
    assert "already been loaded" in next(r for r in loads if r.status_code == 400).json()["error"]["message"]
    loaded = paths[[r.status_code for r in loads].index(200)]
    assert [(card["id"], card["root"]) for card in cards[1:]] == [("a", loaded)]
    assert sorted(r.status_code for r in unloads) == [200, 404]
    assert [card["id"] for card in httpx.get(f"{tiny}/models").json()["data"]] == ["tiny"]


# -- LoRA loads that fail part-way -------------------------------------------------------------------


@contextlib.contextmanager
def _serve_tiny():
    """``llmgym serve`` of a tiny random model, in this process: ``(base_url, policy)``."""
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
        yield base_url, policy


@pytest.fixture
def tiny_for_adapters():
    """A server of its own for a test that loads LoRA adapters into the model: a load that fails
    (or a peft that cannot unload) must not leave the other tests a server that refuses requests."""
    with _serve_tiny() as served:
        yield served


def _chat(base_url: str, **body) -> httpx.Response:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)


def _adapter(tmp_path, name: str, hidden_size: int) -> str:
    """A peft LoRA adapter saved for a tiny random Llama of the given width."""
    peft = pytest.importorskip("peft")
    from llmgym.wrappers.models import tiny_random_model

    model, _ = tiny_random_model(hidden_size=hidden_size)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(tmp_path / name)
    return str(tmp_path / name)


def test_failed_lora_load_leaves_no_half_loaded_adapter(tiny_for_adapters, tmp_path):
    # An adapter made for another model fails part-way through loading. It used to leave a
    # half-initialised adapter under the name: the name could never be loaded again
    # ("Adapter with name w already exists"), and a failed load_inplace kept the name listed
    # while its requests silently ran on re-initialised (base-model) weights.
    base_url, _ = tiny_for_adapters
    good, wide = _adapter(tmp_path, "good", 64), _adapter(tmp_path, "wide", 128)
    load = lambda name, path, **kw: httpx.post(  # noqa: E731
        f"{base_url}/load_lora_adapter", json={"lora_name": name, "lora_path": path, **kw}, timeout=60
    )
    request = {"max_tokens": 4, "temperature": 0, "logprobs": True}

    def logprobs(model: str) -> list[float]:
        response = _chat(base_url, model=model, **request)
        assert response.status_code == 200, response.text
        return [entry["logprob"] for entry in response.json()["choices"][0]["logprobs"]["content"]]

    base = logprobs("tiny")
    failed = load("w", wide)
    assert failed.status_code == 400 and failed.json()["error"]["param"] == "lora_path"
    assert logprobs("tiny") == pytest.approx(base, abs=1e-5)
    assert load("w", good).status_code == 200, "the name stays usable after a failed load"
    adapted = logprobs("w")
    assert adapted != pytest.approx(base, abs=1e-3)

    replaced = load("w", wide, load_inplace=True)
    assert replaced.status_code == 400
    assert _chat(base_url, model="w", **request).status_code == 404, "the old weights are gone: no silent base model"
    assert [card["id"] for card in httpx.get(f"{base_url}/models").json()["data"]] == ["tiny"]
    assert logprobs("tiny") == pytest.approx(base, abs=1e-5)
    assert load("w", good).status_code == 200
    assert logprobs("w") == pytest.approx(adapted, abs=1e-5)
    assert httpx.post(f"{base_url}/unload_lora_adapter", json={"lora_name": "w"}).status_code == 200


def test_a_failed_in_place_lora_reload_no_longer_lists_the_deleted_adapter(tmp_path):
    """Regression: a failed in-place reload used to keep the adapter listed, served by the base model's weights."""
    peft = pytest.importorskip("peft")
    from llmgym.policy import PolicyRequest, SamplingParams
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server.backend import ServedModel
    from llmgym.wrappers.server.protocol import APIError
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(type(policy.model)(policy.model.config), config).save_pretrained(tmp_path / "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "adapter_config.json").write_text("{not json")
    backend = ServedModel(policy, "tiny")
    request = PolicyRequest([{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=2, temperature=0))

    async def main():
        await backend.start()
        try:
            await backend.load_adapter("a", str(tmp_path / "good"))
            with pytest.raises(APIError, match="Could not load the lora adapter `a`"):
                await backend.load_adapter("a", str(tmp_path / "bad"), replace=True)
            # the old weights are gone: "a" must be unknown, not silently served by the base model
            assert "a" not in backend.adapters
            with pytest.raises(APIError, match="The model `a` does not exist") as err:
                await backend.generate(request, backend.resolve_model("a"))
            assert err.value.status == 404
        finally:
            await backend.stop()
            policy.close()

    asyncio.run(main())


# -- values past what the model takes ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_with_policy():
    """One server for the tests that leave its model as they found it: ``(base_url, policy)``."""
    with _serve_tiny() as served:
        yield served


def test_chat_max_tokens_beyond_the_context_does_not_claim_a_zero_token_prompt(tiny_with_policy):
    base_url, policy = tiny_with_policy
    response = _chat(base_url, max_tokens=policy.model.config.max_position_embeddings + 1)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "max_tokens"
    assert "maximum context length" in error["message"] and "0-token prompt" not in error["message"]


def test_seeds_take_vllms_int64_range_on_every_backend(tiny_with_policy):
    # seed=-1 reached numpy on llama.cpp ("ValueError: expected non-negative integer"), and a seed
    # past 2**64 reached torch ("Overflow when unpacking long long"): 400s naming no field.
    from llmgym.wrappers.models import load_policy

    base_url, _ = tiny_with_policy
    for seed in (-1, -(2**63), 2**63 - 1):
        assert _chat(base_url, max_tokens=2, seed=seed).status_code == 200, seed
    for seed in (2**63, 2**64, -(2**63) - 1):
        response = _chat(base_url, max_tokens=2, seed=seed)
        assert response.status_code == 400 and response.json()["error"]["param"] == "seed", response.text
    pytest.importorskip("llama_cpp")

    def request(seed):
        return PolicyRequest(
            messages=[{"role": "user", "content": "hi"}],
            sampling=SamplingParams(max_tokens=4, temperature=1.0, seed=seed),
        )

    policy = load_policy("llama.cpp", "tiny-random")
    try:
        first, again = policy.generate([request(-1), request(-1)])
        assert first.token_ids == again.token_ids
    finally:
        policy.close()


# -- streams whose client hangs up --------------------------------------------------------------------


class LongReplyPolicy(Policy):
    """Answers every request at once with the same long reply, token ids included (one stream chunk per token)."""

    name = "long"

    def __init__(self, tokenizer, words: int):
        self.tokenizer = tokenizer
        self.ids = tokenizer(" ".join(f"w{i}" for i in range(words)))["input_ids"]

    def generate(self, requests):
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        return [Generation({"role": "assistant", "content": text}, token_ids=list(self.ids)) for _ in requests]


@pytest.mark.parametrize("window", [4096, None], ids=["small-receive-window", "default-window"])
def test_a_stream_stops_when_its_client_hangs_up(caplog, window):
    # With a small receive window the server's writes back up long before the stream is out, so it is still
    # streaming when the client leaves; with the default one it writes freely and meets the closed socket.
    from llmgym.wrappers.models import load_tokenizer

    policy = LongReplyPolicy(load_tokenizer(), words=2000)
    app = create_app(policy, model_name="long")
    sent, finished = [0], threading.Event()

    async def counting_app(scope, receive, send):  # counts the body chunks the app hands to the server
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def counted(message):
            sent[0] += message["type"] == "http.response.body"
            await send(message)

        try:
            await app(scope, receive, counted)
        finally:
            finished.set()

    body = json.dumps({"messages": HI, "n": 4, "stream": True}).encode()  # ~35,000 chunks, ~5 MB
    with serve_in_thread(counting_app) as base_url:
        host, port = base_url.removeprefix("http://").removesuffix("/v1").split(":")
        with socket.socket() as sock:
            if window:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
            sock.connect((host, int(port)))
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert b"200 OK" in sock.recv(4096)
            at_hang_up = sent[0]
        assert finished.wait(timeout=60), "the stream did not end after its client left"
        assert sent[0] - at_hang_up < 1000, f"{sent[0] - at_hang_up} chunks after the client left"
        assert httpx.get(f"{base_url}/models").status_code == 200
    assert not [r for r in caplog.records if "socket.send() raised exception" in r.getMessage()]
