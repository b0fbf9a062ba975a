"""Policies from local models: :func:`load_policy` builds the adapter for a backend name.

``llmgym eval`` and ``llmgym serve`` call it. The weights themselves (the
bundled SmolLM2 GGUF, converted checkpoints, the tiny random model) are found
and loaded by :mod:`llmgym.wrappers.weights`, whose names this module
re-exports, so ``from llmgym.wrappers.models import load_model`` keeps working.
The adapters import :mod:`~llmgym.wrappers.weights`, never this module: the
imports go one way.
"""

from __future__ import annotations

from typing import Any

from llmgym.policy import Policy
from llmgym.wrappers.weights import (
    DEFAULT_MODEL,
    MODEL_ALIASES,
    TINY_RANDOM,
    TINY_RANDOM_SEED,
    cache_dir,
    convert_gguf,
    default_gguf_path,
    load_model,
    load_tokenizer,
    resolve_gguf,
    tiny_random_gguf,
    tiny_random_model,
)

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_ALIASES",
    "BACKENDS",
    "TINY_RANDOM",
    "TINY_RANDOM_SEED",
    "default_gguf_path",
    "resolve_gguf",
    "cache_dir",
    "convert_gguf",
    "load_model",
    "load_tokenizer",
    "tiny_random_model",
    "tiny_random_gguf",
    "load_policy",
]

#: Backend names accepted by :func:`load_policy`.
BACKENDS = ("llama.cpp", "transformers", "vllm")


def load_policy(backend: str = "llama.cpp", model: Any = None, **kwargs: Any) -> Policy:
    """Build the local policy for a backend.

    Args:
        backend: ``"llama.cpp"`` (GGUF, fast on CPU; the default),
            ``"transformers"`` (HF checkpoints, CPU or CUDA, batched, trainable)
            or ``"vllm"`` (in-process vLLM, GPU).
        model: model name or path for the backend; ``None`` = SmolLM2-135M-Instruct;
            ``"tiny-random"`` = :func:`tiny_random_model` (transformers) or
            :func:`tiny_random_gguf` (llama.cpp) of :data:`TINY_RANDOM_SEED`, for trying things in seconds.
        **kwargs: passed to the policy class; for llama.cpp, ``slots=N`` decodes N requests together:
            :class:`~llmgym.wrappers.llamacpp_batch.LlamaCppBatchPolicy`, or with ``engine="torch"``
            :class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy` (torch decodes, in bf16).

    Raises:
        ValueError: an unknown backend name.
        ImportError: the backend's package is not installed.
    """
    key = backend.lower().replace("_", ".").replace("-", ".")
    tiny = isinstance(model, str) and model.lower() == TINY_RANDOM
    if key in ("llama.cpp", "llamacpp", "llama"):
        path = tiny_random_gguf() if tiny else model
        if "slots" in kwargs and kwargs.get("engine") == "torch":  # concurrent requests decoded by torch
            from llmgym.wrappers.torch_slot_policy import TorchSlotPolicy

            return TorchSlotPolicy(path, **{key: value for key, value in kwargs.items() if key != "engine"})
        if "slots" in kwargs:  # concurrent requests decoded together by llama.cpp
            from llmgym.wrappers.llamacpp_batch import LlamaCppBatchPolicy

            return LlamaCppBatchPolicy(path, **kwargs)
        from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy

        return LlamaCppPolicy(path, **kwargs)
    if key in ("transformers", "hf"):
        from llmgym.wrappers.transformers_policy import TransformersPolicy

        if tiny:
            return TransformersPolicy(*tiny_random_model(device=kwargs.get("device") or "cpu"), **kwargs)
        return TransformersPolicy(model, **kwargs)
    if key == "vllm":
        from llmgym.wrappers.vllm_policy import VLLMPolicy

        return VLLMPolicy(model, **kwargs)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
