"""A peft LoRA adapter as a llama.cpp GGUF adapter, written with the ``gguf`` package.

Holds :func:`write_lora_gguf` and :func:`lora_gguf_for`. llama.cpp applies a GGUF
LoRA adapter to a base model at load time (``Llama(model_path=..., lora_path=...)``),
so a fine-tuned SmolLM2 runs on the fastest CPU backend without merging into (and
re-quantizing) the Q4_1 base weights.

What llama.cpp expects, as its own ``convert_lora_to_gguf.py`` writes it:

- metadata ``general.type = "adapter"``, ``adapter.type = "lora"``,
  ``adapter.lora.alpha`` (llama.cpp scales by ``alpha / rank``), and the base's
  ``general.architecture``;
- for each adapted weight ``blk.N.attn_q.weight`` two tensors
  ``blk.N.attn_q.weight.lora_a`` (``rank x in``) and ``.lora_b`` (``out x rank``);
- the rows of the query and key projections in llama.cpp's rotary layout: the
  Hugging Face to GGUF conversion permutes ``q_proj``/``k_proj`` rows per head, so
  ``lora_b`` of those two gets the same permutation (``lora_a`` acts on inputs and
  keeps its layout).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_lora_gguf", "lora_gguf_for", "with_adapter", "GGUF_NAMES"]

#: Hugging Face Llama module suffix -> llama.cpp tensor name in block N
GGUF_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """The rows of a q/k projection (or its LoRA ``B``) reordered as llama.cpp stores them (per head, the
    two rotary halves interleaved), as ``convert_hf_to_gguf.py`` permutes the base weights."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _tensor_name(key: str) -> tuple[str, str]:
    """``base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`` -> (``blk.3.attn_q.weight``, ``lora_a``)."""
    module, _, kind = key.rpartition(".lora_")
    kind = kind.split(".")[0]
    if kind not in ("A", "B") or ".layers." not in module:
        raise ValueError(f"not a LoRA weight of a decoder layer: {key}")
    layer, _, suffix = module.partition(".layers.")[2].partition(".")
    if suffix not in GGUF_NAMES:
        raise ValueError(f"llama.cpp has no tensor for {suffix!r} ({key}); adapt only {', '.join(GGUF_NAMES)}")
    return f"blk.{int(layer)}.{GGUF_NAMES[suffix]}.weight", f"lora_{kind.lower()}"


def write_lora_gguf(adapter: str | os.PathLike[str], path: str | os.PathLike[str], *, base_gguf: Any = None) -> Path:
    """Write the peft LoRA adapter folder ``adapter`` as a llama.cpp GGUF adapter at ``path`` (f16 tensors).

    Args:
        adapter: a folder with ``adapter_config.json`` and ``adapter_model.safetensors`` (a Llama-family base).
        path: the ``.gguf`` file to write (atomically).
        base_gguf: the base model's GGUF (file or alias; default the bundled SmolLM2): its architecture and
            head counts, which the rotary permutation needs.

    Raises:
        ValueError: the adapter is not a plain LoRA on a Llama's decoder-layer projections (DoRA, rank patterns,
            biases or other modules have no llama.cpp form here).
    """
    import gguf
    from safetensors.numpy import load_file

    from llmgym.wrappers.weights import resolve_gguf

    adapter, path = Path(adapter), Path(path)
    config = json.loads((adapter / "adapter_config.json").read_text())
    if config.get("use_dora") or config.get("rank_pattern") or config.get("alpha_pattern"):
        raise ValueError(f"{adapter}: DoRA and per-module ranks have no llama.cpp form here; train a plain LoRA")
    if config.get("bias", "none") != "none":
        raise ValueError(f"{adapter}: adapter biases have no llama.cpp form here (bias={config['bias']!r})")
    reader = gguf.GGUFReader(str(resolve_gguf(base_gguf)))
    architecture = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    heads = int(reader.fields[f"{architecture}.attention.head_count"].parts[-1][0])
    kv_heads = int(reader.fields[f"{architecture}.attention.head_count_kv"].parts[-1][0])

    tensors: dict[str, np.ndarray] = {}
    for key, value in sorted(load_file(str(adapter / "adapter_model.safetensors")).items()):
        name, kind = _tensor_name(key)
        value = value.astype(np.float32)
        if kind == "lora_b" and name.endswith(("attn_q.weight", "attn_k.weight")):
            value = _rotary_rows(value, heads if "attn_q" in name else kv_heads)
        tensors[f"{name}.{kind}"] = value.astype(np.float16)

    writer_path = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(writer_path), architecture)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(config["lora_alpha"]))
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(writer_path, path)
    return path


def lora_gguf_for(adapter: str | os.PathLike[str]) -> Path:
    """The GGUF form of an adapter folder: ``adapter.gguf`` inside it, written once (again when the adapter's
    weights are newer); in llmgym's cache when the folder is read-only. A shipped agent (``wrappers/agents/``)
    carries its own, used as it is: a ``local`` install (no ``gguf``/``safetensors``) runs it."""
    from llmgym.wrappers.weights import agents_dir, cache_dir

    adapter = Path(adapter)
    if adapter.resolve().parent == agents_dir().resolve() and (adapter / "adapter.gguf").is_file():
        return adapter / "adapter.gguf"
    weights = adapter / "adapter_model.safetensors"
    cached = cache_dir() / "adapters" / f"{hashlib.sha256(str(adapter.resolve()).encode()).hexdigest()[:16]}.gguf"
    for candidate in (adapter / "adapter.gguf", cached):
        if candidate.is_file() and candidate.stat().st_mtime >= weights.stat().st_mtime:
            return candidate
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            return write_lora_gguf(adapter, candidate)
        except PermissionError:
            continue
    raise PermissionError(f"cannot write the GGUF form of {adapter} inside it or in {cache_dir()}")


def with_adapter(model_path: Any, lora_path: Any = None) -> tuple[Any, Any, str | None]:
    """What llama.cpp loads for ``model_path``: ``(base, GGUF adapter, name)`` for a LoRA adapter folder or a
    shipped agent's name, else ``(model_path, lora_path, None)`` unchanged.

    Raises:
        ValueError: ``model_path`` is an adapter and ``lora_path`` names another one.
    """
    from llmgym.wrappers.weights import adapter_base, adapter_folder

    adapter = adapter_folder(model_path)
    if adapter is None:
        return model_path, lora_path, None
    if lora_path is not None:
        raise ValueError(f"{model_path} is an adapter already; pass lora_path= with a base model only")
    return adapter_base(adapter), lora_gguf_for(adapter), adapter.name
