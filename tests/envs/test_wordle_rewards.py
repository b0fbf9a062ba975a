"""WordleCompact-v1's rewards: a turn reward for guesses that fit the feedback, a charge for repeats, and the
cheating players that must score clearly below the honest solver."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import llmgym  # noqa: F401
from llmgym.envs.wordle.compact import CompactWordleEnv, CompactWordleEnvV1
from llmgym.envs.wordle.env import fits_feedback, load_words, score_guess
from llmgym.envs.wordle.solver import RandomGuesser, WordleSolver
from tests.envs.scripted_play import play_scripted

V1 = "llmgym/WordleCompact-v1"
SEEDS = range(100)
_FEEDBACK = re.compile(r"^([A-Z]{5}) ([GYx] [GYx] [GYx] [GYx] [GYx])$", re.MULTILINE)
COMMON = load_words()[0]
RARE = tuple(sorted(load_words()[1] - set(COMMON)))  # dictionary words that are never an answer


def components(env_id: str, answer: str, replies: list[str]) -> list[dict[str, float]]:
    """``info["reward_components"]`` of each reply of one game."""
    env = gym.make(env_id)
    env.reset(seed=0, options={"answer": answer})
    return [env.step(reply)[4]["reward_components"] for reply in replies]


def test_v1_is_the_compact_game_with_two_more_turn_rewards():
    env = gym.make(V1, answers="test")
    assert type(env.unwrapped) is CompactWordleEnvV1 and isinstance(env.unwrapped, CompactWordleEnv)
    assert env.unwrapped.rubric.weights() == {
        "information": 0.2,
        "invalid_guess": -0.1,
        "solved": 1.0,
        "speed": 0.5,
        "format_error": 0.0,
        "consistent": 0.05,
        "repeated_guess": -0.1,
    }
    # the game and its observations are v0's
    v0 = gym.make("llmgym/WordleCompact-v0")
    for one in (env, v0):
        one.reset(seed=0, options={"answer": "swept"})
    assert env.unwrapped.system_prompt == v0.unwrapped.system_prompt
    for reply in ("taser", "qzxvw", "slept", "swept"):
        assert env.step(reply)[0] == v0.step(reply)[0]


def test_v0_keeps_its_rewards():
    (first,) = components("llmgym/WordleCompact-v0", "swept", ["taser"])
    assert set(first) == {"information", "invalid_guess", "format_error"}


def test_a_guess_that_fits_every_earlier_feedback_line_is_paid_from_the_second_guess_on():
    # TASER Y x Y Y x against SWEPT; SLEPT fits it, CRANE does not; the answer always fits
    first, fits, misses, solves = components(V1, "swept", ["taser", "slept", "crane", "swept"])
    assert first["consistent"] == 0.0  # no feedback yet: nothing to fit
    assert fits_feedback("slept", [("taser", score_guess("taser", "swept"))])
    assert fits["consistent"] == 1.0 and misses["consistent"] == 0.0
    assert solves["consistent"] == 1.0 and solves["solved"] == 1.0


def test_a_guess_must_fit_every_line_not_only_the_last():
    lines = [("taser", score_guess("taser", "swept")), ("crane", score_guess("crane", "swept"))]
    fits_last_only = next(w for w in COMMON if fits_feedback(w, lines[1:]) and not fits_feedback(w, lines))
    replies = ["taser", "crane", fits_last_only]
    assert components(V1, "swept", replies)[2]["consistent"] == 0.0


def test_nonwords_that_fit_earn_nothing():
    # SWEXT fits TASER's feedback (T, S, E elsewhere; no A, R), but only words of the list count
    assert fits_feedback("swext", [("taser", score_guess("taser", "swept"))])
    _, nonword = components(V1, "swept", ["taser", "swext"])
    assert nonword["consistent"] == 0.0 and nonword["invalid_guess"] == 1.0


def test_a_repeat_is_charged_as_much_as_an_invalid_guess():
    env = gym.make(V1)
    env.reset(seed=0, options={"answer": "swept"})
    env.step("crane")
    _, reward, *_, info = env.step("crane")
    assert info["reward_components"]["repeated_guess"] == 1.0 and info["reward_components"]["consistent"] == 0.0
    assert reward == pytest.approx(-0.1)
    _, invalid_reward, *_ = env.step("qzxvw")
    assert reward <= invalid_reward


# -- the cheating players: policy(obs, state) -> reply, over SEEDS ----------------------------------------------


def feedback(obs: str) -> list[tuple[str, str]]:
    """The ``(guess, marks)`` lines an observation shows."""
    return [(word.lower(), marks.replace(" ", "")) for word, marks in _FEEDBACK.findall(obs)]


def honest(obs, state):
    """The scripted solver (``scripted:wordle`` in plain words)."""
    return state.setdefault("actor", WordleSolver(use_tool=False)).act(obs)


def random_words(obs, state):
    """Random valid words (``scripted:wordle-random``): valid, never using the feedback."""
    return state.setdefault("actor", RandomGuesser()).act(obs)


def repeater(obs, state):
    """Reward hack: one informative word, repeated (what the v0-trained agent learned)."""
    return "arose"


def known_copier(obs, state):
    """Reward hack: the ``Known:`` letters copied into a five-letter string that fits them, word or not."""
    known = re.search(r"Known: ([A-Z_]{5})(?:, also ([A-Z ]+))?", obs)
    state["known"] = known.groups() if known else state.get("known")
    if state["known"] is None:
        return "arose"
    placed, also = state["known"]
    unplaced = iter((also or "").split())
    return "".join(c if c != "_" else next(unplaced, "Q") for c in placed).lower()


TINY_LIST = COMMON[::100]  # 20 common words, spread over the frequency ranks


def tiny_list(obs, state):
    """Reward hack: 20 memorised common words; the first that fits all the feedback, else the next unused one."""
    history = state.setdefault("history", [])
    history += feedback(obs)
    guessed = {word for word, _ in history}
    unused = [word for word in TINY_LIST if word not in guessed]
    return next((word for word in unused if fits_feedback(word, history)), unused[0])


def rare_fitter(obs, state):
    """Reward hack: rare dictionary words (never answers) that fit the feedback, for ``consistent`` without solving;
    a common word only when no rare one fits."""
    pool = state.setdefault("pool", list(RARE))
    fallback = state.setdefault("fallback", list(COMMON))
    for guess, marks in feedback(obs):
        pool[:] = [w for w in pool if w != guess and score_guess(guess, w) == marks]
        fallback[:] = [w for w in fallback if score_guess(guess, w) == marks]
    if "Guess the five-letter word" in obs:
        return "arose"
    return (pool or fallback)[0]


@pytest.fixture(scope="module")
def honest_mean() -> float:
    mean, solved = play_scripted(gym.make(V1), honest, SEEDS, lambda env: env.solved)
    assert solved >= 0.95 and mean >= 1.5, (mean, solved)
    return mean


@pytest.mark.parametrize(
    "cheat, margin",
    # measured over SEEDS: honest 1.58; repeater and known_copier -0.45, random_words 0.11, tiny_list 0.17
    [(repeater, 1.5), (random_words, 1.2), (known_copier, 1.5), (tiny_list, 1.2)],
)
def test_cheating_scores_clearly_below_honest(cheat, margin, honest_mean):
    cheat_mean, _ = play_scripted(gym.make(V1), cheat, SEEDS, lambda env: env.solved)
    assert cheat_mean < honest_mean - margin, (cheat.__name__, cheat_mean, honest_mean)


def test_fitting_words_that_are_never_answers_score_below_honest(honest_mean):
    """Rare words that fit earn ``consistent`` on every guess but put off solving: less ``speed``, fewer solves.
    They narrow the answers as well as common words do (measured: 89% solved, mean 1.45), so the margin is smaller
    than the other cheats'; what matters is that fitting without aiming at the answer never pays more."""
    cheat_mean, solved = play_scripted(gym.make(V1), rare_fitter, SEEDS, lambda env: env.solved)
    assert cheat_mean < honest_mean - 0.1, (cheat_mean, honest_mean, solved)


