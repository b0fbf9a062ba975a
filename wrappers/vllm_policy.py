"""A policy backed by in-process vLLM (``vllm.LLM``): batched GPU generation with token ids and log-probs.

Holds :class:`VLLMPolicy`. Prompts are built exactly as in
:class:`~llmgym.wrappers.transformers_policy.TransformersPolicy` (the
tokenizer's chat template, the text tool-call protocol when the template has
no tools, token-exact continuation from ``prefix_token_ids``) and handed to
vLLM as token ids (``TokensPrompt``), so vLLM never re-tokenizes. Each
generated token comes back with its log-prob (``logprobs=0``: the sampled
token only). vLLM's default ``logprobs_mode="raw_logprobs"`` makes that the
``log_softmax`` of the raw logits (temperature 1), the quantity the other
local policies report.

Thinking budget: vLLM has no hook to force tokens mid-generation, so a
request with ``thinking_budget`` runs in two passes: first at most
``thinking_budget`` tokens; if the ``<think>`` block is still open, the
closing text is appended and a second pass continues from prompt + generated
+ forced tokens (their log-probs come from ``prompt_logprobs``). Here the
budget counts every token of the turn before the forced close, not only those
inside the block.
"""

from __future__ import annotations

import os
import time
from typing import Any

from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.wrappers.batching import MicroBatcher
from llmgym.wrappers.prompting import Prompt, eos_token_ids, hf_chat_prompter
from llmgym.wrappers.thinking import FORCED_CLOSE, ThinkingTracker, split_thinking

__all__ = ["VLLMPolicy"]


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise ImportError(
            'the in-process vLLM backend needs vllm (a CUDA machine): pip install "llmgym[vllm]"'
        ) from None
    return vllm


