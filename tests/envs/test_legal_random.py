"""``scripted:legal-random``: reading the listed legal actions, the seeded uniform draw, and every reply legal in
Kuhn poker (50 games), Leduc poker and Tic-Tac-Toe (20 each), multi-agent in both seats and single-agent, through
the library and through ``llmgym eval``."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("pettingzoo")

from llmgym.cli import main  # noqa: E402
from llmgym.envs.multiagent import make_multiagent  # noqa: E402
from llmgym.envs.multiagent.evaluation import evaluate  # noqa: E402
from llmgym.envs.multiagent.legal_random import LegalRandom, listed_actions  # noqa: E402
from llmgym.envs.multiagent.openspiel_versus import RandomBot  # noqa: E402
from llmgym.episode import load_jsonl  # noqa: E402
from llmgym.rollout import rollout  # noqa: E402
from llmgym.wrappers.scripted import load_scripted  # noqa: E402

KUHN_VIEW = "Your view (player 0):\n1\nLegal actions:\nPass\nBet\nYour move (player 0): reply with exactly one of them."


def test_the_last_list_of_the_observation_is_read_up_to_the_request_to_move():
    retry = "Illegal move: no legal action; reply with exactly one of the legal actions: Call, Raise\n" + KUHN_VIEW
    earlier = "Your view (player 0):\nLegal actions:\nFold\nCall\nRaise\n\nplayer 1 moved.\n\n"
    assert listed_actions(earlier + retry) == ["Pass", "Bet"]
    assert listed_actions("Legal actions:\nx(0,0)\n x(2,2) ") == ["x(0,0)", "x(2,2)"]  # to the end, spaces trimmed
    assert listed_actions("Game over. Returns: player 0: -1, player 1: 1.") == []


def test_an_observation_without_legal_actions_is_refused_with_what_the_player_plays():
    with pytest.raises(ValueError, match="no 'Legal actions:' list.*llmgym/ma-os"):
        LegalRandom().act("Guess the five-letter word.")


def test_the_same_chat_gets_the_same_action_and_draws_are_uniform_over_the_list():
    assert len({LegalRandom(seed=3).act(KUHN_VIEW) for _ in range(5)}) == 1
    board = "Legal actions:\n" + "\n".join(f"x({r},{c})" for r in range(3) for c in range(3))
    counts = Counter(LegalRandom(seed=seed).act(board) for seed in range(900))
    assert set(counts) == set(listed_actions(board))
    assert max(counts.values()) < 140 and min(counts.values()) > 60  # 100 each expected, sd ~9.4
    # a later observation with the same list is a new draw: the history seeds it
    player = LegalRandom(seed=0)
    draws = [player.act(f"player 1 moved ({turn}).\n{board}") for turn in range(40)]
    assert len(set(draws)) > 5


def legal_replies(episode) -> tuple[int, int]:
    """(replies, replies naming exactly one action of the list just shown) in one player's chat."""
    replies = legal = 0
    for message, reply in zip(episode.messages, episode.messages[1:]):
        if reply["role"] != "assistant":
            continue
        replies += 1
        legal += reply["content"] in listed_actions(str(message["content"]))
    return replies, legal


@pytest.mark.parametrize(
    ("env_id", "seeds"),
    [("llmgym/ma-os-KuhnPoker-v0", 25), ("llmgym/ma-os-LeducPoker-v0", 10), ("llmgym/ma-os-TicTacToe-v0", 10)],
)
def test_every_reply_is_legal_in_both_seats(env_id, seeds):
    teacher = load_scripted("legal-random")
    result = evaluate(lambda: make_multiagent(env_id), teacher, [RandomBot()], seeds=range(seeds), env_id=env_id)
    assert len(result.games) == 2 * seeds and result.failed_games == 0
    episodes = result.episodes_of(teacher.name)
    assert {e.metadata["agent"] for e in episodes} == {"player_0", "player_1"}
    counted = [legal_replies(e) for e in episodes]
    replies = sum(r for r, _ in counted)
    assert replies >= 2 * seeds and sum(legal for _, legal in counted) == replies
    chats = "".join(str(m["content"]) for e in episodes for m in e.messages)
    assert "Illegal move" not in chats and "forfeit" not in chats


def test_every_reply_is_legal_against_the_single_agent_bot():
    episodes = rollout("llmgym/os-KuhnPoker-v0", load_scripted("legal-random"), seeds=range(20))
    assert all(e.terminated and e.component_totals()["format_error"] == 0 for e in episodes)
    assert all(replies == legal for replies, legal in map(legal_replies, episodes))


def test_llmgym_eval_plays_it_as_the_evaluated_policy_of_a_multi_agent_game(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", "llmgym/ma-os-KuhnPoker-v0", "--policy", "scripted:legal-random", "--opponent", "scripted:random"]
    assert main([*argv, "-n", "4", "--out", str(out), "--no-progress"]) == 0
    mine = [e for e in load_jsonl(out / "episodes.jsonl") if e.policy == "LegalRandom"]
    assert len(mine) == 8 and {e.metadata["agent"] for e in mine} == {"player_0", "player_1"}
    assert all(replies == legal for replies, legal in map(legal_replies, mine))
