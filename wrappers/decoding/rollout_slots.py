"""bf16 rollout copies of a model being trained, decoded with a KV cache slot per episode.

Holds :class:`SlotRollouts`, what ``TransformersPolicy(rollout_precision="bf16")``
(the GRPO trainer's ``rollout_precision = "bf16"``) decodes with. It keeps a
plain ``LlamaForCausalLM`` in bf16 whose weights are the trained model's with
any LoRA adapter merged in, refreshed after every optimizer step, and decodes
it on a :class:`~llmgym.wrappers.decoding.slots.SlotDecoder`:

- each episode's turn goes to the slot that holds its history
  (``PolicyRequest.episode_id``), else to the free slot holding most of its
  prompt, so a turn evaluates only the tokens after what the slot holds (the
  env's reply), not the whole conversation again;
- a GRPO group's identical prompts are evaluated once and the cache copied;
- the prompts of one batch are evaluated in one pass, then its rows decode one
  token each per step.

When the weights change every slot is emptied: what they hold was computed by
the old weights. The log-probs a policy reports are the bf16 copy's (the model
that sampled); the trainer's importance weight corrects the mismatch.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from llmgym.wrappers.decoding.prefix import common_prefix
from llmgym.wrappers.decoding.slots import SlotDecoder

__all__ = ["SlotRollouts", "merged_weights"]


def merged_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters and buffers of ``model`` under a plain model's names, a LoRA adapter merged into its layers.

    ``model`` is a transformers model or a peft model around one: a LoRA layer's
    weight is its base weight plus each active adapter's ``B @ A x scaling``
    (peft's ``get_delta_weight``), computed here without touching the model.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    weights: dict[str, torch.Tensor] = {}
    for name, tensor in [*base.named_parameters(), *base.named_buffers()]:
        if ".lora_" not in name:
            weights[name.replace(".base_layer.", ".")] = tensor.detach()
    for name, module in base.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            merged = module.base_layer.weight.detach()
            if not getattr(module, "merged", False):
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        merged = merged + module.get_delta_weight(adapter).detach()
            weights[f"{name}.weight"] = merged
    return weights


class SlotRollouts:
    """A bf16 copy of a Llama model (LoRA merged) decoded with a KV cache slot per episode (CPU only).

    Args:
        model: the trained model: a plain ``LlamaForCausalLM`` on the CPU, or a peft model around one.
        slots: episodes whose caches are held at once (at least the batch decoded at once).

    Raises:
        ValueError: the model is not a plain Llama on the CPU (SlotDecoder's terms).

    Example:
        >>> from llmgym.wrappers.weights import tiny_random_model
        >>> model, _ = tiny_random_model()
        >>> rollouts = SlotRollouts(model, slots=2)
        >>> tuple(rollouts.start([[1, 2, 3]], [None]).shape)[0], tuple(rollouts.step([0], [4]).shape)[0]
        (1, 1)
    """

    def __init__(self, model: nn.Module, slots: int) -> None:
        from transformers import LlamaForCausalLM

        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if type(base) is not LlamaForCausalLM:
            raise ValueError(f"bf16 slot rollouts decode a plain LlamaForCausalLM, not {type(base).__name__}")
        if {p.device.type for p in base.parameters()} != {"cpu"}:
            raise ValueError("bf16 slot rollouts run on the CPU (use rollout_precision='fp32' on a GPU)")
        self.model, self.slots = model, slots
        with torch.device("meta"):
            copy = LlamaForCausalLM(base.config)
        self.copy = copy.to(torch.bfloat16).to_empty(device="cpu").eval()
        self.copy.tie_weights()  # a tied head is the embedding again (to_empty gave each its own tensor)
        self.decoder: SlotDecoder | None = None
        self._held: list[list[int]] = []
        self._owner: list[str | None] = []
        self._last_used: list[float] = []
        self._seated: list[int] = []  # the slot of each row of the batch being decoded
        self.processed: list[int] = []  # the prompt tokens the last start() evaluated for each row

    def weights_changed(self) -> None:
        """The model's weights change: the copy is refreshed before the next batch and every slot emptied."""
        self.decoder = None

    @torch.inference_mode()
    def _refresh(self) -> SlotDecoder:
        weights = merged_weights(self.model)
        for name, tensor in [*self.copy.named_parameters(), *self.copy.named_buffers()]:
            if name not in weights:
                raise ValueError(f"the trained model has no {name!r} to copy into the bf16 rollout model")
            tensor.copy_(weights[name])
        self.decoder = SlotDecoder(self.copy, self.slots, max_length=self.copy.config.max_position_embeddings)
        self._held = [[] for _ in range(self.slots)]
        self._owner = [None] * self.slots
        self._last_used = [0.0] * self.slots
        return self.decoder

    def start(self, prompts: list[list[int]], episodes: list[str | None]) -> torch.Tensor:
        """Seat a batch's prompts (at most ``slots``; ``episodes[i]`` the episode of prompt ``i`` or ``None``) and
        evaluate what their slots do not hold yet, in one pass; the fp32 logits after each prompt ``[rows, vocab]``.

        A prompt identical to an earlier one of the batch (a GRPO group) gets that one's cache copied.
        """
        if len(prompts) > self.slots:
            raise ValueError(f"a batch of {len(prompts)} prompts needs as many slots; there are {self.slots}")
        decoder = self.decoder or self._refresh()
        self._seated = []
        first_of: dict[tuple[int, ...], int] = {}  # a prompt's first row in the batch
        for row, (ids, episode) in enumerate(zip(prompts, episodes)):
            slot = self._free_slot(ids, episode)
            self._seated.append(slot)
            self._owner[slot] = episode
            if tuple(ids) in first_of:
                continue
            first_of[tuple(ids)] = row
            held = min(common_prefix(self._held[slot], ids), len(ids) - 1)  # the last token again: its logits
            decoder.truncate(slot, held)
            self._held[slot] = list(ids)
        evaluated = sorted(first_of.values())
        chunks = [prompts[row][decoder.length(self._seated[row]) :] for row in evaluated]
        logits = decoder.evaluate([self._seated[row] for row in evaluated], chunks)
        self.processed = [0] * len(prompts)  # prompt tokens evaluated for each row
        for row, chunk in zip(evaluated, chunks):
            self.processed[row] = len(chunk)
        first_logits = dict(zip(evaluated, logits))
        for row, ids in enumerate(prompts):  # the group's other prompts: the first one's cache
            source, target = self._seated[first_of[tuple(ids)]], self._seated[row]
            if target != source:
                decoder.copy(source, target, len(ids))
                self._held[target] = list(ids)
        return torch.stack([first_logits[first_of[tuple(ids)]] for ids in prompts])

    def step(self, rows: list[int], tokens: list[int]) -> torch.Tensor:
        """Evaluate the next token of each of ``rows`` (indices into the batch :meth:`start` seated); their logits."""
        assert self.decoder is not None, "start() seats a batch first"
        slots = [self._seated[row] for row in rows]
        for slot, token in zip(slots, tokens):
            self._held[slot].append(token)
        return self.decoder.step(slots, tokens)

    def _free_slot(self, ids: list[int], episode: str | None) -> int:
        """The slot for a prompt: its episode's own, else the free one holding most of it (least recently used
        among equals)."""
        taken = set(self._seated)
        free = [slot for slot in range(self.slots) if slot not in taken]
        own = [slot for slot in free if episode is not None and self._owner[slot] == episode]
        slot = own[0] if own else max(free, key=lambda s: (common_prefix(self._held[s], ids), -self._last_used[s]))
        self._last_used[slot] = time.monotonic()
        return slot
