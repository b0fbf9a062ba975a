"""``llmgym league <multi-agent id> --player NAME=SPEC ...``: every player against every other, rated.

Each pair of players plays ``-n`` seeds in both seats (the same seeds for every pair); the games are
rated with openskill's Plackett-Luce model (:mod:`llmgym.envs.multiagent.league`). A player SPEC is
what ``llmgym eval --opponent`` takes: ``scripted:NAME`` (the game's scripted players),
``local[:BACKEND[:MODEL]]`` (a local model: a name, a path, a LoRA adapter folder, ``tiny-random``)
or ``url:BASE_URL[@MODEL]`` (an OpenAI-compatible server). The run writes ``OUT/league.json``
(standings: mu, sigma, ordinal = mu - 3 sigma, W/D/L; the score and W/D/L matrices; a schema
version), streams the games' episodes to ``OUT/episodes.jsonl`` (recorded under the league names)
and prints the standings; ``llmgym view OUT`` shows both.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.cli import CLIError, check_output_path, parse_env_kwargs
from llmgym.cli._policies import SELF, add_engine_argument, build_player, resolve_engine
from llmgym.cli.eval_report import exit_status, fmt

if TYPE_CHECKING:
    from llmgym.envs.multiagent.league import LeagueResult
    from llmgym.policy import SamplingParams

__all__ = ["add_parser", "run", "parse_players"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "league",
        help="rate players of a multi-agent game in a round-robin league (openskill)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("env_id", metavar="ENV_ID", help="a multi-agent game id (llmgym/ma-*, see `llmgym list`)")
    parser.add_argument(
        "--player",
        action="append",
        required=True,
        metavar="NAME=SPEC",
        help="a player, at least two: NAME=scripted:NAME, NAME=local[:BACKEND[:MODEL]] or NAME=url:BASE_URL[@MODEL]",
    )
    parser.add_argument("-n", "--games-per-pair", type=int, default=8, help="seeds per pair and seat (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="first seed; also seeds the sampler (default 0)")
    parser.add_argument("--concurrency", type=int, default=8, help="games in flight at once (default 8)")
    add_engine_argument(parser, "concurrent games")
    parser.add_argument("--api-key", help="the servers' API key (default $OPENAI_API_KEY)")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature, 0 = greedy (default 0.7)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    parser.add_argument("--max-tokens", type=int, default=256, help="most tokens generated per turn (default 256)")
    parser.add_argument("--env-kwargs", default="{}", metavar="JSON", help="game arguments as a JSON object")
    parser.add_argument("--out", default="runs/league", help="output folder (default runs/league)")
    parser.add_argument("--json", action="store_true", help="print league.json instead of a table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def parse_players(specs: list[str]) -> dict[str, str]:
    """``NAME=SPEC`` flags as name -> spec; a flag without ``=`` is named by its spec.

    Raises:
        CLIError: fewer than two players, a name given twice, an empty name or spec, or ``self``.

    Example:
        >>> parse_players(["best=scripted:minimax", "scripted:random"])
        {'best': 'scripted:minimax', 'scripted:random': 'scripted:random'}
    """
    players: dict[str, str] = {}
    for flag in specs:
        name, sep, spec = flag.partition("=")
        name, spec = (name.strip(), spec.strip()) if sep else (flag.strip(), flag.strip())
        if not name or not spec:
            raise CLIError(f"--player {flag!r}: give NAME=SPEC, e.g. --player best=scripted:minimax")
        if spec == SELF:
            raise CLIError("--player self: a league has no evaluated policy; name the model, e.g. base=local")
        if name in players:
            raise CLIError(f"--player {name!r} is given twice: each player needs a name of its own")
        players[name] = spec
    if len(players) < 2:
        raise CLIError(f"a league needs at least two --player, got {len(players)}")
    return players


def run(args: argparse.Namespace) -> int:
    """Check the flags and the game, build the players, play and rate the league, write and print it."""
    import llmgym  # noqa: F401  registers the environments
    from llmgym.rollout.output_lock import OutputInUseError, hold_output

    specs = parse_players(args.player)
    out, env_kwargs, sampling = _check_flags(args)
    _check_game(args.env_id, env_kwargs)
    try:  # held from the first write: a second league into OUT would interleave its episodes
        with hold_output(out / "episodes.jsonl"):
            players = _build_players(specs, args)
            started = time.perf_counter()
            try:
                result = _play(args, env_kwargs, sampling, players, out / "episodes.jsonl")
            finally:
                _close(players.values())
    except OutputInUseError as err:
        raise CLIError(f"{err}: wait for it to end, or choose another --out") from None
    result.run = {
        "players": specs,
        "sampling": vars(sampling),
        "env_kwargs": env_kwargs,
        "concurrency": args.concurrency,
        "wall_s": time.perf_counter() - started,
        "episodes_file": str(out / "episodes.jsonl"),
    }
    text = result.to_json()
    (out / "league.json").write_text(text + "\n")
    print(text if args.json else _table(result))
    episodes = (episode for game in result.games for episode in game.values())
    return exit_status(result.failed_games, len(result.games), "game", episodes)


def _check_flags(args: argparse.Namespace) -> tuple[Path, dict[str, Any], SamplingParams]:
    """The output folder, the game's arguments and the sampling settings, once every flag is in range.

    Raises:
        CLIError: openskill is missing, a count below 1, a negative seed, a bad temperature or top-p, an
            unwritable ``--out``, ``--env-kwargs`` that are not a JSON object.
    """
    from llmgym.policy import SamplingParams

    if importlib.util.find_spec("openskill") is None:  # before any game is played, not after them all
        raise CLIError('llmgym league rates with openskill, which is not installed: pip install "llmgym[openspiel]"')
    args.engine = resolve_engine(args.engine)
    for name in ("games_per_pair", "concurrency", "max_tokens"):
        if getattr(args, name) < 1:
            raise CLIError(f"--{name.replace('_', '-')} must be at least 1")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0 (Gymnasium seeds are non-negative), got {args.seed}")
    if not args.temperature >= 0 or not math.isfinite(args.temperature):
        raise CLIError(f"--temperature must be >= 0 and finite, got {args.temperature}")
    if not 0 < args.top_p <= 1:
        raise CLIError(f"--top-p must be in (0, 1], got {args.top_p}")
    out = check_output_path(args.out, "--out", folder=True)
    for name in ("episodes.jsonl", "league.json"):
        check_output_path(out / name, "--out", folder=False)
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
    )
    return out, parse_env_kwargs(args.env_kwargs), sampling


def _check_game(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Build the game once with ``env_kwargs``, before any model loads.

    Raises:
        CLIError: ``env_id`` is no multi-agent game, or the game refuses ``env_kwargs``.
    """
    from llmgym.cli import did_you_mean
    from llmgym.envs.multiagent import MULTIAGENT_ENVS, make_multiagent

    if env_id not in MULTIAGENT_ENVS:
        matches = did_you_mean(env_id, list(MULTIAGENT_ENVS))
        hint = f" Did you mean: {', '.join(matches)}?" if matches else f" Known: {', '.join(sorted(MULTIAGENT_ENVS))}."
        raise CLIError(f"llmgym league needs a multi-agent game; {env_id!r} is not one.{hint}")
    try:
        make_multiagent(env_id, **env_kwargs).close()
    except (TypeError, ValueError) as err:
        raise CLIError(f"{env_id} does not take these --env-kwargs: {err}") from None


