"""Raw completions for ``/v1/completions``: token ids in, token ids and log-probs out.

Holds :func:`complete_ids_llama`, which continues prompts with a
:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy`'s own sampler (so
sampling and log-probs are exactly the chat path's), and :func:`complete_ids`, which continues prompts given as token ids with a
transformers model (``model.generate``, left-padded batch per sampling
setting) and reports each generated token's raw log-prob (``log_softmax``
of the model's logits, temperature 1, no top-p), the same quantity
:class:`~llmgym.wrappers.transformers_policy.TransformersPolicy` reports.
"""

from __future__ import annotations

from typing import Any

from llmgym.policy import Generation, SamplingParams

__all__ = ["complete_ids", "complete_ids_llama"]


def complete_ids(model: Any, tokenizer: Any, prompts: list[tuple[list[int], SamplingParams]]) -> list[Generation]:
    """Continue each ``(prompt_ids, sampling)``; prompts with equal sampling run as one batch.

    Raises:
        ValueError: an empty prompt or a token id outside the vocabulary.
    """
    vocab = model.get_input_embeddings().num_embeddings
    for ids, _ in prompts:
        if not ids:
            raise ValueError("the prompt is empty")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token ids out of range [0, {vocab}): {bad[:5]}")
    results: list[Generation | None] = [None] * len(prompts)
    groups: dict[tuple, list[int]] = {}
    for index, (_, sampling) in enumerate(prompts):
        key = (sampling.temperature, sampling.top_p, sampling.max_tokens, sampling.seed, tuple(sampling.stop))
        groups.setdefault(key, []).append(index)
    for indices in groups.values():
        batch = _complete_batch(model, tokenizer, [prompts[i][0] for i in indices], prompts[indices[0]][1])
        for index, generation in zip(indices, batch):
            results[index] = generation
    return [r for r in results if r is not None]


def complete_ids_llama(policy: Any, prompts: list[tuple[list[int], SamplingParams]]) -> list[Generation]:
    """Continue each ``(prompt_ids, sampling)`` with a LlamaCppPolicy's public ``complete``, one after the other.

    Raises:
        ValueError: an empty prompt, a token id outside the vocabulary, or a prompt that fills ``n_ctx``.
    """
    return [policy.complete([list(ids)], sampling)[0] for ids, sampling in prompts]


def _complete_batch(model: Any, tokenizer: Any, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(ids) for ids in prompts)
    device = next(model.parameters()).device
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts], device=device)
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts], device=device)
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
    stops = [stop for stop in sampling.stop if stop]  # an empty stop string would match everywhere
    if stops:
        options.update(stop_strings=stops, tokenizer=tokenizer)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = model.generate(input_ids=input_ids, attention_mask=attention, **options)
    scores = torch.stack(out.logits, dim=1).float().log_softmax(dim=-1)  # (batch, steps, vocab), raw
    generated = out.sequences[:, width:]
    eos = set(_as_list(model.generation_config.eos_token_id) or [tokenizer.eos_token_id])
    results = []
    for row, ids in enumerate(prompts):
        tokens: list[int] = []
        finish = "length"
        for step, token in enumerate(generated[row].tolist()):
            tokens.append(token)
            if token in eos:
                finish = "stop"
                break
            if stops and any(s in tokenizer.decode(tokens) for s in stops):
                finish = "stop"
                break
        logprobs = [float(scores[row, step, token]) for step, token in enumerate(tokens)]
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        for stop in stops:
            if stop in text:
                text = text[: text.index(stop)]
        results.append(Generation(
            message={"role": "assistant", "content": text},
            prompt_token_ids=list(ids),
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=finish,
        ))
    return results


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
