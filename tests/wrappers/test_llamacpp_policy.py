"""LlamaCppPolicy on a tiny random GGUF with the SmolLM2 tokenizer (fast), and on SmolLM2 itself (one quick smoke
test)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy, _inverse_cdf, _sample  # noqa: E402
from llmgym.wrappers.models import tiny_random_gguf  # noqa: E402
from llmgym.wrappers.thinking import FORCED_CLOSE  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {"name": "guess", "description": "Guess a word.", "parameters": {"type": "object"}},
    }
]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gguf_path():
    return tiny_random_gguf(seed=0)


@pytest.fixture(scope="module")
def policy(gguf_path):
    policy = LlamaCppPolicy(gguf_path, n_ctx=1024)
    yield policy
    policy.close()


def request(messages=HI, tools=(), prefix=None, **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 6)
    return PolicyRequest(list(messages), list(tools), SamplingParams(**sampling), prefix)


def test_seeded_sampling_is_reproducible(policy):
    first, second, other = policy.generate(
        [
            request(seed=5, temperature=1.0, max_tokens=12),
            request(seed=5, temperature=1.0, max_tokens=12),
            request(seed=6, temperature=1.0, max_tokens=12),
        ]
    )
    assert first.token_ids == second.token_ids != other.token_ids
    assert len(first.token_ids) == len(first.logprobs) == 12 and first.finish_reason == "length"
    assert first.metadata["cached_prompt_tokens"] == 0
    assert second.metadata["cached_prompt_tokens"] == len(second.prompt_token_ids) - 1  # KV cache reused


def test_unseeded_requests_follow_the_policy_seed(gguf_path):
    runs = []
    for _ in range(2):
        policy = LlamaCppPolicy(gguf_path, n_ctx=256, seed=11)
        runs.append([out.token_ids for out in policy.generate([request(temperature=1.0), request(temperature=1.0)])])
        policy.close()
    assert runs[0] == runs[1] and runs[0][0] != runs[0][1]


def test_logprobs_match_llama_cpp_scoring_the_same_ids(policy, gguf_path):
    out = policy.generate([request(seed=1, temperature=1.3, max_tokens=10)])[0]
    assert all(math.isfinite(x) and x <= 0 for x in out.logprobs)
    scorer = llama_cpp.Llama(str(gguf_path), n_ctx=256, logits_all=True, verbose=False)
    ids = out.prompt_token_ids + out.token_ids
    scorer.eval(ids)
    logits = scorer.scores[: len(ids)].astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    logprobs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    n = len(out.prompt_token_ids)
    expected = [logprobs[n - 1 + i, token] for i, token in enumerate(out.token_ids)]
    assert out.logprobs == pytest.approx(expected, abs=2e-3)
    scorer.close()


def test_prefix_continuation_is_token_exact(gguf_path):
    policy = LlamaCppPolicy(gguf_path, n_ctx=1024)
    # A template that trims turns: the greedy tiny model writes only newlines, which re-rendering loses.
    policy_template = policy.chat_template.replace("message['content']", "message['content'] | trim")
    policy.close()
    policy = LlamaCppPolicy(gguf_path, n_ctx=1024, chat_template=policy_template)
    first = policy.generate([request(temperature=0, max_tokens=8)])[0]
    prefix = first.prompt_token_ids + first.token_ids
    messages = HI + [first.message, {"role": "user", "content": "again"}]
    retokenized = policy.build_prompt(request(messages))
    assert retokenized[: len(prefix)] != prefix, "re-rendering must differ for the test to mean anything"
    second = policy.generate([request(messages, prefix=prefix)])[0]
    assert second.prompt_token_ids[: len(prefix)] == prefix and second.metadata["prefix_reused"]
    added = policy.llm.detokenize(second.prompt_token_ids[len(prefix) :], special=True).decode()
    assert added == "<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
    assert second.metadata["cached_prompt_tokens"] >= len(prefix) - 1
    policy.close()


def test_prefix_ending_in_eos_is_not_closed_twice(policy):
    prompt = policy.build_prompt(request())
    prefix = prompt + policy.tokenize("Hello there<|im_end|>")
    messages = HI + [{"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "next"}]
    prompt = policy.prompter.prepare(request(messages, prefix=prefix))
    assert prompt.prefix_reused and prompt.ids[: len(prefix)] == prefix
    assert prompt.ids == policy.build_prompt(request(messages))


def test_tool_protocol_is_injected(policy):
    ids = policy.build_prompt(request(tools=TOOLS))
    text = policy.llm.detokenize(ids, special=True).decode()
    assert "<tool_call>" in text and '"name": "guess"' in text and text.endswith("<|im_start|>assistant\n")


def test_thinking_budget_force_closes_the_block(gguf_path):
    base = LlamaCppPolicy(gguf_path, n_ctx=512)
    template = base.chat_template + "{% if add_generation_prompt %}<think>\n{% endif %}"
    base.close()
    policy = LlamaCppPolicy(gguf_path, n_ctx=512, chat_template=template)
    closing = policy.tokenize(FORCED_CLOSE)
    out = policy.generate([request(thinking_budget=4, max_tokens=16, seed=0, temperature=1.0)])[0]
    assert out.token_ids[4 : 4 + len(closing)] == closing
    assert out.metadata["forced_positions"] == list(range(4, 4 + len(closing)))
    assert 4 < out.thinking_tokens <= 4 + len(closing) and len(out.token_ids) == 16
    assert out.message["reasoning_content"] and "</think>" not in out.message["content"]
    policy.close()


def test_stop_strings_and_length(policy):
    plain = policy.generate([request(temperature=0, max_tokens=12)])[0]
    assert plain.finish_reason == "length" and plain.message["content"] == "\n" * 12  # the greedy tiny model's output
    stopped = policy.generate([request(temperature=0, max_tokens=12, stop=["\n\n\n"])])[0]
    assert stopped.finish_reason == "stop" and len(stopped.token_ids) == 3 and stopped.message["content"] == ""


def test_concurrent_calls_are_serialized_safely(policy):
    async def run():
        return await asyncio.gather(*(policy.agenerate(request(seed=i, temperature=1.0)) for i in range(4)))

    outs = asyncio.run(run())
    alone = policy.generate([request(seed=i, temperature=1.0) for i in range(4)])
    assert [o.token_ids for o in outs] == [a.token_ids for a in alone]


def test_bad_requests_are_clear_errors(policy):
    with pytest.raises(ValueError, match="n_ctx"):
        policy.generate([request([{"role": "user", "content": "word " * 2000}])])
    with pytest.raises(ValueError, match="no assistant turn"):
        policy.generate([request(prefix=[1, 2])])
    with pytest.raises(ValueError, match="top_p"):
        policy.generate([request(top_p=0)])
    with pytest.raises(ValueError, match="gguf"):
        LlamaCppPolicy("not-a-model")
    assert policy.generate([request(max_tokens=2)])[0].token_ids  # still works afterwards


def test_nucleus_sampling_keeps_only_the_top_mass():
    logits = np.log(np.array([0.6, 0.3, 0.05, 0.05], dtype=np.float32))
    rng = np.random.default_rng(0)
    draws = {_sample(logits, SamplingParams(temperature=1.0, top_p=0.8), rng) for _ in range(200)}
    assert draws == {0, 1}
    draws = {_sample(logits, SamplingParams(temperature=1.0, top_p=0.5), rng) for _ in range(50)}
    assert draws == {0}
    draws = {_sample(logits, SamplingParams(temperature=1.0), rng) for _ in range(400)}
    assert draws == {0, 1, 2, 3}


def test_the_blocked_inverse_cdf_draws_what_an_exact_running_sum_does():
    """The draw's running sum is taken by blocks (a float32 ``np.cumsum`` over the vocabulary was slow, and
    drifted): it lands where a float64 running sum does, and never on an entry of 0."""
    rng = np.random.default_rng(0)
    for size in (1, 5, 256, 257, 49152):
        probs = rng.random(size).astype(np.float32) * (rng.random(size) < 0.5)
        probs[rng.integers(size)] = 0.5  # not all 0
        exact = np.cumsum(probs, dtype=np.float64)
        for uniform in rng.random(50):
            index, target = _inverse_cdf(probs, uniform), uniform * exact[-1]
            expected = int(np.searchsorted(exact, target))
            assert probs[index] > 0
            # another index only where the target lies within rounding of the running sum between them
            assert index == expected or abs(exact[min(index, expected)] - target) < 1e-6 * exact[-1]
    assert [_inverse_cdf(np.array([0.25, 0, 0.5, 0.25, 0], dtype=np.float32), u) for u in (0.1, 0.3, 0.8)] == [0, 2, 3]


def test_smollm2_smoke():
    policy = LlamaCppPolicy()
    out = policy.generate([request([{"role": "user", "content": "What is 2+3?"}], temperature=0, max_tokens=24)])[0]
    policy.close()
    assert "5" in out.message["content"] and out.finish_reason == "stop"


def test_complete_continues_raw_token_ids(policy):
    ids = policy.tokenize("The capital of France is")
    out = policy.complete([ids], SamplingParams(temperature=0, max_tokens=4))[0]
    assert out.prompt_token_ids == ids and len(out.token_ids) == len(out.logprobs) == 4
    assert out.message["content"] == policy.detokenize(out.token_ids)
    with pytest.raises(ValueError, match="list of ints"):
        policy.complete([[10**9]])


# -- a thinking budget of 0, and requests checked before any is generated -----------------------


def seeded_request(messages=HI, **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 3)
    sampling.setdefault("seed", 0)
    return PolicyRequest(list(messages), sampling=SamplingParams(**sampling))


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
    out = llamacpp_think.generate([seeded_request(thinking_budget=0, max_tokens=10)])[0]
    assert out.token_ids[: len(closing)] == closing  # was: one sampled thinking token first
    assert out.metadata["forced_positions"] == list(range(len(closing)))
    assert out.message["reasoning_content"] == ""


def test_llamacpp_generate_checks_every_request_before_generating(llamacpp_think, monkeypatch):
    generated = []
    original = llamacpp_think._generate_prompt
    monkeypatch.setattr(llamacpp_think, "_generate_prompt", lambda prompt: generated.append(prompt) or original(prompt))
    with pytest.raises(ValueError, match="n_ctx is 128"):
        llamacpp_think.generate([seeded_request(), seeded_request([{"role": "user", "content": "hi " * 200}])])
    with pytest.raises(ValueError, match="max_tokens"):
        llamacpp_think.generate([seeded_request(), seeded_request(max_tokens=0)])
    assert generated == []  # was: the first request was generated, then thrown away
