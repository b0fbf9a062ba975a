"""Regressions from a new-user walkthrough of the local policies, ``llmgym serve`` and ``OpenAIPolicy``.

Each test reproduces a problem found by following docs/policies-local.md and
docs/serve.md literally: LoRA loads that fail part-way, model names that are
not local, out-of-range seeds, the context-length message of a chat request.
"""

from __future__ import annotations

import contextlib
import time

import httpx
import pytest

from llmgym.policy import PolicyRequest, SamplingParams
from llmgym.wrappers.server import create_app, serve_in_thread


@contextlib.contextmanager
def _serve_tiny():
    """``llmgym serve`` of a tiny random model, in this process: ``(base_url, policy)``."""
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    with serve_in_thread(create_app(policy, model_name="tiny")) as base_url:
        yield base_url, policy


@pytest.fixture(scope="module")
def tiny():
    """One server for the tests that leave its model as they found it."""
    with _serve_tiny() as served:
        yield served


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
        f"{base_url}/load_lora_adapter", json={"lora_name": name, "lora_path": path, **kw}, timeout=60)
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


def test_a_model_id_not_in_the_local_cache_fails_at_once_without_asking_the_hub():
    # from_pretrained(local_files_only=True) still sent HEAD requests for adapter_config.json
    # (transformers 5): offline, `llmgym serve --backend transformers --model tiny-randm` retried
    # for ~26 s, then said "Check your internet connection".
    pytest.importorskip("transformers")
    from llmgym.wrappers.models import load_policy

    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match="never downloads") as caught:
        load_policy("transformers", "no-such-org/no-such-model-xyz")
    assert time.monotonic() - started < 5
    assert "local Hugging Face cache" in str(caught.value)


def test_a_model_id_in_the_local_hugging_face_cache_loads_from_its_snapshot(fake_hf_cache):
    from llmgym.wrappers.models import load_model

    model, _ = fake_hf_cache("acme/tiny")
    loaded, _ = load_model("acme/tiny", device="cpu")
    assert loaded.config.hidden_size == model.config.hidden_size


@pytest.mark.parametrize("backend", ["transformers", "llama.cpp"])
def test_load_policy_takes_tiny_random_as_the_trainers_do(backend):
    # `llmgym train grpo --model tiny-random` works; `llmgym serve --backend transformers --model
    # tiny-random` (the server such a run pushes its LoRA adapters to) looked the name up on the hub.
    pytest.importorskip("transformers" if backend == "transformers" else "llama_cpp")
    from llmgym.wrappers.models import load_policy

    policy = load_policy(backend, "tiny-random")
    try:
        request = PolicyRequest(messages=[{"role": "user", "content": "hi"}],
                                sampling=SamplingParams(max_tokens=3, seed=0))
        generation = policy.generate([request])[0]
        assert len(generation.token_ids) == 3 and policy.name.startswith("tiny-random-llama")
    finally:
        policy.close()


def test_chat_max_tokens_beyond_the_context_does_not_claim_a_zero_token_prompt(tiny):
    base_url, policy = tiny
    response = _chat(base_url, max_tokens=policy.model.config.max_position_embeddings + 1)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "max_tokens"
    assert "maximum context length" in error["message"] and "0-token prompt" not in error["message"]


def test_seeds_take_vllms_int64_range_on_every_backend(tiny):
    # seed=-1 reached numpy on llama.cpp ("ValueError: expected non-negative integer"), and a seed
    # past 2**64 reached torch ("Overflow when unpacking long long"): 400s naming no field.
    from llmgym.wrappers.models import load_policy

    base_url, _ = tiny
    for seed in (-1, -(2**63), 2**63 - 1):
        assert _chat(base_url, max_tokens=2, seed=seed).status_code == 200, seed
    for seed in (2**63, 2**64, -(2**63) - 1):
        response = _chat(base_url, max_tokens=2, seed=seed)
        assert response.status_code == 400 and response.json()["error"]["param"] == "seed", response.text
    pytest.importorskip("llama_cpp")
    policy = load_policy("llama.cpp", "tiny-random")
    try:
        request = lambda seed: PolicyRequest(messages=[{"role": "user", "content": "hi"}],  # noqa: E731
                                             sampling=SamplingParams(max_tokens=4, temperature=1.0, seed=seed))
        first, again = policy.generate([request(-1), request(-1)])
        assert first.token_ids == again.token_ids
    finally:
        policy.close()