class VLLMPolicy(Policy):
    """Generate with an in-process ``vllm.LLM``; returns token ids and log-probs.

    Args:
        model: a checkpoint directory or a model id in the local Hugging Face
            cache; ``None``, ``"smollm2-135m"`` or a ``.gguf`` file use the
            checkpoint converted by :func:`~llmgym.wrappers.models.convert_gguf`.
        llm: an existing ``vllm.LLM`` to use instead of creating one.
        batch_size: most concurrent :meth:`agenerate` calls per ``LLM.generate``.
        batch_wait_ms: how long :meth:`agenerate` waits to gather a batch.
        name: the policy's name in episode records.
        chat_template: overrides the tokenizer's chat template.
        native_tools: pass tools to the template instead of the text protocol;
            default: when the template mentions ``tools``.
        **llm_kwargs: passed to ``vllm.LLM`` (``gpu_memory_utilization``,
            ``max_model_len``, ``dtype``, ``seed``...).
    """

    returns_tokens = True

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        llm: Any = None,
        batch_size: int = 64,
        batch_wait_ms: float = 10.0,
        name: str | None = None,
        chat_template: str | None = None,
        native_tools: bool | None = None,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        from vllm.inputs import TokensPrompt

        if llm is None:
            from llmgym.wrappers.weights import convert_gguf, resolve_gguf

            gguf = resolve_gguf(model)
            checkpoint = str(convert_gguf(gguf)) if gguf is not None else str(model)
            llm_kwargs.setdefault("enable_prefix_caching", True)
            llm = vllm.LLM(model=checkpoint, **llm_kwargs)
            self.name = name or ("smollm2-135m" if model is None else str(model).rstrip("/").split("/")[-1])
        else:
            self.name = name or "vllm"
        self._vllm = vllm
        self._tokens_prompt = TokensPrompt
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        hf_config = getattr(getattr(getattr(llm, "llm_engine", None), "model_config", None), "hf_config", None)
        self.eos_ids = eos_token_ids(hf_config, self.tokenizer)
        self.prompter = hf_chat_prompter(self.tokenizer, chat_template, native_tools, self.eos_ids)
        self.native_tools = self.prompter.native_tools
        self.forced_close = list(self.tokenizer.encode(FORCED_CLOSE, add_special_tokens=False))
        self.batch_size = batch_size
        self._batcher: MicroBatcher[PolicyRequest, Generation] = MicroBatcher(
            self._generate_prompts, batch_size, batch_wait_ms, prepare=self.prompter.prepare
        )

    def build_prompt(self, request: PolicyRequest) -> list[int]:
        """The prompt token ids for a request (see :class:`~llmgym.policy.PolicyRequest`)."""
        return self.prompter.prepare(request).ids

    def generate(self, requests: list[PolicyRequest]) -> list[Generation]:
        """Generate one assistant turn per request, all in one ``LLM.generate`` call.

        Raises:
            TypeError / ValueError: a malformed request (nothing is generated).
        """
        return self._generate_prompts([self.prompter.prepare(request) for request in requests])

    async def agenerate(self, request: PolicyRequest) -> Generation:
        """Generate one turn; concurrent calls are gathered into batches of up to ``batch_size``."""
        return await self._batcher.submit(request)

    def complete(self, prompts: list[list[int]], sampling: SamplingParams | None = None) -> list[Generation]:
        """Continue raw prompts given as token ids (no chat template).

        Raises:
            ValueError: an empty prompt or a token id outside the vocabulary.
        """
        return self._generate_prompts([self.prompter.raw(ids, sampling or SamplingParams()) for ids in prompts])

    def _params(self, sampling: SamplingParams, max_tokens: int, prompt_logprobs: bool = False) -> Any:
        return self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=max_tokens,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
            logprobs=0,
            prompt_logprobs=0 if prompt_logprobs else None,
            skip_special_tokens=True,
        )

    def _run(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
        requests = [self._tokens_prompt(prompt_token_ids=ids) for ids in prompts]
        return list(self.llm.generate(requests, sampling_params=params, use_tqdm=False))

    def _generate_prompts(self, prompts: list[Prompt]) -> list[Generation]:
        if not prompts:
            return []
        started = time.perf_counter()
        first_pass = []
        for prompt in prompts:
            sampling = prompt.request.sampling
            budget = sampling.thinking_budget
            limit = sampling.max_tokens if budget is None else max(1, min(budget, sampling.max_tokens))
            first_pass.append(self._params(sampling, limit))
        outputs = self._run([p.ids for p in prompts], first_pass)
        turns = [_Turn(prompt, output.outputs[0], self.tokenizer) for prompt, output in zip(prompts, outputs)]

        # Second pass for turns the budget cut short (forcing the close when the think block is open).
        pending = [t for t in turns if t.needs_second_pass(self.forced_close)]
        if pending:
            continued = self._run(
                [t.prompt.ids + t.tokens for t in pending],
                [self._params(t.prompt.request.sampling, t.remaining, prompt_logprobs=True) for t in pending],
            )
            for turn, output in zip(pending, continued):
                turn.continue_with(output, self.tokenizer)
        elapsed = time.perf_counter() - started
        return [turn.to_generation(self.name, elapsed, len(prompts), self.tokenizer) for turn in turns]


class _Turn:
    """One request's generated tokens across the (one or two) passes."""

    def __init__(self, prompt: Prompt, completion: Any, tokenizer: Any) -> None:
        self.prompt = prompt
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.forced_positions: list[int] = []
        self.tracker = ThinkingTracker(prompt.request.sampling.thinking_budget, inside=prompt.opens_thinking)
        self.finish_reason = "stop"
        self.remaining = 0
        self._forced: list[int] = []
        self._take(completion, tokenizer)

    def _take(self, completion: Any, tokenizer: Any) -> None:
        for index, token in enumerate(completion.token_ids):
            self.tokens.append(int(token))
            entry = completion.logprobs[index] if completion.logprobs else None
            self.logprobs.append(float(entry[token].logprob) if entry and token in entry else float("nan"))
            self.tracker.feed(tokenizer.decode([token]))
        self.finish_reason = "length" if completion.finish_reason == "length" else "stop"

    def needs_second_pass(self, forced_close: list[int]) -> bool:
        """Whether the budget cut this turn short; queues the forced close when a think block is open."""
        sampling = self.prompt.request.sampling
        if sampling.thinking_budget is None or self.finish_reason != "length":
            return False
        self._forced = list(forced_close) if self.tracker.inside else []
        self.remaining = sampling.max_tokens - len(self.tokens) - len(self._forced)
        return self.remaining > 0

    def continue_with(self, output: Any, tokenizer: Any) -> None:
        """Append the forced tokens (log-probs from the second pass's prompt log-probs) and the continuation."""
        prompt_logprobs = output.prompt_logprobs or []
        start = len(self.prompt.ids) + len(self.tokens)
        for offset, token in enumerate(self._forced):
            self.forced_positions.append(len(self.tokens))
            self.tokens.append(token)
            entry = prompt_logprobs[start + offset] if start + offset < len(prompt_logprobs) else None
            self.logprobs.append(float(entry[token].logprob) if entry and token in entry else float("nan"))
            self.tracker.feed(tokenizer.decode([token]))
        self._take(output.outputs[0], tokenizer)

    def to_generation(self, model_name: str, elapsed: float, batch: int, tokenizer: Any) -> Generation:
        sampling = self.prompt.request.sampling
        text = tokenizer.decode(self.tokens, skip_special_tokens=True)
        for stop in sampling.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        reasoning, answer = split_thinking(text, self.prompt.opens_thinking)
        if reasoning is not None:
            message = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
        return Generation(
            message=message,
            prompt_token_ids=list(self.prompt.ids),
            token_ids=self.tokens,
            logprobs=self.logprobs,
            finish_reason=self.finish_reason,
            thinking_tokens=self.tracker.thinking_tokens,
            metadata={
                "model": model_name,
                "backend": "vllm",
                "prefix_reused": self.prompt.prefix_reused,
                "forced_positions": self.forced_positions,
                "batch_size": batch,
                "batch_seconds": elapsed,
            },
        )
