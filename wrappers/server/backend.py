"""The model behind ``llmgym serve``: request batching, LoRA adapters and token helpers.

Holds :class:`ServedModel`, which wraps any :class:`~llmgym.policy.Policy`
for the HTTP layer in :mod:`llmgym.wrappers.server`:

- **Batching.** A policy that batches concurrent requests itself
  (``continuous_batching``: :class:`~llmgym.wrappers.llamacpp_batch.LlamaCppBatchPolicy`)
  gets each chat or completion request as it arrives, joining the batch it is
  decoding; requests for prompt log-probs, and every request to other policies,
  go through the queue. Concurrent generations wait in one queue; a single worker takes
  everything queued (up to ``max_batch_size``, waiting ``batch_wait_s`` for
  stragglers), groups it by LoRA adapter and hands each group to
  ``policy.generate`` as one batch, on a worker thread so the event loop keeps
  answering. One model call runs at a time, so adapters can be switched
  safely between batches. A failing batch is retried request by request, so
  one bad request fails alone. Requests whose client has gone are dropped
  before they reach the model.
- **Fairness and size.** Both ways in are first come, first served per
  generation, so a request's many generations (prompts x ``n``) would all be
  ahead of a request that arrives a moment later. :meth:`ServedModel.generate_all`
  submits one request's generations at most ``max_batch_size`` at a time: its
  next ones queue behind whatever arrived meanwhile, and a small request waits
  for the batch (or, continuously batched, the slot) running when it came, not
  for the big request's whole list. A request for more than
  ``max_choices_per_request`` generations is refused (:meth:`ServedModel.check_choices`).
- **LoRA** (transformers models): adapters are loaded onto the served model in
  place by :class:`~llmgym.wrappers.server.lora.LoRAAdapters` (peft's
  functional API); a batch for adapter ``x`` runs with ``x`` active, a
  base-model batch with the adapters disabled. Loads and unloads wait for the
  running batch; requests queued for an adapter that is gone by their turn
  get a 404.
- **Tokens.** Token text for logprobs, prompt tokenization for
  ``/v1/completions``, and top-k alternatives (one scoring forward pass over
  prompt + generated ids) for ``top_logprobs`` on transformers models; on
  llama.cpp they come from the logits each token was sampled from.
- **Prompt log-probs.** A completion asked for them (``echo`` with
  ``logprobs``) scores its prompt: one forward pass over prompt + generated
  ids on transformers, one evaluation keeping every position's logits on
  llama.cpp (which also gives ``top_logprobs`` for completions there).
  ``max_tokens=0`` only scores. Requests that do not ask pay nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.server.lora import LoRAAdapters
from llmgym.wrappers.server.protocol import APIError

__all__ = ["ServedModel", "DEFAULT_MAX_CHOICES"]

#: Most generations (prompts x ``n``) one request may ask for, unless the server is told otherwise
#: (``llmgym serve --max-choices-per-request``; docs/serve.md says why 128).
DEFAULT_MAX_CHOICES = 128


@dataclass
class _Job:
    request: PolicyRequest
    adapter: str | None
    top_logprobs: int
    future: asyncio.Future
    prompt_ids: list[int] | None = None
    prompt_logprobs: bool = False


class ServedModel:
    """A policy made servable: batched, adapter-aware, with token helpers.

    Args:
        policy: the policy to serve. Its ``tokenizer`` (a transformers
            tokenizer) and ``model`` (a transformers model), when it has them,
            enable token text, ``/v1/completions``, ``top_logprobs`` and LoRA.
        model_name: the name clients use in ``"model"``.
        max_batch_size: most requests per ``policy.generate`` call, and most generations of one
            request submitted at a time (see :meth:`generate_all`).
        batch_wait_s: how long the worker waits for more requests to join a batch.
        max_choices_per_request: most generations (prompts x ``n``) one request may ask for.
    """

    def __init__(
        self,
        policy: Policy,
        model_name: str,
        max_batch_size: int = 16,
        batch_wait_s: float = 0.005,
        max_choices_per_request: int = DEFAULT_MAX_CHOICES,
    ):
        if not isinstance(policy, Policy):
            raise TypeError(f"ServedModel needs an llmgym Policy, got {type(policy).__name__}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_choices_per_request < 1:
            raise ValueError(f"max_choices_per_request must be at least 1, got {max_choices_per_request}")
        self.policy = policy
        self.model_name = model_name
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.max_choices_per_request = max_choices_per_request
        self.tokenizer = getattr(policy, "tokenizer", None)
        self.hf_model = _transformers_model(policy)
        llm = getattr(policy, "llm", None)
        # llama.cpp (LlamaCppPolicy): token text and raw completions go through its Llama object.
        self.llama = llm if hasattr(llm, "detokenize") and hasattr(policy, "tokenize") else None
        self.max_model_len = _max_model_len(policy, self.hf_model)
        self._lora = None if self.hf_model is None else LoRAAdapters(self.hf_model)
        #: Counters: batches run, the largest batch, requests dropped because their client had gone.
        self.batches_run = 0
        self.largest_batch = 0
        self.dropped = 0
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task | None = None
        self._model_lock: asyncio.Lock | None = None
        # the jobs now generating in a thread, and the event that ends their generation early (the policy's own,
        # which its decode loop reads); set when every client of the running batch has gone (a force-quit, a cancel)
        self._running: list[_Job] = []
        # a policy that batches concurrent requests itself (llama.cpp batch) gets each request as it comes; its
        # abort event would end every request it is decoding, so the queue's batches get an event of their own
        self.continuous = bool(getattr(policy, "continuous_batching", False))
        policy_abort = getattr(policy, "abort", None)
        shared = isinstance(policy_abort, threading.Event) and not self.continuous
        self._abort = policy_abort if shared else threading.Event()

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        """Start the batching worker (on the server's event loop)."""
        self._queue = asyncio.Queue()
        self._model_lock = asyncio.Lock()
        self._worker = asyncio.create_task(self._run_worker())

    async def stop(self) -> None:
        """Stop the worker; queued requests fail with 503."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        while self._queue is not None and not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(APIError(503, "The server is shutting down."))

    # -- generation -----------------------------------------------------------

    def resolve_model(self, name: str | None) -> str | None:
        """The adapter a request's ``model`` names (``None`` = the base model).

        Raises:
            APIError: 404 for a name that is neither the served model nor a loaded adapter.
        """
        if name is None or name == self.model_name:
            return None
        if name in self.adapters:
            return name
        raise APIError(404, f"The model `{name}` does not exist.", param="model")

    def check_max_tokens(self, max_tokens: int, prompt_tokens: int | None = None) -> None:
        """Refuse a request that cannot fit the model's context, as vLLM does.

        ``prompt_tokens`` is ``None`` where the prompt is not rendered yet (chat): then
        only ``max_tokens`` itself is checked, and the message claims no prompt length.

        Raises:
            APIError: 400 naming ``max_tokens``.
        """
        if self.max_model_len is None or (prompt_tokens or 0) + max_tokens <= self.max_model_len:
            return
        after = "" if prompt_tokens is None else f" after a {prompt_tokens}-token prompt"
        raise APIError(
            400,
            f"This model's maximum context length is {self.max_model_len} tokens; the request "
            f"asks for {max_tokens} new tokens{after}.",
            "max_tokens",
        )

    def check_choices(self, prompts: int, n: int) -> None:
        """Refuse a request for more than ``max_choices_per_request`` generations (``prompts`` x ``n``).

        Raises:
            APIError: 400 naming ``prompt`` when the prompts alone are too many, else ``n``.
        """
        if prompts * n <= self.max_choices_per_request:
            return
        asked = f"{prompts * n} choices ({prompts} prompts x n={n})" if prompts > 1 else f"{n} choices (n={n})"
        raise APIError(
            400,
            f"This request asks for {asked}; this server answers at most {self.max_choices_per_request} per "
            "request. Send the prompts in several requests, or start the server with a larger "
            "--max-choices-per-request.",
            "prompt" if prompts > self.max_choices_per_request else "n",
        )

    async def generate_all(self, starts: list[Callable[[], Awaitable[Generation]]]) -> list[Generation]:
        """Run one request's generations, at most ``max_batch_size`` of them submitted at a time; in order.

        ``starts`` are the coroutine functions that queue each generation (:meth:`generate`,
        :meth:`complete`). Each one that finishes lets the request's next one in, behind whatever other
        requests queued meanwhile: the queue and a continuously batching policy take generations in
        arrival order, so one request's hundred prompts submitted at once would keep every later
        request waiting for all of them. One request alone still fills whole batches.

        Raises:
            APIError: the first generation's error (the others are cancelled).
        """
        in_flight = asyncio.Semaphore(self.max_batch_size)

        async def admitted(start: Callable[[], Awaitable[Generation]]) -> Generation:
            async with in_flight:
                return await start()

        tasks = [asyncio.ensure_future(admitted(start)) for start in starts]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()

    async def generate(self, request: PolicyRequest, adapter: str | None = None, top_logprobs: int = 0) -> Generation:
        """Queue one chat request and wait for its generation."""
        return await self._submit(_Job(request, adapter, top_logprobs, asyncio.get_running_loop().create_future()))

    async def complete(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        adapter: str | None = None,
        top_logprobs: int = 0,
        prompt_logprobs: bool = False,
    ) -> Generation:
        """Queue one raw completion of ``prompt_ids`` and wait for it.

        ``prompt_logprobs`` also scores the prompt (``metadata["prompt_logprobs"]``,
        ``None`` for the first token, and ``["prompt_top_logprobs"]``); a
        ``sampling.max_tokens`` of 0 generates nothing and only scores.
        """
        if (self.hf_model is None or self.tokenizer is None) and self.llama is None:
            raise APIError(400, "/v1/completions needs the transformers or llama.cpp backend.")
        request = PolicyRequest(messages=[], sampling=sampling)
        job = _Job(
            request,
            adapter,
            top_logprobs,
            asyncio.get_running_loop().create_future(),
            prompt_ids=prompt_ids,
            prompt_logprobs=prompt_logprobs,
        )
        return await self._submit(job)

    async def _submit(self, job: _Job) -> Generation:
        if self._queue is None:
            raise APIError(503, "The server is not started.")
        # transformers scores alternatives in one forward pass, llama.cpp keeps them from the logits it sampled from
        if job.top_logprobs and self.hf_model is None and self.llama is None:
            raise APIError(
                400,
                "top_logprobs needs the transformers or llama.cpp backend; this one returns only "
                "the chosen token's log-prob.",
            )
        if self.continuous and job.adapter is None and not job.prompt_logprobs and job.request.sampling.max_tokens > 0:
            return await self._join_batch(job)
        await self._queue.put(job)
        try:
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            # The client went away: the worker skips the job if it has not started, and a batch that is
            # generating stops at its next token once none of its clients is left (else a force-quit
            # would wait for the whole generation before the process could exit).
            job.future.cancel()
            if any(running is job for running in self._running) and all(j.future.done() for j in self._running):
                self._abort.set()
            raise

    async def _join_batch(self, job: _Job) -> Generation:
        """Hand one request to a policy that decodes concurrent requests together; a client that goes
        away cancels it, and the policy drops it at its next step."""
        self.batches_run += 1  # each request is its own entry into the policy's running batch
        try:
            if job.prompt_ids is not None:
                return await self.policy.acomplete(job.prompt_ids, job.request.sampling, top_logprobs=job.top_logprobs)
            return await self.policy.agenerate(job.request, top_logprobs=job.top_logprobs)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001  the failure is this request's alone (see _as_api_error)
            raise _as_api_error(err) from err

    async def _run_worker(self) -> None:
        assert self._queue is not None and self._model_lock is not None
        while True:
            jobs = [await self._queue.get()]
            if self.batch_wait_s > 0:
                await asyncio.sleep(self.batch_wait_s)
            while len(jobs) < self.max_batch_size and not self._queue.empty():
                jobs.append(self._queue.get_nowait())
            groups: dict[tuple[str | None, bool], list[_Job]] = {}
            for job in jobs:
                if job.future.done():
                    self.dropped += 1
                else:
                    groups.setdefault((job.adapter, job.prompt_ids is not None), []).append(job)
            for (adapter, raw), group in groups.items():
                async with self._model_lock:
                    if adapter is not None and adapter not in self.adapters:
                        for job in group:
                            _fail(job, APIError(404, f"The model `{adapter}` does not exist.", param="model"))
                        continue
                    await self._run_group(adapter, raw, group)

    async def _run_group(self, adapter: str | None, raw: bool, group: list[_Job]) -> None:
        live = [job for job in group if not job.future.done()]
        self.dropped += len(group) - len(live)
        if not live:
            return
        self.batches_run += 1
        self.largest_batch = max(self.largest_batch, len(live))
        try:
            results = await self._in_thread(adapter, raw, live)
        except Exception as err:  # noqa: BLE001  a model failure must not stop the worker
            if len(live) == 1:
                _fail(live[0], _as_api_error(err))
                return
            for job in live:  # isolate the request that broke the batch
                try:
                    (result,) = await self._in_thread(adapter, raw, [job])
                except Exception as err:  # noqa: BLE001  the failure is this request's alone (see _as_api_error)
                    _fail(job, _as_api_error(err))
                else:
                    _succeed(job, result)
            return
        for job, result in zip(live, results):
            _succeed(job, result)

    async def _in_thread(self, adapter: str | None, raw: bool, jobs: list[_Job]) -> list[Generation]:
        """Generate ``jobs`` in a worker thread; they can be aborted (see ``_submit``) while it runs."""
        self._abort.clear()
        self._running = jobs
        try:
            return await asyncio.to_thread(self._generate_blocking, adapter, raw, jobs)
        except asyncio.CancelledError:  # the worker itself is stopping (shutdown): nobody will take these results
            self._abort.set()
            raise
        finally:
            self._running = []

    def _generate_blocking(self, adapter: str | None, raw: bool, jobs: list[_Job]) -> list[Generation]:
        from llmgym.wrappers.server.complete import score_generation

        with contextlib.nullcontext() if self._lora is None else self._lora.active(adapter):
            if raw:
                results = self._complete_blocking(jobs)
            elif self.llama is not None and any(job.top_logprobs for job in jobs):  # asked per request: one at a time
                results = [self.policy.generate([job.request], top_logprobs=job.top_logprobs)[0] for job in jobs]
            else:
                results = self.policy.generate([job.request for job in jobs])
            if len(results) != len(jobs):
                raise RuntimeError(f"the policy returned {len(results)} generations for {len(jobs)} requests")
            if self.hf_model is not None:  # one scoring forward pass gives top-k alternatives and prompt log-probs
                for job, result in zip(jobs, results):
                    score_generation(self.hf_model, result, job.top_logprobs, job.prompt_logprobs)
        return results

    def _complete_blocking(self, jobs: list[_Job]) -> list[Generation]:
        """Raw completions; ``max_tokens=0`` ones only get their prompt back (scored on llama.cpp here,
        on transformers by the caller's scoring pass)."""
        from llmgym.wrappers.server.complete import check_prompt_ids, complete_ids, complete_ids_llama, prompt_only

        if self.hf_model is None:
            return [
                complete_ids_llama(
                    self.policy, [(job.prompt_ids, job.request.sampling)], job.top_logprobs, job.prompt_logprobs
                )[0]
                for job in jobs
            ]
        generating = [job for job in jobs if job.request.sampling.max_tokens > 0]
        generated = iter(
            complete_ids(
                self.hf_model,
                self.tokenizer,
                [(job.prompt_ids, job.request.sampling) for job in generating],
                self._abort,
            )
        )
        results = []
        for job in jobs:
            if job.request.sampling.max_tokens > 0:
                results.append(next(generated))
            else:
                check_prompt_ids(self.hf_model, job.prompt_ids)
                results.append(prompt_only(job.prompt_ids))
        return results

    # -- LoRA -----------------------------------------------------------------

    @property
    def adapters(self) -> dict[str, str]:
        """The loaded LoRA adapters: name -> the path they were loaded from."""
        return {} if self._lora is None else {name: adapter.path for name, adapter in self._lora.loaded.items()}

    async def load_adapter(self, name: str, path: str, replace: bool = False) -> None:
        """Load a peft LoRA adapter from ``path`` under ``name``; ``replace`` swaps out one already loaded.

        Batches never see a half-loaded adapter (loads wait for the running batch), and a load that
        fails leaves nothing under ``name``: a failed ``replace`` has dropped the old weights too, so
        the name is gone rather than silently serving the base model.

        Raises:
            APIError: 400 for a backend without transformers weights, a name already loaded
                (unless ``replace``), a clash with the base model's name, or a path that does not
                hold a LoRA adapter for this model (``param`` says which).
        """
        if self._lora is None:
            raise APIError(400, "LoRA adapters need the transformers backend (llmgym serve --backend transformers).")
        if name == self.model_name:
            raise APIError(400, f"The lora adapter name `{name}` is the served model's name.", param="lora_name")
        assert self._model_lock is not None
        async with self._model_lock:
            # checked under the lock: two concurrent loads of one name must not both succeed
            if name in self._lora.loaded and not replace:
                raise APIError(400, f"The lora adapter `{name}` has already been loaded.", param="lora_name")
            await asyncio.to_thread(self._lora.load, name, path)

    async def unload_adapter(self, name: str) -> None:
        """Remove the adapter ``name``, after the batch that is running; requests still queued for it get a 404.

        Raises:
            APIError: 404 when no adapter of that name is loaded.
        """
        assert self._model_lock is not None
        async with self._model_lock:
            # checked under the lock: a concurrent unload of the same name gets the 404, not a 500
            if self._lora is None or name not in self._lora.loaded:
                raise APIError(404, f"The lora adapter `{name}` cannot be found.", param="lora_name")
            await asyncio.to_thread(self._lora.unload, name)

    # -- tokens ---------------------------------------------------------------

    def token_text(self, token_id: int) -> str:
        """The text of one token (``""`` when the backend has no tokenizer)."""
        if self.tokenizer is not None:
            return self.tokenizer.decode([token_id])
        if self.llama is not None:
            return self.llama.detokenize([token_id], special=True).decode("utf-8", errors="replace")
        return ""

    def decode(self, token_ids: list[int], special: bool = False) -> str:
        """The text of several tokens, special tokens left out unless ``special`` (``""`` without a tokenizer)."""
        if self.tokenizer is not None:
            return self.tokenizer.decode(token_ids, skip_special_tokens=not special)
        if self.llama is not None:
            return self.llama.detokenize(token_ids, special=special).decode("utf-8", errors="replace")
        return ""

    def encode(self, text: str) -> list[int]:
        """Token ids of a raw prompt (the tokenizer's special-token rules apply)."""
        if self.tokenizer is not None:
            return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        if self.llama is not None:
            return list(self.policy.tokenize(text))
        raise APIError(400, "Text prompts need a backend with a tokenizer; send token ids instead.", "prompt")


def _transformers_model(policy: Policy) -> Any:
    model = getattr(policy, "model", None)
    # A transformers model means transformers is imported already; importing it here would cost seconds.
    transformers = sys.modules.get("transformers")
    if model is None or transformers is None:
        return None
    return model if isinstance(model, transformers.PreTrainedModel) else None


def _max_model_len(policy: Policy, hf_model: Any) -> int | None:
    if hf_model is not None:
        return getattr(hf_model.config, "max_position_embeddings", None)
    n_ctx = getattr(policy, "n_ctx", None)
    return n_ctx if isinstance(n_ctx, int) else None


def _succeed(job: _Job, result: Generation) -> None:
    if not job.future.done():
        job.future.set_result(result)


def _fail(job: _Job, error: BaseException) -> None:
    if not job.future.done():
        job.future.set_exception(error)


def _as_api_error(err: BaseException) -> APIError:
    """A request's failure as its answer: 400 for what the policy contract calls a malformed request
    (``ValueError``, ``TypeError``) and for a chat template that refuses the messages (its
    ``raise_exception``, as vLLM answers it), 500 for anything else."""
    if isinstance(err, APIError):
        return err
    jinja2 = sys.modules.get("jinja2")  # the chat templates' engine, imported by whichever backend renders them
    if isinstance(err, (ValueError, TypeError)) or (jinja2 is not None and isinstance(err, jinja2.TemplateError)):
        return APIError(400, f"{type(err).__name__}: {err}")
    return APIError(500, f"The model failed on this request: {type(err).__name__}: {err}")
