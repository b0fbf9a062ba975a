"""EmailQA-v0: the generated inbox, FTS5 search, the abstain-vs-hallucinate rewards, sources, and cheating policies."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import gymnasium as gym
import numpy as np
import pytest
from scripted_play import play_scripted

import llmgym  # noqa: F401
from llmgym.envs.email_qa import EmailQASolver, answer_is_right, generate_inbox, is_abstention, make_question


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_inbox_is_seeded_and_questions_point_at_their_source():
    a, b = generate_inbox(np.random.default_rng(4)), generate_inbox(np.random.default_rng(4))
    assert a.emails == b.emails and a.owner == b.owner
    rng = np.random.default_rng(0)
    answerable = 0
    for _ in range(30):
        question = make_question(a, rng)
        if question.answer is None:
            assert question.sources == ()
            continue
        answerable += 1
        email = a.emails[question.sources[0] - 1]
        assert question.answer in email.body + " ".join(email.attachments)
    assert 0 < answerable < 30  # both kinds of question were checked, not only unanswerable ones


def test_answer_rules():
    assert is_abstention("I don't know.") and is_abstention("") and is_abstention("not found in the inbox")
    assert not is_abstention("BGM419")
    assert answer_is_right("It is BGM419", "BGM419") and not answer_is_right("BGM418", "BGM419")
    assert not answer_is_right("BGM419 or XYZ123", "BGM419")


def play(policy, seeds):
    """Mean return of ``policy(obs, state) -> action``."""
    return play_scripted(gym.make("llmgym/EmailQA-v0"), policy, seeds)[0]


def honest(obs, state):
    return state.setdefault("solver", EmailQASolver()).act(obs)


def always_idk(obs, state):
    """Never risks anything: 'I don't know' at once."""
    return call("answer", text="I don't know", sources=[])


def hallucinate(obs, state):
    """Reward hack: answer at once with something that looks like an answer."""
    return call("answer", text="QWE123", sources=[1])


def cite_everything(obs, state):
    """Reward hack: one broad search, answer with the first snippet's code-like words, cite every email seen."""
    if "searched" not in state:
        state["searched"] = True
        keyword = re.search(r"(flight|invoice|kickoff|order|file)", state["question"])
        return call("search_emails", keywords=[keyword.group(1) if keyword else "the"], max_results=20)
    ids = [int(i) for i in re.findall(r"^\[(\d+)\]", obs, re.MULTILINE)]
    codes = re.findall(r"\b[A-Z]{2,3}\d{3,8}\b|\$[\d.]+", obs)
    return call("answer", text=" or ".join(codes) or "QWE123", sources=ids)


def test_honest_solver_is_right_with_sources():
    env = gym.make("llmgym/EmailQA-v0")
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        solver, done = EmailQASolver(), False
        while not done:
            obs, reward, terminated, truncated, info = env.step(solver.act(obs))
            done = terminated or truncated
        assert env.unwrapped.outcome() == 1.0 and info["reward_components"]["sources"] == 1.0
    env.close()
    assert play(honest, range(10)) > 1.3


def test_hallucinating_scores_below_abstaining_below_honest():
    seeds = range(12)
    honest_return, idk_return, guess_return = play(honest, seeds), play(always_idk, seeds), play(hallucinate, seeds)
    assert guess_return < idk_return < honest_return - 0.7
    assert guess_return < 0


def test_citing_everything_does_not_pay():
    assert play(cite_everything, range(12)) < play(honest, range(12)) - 1.0


