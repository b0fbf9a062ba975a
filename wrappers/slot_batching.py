"""Concurrent turns decoded together, one KV cache slot per episode: the scheduler the batched local policies share.

Holds :class:`SlotBatchPolicy`, the base of
:class:`~llmgym.wrappers.llamacpp_batch.LlamaCppBatchPolicy` (llama.cpp decodes)
and :class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy` (torch decodes
in bf16); :class:`SlotEngine`, what each of them decodes with; and
:func:`default_engine`, the engine ``llmgym eval`` and ``llmgym serve`` pick.

Decoding one sequence on a CPU leaves most of the compute idle; a batch of
sequences shares each read of the weights. A scheduler thread owns an engine
holding ``slots`` KV sequences. Each step it admits waiting requests into free
slots, then evaluates the next token of every sequence that is generating and
the next ``n_batch`` tokens of each prompt being evaluated: in one engine call,
or, on an engine whose prompts must not share a call
(:attr:`SlotEngine.prompts_in_step` false), in one call for the generating
sequences and one more per prompt, alone. The logits of each sequence's last
position are sampled in numpy by the same
:class:`~llmgym.wrappers.llamacpp_policy.TurnSampler` as the single-stream
:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy`: same seeds, log-probs,
stop strings, thinking budget. The llama.cpp model tokenizes and renders the
chat template whatever the engine, so prompts and token ids are the same.

Each slot remembers the tokens its KV cache holds and the episode it served
(``PolicyRequest.episode_id``, set by the rollout); a request goes to its
episode's slot, else to the free slot that shares the longest prefix with its
prompt (the least recently used among equals), so an episode's next turn lands
where its history is and evaluates only its new tokens
(``metadata["prompt_tokens_processed"]``). A prompt whose system prompt another
slot holds gets that cache copied in.

Not here: prompt log-probs (:meth:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy.score`,
``complete(prompt_logprobs=True)``) run on the single-stream context that
:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy` keeps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from llmgym.policy import Generation, PolicyRequest, SamplingParams
from llmgym.wrappers import hardware
from llmgym.wrappers.decoding.prefix import common_prefix
from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy, TurnSampler
from llmgym.wrappers.prompting import Prompt

__all__ = ["SlotBatchPolicy", "SlotEngine", "default_engine", "ENGINES", "MIN_COPIED_PREFIX"]

#: What can decode the slots: llama.cpp (:class:`~llmgym.wrappers.llamacpp_batch.LlamaCppBatchPolicy`) or torch
#: (:class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy`); the llama.cpp model tokenizes for both.
ENGINES = ("llama.cpp", "torch")

#: Shortest shared prompt prefix worth copying from another slot's KV cache instead of evaluating it.
MIN_COPIED_PREFIX = 32


def default_engine() -> str:
    """The engine ``llmgym eval`` and ``llmgym serve`` decode concurrent requests with.

    ``"torch"`` where torch, transformers and gguf are installed and a probe of this
    CPU (:func:`~llmgym.wrappers.hardware.matmul_rates`) finds its bf16 matrix
    products at least :data:`~llmgym.wrappers.hardware.BF16_MARGIN` times as fast as
    fp32's: there the torch engine's bf16 batches beat llama.cpp (docs/benchmarks.md).
    Elsewhere ``"llama.cpp"``, whose quantized kernels do not depend on bf16. The probe
    decides, not the ``avx512_bf16`` flag, which CPUs that multiply bf16 slower than
    fp32 also report (docs/policies-local.md).
    """
    if not all(importlib.util.find_spec(module) for module in ("torch", "transformers", "gguf")):
        return "llama.cpp"
    return "torch" if hardware.matmul_rates().bf16_is_faster() else "llama.cpp"


class SlotEngine(Protocol):
    """Where the slots' KV caches live and their tokens are evaluated (what a :class:`SlotBatchPolicy` decodes with)."""

    #: Whether prompts are evaluated in the same call as the generating sequences' next tokens.
    prompts_in_step: bool

    def keep(self, slot: int, length: int) -> None:
        """Drop what ``slot`` holds after its first ``length`` tokens."""

    def copy(self, source: int, target: int, length: int) -> None:
        """Make ``target`` hold the first ``length`` tokens ``source`` holds."""

    def evaluate(
        self, slots: list[int], chunks: list[list[int]], starts: list[int], wanted: list[bool]
    ) -> list[np.ndarray]:
        """Evaluate each chunk after the ``starts[i]`` tokens its slot holds; the logits after the last token
        of each chunk that is ``wanted``, in order."""
        ...

    def close(self) -> None:
        """Free the engine's memory."""


