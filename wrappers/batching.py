"""Micro-batching: concurrent async calls gathered into one batched call on a worker thread.

Holds :class:`MicroBatcher`. A policy whose model generates a whole batch at
once (transformers, in-process vLLM) answers :meth:`~llmgym.policy.Policy.agenerate`
through it, so a rollout engine running many episodes concurrently gets
batched generation without knowing about batches.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["MicroBatcher"]

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class _LoopQueue(Generic[Item, Result]):
    """The waiting items of one event loop and the worker task that batches them."""

    items: list[tuple[Item, asyncio.Future[Result]]] = field(default_factory=list)
    full: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None


class MicroBatcher(Generic[Item, Result]):
    """Gathers items submitted concurrently into batches for one synchronous batch function.

    The first waiting item starts a worker; the worker waits up to
    ``wait_ms`` for the batch to fill to ``batch_size``, then runs
    ``run_batch`` in a thread (the event loop keeps serving), or on the event
    loop's own thread with ``inline=True``, and repeats while items are queued.
    ``prepare`` runs per item before batching, so a bad item fails alone; an
    exception from ``run_batch`` fails that batch's items only. Cancelled
    callers are dropped before their batch runs.

    Several event loops may share one batcher (two rollouts in two threads on
    one policy): each loop has its own queue and worker, so items are batched
    with others of the same loop, and ``run_batch`` runs one batch at a time
    over all loops (a model is rarely safe to call from two threads at once).

    Args:
        run_batch: maps a list of prepared items to a list of results, in order.
        batch_size: most items per call.
        wait_ms: how long to wait for a batch to fill.
        prepare: turns an item into what ``run_batch`` takes; may raise for a bad item.
        inline: run ``run_batch`` on the event loop's thread (blocking it) instead of a
            worker thread. For a CPU model that the same thread also trains: torch's
            OpenMP pool is per thread, and a second pool spinning on a 2-core machine
            made decoding ~1.5x slower in the GRPO trainer.

    Example:
        >>> import asyncio
        >>> batcher = MicroBatcher(lambda xs: [(x, len(xs)) for x in xs], batch_size=3, wait_ms=5)
        >>> async def main():
        ...     return await asyncio.gather(*(batcher.submit(i) for i in range(5)))
        >>> asyncio.run(main())
        [(0, 3), (1, 3), (2, 3), (3, 2), (4, 2)]
    """

    def __init__(
        self,
        run_batch: Callable[[list[Any]], list[Result]],
        batch_size: int,
        wait_ms: float = 5.0,
        prepare: Callable[[Item], Any] | None = None,
        inline: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.run_batch = run_batch
        self.batch_size = batch_size
        self.wait_ms = wait_ms
        self.prepare = prepare
        self.inline = inline
        # One queue per event loop (futures and events belong to the loop that made them), while it has work.
        self._queues: dict[asyncio.AbstractEventLoop, _LoopQueue[Item, Result]] = {}
        self._queues_lock = threading.Lock()
        self._run_lock = threading.Lock()

    async def submit(self, item: Item) -> Result:
        """Queue one item and wait for its result."""
        loop = asyncio.get_running_loop()
        with self._queues_lock:
            queue = self._queues.get(loop)
            if queue is None:
                queue = self._queues[loop] = _LoopQueue()
        future: asyncio.Future[Result] = loop.create_future()
        queue.items.append((item, future))
        if len(queue.items) >= self.batch_size:
            queue.full.set()
        if queue.worker is None or queue.worker.done():  # done: cancelled before it ever ran
            queue.worker = loop.create_task(self._run(loop, queue))
        return await future

    def _locked_run_batch(self, prepared: list[Any]) -> list[Result]:
        with self._run_lock:
            return self.run_batch(prepared)

    async def _run(self, loop: asyncio.AbstractEventLoop, queue: _LoopQueue[Item, Result]) -> None:
        try:
            await self._drain(queue)
        finally:  # nothing left to batch: forget the loop (asyncio.run makes a new one each time)
            with self._queues_lock:
                self._queues.pop(loop, None)
            for _, future in queue.items:  # only when cancelled mid-way (the loop is shutting down)
                future.cancel()

    async def _drain(self, queue: _LoopQueue[Item, Result]) -> None:
        while queue.items:
            if len(queue.items) < self.batch_size:
                queue.full.clear()
                try:
                    await asyncio.wait_for(queue.full.wait(), self.wait_ms / 1000)
                except asyncio.TimeoutError:
                    pass
            batch, queue.items = queue.items[: self.batch_size], queue.items[self.batch_size :]
            prepared: list[Any] = []
            futures: list[asyncio.Future[Result]] = []
            for item, future in batch:
                if future.done():  # the caller was cancelled while waiting
                    continue
                try:
                    prepared.append(self.prepare(item) if self.prepare else item)
                except Exception as err:  # noqa: BLE001  a bad item fails alone
                    future.set_exception(err)
                    continue
                futures.append(future)
            if not prepared:
                continue
            try:
                if self.inline:
                    results = self._locked_run_batch(prepared)
                else:
                    results = await asyncio.to_thread(self._locked_run_batch, prepared)
                if len(results) != len(prepared):  # a missing result would leave its caller waiting forever
                    raise RuntimeError(f"run_batch returned {len(results)} results for {len(prepared)} items")
            except Exception as err:  # noqa: BLE001  this batch's callers get the error; the worker goes on
                for future in futures:
                    if not future.done():
                        future.set_exception(err)
                continue
            for future, result in zip(futures, results):
                if not future.done():
                    future.set_result(result)
