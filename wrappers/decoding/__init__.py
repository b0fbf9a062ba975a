"""Faster decoding for the transformers policy on a CPU (imports as ``llmgym.wrappers.decoding``).

- ``int8``: :class:`~llmgym.wrappers.decoding.int8.Int8Linears`, weight-only int8
  copies of a model's Linear layers for rollouts of the weights being trained.
- ``llama``: :class:`~llmgym.wrappers.decoding.llama.LlamaDecoder`, a decoding step
  for Llama models on a static key/value cache.

:class:`~llmgym.wrappers.transformers_policy.TransformersPolicy` uses them when asked
(``rollout_precision="int8"``, ``fast_decode``). Both need torch; import each module
itself.
"""
