"""A lean decoding step for Llama models on the CPU: a static key/value cache and no per-step framework work.

Holds :class:`LlamaDecoder`. Decoding a small batch on a CPU is bound by
reading the weights, but a transformers forward for one token also builds
cache objects, masks and position tensors layer by layer, a cost this decoder
does not pay (docs/benchmarks.md has the measurement). It runs the same
modules (the model's own norms, projections, rotary embedding and activation)
on a key/value cache allocated once per batch, with one
``scaled_dot_product_attention`` per layer. The logits equal the transformers
forward's up to float rounding (the tests compare them).

Only decoding steps run here; the prompt's prefill stays the model's own
forward, whose key/value cache :meth:`LlamaDecoder.start` copies in.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

__all__ = ["LlamaDecoder"]

_FIRST_GROWTH = 256  # cache columns allocated beyond the prompt at first; doubled when a batch decodes further


# scaled_dot_product_attention(enable_gqa=...) came in torch 2.5
_TORCH_HAS_GQA = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


class LlamaDecoder:
    """Decoding steps of a ``LlamaForCausalLM`` on the CPU with a static key/value cache.

    Args:
        model: the model (its weights are read at each step, so optimizer steps
            are seen without rebuilding the decoder).

    Use :meth:`unsupported` first; then :meth:`start` after the prefill,
    :meth:`step` per token and :meth:`select` when rows finish.
    """

    def __init__(self, model: nn.Module) -> None:
        reason = self.unsupported(model)
        if reason:
            raise ValueError(f"LlamaDecoder cannot run this model: {reason}")
        config = model.config
        self.model = model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scaling = getattr(model.model.layers[0].self_attn, "scaling", self.head_dim**-0.5)
        self.layers = list(model.model.layers)
        self.keys: torch.Tensor | None = None  # [layers, rows, kv_heads, capacity, head_dim]
        self.values: torch.Tensor | None = None
        self.length = 0  # cache columns filled

    @staticmethod
    def unsupported(model: Any) -> str | None:
        """Why this decoder cannot run ``model`` (``None`` when it can)."""
        if type(model) is not LlamaForCausalLM:
            return f"{type(model).__name__} is not a plain LlamaForCausalLM"
        if next(model.parameters()).device.type != "cpu":
            return "the model is not on the CPU"
        if not _TORCH_HAS_GQA:
            return (
                f"torch {torch.__version__} has no grouped-query attention in scaled_dot_product_attention (needs 2.5)"
            )
        return None

    def start(self, cache: Any, extra: int) -> None:
        """Take the prefill's key/value cache (a transformers ``DynamicCache``) for ``extra`` more tokens."""
        pairs = _cache_pairs(cache)
        first = pairs[0][0]
        rows, _, prompt, _ = first.shape
        capacity = prompt + min(max(extra, 1), _FIRST_GROWTH)
        shape = (len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
        self.keys = first.new_zeros(shape)
        self.values = first.new_zeros(shape)
        for index, (keys, values) in enumerate(pairs):
            self.keys[index, :, :, :prompt] = keys
            self.values[index, :, :, :prompt] = values
        self.length = prompt

    def select(self, keep: list[int]) -> None:
        """Keep only these rows of the cache (the others finished)."""
        index = torch.tensor(keep)
        self.keys, self.values = self.keys[:, index], self.values[:, index]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """The next-token logits ``[rows, vocab]`` after ``tokens`` ``[rows]`` at ``positions`` ``[rows]``.

        ``attention`` ``[rows, columns]`` marks the real (not padding) cache
        columns, the new token's column last.
        """
        if self.keys is None:
            raise RuntimeError("call start() with the prefill's cache before step()")
        column = self.length
        if column >= self.keys.shape[3]:
            self._grow()
        rows = tokens.shape[0]
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        base = self.model.model
        hidden = base.embed_tokens(tokens[:, None])  # [rows, 1, hidden]
        cos, sin = base.rotary_emb(hidden, positions[:, None])  # [rows, 1, head_dim]
        mask = attention[:, None, None, : column + 1].bool()
        q_size = heads * head_dim
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            normed = layer.input_layernorm(hidden)
            q, k, v = attn.q_proj(normed), attn.k_proj(normed), attn.v_proj(normed)
            q, k = apply_rotary_pos_emb(
                q.view(rows, 1, heads, head_dim).transpose(1, 2),
                k.view(rows, 1, kv_heads, head_dim).transpose(1, 2),
                cos,
                sin,
                unsqueeze_dim=1,
            )
            keys, values = self.keys[index], self.values[index]
            keys[:, :, column] = k[:, :, 0]
            values[:, :, column] = v.view(rows, kv_heads, head_dim)
            out = F.scaled_dot_product_attention(
                q,
                keys[:, :, : column + 1],
                values[:, :, : column + 1],
                attn_mask=mask,
                scale=self.scaling,
                enable_gqa=True,
            )
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(rows, 1, q_size))
            normed = layer.post_attention_layernorm(hidden)
            mlp = layer.mlp
            hidden = hidden + mlp.down_proj(mlp.act_fn(mlp.gate_proj(normed)) * mlp.up_proj(normed))
        self.length = column + 1
        return self.model.lm_head(base.norm(hidden))[:, 0]

    def _grow(self) -> None:
        assert self.keys is not None and self.values is not None
        pad = list(self.keys.shape)
        pad[3] = self.keys.shape[3]  # double the columns
        self.keys = torch.cat([self.keys, self.keys.new_zeros(pad)], dim=3)
        self.values = torch.cat([self.values, self.values.new_zeros(pad)], dim=3)


def _cache_pairs(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's ``(keys, values)`` of a transformers ``DynamicCache`` (the 5.x layout or the 4.x one)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))
