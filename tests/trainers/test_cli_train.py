"""``llmgym train grpo`` / ``llmgym train sft`` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

import llmgym.trainers.grpo as grpo_module  # noqa: E402
from llmgym.cli import main  # noqa: E402
from llmgym.episode import Episode, save_jsonl  # noqa: E402
from tests.trainers.toy_env import ENV_REF  # noqa: E402


def test_train_grpo_one_step(tmp_path, capsys):
    config = tmp_path / "cfg.toml"
    config.write_text(f'env_id = "{ENV_REF}"\nsteps = 5\nplot = false\n')
    code = main(
        [
            "train",
            "grpo",
            "--config",
            str(config),
            "--model",
            "tiny-random",
            "--steps",
            "1",
            "--group-size",
            "2",
            "--prompts-per-step",
            "2",
            "--max-new-tokens",
            "4",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--set",
            "learning_rate=0.01",
            "--set",
            "loss_aggregation=dr_grpo",
            "--env-kwargs",
            "{turns = 2}",
        ]
    )
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
    episodes = [
        Episode(
            "x",
            turn_rewards=[r],
            messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": f"answer {r}"}],
        )
        for r in (0.0, 1.0, 1.0)
    ]
    save_jsonl(episodes, tmp_path / "episodes.jsonl")
    assert (
        main(
            [
                "train",
                "sft",
                "--episodes",
                str(tmp_path / "episodes.jsonl"),
                "--min-reward",
                "1",
                "--export-messages",
                str(tmp_path / "chat.jsonl"),
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in (tmp_path / "chat.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["messages"][1] == {"role": "assistant", "content": "answer 1.0"}
    assert (
        main(
            [
                "train",
                "sft",
                "--episodes",
                str(tmp_path / "episodes.jsonl"),
                "--min-reward",
                "1",
                "--model",
                "tiny-random",
                "--out",
                str(tmp_path / "sft"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert "2 episodes, 1 steps" in capsys.readouterr().out
    assert main(["train", "sft", "--episodes", str(tmp_path / "missing.jsonl")]) == 2


def test_train_grpo_env_kwargs_as_json_like_eval(tmp_path, capsys):
    """Regression: ``train grpo --env-kwargs`` used to take TOML only, not the JSON object ``eval`` takes."""
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "grpo",
                ENV_REF,
                "--model",
                "tiny-random",
                "--steps",
                "1",
                "--group-size",
                "2",
                "--prompts-per-step",
                "1",
                "--max-new-tokens",
                "2",
                "--out",
                str(out),
                "--no-progress",
                "--set",
                "plot=false",
                "--env-kwargs",
                '{"turns": 1}',
            ]
        )
        == 0
    )
    assert json.loads((out / "config.json").read_text())["env_kwargs"] == {"turns": 1}
    # resuming a run already at --steps trains nothing, and says so instead of finishing silently
    assert (
        main(
            [
                "train",
                "grpo",
                ENV_REF,
                "--model",
                "tiny-random",
                "--steps",
                "1",
                "--group-size",
                "2",
                "--prompts-per-step",
                "1",
                "--max-new-tokens",
                "2",
                "--out",
                str(out),
                "--no-progress",
                "--set",
                "plot=false",
                "--env-kwargs",
                "{turns = 1}",
                "--resume",
            ]
        )
        == 0
    )
    assert "nothing to train: the run in" in capsys.readouterr().out
    assert main(["train", "grpo", ENV_REF, "--env-kwargs", "[1]"]) == 2
    assert "JSON object" in capsys.readouterr().err


# -- bad values: one line and exit 2, before a trainer (and a model) is made ----------------------------


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--lr", "inf"], "learning_rate"),
        (["--beta", "nan"], "beta"),
        (["--temperature", "nan"], "temperature"),
        (["--set", "max_grad_norm=nan"], "max_grad_norm"),
        (["--set", "is_cap=nan"], "is_cap"),
        (["--set", "epsilon_low=nan"], "epsilon_low"),
        (["--set", "steps=true"], "steps"),
        (["--set", "learning_rate=true"], "learning_rate"),
        (["--set", "torch_threads=0"], "torch_threads"),
        (["--turn-lambda", "-1"], "turn_lambda"),
        (["--seed", "-1"], "seed"),
        (["--set", "curriculum_levels=[1,2]"], "curriculum_levels"),
    ],
)
def test_train_grpo_refuses_bad_values_before_building_the_trainer(argv, field, stub_trainer, capsys):
    assert main(["train", "grpo", ENV_REF, *argv]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}" in err and "Traceback" not in err
    assert stub_trainer.config is None  # no trainer, so no model, was made


def test_train_sft_refuses_an_infinite_learning_rate(tmp_path, monkeypatch, capsys):
    import llmgym.trainers.sft as sft_module

    episodes = tmp_path / "episodes.jsonl"
    save_jsonl(
        [
            Episode(
                ENV_REF,
                seed=0,
                messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "aeiou"}],
                turn_rewards=[1.0],
            )
        ],
        episodes,
    )
    monkeypatch.setattr(sft_module, "SFTTrainer", lambda *a, **k: pytest.fail("the trainer was built"))
    assert main(["train", "sft", "--episodes", str(episodes), "--lr", "inf", "--no-progress"]) == 2
    assert "error: learning_rate must be a finite number, got inf" in capsys.readouterr().err


def test_train_grpo_bad_device_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["train", "grpo", ENV_REF, "--model", "tiny-random", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA GPU" in err  # was an AssertionError traceback from the model load


def test_an_internal_runtime_error_is_not_swallowed(monkeypatch):
    from llmgym.trainers.config import ServerConfigError

    class Broken:
        def __init__(self, config, resume=False):
            raise RuntimeError("an internal bug")

    monkeypatch.setattr(grpo_module, "GRPOTrainer", Broken)
    with pytest.raises(RuntimeError, match="an internal bug"):
        main(["train", "grpo", ENV_REF])
    assert issubclass(ServerConfigError, RuntimeError)  # code that caught the old RuntimeError still catches it
