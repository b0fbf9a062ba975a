"""WordleCompact-v0 (plain words, the running summary), its old id, and the answer split both Wordle envs draw from."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import llmgym  # noqa: F401
from llmgym.envs.wordle.env import answer_split, load_words
from llmgym.envs.wordle.solver import RandomGuesser, WordleSampler
from llmgym.rollout import rollout
from llmgym.wrappers.scripted import load_scripted


def answer_shown(episode) -> str:
    """The answer of a finished game, as its last observation shows it (solved, or "The word was ...")."""
    found = re.search(r"(?m)^([A-Z]{5}) G G G G G$|The word was ([A-Z]{5})", episode.messages[-1]["content"])
    return (found.group(1) or found.group(2)).lower()


def test_the_split_holds_out_every_fifth_answer():
    answers = load_words()[0]
    train, test = answer_split("train"), answer_split("test")
    assert len(test) == 400 and len(train) == 1600 and not set(train) & set(test)
    assert set(train) | set(test) == set(answers) and answer_split("all") == answers
    assert test[:2] == (answers[4], answers[9])
    with pytest.raises(ValueError, match="answers must be one of all, train, test"):
        answer_split("dev")


@pytest.mark.parametrize("env_id", ["llmgym/Wordle-v0", "llmgym/WordleCompact-v0"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_episodes_draw_their_answer_from_the_split(env_id, split):
    env = gym.make(env_id, answers=split)
    drawn = set()
    for seed in range(60):
        env.reset(seed=seed)
        drawn.add(env.unwrapped.answer)
    assert drawn <= set(answer_split(split)) and len(drawn) > 40


@pytest.mark.parametrize("env_id", ["llmgym/Wordle-v0", "llmgym/WordleCompact-v1"])
def test_answer_by_seed_plays_every_answer_of_the_split_once(env_id):
    """An evaluation over seeds 0 .. 399 with answer_by_seed=True meets each held-out answer exactly once."""
    env = gym.make(env_id, answers="test", answer_by_seed=True)
    played = []
    for seed in range(400):
        env.reset(seed=seed)
        played.append(env.unwrapped.answer)
    assert played == list(answer_split("test"))
    env.reset(seed=401)
    assert env.unwrapped.answer == played[1]
    env.reset(seed=0, options={"answer": "crane"})
    assert env.unwrapped.answer == "crane"


@pytest.mark.parametrize("env_id", ["llmgym/WordleCompact-v0", "llmgym/WordleCompact-v1"])
def test_training_episodes_never_have_a_held_out_answer(env_id):
    """Held out means no held-out word is ever the answer of a training episode, over seeds enough to draw nearly
    every training answer."""
    env = gym.make(env_id, answers="train")
    drawn = set()
    for seed in range(5000):
        env.reset(seed=seed)
        drawn.add(env.unwrapped.answer)
    assert not drawn & set(answer_split("test")) and len(drawn) > 1500


def test_bad_split_name_is_a_clear_error():
    with pytest.raises(ValueError, match="answers must be one of"):
        gym.make("llmgym/WordleCompact-v0", answers="holdout")


def test_compact_plays_plain_words_with_a_running_summary():
    env = gym.make("llmgym/WordleCompact-v0")
    obs, info = env.reset(options={"answer": "swept"})
    assert info["tools"] == [] and "Reply with one word" in env.unwrapped.system_prompt
    obs, reward, terminated, truncated, info = env.step("taser")
    assert obs.splitlines() == ["TASER Y x Y Y x", "Known: _____, also E S T; not A R", "5 guesses left."]
    obs, *_ = env.step("Guess: SLEPT")
    assert obs.splitlines()[1] == "Known: S_EPT; not A L R"
    obs, reward, terminated, truncated, info = env.step("swept")
    assert terminated and obs.endswith("Solved in 3 guesses!") and "Known" not in obs
    assert info["reward_components"]["solved"] == 1.0


def test_compact_answers_mistakes_with_an_observation_and_a_penalty():
    env = gym.make("llmgym/WordleCompact-v0")
    env.reset(options={"answer": "swept"})
    obs, reward, *_, info = env.step("I think the answer is a fruit.")
    assert obs == "No guess found. Reply with one five-letter word." and info["reward_components"]["invalid_guess"] == 1
    obs, *_ = env.step("qzxvw")
    assert obs == "Error: 'qzxvw' is not in the word list; guess a real English word."
    obs, *_ = env.step('<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>')
    assert "unknown tool" in obs  # the compact variant has no tools: the reply is the word


def test_compact_has_six_replies_by_default():
    env = gym.make("llmgym/WordleCompact-v0")
    env.reset(options={"answer": "swept"})
    for _ in range(5):
        *_, terminated, truncated, _ = env.step("hello there")
        assert not (terminated or truncated)
    obs, _, terminated, truncated, _ = env.step("hello there")
    assert truncated and obs.endswith("Out of turns. The word was SWEPT.")


def test_the_sampler_knows_every_common_word_but_plays_on_training_answers():
    """The teacher's vocabulary is the whole common list (held-out words appear as guesses); the answers of its
    training episodes come from the env's split, never the held-out words."""
    episodes = rollout(
        "llmgym/WordleCompact-v1", load_scripted("wordle-sampler"), seeds=range(40), env_kwargs={"answers": "train"}
    )
    solved = sum(e.component_totals().get("solved", 0) for e in episodes)
    guesses = {m["content"] for e in episodes for m in e.messages if m["role"] == "assistant"}
    answers = {answer_shown(e) for e in episodes}
    held_out = set(answer_split("test"))
    assert solved >= 38 and guesses & held_out and not answers & held_out
    assert len({e.messages[4]["content"] for e in episodes}) > 10  # second guesses vary: no single decision tree


@pytest.mark.parametrize("env_id", ["llmgym/WordleCompact-v0", "llmgym/WordleCompact-v1", "llmgym/Wordle-v0"])
def test_the_sampler_plays_every_plain_word_wordle(env_id):
    episodes = rollout(env_id, load_scripted("wordle-sampler"), seeds=range(10), env_kwargs={"answers": "test"})
    assert sum(e.component_totals()["solved"] for e in episodes) >= 9
    assert all(e.component_totals()["invalid_guess"] == 0 for e in episodes)


def test_the_sampler_falls_back_to_any_word_that_fits_when_no_common_word_does():
    env = gym.make("llmgym/WordleCompact-v1")
    rare = next(w for w in sorted(load_words()[1]) if w not in load_words()[0])
    obs, _ = env.reset(seed=0, options={"answer": rare})
    sampler, done = WordleSampler(), False
    while not done:
        obs, _, terminated, truncated, _ = env.step(sampler.act(obs))
        done = terminated or truncated
    assert env.unwrapped.solved


def test_scripted_players_replay_the_same_choice_for_the_same_chat():
    first = "Guess the five-letter word. You have 6 guesses."
    later = "TASER Y x Y Y x\nKnown: _____, also E S T; not A R\n5 guesses left."
    for player in (WordleSampler, RandomGuesser):
        one, two = player(), player()
        assert [one.act(first), one.act(later)] == [two.act(first), two.act(later)]


def test_random_guesser_guesses_valid_words():
    episodes = rollout("llmgym/WordleCompact-v0", load_scripted("wordle-random"), seeds=range(5))
    assert all(e.component_totals()["invalid_guess"] == 0 for e in episodes)
