"""EmailQA-v0 can be deep-copied and pickled mid-episode: the copy plays on like the original, on its own database."""

from __future__ import annotations

import copy
import json
import pickle

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.email_qa import EmailQASolver, generate_inbox


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _step(env, action):
    obs, reward, terminated, truncated, info = env.step(action)
    return obs, reward, terminated, truncated, json.dumps(info, sort_keys=True, default=str)


def _clones(env):
    return {"deepcopy": copy.deepcopy(env), "pickle": pickle.loads(pickle.dumps(env))}


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_taken_mid_episode_plays_on_like_the_original(how):
    env = gym.make("llmgym/EmailQA-v0").unwrapped
    obs, _ = env.reset(seed=0)
    solver = EmailQASolver()
    first = solver.act(obs)
    obs, *_ = env.step(first)  # a search
    env.step(call("search_emails", keywords=["invoice"]))  # a second, unrelated search
    clone = _clones(env)[how]
    assert clone.inbox.db is not env.inbox.db

    actions = [solver.act(obs), call("search_emails", keywords=["flight"], max_results=3)]
    trace_original = [_step(env, a) for a in actions]
    trace_clone = [_step(clone, a) for a in actions]
    assert trace_clone == trace_original
    answer = solver.act(trace_original[0][0])
    assert _step(clone, answer) == _step(env, answer)
    assert clone.outcome() == env.outcome() == 1.0
    env.close()
    clone.close()


def test_closing_the_original_leaves_the_copies_working_and_the_other_way_round():
    env = gym.make("llmgym/EmailQA-v0").unwrapped
    env.reset(seed=5)
    search = call("search_emails", keywords=["meeting"])
    clones = list(_clones(env).values())
    env.close()
    results = [clone.step(search)[0] for clone in clones]
    assert results[0] == results[1] and results[0].startswith("[")
    clones[0].close()
    assert clones[1].step(search)[0] == results[0]
    clones[1].close()

    env = gym.make("llmgym/EmailQA-v0").unwrapped
    env.reset(seed=5)
    clone = copy.deepcopy(env)
    clone.close()
    assert env.step(search)[0] == results[0]
    env.close()


def test_copies_of_a_fresh_and_of_a_closed_env_can_be_reset():
    fresh = gym.make("llmgym/EmailQA-v0").unwrapped
    closed = gym.make("llmgym/EmailQA-v0").unwrapped
    closed.reset(seed=1)
    closed.close()
    for env in (fresh, closed):
        for clone in _clones(env).values():
            obs, _ = clone.reset(seed=2)
            assert "Question:" in obs
            assert clone.step(call("search_emails", keywords=["the"]))[0]
            clone.close()


def test_an_inbox_copy_has_its_own_database_with_the_same_rows():
    inbox = generate_inbox(np.random.default_rng(0))
    twin = pickle.loads(pickle.dumps(inbox))
    query = (
        "SELECT emails.id, emails.subject FROM emails_fts JOIN emails ON emails.id = emails_fts.rowid "
        "WHERE emails_fts MATCH 'invoice'"
    )
    assert twin.db is not inbox.db and twin.emails == inbox.emails and twin.facts == inbox.facts
    assert twin.db.execute(query).fetchall() == inbox.db.execute(query).fetchall()
    inbox.db.close()
    assert twin.db.execute("SELECT count(*) FROM emails").fetchone()[0] == len(twin.emails)
