"""Trainer configs (llmgym/trainers/config.py): GRPOConfig and SFTConfig refuse, when made, values that would
break a run later; ``load_config`` checks a TOML file's types the same way."""

from __future__ import annotations

import math

import pytest
import torch

from llmgym.trainers.config import GRPOConfig, SFTConfig, load_config
from tests.trainers.toy_env import ENV_REF

NAN, INF = math.nan, math.inf


def refused(cls: type, field: str, value: object) -> str:
    """The message of the ValueError that ``cls(field=value)`` raises; it names the field and the value."""
    with pytest.raises(ValueError) as info:
        cls(**{field: value})
    message = str(info.value)
    assert message.startswith(f"{field} must be ") and f"got {value!r}" in message, message
    return message


# -- non-finite numbers ------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("learning_rate", INF),
        ("learning_rate", NAN),
        ("max_grad_norm", NAN),
        ("is_cap", NAN),
        ("epsilon_low", NAN),
        ("epsilon_high", INF),
        ("beta", NAN),
        ("temperature", NAN),
        ("temperature", INF),
        ("top_p", NAN),
        ("turn_lambda", NAN),
        ("weight_decay", INF),
        ("lora_dropout", NAN),
        ("solve_threshold", NAN),
    ],
)
def test_grpo_config_refuses_non_finite_numbers(field, value):
    """Regression: inf and nan used to pass validation and silently turn the weights into NaN."""
    assert "finite" in refused(GRPOConfig, field, value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("learning_rate", INF),
        ("max_grad_norm", NAN),
        ("weight_decay", NAN),
        ("min_reward", NAN),
        ("lora_dropout", INF),
    ],
)
def test_sft_config_refuses_non_finite_numbers(field, value):
    assert "finite" in refused(SFTConfig, field, value)


def test_toml_inf_and_nan_are_refused(tmp_path):
    path = tmp_path / "cfg.toml"
    for line in ("learning_rate = inf", "max_grad_norm = nan", "beta = -nan"):
        path.write_text(f'env_id = "{ENV_REF}"\n{line}\n')
        with pytest.raises(ValueError, match=line.split()[0] + " must be a finite number"):
            load_config(path)


# -- out of range ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("learning_rate", -1.0),
        ("weight_decay", -0.1),
        ("lora_r", 0),
        ("lora_alpha", 0),
        ("lora_dropout", 1.0),
        ("lora_dropout", -0.1),
        ("seed", -1),
        ("seed", 2**64),
        ("torch_threads", -1),
        ("torch_threads", 0),
        ("resample_zero_signal", -1),
        ("turn_lambda", -0.5),
        ("seed_pool", 2**63),
        ("out", ""),
        ("lora_target_modules", []),
        ("max_loss_tokens", -5),
        ("max_grad_norm", 0.0),
        ("is_cap", 0.0),
        ("epsilon_low", -0.1),
        ("beta", -1.0),
    ],
)
def test_grpo_config_refuses_values_out_of_range(field, value):
    refused(GRPOConfig, field, value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("learning_rate", -1.0),
        ("weight_decay", -1.0),
        ("lora_r", 0),
        ("lora_dropout", 1.5),
        ("seed", -1),
        ("out", ""),
        ("epochs", 0),
        ("max_length", 0),
    ],
)
def test_sft_config_refuses_values_out_of_range(field, value):
    refused(SFTConfig, field, value)


def test_the_limits_themselves_and_none_are_accepted():
    GRPOConfig(
        learning_rate=0,
        weight_decay=0.0,
        lora_dropout=0.0,
        seed=2**64 - 1,
        torch_threads=1,
        resample_zero_signal=0,
        turn_lambda=0.0,
        seed_pool=2**63 - 1,
        is_cap=None,
        max_grad_norm=None,
        max_loss_tokens=None,
        lora_target_modules=["q_proj"],
    )
    SFTConfig(learning_rate=0, min_reward=None, max_grad_norm=None, seed=0)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(max_loss_tokens=-5), "max_loss_tokens"),  # Dr. GRPO's normalizer: negative would flip the loss's sign
        (dict(max_grad_norm=0.0), "max_grad_norm"),  # clipping to 0 would zero every gradient: no learning
        (dict(concurrency=0), "concurrency"),  # was reported as the policy's batch_size
    ],
)
def test_config_rejects_values_that_silently_break_training(settings, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**settings)
    GRPOConfig(max_loss_tokens=None, max_grad_norm=None)  # None keeps its documented meaning


def test_sft_config_rejects_a_zero_clipping_norm():
    from llmgym.trainers.config import SFTConfig

    with pytest.raises(ValueError, match="max_grad_norm"):
        SFTConfig(max_grad_norm=0.0)


@pytest.mark.parametrize("field, value", [("keep_checkpoints", 0), ("top_p", 0.0), ("top_p", 1.5)])
def test_config_rejects_checkpoint_count_and_top_p_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        GRPOConfig(env_id="llmgym/Wordle-v0", **{field: value})


