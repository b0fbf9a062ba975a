"""Raw completions for ``/v1/completions``: token ids in, token ids and log-probs out.

Holds :func:`complete_ids_llama`, which continues prompts with a
:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy`'s own sampler (so
sampling and log-probs are exactly the chat path's), and :func:`complete_ids`,
which continues prompts given as token ids with a transformers model
(``model.generate``, left-padded batch per sampling setting) and reports
each generated token's raw log-prob (``log_softmax`` of the model's logits,
temperature 1, no top-p), the same quantity
:class:`~llmgym.wrappers.transformers_policy.TransformersPolicy` reports.

Prompt log-probs (``echo`` with ``logprobs``) and top-k alternatives come
from :func:`score_generation` on transformers (one forward pass over prompt +
generated ids) and from :meth:`LlamaCppPolicy.score` on llama.cpp; a
completion with ``max_tokens=0`` only scores its prompt (:func:`prompt_only`).
Scores land in ``Generation.metadata``: ``prompt_logprobs`` (one per prompt
token, ``None`` first), ``prompt_top_logprobs`` and ``top_logprobs`` (dicts
token id -> log-prob).
"""

from __future__ import annotations

import threading
from typing import Any

from llmgym.policy import Generation, SamplingParams

__all__ = ["complete_ids", "complete_ids_llama", "score_ids", "score_generation", "prompt_only", "check_prompt_ids"]


def complete_ids(
    model: Any, tokenizer: Any, prompts: list[tuple[list[int], SamplingParams]], abort: threading.Event | None = None
) -> list[Generation]:
    """Continue each ``(prompt_ids, sampling)``; prompts with equal sampling run as one batch.

    ``abort``, once set, ends the batch in progress before its next token (finish reason ``"abort"``).

    A seeded sampled prompt runs alone: ``model.generate`` draws a batch's tokens from one
    generator, so in a batch its tokens would depend on the other prompts (vLLM's seeds do not).
    Greedy prompts ignore the seed and batch.

    Raises:
        ValueError: an empty prompt or a token id outside the vocabulary.
    """
    for ids, _ in prompts:
        check_prompt_ids(model, ids)
    results: list[Generation | None] = [None] * len(prompts)
    groups: dict[tuple, list[int]] = {}
    for index, (_, sampling) in enumerate(prompts):
        alone = index if sampling.seed is not None and sampling.temperature > 0 else None
        key = (sampling.temperature, sampling.top_p, sampling.max_tokens, alone, tuple(sampling.stop))
        groups.setdefault(key, []).append(index)
    for indices in groups.values():
        batch = _complete_batch(model, tokenizer, [prompts[i][0] for i in indices], prompts[indices[0]][1], abort)
        for index, generation in zip(indices, batch):
            results[index] = generation
    return [r for r in results if r is not None]


def complete_ids_llama(
    policy: Any, prompts: list[tuple[list[int], SamplingParams]], top_logprobs: int = 0, prompt_logprobs: bool = False
) -> list[Generation]:
    """Continue each ``(prompt_ids, sampling)`` with a LlamaCppPolicy's public ``complete``, one after the other.

    ``max_tokens=0`` generates nothing and only scores the prompt (with
    ``prompt_logprobs``); ``top_logprobs``/``prompt_logprobs`` are passed on to
    :meth:`LlamaCppPolicy.complete`.

    Raises:
        ValueError: an empty prompt, a token id outside the vocabulary, or a prompt that fills ``n_ctx``.
    """
    results = []
    for ids, sampling in prompts:
        if sampling.max_tokens == 0:
            if prompt_logprobs:
                results.append(prompt_only(list(ids), *policy.score(list(ids), top_logprobs)))
            else:
                policy.prompter.check_ids(list(ids), "a prompt")
                results.append(prompt_only(list(ids)))
        else:
            results.append(
                policy.complete([list(ids)], sampling, top_logprobs=top_logprobs, prompt_logprobs=prompt_logprobs)[0]
            )
    return results


def prompt_only(
    prompt_ids: list[int],
    prompt_logprobs: list[float | None] | None = None,
    prompt_top_logprobs: list[dict[int, float] | None] | None = None,
) -> Generation:
    """The result of a completion that generates nothing (``max_tokens=0`` with ``echo``): the prompt and its scores."""
    metadata: dict[str, Any] = {}
    if prompt_logprobs is not None:
        metadata.update(prompt_logprobs=prompt_logprobs, prompt_top_logprobs=prompt_top_logprobs)
    return Generation(
        message={"role": "assistant", "content": ""},
        prompt_token_ids=list(prompt_ids),
        token_ids=[],
        logprobs=[],
        finish_reason="length",
        metadata=metadata,
    )


