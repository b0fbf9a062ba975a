"""Token log-probs and the GRPO policy loss.

Holds :class:`TokenScorer` (an ``nn.Module`` wrapping a causal LM that returns
the log-prob of each given token, computing the vocabulary projection only at
the positions the loss needs), :func:`grpo_loss` (clipped ratio with
separate low/high epsilons, truncated importance weights against the
generator's log-probs, optional k3 KL, three aggregation variants) with its
per-micro-batch :class:`LossTerms` and their sum over a step, :class:`LossSums`,
and :func:`sft_loss`.

Every tensor is ``[batch, time]`` and aligned with the token ids: position
``p`` holds the log-prob of token ``p`` given tokens ``< p``; position 0 and
unmasked positions hold 0.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["TokenScorer", "LossTerms", "LossSums", "grpo_loss", "sft_loss"]


class TokenScorer(nn.Module):
    """Log-probs of the given tokens under a causal LM (wrap this in DDP, not the LM).

    Args:
        model: a transformers causal LM (or a peft model around one).
        temperature: deprecated. The log-probs are the raw model's (temperature 1), the
            quantity every policy reports whatever temperature it sampled at; another
            value warns and still divides the logits by it, for one release.
        share_prefix: when every row of a batch starts with the same
            ``min_shared_prefix`` or more real tokens (a GRPO group's prompt), run the
            decoder on that prefix once and on each row's rest with the prefix's
            key/value cache (gradients flow through it), instead of once per row.
            Same log-probs and gradients up to float rounding (tested). Turn it off
            for sharded (FSDP) models: their layers expect one forward per backward.

    The decoder runs on the whole sequence, but the vocabulary projection (the
    largest activation for small models) only on positions where
    ``target_mask`` is set. Models without ``get_decoder()`` fall back to the
    full logits.
    """

    min_shared_prefix = 32  # shorter prefixes save less than the extra pass over the weights costs (docs/training.md)

    def __init__(self, model: nn.Module, temperature: float = 1.0, share_prefix: bool = True):
        super().__init__()
        if temperature != 1.0:
            warnings.warn(
                "TokenScorer(temperature=) is deprecated: the trainers score the raw model's log-probs "
                "(temperature 1), as the policies report them",
                DeprecationWarning,
                stacklevel=2,
            )
        self.model = model
        self.temperature = temperature
        self.share_prefix = share_prefix

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        target_mask: torch.Tensor,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-prob (and, if asked, entropy, without gradient) at each masked position.

        Args:
            input_ids: ``[B, T]`` token ids.
            attention_mask: ``[B, T]`` 1 for real tokens, 0 for padding.
            target_mask: ``[B, T]`` 1 where a log-prob is wanted (never position 0).
            with_entropy: also return the entropy of the next-token distribution.
        """
        selected = target_mask[:, 1:].bool()
        targets = input_ids[:, 1:][selected]
        hf_model = _unwrap(self.model)
        decoder = hf_model.get_decoder() if hasattr(hf_model, "get_decoder") else None
        head = hf_model.get_output_embeddings() if hasattr(hf_model, "get_output_embeddings") else None
        if decoder is not None and head is not None and decoder is not hf_model:
            embeds = _tied_sparse_embeddings(hf_model, head, input_ids)
            inputs = {"input_ids": input_ids} if embeds is None else {"inputs_embeds": embeds}
            shared = (
                _shared_prefix_length(input_ids, attention_mask, self.min_shared_prefix) if self.share_prefix else 0
            )
            if shared:
                hidden = _decode_with_shared_prefix(decoder, inputs, attention_mask, shared)
            else:
                hidden = decoder(**inputs, attention_mask=attention_mask).last_hidden_state
            logits = head(hidden[:, :-1][selected])
        else:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1][selected]
        logits = logits.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        # one fused log_softmax over the vocabulary (its backward is one fused kernel too), then the chosen entries
        log_probs = torch.log_softmax(logits, dim=-1)
        chosen = log_probs.gather(-1, targets[:, None]).squeeze(-1)
        zeros = torch.zeros(input_ids.shape[0], 1, dtype=chosen.dtype, device=chosen.device)
        logp = torch.cat(
            [zeros, torch.zeros_like(selected, dtype=chosen.dtype).masked_scatter(selected, chosen)], dim=1
        )
        entropy = None
        if with_entropy:
            with torch.no_grad():
                values = -torch.einsum("nv,nv->n", log_probs.exp(), log_probs)
                entropy = torch.cat(
                    [zeros, torch.zeros_like(selected, dtype=values.dtype).masked_scatter(selected, values)], dim=1
                )
        return logp, entropy


