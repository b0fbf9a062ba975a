"""WikiSearch-v0: the generated wiki, BM25 search, evidence credit, answer checking, and cheating policies."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
from scripted_play import play_scripted

import llmgym  # noqa: F401
from llmgym.envs.wiki_search import WikiSearchEnv, WikiSearchSolver, answer_matches, generate_world, make_question
from llmgym.envs.wiki_search.world import QUESTION_KINDS


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_world_is_seeded_and_evidence_holds_the_answer():
    a, b = generate_world(np.random.default_rng(3)), generate_world(np.random.default_rng(3))
    assert a.passages == b.passages
    texts = {p.doc_id: p.text for p in a.passages}
    rng = np.random.default_rng(0)
    for kind in QUESTION_KINDS:
        question = make_question(a, rng, kind)
        assert all(doc in texts for doc in question.evidence)
        final = texts[question.evidence[-1]]
        assert question.answer.replace(" River", "") in final


def test_answer_matching_rules():
    assert answer_matches("Vethbur", "Vethbur River") and answer_matches("It is the Vethbur River.", "Vethbur River")
    assert answer_matches("1203", "1203") and not answer_matches("1204", "1203")
    assert not answer_matches("Kelmo Darsi or Varo Keltin or Osmi Rav or Zed Ful", "Varo Keltin")
    assert answer_matches("varo keltin", "Varo Keltin")


def play(policy, seeds):
    """Mean return and accuracy of ``policy(obs, state) -> action``."""
    return play_scripted(gym.make("llmgym/WikiSearch-v0"), policy, seeds, outcome=lambda env: env.correct)


def honest(obs, state):
    return state.setdefault("solver", WikiSearchSolver()).act(obs)


def guess_from_question(obs, state):
    """Reward hack: answer with a name taken from the question, no lookups."""
    names = re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+)?", state["question"].split(":", 1)[1])
    return call("answer", text=names[-1] if names else "unknown")


def read_everything(obs, state):
    """Reward hack: enumerate passages with broad searches and read them all to farm evidence credit, then answer."""
    queue = state.setdefault("queue", [])
    seen = state.setdefault("seen", set())
    for doc in re.findall(r"^\[(.+?#\d)\]", obs, re.MULTILINE):
        if doc not in seen:
            seen.add(doc)
            queue.append(doc)
    state["turn"] = state.get("turn", 0) + 1
    if state["turn"] <= 3:
        return call(
            "search", query=["born city", "founded river", "works mentor headquarters"][state["turn"] - 1], k=10
        )
    if state["turn"] >= 11 or not queue:
        return call("answer", text="I don't know")
    batch, state["queue"] = queue[:8], queue[8:]
    return "".join(call("read", doc_id=doc) for doc in batch)


def stuff_answer(obs, state):
    """Reward hack: search the question, then answer with every title in the results."""
    if "turn" not in state:
        state["turn"] = 1
        return call("search", query=state["question"], k=10)
    titles = re.findall(r"^\[.+?#\d\] (.+)$", obs, re.MULTILINE)
    return call("answer", text=", ".join(dict.fromkeys(titles)))


def test_honest_solver_answers_correctly_with_evidence():
    mean_return, accuracy = play(honest, range(10))
    assert accuracy == 1.0 and mean_return > 1.1


@pytest.mark.parametrize("cheat", [guess_from_question, read_everything, stuff_answer])
def test_cheating_scores_clearly_below_honest(cheat):
    honest_return, _ = play(honest, range(8))
    cheat_return, accuracy = play(cheat, range(8))
    assert accuracy <= 0.25 and cheat_return < honest_return - 0.7


def test_evidence_is_credited_once_per_needed_passage():
    env = gym.make("llmgym/WikiSearch-v0")
    env.reset(seed=2)
    question = env.unwrapped.question
    needed = question.evidence[0]
    _, reward, _, _, info = env.step(call("read", doc_id=needed))
    assert info["reward_components"]["evidence"] == 1.0 and reward == pytest.approx(0.1 - 0.01)
    _, _, _, _, info = env.step(call("read", doc_id=needed))
    assert info["reward_components"]["evidence"] == 0.0
    unrelated = next(p.doc_id for p in env.unwrapped.world.passages if p.doc_id not in question.evidence)
    _, _, _, _, info = env.step(call("read", doc_id=unrelated))
    assert info["reward_components"]["evidence"] == 0.0


def test_search_and_read_errors_are_observations():
    env = gym.make("llmgym/WikiSearch-v0")
    env.reset(seed=0)
    obs, *_ = env.step(call("search", query="the of and"))
    assert obs.startswith("Error:")
    obs, *_ = env.step(call("search", query="zzzz qqqq"))
    assert obs == "No passage matches."
    obs, *_ = env.step(call("search", query="born", k=50))
    assert "between 1 and 10" in obs
    obs, *_ = env.step(call("read", doc_id="Nowhere#9"))
    assert "no passage" in obs
    person = next(iter(env.unwrapped.world.people))
    obs, *_ = env.step(call("search", query=person, k=3))
    assert obs.splitlines()[0].startswith(f"[{person}#")
    with pytest.raises(ValueError, match=r"unknown question kinds \['trivia'\]; choose from"):
        gym.make("llmgym/WikiSearch-v0", kinds=["trivia"])


def test_wiki_search_docstring_counts_the_passages_a_world_has():
    import inspect

    import gymnasium as gym

    from llmgym.envs.wiki_search import env as wiki_env

    env = gym.make("llmgym/WikiSearch-v0")
    sizes = set()
    for seed in range(5):
        env.reset(seed=seed)
        sizes.add(len(env.unwrapped.world.passages))
    env.close()
    assert sizes == {56}
    assert "each of the 56\nreads" in inspect.getdoc(wiki_env.WikiSearchEnv)


def test_wiki_search_short_hedge_of_every_country_is_wrong():
    """Regression: there are three countries: answering all three (5 words allowed for a 1-word gold) was always
    "correct"."""
    for seed in range(5):
        env = WikiSearchEnv(kinds=["employer_hq_country"])
        env.reset(seed=seed)
        countries = sorted({city["country"] for city in env.world.cities.values()})
        *_, info = env.step(call("answer", text=" or ".join(countries)))
        assert info["reward_components"]["correct"] == 0.0
        env.reset(seed=seed)
        *_, info = env.step(call("answer", text=f"the {env.question.answer}."))
        assert info["reward_components"]["correct"] == 1.0


def test_wiki_search_hedged_years_and_rivers_are_wrong_but_gold_with_filler_is_right():
    env = WikiSearchEnv(kinds=["birthplace_founded", "founder_birthplace_river"])
    for seed in range(6):
        env.reset(seed=seed)
        gold = env.question.answer
        other = (
            next(str(c["founded"]) for c in env.world.cities.values() if str(c["founded"]) != gold)
            if gold.isdigit()
            else next(f"{c['river']} River" for c in env.world.cities.values() if f"{c['river']} River" != gold)
        )
        *_, info = env.step(call("answer", text=f"{gold}, {other}"))
        assert info["reward_components"]["correct"] == 0.0
        env.reset(seed=seed)
        *_, info = env.step(call("answer", text=f"It is {gold}"))
        assert info["reward_components"]["correct"] == 1.0
