"""One big request does not stall the other clients of ``llmgym serve``, and a request has a bounded size.

A request for the cap's worth of completions is sent first, a one-line chat a
moment later; the chat must finish long before the big request, on both ways
requests reach a model: the batching queue (one ``policy.generate`` call at a
time) and a policy that seats concurrent requests in its own slots, first come
first served (the llama.cpp batch policy). The model is a stand-in whose every
generation takes a fixed time, so the ratio of the two latencies is the
scheduler's doing, not the model's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import httpx
import pytest

from llmgym.policy import Generation, Policy
from llmgym.wrappers.server import create_app, serve_in_thread

BIG = 128  # the default --max-choices-per-request
SLOTS = 16  # --max-batch-size: the queue's batch width, the slots of a continuously batching policy


class _Bytes:
    """The ``llm`` of a llama.cpp policy as the server uses it: token ids back to text (one byte each)."""

    def detokenize(self, token_ids: list[int], special: bool = False) -> bytes:
        return bytes(token_id % 256 for token_id in token_ids)


class TimedPolicy(Policy):
    """A llama.cpp-shaped policy whose every generation takes ``step_s``: one token, ``"x"``.

    ``continuous=False``: the server's queue hands it batches, which it runs one generation after the
    other (as ``LlamaCppPolicy``). ``continuous=True``: it takes each request as it comes and seats it in
    one of ``SLOTS`` slots in arrival order, generations in different slots running at once (as
    ``LlamaCppBatchPolicy``).
    """

    name = "timed"
    returns_tokens = True

    def __init__(self, continuous: bool, step_s: float):
        self.llm = _Bytes()
        self.continuous_batching = continuous
        self.step_s = step_s
        self.started = threading.Event()  # set by the first generation: the big request has reached the model
        self._slots = asyncio.Semaphore(SLOTS)  # asyncio wakes its waiters first come, first served

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode())

    def _generation(self, prompt_ids: list[int]) -> Generation:
        self.started.set()
        return Generation({"role": "assistant", "content": "x"}, list(prompt_ids), [ord("x")], [-0.5], "length")

    def generate(self, requests, *, top_logprobs=0):
        time.sleep(self.step_s * len(requests))
        return [self._generation([1]) for _ in requests]

    def complete(self, prompts, sampling=None, *, top_logprobs=0, prompt_logprobs=False):
        time.sleep(self.step_s * len(prompts))
        return [self._generation(ids) for ids in prompts]

    async def agenerate(self, request, *, top_logprobs=0):
        return await self._seated([1])

    async def acomplete(self, prompt_ids, sampling, *, top_logprobs=0):
        return await self._seated(prompt_ids)

    async def _seated(self, prompt_ids: list[int]) -> Generation:
        async with self._slots:
            await asyncio.sleep(self.step_s)
            return self._generation(prompt_ids)


def _timed_post(url: str, body: dict) -> tuple[float, int]:
    """POST ``body``; the seconds until the whole answer came, and its status."""
    start = time.perf_counter()
    response = httpx.post(url, json=body, timeout=120)
    return time.perf_counter() - start, response.status_code


@pytest.mark.parametrize(
    ("continuous", "step_s"),
    [(False, 0.02), (True, 0.15)],  # the big request: 128 x 0.02 s in turn, or 8 waves of 16 slots x 0.15 s
    ids=["batching-queue", "continuous-slots"],
)
def test_a_small_request_is_not_queued_behind_a_big_one(continuous, step_s):
    """Regression: 500 one-token prompts took 181 s, and chat requests sent 3-5 s later waited 183-185 s."""
    policy = TimedPolicy(continuous, step_s)
    app = create_app(policy, model_name="timed", max_batch_size=SLOTS)
    with serve_in_thread(app) as base_url, concurrent.futures.ThreadPoolExecutor(2) as pool:
        big_body = {"prompt": ["Tell me a story"] * BIG, "max_tokens": 1}
        big = pool.submit(_timed_post, f"{base_url}/completions", big_body)
        assert policy.started.wait(30), "the big request never reached the model"
        small_body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        small = pool.submit(_timed_post, f"{base_url}/chat/completions", small_body)
        (small_s, small_status), (big_s, big_status) = small.result(), big.result()
    assert (big_status, small_status) == (200, 200)
    # queued per prompt, first come first served, the small request finished last (big_s / small_s ~ 1.0)
    assert small_s * 3 < big_s, f"the small request took {small_s:.2f} s beside a big one of {big_s:.2f} s"


@pytest.fixture(scope="module")
def capped():
    """A server answering at most 4 choices per request."""
    app = create_app(TimedPolicy(continuous=False, step_s=0.0), model_name="timed", max_choices_per_request=4)
    with serve_in_thread(app) as base_url:
        yield base_url


@pytest.mark.parametrize(
    ("path", "body", "param", "count"),
    [
        ("completions", {"prompt": ["a"] * 5}, "prompt", "5 choices (5 prompts x n=1)"),
        ("completions", {"prompt": ["a", "b"], "n": 3}, "n", "6 choices (2 prompts x n=3)"),
        ("completions", {"prompt": [[1, 2]] * 5}, "prompt", "5 choices (5 prompts x n=1)"),
        ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 5}, "n", "5 choices (n=5)"),
    ],
)
def test_more_choices_than_the_cap_is_a_400(capped, path, body, param, count):
    response = httpx.post(f"{capped}/{path}", json={**body, "max_tokens": 1}, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert count in error["message"] and "at most 4" in error["message"]
    assert "--max-choices-per-request" in error["message"]  # what to change, or to split the request


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("completions", {"prompt": ["a"] * 4}),
        ("completions", {"prompt": ["a", "b"], "n": 2}),
        ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 4}),
    ],
)
def test_the_cap_itself_is_answered(capped, path, body):
    response = httpx.post(f"{capped}/{path}", json={**body, "max_tokens": 1}, timeout=30)
    assert response.status_code == 200 and len(response.json()["choices"]) == 4
