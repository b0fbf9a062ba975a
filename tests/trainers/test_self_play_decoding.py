"""How a self-play step decodes: the pool's snapshots decode as the trained policy does (``rollout_precision``), so
with ``bf16`` a snapshot's later turns evaluate only the tokens its KV cache slots do not hold."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from llmgym.envs import multiagent  # noqa: E402
from llmgym.envs.multiagent.evaluation import MultiAgentGame  # noqa: E402
from llmgym.messages import assistant, system, user  # noqa: E402
from llmgym.policy import PolicyRequest, SamplingParams  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.opponents import SnapshotPool  # noqa: E402
from llmgym.wrappers.weights import tiny_random_model  # noqa: E402
from tests.trainers import toy_game  # noqa: E402

RULES = "You are playing a card game. " * 30  # a long shared system prompt, as an OpenSpiel game's


def snapshot_turns(tmp_path, precision: str) -> list[dict]:
    """The generation metadata of a chat's two turns, decoded by a pool snapshot of a LoRA model."""
    model, tokenizer = tiny_random_model()
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    pool = SnapshotPool(tmp_path / "pool", size=2, base="tiny-random", rollout_precision=precision)
    pool.add(0, model)
    policy = pool.policy(0, model, tokenizer, batch_size=2)
    chat = [system(RULES), user("Your card: 1. Legal actions: Pass, Bet")]
    sampling = SamplingParams(max_tokens=3, seed=0)
    first = policy.generate([PolicyRequest(chat, sampling=sampling)])[0]
    chat += [assistant(first.message["content"]), user("Illegal move. Legal actions: Pass, Bet")]
    second = policy.generate([PolicyRequest(chat, sampling=sampling)])[0]
    return [{**g.metadata, "prompt_tokens": len(g.prompt_token_ids)} for g in (first, second)]


def test_a_bf16_snapshot_evaluates_only_what_its_cache_does_not_hold(tmp_path):
    first, second = snapshot_turns(tmp_path, "bf16")
    assert first["rollout_precision"] == second["rollout_precision"] == "bf16"
    assert first["prompt_tokens_processed"] == first["prompt_tokens"]
    # the second turn's rules and first turn come from the slot: only the reply's last token and the new message
    assert second["prompt_tokens_processed"] < (second["prompt_tokens"] - first["prompt_tokens"]) + 2


def test_an_fp32_snapshot_evaluates_every_prompt_whole(tmp_path):
    _, second = snapshot_turns(tmp_path, "fp32")
    assert second["rollout_precision"] == "fp32" and second["prompt_tokens_processed"] == second["prompt_tokens"]


def test_the_self_play_trainer_gives_its_pool_the_runs_rollout_precision(tmp_path, monkeypatch):
    monkeypatch.setitem(multiagent.MULTIAGENT_ENVS, toy_game.ENV_ID, "tests.trainers.toy_game:env")
    monkeypatch.setitem(multiagent.MULTIAGENT_KINDS, toy_game.ENV_ID, "aec")
    config = GRPOConfig(
        env_id=toy_game.ENV_ID,
        model="tiny-random",
        out=str(tmp_path),
        steps=1,
        prompts_per_step=1,
        group_size=2,
        max_new_tokens=2,
        progress=False,
        plot=False,
        torch_threads=1,
        lora=True,
        lora_r=4,
        lora_alpha=8,
        opponents={"pool": 1.0},
        snapshot_every=1,
        rollout_precision="bf16",
    )
    trainer = GRPOTrainer(config, game=MultiAgentGame(config.env_id))
    try:
        [metrics] = trainer.train()
        pool = trainer.generator.pool
        assert metrics["opponent/pool/games"] == 2
        assert pool.policy(0, trainer.model, trainer.tokenizer, 2).rollout_precision == "bf16"
    finally:
        trainer.close()
