"""Multi-agent evaluation: one player against others in both seats, many games at once, a win/draw/loss matrix.

Holds :func:`evaluate` / :func:`aevaluate` (what ``llmgym eval --opponent``
runs), the :class:`Evaluation` they return (its :meth:`~Evaluation.summary`
is the JSON ``summary.json`` holds), :func:`seat_orders` and
:func:`unique_names`, the games' built-in scripted opponents:
:func:`scripted_players` and :class:`RandomPlayer`, and :class:`MultiAgentGame`,
a multi-agent id as a self-play trainer plays and rates it.

The evaluated player meets each opponent in both seats (itself once, in
self-play), ``group_size`` games per seed, each a GRPO group; with
``round_robin`` the opponents also meet each other. The results are counted
in a :class:`~llmgym.envs.multiagent.rollout.WinMatrix`, as
:func:`~llmgym.envs.multiagent.rollout.win_matrix` counts its games. A game
that an exception stopped is kept among the games and counted in
``failed_games``, not in the matrix.

Example:
    >>> from llmgym.envs.multiagent import tictactoe
    >>> result = evaluate(tictactoe.env, tictactoe.MinimaxPlayer(0), [RandomPlayer()], seeds=[0, 1])
    >>> result.players, result.pairings
    (['minimax', 'random'], [('minimax', 'random'), ('random', 'minimax')])
    >>> result.matrix.counts["random"]["minimax"]["win"], result.summary()["totals"]["minimax"]["games"]
    (0, 4)
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmgym.envs.multiagent.rollout import OUTCOMES, WinMatrix, aplay_match, player_name
from llmgym.episode import Episode
from llmgym.policy import SamplingParams
from llmgym.rollout import run_sync, summarize

__all__ = [
    "evaluate",
    "aevaluate",
    "Evaluation",
    "seat_orders",
    "unique_names",
    "scripted_players",
    "RandomPlayer",
    "MultiAgentGame",
]


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

    Connect Four also takes ``negamax-DEPTH`` and negotiation ``haggler-START-FLOOR``. A curated
    OpenSpiel game (``llmgym/ma-os-<Name>-v0``) has OpenSpiel's bots: ``random`` (a uniformly random
    legal action), and ``mcts`` where the game is turn-based with perfect information (the search
    reads the true state, so a game with hidden cards or simultaneous moves gets none).

    Example:
        >>> sorted(scripted_players("llmgym/ma-TicTacToe-v0"))
        ['minimax', 'random']
    """
    from llmgym.envs.multiagent import (
        OPENSPIEL_GAMES,
        connect_four,
        negotiation,
        openspiel_ids,
        prisoners_dilemma,
        tictactoe,
    )

    by_id = {openspiel_ids(name)[0]: name for name in OPENSPIEL_GAMES}
    if env_id in by_id:
        return _openspiel_bots(by_id[env_id])

    table: dict[str, dict[str, Callable[[], Any]]] = {
        "llmgym/ma-TicTacToe-v0": {"minimax": tictactoe.MinimaxPlayer, "random": RandomPlayer},
        "llmgym/ma-ConnectFour-v0": {"negamax": connect_four.NegamaxPlayer, "random": RandomPlayer},
        "llmgym/ma-Negotiation-v0": {"haggler": negotiation.HagglerPlayer},
        "llmgym/ma-PrisonersDilemma-v0": {
            "tit-for-tat": prisoners_dilemma.TitForTat,
            "always-defect": prisoners_dilemma.AlwaysDefect,
            "always-cooperate": prisoners_dilemma.AlwaysCooperate,
            "random": RandomPlayer,
        },
    }
    return table.get(env_id, {})


def _openspiel_bots(name: str) -> dict[str, Callable[[], Any]]:
    """OpenSpiel's bots for the curated game ``name``: ``random``, and ``mcts`` where it plays fairly."""
    from llmgym.envs.multiagent import OPENSPIEL_GAMES
    from llmgym.envs.multiagent.openspiel_text import OpenSpielText
    from llmgym.envs.multiagent.openspiel_versus import MCTSBot, RandomBot

    game, params, _ = OPENSPIEL_GAMES[name]
    text = OpenSpielText(game, params)
    bots: dict[str, Callable[[], Any]] = {"random": RandomBot}
    if text.perfect_information and not text.simultaneous:
        bots["mcts"] = lambda: MCTSBot(text)
    return bots


