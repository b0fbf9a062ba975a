"""SFT warm-up: episode selection, assistant-only masks, messages export, learning on recorded episodes."""

from __future__ import annotations

import doctest
import json

import pytest
import torch

pytest.importorskip("transformers")

from llmgym.episode import Episode, save_jsonl  # noqa: E402
from llmgym.trainers import sft  # noqa: E402
from llmgym.trainers.config import SFTConfig  # noqa: E402
from llmgym.trainers.sft import SFTTrainer, export_messages, select_episodes, tokenize_episode  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "guess", "description": "Guess.", "parameters": {"type": "object"}}}]


def teacher_episode(answer: str, reward: float) -> Episode:
    call = {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": json.dumps({"word": answer})}}
    return Episode(
        "llmgym/Wordle-v0", seed=0, tools=TOOLS, turn_rewards=[0.0, reward],
        messages=[
            {"role": "system", "content": "Play."},
            {"role": "user", "content": "Guess the word."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "guess", "content": "x x G x x"},
            {"role": "assistant", "content": f"It is {answer}."},
        ],
    )


def test_doctests():
    assert doctest.testmod(sft).failed == 0


def test_select_and_export(tmp_path):
    episodes = [teacher_episode("crane", 1.0), teacher_episode("slate", 0.0)]
    assert len(select_episodes(episodes, min_reward=0.5)) == 1
    path = tmp_path / "chat.jsonl"
    assert export_messages(episodes, path) == 2
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["tools"] == TOOLS and rows[0]["reward"] == 1.0
    assistant = [m for m in rows[0]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"] == '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
    assert all(set(m) >= {"role", "content"} for m in rows[0]["messages"])


def test_mask_covers_only_assistant_turns():
    _, tokenizer = tiny_random_model(0)
    episode = tokenize_episode(teacher_episode("crane", 1.0), tokenizer)
    assert len(episode.token_ids) == len(episode.mask) and sum(episode.mask) > 0
    learned = tokenizer.decode([t for t, m in zip(episode.token_ids, episode.mask) if m])
    context = tokenizer.decode([t for t, m in zip(episode.token_ids, episode.mask) if not m])
    assert '"word": "crane"' in learned and "It is crane." in learned
    assert "Guess the word." in context and "x x G x x" in context and "Guess the word." not in learned
    # each learned span ends at the end-of-turn token the model stops at, not at the template's newline after it
    ends = [i for i in range(len(episode.mask) - 1) if episode.mask[i] and not episode.mask[i + 1]] + [len(episode.mask) - 1]
    assert all(episode.token_ids[i] == tokenizer.eos_token_id for i in ends if episode.mask[i])
    assert episode.mask[-1] == 0 and tokenizer.decode(episode.token_ids[-1:]) == "\n"
    # recorded ids are used as they are; ids of another tokenizer are refused
    recorded = Episode("x", token_ids=[1, 2, 3], mask=[0, 1, 1], messages=[{"role": "assistant", "content": "?"}])
    assert tokenize_episode(recorded, tokenizer) is recorded
    with pytest.raises(ValueError, match="retokenize"):
        tokenize_episode(Episode("x", token_ids=[10**7], mask=[1]), tokenizer)
    with pytest.raises(ValueError, match="no assistant turn"):
        tokenize_episode(Episode("x", messages=[{"role": "user", "content": "hi"}]), tokenizer)


def test_sft_learns_the_good_episodes(tmp_path):
    episodes = [teacher_episode("crane", 1.0) for _ in range(4)] + [teacher_episode("zzzzz", 0.0) for _ in range(4)]
    save_jsonl(episodes, tmp_path / "episodes.jsonl")
    model, tokenizer = tiny_random_model(0)
    config = SFTConfig(episodes=str(tmp_path / "episodes.jsonl"), out=str(tmp_path / "run"), min_reward=1.0,
                       epochs=6, batch_size=4, micro_batch_size=2, learning_rate=1e-2, progress=False)
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer)
    assert len(trainer.episodes) == 4
    history = trainer.train()
    assert len(history) == 6
    assert history[-1]["loss"] < 0.75 * history[0]["loss"]
    assert (tmp_path / "run" / "final" / "config.json").is_file()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 6
    with pytest.raises(ValueError, match="min-reward"):
        SFTTrainer(SFTConfig(min_reward=5.0), model=model, tokenizer=tokenizer, episodes=episodes)


def test_sft_lora_keeps_base_weights(tmp_path):
    model, tokenizer = tiny_random_model(0)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    config = SFTConfig(out=str(tmp_path), lora=True, lora_r=4, epochs=1, batch_size=2, learning_rate=1e-2, progress=False)
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer, episodes=[teacher_episode("crane", 1.0)] * 2)
    trainer.train()
    state = trainer.model.get_base_model().state_dict()
    assert all(torch.equal(v, state[k.replace(".weight", ".base_layer.weight")] if k.replace(".weight", ".base_layer.weight") in state else state[k])
               for k, v in base.items())
    assert (tmp_path / "final" / "adapter_config.json").is_file()
