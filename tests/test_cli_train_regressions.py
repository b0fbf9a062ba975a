"""Regressions of ``llmgym train grpo``'s ``--set`` handling without a ``--config`` file."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import llmgym.trainers.grpo as grpo_module  # noqa: E402
from llmgym.cli import main  # noqa: E402


@pytest.mark.parametrize("sets, field", [(["steps=five"], "steps"), (["micro_batch_size=2.5"], "micro_batch_size"),
                                         (["is_cap=[1,"], "is_cap")])
def test_set_values_are_type_checked_without_config(sets, field, stub_trainer, capsys):
    argv = ["train", "grpo", "llmgym/Wordle-v0"] + [x for s in sets for x in ("--set", s)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert field in err and "not supported between" not in err


def test_set_none_and_conversions(stub_trainer, tmp_path):
    assert main(["train", "grpo", "llmgym/Wordle-v0", "--set", "is_cap=none", "--set", "max_grad_norm=NULL",
                 "--set", 'steps="3"', "--set", "scale_rewards=none", "--set", "curriculum_kwarg=null"]) == 0
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


def test_serve_port_in_use_is_a_clean_error(monkeypatch, capsys):
    import socket

    import llmgym.wrappers.scripted as scripted

    loaded = []
    monkeypatch.setattr(scripted, "load_scripted", lambda name: loaded.append(name))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert main(["serve", "--backend", "scripted", "--port", str(port)]) == 2
    assert "in use" in capsys.readouterr().err and not loaded  # no model loaded before the check


def test_grpo_module_main_bad_config_exits_2(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('steps = "five"\n')
    for path, reason in ((cfg, "steps: Input should be a valid integer"), (tmp_path / "missing.toml", "No such file")):
        with pytest.raises(SystemExit) as exit_info:
            grpo_module.main(["--config", str(path)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "Traceback" not in err
        assert f"error: {path}" in err or f"'{path}'" in err  # the message names the config file
        assert reason in err


@pytest.mark.parametrize("env_id", ["llmgym/Wordl-v0", "no_such_module:Env-v0"])
def test_grpo_module_main_unknown_env_exits_2_before_loading_a_model(tmp_path, capsys, stub_trainer, env_id):
    # stub_trainer: the trainer would be built (and load a model) only after the check
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'env_id = "{env_id}"\nmodel = "tiny-random"\n')
    with pytest.raises(SystemExit) as exit_info:
        grpo_module.main(["--config", str(cfg)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and ("Wordl" in err or "no_such_module" in err)