class MultiAgentGame:
    """A multi-agent id as a self-play trainer plays it: its agents, one game of given players, its scripted
    players, a rated league and, in Kuhn and Leduc poker, a model's NashConv.

    The trainers never import the envs (docs/architecture.md): ``llmgym train grpo`` builds this for a
    multi-agent id and hands it to the trainer (``GRPOTrainer(config, game=MultiAgentGame(...))``).

    Args:
        env_id: a multi-agent id (:data:`llmgym.envs.multiagent.MULTIAGENT_ENVS`).
        env_kwargs: the env's keyword arguments.

    Raises:
        ValueError: an unknown id; or the env refuses ``env_kwargs`` (``TypeError`` for an unknown argument).

    Example:
        >>> from llmgym.envs.multiagent import tictactoe
        >>> game = MultiAgentGame("llmgym/ma-TicTacToe-v0")
        >>> game.agents, sorted(game.scripted)
        (['player_0', 'player_1'], ['minimax', 'random'])
        >>> episodes = run_sync(game.play({"player_0": RandomPlayer(), "player_1": tictactoe.MinimaxPlayer()}, 0))
        >>> episodes["player_1"].metadata["outcome"], episodes["player_0"].metadata["illegal_moves"]
        ('win', 0)
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        env = self.make()
        #: The game's agents (its seats), in seat order.
        self.agents: list[str] = list(env.unwrapped.possible_agents)
        #: The env's ``max_turns`` where it has one, else 1.
        self.max_turns = int(getattr(env.unwrapped, "max_turns", 1))
        env.close()
        #: The game's scripted players: name -> factory (:func:`scripted_players`).
        self.scripted = scripted_players(env_id)

    def make(self) -> Any:
        """A fresh env of the game."""
        from llmgym.envs.multiagent import make_multiagent

        return make_multiagent(self.env_id, **self.env_kwargs)

    async def play(
        self, players: dict[str, Any], seed: int, sampling: SamplingParams | None = None
    ) -> dict[str, Episode]:
        """One game (:func:`~llmgym.envs.multiagent.rollout.aplay_match`); each agent's episode records in
        ``metadata["illegal_moves"]`` how many of its replies the env refused (the envs count them per agent)."""
        built: list[Any] = []

        def make() -> Any:
            built.append(self.make())
            return built[-1]

        [episodes] = await aplay_match(make, players, [seed], sampling=sampling, env_id=self.env_id)
        counted = getattr(built[-1].unwrapped, "illegal_attempts", None) if built else None
        for agent, episode in episodes.items():
            episode.metadata["illegal_moves"] = int((counted or {}).get(agent, 0))
        return episodes

    def league(
        self, players: dict[str, Any], games_per_pair: int, seed: int, sampling: SamplingParams, max_concurrency: int
    ) -> Any:
        """:func:`~llmgym.envs.multiagent.league.run_league` of ``players`` on this game."""
        from llmgym.envs.multiagent.league import run_league

        return run_league(
            self.make,
            players,
            games_per_pair,
            seed,
            sampling=sampling,
            max_concurrency=max_concurrency,
            env_id=self.env_id,
        )

    def nash_conv(self, model: Any, tokenizer: Any) -> float:
        """The NashConv of a causal LM's policy in this game, read by
        :class:`~llmgym.envs.multiagent.exploitability.LLMScorer` at every information state.

        Raises:
            ValueError: the game is not a curated OpenSpiel game small enough to score (Kuhn, Leduc poker).
        """
        from llmgym.envs.multiagent import OPENSPIEL_GAMES, openspiel_ids

        small = {openspiel_ids(name)[0]: name for name in ("KuhnPoker", "LeducPoker")}
        if self.env_id not in small:
            raise ValueError(f"NashConv is computed for {', '.join(small)}, not {self.env_id}")
        from llmgym.envs.multiagent.exploitability import LLMScorer, nash_conv, scored_policy
        from llmgym.envs.multiagent.openspiel_text import OpenSpielText

        game, params, _ = OPENSPIEL_GAMES[small[self.env_id]]
        text = OpenSpielText(game, {**params, **self.env_kwargs.get("params", {})})
        return nash_conv(text.game, scored_policy(text, LLMScorer(model, tokenizer)))


def unique_names(players: list[Any]) -> list[str]:
    """Distinct record names for the players (the same object keeps one name); sets each renamed player's ``name``.

    Example:
        >>> from llmgym.envs.multiagent import tictactoe
        >>> a, b = tictactoe.MinimaxPlayer(0), tictactoe.MinimaxPlayer(1)
        >>> unique_names([a, b, a]), b.name
        (['minimax', 'minimax#2', 'minimax'], 'minimax#2')
    """
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


def seat_orders(names: list[str], round_robin: bool = False) -> list[tuple[str, str]]:
    """The ``(player_0, player_1)`` orders to play: ``names[0]`` against each other name in both seats.

    The evaluated player meets itself once (self-play); with ``round_robin`` the others also meet
    each other in both seats.

    Example:
        >>> seat_orders(["me", "me", "a", "b"], round_robin=True)
        [('me', 'me'), ('me', 'a'), ('a', 'me'), ('me', 'b'), ('b', 'me'), ('a', 'b'), ('b', 'a')]
    """
    me = names[0]
    orders: list[tuple[str, str]] = []
    for name in dict.fromkeys(names[1:]):
        orders += [(me, me)] if name == me else [(me, name), (name, me)]
    if round_robin:
        rest = [n for n in dict.fromkeys(names[1:]) if n != me]
        orders += [(a, b) for a in rest for b in rest if a != b]
    return orders


@dataclass
class Evaluation:
    """The games of an evaluation and their win/draw/loss matrix.

    Attributes:
        policy: the evaluated player's name.
        players: every player's name, the evaluated one first.
        pairings: the ``(player_0, player_1)`` orders played.
        games: each game's episodes by agent, in the order the games were scheduled.
        matrix: the finished games' results, counted from each side.
    """

    policy: str
    players: list[str]
    pairings: list[tuple[str, str]]
    games: list[dict[str, Episode]]
    matrix: WinMatrix

    @property
    def failed_games(self) -> int:
        """Games an exception stopped (a player's or the env's): in :attr:`games`, not in :attr:`matrix`."""
        return sum(any("error" in e.metadata for e in game.values()) for game in self.games)

    def episodes_of(self, name: str) -> list[Episode]:
        """The episodes ``name`` played, every seat."""
        return [e for game in self.games for e in game.values() if e.policy == name]

    def summary(self) -> dict[str, Any]:
        """The results as plain data (``summary.json``).

        ``matrix[a][b]`` holds a's wins, draws, losses, games, score ((wins + draws / 2) / games) and mean
        reward against b, both seats together; a self-play game counts once, from ``player_0``'s side (a
        "win" is a first-mover win). ``totals[a]`` sums a's games against the others (self-play left out).
        Score and mean reward are ``None`` where no game finished. ``policy_summary`` is the evaluated
        player's episodes summarized as a single-agent evaluation's.
        """
        matrix = {
            a: {b: _cell(self.matrix.counts[a][b], self.matrix.mean_reward[a][b]) for b in self.players}
            for a in self.players
        }
        return {
            "games": len(self.games),
            "failed_games": self.failed_games,
            "episodes": 2 * len(self.games),
            "policy": self.policy,
            "players": self.players,
            "pairings": [list(o) for o in self.pairings],
            "matrix": matrix,
            "totals": {a: self._totals(a) for a in self.players},
            "policy_summary": summarize(self.episodes_of(self.policy)),
        }

    def _totals(self, a: str) -> dict[str, Any]:
        others = [b for b in self.players if b != a]
        counts = {k: sum(self.matrix.counts[a][b][k] for b in others) for k in OUTCOMES}
        games = {b: sum(self.matrix.counts[a][b].values()) for b in others}
        reward = sum(self.matrix.mean_reward[a][b] * games[b] for b in others)
        return _cell(counts, reward / max(1, sum(games.values())))


def _cell(counts: dict[str, int], mean_reward: float) -> dict[str, Any]:
    n = sum(counts.values())
    return {
        **counts,
        "games": n,
        "score": (counts["win"] + counts["draw"] / 2) / n if n else None,
        "mean_reward": mean_reward if n else None,
    }


async def aevaluate(
    env_factory: Callable[[], Any],
    evaluated: Any,
    opponents: list[Any],
    seeds: Iterable[int],
    *,
    group_size: int = 1,
    round_robin: bool = False,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
    on_game: Callable[[dict[str, Episode]], None] | None = None,
) -> Evaluation:
    """Play ``evaluated`` against each of ``opponents`` in both seats (see :func:`evaluate`)."""
    players = [evaluated, *opponents]
    names = unique_names(players)
    by_name = dict(zip(names, players))
    orders = seat_orders(names, round_robin)
    seed_list = [int(s) for s in seeds]
    sampling = sampling or SamplingParams()
    limit = asyncio.Semaphore(max_concurrency)

    async def one(order: int, seed_index: int, member: int) -> dict[str, Episode]:
        first, second = orders[order]
        game_sampling = sampling
        if sampling.seed is not None:  # each game its own sampler seed, a function of where it stands
            entropy = [sampling.seed % 2**32, seed_list[seed_index] % 2**32, member, order]
            game_seed = int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)
            game_sampling = dataclasses.replace(sampling, seed=game_seed)
        async with limit:
            game = (
                await aplay_match(
                    env_factory,
                    {"player_0": by_name[first], "player_1": by_name[second]},
                    [seed_list[seed_index]],
                    sampling=game_sampling,
                    env_id=env_id,
                )
            )[0]
        for episode in game.values():
            episode.group = order * len(seed_list) + seed_index  # one GRPO group per seat order and seed
            episode.metadata["group_index"] = member
        if on_game is not None:
            on_game(game)
        return game

    jobs = [(o, s, m) for o in range(len(orders)) for s in range(len(seed_list)) for m in range(group_size)]
    games = list(await asyncio.gather(*(one(*job) for job in jobs)))
    seated = [
        ((orders[order][0], game["player_0"]), (orders[order][1], game["player_1"]))
        for (order, _, _), game in zip(jobs, games)
    ]
    players_named = list(dict.fromkeys(names))
    return Evaluation(names[0], players_named, orders, games, WinMatrix.from_games(players_named, seated))


def evaluate(
    env_factory: Callable[[], Any],
    evaluated: Any,
    opponents: list[Any],
    seeds: Iterable[int],
    *,
    group_size: int = 1,
    round_robin: bool = False,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
    on_game: Callable[[dict[str, Episode]], None] | None = None,
) -> Evaluation:
    """Play ``evaluated`` against each of ``opponents`` in both seats, ``group_size`` games per seed.

    Args:
        env_factory: builds a fresh two-player PettingZoo env with agents ``player_0`` and ``player_1``.
        evaluated: the player evaluated: a :class:`~llmgym.policy.Policy` or a scripted player
            (``act(env, agent) -> str``).
        opponents: its opponents; ``evaluated`` itself among them is self-play. Players with the same
            name are renamed ``name#2``... (:func:`unique_names`).
        seeds: the game seeds.
        group_size: games per seat order and seed (one GRPO group: ``Episode.group``, and
            ``metadata["group_index"]`` within it).
        round_robin: also play the opponents against each other.
        sampling: sampling settings for policies; with a ``seed``, each game samples with its own
            seed derived from it, the game's seed, its place in the group and its seat order.
        max_concurrency: games played at once.
        env_id: the id recorded in the episodes.
        on_game: called with each game's episodes (by agent) as it ends, e.g. to stream them to JSONL.

    Returns:
        The games and their matrix.
    """
    return run_sync(
        aevaluate(
            env_factory,
            evaluated,
            opponents,
            seeds,
            group_size=group_size,
            round_robin=round_robin,
            sampling=sampling,
            max_concurrency=max_concurrency,
            env_id=env_id,
            on_game=on_game,
        )
    )
