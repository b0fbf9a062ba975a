"""Concurrent requests decoded together by llama.cpp, one KV sequence per episode.

Holds :class:`LlamaCppBatchPolicy`, the batched local policy where torch does
not decode (``llmgym eval`` and ``llmgym serve`` with ``--engine llama.cpp``),
with its engine :class:`LlamaCppSlots`, and :func:`converted_gguf`, which writes
a GGUF's weights in another type. The scheduler, slot reuse and sampling are
:class:`~llmgym.wrappers.slot_batching.SlotBatchPolicy`'s.

The engine is a llama.cpp context with ``slots`` sequences (``n_seq_max``, each
its own stream of ``n_ctx`` cells), one ``llama_decode`` per step for the
generating sequences and one per prompt, alone: llama.cpp computes a sequence's
prompt in a mixed batch differently from the same prompt alone, so evaluating
prompts alone keeps a sequence's log-probs the same whatever shares its batch.
``weights=`` converts the file once to another weight type
(:func:`converted_gguf`); the float types are not batch-invariant there.

``LlamaCppBatchPolicy(engine="torch")`` is deprecated: it builds a
:class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy`, the policy whose
slots torch decodes in bf16.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from llmgym.wrappers.llamacpp_policy import LlamaCppPolicy, import_llama_cpp
from llmgym.wrappers.slot_batching import ENGINES, SlotBatchPolicy, default_engine

__all__ = ["LlamaCppBatchPolicy", "LlamaCppSlots", "converted_gguf", "default_engine", "WEIGHT_TYPES", "ENGINES"]

#: ``weights=`` names and the llama.cpp file types they convert to (``"gguf"``: no conversion).
WEIGHT_TYPES = {
    "gguf": None,
    "f32": "LLAMA_FTYPE_ALL_F32",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
}


def converted_gguf(path: str | os.PathLike[str], weights: str) -> Path:
    """``path``'s model with its weights in type ``weights`` (a key of :data:`WEIGHT_TYPES`), converted once.

    The copy lives in ``$LLMGYM_CACHE/gguf`` under a name that holds the source's
    path, size and modification time, so a changed source is converted again; it is
    written beside its final name and renamed into place (concurrent processes never
    read half a file). ``"gguf"`` returns ``path`` itself.

    Raises:
        ValueError: an unknown type.
        RuntimeError: llama.cpp could not convert the file.
    """
    from llmgym.wrappers.weights import cache_dir

    if weights not in WEIGHT_TYPES:
        raise ValueError(f"weights must be one of {sorted(WEIGHT_TYPES)}, got {weights!r}")
    source = Path(path)
    if WEIGHT_TYPES[weights] is None:
        return source
    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "gguf" / f"{source.stem}-{key}.{weights}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    lib = import_llama_cpp()
    from llama_cpp._utils import suppress_stdout_stderr

    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, WEIGHT_TYPES[weights])
    params.allow_requantize = True  # Q4_1 -> bf16: dequantized, then stored in the new type
    params.nthread = 1
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(fd)
    try:
        with suppress_stdout_stderr(disable=False):  # llama.cpp prints a line per tensor
            failed = lib.llama_model_quantize(str(source).encode(), tmp.encode(), params) != 0
        if failed:
            raise RuntimeError(f"llama.cpp could not convert {source} to {weights}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


class LlamaCppBatchPolicy(SlotBatchPolicy):
    """:class:`~llmgym.wrappers.llamacpp_policy.LlamaCppPolicy` with concurrent requests decoded together by
    llama.cpp, a KV sequence each (the scheduler: :class:`~llmgym.wrappers.slot_batching.SlotBatchPolicy`).

    Args:
        model_path: a ``.gguf`` file or model alias (``None`` = SmolLM2-135M-Instruct), or a peft
            adapter folder or shipped agent (its base with the adapter, as :class:`LlamaCppPolicy`).
        slots: sequences decoded at once, each with its own KV cache of ``n_ctx``
            tokens (the episodes a rollout runs concurrently; more requests wait).
        weights: the weight type llama.cpp computes with (:data:`WEIGHT_TYPES`).
        engine: ``"llama.cpp"``. Deprecated: ``"torch"`` returns a
            :class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy` (use that class).
        n_batch: most prompt tokens evaluated per call.
        n_ctx: tokens each slot holds (prompt + generation).
        n_threads: CPU threads (default: half the cores; llama.cpp's spinning workers want a spare one).
        **kwargs: as :class:`LlamaCppPolicy`.

    Example:
        >>> policy = LlamaCppBatchPolicy(slots=16)  # doctest: +SKIP
        >>> outs = policy.generate([PolicyRequest([{"role": "user", "content": "hi"}])] * 16)  # doctest: +SKIP
    """

    def __new__(
        cls, model_path: str | os.PathLike[str] | None = None, *, engine: str = "llama.cpp", **kwargs: Any
    ) -> Any:
        if engine != "torch":
            return super().__new__(cls)
        warnings.warn(
            "LlamaCppBatchPolicy(engine='torch') is deprecated and will be removed in the next release: use "
            "llmgym.wrappers.torch_slot_policy.TorchSlotPolicy (the same arguments, without engine= and weights=)",
            DeprecationWarning,
            stacklevel=2,
        )
        if kwargs.pop("weights", "gguf") != "gguf":
            raise ValueError(
                "engine='torch' computes in bf16 from the model's own weights: it takes no weights= type and no "
                "GGUF lora_path (give an adapter folder as the model instead)"
            )
        from llmgym.wrappers.torch_slot_policy import TorchSlotPolicy

        return TorchSlotPolicy(model_path, **kwargs)  # not an instance of cls: __init__ is not called again

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        slots: int = 16,
        weights: str = "gguf",
        engine: str = "llama.cpp",
        n_batch: int = 512,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        from llmgym.wrappers.lora_gguf import with_adapter
        from llmgym.wrappers.weights import DEFAULT_MODEL, MODEL_ALIASES, resolve_gguf

        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        model_path, kwargs["lora_path"], adapter_name = with_adapter(model_path, kwargs.get("lora_path"))
        source = resolve_gguf(model_path)
        if source is None:
            raise ValueError(
                f"LlamaCppBatchPolicy needs a .gguf file or one of {sorted(MODEL_ALIASES)}, got {model_path!r}"
            )
        # the name is the source's, not the converted copy's
        default_name = DEFAULT_MODEL if source.name == MODEL_ALIASES[DEFAULT_MODEL] else source.stem
        kwargs["name"] = kwargs.get("name") or adapter_name or default_name
        self.source_path, self.weights = source, weights
        self.verbose = bool(kwargs.get("verbose"))
        super().__init__(
            converted_gguf(source, weights),
            slots=slots,
            n_batch=n_batch,
            n_ctx=n_ctx,
            n_threads=n_threads or max(1, (os.cpu_count() or 2) // 2),
            **kwargs,
        )

    def make_engine(self) -> LlamaCppSlots:
        """A llama.cpp context of ``slots`` sequences beside the single-stream one, on the same model."""
        return LlamaCppSlots(self, self.slots, self.n_ctx, self.n_batch, self.n_threads, self.verbose)


class LlamaCppSlots:
    """llama.cpp's engine: a context of ``slots`` KV sequences, each its own stream of ``n_ctx`` cells (so a token
    attends only to its own sequence), one ``llama_decode`` per call. A prompt gets a call of its own: llama.cpp
    computes a sequence's prompt in a mixed batch differently from the same prompt alone.

    Args:
        policy: the policy whose llama.cpp model (and LoRA adapter, loaded again for this context) it runs.
        slots: sequences held at once.
        n_ctx: tokens each sequence holds.
        n_batch: most tokens evaluated per call.
        n_threads: CPU threads.
        verbose: let llama.cpp print its logs.
    """

    prompts_in_step = False

    def __init__(self, policy: LlamaCppPolicy, slots: int, n_ctx: int, n_batch: int, n_threads: int, verbose: bool):
        from llama_cpp._utils import suppress_stdout_stderr

        lib = self.lib = import_llama_cpp()
        self.n_vocab = policy.n_vocab
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx * slots
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = slots
        params.kv_unified = False  # a stream per sequence: attention reads only its own cells
        # flash attention's half-precision sums depend on how a prompt was split into llama_decode calls;
        # without it, a prompt's numbers do not depend on where it was cut
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.n_threads = params.n_threads_batch = n_threads
        with suppress_stdout_stderr(disable=verbose):
            self.ctx = lib.llama_init_from_model(policy.llm.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {slots} x {n_ctx} tokens")
        self.adapter = None
        if policy.lora_path is not None:  # the adapter the single-stream context has, on the batch context too
            self.adapter = lib.llama_adapter_lora_init(policy.llm.model, str(policy.lora_path).encode())
            adapters = (lib.llama_adapter_lora_p_ctypes * 1)(self.adapter)
            if not self.adapter or lib.llama_set_adapters_lora(self.ctx, adapters, 1, (ctypes.c_float * 1)(1.0)):
                self.close()
                raise RuntimeError(f"llama.cpp could not apply the LoRA adapter {policy.lora_path}")
        self.memory = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(n_batch, 0, 1)

    def keep(self, slot: int, length: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, slot, length, -1)

    def copy(self, source: int, target: int, length: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, target, 0, -1)
        self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)  # another stream: the whole buffer
        self.lib.llama_memory_seq_rm(self.memory, target, length, -1)

    def evaluate(
        self, slots: list[int], chunks: list[list[int]], starts: list[int], wanted: list[bool]
    ) -> list[np.ndarray]:
        batch = self.batch
        batch.n_tokens = 0
        rows = []
        for slot, chunk, start, want in zip(slots, chunks, starts, wanted):
            for offset, token in enumerate(chunk):
                i = batch.n_tokens
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + offset, 1
                batch.seq_id[i][0] = slot
                batch.logits[i] = False
                batch.n_tokens += 1
            if want:
                batch.logits[batch.n_tokens - 1] = True
                rows.append(batch.n_tokens - 1)
        if self.lib.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError(f"llama_decode failed on a batch of {batch.n_tokens} tokens")
        return [
            np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,)) for row in rows
        ]

    def close(self) -> None:
        if getattr(self, "batch", None) is not None:
            self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)
        if self.adapter:  # after the context that used it
            self.lib.llama_adapter_lora_free(self.adapter)
