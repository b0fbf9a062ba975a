"""Faster decoding on a CPU (imports as ``llmgym.wrappers.decoding``).

- ``llama``: :class:`~llmgym.wrappers.decoding.llama.LlamaDecoder`, a decoding step
  for Llama models on a static key/value cache.
- ``slots``: :class:`~llmgym.wrappers.decoding.slots.SlotDecoder`, many sequences
  of a Llama model decoded together in bf16, each keeping its own key/value cache
  slot between calls.
- ``rollout_slots``: :class:`~llmgym.wrappers.decoding.rollout_slots.SlotRollouts`,
  bf16 copies of a trained model (LoRA merged) decoded on those slots, one per episode.
- ``prefix``: :func:`~llmgym.wrappers.decoding.prefix.common_prefix`, what of a new
  prompt a slot's cache can keep (no torch).

:class:`~llmgym.wrappers.transformers_policy.TransformersPolicy` uses ``llama``
(``fast_decode``) and ``rollout_slots`` (``rollout_precision="bf16"``);
:class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy` decodes on ``slots``;
the slot policies' scheduler, :class:`~llmgym.wrappers.slot_batching.SlotBatchPolicy`,
uses ``prefix``. All but ``prefix`` need torch; import each module itself.
"""
