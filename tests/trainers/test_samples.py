"""``out/samples.jsonl``: sample episodes of each step with the advantage every token was trained with."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmgym.episode import Episode, iter_jsonl
from llmgym.trainers.advantages import compute_advantages
from llmgym.trainers.samples import SampleLogger, with_advantages


def episode(group: int, rewards: list[float]) -> Episode:
    # one prompt token, then one generated token per turn with a tool token between turns
    ids, mask, spans = [7], [0], []
    for turn in range(len(rewards)):
        if turn:
            ids.append(9)
            mask.append(0)
        spans.append((len(ids), len(ids) + 1))
        ids.append(10 + turn)
        mask.append(1)
    return Episode("x", seed=group, group=group, turn_rewards=rewards, token_ids=ids, mask=mask, turn_spans=spans)


class Pieces:
    """A tokenizer stand-in: token ``i`` decodes to ``<i>``."""

    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)


def test_the_first_groups_carry_their_token_advantages_turn_credit_and_token_text():
    episodes = [episode(0, [1.0, 0.0]), episode(0, [0.0, 0.0]), episode(1, [1.0, 1.0]), episode(1, [1.0, 1.0])]
    advantages = compute_advantages(episodes)
    sample = with_advantages(episodes, advantages, step=4, groups=1, tokenizer=Pieces())
    assert [e.group for e in sample] == [0, 0]
    first = sample[0].metadata
    assert first["train_step"] == 4 and first["in_loss"] is True
    assert first["token_text"] == ["<7>", "<10>", "<9>", "<11>"]
    # policy tokens get A_i + A_{i,t}; prompt and tool tokens 0
    assert first["advantages"] == pytest.approx(list(advantages.token_advantages[0]), abs=1e-4)
    assert first["advantages"][0] == 0.0 and first["advantages"][2] == 0.0
    turn_1 = first["outcome_advantage"] + first["turn_advantages"][0]
    assert first["advantages"][1] == pytest.approx(turn_1, abs=1e-3) and first["advantages"][1] > first["advantages"][3]
    # the episodes themselves are not changed
    assert "advantages" not in episodes[0].metadata
    both = with_advantages(episodes, advantages, step=4, groups=2)
    assert [e.metadata["in_loss"] for e in both] == [True, True, False, False]
    assert "token_text" not in both[0].metadata
    assert with_advantages(episodes, advantages, step=4, groups=0) == []


def test_a_resumed_run_drops_the_samples_of_the_steps_it_redoes(tmp_path):
    episodes = [episode(0, [1.0]), episode(0, [0.0])]
    advantages = compute_advantages(episodes)
    logger = SampleLogger(tmp_path)
    for step in (1, 2, 3):
        logger.log(with_advantages(episodes, advantages, step, groups=1))
    logger.close()
    with open(tmp_path / "samples.jsonl", "a") as torn:
        torn.write('{"env_id": "x", "meta')
    SampleLogger(tmp_path, resume_step=2).close()
    assert [e.metadata["train_step"] for e in iter_jsonl(tmp_path / "samples.jsonl")] == [1, 1, 2, 2]
    SampleLogger(tmp_path).close()  # a fresh run starts the file over
    assert (tmp_path / "samples.jsonl").read_text() == ""


def test_the_trainer_writes_each_steps_samples_with_the_advantages_it_trained_with(tmp_path):
    pytest.importorskip("transformers")
    from llmgym.trainers.config import GRPOConfig
    from llmgym.trainers.grpo import GRPOTrainer
    from tests.trainers.toy_env import ENV_REF

    config = GRPOConfig(
        env_id=ENV_REF,
        env_kwargs={"turns": 2},
        model="tiny-random",
        out=str(tmp_path),
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        progress=False,
        plot=False,
        torch_threads=1,
        sample_groups=1,
    )
    trainer = GRPOTrainer(config)
    trainer.train()
    trainer.close()
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [line["metadata"]["train_step"] for line in lines] == [1, 1, 2, 2]
    for line in lines:
        sample = Episode.from_dict(line)
        meta = sample.metadata
        assert len(meta["advantages"]) == len(meta["token_text"]) == len(sample.token_ids)
        assert all(a == 0.0 for a, bit in zip(meta["advantages"], sample.mask) if not bit)
        assert len(meta["turn_advantages"]) == sample.num_turns == 2
    # the recorded advantages are compute_advantages' for that group
    group = [Episode.from_dict(line) for line in lines[:2]]
    expected = compute_advantages(group)
    for sample, values in zip(group, expected.token_advantages):
        assert np.allclose(sample.metadata["advantages"], values, atol=1e-4)
