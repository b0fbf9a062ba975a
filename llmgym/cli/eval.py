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
(:mod:`llmgym.cli.eval_games`). Policies and players are built from the flags by
:mod:`llmgym.cli._policies`; adapters are imported there, inside the command, so
``import llmgym`` stays light. What a run leaves (summary, plot, exit status) is
written by :mod:`llmgym.cli.eval_report`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.cli import EXTRA_FOR_MODULE, CLIError, check_output_path, multiagent_ids, parse_env_kwargs, unknown_env
from llmgym.cli._policies import OPPONENT_HELP, add_engine_argument, build_policy, check_url, resolve_engine
from llmgym.cli.eval_games import run_games
from llmgym.cli.eval_report import exit_status, fmt, plot_rewards, report_summary

if TYPE_CHECKING:
    from llmgym.policy import SamplingParams

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
    _add_policy_arguments(parser)
    _add_run_arguments(parser)
    parser.add_argument("--opponent", action="append", metavar="SPEC", help=OPPONENT_HELP)
    parser.add_argument(
        "--round-robin", action="store_true", help="with several --opponent: also play the opponents against each other"
    )
    parser.set_defaults(func=run)


def _add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that choose the policy: a local model, servers, or a scripted policy."""
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


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of how the episodes are played, and what the run writes and prints."""
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


def run(args: argparse.Namespace) -> int:
    """Check every flag (before any model loads), then play the episodes, or the games of ``--opponent``."""
    import llmgym  # noqa: F401  registers the environments
    from llmgym.rollout.output_lock import OutputInUseError, hold_output

    _check_env_id(args)
    out, env_kwargs, sampling = _check_flags(args)
    evaluate = run_games if args.opponent is not None else _run_episodes
    try:  # held from the first read of OUT to the summary: a second run into OUT would record episodes twice
        with hold_output(out / "episodes.jsonl"):
            return evaluate(args, out, env_kwargs, sampling)
    except OutputInUseError as err:
        raise CLIError(f"{err}: wait for it to end, or choose another --out") from None


def _check_env_id(args: argparse.Namespace) -> None:
    """Refuse an id ``llmgym eval`` cannot take with these flags: a game without ``--opponent``, ``--opponent``
    with a single-agent env, an unknown id.

    Raises:
        CLIError: naming the id or command to use instead.
    """
    import gymnasium as gym

    multiagent = multiagent_ids()
    if args.opponent is None and args.env_id in multiagent:
        raise CLIError(
            f"{args.env_id} is a multi-agent game: pass --opponent SPEC (scripted:NAME, self, "
            "local[:BACKEND[:MODEL]], url:BASE_URL[@MODEL]); see `llmgym eval --help`"
        )
    if args.opponent is not None and args.env_id not in multiagent and args.env_id in gym.registry:
        versus = "llmgym/ma-" + args.env_id.partition("/")[2]
        if versus in multiagent:
            raise CLIError(
                f"{args.env_id} plays a fixed scripted opponent; to choose the opponent, evaluate the "
                f"multi-agent game instead: llmgym eval {versus} --opponent ..."
            )
        raise CLIError(
            f"--opponent needs a multi-agent environment ({', '.join(sorted(multiagent))}); "
            f"{args.env_id} is single-agent"
        )
    if args.env_id not in gym.registry and args.opponent is None:
        raise unknown_env(args.env_id, "eval")


def _check_flags(args: argparse.Namespace) -> tuple[Path, dict[str, Any], SamplingParams]:
    """Check the flags of a run and fill in the defaults that depend on others (``--engine``, ``--concurrency``).

    Returns:
        The output folder, the env's keyword arguments and the sampling settings.

    Raises:
        CLIError: a flag out of range, a server URL that is none, ``--plot`` without matplotlib, an output
            path that cannot be written, ``--env-kwargs`` that are not a JSON object.
    """
    from llmgym.policy import SamplingParams

    args.engine = resolve_engine(args.engine)
    if args.concurrency is None:
        args.concurrency = _default_concurrency(args)
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
    _warn_unused(args)
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
    )
    return out, parse_env_kwargs(args.env_kwargs), sampling


def _default_concurrency(args: argparse.Namespace) -> int:
    """Episodes in flight when ``--concurrency`` is not given: 32, but fewer where a local llama.cpp model plays.

    llama.cpp: 16 episodes decoded together on the torch engine; llama.cpp's own batches measured no faster
    than its single stream (docs/policies-local.md), so that engine plays one episode at a time.
    """
    local = [f"local:{args.backend}"] if not args.policy and not args.base_url else []
    local_llamacpp = any(
        spec.split(":")[:2] in (["local"], ["local", ""], ["local", "llama.cpp"])
        for spec in local + (args.opponent or [])
    )
    if not local_llamacpp:
        return 32
    return 16 if args.engine == "torch" else 1


def _warn_unused(args: argparse.Namespace) -> None:
    """Say which model flags a scripted ``--policy`` leaves unused (it plays without a model)."""
    if not args.policy:
        return
    given = (("--base-url", args.base_url), ("--model", args.model), ("--backend", args.backend != "llama.cpp"))
    ignored = [flag for flag, value in given if value]
    if ignored:
        print(
            f"llmgym: warning: --policy {args.policy} plays without a model; ignoring {', '.join(ignored)}",
            file=sys.stderr,
        )


def _run_episodes(args: argparse.Namespace, out: Path, env_kwargs: dict[str, Any], sampling: SamplingParams) -> int:
    """The single-agent evaluation: ``-n`` seeds x ``--group-size`` episodes through the rollout engine."""
    from llmgym.rollout import summarize
    from llmgym.rollout.resume import repair_jsonl

    _check_env_kwargs(args.env_id, env_kwargs)
    path = out / "episodes.jsonl"
    previous = _prepare_resume(path, out, args.env_id, env_kwargs, sampling) if args.resume else set()
    policy = build_policy(args)
    if previous - {policy.name}:
        policy.close()
        raise CLIError(
            f"{path} holds episodes of {', '.join(sorted(previous))}, not {policy.name}: "
            "resume with the same policy or choose another --out"
        )
    if not args.resume and path.exists() and not args.json:
        print(f"replacing {path} (pass --resume to continue it instead)")
    started = time.perf_counter()
    episodes = _play_episodes(args, policy, path, env_kwargs, sampling)
    wall = time.perf_counter() - started
    if args.resume:  # a failed episode played again left its old line beside the new: one line each, as summarized
        repair_jsonl(path)

    summary = summarize(episodes)
    summary["run"] = {
        "env_id": args.env_id,
        "policy": policy.name,
        "seeds": [args.seed, args.seed + args.num_seeds - 1],
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


def _check_env_kwargs(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Build the env once with ``env_kwargs``, before any model loads.

    Raises:
        CLIError: the env refuses them (an unknown argument, or a value out of its range).
    """
    import gymnasium as gym

    try:
        gym.make(env_id, **env_kwargs).close()
    except (TypeError, ValueError) as err:
        raise CLIError(f"{env_id} does not take these --env-kwargs: {err}") from None


def _prepare_resume(
    path: Path, out: Path, env_id: str, env_kwargs: dict[str, Any], sampling: SamplingParams
) -> set[str]:
    """Leave one line per episode in ``path``, then return the policies of its episodes (see :func:`_resumed_policies`).

    Raises:
        CLIError: the file cannot be resumed: not episodes, or played with other settings.
    """
    from llmgym.rollout.resume import repair_jsonl

    try:  # before anything reads it: two runs that wrote into it at once left lines twice, and torn ones
        repair = repair_jsonl(path)
    except ValueError as err:
        raise CLIError(f"cannot resume: {err}") from None
    if repair.duplicates or repair.torn:
        print(f"llmgym: {path}: {repair}", file=sys.stderr)
    return _resumed_policies(path, out, env_id, env_kwargs, sampling)


def _play_episodes(
    args: argparse.Namespace, policy: Any, path: Path, env_kwargs: dict[str, Any], sampling: SamplingParams
) -> list[Any]:
    """The rollout of the flags, streamed to ``path``; closes ``policy`` when it ends.

    Raises:
        CLIError: the rollout refused its arguments or the file to resume (a ``ValueError``).
    """
    from llmgym.rollout import rollout

    try:
        return rollout(
            args.env_id,
            policy,
            seeds=list(range(args.seed, args.seed + args.num_seeds)),
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


def _print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    run = summary["run"]
    reward = summary["reward"]
    table = Table("metric", "value", title=escape(f"{run['env_id']} · {run['policy']}"))
    ci = f" ± {fmt(reward['ci95'])}" if reward["ci95"] is not None else ""
    table.add_row("episodes", f"{summary['episodes']} ({summary['failed']} failed)")
    table.add_row("mean reward (95% CI)", f"{fmt(reward['mean'])}{ci}")
    table.add_row(f"success rate ({summary['success_rule']})", fmt(summary["success_rate"]))
    table.add_row("turns / episode", fmt(summary["turns"], 2))
    table.add_row("generated tokens / episode", fmt(summary["generated_tokens"], 1))
    table.add_row(
        "tool calls (all episodes) · error rate", f"{summary['tool_calls']} · {fmt(summary['tool_error_rate'])}"
    )
    for name, value in summary["components"].items():
        table.add_row(escape(f"  {name} (mean per episode)"), fmt(value))
    table.add_row("wall time", f"{run['wall_s']:.1f} s")
    Console().print(table)
