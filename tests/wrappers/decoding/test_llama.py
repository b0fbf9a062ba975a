"""LlamaDecoder (wrappers/decoding/llama.py): its steps give the transformers forward's tokens and log-probs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.decoding import llama  # noqa: E402
from llmgym.wrappers.decoding.llama import LlamaDecoder  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from llmgym.wrappers.transformers_policy import TransformersPolicy  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_model(seed=0)


def requests() -> list[PolicyRequest]:
    """Prompts of different lengths (left padding) and budgets (rows leave the batch at different steps)."""
    texts = ["hi", "Tell me a long story about a cat and a dog who meet in a park.", "Name a fruit.", "ok"]
    return [
        PolicyRequest([{"role": "user", "content": text}], [], SamplingParams(max_tokens=budget, seed=seed))
        for seed, (text, budget) in enumerate(zip(texts, [12, 5, 9, 1]))
    ]


def test_fast_decoding_gives_the_transformers_forwards_tokens_and_logprobs(tiny):
    model, tokenizer = tiny
    slow = TransformersPolicy(model, tokenizer, fast_decode=False).generate(requests())
    fast_policy = TransformersPolicy(model, tokenizer)
    assert fast_policy._fast_decoder_reason() is None
    fast = fast_policy.generate(requests())
    assert [len(g.token_ids) for g in fast] == [12, 5, 9, 1]
    for a, b in zip(slow, fast):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert a.finish_reason == b.finish_reason


def test_the_cache_grows_past_its_first_allocation(tiny, monkeypatch):
    model, tokenizer = tiny
    request = [PolicyRequest([{"role": "user", "content": "hi"}], [], SamplingParams(max_tokens=20, seed=3))]
    slow = TransformersPolicy(model, tokenizer, fast_decode=False).generate(request)[0]
    monkeypatch.setattr(llama, "_FIRST_GROWTH", 2)  # room for 2 tokens: grown 4 times on the way to 20
    fast = TransformersPolicy(model, tokenizer).generate(request)[0]
    assert fast.token_ids == slow.token_ids and fast.logprobs == pytest.approx(slow.logprobs, abs=1e-4)


def test_models_it_cannot_run_keep_the_transformers_forward(tiny):
    model, tokenizer = tiny
    assert "not a plain LlamaForCausalLM" in LlamaDecoder.unsupported(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="cannot run this model"):
        LlamaDecoder(torch.nn.Linear(2, 2))
    peft = pytest.importorskip("peft")
    wrapped = peft.get_peft_model(tiny_random_model(seed=0)[0], peft.LoraConfig(r=2, target_modules=["q_proj"]))
    policy = TransformersPolicy(wrapped, tokenizer)
    assert "not a plain LlamaForCausalLM" in policy._fast_decoder_reason()
    out = policy.generate(requests()[:1])[0]  # the transformers forward, LoRA included
    assert len(out.token_ids) == 12
    assert "fast_decode=False" in TransformersPolicy(model, tokenizer, fast_decode=False)._fast_decoder_reason()


def test_step_before_start_is_refused(tiny):
    decoder = LlamaDecoder(tiny[0])
    with pytest.raises(RuntimeError, match="start"):
        decoder.step(torch.tensor([1]), torch.tensor([0]), torch.ones(1, 1, dtype=torch.long))
