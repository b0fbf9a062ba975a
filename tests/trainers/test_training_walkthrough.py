"""Problems found by walking through docs/training.md as a new user, each pinned by a test."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from llmgym.cli import main  # noqa: E402
from llmgym.episode import Episode, save_jsonl  # noqa: E402
from llmgym.trainers.config import GRPOConfig, SFTConfig  # noqa: E402

from tests.trainers.toy_env import ENV_REF  # noqa: E402


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


def test_train_grpo_bad_device_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["train", "grpo", ENV_REF, "--model", "tiny-random", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA GPU" in err  # was an AssertionError traceback from the model load


def test_train_grpo_env_kwargs_as_json_like_eval(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "grpo", ENV_REF, "--model", "tiny-random", "--steps", "1", "--group-size", "2",
                 "--prompts-per-step", "1", "--max-new-tokens", "2", "--out", str(out), "--no-progress",
                 "--set", "plot=false", "--env-kwargs", '{"turns": 1}']) == 0
    assert json.loads((out / "config.json").read_text())["env_kwargs"] == {"turns": 1}
    # resuming a run already at --steps trains nothing, and says so instead of finishing silently
    assert main(["train", "grpo", ENV_REF, "--model", "tiny-random", "--steps", "1", "--group-size", "2",
                 "--prompts-per-step", "1", "--max-new-tokens", "2", "--out", str(out), "--no-progress",
                 "--set", "plot=false", "--env-kwargs", "{turns = 1}", "--resume"]) == 0
    assert "nothing to train: the run in" in capsys.readouterr().out
    assert main(["train", "grpo", ENV_REF, "--env-kwargs", "[1]"]) == 2
    assert "JSON object" in capsys.readouterr().err


def test_sft_with_no_episode_kept_fails_before_loading_the_model(tmp_path, monkeypatch):
    import llmgym.trainers.grpo as grpo
    from llmgym.trainers.sft import SFTTrainer

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(grpo, "load_policy_model", no_load)
    path = tmp_path / "episodes.jsonl"
    save_jsonl([Episode("x", turn_rewards=[0.5])], path)
    with pytest.raises(ValueError, match="lower --min-reward"):
        SFTTrainer(SFTConfig(episodes=str(path), min_reward=1.0, model="tiny-random"))
    path.write_text("")
    with pytest.raises(ValueError, match="file is empty"):
        SFTTrainer(SFTConfig(episodes=str(path), model="tiny-random"))
