"""A policy backed by a transformers causal LM in-process (CPU or CUDA), batched and token-exact.

Holds :class:`TransformersPolicy`. It renders the chat template (injecting the
text tool-call protocol when the template has no tool support), generates a
batch of requests with left padding in one decoding loop (per-request
temperature, top-p, max tokens, stop strings, seed and thinking budget), and
returns token ids and log-probs for training. Concurrent :meth:`agenerate`
calls are grouped by a micro-batcher into one batched generation.

Log-probs are ``log_softmax`` of the model's raw logits (temperature 1, no
top-p) at the chosen token: the quantity a trainer recomputes from the same
weights, whatever temperature was used to sample. With
``rollout_precision="bf16"`` they are the bf16 copy's, the model that sampled.

Requests with the same prompt (a GRPO group) share one prefill: each distinct
prompt is encoded once and its KV cache rows are copied to its requests.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

import torch

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.batching import MicroBatcher
from llmgym.wrappers.prompting import Prompt, eos_token_ids, hf_chat_prompter
from llmgym.wrappers.thinking import FORCED_CLOSE, ThinkingTracker, split_thinking

__all__ = ["TransformersPolicy", "ROLLOUT_PRECISIONS"]

ROLLOUT_PRECISIONS = ("fp32", "bf16")


class _Row:
    """Decoding state of one sequence in a batch."""

    def __init__(self, prompt: Prompt, tokenizer: Any, forced_close: list[int], context: int | None = None) -> None:
        sampling = prompt.request.sampling
        self.sampling = sampling
        # generation ends ("length") where the model's context does, as llama.cpp's n_ctx and vLLM's max_model_len
        self.max_tokens = sampling.max_tokens if not context else min(sampling.max_tokens, context - len(prompt.ids))
        self.generator = torch.Generator()
        if sampling.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(sampling.seed))
        self.tracker = ThinkingTracker(sampling.thinking_budget, inside=prompt.opens_thinking)
        self.prompt_processed = 0  # prompt tokens evaluated (not found in a KV cache)
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.forced: list[int] = []
        self.forced_positions: list[int] = []
        self.text = ""
        self.finish_reason: str | None = None
        self._tokenizer = tokenizer
        self._forced_close = forced_close
        if self.tracker.must_close():  # a budget of 0 inside a block the prompt opened: close it before any token
            self.forced.extend(forced_close)

    def append(self, token: int, logprob: float, eos_ids: set[int]) -> None:
        """Record a token and decide whether the sequence is finished."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        piece = self._tokenizer.decode([token])
        self.text += piece
        self.tracker.feed(piece)
        if token in eos_ids and not self.forced:
            self.finish_reason = "stop"
        elif any(stop and stop in self.text for stop in self.sampling.stop):
            self.finish_reason = "stop"
        elif len(self.tokens) >= self.max_tokens:
            self.finish_reason = "length"
        elif self.tracker.must_close():
            self.forced.extend(self._forced_close)


