"""Many sequences decoded together on a CPU, each keeping its own key/value cache between calls.

Holds :class:`SlotDecoder`. A Llama model's decoding step for one sequence reads
every weight to compute one token; a step for many sequences shares that read,
and a CPU with AVX512-BF16 multiplies a batch of rows in bf16 faster than in
fp32. So the decoder keeps the model in bf16 and gives each *slot* (a sequence:
an episode's conversation) its own rows of one key/value cache:

- :meth:`SlotDecoder.evaluate` evaluates, in one pass through the layers, one
  token of each slot being decoded and the new tokens of others (a prompt, or an
  episode's next turn after the history already held), each attending to what
  its slot holds; :meth:`SlotDecoder.step` and :meth:`SlotDecoder.extend` are
  its two halves alone;
- :meth:`SlotDecoder.truncate` and :meth:`SlotDecoder.copy` reuse a held prefix
  (an episode's history, a shared system prompt) instead of evaluating it again.

The cache is one tensor for the keys and one for the values, each ``[layers,
slots, kv_heads, capacity, head_dim]``. The scores are computed transposed, as
``keys @ q^T`` (each slot's keys read as they lie, the few queries as the narrow
side; the same bits as ``q @ keys^T`` over keys stored transposed, in less
time), then laid back out for a softmax over the last dimension. A step attends
over the first rows only, so the slots being stepped are first moved to the
front rows, in any order (a slot behind swaps rows with one that is not stepped,
which happens when the set of generating slots changes, at a turn's start or
end, not at every token). Grouped-query attention runs without repeating the
keys: a kv head's query heads are laid out as extra query columns of one batched
matrix product (``scaled_dot_product_attention`` was slower for these few
queries over long cached contexts).

The Linear weights are reordered once into oneDNN's blocked layout (:class:`_Weight`),
which the plain ``F.linear`` redoes at every call. Prompts share a pass with the
decoding rows: their tokens ride the same weight reads instead of a pass of their own.

The numbers are bf16's (the weights and activations; norms, softmax and logits
in fp32), so log-probs differ a little from the fp32 model's. A row's
logits barely depend on the rows beside it in a step: attention is computed per
row over whole blocks of columns, and the bf16 products give each row the same
numbers alone or in a batch but for a few rows of the MLP's down projection,
which oneDNN rounds differently (the tests bound the difference in log-probs at 0.05).

The measurements behind these choices are in docs/benchmarks.md.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

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


class _Attention(NamedTuple):
    """How one part of a pass attends: ``rows`` cache rows from ``first_row`` on, each with ``count`` new tokens
    after its ``starts``, reading ``width`` cache columns under ``mask``."""

    first_row: int
    rows: int
    starts: list[int]
    count: int
    width: int
    mask: torch.Tensor

    @property
    def tokens(self) -> int:
        return self.rows * self.count


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
        if any(linear.bias is not None for linear in model.modules() if isinstance(linear, nn.Linear)):
            raise ValueError("SlotDecoder runs Llama models without biases (attention_bias and mlp_bias off)")
        with torch.no_grad():
            self.qkv = [
                _Weight(
                    torch.cat(
                        [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight]
                    )
                )
                for layer in self.layers
            ]
            self.gate_up = [
                _Weight(torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])) for layer in self.layers
            ]
            self.out = [_Weight(layer.self_attn.o_proj.weight) for layer in self.layers]
            self.down = [_Weight(layer.mlp.down_proj.weight) for layer in self.layers]
            self.lm_head = _Weight(model.lm_head.weight)
        capacity = min(_FIRST_CAPACITY, self.max_length)
        shape = (len(self.layers), slots, self.kv_heads, capacity, self.head_dim)
        self.keys, self.values = torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)
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
        for cache in (self.keys, self.values):
            cache[:, b, :, :length] = cache[:, a, :, :length]
        self._lengths[target] = length

    # -- evaluating tokens -------------------------------------------------------------

    def extend(self, slot: int, tokens: list[int]) -> torch.Tensor:
        """Evaluate ``tokens`` after what ``slot`` holds; the fp32 logits ``[vocab]`` after the last one."""
        return self.evaluate([slot], [tokens])[0]

    def step(self, slots: list[int], tokens: list[int]) -> torch.Tensor:
        """Evaluate one token of each of ``slots`` (distinct) in one batch; the fp32 logits ``[len(slots), vocab]``."""
        if len(slots) != len(tokens):
            raise ValueError("step() takes one token for each slot")
        return self.evaluate(slots, [[token] for token in tokens])

    @torch.inference_mode()
    def evaluate(self, slots: list[int], chunks: list[list[int]]) -> torch.Tensor:
        """Evaluate each chunk of tokens after what its slot holds, all in one pass through the layers; the fp32
        logits ``[len(slots), vocab]`` after each chunk's last token.

        The layers' matrix products take every token at once (each weight is read once per pass). Attention
        takes the one-token chunks, the sequences being decoded, as one batch over the first cache rows, and
        each longer chunk (a prompt, an episode's next turn) alone over its own row.
        """
        if len(set(slots)) != len(slots) or len(slots) != len(chunks) or not all(chunks):
            raise ValueError("evaluate() takes distinct slots and a non-empty chunk of tokens for each")
        starts = [self._lengths[slot] for slot in slots]
        self._reserve(max(start + len(chunk) for start, chunk in zip(starts, chunks)))
        stepped = [i for i, chunk in enumerate(chunks) if len(chunk) == 1]
        self._to_front([slots[i] for i in stepped])
        stepped.sort(key=lambda i: self._row[slots[i]])  # as their cache rows lie: 0, 1, ...
        order = stepped + [i for i, chunk in enumerate(chunks) if len(chunk) > 1]  # the tokens' order in the pass
        # how each part of the pass attends: the decoding rows as one batch, then each prompt alone
        parts = [self._attention(0, [starts[i] for i in stepped], 1)] if stepped else []
        parts += [self._attention(self._row[slots[i]], [starts[i]], len(chunks[i])) for i in order[len(stepped) :]]
        positions = torch.tensor([starts[i] + offset for i in order for offset in range(len(chunks[i]))])
        hidden = self.model.model.embed_tokens(torch.tensor([token for i in order for token in chunks[i]]))
        cos, sin = (part[0] for part in self.model.model.rotary_emb(hidden, positions[None]))
        for index, layer in enumerate(self.layers):
            q, k, v = self._project(index, layer, hidden, cos, sin)  # [tokens, heads or kv_heads, head_dim]
            attended, first = [], 0
            for attention in parts:
                part = slice(first, first + attention.tokens)
                attended.append(self._attend_part(index, q[part], k[part], v[part], attention))
                first = part.stop
            hidden = self._finish_layer(layer, index, hidden, torch.cat(attended))
        for slot, chunk in zip(slots, chunks):
            self._lengths[slot] += len(chunk)
        ends = torch.tensor([len(chunks[i]) for i in order]).cumsum(0) - 1  # each chunk's last token
        return self._logits(hidden[ends[torch.tensor(order).argsort()]])  # in the callers' order

    # -- the layer's pieces --------------------------------------------------------------

    def _attention(self, first_row: int, starts: list[int], count: int) -> _Attention:
        """The plan for ``count`` new tokens after ``starts`` in each cache row from ``first_row`` on (one row
        for a prompt, or rows of one token each), with the causal mask: a kv head's query heads are its query
        rows, ``count`` for each."""
        width = self._width(max(starts) + count)
        positions = torch.tensor(starts)[:, None] + torch.arange(count)  # [rows, count]
        hidden_keys = torch.arange(width) > positions[..., None]  # [rows, count, width]
        if count > 1:  # one token's mask serves its query heads by broadcasting
            hidden_keys = hidden_keys.repeat(1, self.group, 1)
        mask = _additive(hidden_keys[:, None], self.dtype)  # [rows, 1, group * count or 1, width]
        return _Attention(first_row, len(starts), starts, count, width, mask)

    def _attend_part(
        self, index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention: _Attention
    ) -> torch.Tensor:
        """Store one part's new keys and values in layer ``index``'s cache and attend over what its rows hold:
        its attention output ``[tokens, heads * head_dim]``, from ``q``, ``k``, ``v`` ``[tokens, heads, dim]``."""
        rows, count, a = attention.rows, attention.count, attention.first_row
        cached = slice(a, a + rows)
        if count == 1:  # one token in each of several rows
            lengths, row_index = torch.tensor(attention.starts), torch.arange(a, a + rows)
            self.keys[index, row_index, :, lengths] = k
            self.values[index, row_index, :, lengths] = v
            grouped = q.reshape(rows, self.kv_heads, self.group, self.head_dim)
        else:  # a chunk of one row
            start = attention.starts[0]
            self.keys[index, a, :, start : start + count] = k.transpose(0, 1)
            self.values[index, a, :, start : start + count] = v.transpose(0, 1)
            grouped = q.transpose(0, 1).reshape(1, self.kv_heads, self.group * count, self.head_dim)
        out = self._attend(
            grouped,
            self.keys[index, cached, :, : attention.width],
            self.values[index, cached, :, : attention.width],
            attention.mask,
        )  # [rows, kv_heads, group * count, dim]: back to [tokens, heads * dim]
        return out.view(rows, self.heads, count, self.head_dim).transpose(1, 2).reshape(rows * count, -1)

    def _project(
        self, index: int, layer: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer's rotated queries and keys and its values, ``[tokens, heads, head_dim]`` each.

        The queries and keys are rotated together, as one tensor of ``heads + kv_heads`` heads: a step
        for a batch of short rows costs about as much per operation as per number, so fewer operations
        (7 instead of 14 per layer) are what make it shorter.
        """
        heads = self.heads
        qkv = self.qkv[index](layer.input_layernorm(hidden)).view(len(hidden), heads + 2 * self.kv_heads, -1)
        qk = qkv[:, : heads + self.kv_heads]
        half = self.head_dim // 2
        turned = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)  # transformers' rotate_half
        qk = qk * cos[:, None] + turned * sin[:, None]
        return qk[:, :heads], qk[:, heads:], qkv[:, heads + self.kv_heads :]

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``[rows, kv_heads, queries, dim]`` over ``keys`` and ``values`` ``[rows, kv_heads, n,
        dim]``, with ``mask`` (0 or -inf) added to the scores, softmax in fp32.

        The scores are bf16 as the product gives them; the scale (1/8 for 64-dim heads, a power of two) and
        the mask change none of their bits in bf16, so they are applied there, before one fp32 softmax.
        """
        scores = torch.matmul(keys, (q * self.scaling).transpose(-1, -2)).transpose(-1, -2).contiguous() + mask
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype), values)

    def _finish_layer(self, layer: Any, index: int, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The residual stream after the layer's output projection and MLP."""
        hidden = hidden + self.out[index](attended)
        gate, up = self.gate_up[index](layer.post_attention_layernorm(hidden)).chunk(2, dim=-1)
        return hidden + self.down[index](layer.mlp.act_fn(gate) * up)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model.model.norm(hidden)).float()

    # -- the cache's layout --------------------------------------------------------------

    def _reserve(self, length: int) -> None:
        """Make room for ``length`` tokens in every slot: the columns grow to the next whole block.

        Growing by blocks, not doubling, keeps the capacity at the longest sequence's blocks, so a step
        usually attends over every column: the slots' keys and values are then contiguous, and the batched
        products read them in place (over a slice of the columns they first copy them). The copy a growth
        costs comes once per ``_COLUMN_BLOCK`` tokens.
        """
        if length > self.max_length:
            raise ValueError(f"a slot would hold {length} tokens; the most is {self.max_length}")
        if length <= self.values.shape[3]:
            return
        capacity = min(-(-length // _COLUMN_BLOCK) * _COLUMN_BLOCK, self.max_length)
        grown = []
        for cache in (self.keys, self.values):
            grown.append(cache.new_zeros((*cache.shape[:3], capacity, self.head_dim)))
            grown[-1][:, :, :, : cache.shape[3]] = cache
        self.keys, self.values = grown

    def _width(self, length: int) -> int:
        """Cache columns attention reads to see ``length`` tokens: whole blocks of ``_COLUMN_BLOCK``."""
        return min(-(-length // _COLUMN_BLOCK) * _COLUMN_BLOCK, self.values.shape[3])

    def _to_front(self, slots: list[int]) -> None:
        """Put ``slots``' tokens in the first ``len(slots)`` cache rows, in any order: a slot already there stays,
        and each one behind swaps rows with a slot there that is not among them (a swap copies both rows)."""
        wanted = set(slots)
        free = [row for row in range(len(slots)) if self._slot_at[row] not in wanted]
        behind = [slot for slot in slots if self._row[slot] >= len(slots)]
        for row, slot in zip(free, behind):
            self._swap_rows(row, self._row[slot])

    def _swap_rows(self, a: int, b: int) -> None:
        slot_a, slot_b = self._slot_at[a], self._slot_at[b]
        used = max(self._lengths[slot_a], self._lengths[slot_b])
        for cache in (self.keys, self.values):
            held = cache[:, a, :, :used].clone()
            cache[:, a, :, :used] = cache[:, b, :, :used]
            cache[:, b, :, :used] = held
        self._slot_at[a], self._slot_at[b] = slot_b, slot_a
        self._row[slot_a], self._row[slot_b] = b, a


class _Weight:
    """A Linear layer's weight (no bias) as the CPU multiplies it fastest: ``weight(x) == F.linear(x, weight)``.

    A bf16 weight is reordered once into oneDNN's blocked layout, which ``F.linear`` otherwise does at every
    call: the same numbers, bit for bit, in less time for the few rows of a step. Other dtypes, a torch
    without oneDNN, or a CPU whose oneDNN has no bf16 path (:func:`_packs_bf16`) keep the plain weight.
    """

    def __init__(self, weight: torch.Tensor) -> None:
        self.packed = weight.dtype == torch.bfloat16 and _packs_bf16()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach()) if self.packed else weight.detach()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, None, "none", [], "")
        return F.linear(x, self.weight)


@functools.cache
def _packs_bf16() -> bool:
    """Whether this machine's oneDNN reorders bf16 weights: it needs AVX512 (BW, VL, DQ) or AVX-NE-CONVERT, and
    refuses elsewhere (an AVX2-only CPU), where ``F.linear`` multiplies the plain bf16 weight instead."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


def _additive(hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask to add to attention scores: ``-inf`` where ``hidden`` is true, 0 elsewhere."""
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill_(hidden, float("-inf"))