@dataclass(eq=False)  # compared by identity
class _Request:
    """A turn waiting for, or holding, a slot."""

    ready: Prompt
    turn: TurnSampler
    future: concurrent.futures.Future[Generation]
    slot: int = -1
    reused: int = 0  # prompt tokens found in the slot's KV cache
    pending: list[int] = field(
        default_factory=list
    )  # tokens to evaluate next: the prompt's rest, then the last sampled
    submitted: float = field(default_factory=time.perf_counter)
    prompt_done: float = 0.0


class SlotBatchPolicy(LlamaCppPolicy):
    """:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy` with concurrent requests decoded as one batch.

    A subclass says what decodes the slots: :meth:`make_engine`, and the ``engine`` name.

    Args:
        model_path: the ``.gguf`` file (or model alias) the llama.cpp model tokenizes with.
        slots: sequences decoded at once, each with its own KV cache of ``n_ctx``
            tokens (the episodes a rollout runs concurrently; more requests wait).
        n_batch: most prompt tokens evaluated per call.
        n_ctx: tokens each slot holds (prompt + generation).
        n_threads: CPU threads of the llama.cpp model (and of the engine, as the subclass uses them).
        **kwargs: as :class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy`.

    ``generate(requests)`` decodes its requests together; ``agenerate`` calls from
    any thread or event loop join the running batch at its next step. A cancelled
    ``agenerate`` leaves the batch at the next step, the others go on; ``abort``
    ends every turn in progress (finish reason ``"abort"``).
    """

    #: ``agenerate``/``acomplete`` join a running batch: a server hands them each request as it comes.
    continuous_batching = True

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        slots: int,
        n_batch: int,
        n_ctx: int,
        n_threads: int,
        **kwargs: Any,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if n_batch < slots:
            raise ValueError(f"n_batch ({n_batch}) must hold one token per slot ({slots})")
        super().__init__(model_path, n_ctx=n_ctx, n_threads=n_threads, **kwargs)
        self.slots, self.n_batch, self.n_threads = slots, n_batch, n_threads
        self.max_concurrency = slots
        #: Counters: decoding calls run, tokens they evaluated, the most sequences in one call, prompt
        #: tokens whose KV cache was copied from another slot instead of evaluated.
        self.steps = 0
        self.tokens_evaluated = 0
        self.widest_step = 0
        self.prompt_tokens_copied = 0
        self._held: list[list[int]] = [[] for _ in range(slots)]  # the tokens each slot's KV cache holds
        self._last_used = [0.0] * slots
        self._owner: list[str | None] = [None] * slots  # the episode (PolicyRequest.episode_id) a slot last served
        self._waiting: list[_Request] = []
        self._active: list[_Request] = []
        self._submit_lock = threading.Lock()  # seeds are drawn in submission order
        self._wake = threading.Condition()
        self._closing = False
        # The engine is built on the scheduler's thread, which then does all its work: torch keeps a pool of
        # worker threads per calling thread, and a second pool (had the model loaded here) spinning beside the
        # scheduler's made a step slower (docs/benchmarks.md).
        built: concurrent.futures.Future[SlotEngine] = concurrent.futures.Future()
        self._scheduler: threading.Thread | None = threading.Thread(
            target=self._run, args=(built,), name=f"{self.engine} batch", daemon=True
        )
        self._scheduler.start()
        try:
            self._engine = built.result()
        except BaseException:
            self._closing = True  # the scheduler has returned; nothing to stop
            self._scheduler = None
            super().close()
            raise

    def make_engine(self) -> SlotEngine:
        """The engine that holds the slots and evaluates their tokens; called once, on the scheduler's thread."""
        raise NotImplementedError(f"{type(self).__name__} must say what decodes its slots (make_engine)")

    # -- requests ------------------------------------------------------------------

    def generate(self, requests: list[PolicyRequest], *, top_logprobs: int = 0) -> list[Generation]:
        """Generate one assistant turn per request, all decoded together (see the class docstring).

        Raises:
            TypeError / ValueError: a malformed request, or a prompt longer than ``n_ctx``
                (every request is checked before any is generated).
        """
        self._check_open()
        ready = [self._prepare(request) for request in requests]
        return [future.result() for future in self._submit(ready, top_logprobs)]

    async def agenerate(self, request: PolicyRequest, *, top_logprobs: int = 0) -> Generation:
        """Generate one turn; it joins the batch being decoded (cancelling it frees its slot)."""
        self._check_open()
        (future,) = self._submit([self._prepare(request)], top_logprobs)
        return await asyncio.wrap_future(future)

    async def acomplete(self, prompt_ids: list[int], sampling: SamplingParams, *, top_logprobs: int = 0) -> Generation:
        """Continue one raw prompt (token ids, no chat template) in the running batch; see :meth:`complete`."""
        self._check_open()
        (future,) = self._submit([self._check_context(self.prompter.raw(prompt_ids, sampling))], top_logprobs)
        return await asyncio.wrap_future(future)

    def complete(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams | None = None,
        *,
        top_logprobs: int = 0,
        prompt_logprobs: bool = False,
    ) -> list[Generation]:
        """As :meth:`LlamaCppPolicy.complete`; decoded together unless ``prompt_logprobs`` asks for the prompt's
        scores (those run one at a time on the single-stream context)."""
        self._check_open()
        if prompt_logprobs:
            return super().complete(prompts, sampling, top_logprobs=top_logprobs, prompt_logprobs=True)
        ready = [self._check_context(self.prompter.raw(ids, sampling or SamplingParams())) for ids in prompts]
        return [future.result() for future in self._submit(ready, top_logprobs)]

    def _check_open(self) -> None:
        if self._closing:
            raise RuntimeError("the policy is closed")

    def _submit(self, ready: list[Prompt], top_logprobs: int) -> list[concurrent.futures.Future[Generation]]:
        with self._submit_lock:
            requests = [
                _Request(
                    prompt,
                    TurnSampler(self, prompt, self._rng(prompt.request.sampling), top_logprobs),
                    concurrent.futures.Future(),
                )
                for prompt in ready
            ]
        with self._wake:
            self._waiting.extend(requests)
            self._wake.notify()
        return [request.future for request in requests]

    # -- the scheduler ---------------------------------------------------------------

    def _run(self, built: concurrent.futures.Future[SlotEngine]) -> None:
        try:
            built.set_result(self.make_engine())
        except BaseException as err:  # noqa: BLE001  raised by the constructor, in the caller's thread
            built.set_exception(err)
            return
        while True:
            with self._wake:
                while not (self._waiting or self._active or self._closing):
                    self._wake.wait()
                if self._closing:
                    break
            try:
                with self._wake:
                    self._admit()
                self._step()
            except Exception as err:  # noqa: BLE001  the requests in flight fail; the scheduler goes on
                self._fail_active(err)
        for request in self._active + self._waiting:
            _fail(request.future, RuntimeError("the policy was closed"))

    def _fail_active(self, error: Exception) -> None:
        """Fail every request in flight after the engine raised ``error``."""
        failed, self._active = self._active, []
        for request in failed:  # what their slots hold is unknown now: nothing, as far as reuse goes
            self._held[request.slot] = []
            self._release(request)
            _fail(request.future, error)
        for request in failed:  # a slot the engine cannot empty now is emptied when next seated
            with contextlib.suppress(Exception):
                self._engine.keep(request.slot, 0)

    def _admit(self) -> None:
        """Give waiting requests (in order) the free slots: an episode's own slot when it is free, else the
        free slot holding most of the prompt, least recently used among equals, and never one whose
        episode has a request waiting too."""
        self._waiting = [request for request in self._waiting if not request.future.cancelled()]
        free = set(range(self.slots)) - {request.slot for request in self._active}
        waiting_episodes = {request.ready.request.episode_id for request in self._waiting} - {None}
        for request in list(self._waiting):
            episode = request.ready.request.episode_id
            own = [s for s in free if episode is not None and self._owner[s] == episode]
            if own:
                self._waiting.remove(request)  # before the engine touches its slot: a failure there fails it
                self._assign(request, own[0])
                free.discard(own[0])
        for request in list(self._waiting):
            open_slots = [s for s in free if self._owner[s] not in waiting_episodes] or sorted(free)
            if not open_slots:
                break
            ids = request.ready.ids
            slot = max(open_slots, key=lambda s: (common_prefix(self._held[s], ids), -self._last_used[s]))
            self._waiting.remove(request)
            self._assign(request, slot)
            free.discard(slot)

    def _assign(self, request: _Request, slot: int) -> None:
        """Seat ``request`` in ``slot``: keep the KV cache of the prefix they share, drop the rest. When another
        slot holds a longer prefix of the prompt (the system prompt every episode starts with), its cache is
        copied in first: a copy of the KV buffer costs far less than evaluating the prefix again."""
        request.slot = slot
        self._active.append(request)  # first: should the engine fail below, the scheduler fails this request
        self._held[slot], held = [], self._held[slot]  # unknown until the engine is done with the slot
        ids = request.ready.ids
        last = len(ids) - 1  # the last prompt token is evaluated again, for fresh logits
        common = min(common_prefix(held, ids), last)
        donor = max(range(self.slots), key=lambda s: common_prefix(self._held[s], ids))
        shared = min(common_prefix(self._held[donor], ids), last)
        if shared >= common + MIN_COPIED_PREFIX:
            self._engine.copy(donor, slot, len(self._held[donor]))
            held = list(self._held[donor])
            common = shared
            self.prompt_tokens_copied += shared
        self._engine.keep(slot, common)
        self._held[slot] = held[:common]
        self._owner[slot] = request.ready.request.episode_id
        request.reused, request.pending = common, list(ids[common:])

    def _step(self) -> None:
        """One engine call for the next token of every generating sequence and the next chunk of each prompt
        being evaluated; an engine whose prompts must not share a call (:attr:`SlotEngine.prompts_in_step`
        false) gets one call for the generating sequences, then one per prompt."""
        if self.abort.is_set():
            for request in self._active:
                request.turn.finish = "abort"
            self._finish_done()
            return
        cancelled = [request for request in self._active if request.future.cancelled()]
        for request in cancelled:
            self._release(request)
        self._active = [request for request in self._active if request not in cancelled]
        generating = [request for request in self._active if len(request.pending) == 1]
        prompting = [request for request in self._active if len(request.pending) > 1]
        if self._engine.prompts_in_step:
            if generating or prompting:
                self._decode(generating + prompting)
        else:
            if generating:
                self._decode(generating)
            for request in prompting:
                self._decode([request])
        self._finish_done()

    def _decode(self, requests: list[_Request]) -> None:
        """Evaluate the pending tokens of ``requests`` (``n_batch`` at most, the first requests first; those that
        find no room wait for the next call) in one call; each one whose last pending token went in samples its
        next token from the logits there."""
        chunks, room = [], self.n_batch
        for request in requests:
            if not room:
                break
            chunk = request.pending[:room]
            chunks.append(chunk)
            room -= len(chunk)
            del request.pending[: len(chunk)]
        requests = requests[: len(chunks)]
        wanted = [not request.pending for request in requests]  # its last position is in: sample after it
        slots = [request.slot for request in requests]
        logits = self._engine.evaluate(slots, chunks, [len(self._held[slot]) for slot in slots], wanted)
        for slot, chunk in zip(slots, chunks):
            self._held[slot].extend(chunk)
        self.steps += 1
        self.tokens_evaluated += self.n_batch - room
        self.widest_step = max(self.widest_step, len(requests))
        now = time.perf_counter()
        for request, row in zip([r for r, want in zip(requests, wanted) if want], logits):
            if not request.prompt_done:
                request.prompt_done = now
            request.pending.append(request.turn.advance(row))

    def _finish_done(self) -> None:
        going = []
        for request in self._active:
            if request.turn.finish is None:
                going.append(request)
                continue
            self._release(request)
            now = time.perf_counter()
            prompt_seconds = (request.prompt_done or now) - request.submitted
            result = self._generation(
                request.ready, request.turn, request.reused, prompt_seconds, now - request.submitted, {}
            )
            result.metadata["backend"] = f"{self.engine} batch"
            _succeed(request.future, result)
        self._active = going

    def _release(self, request: _Request) -> None:
        """Free the request's slot; its KV cache stays for a later prompt that shares it."""
        self._last_used[request.slot] = time.perf_counter()

    def close(self) -> None:
        """Stop the scheduler (requests still in flight fail), free the engine, then the model."""
        if getattr(self, "_scheduler", None) is not None and not self._closing:
            with self._wake:
                self._closing = True
                self._wake.notify()
            self._scheduler.join()
            self._engine.close()
        super().close()


def _succeed(future: concurrent.futures.Future[Generation], result: Generation) -> None:
    try:
        future.set_result(result)
    except concurrent.futures.InvalidStateError:  # cancelled by its caller meanwhile
        pass


def _fail(future: concurrent.futures.Future[Generation], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass
