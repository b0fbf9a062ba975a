"""``llmgym eval``: evaluate an LLM agent (or a scripted one) on an environment.

Runs ``-n`` seeds (``--group-size`` episodes each) through the rollout engine
with a progress bar, streams the episodes to ``OUT/episodes.jsonl`` (holding it:
a second run into ``OUT`` is refused, naming the first's pid), writes
``OUT/summary.json``, prints a summary table (or ``--json``) and, with
``--plot``, ``OUT/rewards.png``. The policy is, in order of precedence:
``--policy scripted:NAME``, an OpenAI-compatible server (``--base-url``), or
a local model (``--backend``, default the embedded SmolLM2 through llama.cpp).
On a multi-agent game (``llmgym/ma-*``), ``--opponent SPEC`` (repeatable) plays
it against other players in both seats and summarizes a win/draw/loss matrix
(:func:`llmgym.envs.multiagent.evaluation.evaluate`). Policies and players are
built from the flags by :mod:`llmgym.cli._policies`; adapters are imported
there, inside the command, so ``import llmgym`` stays light.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmgym.cli import EXTRA_FOR_MODULE, CLIError, check_output_path, multiagent_ids, parse_env_kwargs, unknown_env
from llmgym.cli._policies import (
    OPPONENT_HELP,
    add_engine_argument,
    build_player,
    build_policy,
    check_url,
    resolve_engine,
    scripted_player,
)

__all__ = ["add_parser", "run", "report_summary", "exit_status", "plot_rewards"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model (or a scripted policy) on an environment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("env_id", metavar="ENV_ID", help="a registered environment id (see `llmgym list`)")
    parser.add_argument("-n", "--num-seeds", type=int, default=16, help="seeds to play, SEED..SEED+N-1 (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="first seed; also seeds the sampler (default 0)")
    parser.add_argument("--group-size", type=int, default=1, help="episodes per seed (default 1)")
    parser.add_argument(
        "--backend",
        default="llama.cpp",
        choices=["llama.cpp", "transformers", "vllm"],
        help="local model backend (default llama.cpp)",
    )
    add_engine_argument(parser, "concurrent episodes")
    parser.add_argument(
        "--model",
        help="model name or path (local: default SmolLM2-135M-Instruct; a LoRA adapter folder; "
        "smollm2-wordle, the shipped Wordle agent; server: the served name, default the server's first model)",
    )
    parser.add_argument(
        "--base-url",
        action="append",
        metavar="URL",
        help="an OpenAI-compatible server's /v1 URL; repeat for several servers (a new episode goes to the "
        "least busy, its later turns to the same one; a server that fails is taken out)",
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="play each environment on a Ray actor (extra ray; joins the Ray cluster of RAY_ADDRESS, "
        "else starts a local one)",
    )
    parser.add_argument("--api-key", help="the server's API key (default $OPENAI_API_KEY)")
    parser.add_argument(
        "--policy",
        metavar="scripted:NAME",
        help="a scripted policy instead of a model: scripted:wordle or scripted:module:Class",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="episodes in flight at once (default 32; for the llama.cpp backend 16 with the torch engine, else 1; "
        "N > 1 decodes N episodes together with a KV cache slot each)",
    )
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature, 0 = greedy (default 0.7)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    parser.add_argument("--max-tokens", type=int, default=256, help="most tokens generated per turn (default 256)")
    parser.add_argument(
        "--env-kwargs", default="{}", metavar="JSON", help="environment arguments, e.g. '{\"max_turns\": 6}'"
    )
    parser.add_argument("--out", default="runs/eval", help="output folder (default runs/eval)")
    parser.add_argument("--resume", action="store_true", help="continue the run in OUT, playing only missing episodes")
    parser.add_argument(
        "--plot", action="store_true", help="write OUT/rewards.png, the reward distribution per component"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--opponent", action="append", metavar="SPEC", help=OPPONENT_HELP)
    parser.add_argument(
        "--round-robin", action="store_true", help="with several --opponent: also play the opponents against each other"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import llmgym  # noqa: F401  registers the environments
    from llmgym.rollout.output_lock import OutputInUseError, hold_output

    multiagent = multiagent_ids()
    if args.opponent is None and args.env_id in multiagent:
        raise CLIError(
            f"{args.env_id} is a multi-agent game: pass --opponent SPEC (scripted:NAME, self, "
            "local[:BACKEND[:MODEL]], url:BASE_URL[@MODEL]); see `llmgym eval --help`"
        )
    if args.opponent is not None and args.env_id not in multiagent:
        versus = "llmgym/ma-" + args.env_id.partition("/")[2]
        if args.env_id in gym.registry and versus in multiagent:
            raise CLIError(
                f"{args.env_id} plays a fixed scripted opponent; to choose the opponent, evaluate the "
                f"multi-agent game instead: llmgym eval {versus} --opponent ..."
            )
        if args.env_id in gym.registry:
            raise CLIError(
                f"--opponent needs a multi-agent environment ({', '.join(sorted(multiagent))}); "
                f"{args.env_id} is single-agent"
            )
    if args.env_id not in gym.registry and args.opponent is None:
        raise unknown_env(args.env_id, "eval")
    args.engine = resolve_engine(args.engine)
    if args.concurrency is None:
        # llama.cpp: 16 episodes decoded together on the torch engine; llama.cpp's own batches measured no faster
        # than its single stream (docs/policies-local.md), so that engine plays one episode at a time
        local = [f"local:{args.backend}"] if not args.policy and not args.base_url else []
        local_llamacpp = any(
            s.split(":")[:2] in (["local"], ["local", ""], ["local", "llama.cpp"])
            for s in local + (args.opponent or [])
        )
        args.concurrency = (16 if args.engine == "torch" else 1) if local_llamacpp else 32
    for name in ("num_seeds", "group_size", "concurrency", "max_tokens"):
        if getattr(args, name) < 1:
            raise CLIError(f"--{name.replace('_', '-')} must be at least 1")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0 (Gymnasium seeds are non-negative), got {args.seed}")
    if not args.temperature >= 0 or not math.isfinite(args.temperature):  # nan compares false: refused too
        raise CLIError(f"--temperature must be >= 0 and finite, got {args.temperature}")
    if not 0 < args.top_p <= 1:
        raise CLIError(f"--top-p must be in (0, 1], got {args.top_p}")
    for url in args.base_url or []:
        check_url(url)
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before the run, not after it
        raise CLIError(f'--plot needs matplotlib: pip install "llmgym[{EXTRA_FOR_MODULE["matplotlib"]}]"')
    out = check_output_path(args.out, "--out", folder=True)
    for name in ("episodes.jsonl", "summary.json") + (("rewards.png",) if args.plot else ()):
        check_output_path(out / name, "--out", folder=False)
    if args.policy:
        ignored = [
            flag
            for flag, given in (
                ("--base-url", args.base_url),
                ("--model", args.model),
                ("--backend", args.backend != "llama.cpp"),
            )
            if given
        ]
        if ignored:
            print(
                f"llmgym: warning: --policy {args.policy} plays without a model; ignoring {', '.join(ignored)}",
                file=sys.stderr,
            )
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    try:  # held from the first read of OUT to the summary: a second run into OUT would record episodes twice
        with hold_output(out / "episodes.jsonl"):
            if args.opponent is not None:
                return _run_games(args, env_kwargs)
            return _run_episodes(args, out, env_kwargs)
    except OutputInUseError as err:
        raise CLIError(f"{err}: wait for it to end, or choose another --out") from None


def _run_episodes(args: argparse.Namespace, out: Path, env_kwargs: dict[str, Any]) -> int:
    """The single-agent branch: ``-n`` seeds x ``--group-size`` episodes through the rollout engine."""
    import gymnasium as gym

    from llmgym.policy import SamplingParams
    from llmgym.rollout import rollout, summarize
    from llmgym.rollout.resume import repair_jsonl

    try:
        gym.make(args.env_id, **env_kwargs).close()
    except (TypeError, ValueError) as err:  # an unknown argument, or a value the env refuses
        raise CLIError(f"{args.env_id} does not take these --env-kwargs: {err}") from None

    path = out / "episodes.jsonl"
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
    )
    if args.resume:
        try:  # before anything reads it: two runs that wrote into it at once left lines twice, and torn ones
            repair = repair_jsonl(path)
        except ValueError as err:
            raise CLIError(f"cannot resume: {err}") from None
        if repair.duplicates or repair.torn:
            print(f"llmgym: {path}: {repair}", file=sys.stderr)
    previous = _resumed_policies(path, out, args.env_id, env_kwargs, sampling) if args.resume else set()
    policy = build_policy(args)
    if previous - {policy.name}:
        policy.close()
        raise CLIError(
            f"{path} holds episodes of {', '.join(sorted(previous))}, not {policy.name}: "
            "resume with the same policy or choose another --out"
        )
    if not args.resume and path.exists() and not args.json:
        print(f"replacing {path} (pass --resume to continue it instead)")

    seeds = list(range(args.seed, args.seed + args.num_seeds))
    started = time.perf_counter()
    try:
        episodes = rollout(
            args.env_id,
            policy,
            seeds=seeds,
            group_size=args.group_size,
            max_concurrency=args.concurrency,
            sampling=sampling,
            jsonl_path=path,
            resume=args.resume,
            progress=not args.no_progress,
            env_kwargs=env_kwargs,
            ray=args.ray,
        )
    except ValueError as err:
        raise CLIError(str(err)) from None
    finally:
        policy.close()
    wall = time.perf_counter() - started
    if args.resume:  # a failed episode played again left its old line beside the new: one line each, as summarized
        repair_jsonl(path)

    summary = summarize(episodes)
    summary["run"] = {
        "env_id": args.env_id,
        "policy": policy.name,
        "seeds": [seeds[0], seeds[-1]],
        "group_size": args.group_size,
        "concurrency": args.concurrency,
        "engine": getattr(policy, "engine", None),
        "sampling": vars(sampling),
        "env_kwargs": env_kwargs,
        "wall_s": wall,
        "episodes_file": str(path),
    }
    report_summary(summary, args, out, episodes, _print_table)
    return exit_status(
        summary["failed"], summary["episodes"], "episode", episodes, retry="; run again with --resume to retry them"
    )


def _run_games(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> int:
    """The multi-agent branch: the evaluated policy against each ``--opponent``, in both seats.

    Every opponent plays ``-n`` seeds x ``--group-size`` games with the evaluated policy in each
    seat (self-play: one seat order); ``--round-robin`` adds the opponents against each other.
    Episodes (one per agent per game) stream to ``OUT/episodes.jsonl``; ``OUT/summary.json``
    holds the matrix.
    """
    from llmgym.envs.multiagent import MULTIAGENT_ENVS, make_multiagent
    from llmgym.envs.multiagent.evaluation import aevaluate, seat_orders, unique_names
    from llmgym.episode import JSONLWriter
    from llmgym.policy import Policy, SamplingParams
    from llmgym.rollout import run_sync

    env_id = args.env_id
    if env_id not in MULTIAGENT_ENVS:
        from llmgym.cli import did_you_mean

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

    if args.policy:
        kind, _, name = args.policy.partition(":")
        if kind != "scripted" or not name:
            raise CLIError(f"--policy must look like scripted:NAME (e.g. scripted:minimax), got {args.policy!r}")
        evaluated = scripted_player(env_id, name)
    else:
        evaluated = build_policy(args)
    opponents: list[Any] = []
    try:
        for spec in args.opponent:
            opponents.append(build_player(spec, env_id, args, evaluated))
    except CLIError:
        for player in {id(p): p for p in [evaluated, *opponents]}.values():
            if isinstance(player, Policy):
                player.close()
        raise

    seeds = list(range(args.seed, args.seed + args.num_seeds))
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
    )
    out = Path(args.out)
    path = out / "episodes.jsonl"
    if path.exists() and not args.json:
        print(f"replacing {path}")
    bar = None
    if not args.no_progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("games"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=Console(stderr=True)
        )
        orders = seat_orders(unique_names([evaluated, *opponents]), args.round_robin)
        bar.add_task("games", total=len(orders) * len(seeds) * args.group_size)
        bar.start()
    started = time.perf_counter()
    try:
        with JSONLWriter(path, append=False) as writer:

            def record(game: dict[str, Any]) -> None:
                for episode in game.values():
                    writer.write(episode)
                if bar is not None:
                    bar.advance(bar.task_ids[0])

            result = run_sync(
                aevaluate(
                    lambda: make_multiagent(env_id, **env_kwargs),
                    evaluated,
                    opponents,
                    seeds,
                    group_size=args.group_size,
                    round_robin=args.round_robin,
                    sampling=sampling,
                    max_concurrency=args.concurrency,
                    env_id=env_id,
                    on_game=record,
                )
            )
    finally:
        if bar is not None:
            bar.stop()
        for player in {id(p): p for p in [evaluated, *opponents]}.values():
            if isinstance(player, Policy):
                player.close()
    wall = time.perf_counter() - started

    summary = result.summary()
    summary["run"] = {
        "env_id": env_id,
        "policy": result.policy,
        "opponents": list(args.opponent),
        "players": result.players,
        "seeds": [seeds[0], seeds[-1]],
        "group_size": args.group_size,
        "round_robin": args.round_robin,
        "concurrency": args.concurrency,
        "engine": args.engine,  # of a local llama.cpp model, where one plays
        "sampling": vars(sampling),
        "env_kwargs": env_kwargs,
        "wall_s": wall,
        "episodes_file": str(path),
    }
    report_summary(summary, args, out, result.episodes_of(result.policy), _print_matrix)
    return exit_status(
        summary["failed_games"], summary["games"], "game", (e for game in result.games for e in game.values())
    )


def _resumed_policies(path: Path, out: Path, env_id: str, env_kwargs: dict[str, Any], sampling: Any) -> set[str]:
    """The policies of the episodes a ``--resume`` continues (none when ``path`` does not exist yet).

    Raises:
        CLIError: the file is not episodes, or they were played with another env id, other
            ``--env-kwargs`` or other sampling settings (files from before episodes recorded
            their env kwargs: those of ``OUT/summary.json``).
    """
    from llmgym.episode import iter_jsonl
    from llmgym.rollout import resume_conflict

    if not path.exists():
        return set()
    policies: set[str] = set()
    unrecorded = False
    try:
        for episode in iter_jsonl(path):
            conflict = resume_conflict(episode, env_id, env_kwargs, sampling)
            if conflict is not None:
                raise CLIError(f"{path} {conflict}: resume with the same settings or choose another --out")
            policies.add(episode.policy)
            unrecorded = unrecorded or "env_kwargs" not in episode.metadata
    except ValueError as err:
        raise CLIError(f"cannot resume: {err}") from None
    summary = out / "summary.json"
    if unrecorded and summary.is_file():
        try:
            recorded = json.loads(summary.read_text())["run"]["env_kwargs"]
        except (ValueError, KeyError, TypeError):
            recorded = None
        if isinstance(recorded, dict) and recorded != env_kwargs:
            raise CLIError(
                f"{path} holds episodes played with env_kwargs {recorded} ({summary}), not {env_kwargs}: "
                "resume with the same settings or choose another --out"
            )
    return policies


def report_summary(
    summary: dict[str, Any],
    args: argparse.Namespace,
    out: Path,
    plotted: list[Any],
    print_table: Callable[[dict[str, Any]], None],
) -> None:
    """Write ``OUT/summary.json``; with ``--plot`` also ``OUT/rewards.png`` of ``plotted`` (its path joins
    ``summary["run"]``); print the summary as JSON (``--json``) or with ``print_table``."""
    saved = out / "summary.json"
    saved.write_text(json.dumps(summary, indent=2) + "\n")  # first: a plot that fails must not lose the summary
    if args.plot:
        title = f"{summary['run']['env_id']} · {summary['run']['policy']}"
        summary["run"]["plot"] = str(plot_rewards(plotted, out / "rewards.png", title=title))
        saved.write_text(json.dumps(summary, indent=2) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(summary)


def exit_status(failed: int, total: int, unit: str, episodes: Iterable[Any], retry: str = "") -> int:
    """The exit status of a run of ``total`` units (episodes, games) of which ``failed`` failed.

    0 when none failed; 1, after a note with the first error among ``episodes``, when some did.

    Raises:
        CLIError: every unit failed.
    """
    if not failed:
        return 0
    first = next(e.metadata["error"] for e in episodes if "error" in e.metadata)
    if failed == total:
        raise CLIError(f"every {unit} failed; the first error: {first}")
    print(f"llmgym: {failed} of {total} {unit}s failed (first error: {first}){retry}")
    return 1


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    run = summary["run"]
    reward = summary["reward"]
    table = Table("metric", "value", title=escape(f"{run['env_id']} · {run['policy']}"))
    ci = f" ± {_fmt(reward['ci95'])}" if reward["ci95"] is not None else ""
    table.add_row("episodes", f"{summary['episodes']} ({summary['failed']} failed)")
    table.add_row("mean reward (95% CI)", f"{_fmt(reward['mean'])}{ci}")
    table.add_row(f"success rate ({summary['success_rule']})", _fmt(summary["success_rate"]))
    table.add_row("turns / episode", _fmt(summary["turns"], 2))
    table.add_row("generated tokens / episode", _fmt(summary["generated_tokens"], 1))
    table.add_row(
        "tool calls (all episodes) · error rate", f"{summary['tool_calls']} · {_fmt(summary['tool_error_rate'])}"
    )
    for name, value in summary["components"].items():
        table.add_row(escape(f"  {name} (mean per episode)"), _fmt(value))
    table.add_row("wall time", f"{run['wall_s']:.1f} s")
    Console().print(table)


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
            escape(a) + (" *" if a == summary["policy"] else ""), *row, _fmt(total["score"]), _fmt(total["mean_reward"])
        )
    console = Console()
    if not console.is_terminal:  # a file or a pipe: no need to wrap the names
        console = Console(width=max(80, 30 + max(len(n) for n in players) + sum(max(len(n), 6) + 3 for n in players)))
    console.print(table)
    if summary["failed_games"]:
        print(f"{summary['failed_games']} failed games are not counted")


def plot_rewards(episodes: list[Any], path: Path, title: str = "") -> Path:
    """Write a PNG with one histogram per reward component (per-episode totals) and one of the total reward.

    Raises:
        CLIError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError(f'--plot needs matplotlib: pip install "llmgym[{EXTRA_FOR_MODULE["matplotlib"]}]"') from None
    done = [e for e in episodes if "error" not in e.metadata]
    names = sorted({name for e in done for c in e.reward_components for name in c})
    series = [("total reward", [e.total_reward for e in done])]
    series += [(name, [e.component_totals().get(name, 0.0) for e in done]) for name in names]
    columns = min(3, len(series))
    rows = (len(series) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False)
    for axis, (name, values) in zip(axes.flat, series):
        axis.hist(values, bins=min(20, max(5, len(set(values)))), color="tab:blue", edgecolor="white")
        axis.set_title(name)
        axis.set_xlabel("per-episode total")
        axis.set_ylabel("episodes")
    for axis in list(axes.flat)[len(series) :]:
        axis.axis("off")
    figure.suptitle(f"{title} ({len(done)} episodes)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
