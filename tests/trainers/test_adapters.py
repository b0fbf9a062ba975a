"""LoRA adapters as models: saved with the name of their base, loaded merged by ``load_model``, and a GRPO run
that starts from one (``init_adapter``, the SFT warm-up's adapter) instead of a fresh adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from llmgym.trainers.checkpoint import save_weights  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.wrappers.models import load_model, tiny_random_model  # noqa: E402
from tests.trainers.test_grpo import one_step_config  # noqa: E402


def trained_adapter(folder: Path) -> tuple[torch.nn.Module, Path]:
    """A LoRA adapter on tiny-random with non-zero weights (a fresh one is the identity), saved to ``folder``."""
    model, tokenizer = tiny_random_model()
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    return model.eval(), save_weights(model, tokenizer, folder, base="tiny-random")


def test_an_adapter_records_its_base_by_name_and_loads_merged(tmp_path):
    model, folder = trained_adapter(tmp_path / "adapter")
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny-random"
    merged, tokenizer = load_model(folder, device="cpu")
    assert not any("lora" in name for name, _ in merged.named_parameters())  # plain Linear layers: as fast as the base
    ids = torch.tensor([tokenizer.encode("crane slate")])
    with torch.no_grad():
        expected, got = model(ids).logits, merged(ids).logits
        base = tiny_random_model()[0](ids).logits
    assert torch.allclose(expected, got, atol=1e-4) and not torch.allclose(base, got, atol=1e-2)


def test_an_adapter_whose_base_is_missing_says_which(tmp_path):
    _, folder = trained_adapter(tmp_path / "adapter")
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="gone"):
        load_model(folder, device="cpu")


def config(out: Path, **overrides) -> GRPOConfig:
    return one_step_config(out, **{"lora": True, **overrides})


def test_grpo_starts_from_the_given_adapter_and_trains_it(tmp_path):
    model, folder = trained_adapter(tmp_path / "sft")
    start = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    trainer = GRPOTrainer(config(tmp_path / "grpo", init_adapter=str(folder)))
    now = {k: v for k, v in trainer.model.state_dict().items() if "lora_" in k}
    assert now.keys() == start.keys() and all(torch.equal(now[k], start[k]) for k in start)
    trainer.train()
    trainer.close()
    after = {k: v for k, v in trainer.model.state_dict().items() if "lora_" in k}
    assert any(not torch.equal(after[k], start[k]) for k in start)  # trainable, not frozen
    saved = json.loads((tmp_path / "grpo" / "final" / "adapter_config.json").read_text())
    assert saved["r"] == 4 and saved["base_model_name_or_path"] == "tiny-random"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"lora": False}, "init_adapter needs lora=True"),
        ({"beta": 0.1}, "init_adapter needs beta = 0"),
        ({"init_adapter": "nowhere"}, "is not a LoRA adapter folder"),
    ],
)
def test_init_adapter_settings_that_cannot_work_are_refused_up_front(tmp_path, overrides, message):
    _, folder = trained_adapter(tmp_path / "sft")
    with pytest.raises(ValueError, match=message):
        config(tmp_path / "grpo", **{"init_adapter": str(folder), **overrides})
