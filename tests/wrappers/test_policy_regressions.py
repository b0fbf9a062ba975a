"""Regression tests for bugs found in the local policy adapters and model helpers (tiny random models only)."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from llmgym.wrappers.thinking import FORCED_CLOSE  # noqa: E402
from llmgym.wrappers.transformers_policy import TransformersPolicy  # noqa: E402

HI = [{"role": "user", "content": "hi"}]


def request(messages=HI, **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 3)
    sampling.setdefault("seed", 0)
    return PolicyRequest(list(messages), sampling=SamplingParams(**sampling))


@pytest.fixture
def small_context():
    model, tokenizer = tiny_random_model(seed=0)  # a fresh model: its config is changed below
    model.config.max_position_embeddings = 64
    return model, tokenizer


def test_transformers_too_long_prompt_fails_alone_through_agenerate(small_context):
    policy = TransformersPolicy(*small_context, batch_wait_ms=50)

    async def run():
        return await asyncio.gather(policy.agenerate(request()), policy.agenerate(request([{"role": "user", "content": "hi " * 100}])),
                                    return_exceptions=True)

    good, bad = asyncio.run(run())
    assert isinstance(bad, ValueError) and "context is 64" in str(bad)
    assert not isinstance(good, BaseException) and len(good.token_ids) == 3  # was: the same ValueError


def test_transformers_generation_stops_at_the_context_window(small_context):
    policy = TransformersPolicy(*small_context)
    out = policy.generate([request(max_tokens=100, temperature=1.0)])[0]
    assert len(out.prompt_token_ids) + len(out.token_ids) == 64  # was: 100 tokens, past the model's 64 positions
    assert out.finish_reason == "length"
    raw = policy.complete([list(range(1000, 1060))], SamplingParams(max_tokens=10, seed=0))[0]
    assert len(raw.token_ids) == 4 and raw.finish_reason == "length"


def test_transformers_thinking_budget_zero_closes_before_any_token():
    model, tokenizer = tiny_random_model(seed=0)
    template = tokenizer.chat_template + "{% if add_generation_prompt %}<think>\n{% endif %}"
    policy = TransformersPolicy(model, tokenizer, chat_template=template)
    closing = tokenizer.encode(FORCED_CLOSE, add_special_tokens=False)
    out = policy.generate([request(thinking_budget=0, max_tokens=10)])[0]
    assert out.token_ids[: len(closing)] == closing  # was: one sampled thinking token first
    assert out.metadata["forced_positions"] == list(range(len(closing)))
    tag_end = next(j for j in range(1, len(closing) + 1) if "</think>" in tokenizer.decode(closing[:j]))
    assert out.thinking_tokens == tag_end
    assert out.message["reasoning_content"] == ""


@pytest.fixture(scope="module")
def llamacpp_think():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy
    from llmgym.wrappers.models import tiny_random_gguf

    path = tiny_random_gguf(seed=0)
    plain = LlamaCppPolicy(path, n_ctx=128)
    template = plain.chat_template + "{% if add_generation_prompt %}<think>\n{% endif %}"
    plain.close()
    policy = LlamaCppPolicy(path, n_ctx=128, chat_template=template)
    yield policy
    policy.close()


def test_llamacpp_thinking_budget_zero_closes_before_any_token(llamacpp_think):
    closing = llamacpp_think.tokenize(FORCED_CLOSE)
    out = llamacpp_think.generate([request(thinking_budget=0, max_tokens=10)])[0]
    assert out.token_ids[: len(closing)] == closing  # was: one sampled thinking token first
    assert out.metadata["forced_positions"] == list(range(len(closing)))
    assert out.message["reasoning_content"] == ""


def test_llamacpp_generate_checks_every_request_before_generating(llamacpp_think, monkeypatch):
    generated = []
    original = llamacpp_think._generate_prompt
    monkeypatch.setattr(llamacpp_think, "_generate_prompt", lambda prompt: generated.append(prompt) or original(prompt))
    with pytest.raises(ValueError, match="n_ctx is 128"):
        llamacpp_think.generate([request(), request([{"role": "user", "content": "hi " * 200}])])
    with pytest.raises(ValueError, match="max_tokens"):
        llamacpp_think.generate([request(), request(max_tokens=0)])
    assert generated == []  # was: the first request was generated, then thrown away


def test_converted_gguf_cache_is_stale_for_a_rewritten_or_other_file_of_the_same_size(tmp_path):
    import json
    import os

    from llmgym.wrappers import models

    first = tmp_path / "a" / "model.gguf"
    other = tmp_path / "b" / "model.gguf"  # same name, same size, other directory
    for path, byte in ((first, b"x"), (other, b"y")):
        path.parent.mkdir()
        path.write_bytes(byte * 16)
    target = tmp_path / "cache" / "model"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / models._SOURCE_FILE).write_text(json.dumps(models._source_record(first)))
    assert models._is_current(target, first, needs_weights=True)
    assert not models._is_current(target, other, needs_weights=True)  # was: True, the other file's weights
    stat = first.stat()
    first.write_bytes(b"z" * 16)  # re-exported after fine-tuning: same size
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert not models._is_current(target, first, needs_weights=True)  # was: True, the old weights


def test_a_negative_thinking_budget_is_refused_before_batching():
    from llmgym.policy import PolicyRequest, SamplingParams
    from llmgym.wrappers.prompting import check_request

    with pytest.raises(ValueError, match="thinking_budget"):
        check_request(PolicyRequest(messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(thinking_budget=-1)))


def test_an_empty_stop_string_does_not_cut_a_served_completion():
    from llmgym.policy import SamplingParams
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server.complete import complete_ids

    model, tokenizer = tiny_random_model(0)
    ids = tokenizer("hello there").input_ids
    plain = complete_ids(model, tokenizer, [(ids, SamplingParams(temperature=0, max_tokens=6))])[0]
    empty = complete_ids(model, tokenizer, [(ids, SamplingParams(temperature=0, max_tokens=6, stop=[""]))])[0]
    assert empty.token_ids == plain.token_ids and empty.message["content"] == plain.message["content"]