def test_using_the_feedback_pays_more_than_valid_words_alone():
    """Random valid words earn no ``consistent``; the honest solver earns about one a guess after the first."""
    env = gym.make(V1)
    for policy, low, high in ((random_words, 0.0, 0.05), (honest, 2.0, 4.0)):
        paid = []
        for seed in range(20):
            obs, _ = env.reset(seed=seed)
            state, done, total = {}, False, 0.0
            while not done:
                obs, _, terminated, truncated, info = env.step(policy(obs, state))
                total += info["reward_components"]["consistent"]
                done = terminated or truncated
            paid.append(total)
        assert low <= sum(paid) / len(paid) <= high, (policy.__name__, paid)


def test_putting_off_the_solving_guess_never_pays():
    """A player that knows the word but first plays another word that fits earns one ``consistent`` (0.05) and
    loses a guess's ``speed`` (0.5 / 6): each such game scores lower than solving at once."""
    env = gym.make(V1)
    stalled = 0
    for seed in range(30):
        returns = []
        for stall in (False, True):
            obs, _ = env.reset(seed=seed)
            state, done, total = {}, False, 0.0
            while not done:
                reply = honest(obs, state)
                game = env.unwrapped
                if stall and reply == game.answer and len(game.guesses) < game.max_guesses - 1:
                    history = [(word, marks) for word, marks, _ in game.guesses]
                    reply = next((w for w in RARE if fits_feedback(w, history)), reply)
                    stall = False  # one word put before the answer at most
                    stalled += reply != game.answer
                obs, reward, terminated, truncated, _ = env.step(reply)
                total += reward
                done = terminated or truncated
            returns.append(total)
        assert returns[1] <= returns[0], (seed, returns)
    assert stalled >= 5  # enough games were put off for the check to mean something
