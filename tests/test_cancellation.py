"""Cancellation and failure under concurrency: Ctrl-C, fallbacks of the OpenAI-compatible policy."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from llmgym.episode import iter_jsonl
from llmgym.policy import Generation, Policy, PolicyRequest
from llmgym.rollout import rollout


def test_ctrl_c_in_rollout_called_from_a_running_loop_stops_the_run(tmp_path):
    """Regression: in a notebook (a running loop) rollout runs on a thread of its own; Ctrl-C used to wait
    there until every episode had been played, and left the run going on; and this test failed whenever pytest
    was started with SIGINT ignored (a background job of a non-interactive shell, as CI runs it)."""
    # Ctrl-C comes from the policy once the run is under way, not after a fixed delay that a busy machine
    # may not have started the run in; and a run played out is 240 turns of 50 ms, two at a time (~6 s),
    # so "stopped" is told by the episodes played, not by a clock.
    path = tmp_path / "run.jsonl"
    calls = []

    class Counting(Policy):
        async def agenerate(self, request: PolicyRequest) -> Generation:
            calls.append(1)
            if len(calls) == 13:  # each worker has played a six-turn episode and begun the next: Ctrl-C
                os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(0.05)
            return Generation({"role": "assistant", "content": "crane"})

    async def notebook():
        with pytest.raises(KeyboardInterrupt):
            rollout("llmgym/Wordle-v0", Counting(), seeds=40, max_concurrency=2, jsonl_path=path)

    threads_before = set(threading.enumerate())  # other tests' threads are not this run's
    # A shell that starts pytest in the background (CI, `cmd &`) leaves SIGINT ignored: Ctrl-C must mean Ctrl-C here.
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(notebook())
    finally:
        loop.close()
        signal.signal(signal.SIGINT, previous_handler)
    played = len(calls)
    time.sleep(0.2)
    assert len(calls) == played  # nothing runs on in the background
    assert not [t for t in threading.enumerate() if t not in threads_before and not t.daemon]
    episodes = list(iter_jsonl(path))
    assert len({(e.seed, e.metadata["group_index"]) for e in episodes}) == len(episodes) < 40  # stopped, not played out


def _fake_openai_policy(handler, **kwargs):
    """An OpenAIPolicy whose HTTP requests go to ``handler(request) -> httpx.Response`` in memory."""
    import httpx
    import openai

    from llmgym.wrappers.openai_policy import OpenAIPolicy

    policy = OpenAIPolicy("fake", base_url="http://fake.invalid/v1", max_retries=0, **kwargs)
    policy._ensure_loop()
    policy._clients = [
        openai.AsyncOpenAI(
            base_url="http://fake.invalid/v1",
            api_key="x",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        )
    ]
    return policy


def _completion(content="crane"):
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
                "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.5, "top_logprobs": []}]},
            }
        ],
    }


def _tool_request_to_a_server_refusing(field):
    """One request with tools to a pydantic-style server that refuses ``field`` as an extra input; returns (policy,
    generation)."""
    import json

    import httpx

    def handler(request):
        if field in json.loads(request.content):
            message = f"1 validation error for ChatRequest\n{field}\n  Extra inputs are not permitted"
            return httpx.Response(400, json={"error": {"message": message, "type": "BadRequestError"}})
        return httpx.Response(200, json=_completion())

    policy = _fake_openai_policy(handler)
    tools = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]
    try:
        generation = policy.generate([PolicyRequest(messages=[{"role": "user", "content": "hi"}], tools=tools)])[0]
    finally:
        policy.close()
    return policy, generation


def test_a_server_refusing_tools_as_extra_inputs_keeps_token_return():
    # A pydantic server refuses a field it does not know with "Extra inputs are not permitted";
    # refusing `tools` that way used to switch token return off too (the word "extra").
    policy, generation = _tool_request_to_a_server_refusing("tools")
    assert policy.native_tools is False
    assert policy.return_tokens is not False and generation.token_ids == [7]


def test_a_server_refusing_token_extras_as_extra_inputs_still_drops_them():
    policy, _ = _tool_request_to_a_server_refusing("return_token_ids")
    assert policy.return_tokens is False and policy.native_tools is True


def test_closing_the_openai_policy_fails_requests_in_flight_instead_of_hanging():
    import httpx

    async def never_answers(request):
        await asyncio.sleep(30)
        return httpx.Response(200, json=_completion())

    policy = _fake_openai_policy(never_answers)
    request = PolicyRequest(messages=[{"role": "user", "content": "hi"}])

    outcome = []

    def call_generate():
        try:
            policy.generate([request])
        except Exception as err:  # noqa: BLE001
            outcome.append(err)

    thread = threading.Thread(target=call_generate, daemon=True)  # a daemon: a hang must not hang pytest

    async def main():
        pending = asyncio.ensure_future(policy.agenerate(request))
        thread.start()
        await asyncio.sleep(0.2)
        await asyncio.to_thread(policy.close)
        done, _ = await asyncio.wait([pending], timeout=3)
        return pending.exception() if done else "still waiting"

    error = asyncio.run(main())  # the callers used to wait forever
    thread.join(3)
    assert isinstance(error, RuntimeError) and "closed" in str(error), error
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError), outcome