def test_search_filters_and_errors():
    env = gym.make("llmgym/EmailQA-v0")
    env.reset(seed=1)
    inbox = env.unwrapped.inbox
    obs, *_ = env.step(call("search_emails", keywords=["flight"], sender="skyway"))
    assert obs != "No emails match." and all("skyway" in line for line in obs.splitlines())
    obs, *_ = env.step(call("search_emails", keywords=["flight"], before="1999-01-01"))
    assert obs == "No emails match."
    obs, *_ = env.step(call("search_emails", keywords=["flight"], after="someday"))
    assert "YYYY-MM-DD" in obs
    obs, *_ = env.step(call("search_emails", keywords=['"); DROP TABLE emails; --']))
    assert obs == "No emails match." and inbox.db.execute("SELECT count(*) FROM emails").fetchone()[0] == len(
        inbox.emails
    )
    obs, *_ = env.step(call("search_emails", keywords=[]))
    assert "at least one keyword" in obs
    obs, *_ = env.step(call("read_email", email_id=10_000))
    assert "no email" in obs
    obs, reward, terminated, truncated, info = env.step(call("read_email", email_id="seven"))
    assert info["reward_components"]["format_error"] == 1.0
    env.close()
    with pytest.raises(ValueError, match=r"unanswerable_rate must be in \[0, 1\], got 2.0"):
        gym.make("llmgym/EmailQA-v0", unanswerable_rate=2.0)


def test_email_qa_short_hedge_listing_every_candidate_is_not_paid():
    """Reward hack: answer with every fact of the question's kind (no "or", under 12 words): was always right."""
    from llmgym.envs.email_qa import EmailQAEnv

    env = EmailQAEnv(unanswerable_rate=0.0)
    hedged = 0
    for seed in range(30):
        env.reset(seed=seed)
        question = env.question
        candidates = [fact["answer"] for kind, fact in env.inbox.facts if kind == question.kind]
        if len(candidates) < 2:
            continue
        hedged += 1
        env.step(call("answer", text=" ".join(candidates), sources=[]))
        assert env.outcome() == -1.0
        env.reset(seed=seed)  # the honest answer still pays
        env.step(call("answer", text=f"It is {question.answer}.", sources=[]))
        assert env.outcome() == 1.0
    assert hedged >= 5
    env.close()


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("$300", "$300.00"),
        ("$1204.5", "$1204.50"),
        ("The amount is $1,204.50.", "$1204.50"),
        ("1204.50", "$1204.50"),
        ("$ 300.0 due 2024-05-01", "$300.00"),
    ],
)
def test_email_qa_equal_amounts_are_right(text, gold):
    assert answer_is_right(text, gold)


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("$1204.05", "$1204.50"),
        ("$1204", "$1204.50"),
        ("$3000", "$300.00"),
        ("$30.00", "$300.00"),
        ("$300 or $400", "$300.00"),
        ("QWE123", "$300.00"),
    ],
)
def test_email_qa_other_amounts_are_wrong(text, gold):
    assert not answer_is_right(text, gold)


def test_email_qa_text_answers_unchanged():
    assert answer_is_right("The code is BGM419.", "BGM419") and not answer_is_right("BGM418", "BGM419")
    assert answer_is_right("maple 12", "Maple 12") and not answer_is_right("Maple 1", "Maple 12")


def _invoice_episode():
    env = gym.make("llmgym/EmailQA-v0")
    for seed in range(200):
        env.reset(seed=seed)
        question = env.unwrapped.question
        if question.kind == "invoice" and question.answer.endswith("0"):
            return env, question
    raise AssertionError("no invoice question with a trailing zero in 200 seeds")


def test_email_qa_amount_without_trailing_zeros_scores_right():
    env, question = _invoice_episode()
    short = "$" + str(Decimal(question.answer[1:])).rstrip("0").rstrip(".")
    assert short != question.answer
    _, _, terminated, _, info = env.step(call("answer", text=short, sources=list(question.sources)))
    assert terminated and info["reward_components"]["outcome"] == 1.0


def test_email_qa_wrong_amount_is_still_a_hallucination():
    env, question = _invoice_episode()
    wrong = "$" + str(Decimal(question.answer[1:]) + Decimal("0.01"))
    _, _, terminated, _, info = env.step(call("answer", text=wrong, sources=list(question.sources)))
    assert terminated and info["reward_components"]["outcome"] == -1.0
