"""MicroBatcher (llmgym/wrappers/batching.py): where the batch function runs, its failures, several event loops."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest

from llmgym.wrappers.batching import MicroBatcher


@pytest.mark.parametrize("inline", [False, True])
def test_batches_run_on_the_loop_thread_only_when_inline(inline):
    threads: list[int] = []

    def run_batch(items):
        threads.append(threading.get_ident())
        return [item * 2 for item in items]

    batcher = MicroBatcher(run_batch, batch_size=2, wait_ms=5, inline=inline)

    async def main():
        return threading.get_ident(), await asyncio.gather(*(batcher.submit(i) for i in range(5)))

    loop_thread, results = asyncio.run(main())
    assert results == [0, 2, 4, 6, 8]
    assert len(threads) == 3
    assert all((t == loop_thread) == inline for t in threads)


def test_inline_batch_errors_fail_only_that_batch():
    def run_batch(items):
        if 1 in items:
            raise RuntimeError("boom")
        return items

    batcher = MicroBatcher(run_batch, batch_size=2, wait_ms=5, inline=True)

    async def main():
        return await asyncio.gather(*(batcher.submit(i) for i in range(4)), return_exceptions=True)

    results = asyncio.run(main())
    assert isinstance(results[0], RuntimeError) and isinstance(results[1], RuntimeError)
    assert results[2:] == [2, 3]


@pytest.mark.parametrize("inline", [False, True])
def test_a_batch_function_that_drops_a_result_fails_its_callers_instead_of_hanging(inline):
    batcher = MicroBatcher(lambda items: items[:-1], batch_size=4, wait_ms=1, inline=inline)

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True), 5)

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "2 results for 3 items" in str(r) for r in results)


# -- one batcher, several event loops -------------------------------------------------------


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Wait for the threads, ``seconds`` in all (a deadlocked one is left behind: they are daemons)."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def test_a_batcher_shared_by_two_event_loops_serves_both():
    """Regression: a batcher used from two event loops used to leave one loop's callers waiting forever."""
    batches: list[list[tuple[str, int]]] = []
    active, most = [0], [0]
    guard = threading.Lock()

    def run_batch(items):
        with guard:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.02)
        with guard:
            active[0] -= 1
            batches.append(list(items))
        return [f"{name}{i}" for name, i in items]

    batcher = MicroBatcher(run_batch, batch_size=8, wait_ms=100)
    results: dict[str, list[str]] = {}
    a_queued = threading.Event()

    def play(name: str) -> None:
        async def main():
            if name == "B":  # B's loop submits while A's items wait for their batch to fill
                a_queued.wait(10)
            calls = [asyncio.ensure_future(batcher.submit((name, i))) for i in range(4)]
            await asyncio.sleep(0)
            a_queued.set()
            return await asyncio.gather(*calls)

        results[name] = asyncio.run(main())

    threads = [threading.Thread(target=play, args=(name,), daemon=True) for name in "AB"]
    for thread in threads:
        thread.start()
    _join(threads, seconds=20)
    assert not any(thread.is_alive() for thread in threads), "a loop's callers were left waiting"
    assert results == {"A": ["A0", "A1", "A2", "A3"], "B": ["B0", "B1", "B2", "B3"]}
    assert sorted(len(b) for b in batches) == [4, 4]  # each loop's requests still batched together
    assert most[0] == 1  # one batch at a time over all loops


def test_a_batcher_does_not_keep_finished_event_loops_alive():
    batcher = MicroBatcher(lambda xs: xs, batch_size=2, wait_ms=1)
    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(batcher.submit(7)) == 7
    loop.close()
    ref = weakref.ref(loop)
    del loop
    gc.collect()
    assert ref() is None
