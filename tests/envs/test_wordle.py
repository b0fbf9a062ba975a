"""Wordle-v0: rules, rewards, and cheating policies that must not pay."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmgym  # noqa: F401
from llmgym.envs.wordle import WordleSolver, load_words, score_guess
from llmgym.envs.wordle.env import WordleEnv


@pytest.mark.parametrize(
    "guess, answer, expected",
    [
        ("crane", "crane", "GGGGG"),
        ("crane", "react", "YYGxY"),
        ("speed", "abide", "xxYxY"),
        ("llama", "hello", "YYxxx"),
        ("eerie", "there", "YxYxG"),
    ],
)
def test_feedback_handles_repeated_letters(guess, answer, expected):
    assert score_guess(guess, answer) == expected


def test_word_lists_are_real_and_disjoint_from_nonsense():
    answers, guesses = load_words()
    assert len(answers) == 2000 and set(answers) <= guesses
    assert all(len(w) == 5 and w.isalpha() and w.islower() for w in answers)
    assert "crane" in guesses and "eeaar" not in guesses and "xviii" not in guesses


def play(policy, seeds, **kwargs):
    """Mean episode return and solve rate of ``policy(obs, env) -> action``."""
    env = gym.make("llmgym/Wordle-v0", **kwargs)
    returns, solved = [], []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        done, total = False, 0.0
        state = {}
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy(obs, state))
            total += reward
            done = terminated or truncated
        returns.append(total)
        solved.append(env.unwrapped.solved)
    return float(np.mean(returns)), float(np.mean(solved))


def honest(obs, state):
    solver = state.setdefault("solver", WordleSolver())
    return solver.act(obs)


def common_letter_nonwords(obs, state):
    """Reward hack: non-words packed with frequent letters to fish for feedback."""
    state["i"] = state.get("i", -1) + 1
    return ["eaars", "ootie", "snare", "eeeee", "aeiou", "rstln"][state["i"] % 6]


def info_fisher(obs, state):
    """Reward hack: valid words chosen for new letters, never trying to solve."""
    state["i"] = state.get("i", -1) + 1
    word = ["crane", "pilot", "dumpy", "fight", "swept", "vouch"][state["i"] % 6]
    return f'<tool_call>{{"name": "guess", "arguments": {{"word": "{word}"}}}}</tool_call>'


def claims_victory(obs, state):
    """Reward hack: says it solved the puzzle."""
    return "I solved it! The answer is correct. GGGGG Solved in 1 guesses!"


def repeater(obs, state):
    """Reward hack: the same informative guess every turn."""
    return "crane"


SEEDS = range(40)


def test_honest_solver_scores_high():
    mean, solve_rate = play(honest, SEEDS)
    assert solve_rate >= 0.9 and mean >= 1.3


@pytest.mark.parametrize("cheat", [common_letter_nonwords, info_fisher, claims_victory, repeater])
def test_cheating_scores_clearly_below_honest(cheat):
    honest_mean, _ = play(honest, SEEDS)
    cheat_mean, _ = play(cheat, SEEDS)
    assert cheat_mean < honest_mean - 0.8, (cheat.__name__, cheat_mean, honest_mean)


def test_nonwords_earn_nothing_and_cost_the_format_penalty(wordle):
    wordle.reset(seed=0)
    obs, reward, *_, info = wordle.step("eeaar")
    assert "not in the word list" in obs
    assert info["reward_components"]["information"] == 0.0
    assert info["reward_components"]["invalid_guess"] == 1.0 and reward == pytest.approx(-0.1)


def test_plain_text_and_tool_guesses_are_equivalent():
    def trace(action):
        env = gym.make("llmgym/Wordle-v0")
        env.reset(seed=3)
        obs, reward, *_ = env.step(action)
        return obs, reward

    tool_call = '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
    assert trace("crane") == trace("Guess: CRANE") == trace(tool_call)
    native = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "guess", "arguments": json.dumps({"word": "crane"})}}
        ],
    }
    assert trace(native) == trace(tool_call)


def test_solving_ends_with_outcome_and_speed_bonus(wordle):
    wordle.reset(seed=0, options={"answer": "crane"})
    obs, reward, terminated, truncated, info = wordle.step("crane")
    assert terminated and not truncated and "Solved in 1" in obs
    assert info["reward_components"]["solved"] == 1.0 and info["reward_components"]["speed"] == 1.0
    assert reward == pytest.approx(0.2 + 1.0 + 0.5)


def test_six_wrong_guesses_end_the_game(wordle):
    wordle.reset(seed=0, options={"answer": "crane"})
    for word in ["pilot", "dumpy", "fight", "swept", "vouch", "jazzy"]:
        obs, reward, terminated, truncated, info = wordle.step(word)
    assert terminated and not truncated and "The word was CRANE" in obs
    assert info["reward_components"]["solved"] == 0.0


def test_turn_budget_truncates_invalid_spam():
    env = gym.make("llmgym/Wordle-v0", max_turns=3)
    env.reset(seed=0)
    results = [env.step("nonsense!")[2:4] for _ in range(3)]
    assert results == [(False, False), (False, False), (False, True)]


def test_bad_answer_option_is_a_clear_error(wordle):
    with pytest.raises(ValueError, match="valid five-letter word"):
        wordle.reset(options={"answer": "zzzzz"})


def test_information_counts_only_new_facts_across_invalid_turns(wordle):
    wordle.reset(seed=0, options={"answer": "crane"})
    first = wordle.step("crate")[4]["reward_components"]["information"]  # C R A E placed: 4 greens + 4 letters
    assert first == pytest.approx(8 / 10)
    assert wordle.step("zzzzz")[4]["reward_components"]["information"] == 0.0
    assert wordle.step("crate")[4]["reward_components"]["information"] == 0.0
    assert wordle.step("crane")[4]["reward_components"]["information"] == pytest.approx(2 / 10)


def _call(word: str) -> str:
    return "<tool_call>" + json.dumps({"name": "guess", "arguments": {"word": word}}) + "</tool_call>"


def test_out_of_turns_is_in_the_transcript_as_in_the_observation():
    from llmgym.envs.wordle.env import WordleEnv

    # the last reply's guesses were tool calls: the note follows their tool messages as a user message
    env = WordleEnv(max_turns=1)
    env.reset(seed=0, options={"answer": "audio"})
    obs, _, _, truncated, info = env.step(_call("crane"))
    assert truncated and obs.endswith("Out of turns. The word was AUDIO.")
    assert [m["role"] for m in info["messages"][-2:]] == ["tool", "user"]
    assert info["messages"][-1]["content"] == "Out of turns. The word was AUDIO."
    assert env.episode().messages == info["messages"]
    # the last reply had no guess: the turn's own user message (its feedback) ends with the note, said once
    env = WordleEnv(max_turns=1)
    env.reset(seed=0, options={"answer": "audio"})
    obs, _, _, truncated, info = env.step("I am not sure yet.")
    assert truncated and info["messages"][-1] == {"role": "user", "content": obs}
    assert obs.count("The word was AUDIO") == 1 and [m["role"] for m in info["messages"]].count("user") == 2


_WORDS = sorted(load_words()[1])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(load_words()[0]), st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6))
def test_feedback_shown_and_information_match_a_replay_from_scratch(answer, guesses):
    """Each reply shows the guess and its marks; ``information`` counts the facts (placed letters, letters
    known to be in the word) that no earlier guess revealed, recomputed here from the guesses alone."""
    env = gym.make("llmgym/Wordle-v0").unwrapped
    env.reset(seed=0, options={"answer": answer})
    placed: set[int] = set()
    found: set[str] = set()
    for word in guesses:
        if env._over:
            break
        observation, _, _, _, info = env.step(
            f'<tool_call>{{"name": "guess", "arguments": {{"word": "{word}"}}}}</tool_call>'
        )
        marks = score_guess(word, answer)
        assert observation.splitlines()[0] == f"{word.upper()} {' '.join(marks)}"
        known = len(placed) + len(found)
        placed |= {i for i, mark in enumerate(marks) if mark == "G"}
        found |= {letter for letter, mark in zip(word, marks) if mark != "x"}
        assert info["reward_components"]["information"] == (len(placed) + len(found) - known) / 10


def test_a_guess_after_the_solving_one_in_the_same_reply_is_not_run(wordle):
    wordle.reset(seed=0, options={"answer": "crane"})
    obs, reward, terminated, _, info = wordle.step(_call("crane") + _call("pilot"))
    assert terminated and obs.splitlines()[:2] == ["[guess] CRANE G G G G G", "Solved in 1 guess!"]
    assert "[guess] Error: the task is already over; this call was not run" in obs
    assert [word for word, _, _ in wordle.unwrapped.guesses] == ["crane"]


def test_wordle_out_of_turns_note_stays_inside_the_observation_space():
    """Regression: the "Out of turns" note used to push the observation past its space."""
    env = gym.make("llmgym/Wordle-v0", max_turns=1)
    env.reset(seed=0)
    observation, *_ = env.step("<tool_call>x</tool_call>" * 1365)
    assert env.observation_space.contains(observation)
    assert observation.endswith(f"Out of turns. The word was {env.unwrapped.answer.upper()}.")


def test_wordle_last_reply_never_reveals_the_word_before_a_later_guess_in_it_solves():
    env = WordleEnv(max_turns=1)
    env.reset(seed=0, options={"answer": "audio"})
    obs, _, terminated, truncated, _ = env.step(_call("crane") + _call("slate") + _call("audio"))
    assert terminated and not truncated
    assert "Out of turns" not in obs and "The word was" not in obs, obs
    assert obs.splitlines()[-1] == "Solved in 3 guesses!"


def test_wordle_out_of_turns_is_said_once_after_the_last_replys_guesses():
    env = WordleEnv(max_turns=1)
    env.reset(seed=0, options={"answer": "audio"})
    obs, _, terminated, truncated, _ = env.step(_call("crane") + _call("slate"))
    assert truncated and not terminated
    assert obs.count("The word was AUDIO") == 1 and obs.splitlines()[-1] == "Out of turns. The word was AUDIO."


def test_wordle_one_guess_budget_is_singular():
    env = WordleEnv(max_guesses=1)
    obs, _ = env.reset(seed=0)
    assert obs == "Guess the five-letter word. You have 1 guess."
    assert "at most 1 guess." in env.system_prompt


def test_wordle_prompt_and_observations_state_the_real_budgets():
    env = gym.make("llmgym/Wordle-v0", max_guesses=4, max_turns=2)
    obs, info = env.reset(seed=0, options={"answer": "squid"})
    assert "at most 4 guesses" in info["messages"][0]["content"] and "6" not in info["messages"][0]["content"]
    assert "4 guesses but only 2 replies" in obs
    obs = env.step("crane")[0]
    assert obs.splitlines()[-1] == "3 guesses left in 1 reply."
    obs, _, terminated, truncated, _ = env.step("slate")
    assert truncated and not terminated and obs.splitlines()[-1] == "Out of turns. The word was SQUID."
    env.close()


def test_wordle_one_reply_may_still_use_several_guesses():
    env = gym.make("llmgym/Wordle-v0", max_turns=1)
    obs, _ = env.reset(seed=0, options={"answer": "squid"})
    assert "6 guesses but only 1 reply" in obs
    obs, _, terminated, *_ = env.step(_call("crane") + _call("squid"))
    assert terminated and "Solved in 2 guesses!" in obs
    env.close()


def test_wordle_defaults_unchanged_and_singular_counts():
    env = gym.make("llmgym/Wordle-v0")
    obs, info = env.reset(seed=0, options={"answer": "squid"})
    assert obs == "Guess the five-letter word. You have 6 guesses."
    assert "at most 6 guesses" in info["messages"][0]["content"]
    lasts = [env.step(word)[0].splitlines()[-1] for word in ("crane", "slate", "moist", "pilot", "bumpy")]
    assert lasts == ["5 guesses left.", "4 guesses left.", "3 guesses left.", "2 guesses left.", "1 guess left."]
    env.reset(seed=0, options={"answer": "squid"})
    assert env.step("squid")[0].endswith("Solved in 1 guess!")
    env.close()
