"""Regressions of ``llmgym train grpo``'s settings sources and ``llmgym init``'s shadowing check.

``train grpo``: the env id may come from ENV_ID, ``--set env_id=`` or a ``--config`` file, and
two sources that disagree (also a flag and a ``--set`` of the same field) are a usage error.
The trainer is a stub here: nothing is trained, only the config the CLI built is looked at.
"""

from __future__ import annotations

import importlib.util

import pytest

from llmgym.cli import main
from llmgym.scaffold import scaffold

ENV = "llmgym/MathTools-v0"  # not GRPOConfig's default env_id, so a dropped value shows


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "cfg.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("source", ["positional", "config", "set"])
def test_env_id_may_come_from_any_one_source(source, stub_trainer, tmp_path):
    argv = {"positional": [ENV], "config": ["--config", _config(tmp_path, f'env_id = "{ENV}"\n')],
            "set": ["--set", f"env_id={ENV}"]}[source]
    assert main(["train", "grpo", *argv, "--steps", "1"]) == 0
    assert stub_trainer.config.env_id == ENV and stub_trainer.config.steps == 1


def test_agreeing_env_ids_are_accepted(stub_trainer, tmp_path):
    cfg = _config(tmp_path, f'env_id = "{ENV}"\n')
    assert main(["train", "grpo", ENV, "--config", cfg, "--set", f'env_id="{ENV}"']) == 0
    assert stub_trainer.config.env_id == ENV


@pytest.mark.parametrize("argv", [
    ["llmgym/Wordle-v0", "--set", f"env_id={ENV}"],
    ["llmgym/Wordle-v0", "--config", "CFG"],
    ["--set", "env_id=llmgym/Wordle-v0", "--config", "CFG"],
])
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
    assert main(["train", "grpo", ENV, "--steps", "5", "--set", 'steps="5"', "--lr", "1e-6",
                 "--set", "learning_rate=0.000001"]) == 0
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


@pytest.mark.parametrize("name", ["numpy", "gymnasium", "pytest"])
def test_init_refuses_the_name_of_an_installed_module(name, tmp_path, capsys):
    assert importlib.util.find_spec(name) is not None
    assert main(["init", name, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"installed module {name}" in err
    assert not (tmp_path / name).exists()


def test_init_names_the_stdlib_module_it_would_shadow(tmp_path, capsys):
    assert main(["init", "json", "--dir", str(tmp_path)]) == 2
    assert "standard-library module json" in capsys.readouterr().err


def test_init_rerun_over_its_own_importable_scaffold(tmp_path, monkeypatch):
    root = scaffold("rerun-env", tmp_path)
    monkeypatch.syspath_prepend(str(root))  # as after `pip install -e rerun-env`
    assert importlib.util.find_spec("rerun_env") is not None
    assert scaffold("rerun-env", tmp_path, force=True) == root  # the same project: allowed
    with pytest.raises(ValueError, match="installed module rerun_env"):
        scaffold("rerun-env", tmp_path / "elsewhere")  # a second copy would shadow the first


def test_init_ignores_a_bare_folder_of_that_name_on_the_path(tmp_path, monkeypatch):
    (tmp_path / "path" / "bare_env").mkdir(parents=True)  # a namespace package: any real package wins over it
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    assert scaffold("bare_env", tmp_path / "projects").is_dir()


def test_an_unknown_env_id_is_a_one_line_error(capsys):
    pytest.importorskip("transformers")
    # GRPOTrainer makes one env before it loads the model, so this loads no model
    assert main(["train", "grpo", "llmgym/Wordl-v0", "--model", "tiny-random", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "llmgym/Wordl-v0" in err and "Wordle" in err