# -- booleans and kinds ------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, field, value",
    [
        (GRPOConfig, "steps", True),
        (GRPOConfig, "learning_rate", True),
        (GRPOConfig, "torch_threads", False),
        (GRPOConfig, "seed", 1.5),
        (GRPOConfig, "lora", "false"),
        (SFTConfig, "epochs", True),
        (SFTConfig, "progress", 0),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused(cls, field, value):
    refused(cls, field, value)


def test_toml_booleans_do_not_become_numbers(tmp_path):
    path = tmp_path / "cfg.toml"
    for line, field in (
        ("steps = true", "steps"),
        ("learning_rate = true", "learning_rate"),
        ("max_loss_tokens = false", "max_loss_tokens"),
    ):
        path.write_text(f'env_id = "{ENV_REF}"\n{line}\n')
        with pytest.raises(ValueError, match=f"{field}: .*valid .*got (True|False)"):
            load_config(path)
    # a bool field and a lossless string still pass
    path.write_text(f'env_id = "{ENV_REF}"\nlora = true\nsteps = "3"\n')
    config = load_config(path)
    assert config.lora is True and config.steps == 3


def test_load_config_checks_types_and_converts_lossless_values(tmp_path):
    from llmgym.trainers.config import SFTConfig, load_config

    path = tmp_path / "cfg.toml"
    path.write_text('env_id = "llmgym/Wordle-v0"\nsteps = "5"\nlearning_rate = 1\n')
    config = load_config(path)
    assert config.steps == 5 and isinstance(config.learning_rate, float)
    path.write_text('env_id = "llmgym/Wordle-v0"\nmicro_batch_size = 2.5\nreport_to = "wandb"\n')
    with pytest.raises(ValueError, match=r"micro_batch_size: .*fractional.*; report_to: .*list"):
        load_config(path)
    path.write_text('env_id = "llmgym/Wordle-v0"\n')
    with pytest.raises(ValueError, match="steps: .*integer"):  # command-line overrides are checked too
        load_config(path, steps="five")
    path.write_text('episodes = "runs/e.jsonl"\nepochs = "two"\n')
    with pytest.raises(ValueError, match="epochs: .*integer"):
        load_config(path, SFTConfig)


# -- the device --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [GRPOConfig, SFTConfig])
def test_a_device_this_machine_lacks_is_a_config_error(monkeypatch, cls):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU is available"):
        cls(device="cuda")
    with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
        cls(device="gpu")  # torch's own RuntimeError before, a traceback from the CLI
    cls(device="cpu"), cls(device="auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="1 CUDA device"):
        cls(device="cuda:3")
    cls(device="cuda:0"), cls(device="cuda")


# -- deprecated settings: each warns and becomes what replaces it, for one release ------------------


def test_tensorboard_flag_is_deprecated_and_becomes_a_report_to_sink():
    with pytest.warns(DeprecationWarning, match='report_to = \\["tensorboard"\\]'):
        config = GRPOConfig(tensorboard=True, report_to=["wandb"])
    assert config.report_to == ["tensorboard", "wandb"] and config.tensorboard is False


def test_tensorboard_key_in_a_toml_file_warns_too(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text("tensorboard = true\n")
    with pytest.warns(DeprecationWarning, match="tensorboard is deprecated"):
        assert load_config(path).report_to == ["tensorboard"]


def test_int8_rollout_precision_is_deprecated_and_runs_as_fp32():
    with pytest.warns(DeprecationWarning, match="int8.*runs as 'fp32'.*bf16"):
        assert GRPOConfig(rollout_precision="int8").rollout_precision == "fp32"


@pytest.mark.parametrize("config_class", [GRPOConfig, SFTConfig])
def test_the_bf16_switch_is_deprecated_for_precision(config_class, tmp_path):
    assert config_class().precision == "auto" and config_class().bf16 is None
    with pytest.warns(DeprecationWarning, match="bf16 is deprecated: set precision = 'fp32'"):
        config = config_class(bf16=False)  # fp32 everywhere, as before
    assert (config.precision, config.bf16) == ("fp32", None)
    path = tmp_path / "cfg.toml"
    path.write_text("bf16 = true\n")
    with pytest.warns(DeprecationWarning, match="set precision = 'auto'"):
        assert load_config(path, config_class).precision == "auto"  # bf16 on CUDA, as before
    with pytest.raises(ValueError, match="set precision='bf16' or the deprecated bf16=False, not both"):
        config_class(precision="bf16", bf16=False)
    with pytest.raises(ValueError, match=r"precision must be one of \('auto', 'bf16', 'fp32'\), got 'fp16'"):
        config_class(precision="fp16")


def test_lora_dropout_warns_that_grpo_keeps_dropout_off():
    with pytest.warns(DeprecationWarning, match="no effect in GRPO"):
        GRPOConfig(lora=True, lora_dropout=0.1)


def test_the_defaults_warn_about_nothing(recwarn):
    GRPOConfig()
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_the_curriculum_settings_are_checked_without_building_one(monkeypatch):
    """The config checks the curriculum's settings; only the trainer builds the curriculum (once)."""
    from llmgym.trainers import curriculum

    def no_build(*args, **kwargs):
        raise AssertionError("a Curriculum was built to validate the config")

    monkeypatch.setattr(curriculum.Curriculum, "__init__", no_build)
    GRPOConfig(curriculum_kwarg="difficulty", curriculum_levels=[1, 2])
    with pytest.raises(ValueError, match="demote_at must be in"):
        GRPOConfig(curriculum_kwarg="difficulty", curriculum_levels=[1, 2], curriculum_demote_at=0.9)
