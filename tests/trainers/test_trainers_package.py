"""The ``llmgym.trainers`` package: ``from llmgym.trainers import GRPOTrainer`` as in TRL, loaded on first use."""

from __future__ import annotations

import pytest


def test_trainers_package_exports_the_trainers_like_trl():
    import llmgym.trainers as trainers
    from llmgym.trainers import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer, load_config
    from llmgym.trainers.config import GRPOConfig as config_home
    from llmgym.trainers.grpo import GRPOTrainer as trainer_home

    assert GRPOTrainer is trainer_home and GRPOConfig is config_home
    assert {SFTConfig.__name__, SFTTrainer.__name__, load_config.__name__} == {"SFTConfig", "SFTTrainer", "load_config"}
    assert set(trainers.__all__) <= set(dir(trainers))
    with pytest.raises(AttributeError, match="Nope"):
        trainers.Nope  # noqa: B018
