"""MicroBatcher: where the batch function runs."""

from __future__ import annotations

import asyncio
import threading

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
