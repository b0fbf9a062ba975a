"""``llmgym list``: every registered environment id with its one-line description."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="list registered environments", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from llmgym.registry import describe, list_envs

    rows = [(env_id, describe(env_id)) for env_id in list_envs()]
    if args.json:
        print(json.dumps([{"id": i, "description": d} for i, d in rows], indent=2))
        return 0
    table = Table("id", "description", title=f"{len(rows)} llmgym environments")
    for env_id, text in rows:
        table.add_row(escape(env_id), escape(text))  # "moves in [brackets]" is text, not rich markup
    Console().print(table)
    return 0
