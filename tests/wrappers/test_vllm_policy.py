"""VLLMPolicy on a tiny random Llama checkpoint (needs vllm and a CUDA GPU; skipped otherwise)."""

from __future__ import annotations

import math

import pytest

vllm = pytest.importorskip("vllm")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("in-process vLLM needs a CUDA GPU", allow_module_level=True)

from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from llmgym.wrappers.thinking import FORCED_CLOSE  # noqa: E402
from llmgym.wrappers.vllm_policy import VLLMPolicy  # noqa: E402

HI = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "guess", "description": "Guess.", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model, tokenizer = tiny_random_model(seed=0)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model


@pytest.fixture(scope="module")
def policy(checkpoint):
    return VLLMPolicy(
        str(checkpoint[0]), gpu_memory_utilization=0.2, max_model_len=1024, enforce_eager=True, dtype="float32"
    )


def request(messages=HI, tools=(), prefix=None, **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 8)
    return PolicyRequest(list(messages), list(tools), SamplingParams(**sampling), prefix)


def test_seeded_generation_with_token_ids_and_logprobs(policy, checkpoint):
    a, b, c = policy.generate(
        [request(seed=1, temperature=1.0), request(seed=1, temperature=1.0), request(seed=2, temperature=1.0)]
    )
    assert a.token_ids == b.token_ids != c.token_ids
    assert len(a.token_ids) == len(a.logprobs) == 8 and all(math.isfinite(x) for x in a.logprobs)
    model = checkpoint[1]
    with torch.no_grad():
        logits = model(torch.tensor([a.prompt_token_ids + a.token_ids])).logits[0].float().log_softmax(-1)
    n = len(a.prompt_token_ids)
    expected = [float(logits[n - 1 + i, t]) for i, t in enumerate(a.token_ids)]
    assert a.logprobs == pytest.approx(expected, abs=1e-2)


def test_prefix_and_tool_protocol(policy):
    first = policy.generate([request(tools=TOOLS, temperature=0)])[0]
    assert "<tool_call>" in policy.tokenizer.decode(first.prompt_token_ids)
    prefix = first.prompt_token_ids + first.token_ids
    messages = HI + [first.message, {"role": "user", "content": "again"}]
    second = policy.generate([request(messages, TOOLS, prefix=prefix)])[0]
    assert second.prompt_token_ids[: len(prefix)] == prefix and second.metadata["prefix_reused"]


def test_thinking_budget_two_passes(checkpoint):
    model, tokenizer = tiny_random_model(seed=0)
    template = tokenizer.chat_template + "{% if add_generation_prompt %}<think>\n{% endif %}"
    policy = VLLMPolicy(
        str(checkpoint[0]),
        chat_template=template,
        gpu_memory_utilization=0.2,
        max_model_len=1024,
        enforce_eager=True,
        dtype="float32",
    )
    closing = tokenizer.encode(FORCED_CLOSE, add_special_tokens=False)
    out = policy.generate([request(thinking_budget=4, max_tokens=16, seed=0, temperature=1.0)])[0]
    assert out.token_ids[4 : 4 + len(closing)] == closing
    assert out.metadata["forced_positions"] == list(range(4, 4 + len(closing)))
    assert all(math.isfinite(x) for x in out.logprobs) and len(out.token_ids) == 16