class _PaddedBatch:
    """A batch in a KV cache of its own: the prompts left-padded and prefilled together (each distinct prompt
    once, its cache rows copied to the others: a GRPO group shares one prefill), then one token per row per
    step, by :class:`~llmgym.wrappers.decoding.llama.LlamaDecoder` or the transformers forward."""

    def __init__(self, policy: TransformersPolicy, prompts: list[Prompt], rows: list[_Row]) -> None:
        self.policy, device = policy, policy.device
        slots: dict[tuple[int, ...], int] = {}
        copies = [slots.setdefault(tuple(prompt.ids), len(slots)) for prompt in prompts]
        distinct = list(slots)
        width = max(len(ids) for ids in distinct)
        input_ids = torch.full((len(distinct), width), policy.pad_id, dtype=torch.long)
        attention = torch.zeros((len(distinct), width), dtype=torch.long)
        for i, ids in enumerate(distinct):
            input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[i, width - len(ids) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        output = policy.model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        cache, logits = output.past_key_values, _last_logits(output)
        if len(distinct) < len(prompts):  # every row gets its prompt's prefilled KV cache and first logits
            source = torch.tensor(copies)
            cache.batch_select_indices(source.to(device))
            logits, attention = logits[source], attention[source.to(device)]
        self.decoder = policy._fast_decoder()
        if self.decoder is not None:
            self.decoder.start(cache, max(row.max_tokens for row in rows))
            cache = None
        self.cache, self.attention, self.first_logits = cache, attention, logits
        #: prompt tokens evaluated for each row (its whole prompt, once per distinct prompt)
        self.processed = [
            len(prompt.ids) if copies.index(copies[row]) == row else 0 for row, prompt in enumerate(prompts)
        ]

    def step(self, keep: list[int], active: list[int], tokens: list[int]) -> torch.Tensor:
        """The logits after ``tokens``, one for each row still generating: ``keep``, their places among the
        rows of the last step (the others are dropped from the cache), ``active``, their indices in the batch."""
        device, attention = self.policy.device, self.attention
        if len(keep) < len(attention):  # drop finished rows from the batch and the KV cache
            if self.decoder is not None:
                self.decoder.select(keep)
            else:
                self.cache.batch_select_indices(torch.tensor(keep, device=device))
            attention = attention[keep]
        step = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]
        attention = torch.cat([attention, torch.ones((len(active), 1), dtype=torch.long, device=device)], dim=-1)
        self.attention = attention
        positions = attention.sum(-1, keepdim=True) - 1
        if self.decoder is not None:
            return self.decoder.step(step[:, 0], positions[:, 0], attention).float()
        output = self.policy.model(
            input_ids=step, attention_mask=attention, position_ids=positions, past_key_values=self.cache, use_cache=True
        )
        self.cache = output.past_key_values
        return _last_logits(output)


class _SlotBatch:
    """A batch on the bf16 slot copies: each prompt in its episode's KV cache slot, only its new tokens evaluated
    (:class:`~llmgym.wrappers.decoding.rollout_slots.SlotRollouts`)."""

    def __init__(self, slots: Any, prompts: list[Prompt]) -> None:
        self.slots = slots
        self.first_logits = slots.start([prompt.ids for prompt in prompts], [p.request.episode_id for p in prompts])
        self.processed = slots.processed

    def step(self, keep: list[int], active: list[int], tokens: list[int]) -> torch.Tensor:
        return self.slots.step(active, tokens)


