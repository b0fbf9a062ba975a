"""Leagues (envs/multiagent/league.py, ``llmgym league``): schedule, ratings, league.json and the viewer's table."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("openskill")

from llmgym.cli import main  # noqa: E402
from llmgym.envs.multiagent import tictactoe  # noqa: E402
from llmgym.envs.multiagent.evaluation import RandomPlayer  # noqa: E402
from llmgym.envs.multiagent.league import SCHEMA_VERSION, LeagueResult, rate_games, run_league  # noqa: E402
from llmgym.episode import load_jsonl  # noqa: E402


class _Crashing:
    """A scripted player whose every move raises: its games end unfinished."""

    name = "crashing"

    def act(self, env, agent):
        raise RuntimeError("no move")


def _players():
    return {"minimax": tictactoe.MinimaxPlayer(), "random": RandomPlayer(), "random-b": RandomPlayer(seed=7)}


@pytest.fixture(scope="module")
def league():
    return run_league(tictactoe.env, _players(), games_per_pair=6, seed=3, env_id="llmgym/ma-TicTacToe-v0")


def test_a_perfect_player_is_rated_above_random_movers(league):
    standings = league.standings()
    assert standings[0].name == "minimax"
    assert standings[0].loss == 0 and standings[0].ordinal > max(r.mu for r in standings[1:])
    assert [r.ordinal for r in standings] == sorted((r.ordinal for r in standings), reverse=True)
    for r in standings:
        assert r.ordinal == pytest.approx(r.mu - 3 * r.sigma)


def test_every_pair_plays_the_same_seeds_in_both_seats(league):
    seats = Counter((game["player_0"].policy, game["player_1"].policy, game["player_0"].seed) for game in league.games)
    names = list(_players())
    expected = {(a, b, s) for a in names for b in names if a != b for s in range(3, 9)}
    assert set(seats) == expected and set(seats.values()) == {1}
    assert len(league.games) == 3 * 2 * 6 and league.failed_games == 0
    for r in league.ratings.values():
        assert r.games == 2 * 2 * 6  # two opponents, both seats, six seeds
    episode = league.games[0]["player_1"]
    assert episode.metadata["players"] == {"player_0": "minimax", "player_1": "random"}


def test_the_score_matrix_counts_both_sides(league):
    scores = league.scores()
    for a in league.players:
        assert scores[a][a] is None
        for b in league.players:
            if a != b:
                assert scores[a][b] + scores[b][a] == pytest.approx(1.0)
    counts = league.matrix.counts["minimax"]["random"]
    assert scores["minimax"]["random"] == (counts["win"] + counts["draw"] / 2) / sum(counts.values())


def test_league_json_round_trips_and_names_its_schema(league):
    text = league.to_json()
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION and data["kind"] == "llmgym.league"
    assert [r["name"] for r in data["standings"]] == [r.name for r in league.standings()]
    back = LeagueResult.from_json(text)
    assert back.ratings == league.ratings and back.matrix.counts == league.matrix.counts
    assert back.scores() == league.scores() and back.seed == 3 and back.games_per_pair == 6
    assert back.to_json() == text


def test_a_newer_schema_or_another_file_is_refused(league):
    data = json.loads(league.to_json())
    with pytest.raises(ValueError, match="upgrade llmgym"):
        LeagueResult.from_json(json.dumps({**data, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(ValueError, match="not a league"):
        LeagueResult.from_json(json.dumps({"games": 3}))


def test_the_same_seeds_give_the_same_league(league):
    again = run_league(tictactoe.env, _players(), games_per_pair=6, seed=3, env_id="llmgym/ma-TicTacToe-v0")
    assert again.to_json() == league.to_json()
    other = run_league(tictactoe.env, _players(), games_per_pair=6, seed=40, env_id="llmgym/ma-TicTacToe-v0")
    assert other.to_json() != league.to_json()


def test_draws_are_ties_and_the_rating_is_symmetric():
    drawn = rate_games(["a", "b"], [("a", "b", "draw")] * 4)
    assert drawn["a"].mu == pytest.approx(drawn["b"].mu) == pytest.approx(25.0)
    assert drawn["a"].sigma < 25 / 3  # a draw is information too
    won = rate_games(["a", "b"], [("a", "b", "win"), ("b", "a", "loss")])
    lost = rate_games(["a", "b"], [("b", "a", "win"), ("a", "b", "loss")])
    assert won["a"].mu == pytest.approx(lost["b"].mu) and won["a"].mu > 25


def test_failed_games_are_counted_and_not_rated():
    result = run_league(tictactoe.env, {"minimax": tictactoe.MinimaxPlayer(), "crashing": _Crashing()}, 3)
    assert result.failed_games == 6 and len(result.games) == 6
    assert all(r.games == 0 and r.mu == 25.0 for r in result.ratings.values())
    assert result.scores()["minimax"]["crashing"] == 0.5  # never met: no information


def test_a_league_needs_two_players_and_a_game():
    with pytest.raises(ValueError, match="at least two"):
        run_league(tictactoe.env, {"minimax": tictactoe.MinimaxPlayer()}, 2)
    with pytest.raises(ValueError, match="games_per_pair"):
        run_league(tictactoe.env, _players(), 0)


def test_cli_writes_league_json_and_episodes_under_the_league_names(tmp_path, capsys):
    out = tmp_path / "league"
    status = main(
        ["league", "llmgym/ma-TicTacToe-v0", "--player", "best=scripted:minimax", "--player", "rnd=scripted:random"]
        + ["-n", "2", "--out", str(out), "--no-progress"]
    )
    assert status == 0
    result = LeagueResult.from_json((out / "league.json").read_text())
    assert [r.name for r in result.standings()] == ["best", "rnd"]
    assert result.run["players"] == {"best": "scripted:minimax", "rnd": "scripted:random"}
    episodes = load_jsonl(out / "episodes.jsonl")
    assert len(episodes) == 2 * 2 * 2 and {e.policy for e in episodes} == {"best", "rnd"}
    printed = capsys.readouterr().out
    assert "ordinal" in printed and "best" in printed


@pytest.mark.parametrize(
    ("players", "message"),
    [
        (["a=scripted:minimax"], "at least two --player"),
        (["a=scripted:minimax", "a=scripted:random"], "given twice"),
        (["a=scripted:minimax", "b=self"], "no evaluated policy"),
        (["a=scripted:minimax", "b=scripted:nope"], "--player b: unknown scripted player"),
    ],
)
def test_cli_refuses_bad_players_in_one_line(tmp_path, capsys, players, message):
    flags = [f for p in players for f in ("--player", p)]
    assert main(["league", "llmgym/ma-TicTacToe-v0", *flags, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_single_agent_id(tmp_path, capsys):
    flags = ["--player", "a=scripted:minimax", "--player", "b=scripted:random", "--out", str(tmp_path / "x")]
    assert main(["league", "llmgym/TicTacToe-v0", *flags]) == 2
    assert "needs a multi-agent game" in capsys.readouterr().err


def test_the_viewer_shows_a_league_folder(tmp_path):
    from llmgym.viewer.sources import Viewer

    out = tmp_path / "league"
    flags = ["--player", "best=scripted:minimax", "--player", "rnd=scripted:random", "-n", "1"]
    assert main(["league", "llmgym/ma-TicTacToe-v0", *flags, "--out", str(out), "--no-progress"]) == 0
    source = Viewer([out]).wait().info()["sources"][0]
    assert source["kind"] == "eval" and source["episodes"]["episodes"] == 4
    assert [r["name"] for r in source["league"]["standings"]] == ["best", "rnd"]
