"""A league: every player against every other in both seats, rated with openskill's Plackett-Luce model.

Holds :func:`run_league` / :func:`arun_league`, the :class:`LeagueResult` they return (with
:meth:`~LeagueResult.to_json` / :meth:`~LeagueResult.from_json`, what ``league.json`` holds), the
:class:`PlayerRating` of each player, :func:`rate_games` and :data:`SCHEMA_VERSION`.

Every pair of players plays ``games_per_pair`` seeds in each seat order (``2 * games_per_pair``
games a pair), the same seeds for every pair, through
:func:`~llmgym.envs.multiagent.rollout.aplay_match`. The finished games are then rated in rounds:
round ``i`` holds every seat order's ``i``-th seed, in schedule order, so no pair's games all come
before another's (an online rating depends on the order it sees games in). A win ranks the winner
first, a draw is a tie; a game an exception stopped is left out of the ratings and counted in
``failed_games``. openskill needs no randomness, so the ratings are a function of the games, and
the games of scripted players a function of the seeds.

A rating is ``mu`` (the estimated skill) and ``sigma`` (its uncertainty); the standings sort by
``ordinal = mu - 3 * sigma``, a conservative skill that a player with few or erratic games does not
top by luck. Plackett-Luce starts everyone at mu 25, sigma 25/3. Ratings are relative to this
league's players: compare them within one league, never across leagues.

Example:
    >>> from llmgym.envs.multiagent import tictactoe
    >>> from llmgym.envs.multiagent.evaluation import RandomPlayer
    >>> result = run_league(tictactoe.env, {"minimax": tictactoe.MinimaxPlayer(), "random": RandomPlayer()},
    ...                     games_per_pair=4, seed=0)
    >>> [r.name for r in result.standings()], result.ratings["random"].games
    (['minimax', 'random'], 8)
    >>> LeagueResult.from_json(result.to_json()).ratings == result.ratings
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

from llmgym.envs.multiagent.rollout import OUTCOMES, WinMatrix, aplay_match
from llmgym.episode import Episode
from llmgym.policy import SamplingParams
from llmgym.rollout import run_sync

__all__ = ["run_league", "arun_league", "LeagueResult", "PlayerRating", "rate_games", "SCHEMA_VERSION"]

#: The version of ``league.json``'s layout; :meth:`LeagueResult.from_json` reads this one and older.
SCHEMA_VERSION = 1
#: The two seats, first mover first.
SEATS = ("player_0", "player_1")
#: The first-seat player's outcome -> the Plackett-Luce ranks of (first seat, second seat); 0 is best.
RANKS = {"win": [0, 1], "draw": [0, 0], "loss": [1, 0]}


@dataclass(frozen=True)
class PlayerRating:
    """One player's rating and record in a league.

    Attributes:
        name: the player's league name.
        mu: the estimated skill.
        sigma: the uncertainty of ``mu``.
        ordinal: ``mu - 3 * sigma``, what the standings sort by.
        win: games won, both seats.
        draw: games drawn.
        loss: games lost.
    """

    name: str
    mu: float
    sigma: float
    ordinal: float
    win: int
    draw: int
    loss: int

    @property
    def games(self) -> int:
        """Finished games played."""
        return self.win + self.draw + self.loss

    @property
    def score(self) -> float | None:
        """(wins + draws / 2) / games, or ``None`` without a finished game."""
        return (self.win + self.draw / 2) / self.games if self.games else None


@dataclass
class LeagueResult:
    """The ratings, records and games of a league.

    Attributes:
        env_id: the game (the id recorded in the episodes).
        players: the players' names, in the order given.
        games_per_pair: seeds each pair played in each seat order.
        seed: the first seed; the seeds are ``seed .. seed + games_per_pair - 1``.
        ratings: name -> rating and record.
        matrix: every pair's results from the row player's side, both seats together.
        failed_games: games an exception stopped (a player's or the env's): not rated, not in ``matrix``.
        run: what produced the league (the CLI records its flags here); plain JSON data.
        games: each game's episodes by agent, in schedule order; not written to JSON.
    """

    env_id: str
    players: list[str]
    games_per_pair: int
    seed: int
    ratings: dict[str, PlayerRating]
    matrix: WinMatrix
    failed_games: int = 0
    run: dict[str, Any] = field(default_factory=dict)
    games: list[dict[str, Episode]] = field(default_factory=list, repr=False)

    def standings(self) -> list[PlayerRating]:
        """The ratings, highest ordinal first (ties: in the order the players were given)."""
        order = {name: i for i, name in enumerate(self.players)}
        return sorted(self.ratings.values(), key=lambda r: (-r.ordinal, order[r.name]))

    def scores(self) -> dict[str, dict[str, float | None]]:
        """``scores[a][b]``: a's score against b, (wins + draws / 2) / games; ``None`` on the diagonal."""
        return {a: {b: None if a == b else self.matrix.score(a, b) for b in self.players} for a in self.players}

    def to_json(self) -> str:
        """``league.json``'s text: the schema version, the standings, the score and W/D/L matrices, the run."""
        data = {
            "schema_version": SCHEMA_VERSION,
            "kind": "llmgym.league",
            "env_id": self.env_id,
            "players": self.players,
            "games_per_pair": self.games_per_pair,
            "seeds": [self.seed, self.seed + self.games_per_pair - 1],
            "games": len(self.players) * (len(self.players) - 1) * self.games_per_pair,
            "failed_games": self.failed_games,
            "rating_model": {"name": "PlackettLuce", "ordinal": "mu - 3 * sigma", "order": "rounds of seeds"},
            "standings": [{**asdict(r), "games": r.games, "score": r.score} for r in self.standings()],
            "scores": self.scores(),
            "counts": self.matrix.counts,
            "mean_reward": self.matrix.mean_reward,
            "run": self.run,
        }
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> LeagueResult:
        """The league that :meth:`to_json` wrote (without its games).

        Raises:
            ValueError: ``text`` is not a league, or one of a newer schema (upgrade llmgym to read it).
        """
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("kind") != "llmgym.league":
            raise ValueError("not a league.json: its 'kind' is not 'llmgym.league'")
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(
                f"league.json has schema version {version!r}; this llmgym reads up to {SCHEMA_VERSION}: upgrade llmgym"
            )
        fields = ("name", "mu", "sigma", "ordinal", "win", "draw", "loss")
        ratings = {r["name"]: PlayerRating(**{k: r[k] for k in fields}) for r in data["standings"]}
        players = list(data["players"])
        return cls(
            env_id=data["env_id"],
            players=players,
            games_per_pair=data["games_per_pair"],
            seed=data["seeds"][0],
            ratings={name: ratings[name] for name in players},
            matrix=WinMatrix(players, data["counts"], data["mean_reward"]),
            failed_games=data["failed_games"],
            run=data.get("run", {}),
        )

    def format(self) -> str:
        """A text table: the standings, then each player's score against each other."""
        width = max(10, *(len(n) for n in self.players)) + 2
        lines = [f"{'player':<{width}}{'ordinal':>9}{'mu':>8}{'sigma':>8}   W/D/L"]
        for r in self.standings():
            lines.append(f"{r.name:<{width}}{r.ordinal:>9.2f}{r.mu:>8.2f}{r.sigma:>8.2f}   {r.win}/{r.draw}/{r.loss}")
        lines += ["", "score".ljust(width) + "".join(n.ljust(width) for n in self.players)]
        for a, row in self.scores().items():
            cells = ("-" if s is None else f"{s:.3f}" for s in row.values())
            lines.append(a.ljust(width) + "".join(c.ljust(width) for c in cells))
        return "\n".join(lines)


