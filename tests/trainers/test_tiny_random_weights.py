"""``--model tiny-random`` is one model: the trainers build the weights ``llmgym serve`` decodes with, whatever the
run seed.

A GRPO run with ``base_url`` generates on the server and trains its own copy;
when the trainers seeded the tiny model with the run seed and the server with
0, a run with ``seed = 7`` trained other weights than those that generated its
episodes, without a word.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from llmgym.episode import Episode  # noqa: E402
from llmgym.trainers.config import GRPOConfig, SFTConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.sft import SFTTrainer  # noqa: E402
from llmgym.wrappers.models import load_policy, tiny_random_model  # noqa: E402
from tests.trainers.toy_env import ENV_REF  # noqa: E402

RUN_SEED = 7


def served_weights() -> dict[str, torch.Tensor]:
    """What ``llmgym serve --backend transformers --model tiny-random`` decodes with."""
    return load_policy("transformers", "tiny-random").model.state_dict()


def test_a_grpo_run_with_lora_trains_the_served_weights(tmp_path):
    config = GRPOConfig(
        env_id=ENV_REF,
        model="tiny-random",
        out=str(tmp_path),
        seed=RUN_SEED,
        lora=True,
        steps=1,
        prompts_per_step=1,
        group_size=2,
        max_new_tokens=2,
        progress=False,
        plot=False,
        torch_threads=1,
    )
    trainer = GRPOTrainer(config)
    try:
        base = trainer.model.get_base_model()
        ids = torch.tensor([[1, 2, 3, 4]])
        served = load_policy("transformers", "tiny-random").model
        with torch.no_grad(), trainer.model.disable_adapter():
            assert torch.equal(base(ids).logits, served(ids).logits)
    finally:
        trainer.close()


def test_an_sft_run_trains_the_served_weights(tmp_path):
    episode = Episode(
        "x",
        turn_rewards=[1.0],
        token_ids=[5, 6, 7],
        mask=[0, 1, 1],
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    )
    trainer = SFTTrainer(
        SFTConfig(out=str(tmp_path), model="tiny-random", seed=RUN_SEED, progress=False), episodes=[episode]
    )
    trained, served = trainer.model.state_dict(), served_weights()
    assert trained.keys() == served.keys()
    assert all(torch.equal(trained[name], served[name]) for name in served)


def test_tiny_random_weights_are_those_of_the_documented_seed():
    from llmgym.wrappers.models import TINY_RANDOM_SEED

    model, _ = tiny_random_model(TINY_RANDOM_SEED)
    served = served_weights()
    assert TINY_RANDOM_SEED == 0 and model.config.name_or_path == "tiny-random-llama-0"
    assert all(torch.equal(value, served[name]) for name, value in model.state_dict().items())
