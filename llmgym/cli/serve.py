"""``llmgym serve``: a local model (or a scripted policy) behind an OpenAI-compatible API, like ``vllm serve``."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import Any

from llmgym.cli import CLIError
from llmgym.cli._policies import add_engine_argument, resolve_engine

__all__ = ["add_parser", "check_port", "run", "served_name"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model behind an OpenAI-compatible API",
        description=__doc__ + " Endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health, "
        "/v1/load_lora_adapter and /v1/unload_lora_adapter (transformers backend).",
    )
    parser.add_argument(
        "--backend",
        default="llama.cpp",
        choices=["llama.cpp", "transformers", "vllm", "scripted"],
        help="llama.cpp: fast CPU generation of GGUF models (default); transformers: HF checkpoints, "
        "batched, LoRA adapters; vllm: in-process vLLM (GPU); "
        "scripted: a scripted actor (--model wordle or module:Class), no model",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model name or path (.gguf file, checkpoint directory, a model id in the local Hugging Face "
        "cache), or tiny-random (a tiny random Llama, for trying the server in seconds); default: the "
        "bundled SmolLM2-135M-Instruct",
    )
    parser.add_argument(
        "--model-name",
        default=None,
        help="the name clients pass as 'model' (default: what is served: smollm2-135m for the bundled "
        "model, tiny-random, the file or folder name of a path, a Hugging Face id as given, "
        "scripted-NAME for --backend scripted)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    add_engine_argument(parser, "the batches")
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=16,
        help="most requests generated together (default: %(default)s; llama.cpp: the KV cache slots, "
        "--max-model-len tokens each)",
    )
    parser.add_argument(
        "--max-choices-per-request",
        type=int,
        default=128,
        help="most generations one request may ask for: prompts x n of a /v1/completions request, n of a "
        "chat request; more is a 400 (default: %(default)s). A request's generations reach the model "
        "--max-batch-size at a time, so a big one does not stall other clients",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context window in tokens, as vLLM's flag (llama.cpp: n_ctx, default 4096; vllm: max_model_len); "
        "the transformers backend uses the model's own",
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)


def check_port(host: str, port: int) -> None:
    """Raise :class:`CLIError` when ``host:port`` cannot be bound (in use, or an unknown address)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            sock.bind(address)
    except OSError as err:
        raise CLIError(f"cannot serve on {host}:{port}: {err.strerror or err}") from None


def served_name(backend: str, model: str | None) -> str:
    """The default ``--model-name``: a name that says what is served, so that results are not credited to another model.

    Example:
        >>> served_name("llama.cpp", None), served_name("transformers", "tiny-random"), served_name("scripted", None)
        ('smollm2-135m', 'tiny-random', 'scripted-wordle')
        >>> served_name("scripted", "my_actor:Actor"), served_name("vllm", "Qwen/Qwen3-8B")
        ('scripted-my_actor.Actor', 'Qwen/Qwen3-8B')
    """
    from llmgym.wrappers.models import DEFAULT_MODEL, MODEL_ALIASES

    if backend == "scripted":
        return "scripted-" + (model or "wordle").replace(":", ".")
    if model is None or model.lower() in MODEL_ALIASES:
        return DEFAULT_MODEL
    path = Path(model)
    if path.exists():  # a .gguf file or a checkpoint folder: its name, as it reads in `llmgym eval` results
        return path.stem if path.is_file() else path.resolve().name
    return model  # tiny-random, a Hugging Face id (as `vllm serve` names it)


def run(args: argparse.Namespace) -> int:
    _check_flags(args)
    check_port(args.host, args.port)  # before loading a model, not after
    try:
        from llmgym.wrappers.server import create_app, serve
    except ImportError as err:
        raise CLIError(str(err)) from None
    policy = _load_served_policy(args)
    model_name = args.model_name or served_name(args.backend, args.model)
    try:
        app = create_app(
            policy,
            model_name=model_name,
            max_batch_size=args.max_batch_size,
            max_choices_per_request=args.max_choices_per_request,
        )
        print(f"llmgym serve: {model_name} ({args.backend}) on http://{args.host}:{args.port}/v1")
        serve(app, host=args.host, port=args.port, log_level=args.log_level)
    except ImportError as err:
        raise CLIError(str(err)) from None
    finally:
        policy.close()
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """Raise :class:`CLIError` for a port, batch or context size out of range, or a flag the backend ignores."""
    if not 0 < args.port < 65536:
        raise CLIError(f"--port must be between 1 and 65535, got {args.port}")
    if args.max_batch_size < 1:
        raise CLIError(f"--max-batch-size must be at least 1, got {args.max_batch_size}")
    if args.max_choices_per_request < 1:
        raise CLIError(f"--max-choices-per-request must be at least 1, got {args.max_choices_per_request}")
    if args.max_model_len is not None:
        if args.max_model_len < 1:
            raise CLIError(f"--max-model-len must be at least 1, got {args.max_model_len}")
        if args.backend not in ("llama.cpp", "vllm"):
            raise CLIError(
                f"--max-model-len applies to the llama.cpp and vllm backends; {args.backend} uses "
                + (
                    "the model's own context (config.max_position_embeddings)"
                    if args.backend == "transformers"
                    else "no model"
                )
            )


def _load_served_policy(args: argparse.Namespace) -> Any:
    """The policy ``--backend`` and ``--model`` name, sized by ``--max-model-len`` and ``--max-batch-size``.

    Raises:
        CLIError: the backend's library is missing, or the model cannot be found or loaded.
    """
    try:
        if args.backend == "scripted":
            from llmgym.wrappers.scripted import load_scripted

            return load_scripted(args.model or "wordle")
        from llmgym.wrappers.models import load_policy

        context: dict[str, Any] = {}
        if args.max_model_len is not None:  # vLLM's name; llama.cpp calls the context window n_ctx
            context["n_ctx" if args.backend == "llama.cpp" else "max_model_len"] = args.max_model_len
        if args.backend == "llama.cpp":  # concurrent requests decoded together, one KV slot each
            context["slots"] = args.max_batch_size
            context["engine"] = resolve_engine(args.engine)
        return load_policy(args.backend, args.model, **context)
    except (ImportError, FileNotFoundError, OSError, ValueError) as err:
        raise CLIError(f"cannot load the {args.backend} backend: {err}") from None