def _shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, minimum: int) -> int:
    """How many leading tokens every row has in common, all real (0 if fewer than ``minimum`` or one row).

    Example:
        >>> ids = torch.tensor([[5, 6, 7, 1], [5, 6, 7, 2], [5, 6, 8, 3]])
        >>> _shared_prefix_length(ids, torch.ones_like(ids), 2), _shared_prefix_length(ids, torch.ones_like(ids), 3)
        (2, 0)
    """
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    differs = (~same).nonzero()
    length = int(differs[0]) if len(differs) else input_ids.shape[1]
    length = min(length, input_ids.shape[1] - 1)  # every row keeps at least one position of its own
    return length if length >= minimum else 0


def _decode_with_shared_prefix(
    decoder: nn.Module, inputs: dict[str, torch.Tensor], attention_mask: torch.Tensor, shared: int
) -> torch.Tensor:
    """The decoder's last hidden states ``[B, T, H]``, computing the first ``shared`` positions once.

    The prefix runs as one row and fills a key/value cache; the cache is repeated
    for the ``B`` rows and the rest of each row attends to it. Autograd follows the
    repeat, so the prefix's parameters get the sum of every row's gradient, as in
    the unshared forward.
    """
    rows, width = attention_mask.shape
    ((name, values),) = inputs.items()
    head = decoder(**{name: values[:1, :shared]}, attention_mask=attention_mask[:1, :shared], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(shared, width, device=attention_mask.device)
    tail = decoder(
        **{name: values[:, shared:]},
        attention_mask=attention_mask,
        past_key_values=cache,
        use_cache=True,
        position_ids=positions.expand(rows, -1),
        cache_position=positions,
    )
    return torch.cat([head.last_hidden_state.expand(rows, -1, -1), tail.last_hidden_state], dim=1)


def _tied_sparse_embeddings(hf_model: nn.Module, head: nn.Module, input_ids: torch.Tensor) -> torch.Tensor | None:
    """The input embeddings by a sparse-gradient lookup when the table is the head's (tied) weight, else ``None``.

    A dense embedding backward materializes a second vocabulary x hidden
    gradient (113 MB for SmolLM2-135M) at the very end of the backward pass,
    when every other gradient is already held: the step's memory peak. The
    sparse one only holds the looked-up rows, and it is summed into the
    head's dense gradient of the same tensor, so the parameter's gradient is
    the same dense tensor. Untied or sharded tables keep the model's own lookup.
    """
    get_embeddings = getattr(hf_model, "get_input_embeddings", None)
    embedding = get_embeddings() if callable(get_embeddings) else None
    if type(embedding) is not nn.Embedding or embedding.weight is not getattr(head, "weight", None):
        return None
    # frozen, or a DTensor shard
    if not embedding.weight.requires_grad or type(embedding.weight.data) is not torch.Tensor:
        return None
    return nn.functional.embedding(
        input_ids,
        embedding.weight,
        embedding.padding_idx,
        embedding.max_norm,
        embedding.norm_type,
        embedding.scale_grad_by_freq,
        sparse=True,
    )


def _unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (LoRA layers stay injected in it)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


@dataclass
class LossTerms:
    """Sums over the masked tokens of a micro-batch, for logging (divide by ``tokens``)."""

    tokens: float
    clipped: float
    kl: float
    is_weight: float
    ratio: float
    mismatch: float = 0.0
    """Sum of ``|old_logp - generator_logp|``: how far the generator's log-probs are from the trainer's."""


@dataclass
class LossSums:
    """One optimizer step's sums over its micro-batches, for the logged means (divide by ``tokens``).

    Example:
        >>> sums = LossSums()
        >>> sums.add(0.5, LossTerms(tokens=4.0, clipped=1.0, kl=0.0, is_weight=4.0, ratio=4.0))
        >>> sums.entropy += 2.0
        >>> metrics = sums.metrics(grad_norm=0.1)
        >>> metrics["loss"], metrics["clip_fraction"], metrics["entropy"], metrics["tokens/trained"]
        (0.5, 0.25, 0.5, 4.0)
    """

    loss: float = 0.0
    tokens: float = 0.0
    clipped: float = 0.0
    kl: float = 0.0
    is_weight: float = 0.0
    ratio: float = 0.0
    entropy: float = 0.0
    mismatch: float = 0.0

    def add(self, loss: float, terms: LossTerms) -> None:
        """Add one micro-batch's loss and :class:`LossTerms`."""
        self.loss += loss
        self.tokens += terms.tokens
        self.clipped += terms.clipped
        self.kl += terms.kl
        self.is_weight += terms.is_weight
        self.ratio += terms.ratio
        self.mismatch += terms.mismatch

    def over_ranks(self, world: int) -> LossSums:
        """These sums added over every rank (every rank must call it)."""
        if world == 1:
            return self
        total = torch.tensor(dataclasses.astuple(self), dtype=torch.float64)
        dist.all_reduce(total)
        return LossSums(*total.tolist())

    def metrics(self, grad_norm: float) -> dict[str, float]:
        """The logged numbers: the loss, and per-token means of the rest."""
        tokens = max(self.tokens, 1.0)
        return {
            "loss": self.loss,
            "kl": self.kl / tokens,
            "clip_fraction": self.clipped / tokens,
            "is_weight/mean": self.is_weight / tokens,
            "ratio/mean": self.ratio / tokens,
            "entropy": self.entropy / tokens,
            "grad_norm": grad_norm,
            "tokens/trained": self.tokens,
            "logp_mismatch": self.mismatch / tokens,  # mean |logp_generator - logp_trainer|: ~0 for fp32 rollouts
        }


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    generator_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
    beta: float = 0.0,
    is_cap: float | None = 2.0,
    aggregation: str = "token_mean",
    num_sequences: int | None = None,
    num_tokens: float | None = None,
    max_tokens: int | None = None,
) -> tuple[torch.Tensor, LossTerms]:
    """The clipped GRPO surrogate of one micro-batch, normalized for the whole batch.

    Per masked token, with ``rho = exp(logp - old_logp)`` and
    ``w = min(exp(old_logp - generator_logp), is_cap)`` (detached)::

        loss_tok = -w * min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)
                   + beta * (exp(ref - logp) - (ref - logp) - 1)

    Aggregation over the batch (``num_sequences``, ``num_tokens`` count the
    whole batch, so micro-batches' losses sum to the batch loss):
    ``sequence_mean`` averages each sequence's tokens, then the sequences;
    ``token_mean`` divides the token sum by ``num_tokens``; ``dr_grpo``
    divides it by ``num_sequences * max_tokens``.

    Args:
        logp: ``[B, T]`` log-probs under the policy being trained (with gradient).
        old_logp: log-probs under the policy before this step's updates (detached).
        advantages: per-token advantages.
        mask: 1 for policy tokens that enter the loss.
        generator_logp: log-probs the generator reported; ``None`` disables the correction.
        ref_logp: log-probs under the frozen reference (needed when ``beta > 0``).
        epsilon_low: lower clip range.
        epsilon_high: upper clip range.
        beta: k3 KL weight.
        is_cap: truncation of the importance weight; ``None`` disables the correction.
        aggregation: ``"sequence_mean"``, ``"token_mean"`` or ``"dr_grpo"``.
        num_sequences: sequences in the whole batch (default: this micro-batch's).
        num_tokens: masked tokens in the whole batch (default: this micro-batch's).
        max_tokens: Dr. GRPO's constant (required for ``dr_grpo``).

    Example:
        >>> logp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
        >>> loss, terms = grpo_loss(logp, logp.detach(), torch.tensor([[0.0, 1.0, 1.0]]),
        ...                         torch.tensor([[0.0, 1.0, 1.0]]))
        >>> round(loss.item(), 4), terms.tokens
        (-1.0, 2.0)
    """
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    surrogate = torch.minimum(ratio * advantages, clipped_ratio * advantages)
    weight = torch.ones_like(logp)
    if generator_logp is not None and is_cap is not None:
        weight = torch.clamp(torch.exp(old_logp - generator_logp), max=is_cap).detach()
    per_token = -weight * surrogate
    kl = torch.zeros_like(logp)
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp, the reference model's log-probs")
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    num_sequences = num_sequences or logp.shape[0]
    num_tokens = num_tokens if num_tokens is not None else float(mask.sum())
    if aggregation == "sequence_mean":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / num_sequences
    elif aggregation == "token_mean":
        loss = (per_token * mask).sum() / max(num_tokens, 1.0)
    elif aggregation == "dr_grpo":
        if not max_tokens:
            raise ValueError("dr_grpo aggregation needs max_tokens, the constant normalizer")
        loss = (per_token * mask).sum() / (num_sequences * max_tokens)
    else:
        raise ValueError(f"aggregation must be 'sequence_mean', 'token_mean' or 'dr_grpo', got {aggregation!r}")
    with torch.no_grad():
        is_clipped = ((ratio < 1 - epsilon_low) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
        terms = LossTerms(
            tokens=float(mask.sum()),
            clipped=float((is_clipped.to(mask.dtype) * mask).sum()),
            kl=float((kl * mask).sum()),
            is_weight=float((weight * mask).sum()),
            ratio=float((ratio * mask).sum()),
            mismatch=float(((old_logp - generator_logp).abs() * mask).sum()) if generator_logp is not None else 0.0,
        )
    return loss, terms


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None) -> torch.Tensor:
    """Negative log-likelihood of the masked tokens, averaged over ``num_tokens`` (the whole batch's count).

    Example:
        >>> round(sft_loss(torch.tensor([[0.0, -1.0, -3.0]]), torch.tensor([[0, 1, 1]])).item(), 3)
        2.0
    """
    mask = mask.to(logp.dtype)
    num_tokens = num_tokens if num_tokens is not None else float(mask.sum())
    return -(logp * mask).sum() / max(num_tokens, 1.0)
