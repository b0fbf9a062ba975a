"""TransformersPolicy on a tiny random Llama with the SmolLM2 tokenizer (fast), and on SmolLM2 itself (slow)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.rollout import rollout  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from llmgym.wrappers.thinking import FORCED_CLOSE  # noqa: E402
from llmgym.wrappers.transformers_policy import TransformersPolicy  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess a word.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]
HI = [{"role": "user", "content": "hi"}]
WORDLE = "llmgym/Wordle-v0"


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_model(seed=0)


@pytest.fixture(scope="module")
def policy(tiny):
    return TransformersPolicy(*tiny, batch_size=4)


def request(messages=HI, tools=(), **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 6)
    return PolicyRequest(list(messages), list(tools), SamplingParams(**sampling))


def recomputed_logprobs(model, prompt: list[int], generated: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + generated])).logits[0].float().log_softmax(-1)
    return [float(logits[len(prompt) - 1 + i, token]) for i, token in enumerate(generated)]


def test_batched_and_single_agree_on_shapes_and_prompts(policy):
    requests = [request(seed=1), request(HI * 3, seed=2, max_tokens=3), request(HI, TOOLS, seed=3)]
    batched = policy.generate(requests)
    single = [policy.generate([r])[0] for r in requests]
    for b, s, r in zip(batched, single, requests):
        assert b.prompt_token_ids == s.prompt_token_ids == policy.build_prompt(r)
        assert len(b.token_ids) == len(b.logprobs) == r.sampling.max_tokens == len(s.token_ids)
        assert b.finish_reason == s.finish_reason == "length"
        assert b.message["role"] == "assistant" and isinstance(b.message["content"], str)


def test_same_seed_same_output_and_other_seed_differs(policy):
    first, second, other = policy.generate(
        [request(seed=7, max_tokens=12), request(seed=7, max_tokens=12), request(seed=8, max_tokens=12)]
    )
    assert first.token_ids == second.token_ids
    assert first.token_ids != other.token_ids


def test_greedy_ignores_seed(policy):
    a, b = policy.generate([request(temperature=0, seed=1), request(temperature=0, seed=2)])
    assert a.token_ids == b.token_ids


def test_logprobs_match_a_forward_pass_on_the_same_ids(policy, tiny):
    # Different prompt lengths (left padding) and lengths (finished rows leave the batch mid-way).
    outs = policy.generate(
        [
            request(seed=0, temperature=1.5, max_tokens=3),
            request(HI * 4, seed=1, top_p=0.9, max_tokens=9),
            request(HI * 2, seed=2, max_tokens=6),
        ]
    )
    assert [len(out.token_ids) for out in outs] == [3, 9, 6]
    for out in outs:
        assert all(math.isfinite(x) and x <= 0 for x in out.logprobs)
        expected = recomputed_logprobs(tiny[0], out.prompt_token_ids, out.token_ids)
        assert out.logprobs == pytest.approx(expected, abs=1e-4)


def test_prefix_continuation_is_token_exact(tiny):
    model, tokenizer = tiny
    # A template that trims turns, as many do: the greedy tiny model writes only newlines,
    # so re-rendering the chat loses what it generated.
    template = tokenizer.chat_template.replace("message['content']", "message['content'] | trim")
    policy = TransformersPolicy(model, tokenizer, chat_template=template)
    first = policy.generate([request(temperature=0, max_tokens=10)])[0]
    prefix = first.prompt_token_ids + first.token_ids
    messages = HI + [first.message, {"role": "user", "content": "again"}]
    second_request = request(messages, seed=4)
    retokenized = policy.build_prompt(second_request)
    assert retokenized[: len(prefix)] != prefix, "this chat must re-tokenize differently for the test to mean anything"

    second_request.prefix_token_ids = prefix
    second = policy.generate([second_request])[0]
    assert second.prompt_token_ids[: len(prefix)] == prefix
    added = tokenizer.decode(second.prompt_token_ids[len(prefix) :])
    # Stopped on length, so the template's end-of-turn is added before the new user turn.
    assert added == "<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
    assert second.metadata["prefix_reused"] is True
    assert len(second.logprobs) == len(second.token_ids) == 6


def test_prefix_ending_in_eos_is_not_closed_twice(policy, tiny):
    tokenizer = tiny[1]
    prompt = policy.build_prompt(request())
    answer = tokenizer.encode("Hello there", add_special_tokens=False)
    prefix = prompt + answer + [tokenizer.eos_token_id]
    messages = HI + [{"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "next"}]
    ids = policy.build_prompt(PolicyRequest(messages, prefix_token_ids=prefix))
    assert ids[: len(prefix)] == prefix
    assert tokenizer.decode(ids[len(prefix) :]) == "\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n"
    # Here re-rendering the whole chat gives the same ids: the continuation is consistent with the template.
    assert ids == policy.build_prompt(PolicyRequest(messages))


def test_bad_prefix_is_a_clear_error(policy):
    with pytest.raises(ValueError, match="no assistant turn"):
        policy.generate([PolicyRequest(HI, prefix_token_ids=[1, 2, 3])])
    with pytest.raises(ValueError, match="prefix_token_ids must be a list of ints"):
        policy.generate([PolicyRequest(HI + [{"role": "assistant", "content": "x"}], prefix_token_ids=[-5])])
    with pytest.raises(ValueError, match="max_tokens"):
        policy.generate([request(max_tokens=0)])


def test_tool_protocol_injected_when_the_template_has_no_tools(policy, tiny):
    text = tiny[1].decode(policy.build_prompt(request(tools=TOOLS)))
    assert "<tool_call>" in text and '"name": "guess"' in text
    with_system = [{"role": "system", "content": "Play well."}] + HI
    text = tiny[1].decode(policy.build_prompt(request(with_system, TOOLS)))
    assert text.index("Play well.") < text.index("<tool_call>") < text.index("hi<|im_end|>")
    assert "<tool_call>" not in tiny[1].decode(policy.build_prompt(request()))


def test_native_tool_template_gets_the_tools(tiny):
    template = (
        "{% if tools %}TOOLS:{{ tools | map(attribute='function.name') | join(',') }}\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    policy = TransformersPolicy(*tiny, chat_template=template)
    assert policy.native_tools
    text = tiny[1].decode(policy.build_prompt(request(tools=TOOLS)))
    assert text.startswith("TOOLS:guess\n") and "<tool_call>" not in text


def test_thinking_budget_force_closes_the_block(tiny):
    model, tokenizer = tiny
    # An R1-style template: the generation prompt opens the think block.
    template = tokenizer.chat_template + "{% if add_generation_prompt %}<think>\n{% endif %}"
    policy = TransformersPolicy(model, tokenizer, chat_template=template)
    closing = tokenizer.encode(FORCED_CLOSE, add_special_tokens=False)
    capped, free = policy.generate([request(thinking_budget=5, max_tokens=20, seed=0), request(max_tokens=20, seed=0)])
    assert capped.token_ids[5 : 5 + len(closing)] == closing
    assert capped.metadata["forced_positions"] == list(range(5, 5 + len(closing)))
    tag_end = next(j for j in range(1, len(closing) + 1) if "</think>" in tokenizer.decode(closing[:j]))
    assert capped.thinking_tokens == 5 + tag_end  # the closing tag counts, what follows it does not
    assert len(capped.token_ids) == 20  # every generated token is kept
    assert capped.message["reasoning_content"] and "</think>" not in capped.message["content"]
    assert free.thinking_tokens == 20 and free.message["content"] == ""  # never closed: all reasoning


def test_stop_strings_end_the_turn(policy):
    out = policy.generate([request(temperature=0, max_tokens=30)])[0]
    text = out.message["content"]
    assert len(text) > 2
    stop = text[1:3]
    stopped = policy.generate([request(temperature=0, max_tokens=30, stop=[stop])])[0]
    assert stopped.finish_reason == "stop"
    assert len(stopped.token_ids) < 30 and stop not in stopped.message["content"]


def test_concurrent_agenerate_calls_are_batched(policy):
    async def run():
        return await asyncio.gather(*(policy.agenerate(request(seed=i)) for i in range(10)))

    outs = asyncio.run(run())
    assert max(out.metadata["batch_size"] for out in outs) == 4  # policy.batch_size
    alone = policy.generate([request(seed=9)])[0]
    assert outs[9].token_ids == alone.token_ids


def test_a_bad_request_fails_alone_in_a_batch(policy):
    async def run():
        good = policy.agenerate(request(seed=0))
        bad = policy.agenerate(PolicyRequest(HI, prefix_token_ids=[1]))
        return await asyncio.gather(good, bad, return_exceptions=True)

    good, bad = asyncio.run(run())
    assert len(good.token_ids) == 6
    assert isinstance(bad, ValueError)


def test_shares_a_trainers_model_and_keeps_its_mode(tiny):
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer)
    assert policy.model is model
    model.train()
    try:
        policy.generate([request()])
        assert model.training
    finally:
        model.eval()
    with pytest.raises(TypeError, match="tokenizer"):
        TransformersPolicy(model)


@pytest.mark.slow
def test_smollm2_answers_simple_arithmetic():
    policy = TransformersPolicy()
    out = policy.generate([request([{"role": "user", "content": "What is 2+3?"}], temperature=0, max_tokens=40)])[0]
    assert "5" in out.message["content"]
    assert out.finish_reason == "stop" and out.token_ids[-1] in policy.eos_ids


def test_complete_continues_raw_token_ids(policy, tiny):
    ids = tiny[1].encode("The capital of France is")
    first, second = policy.complete([ids, ids + ids], SamplingParams(max_tokens=5, seed=3))
    assert first.prompt_token_ids == ids and len(first.token_ids) == 5
    assert first.logprobs == pytest.approx(recomputed_logprobs(tiny[0], ids, first.token_ids), abs=1e-4)
    assert first.message["content"] == tiny[1].decode(first.token_ids, skip_special_tokens=True)
    with pytest.raises(ValueError, match="non-empty list"):
        policy.complete([[]])


def test_content_parts_and_bad_messages(policy):
    parts = [{"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}]
    assert policy.build_prompt(request(parts)) == policy.build_prompt(request())
    with pytest.raises(ValueError, match="role"):
        policy.generate([request(["not a message"])])
    with pytest.raises(ValueError, match="content"):
        policy.generate([request([{"role": "user", "content": 42}])])


def test_shared_prompt_prefill_matches_unshared(policy):
    # Four rows with one prompt prefill once (KV cache copied); a mixed batch prefills each distinct prompt once.
    shared = policy.generate(
        [request(seed=s, max_tokens=8) for s in range(4)] + [request(HI * 2, seed=9, max_tokens=8)]
    )
    for seed, out in zip([0, 1, 2, 3, 9], shared):
        alone = policy.generate([request(HI * 2 if seed == 9 else HI, seed=seed, max_tokens=8)])[0]
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_inverse_cdf_sampling_follows_the_distribution():
    from llmgym.wrappers.transformers_policy import _inverse_cdf

    probs = torch.tensor([[0.2, 0.0, 0.8, 0.0]] * 4000)
    generators = [torch.Generator().manual_seed(i) for i in range(len(probs))]
    drawn = _inverse_cdf(probs, generators)
    assert set(drawn.tolist()) == {0, 2}  # zero-probability tokens are never drawn
    assert abs(float((drawn == 0).float().mean()) - 0.2) < 0.03


def test_int8_rollout_precision_is_deprecated_and_decodes_with_the_fp32_weights(tiny):
    model, tokenizer = tiny
    with pytest.warns(DeprecationWarning, match="int8.*bf16"):
        policy = TransformersPolicy(model, tokenizer, rollout_precision="int8")
    out = policy.generate([request(seed=0, max_tokens=4)])[0]
    assert out.metadata["rollout_precision"] == "fp32"
    expected = recomputed_logprobs(model, out.prompt_token_ids, out.token_ids)
    assert out.logprobs == pytest.approx(expected, abs=1e-4)
    with pytest.raises(ValueError, match="rollout_precision"):
        TransformersPolicy(model, tokenizer, rollout_precision="int4")


def test_a_cached_model_id_keeps_its_id_as_the_policy_name(fake_hf_cache):
    # load_model loads an id from its cache snapshot folder; the policy was then named after the
    # snapshot's commit hash (config.name_or_path = .../snapshots/<hash>) instead of the model.
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    fake_hf_cache("acme/TinyChat-1M")
    policy = TransformersPolicy("acme/TinyChat-1M", device="cpu")
    assert policy.name == "TinyChat-1M"
    assert policy.model.config.name_or_path == "acme/TinyChat-1M"


# -- the context window, and a thinking budget of 0 ---------------------------------------------


def seeded_request(messages=HI, **sampling) -> PolicyRequest:
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
        return await asyncio.gather(
            policy.agenerate(seeded_request()),
            policy.agenerate(seeded_request([{"role": "user", "content": "hi " * 100}])),
            return_exceptions=True,
        )

    good, bad = asyncio.run(run())
    assert isinstance(bad, ValueError) and "context is 64" in str(bad)
    assert not isinstance(good, BaseException) and len(good.token_ids) == 3  # was: the same ValueError


def test_transformers_generation_stops_at_the_context_window(small_context):
    policy = TransformersPolicy(*small_context)
    out = policy.generate([seeded_request(max_tokens=100, temperature=1.0)])[0]
    assert len(out.prompt_token_ids) + len(out.token_ids) == 64  # was: 100 tokens, past the model's 64 positions
    assert out.finish_reason == "length"
    raw = policy.complete([list(range(1000, 1060))], SamplingParams(max_tokens=10, seed=0))[0]
    assert len(raw.token_ids) == 4 and raw.finish_reason == "length"


def test_transformers_thinking_budget_zero_closes_before_any_token():
    model, tokenizer = tiny_random_model(seed=0)
    template = tokenizer.chat_template + "{% if add_generation_prompt %}<think>\n{% endif %}"
    policy = TransformersPolicy(model, tokenizer, chat_template=template)
    closing = tokenizer.encode(FORCED_CLOSE, add_special_tokens=False)
    out = policy.generate([seeded_request(thinking_budget=0, max_tokens=10)])[0]
    assert out.token_ids[: len(closing)] == closing  # was: one sampled thinking token first
    assert out.metadata["forced_positions"] == list(range(len(closing)))
    tag_end = next(j for j in range(1, len(closing) + 1) if "</think>" in tokenizer.decode(closing[:j]))
    assert out.thinking_tokens == tag_end
    assert out.message["reasoning_content"] == ""


# -- two rollouts in two threads ---------------------------------------------------------------


def transformers_policy(tiny, **kwargs):
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    return TransformersPolicy(*tiny, **kwargs)


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Wait for the threads, ``seconds`` in all (a deadlocked one is left behind: they are daemons)."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def test_two_rollouts_in_two_threads_share_one_transformers_policy(tiny):
    """Regression: two rollouts in two threads sharing one TransformersPolicy used to deadlock."""
    policy = transformers_policy(tiny, batch_wait_ms=20)
    sampling = SamplingParams(temperature=1.0, max_tokens=4, seed=1)
    results: dict[str, list] = {}

    def play(name: str) -> None:
        results[name] = rollout(
            WORDLE, policy, seeds=4, sampling=sampling, env_kwargs={"max_turns": 2}, max_concurrency=4
        )

    threads = [threading.Thread(target=play, args=(name,), daemon=True) for name in "AB"]
    for thread in threads:
        thread.start()
    _join(threads, seconds=60)
    assert not any(thread.is_alive() for thread in threads), "the rollouts deadlocked"
    assert [len(results[name]) for name in "AB"] == [4, 4]
    assert all(e.token_ids and "error" not in e.metadata for name in "AB" for e in results[name])
