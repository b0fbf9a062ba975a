"""``async_generation=True``: a real ``llmgym serve`` generates step k+1 while the trainer runs step k."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("openai")

from llmgym.episode import Episode  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.overlap import RolloutPrefetcher  # noqa: E402
from tests.trainers.test_grpo_server import server  # noqa: E402,F401  the llmgym serve fixture
from tests.trainers.toy_env import ENV_REF  # noqa: E402


def test_async_generation_needs_a_server():
    with pytest.raises(ValueError, match="needs base_url"):
        GRPOConfig(async_generation=True)


def test_prefetcher_hands_over_only_the_step_it_generated():
    prefetcher = RolloutPrefetcher(lambda step, seeds: [Episode("x", seed=s, metadata={"step": step}) for s in seeds])
    assert prefetcher.take(0) is None  # nothing started: the loop generates itself
    prefetcher.start(step=2, seeds=[5], policy_version=1)
    with pytest.raises(RuntimeError, match="not taken"):
        prefetcher.start(step=3, seeds=[6], policy_version=2)
    with pytest.raises(RuntimeError, match="for step 2, not step 1"):
        prefetcher.take(1)
    prefetched = prefetcher.take(2)
    assert [(e.seed, e.metadata["step"]) for e in prefetched.episodes] == [(5, 2)]
    assert prefetched.policy_version == 1 and prefetched.finished >= prefetched.started
    prefetcher.close()


def test_a_failed_prefetch_raises_in_the_training_loop():
    def broken(step: int, seeds: list[int]) -> list[Episode]:
        raise ConnectionError("server gone")

    prefetcher = RolloutPrefetcher(broken)
    prefetcher.start(step=1, seeds=[0], policy_version=0)
    prefetcher.wait()
    with pytest.raises(ConnectionError, match="server gone"):
        prefetcher.take(1)
    prefetcher.close()


@pytest.mark.slow
def test_generation_of_the_next_step_overlaps_training_on_a_server(server, tmp_path):  # noqa: F811
    base_url, checkpoint, log = server
    torch.set_num_threads(1)
    config = GRPOConfig(
        env_id=ENV_REF,
        model=str(checkpoint),
        out=str(tmp_path / "run"),
        steps=3,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=6,
        learning_rate=5e-2,
        lora=True,
        lora_r=4,
        base_url=base_url,
        lora_name="grpo-async",
        progress=False,
        plot=False,
        async_generation=True,
        save_every=1,
    )
    trainer = GRPOTrainer(config)
    history = trainer.train()
    trainer.close()
    assert [m["step"] for m in history] == [1, 2, 3]
    assert [m["async/staleness"] for m in history] == [0.0, 1.0, 1.0]
    for previous, current in zip(history, history[1:]):
        # step k+1's generation began before step k's optimizer finished, and ran beside it
        assert current["async/generation_start_s"] < previous["time/optimizer_end_s"]
        assert current["async/overlap_s"] > 0
    for m in history:  # sane: every episode trained on, finite loss, importance weights in (0, is_cap]
        assert m["episodes/errors"] == 0 and m["tokens/trained"] > 0 and math.isfinite(m["loss"])
        assert 0 < m["is_weight/mean"] <= config.is_cap
    # the stale steps' episodes come from the previous adapter: their weights differ from 1, the fresh first step's
    # do not
    assert history[0]["is_weight/mean"] == pytest.approx(1.0, abs=0.02)
    assert max(abs(m["is_weight/mean"] - 1.0) for m in history[1:]) > abs(history[0]["is_weight/mean"] - 1.0)
    assert log.read_text().count("/v1/load_lora_adapter") == 4  # before step 1, after steps 1, 2, 3
    # the checkpoint after step 2 stores the seed sampler before step 3's draw, so --resume redraws those seeds
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    sampler = np.random.default_rng(config.seed)
    for _ in range(2):
        sampler.choice(config.seed_pool, size=config.prompts_per_step, replace=False)
    assert state["seed_sampler"] == sampler.bit_generator.state
