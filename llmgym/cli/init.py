"""``llmgym init NAME``: scaffold an installable environment package in ./NAME.

The package holds an ``LLMEnv`` subclass with a tool and a rubric, an
``llmgym.envs`` entry point, tests that run the llmgym checker, and a README.
"""

from __future__ import annotations

import argparse

from llmgym.cli import CLIError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("init", help="scaffold a new environment package", description=__doc__)
    parser.add_argument("name", help="project name, e.g. my-env (id my-env/MyEnv-v0)")
    parser.add_argument("--dir", default=".", help="folder to create the project in (default: here)")
    parser.add_argument("--description", default="", help="one line for `llmgym list` and the README")
    parser.add_argument("--force", action="store_true", help="write into an existing non-empty folder")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmgym.scaffold import names_for, scaffold

    try:
        root = scaffold(args.name, args.dir, description=args.description, force=args.force)
    except ValueError as err:
        raise CLIError(str(err)) from None
    except OSError as err:  # a name too long for the file system, a folder we may not write to...
        raise CLIError(f"cannot create the project in {args.dir}: {err}") from None
    names = names_for(args.name)
    print(f"Created {root}/ with environment {names.env_id} ({names.package}/env.py). Next:")
    print(f"  pip install -e {root}")
    print(f"  llmgym check {names.env_id}")
    print(f"  pytest {root}/tests")
    return 0
