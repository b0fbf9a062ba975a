"""``llmgym eval <multi-agent id> --opponent SPEC`` end to end through ``main([...])``.

Scripted players, and one slow LLM case.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pettingzoo")

from llmgym.cli import main  # noqa: E402
from llmgym.envs.multiagent.evaluation import RandomPlayer, scripted_players  # noqa: E402
from llmgym.episode import load_jsonl  # noqa: E402

TTT = "llmgym/ma-TicTacToe-v0"


def _eval(tmp_path, env_id, *extra):
    return main(["eval", env_id, "--out", str(tmp_path / "run"), "--no-progress", *extra])


def _json(tmp_path, capsys, env_id, *extra):
    assert _eval(tmp_path, env_id, "--json", *extra) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "run" / "summary.json").read_text())
    return printed, load_jsonl(tmp_path / "run" / "episodes.jsonl")


def test_minimax_against_minimax_draws_every_game_in_both_seats(tmp_path, capsys):
    summary, episodes = _json(
        tmp_path,
        capsys,
        TTT,
        "--policy",
        "scripted:minimax",
        "--opponent",
        "scripted:minimax",
        "-n",
        "3",
        "--group-size",
        "2",
    )
    assert summary["players"] == ["minimax", "minimax#2"] and summary["policy"] == "minimax"
    assert summary["games"] == 12 and summary["failed_games"] == 0 and len(episodes) == 24
    assert summary["matrix"]["minimax"]["minimax#2"] == {
        "win": 0,
        "draw": 12,
        "loss": 0,
        "games": 12,
        "score": 0.5,
        "mean_reward": 0.0,
    }
    assert summary["matrix"]["minimax#2"]["minimax"]["draw"] == 12
    # each policy took each seat in half the games; Episode.policy and the outcome are recorded per agent
    seats = sorted((e.policy, e.metadata["agent"]) for e in episodes)
    assert seats.count(("minimax", "player_0")) == seats.count(("minimax", "player_1")) == 6
    assert {e.metadata["outcome"] for e in episodes} == {"draw"}
    # one GRPO group per seat order and seed, group_size games in it
    groups = {}
    for e in episodes:
        groups.setdefault(e.group, set()).add((e.seed, e.metadata["group_index"]))
    assert len(groups) == 6 and all(len(g) == 2 and len({s for s, _ in g}) == 1 for g in groups.values())


def test_table_output_and_plot_of_the_evaluated_policy(tmp_path, capsys):
    assert (
        _eval(tmp_path, TTT, "--policy", "scripted:minimax", "--opponent", "scripted:random", "-n", "2", "--plot") == 0
    )
    assert "minimax" in capsys.readouterr().out
    png = (tmp_path / "run" / "rewards.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_minimax_beats_random_and_the_matrix_says_who_won(tmp_path, capsys):
    summary, episodes = _json(
        tmp_path, capsys, TTT, "--policy", "scripted:minimax", "--opponent", "scripted:random", "-n", "6"
    )
    cell, mirror = summary["matrix"]["minimax"]["random"], summary["matrix"]["random"]["minimax"]
    assert cell["games"] == 12 and cell["loss"] == 0 and cell["win"] > cell["draw"]
    assert (mirror["win"], mirror["draw"], mirror["loss"]) == (cell["loss"], cell["draw"], cell["win"])
    assert summary["totals"]["minimax"]["score"] > 0.75 > summary["totals"]["random"]["score"]
    wins = sum(e.metadata["outcome"] == "win" for e in episodes if e.policy == "minimax")
    assert wins == cell["win"]
    # the random player does not replay one game: its moves differ across seeds
    moves = {
        tuple(m["content"] for m in e.messages if m["role"] == "assistant") for e in episodes if e.policy == "random"
    }
    assert len(moves) > 3
    assert summary["policy_summary"]["episodes"] == 12


def test_self_play_and_round_robin_table(tmp_path, capsys):
    assert (
        _eval(
            tmp_path,
            TTT,
            "--policy",
            "scripted:minimax",
            "--opponent",
            "self",
            "--opponent",
            "scripted:random",
            "--opponent",
            "scripted:llmgym.envs.multiagent.tictactoe:TextMinimaxPlayer",
            "--round-robin",
            "-n",
            "2",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "W/D/L" in out and "minimax *" in out and "TextMinimaxPlayer" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    text = "TextMinimaxPlayer"
    assert summary["matrix"]["minimax"]["minimax"] == {
        "win": 0,
        "draw": 2,
        "loss": 0,
        "games": 2,
        "score": 0.5,
        "mean_reward": 0.0,
    }
    assert summary["matrix"]["minimax"][text]["draw"] == 4  # a Policy (ScriptedPolicy) opponent, both seats
    assert summary["matrix"][text]["random"]["loss"] == 0 and summary["matrix"][text]["random"]["games"] == 4
    # self-play (2) + two opponents x 2 seats x 2 seeds (8) + round robin between them (4)
    assert summary["games"] == 14


def test_prisoners_dilemma_always_defect_never_loses(tmp_path, capsys):
    summary, _ = _json(
        tmp_path,
        capsys,
        "llmgym/ma-PrisonersDilemma-v0",
        "--policy",
        "scripted:always-defect",
        "--opponent",
        "scripted:random",
        "--opponent",
        "scripted:tit-for-tat",
        "-n",
        "2",
    )
    for other in ("random", "tit-for-tat"):
        assert summary["matrix"]["always-defect"][other]["loss"] == 0
        assert summary["matrix"]["always-defect"][other]["games"] == 4


def test_connect_four_negamax_depth_from_the_name(tmp_path, capsys):
    summary, episodes = _json(
        tmp_path,
        capsys,
        "llmgym/ma-ConnectFour-v0",
        "--policy",
        "scripted:negamax-2",
        "--opponent",
        "scripted:random",
        "-n",
        "1",
    )
    assert summary["matrix"]["negamax-2"]["random"]["win"] == 2
    assert {e.policy for e in episodes} == {"negamax-2", "random"}


def test_a_forfeiting_opponent_loses_every_game_and_the_winner_is_paid_in_both_seats(tmp_path, capsys):
    # the Wordle solver answers tic-tac-toe with five-letter words: three illegal moves forfeit the game,
    # sometimes before minimax (second seat) ever moved; the matrix still credits it the win's +1
    summary, _ = _json(
        tmp_path,
        capsys,
        TTT,
        "--policy",
        "scripted:minimax",
        "--opponent",
        "scripted:llmgym.envs.wordle.solver:WordleSolver",
        "-n",
        "2",
    )
    assert summary["matrix"]["minimax"]["WordleSolver"] | {"score": None} == {
        "win": 4,
        "draw": 0,
        "loss": 0,
        "games": 4,
        "score": None,
        "mean_reward": 1.0,
    }
    assert summary["matrix"]["WordleSolver"]["minimax"]["mean_reward"] < -1.0  # the loss plus the penalties


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([TTT, "--opponent", "bogus"], "bad opponent spec 'bogus'"),
        ([TTT, "--opponent", "url:"], "bad opponent spec"),
        ([TTT, "--opponent", "scripted:nope"], "built-in: minimax, random"),
        ([TTT, "--opponent", "scripted:no.such.module:Player"], "cannot load scripted player"),
        ([TTT, "--opponent", "url:http://127.0.0.1:9/v1@m"], "cannot reach the server"),
        ([TTT, "--opponent", "self", "--resume"], "--resume is not supported"),
        ([TTT, "--opponent", "self", "--env-kwargs", '{"nope": 1}'], "does not take these --env-kwargs"),
        (
            ["llmgym/ma-Negotiation-v0", "--opponent", "self", "--env-kwargs", '{"max_turns": 1}'],
            "max_turns must be >= 2",
        ),
        ([TTT, "--opponent", "self", "--seed", "-1"], "--seed must be >= 0"),
        ([TTT], "is a multi-agent game: pass --opponent"),
        (["llmgym/TicTacToe-v0", "--opponent", "self"], "llmgym eval llmgym/ma-TicTacToe-v0 --opponent"),
        (["llmgym/Wordle-v0", "--opponent", "self"], "needs a multi-agent environment"),
        (["llmgym/ma-TicTacToe-v9", "--opponent", "self"], "Did you mean: llmgym/ma-TicTacToe-v0"),
        (["llmgym/ma-TicTacTo-v0"], "llmgym/ma-TicTacToe-v0"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(tmp_path, capsys, argv, message):
    assert _eval(tmp_path, *argv[:1], "--policy", "scripted:minimax", *argv[1:]) == 2
    assert message in capsys.readouterr().err


def test_random_player_plays_legal_moves_and_refuses_unknown_games():
    from llmgym.envs.multiagent import make_multiagent

    assert set(scripted_players("llmgym/ma-PrisonersDilemma-v0")) >= {"tit-for-tat", "random"}
    game = make_multiagent("llmgym/ma-ConnectFour-v0")
    game.reset(seed=3)
    for _ in range(6):  # fill column 1; the player must then avoid it
        game.step("column 1")
    assert all(RandomPlayer(s).act(game, game.agent_selection) != "column 1" for s in range(20))
    negotiation = make_multiagent("llmgym/ma-Negotiation-v0")
    negotiation.reset(seed=0)
    with pytest.raises(TypeError, match="does not know the moves"):
        RandomPlayer().act(negotiation, "player_0")


@pytest.fixture
def minimax_server(start_scripted_serve):
    """A real ``llmgym serve --backend scripted`` playing text minimax, on a free loopback port."""
    return start_scripted_serve(
        "--model", "llmgym.envs.multiagent.tictactoe:TextMinimaxPlayer", "--model-name", "ttt-bot"
    )


def test_server_policies_as_opponent_and_as_evaluated(tmp_path, capsys, minimax_server):
    summary, episodes = _json(
        tmp_path,
        capsys,
        TTT,
        "--policy",
        "scripted:minimax",
        "--opponent",
        f"url:{minimax_server}",
        "--opponent",
        f"url:{minimax_server}@ttt-bot",
        "-n",
        "2",
    )
    assert summary["players"] == ["minimax", "openai:ttt-bot", "openai:ttt-bot#2"]
    assert all(summary["matrix"]["minimax"][b]["draw"] == 4 for b in summary["players"][1:])
    assert {e.metadata["outcome"] for e in episodes} == {"draw"}
    summary, _ = _json(
        tmp_path,
        capsys,
        TTT,
        "--base-url",
        minimax_server,
        "--opponent",
        "scripted:random",
        "--opponent",
        "self",
        "-n",
        "2",
    )
    assert summary["policy"] == "openai:ttt-bot" and summary["matrix"]["openai:ttt-bot"]["random"]["loss"] == 0
    assert summary["matrix"]["openai:ttt-bot"]["openai:ttt-bot"]["draw"] == 2


@pytest.mark.slow
def test_local_llm_opponent_plays_both_seats(tmp_path, capsys, monkeypatch):
    pytest.importorskip("llama_cpp")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    summary, episodes = _json(
        tmp_path, capsys, TTT, "--policy", "scripted:minimax", "--opponent", "local", "-n", "1", "--max-tokens", "32"
    )
    llm = [e for e in episodes if e.policy != "minimax"]
    assert len(llm) == 2 and {e.metadata["agent"] for e in llm} == {"player_0", "player_1"}
    assert all(e.token_ids for e in llm)
    # the local model decodes the games together on the torch engine, one at a time on llama.cpp's
    assert summary["run"]["concurrency"] == (16 if summary["run"]["engine"] == "torch" else 1)
    assert summary["matrix"]["minimax"][llm[0].policy]["loss"] == 0


def test_a_game_that_cannot_be_built_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    import llmgym.envs.multiagent as multiagent

    def broken(env_id, **kwargs):
        raise OSError("no display")

    monkeypatch.setattr(multiagent, "make_multiagent", broken)
    assert _eval(tmp_path, TTT, "--policy", "scripted:minimax", "--opponent", "self") == 2
    assert "could not be built: OSError: no display" in capsys.readouterr().err
