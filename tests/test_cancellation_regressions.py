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
    # In a notebook (a running loop) rollout runs on a thread of its own; Ctrl-C used to wait
    # there until every episode had been played, and left the run going on.
    path = tmp_path / "run.jsonl"
    calls = []

    class Counting(Policy):
        async def agenerate(self, request: PolicyRequest) -> Generation:
            calls.append(1)
            await asyncio.sleep(0.05)
            return Generation({"role": "assistant", "content": "crane"})

    async def notebook():
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            rollout("llmgym/Wordle-v0", Counting(), seeds=40, max_concurrency=2, jsonl_path=path)
        return time.perf_counter() - started

    loop = asyncio.new_event_loop()
    try:
        elapsed = loop.run_until_complete(notebook())
    finally:
        loop.close()
    played = len(calls)
    time.sleep(0.2)
    assert elapsed < 1.5 and len(calls) == played  # stopped at once, nothing runs on in the background
    assert not [t for t in threading.enumerate() if t is not threading.main_thread() and t.name != "MainThread"
                and not t.daemon and "Timer" not in t.name]
    episodes = list(iter_jsonl(path))
    assert len({(e.seed, e.metadata["group_index"]) for e in episodes}) == len(episodes) < 40
