"""Concurrent requests decoded together by torch in bf16, one KV cache slot per episode.

Holds :class:`TorchSlotPolicy`, the batched local policy that ``llmgym eval`` and
``llmgym serve`` run with ``--engine torch``, and its engine :class:`TorchSlots`.
The model is loaded in bf16 (from the GGUF, an adapter folder merged in) and
decoded on a :class:`~llmgym.wrappers.decoding.slots.SlotDecoder`: each call is
one pass through the layers in which every generating sequence's next token and
every prompt's new tokens share the matrix products. The llama.cpp model still
tokenizes and renders the chat template, and scores prompts
(:meth:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy.score`); the scheduler,
slot reuse and sampling are :class:`~llmgym.wrappers.slot_batching.SlotBatchPolicy`'s.

A sequence's log-probs barely depend on what shares its step: attention is
computed per row, and the bf16 products give a row the same numbers alone or in
a batch but for a few rows of the MLP's down projection, which oneDNN rounds
differently (the tests bound the difference at 0.05). Against the GGUF's own
llama.cpp numbers, bf16 moves log-probs by a few tenths at most.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from llmgym.wrappers.slot_batching import SlotBatchPolicy

__all__ = ["TorchSlotPolicy", "TorchSlots"]


class TorchSlotPolicy(SlotBatchPolicy):
    """A local model decoded by torch in bf16 with a KV cache slot per concurrent request (CPU).

    Args:
        model_path: a ``.gguf`` file or model alias (``None`` = SmolLM2-135M-Instruct), or a peft
            adapter folder or shipped agent (``smollm2-wordle``): its base in bf16 with the adapter merged.
        slots: sequences decoded at once, each with its own KV cache of up to ``n_ctx``
            tokens (the episodes a rollout runs concurrently; more requests wait).
        n_batch: most tokens evaluated per pass (a turn's prompt rides the decoding rows' pass).
        n_ctx: tokens each slot holds (prompt + generation).
        n_threads: torch's CPU threads (default: torch's own, the physical cores or
            ``$OMP_NUM_THREADS``; on a machine busy with other work set 1).
        **kwargs: as :class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy`, but for ``lora_path``
            (the model is computed from its own weights: give the adapter folder as the model).

    Needs the ``transformers`` extra (torch, transformers, gguf). ``generate`` decodes its
    requests together; ``agenerate`` calls join the running batch at its next step.

    Example:
        >>> policy = TorchSlotPolicy(slots=16)  # doctest: +SKIP
        >>> outs = policy.generate([PolicyRequest([{"role": "user", "content": "hi"}])] * 16)  # doctest: +SKIP
    """

    engine = "torch"

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        slots: int = 16,
        n_batch: int = 512,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("lora_path") is not None:
            raise ValueError(
                "TorchSlotPolicy computes in bf16 from the model's own weights: it takes no GGUF lora_path "
                "(give an adapter folder as the model instead)"
            )
        if not n_threads:  # torch's own default: the physical cores, or $OMP_NUM_THREADS
            import torch

            n_threads = torch.get_num_threads()
        self.model_spec = model_path  # what the bf16 model is loaded from (an adapter folder: merged)
        super().__init__(model_path, slots=slots, n_batch=n_batch, n_ctx=n_ctx, n_threads=n_threads, **kwargs)

    def make_engine(self) -> TorchSlots:
        """The model in bf16 on ``slots`` KV cache slots, using ``n_threads`` threads of this thread's pool."""
        return TorchSlots(self.model_spec, self.slots, self.n_ctx, self.n_threads)


class TorchSlots:
    """The torch engine: the model in bf16 on a :class:`~llmgym.wrappers.decoding.slots.SlotDecoder`. A call is
    one pass through the layers: every chunk's tokens share the matrix products; attention takes the one-token
    chunks as one batch and each prompt alone.

    Args:
        spec: the model, as :func:`~llmgym.wrappers.weights.load_model` takes it.
        slots: sequences held at once.
        n_ctx: most tokens a slot holds.
        n_threads: torch threads of the calling thread's pool (build and use the engine on one thread).
    """

    prompts_in_step = True

    def __init__(self, spec: Any, slots: int, n_ctx: int, n_threads: int) -> None:
        import torch

        from llmgym.wrappers.decoding.slots import SlotDecoder
        from llmgym.wrappers.weights import load_model

        torch.set_num_threads(n_threads)  # for this thread's pool: built and used on the scheduler's thread
        model, _ = load_model(spec)
        self.decoder = SlotDecoder(model.to(torch.bfloat16).eval(), slots, max_length=n_ctx)

    def keep(self, slot: int, length: int) -> None:
        self.decoder.truncate(slot, length)

    def copy(self, source: int, target: int, length: int) -> None:
        self.decoder.copy(source, target, length)

    def evaluate(
        self, slots: list[int], chunks: list[list[int]], starts: list[int], wanted: list[bool]
    ) -> list[np.ndarray]:
        # the decoder's own lengths are the starts: the scheduler keeps a slot's tokens and the cache in step
        logits = self.decoder.evaluate(slots, chunks).numpy()
        return [row for row, want in zip(logits, wanted) if want]

    def close(self) -> None:
        self.decoder = None
