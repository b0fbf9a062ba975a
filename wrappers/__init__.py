"""Policy adapters and what serves them (imports as ``llmgym.wrappers``).

The adapters, each in its own module and imported from there, so a missing
optional extra only affects the adapter that needs it:
``llamacpp_policy``, ``transformers_policy``, ``openai_policy``,
``vllm_policy`` and ``scripted``; ``llamacpp_batch`` and ``torch_slot_policy``
(concurrent episodes decoded together by llama.cpp or torch, a KV cache slot
each, on ``slot_batching``'s scheduler); with ``prompting`` (chat templates and the
text tool protocol), ``thinking`` (``<think>`` budgets), ``batching`` and
``models`` (finding and loading model files; ``load_policy``).

Each other role has a subpackage named for it:

- ``server``: ``llmgym serve``, any policy behind vLLM's OpenAI-compatible API.
- ``decoding``: faster CPU decoding for the transformers policy (the
  static-cache Llama step, bf16 KV-cache slots).
- ``classic_rl``: Gymnasium wrappers that give a text env the spaces classic RL
  libraries take (Stable-Baselines3).
"""
