"""TRL interop (llmgym/trainers/trl.py): the environment_factory adapter and the chat-messages export."""

from __future__ import annotations

import inspect
import json
from typing import Any

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  (registers the envs)
from llmgym import Episode, LLMEnv, Reward, Rubric
from llmgym.envs.wordle.solver import WordleSolver
from llmgym.trainers.trl import episodes_to_messages, save_messages_jsonl, trl_dataset, trl_environment


def test_the_class_exposes_exactly_the_env_tools_to_trl():
    Wordle = trl_environment("llmgym/Wordle-v0", max_turns=4)
    public = [n for n, _ in inspect.getmembers(Wordle, predicate=inspect.isfunction) if not n.startswith("_")]
    # TRL's rule: public methods but reset/get_reward are tools
    assert sorted(public) == ["get_reward", "guess", "reset"]
    assert Wordle().env.unwrapped.max_turns == 4


def test_transformers_derives_the_same_tool_schema_as_llmgym():
    from transformers.utils import get_json_schema

    env = trl_environment("llmgym/Wordle-v0")()
    schema = get_json_schema(env.guess)["function"]
    ours = env.env.unwrapped.tool_schemas[0]["function"]
    assert (schema["name"], schema["description"]) == (ours["name"], ours["description"])
    for key in ("type", "properties", "required"):  # llmgym adds additionalProperties: false
        assert schema["parameters"][key] == ours["parameters"][key]


def test_tool_calls_play_the_episode_and_the_reward_is_its_return():
    env = trl_environment("llmgym/Wordle-v0")()
    assert (
        env.reset(seed=3, prompt=[{"role": "user", "content": ""}]) == "Guess the five-letter word. You have 6 guesses."
    )
    solver, obs = WordleSolver(), "Guess the five-letter word."
    while "Solved" not in obs:
        obs = env.guess(
            word=json.loads(solver.act(obs)[len("<tool_call>") : -len("</tool_call>")])["arguments"]["word"]
        )
    assert obs.endswith("[The episode is over.]")
    assert env.get_reward() == pytest.approx(env._episode().total_reward) and env.get_reward() > 1.0
    assert env.guess(word="crane").startswith("Error: the episode is over")


def test_bad_tool_arguments_become_error_observations():
    env = trl_environment("llmgym/Wordle-v0")()
    env.reset(seed=0)
    assert "invalid arguments" in env.guess(word=["not", "a", "string"])
    assert "invalid arguments" in env.guess(wrong_name="crane")
    assert env.get_reward() < 0  # invalid guesses cost reward, as in the env


def test_non_llmgym_envs_are_refused():
    with pytest.raises(TypeError, match="not an llmgym LLMEnv"):
        trl_environment("CartPole-v1")


def test_trl_dataset_has_one_prompt_per_seed():
    pytest.importorskip("datasets")
    dataset = trl_dataset("llmgym/Wordle-v0", range(3))
    assert dataset["seed"] == [0, 1, 2]
    assert dataset[0]["prompt"][0]["content"].startswith("You are playing Wordle")


def test_episodes_export_as_chat_messages(tmp_path):
    env = gym.make("llmgym/Wordle-v0")
    obs, _ = env.reset(seed=1)
    solver, done = WordleSolver(), False
    while not done:
        obs, _, terminated, truncated, _ = env.step(solver.act(obs))
        done = terminated or truncated
    episode = env.unwrapped.episode()
    row = episodes_to_messages([episode])[0]
    assert row["reward"] == pytest.approx(episode.total_reward) and row["tools"] == episode.tools
    calls = [c for m in row["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
    assert all(isinstance(c["function"]["arguments"], dict) for c in calls)
    assert [m["role"] for m in row["messages"][:3]] == ["system", "user", "assistant"]
    with pytest.raises(ValueError, match="arguments_as"):
        episodes_to_messages([episode], arguments_as="yaml")

    path = tmp_path / "messages.jsonl"
    assert save_messages_jsonl([episode, episode], path) == 2
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert len(loaded) == 2 and loaded[0]["messages"][2]["tool_calls"][0]["function"]["name"] == "guess"
    assert (
        json.loads(loaded[0]["messages"][2]["tool_calls"][0]["function"]["arguments"])
        == calls[0]["function"]["arguments"]
    )


def test_the_chat_rows_render_with_a_transformers_chat_template():
    pytest.importorskip("trl")
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tokenizer.chat_template = qwen2_5_chat_template
    env = gym.make("llmgym/Wordle-v0")
    env.reset(seed=0)
    env.step('<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>')
    row = episodes_to_messages([env.unwrapped.episode()])[0]
    text = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    assert '"name": "guess", "arguments": {"word": "crane"}' in text and "CRANE x x x x Y" in text


def test_trl_rows_hold_a_text_protocol_call_once():
    env = gym.make("llmgym/Wordle-v0")
    env.reset(seed=0)
    *_, info = env.step('Trying. <tool_call>{"name":"guess","arguments":{"word":"pious"}}</tool_call>')
    assistant = [
        m
        for m in episodes_to_messages([Episode("llmgym/Wordle-v0", messages=info["messages"])])[0]["messages"]
        if m["role"] == "assistant"
    ]
    assert len(assistant) == 1 and assistant[0]["content"] == "Trying."
    assert [c["function"] for c in assistant[0]["tool_calls"]] == [{"name": "guess", "arguments": {"word": "pious"}}]
    native = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}
        ],
    }
    row = episodes_to_messages([Episode("x", messages=[native])])[0]["messages"][0]
    assert row["tool_calls"][0]["function"]["arguments"] == {"word": "crane"}


class NoToolsEnv(LLMEnv):
    """Plain-text answers only: nothing TRL could call."""

    def setup(self, options: dict[str, Any] | None) -> str:
        return "Say hello."

    def build_rubric(self) -> Rubric:
        return Rubric([Reward(lambda ctx: 0.0, when="end", name="nothing")])


def test_trl_environment_refuses_an_env_without_tools():
    env_id = "llmgym-interop-test/NoTools-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=NoToolsEnv)
    with pytest.raises(ValueError, match="has no tools: TRL passes only tool calls"):
        trl_environment(env_id)


def test_trl_tool_methods_take_arguments_by_position_as_their_signature_says():
    env = trl_environment("llmgym/Wordle-v0")()
    env.reset(seed=0)
    assert env.guess("crane").splitlines()[0] == "CRANE x x x x Y"
    assert env.guess(word="slate").splitlines()[0].startswith("SLATE")
    with pytest.raises(TypeError, match="takes 1 arguments"):
        env.guess("crane", "slate")
    with pytest.raises(TypeError, match="several values"):
        env.guess("crane", word="slate")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_grpo_trainer_plays_the_env_through_its_tools(monkeypatch):
    """examples/trl_grpo.py: one GRPO step of TRL's trainer whose rollouts call the env's guess tool."""
    import sys
    from pathlib import Path

    pytest.importorskip("trl")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    sys.modules.pop("trl_grpo", None)
    import trl_grpo

    result = trl_grpo.main(steps=1)
    logs = [entry for entry in result["log_history"] if "reward" in entry]
    assert logs and logs[0]["tools/call_frequency"] > 0
    episodes = result["episodes"]
    assert episodes and all(ep.messages[2]["tool_calls"][0]["function"]["name"] == "guess" for ep in episodes)
    assert len(result["rewards"]) == 4  # one env per rollout (per_device_train_batch_size=4)
    assert logs[0]["reward"] == pytest.approx(sum(result["rewards"]) / 4, abs=1e-4)
