"""``llmgym train grpo`` / ``llmgym train sft`` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from llmgym.cli import main  # noqa: E402
from llmgym.episode import Episode, save_jsonl  # noqa: E402

from tests.trainers.toy_env import ENV_REF  # noqa: E402


def test_train_grpo_one_step(tmp_path, capsys):
    config = tmp_path / "cfg.toml"
    config.write_text(f'env_id = "{ENV_REF}"\nsteps = 5\nplot = false\n')
    code = main(["train", "grpo", "--config", str(config), "--model", "tiny-random", "--steps", "1", "--group-size", "2",
                 "--prompts-per-step", "2", "--max-new-tokens", "4", "--out", str(tmp_path / "run"), "--no-progress",
                 "--set", "learning_rate=0.01", "--set", "loss_aggregation=dr_grpo", "--env-kwargs", "{turns = 2}"])
    assert code == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["steps"] == 1 and saved["learning_rate"] == 0.01 and saved["env_kwargs"] == {"turns": 2}
    assert saved["loss_aggregation"] == "dr_grpo"
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1
    assert "step 1: reward" in capsys.readouterr().out


def test_train_grpo_bad_input_is_a_clean_error(tmp_path, capsys):
    assert main(["train", "grpo", ENV_REF, "--set", "no_such_field=1"]) == 2
    assert "no_such_field" in capsys.readouterr().err
    assert main(["train", "grpo", ENV_REF, "--group-size", "1", "--model", "tiny-random"]) == 2
    assert "group_size" in capsys.readouterr().err
    assert main(["train", "grpo"]) == 2
    assert "ENV_ID" in capsys.readouterr().err


def test_train_sft_export_and_train(tmp_path, capsys):
    episodes = [Episode("x", turn_rewards=[r], messages=[{"role": "user", "content": "hi"},
                                                         {"role": "assistant", "content": f"answer {r}"}])
                for r in (0.0, 1.0, 1.0)]
    save_jsonl(episodes, tmp_path / "episodes.jsonl")
    assert main(["train", "sft", "--episodes", str(tmp_path / "episodes.jsonl"), "--min-reward", "1",
                 "--export-messages", str(tmp_path / "chat.jsonl")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "chat.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["messages"][1] == {"role": "assistant", "content": "answer 1.0"}
    assert main(["train", "sft", "--episodes", str(tmp_path / "episodes.jsonl"), "--min-reward", "1", "--model",
                 "tiny-random", "--out", str(tmp_path / "sft"), "--no-progress"]) == 0
    assert "2 episodes, 1 steps" in capsys.readouterr().out
    assert main(["train", "sft", "--episodes", str(tmp_path / "missing.jsonl")]) == 2
