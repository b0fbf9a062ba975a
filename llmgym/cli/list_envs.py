"""``llmgym list``: every registered environment id with its one-line description.

Multi-agent games (``llmgym/ma-*``, played with ``llmgym eval ID --opponent SPEC``)
are listed too, their descriptions starting with "multi-agent:".
"""

from __future__ import annotations

import argparse
import importlib
import json

from llmgym.cli import EXTRA_FOR_MODULE


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="list registered environments", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from llmgym.cli import multiagent_ids
    from llmgym.registry import describe, list_envs

    rows = [(env_id, describe(env_id), False) for env_id in list_envs()]
    rows = sorted(rows + [(env_id, _describe_multiagent(env_id), True) for env_id in multiagent_ids()])
    if args.json:
        print(json.dumps([{"id": i, "description": d, "multiagent": m} for i, d, m in rows], indent=2))
        return 0
    table = Table("id", "description", title=f"{len(rows)} llmgym environments")
    for env_id, text, multiagent in rows:
        text = f"multi-agent: {text}" if multiagent else text
        table.add_row(escape(env_id), escape(text))  # "moves in [brackets]" is text, not rich markup
    Console().print(table)
    return 0


def _describe_multiagent(env_id: str) -> str:
    """The factory's ``description`` where it has one (one module may hold many games), else the first line
    of the docstring of the module that holds the game."""
    from llmgym.envs.multiagent import MULTIAGENT_ENVS

    module_name, _, factory = MULTIAGENT_ENVS[env_id].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:  # the extra is not installed: say which one
        missing = (err.name or "").partition(".")[0]
        extra = f' (pip install "llmgym[{EXTRA_FOR_MODULE[missing]}]")' if missing in EXTRA_FOR_MODULE else ""
        return f"(needs {missing or 'a module that is not installed'}{extra})"
    except Exception as err:  # one game that cannot load must not hide the list
        return f"(cannot load: {type(err).__name__})"
    described = getattr(getattr(module, factory, None), "description", None)
    if isinstance(described, str):
        return described
    text = (module.__doc__ or "").strip()
    return text.splitlines()[0] if text else ""
