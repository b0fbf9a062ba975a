"""Many sequences decoded together on a CPU, each keeping its own key/value cache between calls.

Holds :class:`SlotDecoder`. A Llama model's decoding step for one sequence reads
every weight to compute one token; a step for many sequences shares that read,
and in bf16 a CPU with AVX512-BF16 multiplies a 16-row batch at ~220 GFLOP/s
on one core against ~100 in fp32. So the decoder keeps the model in bf16 and
gives each *slot* (a sequence: an episode's conversation) its own rows of one
key/value cache:

- :meth:`SlotDecoder.extend` evaluates new tokens of one slot (a prompt, or an
  episode's next turn after the history already held), attending to what the
  slot holds;
- :meth:`SlotDecoder.step` evaluates one token of each of several slots in one
  batch;
- :meth:`SlotDecoder.truncate` and :meth:`SlotDecoder.copy` reuse a held prefix
  (an episode's history, a shared system prompt) instead of evaluating it again.

The cache is one tensor per layer for the keys, ``[slots, kv_heads, head_dim,
capacity]`` (transposed: a batched ``q @ k`` then reads each slot's keys as
they lie, 5x faster than through a transposed view), and one for the values,
``[slots, kv_heads, capacity, head_dim]``. A step attends over the first rows
only, so the slots being stepped are first moved to the front (their rows
swapped, which happens when the set of generating slots changes, at a turn's
start or end, not at every token). Grouped-query attention runs without
repeating the keys: a kv head's query heads are laid out as extra query rows of
one batched matrix product. (``scaled_dot_product_attention`` took 2.8x as long
for these few query rows over long cached contexts.)

The numbers are bf16's (the weights and activations; norms, softmax and logits
in fp32), so log-probs differ from the fp32 model's by ~0.01-0.1. A row's logits
barely depend on the rows beside it in a step: attention is computed per row
over whole blocks of columns, and the bf16 products give each row the same
numbers alone or in a batch but for a few rows of the MLP's down projection,
which oneDNN rounds differently (SmolLM2's log-probs moved by up to 0.009 between
a batch of 16 and one row; the tests bound it at 0.05).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaForCausalLM

__all__ = ["SlotDecoder"]

_FIRST_CAPACITY = 256  # cache columns per slot at first; grown a block at a time
# Attention reads a multiple of this many cache columns (the rest masked out), so a sequence's scores are summed in
# the same order whatever the longest sequence beside it: softmax's vectorized sums group a row's entries by
# position, and a tail that is not a whole multiple of the vector width is summed apart, in another order.
_COLUMN_BLOCK = 64


class SlotDecoder:
    """Decode many sequences of a ``LlamaForCausalLM`` together on the CPU, each in its own cache slot.

    Args:
        model: a plain Llama model on the CPU, already in ``dtype`` (its
            weights are read at each call; the fused projections are copies made here).
        slots: sequences held at once.
        max_length: most tokens one slot may hold (the model's context by default).

    Example:
        >>> from llmgym.wrappers.weights import tiny_random_model
        >>> model, _ = tiny_random_model()
        >>> decoder = SlotDecoder(model.to(torch.bfloat16), slots=2)
        >>> first = decoder.extend(0, [1, 2, 3])            # a prompt in slot 0: its next-token logits
        >>> _ = decoder.extend(1, [1, 2])
        >>> tuple(decoder.step([0, 1], [4, 3]).shape)[0], decoder.length(0)
        (2, 4)
    """

    def __init__(self, model: nn.Module, slots: int, max_length: int | None = None) -> None:
        if type(model) is not LlamaForCausalLM:
            raise ValueError(f"SlotDecoder runs a plain LlamaForCausalLM, not {type(model).__name__}")
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        config, parameter = model.config, next(model.parameters())
        if parameter.device.type != "cpu":
            raise ValueError(f"SlotDecoder runs on the CPU; the model is on {parameter.device}")
        self.model, self.dtype = model, parameter.dtype
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.group = self.heads // self.kv_heads
        self.scaling = self.head_dim**-0.5
        self.max_length = max_length or config.max_position_embeddings
        self.layers = list(model.model.layers)
        with torch.no_grad():
            self.qkv = [
                torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight])
                for layer in self.layers
            ]
            self.gate_up = [torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]) for layer in self.layers]
        if any(
            proj.bias is not None
            for layer in self.layers
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj)
        ):
            raise ValueError("SlotDecoder runs Llama models without attention biases")
        capacity = min(_FIRST_CAPACITY, self.max_length)
        self.keys = torch.zeros((len(self.layers), slots, self.kv_heads, self.head_dim, capacity), dtype=self.dtype)
        self.values = torch.zeros((len(self.layers), slots, self.kv_heads, capacity, self.head_dim), dtype=self.dtype)
        self.slots = slots
        self._lengths = [0] * slots
        self._row = list(range(slots))  # the cache row each slot's tokens are in
        self._slot_at = list(range(slots))  # the slot whose tokens are in each cache row

    # -- what a slot holds -----------------------------------------------------------

    def length(self, slot: int) -> int:
        """Tokens ``slot`` holds."""
        return self._lengths[slot]

    def truncate(self, slot: int, length: int) -> None:
        """Keep only the first ``length`` tokens of ``slot``."""
        self._lengths[slot] = min(self._lengths[slot], max(0, length))

    @torch.inference_mode()
    def copy(self, source: int, target: int, length: int) -> None:
        """Make ``target`` hold the first ``length`` tokens ``source`` holds (a shared prompt prefix)."""
        length = min(length, self._lengths[source])
        a, b = self._row[source], self._row[target]
        self.keys[:, b, ..., :length] = self.keys[:, a, ..., :length]
        self.values[:, b, :, :length] = self.values[:, a, :, :length]
        self._lengths[target] = length

    # -- evaluating tokens -------------------------------------------------------------

    @torch.inference_mode()
    def extend(self, slot: int, tokens: list[int]) -> torch.Tensor:
        """Evaluate ``tokens`` after what ``slot`` holds; the fp32 logits ``[vocab]`` after the last one."""
        if not tokens:
            raise ValueError("extend() needs at least one token")
        start, count = self._lengths[slot], len(tokens)
        self._reserve(start + count)
        row = self._row[slot]
        positions = torch.arange(start, start + count)
        width = self._width(start + count)
        hidden_keys = torch.arange(width)[None, :] > positions[:, None]  # [count, keys]: causal
        # a kv head's query heads are its query rows
        mask = _additive(hidden_keys.repeat(self.group, 1)[None, None], self.dtype)
        hidden = self.model.model.embed_tokens(torch.tensor([tokens]))
        cos, sin = self.model.model.rotary_emb(hidden, positions[None])
        for index, layer in enumerate(self.layers):
            q, k, v = self._project(index, layer, hidden, count, cos, sin)  # [1, heads or kv_heads, count, dim]
            self.keys[index, row, :, :, start : start + count] = k[0].transpose(1, 2)
            self.values[index, row, :, start : start + count] = v[0]
            out = self._attend(
                q.reshape(1, self.kv_heads, self.group * count, self.head_dim),
                self.keys[index, row : row + 1, ..., :width],
                self.values[index, row : row + 1, :, :width],
                mask,
            )
            out = out.view(1, self.heads, count, self.head_dim).transpose(1, 2).reshape(1, count, -1)
            hidden = self._finish_layer(layer, index, hidden, out)
        self._lengths[slot] = start + count
        return self._logits(hidden[:, -1])[0]

    @torch.inference_mode()
    def step(self, slots: list[int], tokens: list[int]) -> torch.Tensor:
        """Evaluate one token of each of ``slots`` (distinct) in one batch; the fp32 logits ``[len(slots), vocab]``."""
        if len(set(slots)) != len(slots) or len(slots) != len(tokens):
            raise ValueError("step() takes distinct slots and one token for each")
        self._to_front(slots)
        rows = len(slots)
        lengths = torch.tensor([self._lengths[slot] for slot in slots])
        self._reserve(int(lengths.max()) + 1)
        width = self._width(int(lengths.max()) + 1)
        hidden_keys = torch.arange(width)[None, :] > lengths[:, None]
        mask = _additive(hidden_keys[:, None, None, :], self.dtype)  # [rows, 1, 1, keys]
        hidden = self.model.model.embed_tokens(torch.tensor(tokens)[:, None])
        cos, sin = self.model.model.rotary_emb(hidden, lengths[:, None])
        index_rows = torch.arange(rows)
        for index, layer in enumerate(self.layers):
            q, k, v = self._project(index, layer, hidden, 1, cos, sin)  # [rows, heads or kv_heads, 1, dim]
            self.keys[index, index_rows, :, :, lengths] = k[:, :, 0]
            self.values[index, index_rows, :, lengths] = v[:, :, 0]
            out = self._attend(
                q.reshape(rows, self.kv_heads, self.group, self.head_dim),
                self.keys[index, :rows, ..., :width],
                self.values[index, :rows, :, :width],
                mask,
            )
            hidden = self._finish_layer(layer, index, hidden, out.reshape(rows, 1, -1))
        for slot in slots:
            self._lengths[slot] += 1
        return self._logits(hidden[:, 0])

    # -- the layer's pieces --------------------------------------------------------------

    def _project(
        self, index: int, layer: Any, hidden: torch.Tensor, count: int, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer's rotated queries and keys and its values, ``[rows, heads, count, head_dim]`` each.

        The queries and keys are rotated together, as one tensor of ``heads + kv_heads`` heads: a step
        for a batch of short rows costs about as much per operation as per number, so fewer operations
        (7 instead of 14 per layer) are what make it shorter.
        """
        rows, heads = hidden.shape[0], self.heads
        qkv = F.linear(layer.input_layernorm(hidden), self.qkv[index])
        qkv = qkv.view(rows, count, heads + 2 * self.kv_heads, self.head_dim)
        qk = qkv[:, :, : heads + self.kv_heads]
        half = self.head_dim // 2
        turned = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)  # transformers' rotate_half
        qk = qk * cos[:, :, None] + turned * sin[:, :, None]
        q, k = qk[:, :, :heads].transpose(1, 2), qk[:, :, heads:].transpose(1, 2)
        return q, k, qkv[:, :, heads + self.kv_heads :].transpose(1, 2)

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``[rows, kv_heads, queries, dim]`` over ``keys`` ``[rows, kv_heads, dim, n]`` and
        ``values`` ``[rows, kv_heads, n, dim]``, with ``mask`` (0 or -inf) added to the scores, softmax in fp32.

        The scores are bf16 as the product gives them; the scale (1/8 for 64-dim heads, a power of two) and
        the mask change none of their bits in bf16, so they are applied there, before one fp32 softmax.
        """
        scores = torch.matmul(q * self.scaling, keys) + mask
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype), values)

    def _finish_layer(self, layer: Any, index: int, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The residual stream after the layer's output projection and MLP."""
        hidden = hidden + layer.self_attn.o_proj(attended)
        gate, up = F.linear(layer.post_attention_layernorm(hidden), self.gate_up[index]).chunk(2, dim=-1)
        return hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.model.model.norm(hidden)).float()

    # -- the cache's layout --------------------------------------------------------------

    def _reserve(self, length: int) -> None:
        """Make room for ``length`` tokens in every slot: the columns grow to the next whole block.

        Growing by blocks, not doubling, keeps the capacity at the longest sequence's blocks, so a step
        usually attends over every column: the slots' keys and values are then contiguous, and the batched
        products read them in place (over a slice of the columns they first copied them: 0.12 against
        0.07 ms a layer for 12 slots of 640 tokens). The copy a growth costs comes once per 64 tokens.
        """
        if length > self.max_length:
            raise ValueError(f"a slot would hold {length} tokens; the most is {self.max_length}")
        if length <= self.values.shape[3]:
            return
        capacity = min(-(-length // _COLUMN_BLOCK) * _COLUMN_BLOCK, self.max_length)
        keys = self.keys.new_zeros((*self.keys.shape[:4], capacity))
        keys[..., : self.keys.shape[4]] = self.keys
        values = self.values.new_zeros((*self.values.shape[:3], capacity, self.head_dim))
        values[:, :, :, : self.values.shape[3]] = self.values
        self.keys, self.values = keys, values

    def _width(self, length: int) -> int:
        """Cache columns attention reads to see ``length`` tokens: whole blocks of ``_COLUMN_BLOCK``."""
        return min(-(-length // _COLUMN_BLOCK) * _COLUMN_BLOCK, self.values.shape[3])

    def _to_front(self, slots: list[int]) -> None:
        """Put ``slots``' tokens in cache rows ``0, 1, ...`` in that order (swapping rows where needed)."""
        for position, slot in enumerate(slots):
            row = self._row[slot]
            if row != position:
                self._swap_rows(position, row)

    def _swap_rows(self, a: int, b: int) -> None:
        slot_a, slot_b = self._slot_at[a], self._slot_at[b]
        used = max(self._lengths[slot_a], self._lengths[slot_b])
        for cache in (self.keys, self.values.transpose(3, 4)):  # token columns last in both
            held = cache[:, a, ..., :used].clone()
            cache[:, a, ..., :used] = cache[:, b, ..., :used]
            cache[:, b, ..., :used] = held
        self._slot_at[a], self._slot_at[b] = slot_b, slot_a
        self._row[slot_a], self._row[slot_b] = b, a


def _additive(hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask to add to attention scores: ``-inf`` where ``hidden`` is true, 0 elsewhere."""
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill_(hidden, float("-inf"))
