"""The trainers' precision: which one ``auto`` picks (from the CPU probe, CUDA, other devices), and bf16 autocast in
the loss's forward passes with fp32 weights, recorded in the run's ``config.json``."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from llmgym.episode import save_jsonl  # noqa: E402
from llmgym.trainers import precision  # noqa: E402
from llmgym.trainers.config import SFTConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.precision import choose_precision  # noqa: E402
from llmgym.trainers.sft import SFTTrainer  # noqa: E402
from llmgym.wrappers.hardware import MatmulRates  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402
from tests.trainers.test_grpo import small_config  # noqa: E402
from tests.trainers.test_sft import teacher_episode  # noqa: E402

CPU = torch.device("cpu")


def probe_finds(monkeypatch, fp32: float, bf16: float) -> None:
    rates = MatmulRates(fp32_gflops=fp32, bf16_gflops=bf16, threads=2, size=1024)
    monkeypatch.setattr(precision, "matmul_rates", lambda: rates)


def test_auto_on_a_cpu_follows_the_probe(monkeypatch):
    probe_finds(monkeypatch, fp32=203.0, bf16=842.0)  # AMX
    chosen = choose_precision("auto", CPU)
    assert chosen.dtype == "bf16" and "4.15x" in chosen.reason
    assert chosen.as_dict()["matmul"] == {
        "fp32_gflops": 203.0,
        "bf16_gflops": 842.0,
        "threads": 2,
        "size": 1024,
        "bf16_speedup": 4.15,
    }
    probe_finds(monkeypatch, fp32=239.0, bf16=147.0)  # avx512_bf16 without AMX: bf16 is slower
    assert choose_precision("auto", CPU).dtype == "fp32"
    probe_finds(monkeypatch, fp32=200.0, bf16=220.0)  # a gain below the margin
    assert choose_precision("auto", CPU).dtype == "fp32"


def test_a_set_precision_and_other_devices_do_not_consult_the_probe(monkeypatch):
    monkeypatch.setattr(precision, "matmul_rates", lambda: pytest.fail("the probe ran"))
    assert choose_precision("bf16", CPU).dtype == "bf16"
    assert choose_precision("fp32", CPU).dtype == "fp32"
    cuda = choose_precision("auto", torch.device("cuda"))  # as the trainers always did on CUDA
    assert (cuda.dtype, cuda.device_type, cuda.rates) == ("bf16", "cuda", None)
    assert choose_precision("fp32", torch.device("cuda")).dtype == "fp32"
    assert choose_precision("auto", torch.device("mps")).dtype == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        choose_precision("fp16", CPU)


def test_bf16_autocasts_the_products_and_fp32_leaves_them():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with choose_precision("bf16", CPU).autocast():
        assert (a @ b).dtype == torch.bfloat16
    with choose_precision("fp32", CPU).autocast():
        assert (a @ b).dtype == torch.float32


def linear_output_dtypes(model) -> tuple[set[torch.dtype], list]:
    """The dtypes the first decoder layer's linear layers return, as the model runs."""
    seen: set[torch.dtype] = set()
    layer = next(m for name, m in model.named_modules() if name.endswith("layers.0"))
    hooks = [
        m.register_forward_hook(lambda module, args, out: seen.add(out.dtype))
        for m in layer.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    return seen, hooks


@pytest.mark.parametrize("setting", ["bf16", "fp32"])
def test_grpo_scores_in_the_chosen_precision_with_fp32_weights_and_records_it(tmp_path, setting):
    trainer = GRPOTrainer(small_config(tmp_path, steps=1, precision=setting))
    seen, hooks = linear_output_dtypes(trainer.model)
    history = trainer.train()
    trainer.close()
    for hook in hooks:
        hook.remove()
    # the rollouts decode in fp32; the loss's forward passes in bf16 when chosen
    assert (torch.bfloat16 in seen) == (setting == "bf16") and torch.float32 in seen
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert history[0]["tokens/trained"] > 0 and torch.isfinite(torch.tensor(history[0]["loss"]))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["precision"] == setting and saved["precision_chosen"]["dtype"] == setting


def test_sft_in_bf16_learns_with_fp32_weights_and_records_the_choice(tmp_path):
    save_jsonl([teacher_episode("crane", 1.0) for _ in range(4)], tmp_path / "episodes.jsonl")
    model, tokenizer = tiny_random_model(0)
    config = SFTConfig(
        episodes=str(tmp_path / "episodes.jsonl"),
        out=str(tmp_path / "run"),
        epochs=6,
        batch_size=4,
        learning_rate=1e-2,
        precision="bf16",
        progress=False,
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer)
    seen, _ = linear_output_dtypes(trainer.model)
    history = trainer.train()
    assert seen == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert history[-1]["loss"] < 0.75 * history[0]["loss"]
    chosen = json.loads((tmp_path / "run" / "config.json").read_text())["precision_chosen"]
    assert chosen == {"dtype": "bf16", "reason": "precision='bf16' in the config", "matmul": None}
