"""``python -m llmgym.trainers.grpo``'s ``main``: a bad config or env id exits 2 with one message, before a model
loads."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import llmgym.trainers.grpo as grpo_module  # noqa: E402
from tests.trainers.toy_env import ENV_REF  # noqa: E402


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


@pytest.mark.parametrize(
    "lines, reason",
    [
        ("learning_rate = -1\n", "learning_rate must be >= 0, got -1.0"),
        ('[env_kwargs]\nturns = "two"\n', "turns"),  # a TypeError from gymnasium.make, before any model loads
    ],
)
def test_grpo_module_main_reports_usage_errors_in_one_line(lines, reason, tmp_path, capsys):
    """Regression: env kwargs the env refuses used to end in a traceback instead of one line and exit 2."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'env_id = "{ENV_REF}"\nmodel = "tiny-random"\nout = "{tmp_path / "run"}"\n{lines}')
    with pytest.raises(SystemExit) as exit_info:
        grpo_module.main(["--config", str(cfg)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and reason in err
