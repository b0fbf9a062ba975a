"""Config values that used to pass validation and break a run later (NaN weights, a late traceback), and
the usage errors of ``python -m llmgym.trainers.grpo`` and of a ``base_url`` server that refuses the adapter."""

from __future__ import annotations

import http.server
import math
import re
import threading

import pytest

pytest.importorskip("transformers")

import llmgym.trainers.grpo as grpo_module  # noqa: E402
from llmgym.cli import main  # noqa: E402
from llmgym.episode import Episode, save_jsonl  # noqa: E402
from llmgym.trainers.config import GRPOConfig, SFTConfig, load_config  # noqa: E402

from tests.trainers.toy_env import ENV_REF  # noqa: E402

NAN, INF = math.nan, math.inf


def refused(cls: type, field: str, value: object) -> str:
    """The message of the ValueError that ``cls(field=value)`` raises; it names the field and the value."""
    with pytest.raises(ValueError) as info:
        cls(**{field: value})
    message = str(info.value)
    assert message.startswith(f"{field} must be ") and f"got {value!r}" in message, message
    return message


# -- non-finite numbers ------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("learning_rate", INF), ("learning_rate", NAN), ("max_grad_norm", NAN), ("is_cap", NAN), ("epsilon_low", NAN),
    ("epsilon_high", INF), ("beta", NAN), ("temperature", NAN), ("temperature", INF), ("top_p", NAN),
    ("turn_lambda", NAN), ("weight_decay", INF), ("lora_dropout", NAN), ("solve_threshold", NAN),
])
def test_grpo_config_refuses_non_finite_numbers(field, value):
    assert "finite" in refused(GRPOConfig, field, value)


@pytest.mark.parametrize("field, value", [
    ("learning_rate", INF), ("max_grad_norm", NAN), ("weight_decay", NAN), ("min_reward", NAN), ("lora_dropout", INF),
])
def test_sft_config_refuses_non_finite_numbers(field, value):
    assert "finite" in refused(SFTConfig, field, value)


def test_toml_inf_and_nan_are_refused(tmp_path):
    path = tmp_path / "cfg.toml"
    for line in ("learning_rate = inf", "max_grad_norm = nan", "beta = -nan"):
        path.write_text(f'env_id = "{ENV_REF}"\n{line}\n')
        with pytest.raises(ValueError, match=line.split()[0] + " must be a finite number"):
            load_config(path)


# -- out of range ----------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("learning_rate", -1.0), ("weight_decay", -0.1), ("lora_r", 0), ("lora_alpha", 0), ("lora_dropout", 1.0),
    ("lora_dropout", -0.1), ("seed", -1), ("seed", 2**64), ("torch_threads", -1), ("torch_threads", 0),
    ("resample_zero_signal", -1), ("turn_lambda", -0.5), ("seed_pool", 2**63), ("out", ""), ("lora_target_modules", []),
    ("max_loss_tokens", -5), ("max_grad_norm", 0.0), ("is_cap", 0.0), ("epsilon_low", -0.1), ("beta", -1.0),
])
def test_grpo_config_refuses_values_out_of_range(field, value):
    refused(GRPOConfig, field, value)


@pytest.mark.parametrize("field, value", [
    ("learning_rate", -1.0), ("weight_decay", -1.0), ("lora_r", 0), ("lora_dropout", 1.5), ("seed", -1), ("out", ""),
    ("epochs", 0), ("max_length", 0),
])
def test_sft_config_refuses_values_out_of_range(field, value):
    refused(SFTConfig, field, value)


def test_the_limits_themselves_and_none_are_accepted():
    GRPOConfig(learning_rate=0, weight_decay=0.0, lora_dropout=0.0, seed=2**64 - 1, torch_threads=1,
               resample_zero_signal=0, turn_lambda=0.0, seed_pool=2**63 - 1, is_cap=None, max_grad_norm=None,
               max_loss_tokens=None, lora_target_modules=["q_proj"])
    SFTConfig(learning_rate=0, min_reward=None, max_grad_norm=None, seed=0)


# -- booleans and kinds ------------------------------------------------------------------


@pytest.mark.parametrize("cls, field, value", [
    (GRPOConfig, "steps", True), (GRPOConfig, "learning_rate", True), (GRPOConfig, "torch_threads", False),
    (GRPOConfig, "seed", 1.5), (GRPOConfig, "lora", "false"), (SFTConfig, "epochs", True), (SFTConfig, "progress", 0),
])
def test_a_value_of_the_wrong_kind_is_refused(cls, field, value):
    refused(cls, field, value)