def _build_players(specs: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """name -> the player its spec names.

    Raises:
        CLIError: a player cannot be built; those built already are closed.
    """
    players: dict[str, Any] = {}
    try:
        for name, spec in specs.items():
            players[name] = build_player(spec, args.env_id, args)
    except CLIError as err:
        _close(players.values())
        raise CLIError(f"--player {name}: {err}") from None
    return players


def _play(
    args: argparse.Namespace, env_kwargs: dict[str, Any], sampling: SamplingParams, players: dict[str, Any], path: Path
) -> LeagueResult:
    """Play the league, writing each game's episodes to ``path`` as it ends."""
    from llmgym.envs.multiagent import make_multiagent
    from llmgym.envs.multiagent.league import run_league
    from llmgym.episode import JSONLWriter
    from llmgym.progress import ProgressBar

    total = len(players) * (len(players) - 1) * args.games_per_pair
    with ProgressBar("games", total, shown=not args.no_progress) as bar, JSONLWriter(path, append=False) as writer:

        def record(game: dict[str, Any]) -> None:
            for episode in game.values():
                writer.write(episode)
            bar.advance()

        return run_league(
            lambda: make_multiagent(args.env_id, **env_kwargs),
            players,
            args.games_per_pair,
            args.seed,
            sampling=sampling,
            max_concurrency=args.concurrency,
            env_id=args.env_id,
            on_game=record,
        )


def _close(players: Any) -> None:
    """Close each model policy among ``players`` once."""
    from llmgym.policy import Policy

    for player in {id(p): p for p in players}.values():
        if isinstance(player, Policy):
            player.close()


def _table(result: LeagueResult) -> str:
    """The standings and the score matrix as the terminal shows them."""
    lines = [
        f"{result.env_id} · {len(result.players)} players · {result.games_per_pair} seeds per pair and seat · "
        f"{len(result.games)} games ({result.failed_games} failed, not rated)",
        result.format(),
        "ordinal = mu - 3 sigma (openskill Plackett-Luce); score = (wins + draws/2) / games of the row player",
    ]
    if result.run.get("wall_s") is not None:
        lines.append(f"wall time {fmt(result.run['wall_s'], 1)} s")
    return "\n".join(lines)
