"""Concurrent requests decoded together, one KV cache slot per episode, by torch (bf16) or llama.cpp.

Holds :class:`LlamaCppBatchPolicy`, the local policy for concurrent episodes
(``llmgym eval`` at concurrency > 1, ``llmgym serve``), :func:`default_engine`,
and :func:`converted_gguf`, which writes a GGUF's weights in another type.

Decoding one sequence on a CPU leaves most of the compute idle; a batch of
sequences shares each read of the weights. A scheduler thread owns an *engine*
holding ``slots`` KV sequences. Each step it admits waiting requests into free
slots, then evaluates the next token of every sequence that is generating and
the next ``n_batch`` tokens of each prompt being evaluated: on the torch engine
in one call, on llama.cpp in one call for the generating sequences and one more
per prompt, alone. The logits of each sequence's last position are
sampled in numpy by the same :class:`~llmgym.wrappers.llamacpp_policy._Turn` as
the single-stream policy: same seeds, log-probs, stop strings, thinking budget.
The llama.cpp model tokenizes and renders the chat template for both engines.

The engines (``engine=``):

- ``"torch"``: the model in bf16 on a
  :class:`~llmgym.wrappers.decoding.slots.SlotDecoder`; on a CPU with
  AVX512-BF16 a batch of 16 decoded 4.2x as fast as one llama.cpp stream, and
  prompts ~7x as fast as llama.cpp evaluates them. Its steps give a sequence
  nearly the same log-probs whatever shares its batch (within 0.05, tested).
- ``"llama.cpp"``: a llama.cpp context with ``slots`` sequences (``n_seq_max``,
  each its own stream of ``n_ctx`` cells), one ``llama_decode`` per step. It
  is batch-invariant (a prompt is evaluated alone, since llama.cpp computes a
  sequence's prompt in a mixed batch differently, log-probs moved by up to
  0.9), but no faster than one stream: llama.cpp multiplies Q4_1 one
  activation row at a time. ``weights="q8_0"`` converts the file once
  (:func:`converted_gguf`), faster for short batches, but that model wrote
  longer replies; the float types are not batch-invariant there.

Each slot remembers the tokens its KV cache holds and the episode it served
(``PolicyRequest.episode_id``, set by the rollout); a request goes to its
episode's slot, else to the free slot that shares the longest prefix with its
prompt (the least recently used among equals), so an episode's next turn lands
where its history is and evaluates only its new tokens
(``metadata["prompt_tokens_processed"]``). A prompt whose system prompt another
slot holds gets that cache copied in.

Not here: prompt log-probs (:meth:`score`, ``complete(prompt_logprobs=True)``)
run on the single-stream context that :class:`LlamaCppPolicy` keeps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import hashlib
import importlib.util
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from llmgym.policy import Generation, PolicyRequest, SamplingParams
from llmgym.wrappers.decoding.prefix import common_prefix
from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy, _import_llama_cpp, _Turn
from llmgym.wrappers.prompting import Prompt

__all__ = ["LlamaCppBatchPolicy", "converted_gguf", "default_engine", "WEIGHT_TYPES", "ENGINES"]

#: ``engine=`` names: what computes the slots' tokens (the llama.cpp model tokenizes and templates for both).
ENGINES = ("llama.cpp", "torch")

#: ``weights=`` names and the llama.cpp file types they convert to (``"gguf"``: no conversion).
WEIGHT_TYPES = {
    "gguf": None,
    "f32": "LLAMA_FTYPE_ALL_F32",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
}


def default_engine() -> str:
    """The engine ``llmgym eval`` and ``llmgym serve`` decode concurrent requests with.

    ``"torch"`` where torch and transformers are installed and the CPU multiplies
    bf16 natively (AVX512-BF16 or AMX, read from ``/proc/cpuinfo``), since there its
    batches measured 2.3-4.2x llama.cpp's single stream (docs/policies-local.md);
    elsewhere ``"llama.cpp"``: without native bf16 the products are emulated, which
    was not measured here.
    """
    if not all(importlib.util.find_spec(module) for module in ("torch", "transformers", "gguf")):
        return "llama.cpp"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "llama.cpp"
    return "torch" if re.search(r"\b(avx512_bf16|amx_bf16)\b", flags) else "llama.cpp"


def converted_gguf(path: str | os.PathLike[str], weights: str) -> Path:
    """``path``'s model with its weights in type ``weights`` (a key of :data:`WEIGHT_TYPES`), converted once.

    The copy lives in ``$LLMGYM_CACHE/gguf`` under a name that holds the source's
    path, size and modification time, so a changed source is converted again; it is
    written beside its final name and renamed into place (concurrent processes never
    read half a file). ``"gguf"`` returns ``path`` itself.

    Raises:
        ValueError: an unknown type.
        RuntimeError: llama.cpp could not convert the file.
    """
    from llmgym.wrappers.weights import cache_dir

    if weights not in WEIGHT_TYPES:
        raise ValueError(f"weights must be one of {sorted(WEIGHT_TYPES)}, got {weights!r}")
    source = Path(path)
    if WEIGHT_TYPES[weights] is None:
        return source
    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "gguf" / f"{source.stem}-{key}.{weights}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    lib = _import_llama_cpp()
    from llama_cpp._utils import suppress_stdout_stderr

    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, WEIGHT_TYPES[weights])
    params.allow_requantize = True  # Q4_1 -> bf16: dequantized, then stored in the new type
    params.nthread = 1
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(fd)
    try:
        with suppress_stdout_stderr(disable=False):  # llama.cpp prints a line per tensor
            failed = lib.llama_model_quantize(str(source).encode(), tmp.encode(), params) != 0
        if failed:
            raise RuntimeError(f"llama.cpp could not convert {source} to {weights}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


#: Shortest shared prompt prefix worth copying from another slot's KV cache instead of evaluating it.
MIN_COPIED_PREFIX = 32


@dataclass(eq=False)  # compared by identity
class _Request:
    """A turn waiting for, or holding, a slot."""

    ready: Prompt
    turn: _Turn
    future: concurrent.futures.Future[Generation]
    slot: int = -1
    reused: int = 0  # prompt tokens found in the slot's KV cache
    pending: list[int] = field(
        default_factory=list
    )  # tokens to evaluate next: the prompt's rest, then the last sampled
    submitted: float = field(default_factory=time.perf_counter)
    prompt_done: float = 0.0


class LlamaCppBatchPolicy(LlamaCppPolicy):
    """:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy` with concurrent requests decoded as one batch.

    Args:
        model_path: a ``.gguf`` file or model alias (``None`` = SmolLM2-135M-Instruct).
        slots: sequences decoded at once, each with its own KV cache of ``n_ctx``
            tokens (the episodes a rollout runs concurrently; more requests wait).
        weights: the weight type llama.cpp computes with (:data:`WEIGHT_TYPES`).
        engine: what evaluates the tokens (:data:`ENGINES`): ``"llama.cpp"``, or
            ``"torch"``: the same model in bf16 on a
            :class:`~llmgym.wrappers.decoding.slots.SlotDecoder` (needs the
            ``transformers`` extra; 2.3-4.2x llama.cpp's single stream at 16
            concurrent requests on a CPU with AVX512-BF16, slower for one; see
            docs/policies-local.md). llama.cpp still
            tokenizes and renders the chat template, so prompts are the same.
        n_batch: most prompt tokens evaluated per call.
        n_threads: CPU threads (default: half the cores for llama.cpp; for torch, torch's own
            default, the physical cores or ``$OMP_NUM_THREADS``: on a busy machine set 1).
        **kwargs: as :class:`LlamaCppPolicy` (``n_ctx`` is per slot).

    ``generate(requests)`` decodes its requests together; ``agenerate`` calls from
    any thread or event loop join the running batch at its next step. A cancelled
    ``agenerate`` leaves the batch at the next step, the others go on; ``abort``
    ends every turn in progress (finish reason ``"abort"``).

    Example:
        >>> policy = LlamaCppBatchPolicy(slots=16)  # doctest: +SKIP
        >>> outs = policy.generate([PolicyRequest([{"role": "user", "content": "hi"}])] * 16)  # doctest: +SKIP
    """

    #: ``agenerate``/``acomplete`` join a running batch: a server hands them each request as it comes.
    continuous_batching = True

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        slots: int = 16,
        weights: str = "gguf",
        engine: str = "llama.cpp",
        n_batch: int = 512,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        from llmgym.wrappers.lora_gguf import with_adapter
        from llmgym.wrappers.weights import DEFAULT_MODEL, MODEL_ALIASES, resolve_gguf

        spec, user_lora = model_path, kwargs.get("lora_path")
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if n_batch < slots:
            raise ValueError(f"n_batch ({n_batch}) must hold one token per slot ({slots})")
        model_path, kwargs["lora_path"], adapter_name = with_adapter(model_path, kwargs.get("lora_path"))
        source = resolve_gguf(model_path)
        if source is None:
            raise ValueError(
                f"LlamaCppBatchPolicy needs a .gguf file or one of {sorted(MODEL_ALIASES)}, got {model_path!r}"
            )
        default_name = DEFAULT_MODEL if source.name == MODEL_ALIASES[DEFAULT_MODEL] else source.stem
        kwargs["name"] = kwargs.get("name") or adapter_name or default_name
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if engine == "torch" and (weights != "gguf" or user_lora is not None):
            raise ValueError(
                "engine='torch' computes in bf16 from the model's own weights: it takes no weights= type and no "
                "GGUF lora_path (give an adapter folder as the model instead)"
            )
        if not n_threads and engine == "torch":  # torch's own default: the physical cores, or $OMP_NUM_THREADS
            import torch

            n_threads = torch.get_num_threads()
        n_threads = n_threads or max(1, (os.cpu_count() or 2) // 2)  # llama.cpp's spinning workers want a spare core
        # the llama.cpp model tokenizes, renders the chat template and detokenizes for both engines
        super().__init__(converted_gguf(source, weights), n_ctx=n_ctx, n_threads=n_threads, **kwargs)
        self.source_path, self.weights, self.slots, self.n_batch = source, weights, slots, n_batch
        self.engine, self.n_threads = engine, n_threads
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
        if engine == "torch":
            make_slots: Callable[[], _Slots] = lambda: _TorchSlots(spec, slots, n_ctx, n_threads)  # noqa: E731
        else:
            make_slots = lambda: _LlamaCppSlots(  # noqa: E731
                self, slots, n_ctx, n_batch, n_threads, bool(kwargs.get("verbose"))
            )
        # The engine is built on the scheduler's thread, which then does all its work: torch keeps a pool of
        # worker threads per calling thread, and a second pool (had the model loaded here) spinning beside the
        # scheduler's on a 2-core machine made a 16-row step 1.6x slower.
        built: concurrent.futures.Future[_Slots] = concurrent.futures.Future()
        self._scheduler = threading.Thread(target=self._run, args=(make_slots, built), name=f"{engine} batch")
        self._scheduler.daemon = True
        self._scheduler.start()
        try:
            self._slots = built.result()
        except BaseException:
            self._closing = True  # the scheduler has returned; nothing to stop
            self._scheduler = None
            super().close()
            raise

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
                    _Turn(self, prompt, self._rng(prompt.request.sampling), top_logprobs),
                    concurrent.futures.Future(),
                )
                for prompt in ready
            ]
        with self._wake:
            self._waiting.extend(requests)
            self._wake.notify()
        return [request.future for request in requests]

    # -- the scheduler ---------------------------------------------------------------

    def _run(self, make_slots: Callable[[], _Slots], built: concurrent.futures.Future[_Slots]) -> None:
        try:
            built.set_result(make_slots())
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
                failed, self._active = self._active, []
                for request in failed:  # what their slots hold is unknown now: nothing, as far as reuse goes
                    self._held[request.slot] = []
                    self._release(request)
                    _fail(request.future, err)
                for request in failed:  # a slot the engine cannot empty now is emptied when next seated
                    with contextlib.suppress(Exception):
                        self._slots.keep(request.slot, 0)
        for request in self._active + self._waiting:
            _fail(request.future, RuntimeError("the policy was closed"))

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
            self._slots.copy(donor, slot, len(self._held[donor]))
            held = list(self._held[donor])
            common = shared
            self.prompt_tokens_copied += shared
        self._slots.keep(slot, common)
        self._held[slot] = held[:common]
        self._owner[slot] = request.ready.request.episode_id
        request.reused, request.pending = common, list(ids[common:])

    def _step(self) -> None:
        """One engine call for the next token of every generating sequence and the next chunk of each prompt
        being evaluated; an engine whose prompts must not share a call (:attr:`_Slots.prompts_in_step` false)
        gets one call for the generating sequences, then one per prompt."""
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
        if self._slots.prompts_in_step:
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
        logits = self._slots.evaluate(slots, chunks, [len(self._held[slot]) for slot in slots], wanted)
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
        """Stop the scheduler (requests still in flight fail), free the batch context, then the model."""
        if getattr(self, "_scheduler", None) is not None and not self._closing:
            with self._wake:
                self._closing = True
                self._wake.notify()
            self._scheduler.join()
            self._slots.close()
        super().close()


class _Slots(Protocol):
    """Where the slots' KV caches live and their tokens are evaluated (an engine of :class:`LlamaCppBatchPolicy`)."""

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


class _LlamaCppSlots:
    """llama.cpp's engine: a context of ``slots`` KV sequences, each its own stream of ``n_ctx`` cells (so a token
    attends only to its own sequence), one ``llama_decode`` per call. A prompt gets a call of its own: llama.cpp
    computes a sequence's prompt in a mixed batch differently (log-probs moved by up to 0.9)."""

    prompts_in_step = False

    def __init__(self, policy: LlamaCppPolicy, slots: int, n_ctx: int, n_batch: int, n_threads: int, verbose: bool):
        from llama_cpp._utils import suppress_stdout_stderr

        lib = self.lib = policy._llama_cpp
        self.n_vocab = policy.n_vocab
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx * slots
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = slots
        params.kv_unified = False  # a stream per sequence: attention reads only its own cells
        # flash attention's half-precision sums depend on how a prompt was split into llama_decode calls
        # (log-probs moved by up to 0.4); without it, a prompt's numbers do not depend on where it was cut
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.n_threads = params.n_threads_batch = n_threads
        with suppress_stdout_stderr(disable=verbose):
            self.ctx = lib.llama_init_from_model(policy.llm.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {slots} x {n_ctx} tokens")
        if policy.lora_path is not None:  # the adapter the single-stream context got, on the batch context too
            adapters = (lib.llama_adapter_lora_p_ctypes * 1)(policy.llm._lora_adapter)
            if lib.llama_set_adapters_lora(self.ctx, adapters, 1, (ctypes.c_float * 1)(1.0)):
                raise RuntimeError(f"llama.cpp could not apply the LoRA adapter {policy.lora_path}")
        self.memory = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(n_batch, 0, 1)

    def keep(self, slot: int, length: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, slot, length, -1)

    def copy(self, source: int, target: int, length: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, target, 0, -1)
        self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)  # another stream: the whole buffer
        self.lib.llama_memory_seq_rm(self.memory, target, length, -1)

    def evaluate(
        self, slots: list[int], chunks: list[list[int]], starts: list[int], wanted: list[bool]
    ) -> list[np.ndarray]:
        batch = self.batch
        batch.n_tokens = 0
        rows = []
        for slot, chunk, start, want in zip(slots, chunks, starts, wanted):
            for offset, token in enumerate(chunk):
                i = batch.n_tokens
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + offset, 1
                batch.seq_id[i][0] = slot
                batch.logits[i] = False
                batch.n_tokens += 1
            if want:
                batch.logits[batch.n_tokens - 1] = True
                rows.append(batch.n_tokens - 1)
        if self.lib.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError(f"llama_decode failed on a batch of {batch.n_tokens} tokens")
        return [
            np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,)) for row in rows
        ]

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)


class _TorchSlots:
    """The torch engine: the model in bf16 on a :class:`~llmgym.wrappers.decoding.slots.SlotDecoder`. A call is
    one pass through the layers: every chunk's tokens share the matrix products; attention takes the one-token
    chunks as one batch and each prompt alone."""

    prompts_in_step = True

    def __init__(self, spec: Any, slots: int, n_ctx: int, n_threads: int) -> None:
        import torch

        from llmgym.wrappers.decoding.slots import SlotDecoder
        from llmgym.wrappers.weights import load_model

        torch.set_num_threads(n_threads)  # for this thread's pool: built and used on the scheduler's thread
        model, _ = load_model(spec)
        self.decoder = SlotDecoder(model.to(torch.bfloat16).eval(), slots, max_length=n_ctx)

    def keep(self, slot: int, length: int) -> None:
        self.decoder.truncate(slot, length)

    def copy(self, source: int, target: int, length: int) -> None:
        self.decoder.copy(source, target, length)

    def evaluate(
        self, slots: list[int], chunks: list[list[int]], starts: list[int], wanted: list[bool]
    ) -> list[np.ndarray]:
        # the decoder's own lengths are the starts: the scheduler keeps a slot's tokens and the cache in step
        logits = self.decoder.evaluate(slots, chunks).numpy()
        return [row for row, want in zip(logits, wanted) if want]

    def close(self) -> None:
        self.decoder = None


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
