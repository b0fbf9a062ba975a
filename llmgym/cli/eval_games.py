"""``llmgym eval <multi-agent id> --opponent SPEC``: the evaluated policy against each opponent, in both seats.

Holds :func:`run_games`, which :mod:`llmgym.cli.eval` calls once it has checked the flags and holds
``OUT/episodes.jsonl``. Every opponent plays ``-n`` seeds x ``--group-size`` games with the evaluated
policy in each seat (self-play: one seat order); ``--round-robin`` adds the opponents against each
other. Episodes (one per agent per game) stream to ``OUT/episodes.jsonl``; ``OUT/summary.json``
holds the win/draw/loss matrix (:func:`llmgym.envs.multiagent.evaluation.aevaluate`). The steps, in
order: check the game, build the players, play the games, summarize.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.cli import CLIError
from llmgym.cli._policies import build_player, build_policy, scripted_player
from llmgym.cli.eval_report import exit_status, fmt, report_summary

if TYPE_CHECKING:
    from llmgym.policy import SamplingParams

__all__ = ["run_games"]


def run_games(args: argparse.Namespace, out: Path, env_kwargs: dict[str, Any], sampling: SamplingParams) -> int:
    """Play and summarize the games of ``--opponent``; returns the exit status (1 when some games failed).

    Raises:
        CLIError: the game or its ``--env-kwargs`` cannot be played, ``--resume`` was given, a player cannot be
            built, or every game failed.
    """
    _check_game(args, env_kwargs)
    evaluated, opponents = _build_players(args)
    path = out / "episodes.jsonl"
    if path.exists() and not args.json:
        print(f"replacing {path}")
    started = time.perf_counter()
    try:
        result = _play_games(args, env_kwargs, sampling, evaluated, opponents, path)
    finally:
        _close_players([evaluated, *opponents])
    summary = result.summary()
    summary["run"] = {
        "env_id": args.env_id,
        "policy": result.policy,
        "opponents": list(args.opponent),
        "players": result.players,
        "seeds": [args.seed, args.seed + args.num_seeds - 1],
        "group_size": args.group_size,
        "round_robin": args.round_robin,
        "concurrency": args.concurrency,
        "engine": args.engine,  # of a local llama.cpp model, where one plays
        "sampling": vars(sampling),
        "env_kwargs": env_kwargs,
        "wall_s": time.perf_counter() - started,
        "episodes_file": str(path),
    }
    report_summary(summary, args, out, result.episodes_of(result.policy), _print_matrix)
    games = (episode for game in result.games for episode in game.values())
    return exit_status(summary["failed_games"], summary["games"], "game", games)


def _check_game(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> None:
    """Refuse what no game can be played with: an id that is no multi-agent game, ``--resume``, bad ``--env-kwargs``.

    Raises:
        CLIError: one of those, with what to do instead.
    """
    from llmgym.cli import did_you_mean
    from llmgym.envs.multiagent import MULTIAGENT_ENVS, make_multiagent

    env_id = args.env_id
    if env_id not in MULTIAGENT_ENVS:
        matches = did_you_mean(env_id, list(MULTIAGENT_ENVS))
        hint = f" Did you mean: {', '.join(matches)}?" if matches else f" Known: {', '.join(sorted(MULTIAGENT_ENVS))}."
        raise CLIError(f"--opponent needs a multi-agent environment; {env_id!r} is not one.{hint}")
    if args.resume:
        raise CLIError("--resume is not supported with --opponent: run again with another --out")
    try:
        make_multiagent(env_id, **env_kwargs).close()
    except (TypeError, ValueError) as err:  # an unknown argument, or a value the game refuses
        raise CLIError(f"{env_id} does not take these --env-kwargs: {err}") from None
    except Exception as err:  # any other failure to build it: one line, not a traceback
        raise CLIError(f"{env_id} could not be built: {type(err).__name__}: {err}") from None


def _build_players(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The evaluated player (``--policy scripted:NAME``, else the model of the flags) and one per ``--opponent``.

    Raises:
        CLIError: a player cannot be built; those built already are closed.
    """
    if args.policy:
        kind, _, name = args.policy.partition(":")
        if kind != "scripted" or not name:
            raise CLIError(f"--policy must look like scripted:NAME (e.g. scripted:minimax), got {args.policy!r}")
        evaluated = scripted_player(args.env_id, name)
    else:
        evaluated = build_policy(args)
    opponents: list[Any] = []
    try:
        for spec in args.opponent:
            opponents.append(build_player(spec, args.env_id, args, evaluated))
    except CLIError:
        _close_players([evaluated, *opponents])
        raise
    return evaluated, opponents


def _play_games(
    args: argparse.Namespace,
    env_kwargs: dict[str, Any],
    sampling: SamplingParams,
    evaluated: Any,
    opponents: list[Any],
    path: Path,
) -> Any:
    """Play every game, writing each one's episodes to ``path`` as it ends; returns the
    :class:`~llmgym.envs.multiagent.evaluation.Evaluation`."""
    from llmgym.envs.multiagent import make_multiagent
    from llmgym.envs.multiagent.evaluation import aevaluate, seat_orders, unique_names
    from llmgym.episode import JSONLWriter
    from llmgym.progress import ProgressBar
    from llmgym.rollout import run_sync

    seeds = list(range(args.seed, args.seed + args.num_seeds))
    orders = seat_orders(unique_names([evaluated, *opponents]), args.round_robin)
    total = len(orders) * len(seeds) * args.group_size
    with ProgressBar("games", total, shown=not args.no_progress) as bar, JSONLWriter(path, append=False) as writer:

        def record(game: dict[str, Any]) -> None:
            for episode in game.values():
                writer.write(episode)
            bar.advance()

        return run_sync(
            aevaluate(
                lambda: make_multiagent(args.env_id, **env_kwargs),
                evaluated,
                opponents,
                seeds,
                group_size=args.group_size,
                round_robin=args.round_robin,
                sampling=sampling,
                max_concurrency=args.concurrency,
                env_id=args.env_id,
                on_game=record,
            )
        )


def _close_players(players: list[Any]) -> None:
    """Close each model policy among ``players`` once (the same one may play several seats)."""
    from llmgym.policy import Policy

    for player in {id(p): p for p in players}.values():
        if isinstance(player, Policy):
            player.close()


def _print_matrix(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    run, players = summary["run"], summary["players"]
    table = Table(
        "W/D/L",
        *map(escape, players),
        "score",
        "mean reward",
        title=escape(f"{run['env_id']} · {summary['games']} games · {run['wall_s']:.1f} s"),
        caption="row player's wins/draws/losses against the column player, both seats; "
        "score and mean reward: against the others; self-play counts first-mover results; * = evaluated",
    )
    for a in players:
        row = []
        for b in players:
            c = summary["matrix"][a][b]
            row.append(f"{c['win']}/{c['draw']}/{c['loss']}" if c["games"] else "-")
        total = summary["totals"][a]
        table.add_row(
            escape(a) + (" *" if a == summary["policy"] else ""), *row, fmt(total["score"]), fmt(total["mean_reward"])
        )
    console = Console()
    if not console.is_terminal:  # a file or a pipe: no need to wrap the names
        console = Console(width=max(80, 30 + max(len(n) for n in players) + sum(max(len(n), 6) + 3 for n in players)))
    console.print(table)
    if summary["failed_games"]:
        print(f"{summary['failed_games']} failed games are not counted")
