"""A batch whose clients have all gone stops generating: force-quitting `llmgym serve` no longer waits for it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.server.backend import ServedModel

REQUEST = PolicyRequest([{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=8, temperature=0))


class SlowPolicy(Policy):
    """Generates for up to 30 s, one "token" every 10 ms, unless its abort event is set."""

    name = "slow"

    def __init__(self):
        self.abort, self.entered, self.finish_reasons = threading.Event(), threading.Event(), []

    def generate(self, requests):
        self.entered.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.abort.is_set():
            time.sleep(0.01)
        reason = "abort" if self.abort.is_set() else "length"
        self.finish_reasons.append(reason)
        return [Generation({"role": "assistant", "content": "x"}, finish_reason=reason) for _ in requests]


def test_a_cancelled_request_stops_its_generation_and_the_next_one_runs():
    policy = SlowPolicy()
    backend = ServedModel(policy, "slow", batch_wait_s=0)

    async def main():
        await backend.start()
        try:
            first = asyncio.create_task(backend.generate(REQUEST))
            assert await asyncio.to_thread(policy.entered.wait, 10)
            started = time.monotonic()
            first.cancel()  # what uvicorn's force-quit (a second Ctrl-C) does to every request task
            with pytest.raises(asyncio.CancelledError):
                await first
            policy.entered.clear()
            policy_done = asyncio.create_task(backend.generate(REQUEST))
            assert await asyncio.to_thread(policy.entered.wait, 10)  # the model is free again at once...
            assert time.monotonic() - started < 5
            assert policy.finish_reasons == ["abort"]
            assert not policy.abort.is_set()  # ...and the next batch is not aborted
            policy_done.cancel()
        finally:
            await backend.stop()

    asyncio.run(main())


def test_a_batch_with_a_client_left_is_not_aborted():
    policy = SlowPolicy()
    backend = ServedModel(policy, "slow", batch_wait_s=0.2)

    async def main():
        await backend.start()
        try:
            gone = asyncio.create_task(backend.generate(REQUEST))
            stays = asyncio.create_task(backend.generate(REQUEST))
            assert await asyncio.to_thread(policy.entered.wait, 10)
            gone.cancel()
            await asyncio.sleep(0.2)
            assert not policy.abort.is_set()
            policy.abort.set()  # end the test's generation; the client still waiting gets its result
            assert (await stays).finish_reason == "abort"
        finally:
            await backend.stop()

    asyncio.run(main())


def test_transformers_policy_abort_ends_the_batch_after_the_current_token():
    pytest.importorskip("transformers")
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.server.complete import complete_ids
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model())
    try:
        request = PolicyRequest(
            [{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=20, temperature=0)
        )
        policy.abort.set()
        out = policy.generate([request, request])
        assert [g.finish_reason for g in out] == ["abort", "abort"] and all(len(g.token_ids) == 1 for g in out)
        raw = complete_ids(
            policy.model, policy.tokenizer, [([1, 2, 3], SamplingParams(max_tokens=20, temperature=0))], policy.abort
        )
        assert raw[0].finish_reason == "abort" and len(raw[0].token_ids) < 20
        policy.abort.clear()
        assert [g.finish_reason for g in policy.generate([request])] == ["length"]
    finally:
        policy.close()


def test_llama_cpp_policy_abort_ends_the_generation():
    pytest.importorskip("llama_cpp")
    from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy
    from llmgym.wrappers.models import tiny_random_gguf

    policy = LlamaCppPolicy(tiny_random_gguf(seed=0), n_ctx=256)
    try:
        policy.abort.set()
        out = policy.generate([REQUEST])[0]
        assert out.finish_reason == "abort" and out.token_ids == []
        policy.abort.clear()
        assert policy.generate([REQUEST])[0].finish_reason in ("length", "stop")
    finally:
        policy.close()


def test_stopping_the_server_mid_generation_aborts_it():
    policy = SlowPolicy()
    backend = ServedModel(policy, "slow", batch_wait_s=0)

    async def main():
        await backend.start()
        waiting = asyncio.create_task(backend.generate(REQUEST))
        assert await asyncio.to_thread(policy.entered.wait, 10)
        await backend.stop()  # as asyncio.run's teardown cancels the worker, whichever task it cancels first
        for _ in range(500):
            if policy.finish_reasons:
                break
            await asyncio.sleep(0.01)
        assert policy.finish_reasons == ["abort"]
        waiting.cancel()

    asyncio.run(main())