def rate_games(names: list[str], games: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
    """openskill Plackett-Luce ratings of ``names`` after ``games``, rated in the order given.

    Args:
        names: every player (each starts at mu 25, sigma 25/3).
        games: ``(first seat, second seat, the first seat's outcome)``, outcome ``"win"``, ``"draw"`` or
            ``"loss"``.

    Returns:
        name -> its openskill rating (``mu``, ``sigma``, ``ordinal()``).

    Example:
        >>> ratings = rate_games(["a", "b"], [("a", "b", "win"), ("b", "a", "loss")])
        >>> ratings["a"].mu > 25 > ratings["b"].mu, round(ratings["a"].mu + ratings["b"].mu, 6)
        (True, 50.0)
    """
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    ratings = {name: model.rating(name=name) for name in names}
    for first, second, outcome in games:
        [[ratings[first]], [ratings[second]]] = model.rate([[ratings[first]], [ratings[second]]], ranks=RANKS[outcome])
    return ratings


def _schedule(names: list[str]) -> list[tuple[str, str]]:
    """The seat orders a league plays: each pair, in the order the names come, in both seats."""
    return [order for a, b in combinations(names, 2) for order in ((a, b), (b, a))]


async def arun_league(
    env_factory: Callable[[], Any],
    players: dict[str, Any],
    games_per_pair: int,
    seed: int = 0,
    *,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
    on_game: Callable[[dict[str, Episode]], None] | None = None,
) -> LeagueResult:
    """Play and rate a league (see :func:`run_league`)."""
    names = list(players)
    if len(names) < 2:
        raise ValueError(f"a league needs at least two players, got {names}")
    if games_per_pair < 1:
        raise ValueError(f"games_per_pair must be >= 1, got {games_per_pair}")
    seeds = list(range(seed, seed + games_per_pair))
    orders = _schedule(names)
    played: list[list[dict[str, Episode]]] = []
    for first, second in orders:
        games = await aplay_match(
            env_factory,
            {SEATS[0]: players[first], SEATS[1]: players[second]},
            seeds,
            sampling=sampling,
            max_concurrency=max_concurrency,
            env_id=env_id,
        )
        for game in games:
            _name_seats(game, first, second)
            if on_game is not None:
                on_game(game)
        played.append(games)
    return _result(env_id, names, seed, orders, played)


def _name_seats(game: dict[str, Episode], first: str, second: str) -> None:
    """Record the league names in a game's episodes (``policy``, ``metadata["players"]``), not the players' own."""
    names = dict(zip(SEATS, (first, second)))
    for agent, episode in game.items():
        episode.policy = names[agent]
        episode.metadata["players"] = names


def _result(
    env_id: str, names: list[str], seed: int, orders: list[tuple[str, str]], played: list[list[dict[str, Episode]]]
) -> LeagueResult:
    """Rate the games of each seat order (``played[k]``: order ``k``'s games, seeds in order) in rounds of seeds."""
    rounds = [(order, games[i]) for i in range(len(played[0])) for order, games in zip(orders, played)]
    finished = [(order, game) for order, game in rounds if game[SEATS[0]].metadata.get("outcome") in OUTCOMES]
    ratings = rate_games(names, ((a, b, game[SEATS[0]].metadata["outcome"]) for (a, b), game in finished))
    matrix = WinMatrix.from_games(names, (((a, g[SEATS[0]]), (b, g[SEATS[1]])) for (a, b), g in rounds))
    record = {a: {k: sum(matrix.counts[a][b][k] for b in names) for k in OUTCOMES} for a in names}
    return LeagueResult(
        env_id=env_id,
        players=names,
        games_per_pair=len(played[0]),
        seed=seed,
        ratings={n: PlayerRating(n, ratings[n].mu, ratings[n].sigma, ratings[n].ordinal(), **record[n]) for n in names},
        matrix=matrix,
        failed_games=len(rounds) - len(finished),
        games=[game for games in played for game in games],
    )


def run_league(
    env_factory: Callable[[], Any],
    players: dict[str, Any],
    games_per_pair: int,
    seed: int = 0,
    *,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 8,
    env_id: str = "",
    on_game: Callable[[dict[str, Episode]], None] | None = None,
) -> LeagueResult:
    """Play every pair of ``players`` on seeds ``seed .. seed + games_per_pair - 1`` in both seats, and rate them.

    Args:
        env_factory: builds a fresh two-player PettingZoo env with agents ``player_0`` and ``player_1``.
        players: league name -> a :class:`~llmgym.policy.Policy` or a scripted player (``act(env, agent)``).
            The names, not the players' own, are recorded in the episodes and the ratings.
        games_per_pair: seeds each pair plays in each seat order (``2 * games_per_pair`` games a pair).
        seed: the first seed.
        sampling: sampling settings for policies; with a ``seed``, each game samples with its own.
        max_concurrency: games played at once (within one seat order).
        env_id: the id recorded in the episodes and the result.
        on_game: called with each game's episodes (by agent), e.g. to stream them to JSONL.

    Returns:
        The ratings, the W/D/L and score matrices and the games.

    Raises:
        ValueError: fewer than two players, ``games_per_pair < 1``, or a game whose agents are not
            ``player_0`` and ``player_1``.
    """
    return run_sync(
        arun_league(
            env_factory,
            players,
            games_per_pair,
            seed,
            sampling=sampling,
            max_concurrency=max_concurrency,
            env_id=env_id,
            on_game=on_game,
        )
    )