class TransformersPolicy(Policy):
    """Generate with a transformers causal LM; returns token ids and log-probs.

    Args:
        model: ``None`` (SmolLM2-135M-Instruct), a model name or path for
            :func:`~llmgym.wrappers.models.load_model`, or a loaded model
            (then ``tokenizer`` is required) — e.g. a trainer's own model, so
            generation uses the weights being trained.
        tokenizer: the tokenizer that goes with a loaded model.
        device: where to load a model by name; a loaded model stays where it is.
        dtype: torch dtype for a model loaded by name.
        batch_size: most requests decoded together.
        batch_wait_ms: how long :meth:`agenerate` waits to gather concurrent
            requests into one batch.
        name: the policy's name in episode records (default: the model's name).
        chat_template: overrides the tokenizer's chat template.
        native_tools: pass tools to the template instead of the text protocol;
            default: when the template mentions ``tools``. Native output must
            still use ``<tool_call>{json}</tool_call>`` (Qwen/Hermes style) to
            be parsed by the env.
        rollout_precision: ``"fp32"`` decodes with the model's own weights;
            ``"bf16"`` (a plain Llama, or a peft model around one, on a CPU
            with AVX512-BF16) decodes a bf16 copy with any LoRA adapter merged
            (:class:`~llmgym.wrappers.decoding.rollout_slots.SlotRollouts`),
            keeping a KV cache slot per episode (``batch_size`` of them), so an
            episode's next turn evaluates only its new tokens; its log-probs
            are the bf16 copy's, the distribution actually sampled; after
            changing the weights call :meth:`weights_changed` so the copy is
            rebuilt. ``"int8"`` is deprecated: it warns and decodes as ``"fp32"``.
        generate_inline: decode on the event loop's thread instead of a worker
            thread (see :class:`~llmgym.wrappers.batching.MicroBatcher`): for a
            CPU model the same thread also trains, as in the GRPO trainer.
        fast_decode: decode a plain Llama model on the CPU with
            :class:`~llmgym.wrappers.decoding.llama.LlamaDecoder` (a static
            key/value cache; the same logits up to float rounding; a batch-4
            SmolLM2-135M token took 68.3 instead of 71.6 ms in fp32); ``False`` runs the transformers
            forward at every step. Other models always do.

    Attributes:
        abort: a ``threading.Event``; set from another thread, it ends the
            batch in progress before its next token (finish reason ``"abort"``);
            it stays set until cleared. ``llmgym serve`` sets it when every client
            of a batch has gone, and clears it before the next batch.

    Example:
        >>> from llmgym.wrappers.weights import tiny_random_model
        >>> policy = TransformersPolicy(*tiny_random_model())
        >>> out = policy.generate([PolicyRequest([{"role": "user", "content": "hi"}],
        ...                        sampling=SamplingParams(max_tokens=4, seed=0))])[0]
        >>> len(out.token_ids), len(out.logprobs), out.finish_reason
        (4, 4, 'length')
    """

    returns_tokens = True

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        dtype: Any = None,
        batch_size: int = 8,
        batch_wait_ms: float = 5.0,
        name: str | None = None,
        chat_template: str | None = None,
        native_tools: bool | None = None,
        rollout_precision: str = "fp32",
        generate_inline: bool = False,
        fast_decode: bool = True,
    ) -> None:
        if model is None or isinstance(model, str) or hasattr(model, "__fspath__"):
            from llmgym.wrappers.weights import load_model

            loaded, loaded_tokenizer = load_model(model, dtype=dtype, device=device)
            model, tokenizer = loaded, tokenizer or loaded_tokenizer
        elif tokenizer is None:
            raise TypeError("TransformersPolicy(model=<loaded model>) also needs tokenizer=")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if rollout_precision == "int8":
            warnings.warn(
                "rollout_precision='int8' is deprecated and decodes as 'fp32': the int8 copies were removed, "
                "as the bf16 slot copies decode faster (rollout_precision='bf16')",
                DeprecationWarning,
                stacklevel=2,
            )
            rollout_precision = "fp32"
        if rollout_precision not in ROLLOUT_PRECISIONS:
            raise ValueError(f"rollout_precision must be one of {ROLLOUT_PRECISIONS}, got {rollout_precision!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.batch_wait_ms = batch_wait_ms
        self.eos_ids = eos_token_ids(
            getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer
        )
        self.prompter = hf_chat_prompter(tokenizer, chat_template, native_tools, self.eos_ids)
        self.native_tools = self.prompter.native_tools
        config_name = getattr(getattr(model, "config", None), "name_or_path", "") or "transformers"
        self.name = name or str(config_name).rstrip("/").split("/")[-1]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.forced_close = tokenizer.encode(FORCED_CLOSE, add_special_tokens=False)
        self.rollout_precision = rollout_precision
        self.fast_decode = fast_decode
        self._slots: Any = None  # bf16 slot copies (rollout_precision="bf16"), refreshed after a change
        if rollout_precision == "bf16" and self.device.type != "cpu":
            raise ValueError(f"rollout_precision={rollout_precision!r} runs on the CPU; the model is on {self.device}")
        self._lock = threading.Lock()
        self.abort = threading.Event()
        self._batcher: MicroBatcher[PolicyRequest, Generation] = MicroBatcher(
            self._generate_prompts, batch_size, batch_wait_ms, prepare=self._prepare, inline=generate_inline
        )

    def weights_changed(self) -> None:
        """Tell the policy its model's weights change (an optimizer step, a checkpoint load).

        With ``rollout_precision="bf16"`` the copy is refreshed from the new
        weights on the next generation, every KV cache slot emptied. Without
        this call the policy keeps sampling from a stale copy.
        """
        if self._slots is not None:
            self._slots.weights_changed()

    def _fast_decoder_reason(self) -> str | None:
        """Why decoding does not use :class:`~llmgym.wrappers.decoding.llama.LlamaDecoder` (``None`` when it does)."""
        if not self.fast_decode:
            return "fast_decode=False"
        from llmgym.wrappers.decoding.llama import LlamaDecoder

        return LlamaDecoder.unsupported(self.model)

    def _fast_decoder(self) -> Any:
        """A :class:`~llmgym.wrappers.decoding.llama.LlamaDecoder` for this model, or ``None`` (see ``fast_decode``)."""
        if self._fast_decoder_reason() is not None:
            return None
        from llmgym.wrappers.decoding.llama import LlamaDecoder

        return LlamaDecoder(self.model)

    @property
    def _context_limit(self) -> int | None:
        """The model's context window in tokens (``config.max_position_embeddings``), when it declares one."""
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)

    def _prepare(self, request: PolicyRequest) -> Prompt:
        return self._check_context(self.prompter.prepare(request))

    def _check_context(self, prompt: Prompt) -> Prompt:
        """Raise ``ValueError`` for a prompt that leaves no room in the context (before any batch is generated)."""
        limit = self._context_limit
        if limit and len(prompt.ids) >= limit:
            raise ValueError(f"the prompt has {len(prompt.ids)} tokens but the model's context is {limit}")
        return prompt

    @property
    def device(self) -> torch.device:
        """The device the model's weights are on."""
        return next(self.model.parameters()).device

    def build_prompt(self, request: PolicyRequest) -> list[int]:
        """The prompt token ids for a request (see :class:`~llmgym.policy.PolicyRequest`)."""
        return self.prompter.prepare(request).ids

    # -- generation --------------------------------------------------------------

    def generate(self, requests: list[PolicyRequest]) -> list[Generation]:
        """Generate one assistant turn per request, ``batch_size`` requests per decoding loop.

        Raises:
            TypeError / ValueError: a malformed request (nothing is generated).
        """
        prompts = [self._prepare(request) for request in requests]
        results: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            results.extend(self._generate_prompts(prompts[start : start + self.batch_size]))
        return results

    def complete(self, prompts: list[list[int]], sampling: SamplingParams | None = None) -> list[Generation]:
        """Continue raw prompts given as token ids (no chat template), batched.

        For ``/v1/completions``-style use. The message content is the decoded continuation.

        Raises:
            ValueError: an empty prompt or a token id outside the vocabulary.
        """
        sampling = sampling or SamplingParams()
        ready = [self._check_context(self.prompter.raw(ids, sampling)) for ids in prompts]
        results: list[Generation] = []
        for start in range(0, len(ready), self.batch_size):
            results.extend(self._generate_prompts(ready[start : start + self.batch_size]))
        return results

    def _generate_prompts(self, prompts: list[Prompt]) -> list[Generation]:
        if not prompts:
            return []
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                started = time.perf_counter()
                rows = self._decode(prompts)
                elapsed = time.perf_counter() - started
            finally:
                self.model.train(was_training)
        return [self._to_generation(prompt, row, elapsed, len(prompts)) for prompt, row in zip(prompts, rows)]

    @torch.inference_mode()
    def _decode(self, prompts: list[Prompt]) -> list[_Row]:
        rows = [_Row(prompt, self.tokenizer, self.forced_close, self._context_limit) for prompt in prompts]
        batch = self._slot_batch(prompts) if self.rollout_precision == "bf16" else _PaddedBatch(self, prompts, rows)
        logits = batch.first_logits
        for row, processed in zip(rows, batch.processed):
            row.prompt_processed = processed
        active = list(range(len(rows)))  # rows still generating, in the batch's order
        while True:
            tokens = _next_tokens([rows[index] for index in active], logits)
            chosen = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1).tolist()
            for index, token, logprob in zip(active, tokens, chosen):
                rows[index].append(token, logprob, self.eos_ids)
            keep = [slot for slot, index in enumerate(active) if rows[index].finish_reason is None]
            if keep and self.abort.is_set():
                for slot in keep:
                    rows[active[slot]].finish_reason = "abort"
                keep = []
            if not keep:
                return rows
            active = [active[slot] for slot in keep]
            logits = batch.step(keep, active, [rows[index].tokens[-1] for index in active])

    def _slot_batch(self, prompts: list[Prompt]) -> _SlotBatch:
        """The batch on the bf16 slot copies (:class:`~llmgym.wrappers.decoding.rollout_slots.SlotRollouts`),
        built on the first batch after a weight change."""
        if self._slots is None:
            from llmgym.wrappers.decoding.rollout_slots import SlotRollouts

            self._slots = SlotRollouts(self.model, slots=self.batch_size)
        return _SlotBatch(self._slots, prompts)

    def _to_generation(self, prompt: Prompt, row: _Row, elapsed: float, batch: int) -> Generation:
        text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        for stop in row.sampling.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        reasoning, answer = split_thinking(text, prompt.opens_thinking)
        if reasoning is not None:
            message = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
        return Generation(
            message=message,
            prompt_token_ids=list(prompt.ids),
            token_ids=list(row.tokens),
            logprobs=list(row.logprobs),
            finish_reason=row.finish_reason or "length",
            thinking_tokens=row.tracker.thinking_tokens,
            metadata={
                "model": self.name,
                "backend": "transformers",
                "prefix_reused": prompt.prefix_reused,
                "prompt_tokens_processed": row.prompt_processed,
                "forced_positions": row.forced_positions,
                "batch_size": batch,
                "batch_seconds": elapsed,
                "rollout_precision": self.rollout_precision,
            },
        )

    async def agenerate(self, request: PolicyRequest) -> Generation:
        """Generate one turn; concurrent calls are gathered into batches of up to ``batch_size``."""
        return await self._batcher.submit(request)

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self.model = None


