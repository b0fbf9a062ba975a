"""``llmgym eval`` on multi-agent games: players built from specs, matches in both seats, a win/draw/loss matrix.

Holds :func:`scripted_players` (the built-in scripted players of each
multi-agent game), :func:`build_player` (a player from an ``--opponent``
spec: ``scripted:NAME``, ``self``, ``local[:BACKEND[:MODEL]]``,
``url:BASE_URL[@MODEL]``), :class:`RandomPlayer` and :func:`run_multiagent`,
the multi-agent branch of ``llmgym eval``. Games come from
``llmgym.envs.multiagent`` (the ``multiagent`` extra); everything is imported
inside the functions so the CLI starts fast.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import time
import zlib
from pathlib import Path
from typing import Any, Callable

from llmgym.cli import CLIError

__all__ = ["SELF", "RandomPlayer", "scripted_players", "build_player", "run_multiagent", "OPPONENT_HELP"]

#: The ``--opponent`` spec that makes the evaluated policy play itself.
SELF = "self"

OPPONENT_HELP = (
    "an opponent for a multi-agent game (llmgym/ma-*), repeatable: scripted:NAME (the game's scripted players, "
    "e.g. scripted:minimax for tic-tac-toe, or scripted:module:Class), self (self-play), "
    "local[:BACKEND[:MODEL]] or url:BASE_URL[@MODEL] (an OpenAI-compatible server)"
)
OUTCOMES = ("win", "draw", "loss")


class RandomPlayer:
    """Plays a uniformly random legal move (tic-tac-toe, Connect Four) or a random C/D (prisoner's dilemma).

    The choice is a function of ``seed``, the game's seed and the position, so
    the player keeps no state between calls and many games can share it, yet
    different seeds give different games.

    Args:
        seed: varies the choices.

    Example:
        >>> from llmgym.envs.multiagent import tictactoe
        >>> game = tictactoe.env(); game.reset(seed=0)
        >>> move = RandomPlayer().act(game, "player_0")
        >>> move in {f"{c}{r}" for c in "abc" for r in "123"}
        True
    """

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def act(self, env: Any, agent: str) -> str:
        import numpy as np

        game = env.unwrapped
        if hasattr(game, "board"):  # tic-tac-toe: 9 characters, "." is free
            from llmgym.envs.multiagent.tictactoe import cell_name

            moves = [cell_name(i) for i, c in enumerate(game.board) if c == "."]
            position = game.board
        elif hasattr(game, "columns"):  # Connect Four: bottom-up column strings
            from llmgym.envs.multiagent.connect_four import ROWS

            moves = [f"column {i + 1}" for i, c in enumerate(game.columns) if len(c) < ROWS]
            position = "|".join(game.columns)
        elif hasattr(game, "history") and "prisoner" in type(game).__name__.lower():
            moves, position = ["C", "D"], str(len(game.history))
        else:
            raise TypeError(f"RandomPlayer does not know the moves of {type(game).__name__}")
        # the game's generator state depends on its seed; read, never drawn from
        game_seed = zlib.crc32(repr(game.np_random.bit_generator.state).encode())
        rng = np.random.default_rng([self.seed, game_seed, zlib.crc32(f"{agent}:{position}".encode())])
        return moves[int(rng.integers(len(moves)))]


def scripted_players(env_id: str) -> dict[str, Callable[[], Any]]:
    """The built-in scripted players of a multi-agent game: name -> factory.

    Connect Four also takes ``negamax-DEPTH`` and negotiation ``haggler-START-FLOOR``.

    Example:
        >>> sorted(scripted_players("llmgym/ma-TicTacToe-v0"))
        ['minimax', 'random']
    """
    from llmgym.envs.multiagent import connect_four, negotiation, prisoners_dilemma, tictactoe

    table: dict[str, dict[str, Callable[[], Any]]] = {
        "llmgym/ma-TicTacToe-v0": {"minimax": tictactoe.MinimaxPlayer, "random": RandomPlayer},
        "llmgym/ma-ConnectFour-v0": {"negamax": connect_four.NegamaxPlayer, "random": RandomPlayer},
        "llmgym/ma-Negotiation-v0": {"haggler": negotiation.HagglerPlayer},
        "llmgym/ma-PrisonersDilemma-v0": {
            "tit-for-tat": prisoners_dilemma.TitForTat, "always-defect": prisoners_dilemma.AlwaysDefect,
            "always-cooperate": prisoners_dilemma.AlwaysCooperate, "random": RandomPlayer,
        },
    }
    return table.get(env_id, {})


def _scripted(env_id: str, name: str) -> Any:
    """A scripted player by name for ``env_id``, or an import path ``module:Class``."""
    players = scripted_players(env_id)
    if name in players:
        return players[name]()
    head, _, rest = name.partition("-")
    if head in ("negamax", "haggler") and head in players and rest:
        try:
            numbers = [int(x) for x in rest.split("-")]
            return players[head](*numbers)
        except (ValueError, TypeError) as err:
            raise CLIError(f"bad scripted player {name!r}: {err}") from None
    if ":" not in name:
        known = ", ".join(sorted(players)) or "none"
        raise CLIError(f"unknown scripted player {name!r} for {env_id}; built-in: {known} "
                       "(or an import path like scripted:mypackage.module:MyPlayer)")
    from llmgym.wrappers.scripted import import_user_module

    module_name, _, attr = name.partition(":")
    try:
        factory = getattr(import_user_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise CLIError(f"cannot load scripted player {name!r}: {err}") from None
    act = getattr(factory, "act", None)
    if act is None:
        raise CLIError(f"scripted player {name!r} has no act() method")
    if len(inspect.signature(act).parameters) >= 3:  # act(self, env, agent): a game-aware player
        return factory()
    from llmgym.wrappers.scripted import ScriptedPolicy

    return ScriptedPolicy(factory, name=attr)  # act(observation) -> str, replayed from the chat


def build_player(spec: str, env_id: str, args: argparse.Namespace, evaluated: Any = None) -> Any:
    """The player an ``--opponent`` (or multi-agent ``--policy``) spec names.

    Args:
        spec: ``scripted:NAME``, ``self``, ``local[:BACKEND[:MODEL]]`` or ``url:BASE_URL[@MODEL]``.
        env_id: the multi-agent game (for scripted names).
        args: the eval arguments (API key, concurrency).
        evaluated: the evaluated policy, returned for ``self``.

    Raises:
        CLIError: a malformed spec, an unknown name, a missing extra, an unreachable server.
    """
    from llmgym.cli.eval import _check_server, _missing_extra

    kind, _, rest = spec.partition(":")
    try:
        if spec == SELF:
            if evaluated is None:
                raise CLIError("'self' is an opponent spec (the evaluated policy plays itself), not a --policy")
            return evaluated
        if kind == "scripted" and rest:
            return _scripted(env_id, rest)
        if kind == "local":
            backend, _, model = rest.partition(":")
            from llmgym.wrappers.models import load_policy

            try:
                return load_policy(backend or "llama.cpp", model or None)
            except (OSError, ValueError) as err:
                raise CLIError(f"cannot load the opponent {spec!r}: {err}") from None
        if kind == "url" and rest:
            url, model = rest, None
            at = rest.rfind("@")
            if at > 0 and "/" not in rest[at:]:
                url, model = rest[:at], rest[at + 1:] or None
            models = _check_server(url, args.api_key)
            model = model or (models[0] if models else None)
            if model is None:
                raise CLIError(f"{url} lists no models; name one: url:{url}@MODEL")
            from llmgym.wrappers.openai_policy import OpenAIPolicy

            return OpenAIPolicy(model, base_url=url, api_key=args.api_key, return_tokens=False,
                                max_concurrency=args.concurrency or 32)
    except ImportError as err:
        raise CLIError(_missing_extra(err)) from None
    raise CLIError(f"bad opponent spec {spec!r}: use scripted:NAME, self, local[:BACKEND[:MODEL]] "
                   "or url:BASE_URL[@MODEL]")


def _unique_names(players: list[Any]) -> list[str]:
    """Distinct record names for the players (the same object keeps one name); sets each player's ``name``."""
    from llmgym.envs.multiagent.rollout import player_name

    names: list[str] = []
    seen: dict[int, str] = {}
    for player in players:
        if id(player) in seen:
            names.append(seen[id(player)])
            continue
        base = name = player_name(player)
        k = 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        if name != player_name(player):
            player.name = name  # an instance attribute: Episode.policy must tell the two apart
        seen[id(player)] = name
        names.append(name)
    return names


def run_multiagent(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> int:
    """The multi-agent branch of ``llmgym eval``: the evaluated policy against each ``--opponent``.

    Every opponent plays ``-n`` seeds x ``--group-size`` games with the
    evaluated policy in each seat (self-play: one seat order); ``--round-robin``
    adds the opponents against each other. Episodes (one per agent per game)
    stream to ``OUT/episodes.jsonl``; ``OUT/summary.json`` holds the matrix.
    """
    import numpy as np

    from llmgym.envs.multiagent import MULTIAGENT_ENVS, make_multiagent
    from llmgym.envs.multiagent.rollout import aplay_match
    from llmgym.episode import JSONLWriter
    from llmgym.policy import Policy, SamplingParams
    from llmgym.rollout import summarize

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
        evaluated = _scripted(env_id, name)
    else:
        from llmgym.cli.eval import _build_policy

        evaluated = _build_policy(args)
    opponents: list[Any] = []
    try:
        for spec in args.opponent:
            opponents.append(build_player(spec, env_id, args, evaluated))
    except CLIError:
        for player in {id(p): p for p in [evaluated, *opponents]}.values():
            if isinstance(player, Policy):
                player.close()
        raise
    players = [evaluated, *opponents]
    names = _unique_names(players)
    by_name = dict(zip(names, players))
    me = names[0]

    orders: list[tuple[str, str]] = []  # (player_0, player_1)
    for name in dict.fromkeys(names[1:]):
        orders += [(me, me)] if name == me else [(me, name), (name, me)]
    if args.round_robin:
        rest = [n for n in dict.fromkeys(names[1:]) if n != me]
        orders += [(a, b) for a in rest for b in rest if a != b]
    seeds = list(range(args.seed, args.seed + args.num_seeds))
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed)
    jobs = [(o, s, m) for o in range(len(orders)) for s in range(len(seeds)) for m in range(args.group_size)]
    out = Path(args.out)
    path = out / "episodes.jsonl"
    if path.exists() and not args.json:
        print(f"replacing {path}")

    def factory() -> Any:
        return make_multiagent(env_id, **env_kwargs)

    async def play_all(writer: JSONLWriter, bar: Any) -> list[dict[str, Any]]:
        limit = asyncio.Semaphore(args.concurrency)

        async def one(order: int, seed_index: int, member: int) -> dict[str, Any]:
            first, second = orders[order]
            entropy = [args.seed % 2**32, seeds[seed_index] % 2**32, member, order]
            game_sampling = dataclasses.replace(sampling, seed=int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1))
            async with limit:
                game = (await aplay_match(factory, {"player_0": by_name[first], "player_1": by_name[second]},
                                          [seeds[seed_index]], sampling=game_sampling, env_id=env_id))[0]
            for episode in game.values():
                episode.group = order * len(seeds) + seed_index  # one GRPO group per seat order and seed
                episode.metadata["group_index"] = member
                writer.write(episode)
            if bar is not None:
                bar.advance(bar.task_ids[0])
            return game

        return list(await asyncio.gather(*(one(*job) for job in jobs)))

    started = time.perf_counter()
    bar = None
    if not args.no_progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(TextColumn("games"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                       console=Console(stderr=True))
        bar.add_task("games", total=len(jobs))
        bar.start()
    try:
        with JSONLWriter(path, append=False) as writer:
            games = asyncio.run(play_all(writer, bar))
    finally:
        if bar is not None:
            bar.stop()
        for player in {id(p): p for p in players}.values():
            if isinstance(player, Policy):
                player.close()
    wall = time.perf_counter() - started

    summary = _summarize(games, names, me, orders)
    mine = [e for g in games for e in g.values() if e.policy == me]
    summary["policy_summary"] = summarize(mine)
    summary["run"] = {
        "env_id": env_id, "policy": me, "opponents": list(args.opponent), "players": list(dict.fromkeys(names)),
        "seeds": [seeds[0], seeds[-1]], "group_size": args.group_size, "round_robin": args.round_robin,
        "concurrency": args.concurrency, "sampling": vars(sampling), "env_kwargs": env_kwargs,
        "wall_s": wall, "episodes_file": str(path),
    }
    from llmgym.cli.eval import exit_status, report_summary

    report_summary(summary, args, out, mine, _print_matrix)
    return exit_status(summary["failed_games"], summary["games"], "game", (e for g in games for e in g.values()))


def _summarize(games: list[dict[str, Any]], names: list[str], me: str, orders: list[tuple[str, str]]) -> dict[str, Any]:
    """The matrix: ``matrix[a][b]`` is a's wins/draws/losses, score and mean reward against b, both seats together.

    A self-play game counts once, from ``player_0``'s side (a "win" is a first-mover win);
    ``totals[a]`` sums a's games against the others (self-play left out).

    Example:
        >>> from llmgym.episode import Episode
        >>> def ep(policy, agent, outcome):
        ...     return Episode("g", seed=0, turn_rewards=[{"win": 1.0, "loss": -1.0}.get(outcome, 0.0)],
        ...                    policy=policy, metadata={"agent": agent, "outcome": outcome})
        >>> s = _summarize([{"player_0": ep("a", "player_0", "win"), "player_1": ep("b", "player_1", "loss")}],
        ...                ["a", "b"], "a", [("a", "b")])
        >>> s["matrix"]["a"]["b"]["win"], s["matrix"]["b"]["a"]["loss"], s["totals"]["a"]["score"]
        (1, 1, 1.0)
    """
    players = list(dict.fromkeys(names))
    cells = {a: {b: {"win": 0, "draw": 0, "loss": 0, "reward": 0.0} for b in players} for a in players}
    failed = 0
    for game in games:
        first, second = game["player_0"], game["player_1"]
        if any("error" in e.metadata for e in (first, second)):
            failed += 1
            continue
        sides = [(first, second)] if first.policy == second.policy else [(first, second), (second, first)]
        for mine, theirs in sides:
            outcome = mine.metadata.get("outcome")
            if outcome in OUTCOMES:
                cell = cells[mine.policy][theirs.policy]
                cell[outcome] += 1
                # a game can end before a seat ever moved (the first mover forfeits): its result is then
                # in metadata, not in a turn reward
                cell["reward"] += mine.total_reward + mine.metadata.get("reward_before_first_turn", 0.0)

    def finish(c: dict[str, Any]) -> dict[str, Any]:
        n = c["win"] + c["draw"] + c["loss"]
        return {"win": c["win"], "draw": c["draw"], "loss": c["loss"], "games": n,
                "score": (c["win"] + c["draw"] / 2) / n if n else None, "mean_reward": c["reward"] / n if n else None}

    matrix = {a: {b: finish(cells[a][b]) for b in players} for a in players}
    totals = {}
    for a in players:
        summed = {k: sum(cells[a][b][k] for b in players if b != a) for k in ("win", "draw", "loss", "reward")}
        totals[a] = finish(summed)
    return {"games": len(games), "failed_games": failed, "episodes": 2 * len(games), "policy": me,
            "players": players, "pairings": [list(o) for o in orders], "matrix": matrix, "totals": totals}


def _print_matrix(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    run, players = summary["run"], summary["players"]
    table = Table("W/D/L", *map(escape, players), "score", "mean reward",
                  title=escape(f"{run['env_id']} · {summary['games']} games · {run['wall_s']:.1f} s"),
                  caption="row player's wins/draws/losses against the column player, both seats; "
                  "score and mean reward: against the others; self-play counts first-mover results; * = evaluated")
    for a in players:
        row = []
        for b in players:
            c = summary["matrix"][a][b]
            row.append(f"{c['win']}/{c['draw']}/{c['loss']}" if c["games"] else "-")
        total = summary["totals"][a]
        score = "-" if total["score"] is None else f"{total['score']:.3f}"
        reward = "-" if total["mean_reward"] is None else f"{total['mean_reward']:.3f}"
        table.add_row(escape(a) + (" *" if a == summary["policy"] else ""), *row, score, reward)
    console = Console()
    if not console.is_terminal:  # a file or a pipe: no need to wrap the names
        console = Console(width=max(80, 30 + max(len(n) for n in players) + sum(max(len(n), 6) + 3 for n in players)))
    console.print(table)
    if summary["failed_games"]:
        print(f"{summary['failed_games']} failed games are not counted")
