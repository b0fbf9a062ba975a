"""``llmgym check ENV_ID``: run the environment checker and print PASS/FAIL per check.

Exit status 0 when every check passed, 1 when one failed, 2 for a usage error
(an unknown id, ``--env-kwargs`` the environment refuses). See :mod:`llmgym.checker`
for what is checked.
"""

from __future__ import annotations

import argparse
import json
import sys

from llmgym.cli import CLIError, parse_env_kwargs, unknown_env

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check", help="check an environment against the llmgym contract", description=__doc__
    )
    parser.add_argument("env_id", help="a registered id, e.g. llmgym/Wordle-v0")
    parser.add_argument("--episodes", type=int, default=5, help="random episodes for the reward and timing checks")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument(
        "--env-kwargs",
        "--kwargs",
        dest="env_kwargs",
        default="{}",
        metavar="JSON",
        help="environment arguments as a JSON object, e.g. '{\"max_turns\": 4}' (--kwargs: the old name)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from llmgym.checker import check_env
    from llmgym.registry import load_plugins

    load_plugins()
    if args.env_id not in gym.registry:
        raise unknown_env(args.env_id, "check")
    if args.episodes < 1:
        raise CLIError("--episodes must be >= 1")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0 (Gymnasium seeds are non-negative), got {args.seed}")
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    if env_kwargs:
        try:
            gym.make(args.env_id, **env_kwargs).close()
        except (TypeError, ValueError) as err:  # an unknown argument or a refused value: the user's, not the env's
            raise CLIError(f"{args.env_id} does not take these --env-kwargs: {err}") from None
        except Exception:  # any other failure to build it is a finding of the checker, reported below
            pass
    try:
        report = check_env(args.env_id, episodes=args.episodes, seed=args.seed, env_kwargs=env_kwargs)
    except Exception as err:  # the env cannot even be made: that is the one finding
        print(f"FAIL  make  gymnasium.make({args.env_id!r}) raised {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)
    return 0 if report.passed else 1


def _print(report) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]llmgym check {escape(report.env_id)}[/bold]")
    colours = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}
    for result in report.results:
        colour = colours[result.status]
        console.print(f"  [{colour}]{result.status}[/{colour}]  {result.name:<14} {escape(result.summary)}")
        for line in result.details[:8]:
            console.print(f"        {escape(line)}", style="dim")
        if len(result.details) > 8:
            console.print(f"        ... and {len(result.details) - 8} more", style="dim")
        if result.passed is False and result.fix:
            console.print(f"        [bold]fix:[/bold] {escape(result.fix)}")
    if report.passed:
        console.print("  [green bold]PASSED[/green bold]")
    else:
        console.print(f"  [red bold]FAILED[/red bold] ({len(report.failures)} of {len(report.results)} checks)")
