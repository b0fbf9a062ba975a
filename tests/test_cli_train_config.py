"""``llmgym train grpo``'s settings: the env id and every field may come from a flag, ``--set`` or a ``--config``
file, and two sources that disagree are a usage error.

The trainer is a stub here: nothing is trained, only the config the CLI built is looked at.
"""

from __future__ import annotations

import pytest

from llmgym.cli import main

ENV = "llmgym/MathTools-v0"  # not GRPOConfig's default env_id, so a dropped value shows


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "cfg.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("source", ["positional", "config", "set"])
def test_env_id_may_come_from_any_one_source(source, stub_trainer, tmp_path):
    argv = {
        "positional": [ENV],
        "config": ["--config", _config(tmp_path, f'env_id = "{ENV}"\n')],
        "set": ["--set", f"env_id={ENV}"],
    }[source]
    assert main(["train", "grpo", *argv, "--steps", "1"]) == 0
    assert stub_trainer.config.env_id == ENV and stub_trainer.config.steps == 1


def test_agreeing_env_ids_are_accepted(stub_trainer, tmp_path):
    cfg = _config(tmp_path, f'env_id = "{ENV}"\n')
    assert main(["train", "grpo", ENV, "--config", cfg, "--set", f'env_id="{ENV}"']) == 0
    assert stub_trainer.config.env_id == ENV


@pytest.mark.parametrize(
    "argv",
    [
        ["llmgym/Wordle-v0", "--set", f"env_id={ENV}"],
        ["llmgym/Wordle-v0", "--config", "CFG"],
        ["--set", "env_id=llmgym/Wordle-v0", "--config", "CFG"],
    ],
)
def test_disagreeing_env_ids_are_refused_naming_both(argv, stub_trainer, tmp_path, capsys):
    cfg = _config(tmp_path, f'env_id = "{ENV}"\n')
    assert main(["train", "grpo", *[cfg if a == "CFG" else a for a in argv]]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "env_id" in err
    assert ENV in err and "llmgym/Wordle-v0" in err
    assert stub_trainer.config is None  # refused before any trainer was built


def test_a_flag_and_a_set_of_the_same_field_must_agree(stub_trainer, capsys):
    assert main(["train", "grpo", ENV, "--steps", "5", "--set", "steps=7"]) == 2
    err = capsys.readouterr().err
    assert "--steps 5" in err and "--set steps=7" in err and stub_trainer.config is None
    assert main(["train", "grpo", ENV, "--set", "steps=5", "--set", "steps=7"]) == 2
    assert "--set steps=5" in capsys.readouterr().err
    assert main(["train", "grpo", ENV, "--lora", "--set", "lora=false"]) == 2
    assert "--lora" in capsys.readouterr().err
    # the same value twice, after type conversion, is no conflict
    assert (
        main(
            [
                "train",
                "grpo",
                ENV,
                "--steps",
                "5",
                "--set",
                'steps="5"',
                "--lr",
                "1e-6",
                "--set",
                "learning_rate=0.000001",
            ]
        )
        == 0
    )
    assert stub_trainer.config.steps == 5 and stub_trainer.config.learning_rate == 1e-6


def test_flags_still_override_the_config_file(stub_trainer, tmp_path):
    cfg = _config(tmp_path, f'env_id = "{ENV}"\nsteps = 7\nis_cap = 3.0\n')
    assert main(["train", "grpo", "--config", cfg, "--steps", "2", "--set", "is_cap=none"]) == 0
    assert stub_trainer.config.steps == 2 and stub_trainer.config.is_cap is None


def test_help_states_the_precedence(capsys):
    with pytest.raises(SystemExit):
        main(["train", "grpo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "override a --config file" in out and "must have one value" in out


def test_an_unknown_env_id_is_a_one_line_error(capsys):
    pytest.importorskip("transformers")
    # GRPOTrainer makes one env before it loads the model, so this loads no model
    assert main(["train", "grpo", "llmgym/Wordl-v0", "--model", "tiny-random", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "llmgym/Wordl-v0" in err and "Wordle" in err


@pytest.mark.parametrize(
    "sets, field",
    [(["steps=five"], "steps"), (["micro_batch_size=2.5"], "micro_batch_size"), (["is_cap=[1,"], "is_cap")],
)
def test_set_values_are_type_checked_without_config(sets, field, stub_trainer, capsys):
    argv = ["train", "grpo", "llmgym/Wordle-v0"] + [x for s in sets for x in ("--set", s)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert field in err and "not supported between" not in err


def test_set_none_and_conversions(stub_trainer, tmp_path):
    assert (
        main(
            [
                "train",
                "grpo",
                "llmgym/Wordle-v0",
                "--set",
                "is_cap=none",
                "--set",
                "max_grad_norm=NULL",
                "--set",
                'steps="3"',
                "--set",
                "scale_rewards=none",
                "--set",
                "curriculum_kwarg=null",
            ]
        )
        == 0
    )
    config = stub_trainer.config
    assert config.is_cap is None and config.max_grad_norm is None and config.steps == 3
    assert config.scale_rewards == "none" and config.curriculum_kwarg is None  # a str field keeps the word
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("is_cap = 3.0\nsteps = 7\n")
    assert main(["train", "grpo", "--config", str(cfg), "--set", "is_cap=none", "--steps", "2"]) == 0
    assert stub_trainer.config.is_cap is None and stub_trainer.config.steps == 2


def test_set_empty_key(capsys):
    assert main(["train", "grpo", "llmgym/Wordle-v0", "--set", "=3"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