def score_ids(
    model: Any, ids: list[int], top_logprobs: int = 0
) -> tuple[list[float | None], list[dict[int, float] | None]]:
    """Log-prob of every token given the ones before it, with one forward pass of a transformers model.

    Position 0 gets ``None``; position ``i`` gets ``log_softmax(logits[i-1])[ids[i]]``
    (temperature 1, the scale of generated tokens' log-probs) and, with
    ``top_logprobs=k``, the ``k`` most likely tokens there (``{}`` for ``k=0``).
    A chosen token that is the most likely one gets bitwise the value of the first alternative.

    Raises:
        ValueError: an empty sequence or a token id outside the vocabulary.
    """
    import torch

    check_prompt_ids(model, ids)
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, :-1].float()
        norm = torch.logsumexp(logits, dim=-1)
        chosen = (logits.gather(1, torch.tensor(ids[1:], device=device)[:, None])[:, 0] - norm).tolist()
        tops: list[dict[int, float] | None] = [{} for _ in chosen]
        if top_logprobs:
            values, indices = logits.topk(min(top_logprobs, logits.shape[-1]), dim=-1)
            values = values - norm[:, None]
            tops = [dict(zip(i.tolist(), v.tolist())) for i, v in zip(indices, values)]
    return [None, *chosen], [None, *tops]


def score_generation(model: Any, generation: Generation, top_logprobs: int, prompt_logprobs: bool) -> None:
    """Add scores from one forward pass over prompt + generated ids to ``generation.metadata``.

    ``prompt_logprobs``: ``metadata["prompt_logprobs"]`` and ``["prompt_top_logprobs"]``;
    ``top_logprobs=k``: ``metadata["top_logprobs"]``, the ``k`` alternatives of each generated token.
    """
    prompt, generated = list(generation.prompt_token_ids or []), list(generation.token_ids or [])
    if not prompt or not (prompt_logprobs or (top_logprobs and generated)):
        return
    logprobs, tops = score_ids(model, prompt + generated, top_logprobs)
    if prompt_logprobs:
        generation.metadata["prompt_logprobs"] = logprobs[: len(prompt)]
        generation.metadata["prompt_top_logprobs"] = tops[: len(prompt)]
    if top_logprobs:
        generation.metadata["top_logprobs"] = tops[len(prompt) :]


def check_prompt_ids(model: Any, ids: list[int]) -> None:
    """Refuse prompt ids a transformers model cannot take.

    Raises:
        ValueError: an empty prompt or a token id outside the vocabulary.
    """
    vocab = model.get_input_embeddings().num_embeddings
    if not ids:
        raise ValueError("the prompt is empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token ids out of range [0, {vocab}): {bad[:5]}")


def _complete_batch(
    model: Any, tokenizer: Any, prompts: list[list[int]], sampling: SamplingParams, abort: threading.Event | None = None
) -> list[Generation]:
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(ids) for ids in prompts)
    input_ids, attention = _left_padded(prompts, pad, width, next(model.parameters()).device)
    stops = [stop for stop in sampling.stop if stop]  # an empty stop string would match everywhere
    options = _generate_options(tokenizer, sampling, pad, stops, abort)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = model.generate(input_ids=input_ids, attention_mask=attention, **options)
    scores = torch.stack(out.logits, dim=1).float().log_softmax(dim=-1)  # (batch, steps, vocab), raw
    eos = set(_as_list(model.generation_config.eos_token_id) or [tokenizer.eos_token_id])
    return [
        _generation(tokenizer, ids, out.sequences[row, width:].tolist(), scores[row], eos, stops, sampling, abort)
        for row, ids in enumerate(prompts)
    ]


def _left_padded(prompts: list[list[int]], pad: int, width: int, device: Any) -> tuple[Any, Any]:
    """``(input_ids, attention_mask)``, each ``(batch, width)``: prompts padded on the left, so all end together."""
    import torch

    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts], device=device)
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts], device=device)
    return input_ids, attention


def _generate_options(
    tokenizer: Any, sampling: SamplingParams, pad: int, stops: list[str], abort: threading.Event | None
) -> dict[str, Any]:
    """``model.generate``'s keyword arguments for ``sampling``: greedy at temperature 0, every logit returned."""
    options: dict[str, Any] = {
        "max_new_tokens": sampling.max_tokens,
        "pad_token_id": pad,
        "output_logits": True,
        "return_dict_in_generate": True,
    }
    if sampling.temperature > 0:
        options.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
    else:
        options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if stops:
        options.update(stop_strings=stops, tokenizer=tokenizer)
    if abort is not None:
        options["stopping_criteria"] = _stop_on(abort)
    return options


def _stop_on(abort: threading.Event) -> Any:
    """A stopping criterion that ends every sequence of the batch once ``abort`` is set."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Aborted(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), abort.is_set(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Aborted()])


def _generation(
    tokenizer: Any,
    prompt_ids: list[int],
    generated: list[int],
    scores: Any,
    eos: set[int],
    stops: list[str],
    sampling: SamplingParams,
    abort: threading.Event | None,
) -> Generation:
    """One prompt's completion: ``generated`` cut after its first end-of-sequence token or stop string.

    ``scores`` holds the row's raw log-probs, ``(steps, vocab)``.
    """
    tokens: list[int] = []
    finish = "length"
    for token in generated:
        tokens.append(token)
        if token in eos:
            finish = "stop"
            break
        if stops and any(s in tokenizer.decode(tokens) for s in stops):
            finish = "stop"
            break
    if finish == "length" and abort is not None and abort.is_set() and len(tokens) < sampling.max_tokens:
        finish = "abort"
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    for stop in stops:
        if stop in text:
            text = text[: text.index(stop)]
    return Generation(
        message={"role": "assistant", "content": text},
        prompt_token_ids=list(prompt_ids),
        token_ids=tokens,
        logprobs=[float(scores[step, token]) for step, token in enumerate(tokens)],
        finish_reason=finish,
    )


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