def test_toml_booleans_do_not_become_numbers(tmp_path):
    path = tmp_path / "cfg.toml"
    for line, field in (("steps = true", "steps"), ("learning_rate = true", "learning_rate"),
                        ("max_loss_tokens = false", "max_loss_tokens")):
        path.write_text(f'env_id = "{ENV_REF}"\n{line}\n')
        with pytest.raises(ValueError, match=f"{field}: .*valid .*got (True|False)"):
            load_config(path)
    path.write_text(f'env_id = "{ENV_REF}"\nlora = true\nsteps = "3"\n')  # a bool field and a lossless string still pass
    config = load_config(path)
    assert config.lora is True and config.steps == 3


# -- curriculum settings without a curriculum ----------------------------------------------------------


@pytest.mark.parametrize("field, value", [("curriculum_levels", [1, 2]), ("curriculum_promote_at", 0.5),
                                          ("curriculum_demote_at", 0.1), ("curriculum_window", 4)])
def test_curriculum_settings_without_curriculum_kwarg_are_refused(field, value):
    with pytest.raises(ValueError, match=re.escape(f"{field}={value!r} needs curriculum_kwarg")):
        GRPOConfig(**{field: value})
    GRPOConfig(curriculum_kwarg="difficulty", **{field: value, "curriculum_levels": [1, 2]})


# -- the command line ----------------------------------------------------------------------


@pytest.mark.parametrize("argv, field", [
    (["--lr", "inf"], "learning_rate"), (["--beta", "nan"], "beta"), (["--temperature", "nan"], "temperature"),
    (["--set", "max_grad_norm=nan"], "max_grad_norm"), (["--set", "is_cap=nan"], "is_cap"),
    (["--set", "epsilon_low=nan"], "epsilon_low"), (["--set", "steps=true"], "steps"),
    (["--set", "learning_rate=true"], "learning_rate"), (["--set", "torch_threads=0"], "torch_threads"),
    (["--turn-lambda", "-1"], "turn_lambda"), (["--seed", "-1"], "seed"),
    (["--set", "curriculum_levels=[1,2]"], "curriculum_levels"),
])
def test_train_grpo_refuses_bad_values_before_building_the_trainer(argv, field, stub_trainer, capsys):
    assert main(["train", "grpo", ENV_REF, *argv]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}" in err and "Traceback" not in err
    assert stub_trainer.config is None  # no trainer, so no model, was made


def test_train_sft_refuses_an_infinite_learning_rate(tmp_path, monkeypatch, capsys):
    import llmgym.trainers.sft as sft_module

    episodes = tmp_path / "episodes.jsonl"
    save_jsonl([Episode(ENV_REF, seed=0, messages=[{"role": "user", "content": "hi"},
                                                   {"role": "assistant", "content": "aeiou"}], turn_rewards=[1.0])],
               episodes)
    monkeypatch.setattr(sft_module, "SFTTrainer", lambda *a, **k: pytest.fail("the trainer was built"))
    assert main(["train", "sft", "--episodes", str(episodes), "--lr", "inf", "--no-progress"]) == 2
    assert "error: learning_rate must be a finite number, got inf" in capsys.readouterr().err


# -- python -m llmgym.trainers.grpo ----------------------------------------------------------------------


@pytest.mark.parametrize("lines, reason", [
    ("learning_rate = -1\n", "learning_rate must be >= 0, got -1.0"),
    ('[env_kwargs]\nturns = "two"\n', "turns"),  # a TypeError from gymnasium.make, before any model loads
])
def test_grpo_module_main_reports_usage_errors_in_one_line(lines, reason, tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'env_id = "{ENV_REF}"\nmodel = "tiny-random"\nout = "{tmp_path / "run"}"\n{lines}')
    with pytest.raises(SystemExit) as exit_info:
        grpo_module.main(["--config", str(cfg)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and reason in err


# -- a server that refuses the LoRA adapter ----------------------------------------------------------------


@pytest.fixture
def lora_refusing_server():
    """An OpenAI-compatible base URL whose ``/v1/load_lora_adapter`` answers 400, as ``llmgym serve --backend scripted``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": {"message": "LoRA adapters need the transformers backend", "code": 400}}'
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_server_that_refuses_the_adapter_is_a_one_line_error(lora_refusing_server, tmp_path, capsys):
    argv = ["train", "grpo", ENV_REF, "--model", "tiny-random", "--lora", "--base-url", lora_refusing_server,
            "--steps", "1", "--group-size", "2", "--prompts-per-step", "1", "--max-new-tokens", "4", "--no-progress",
            "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: the server refused the LoRA adapter: 400" in err and "Traceback" not in err


def test_an_internal_runtime_error_is_not_swallowed(monkeypatch):
    from llmgym.trainers.config import ServerConfigError

    class Broken:
        def __init__(self, config, resume=False):
            raise RuntimeError("an internal bug")

    monkeypatch.setattr(grpo_module, "GRPOTrainer", Broken)
    with pytest.raises(RuntimeError, match="an internal bug"):
        main(["train", "grpo", ENV_REF])
    assert issubclass(ServerConfigError, RuntimeError)  # code that caught the old RuntimeError still catches it