def _next_tokens(rows: list[_Row], logits: torch.Tensor) -> list[int]:
    """Each row's next token from its raw logits ``[rows, vocab]``: forced tokens first, then greedy or sampled.

    Sampling is inverse-CDF with one uniform draw from the row's own generator
    (so a seed gives the same tokens in any batch), over the softmax of the
    temperature-scaled logits, truncated to the top-p nucleus when asked.
    Sampled rows without top-p share one batched softmax and search.
    """
    tokens: list[int | None] = [None] * len(rows)
    plain: list[int] = []
    for slot, row in enumerate(rows):
        sampling = row.sampling
        if row.forced:
            row.forced_positions.append(len(row.tokens))
            tokens[slot] = row.forced.pop(0)
        elif sampling.temperature <= 0:
            tokens[slot] = int(torch.argmax(logits[slot]))
        elif 0 < sampling.top_p < 1:
            probs = torch.softmax(logits[slot] / sampling.temperature, dim=-1)
            sorted_probs, order = torch.sort(probs, descending=True)
            sorted_probs[torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= sampling.top_p] = 0
            tokens[slot] = int(order[_inverse_cdf(sorted_probs[None], [row.generator])[0]])
        else:
            plain.append(slot)
    if plain:
        temperatures = torch.tensor([rows[slot].sampling.temperature for slot in plain], dtype=logits.dtype)
        probs = torch.softmax(logits[plain] / temperatures[:, None], dim=-1)
        for slot, token in zip(plain, _inverse_cdf(probs, [rows[slot].generator for slot in plain]).tolist()):
            tokens[slot] = token
    return tokens  # type: ignore[return-value]


def _inverse_cdf(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One index per row of ``probs`` ``[rows, vocab]`` (unnormalized, >= 0), drawn with each row's generator.

    Zero-probability entries are never drawn (their CDF step is empty).
    """
    cdf = probs.cumsum(-1, dtype=torch.float64)
    uniform = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    total = cdf[:, -1]
    target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))  # strictly below the total
    return torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)


def _last_logits(output: Any) -> torch.Tensor:
    # Sampling runs on the CPU from one transfer per step: one device sync instead of one per row,
    # and seeded CPU generators give the same tokens on every device.
    return output.logits[:, -1, :].float().cpu()
