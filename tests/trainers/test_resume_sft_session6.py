"""Regressions: resuming with other settings, checkpoints that do not fit, SFT inputs refused before training.

Each test failed before its fix: a resume with another env, loss or seed went on (and
overwrote ``config.json``); the checkpoint's learning rate beat the configured one; a
LoRA checkpoint of another rank dumped torch's state-dict error, and one of other target
modules loaded without a word; SFT trained on episodes without policy tokens, crashed
mid-run on a short mask or a negative id, and failed after the model load on an
unwritable folder; ``--export-messages`` wrote an empty selection or crashed on a folder;
a one-line episodes file that is not JSON read as empty.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from llmgym.cli import main  # noqa: E402
from llmgym.episode import Episode, JSONLWriter, load_jsonl, save_jsonl  # noqa: E402
from llmgym.trainers import grpo  # noqa: E402
from llmgym.trainers.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from llmgym.trainers.config import GRPOConfig, SFTConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.sft import SFTTrainer, tokenize_episode  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402

from tests.trainers.toy_env import ENV_REF  # noqa: E402


def small_config(out: Path, **overrides) -> GRPOConfig:
    settings = dict(env_id=ENV_REF, env_kwargs={"turns": 1}, model="tiny-random", out=str(out), steps=1, prompts_per_step=2,
                    group_size=2, max_new_tokens=3, learning_rate=1e-2, progress=False, plot=False, torch_threads=1)
    settings.update(overrides)
    return GRPOConfig(**settings)


def one_step_run(out: Path, **overrides) -> None:
    trainer = GRPOTrainer(small_config(out, **overrides))
    trainer.train()
    trainer.close()


# -- GRPO resume --------------------------------------------------------------------------


def test_resume_with_settings_that_define_another_run_is_an_error_naming_each(tmp_path):
    one_step_run(tmp_path)
    saved, metrics = (tmp_path / "config.json").read_text(), (tmp_path / "metrics.jsonl").read_text()
    changed = small_config(tmp_path, steps=3, env_kwargs={"turns": 2}, loss_aggregation="sequence_mean", seed=7)
    with pytest.raises(ValueError) as caught:
        GRPOTrainer(changed, resume=True)
    message = str(caught.value)
    assert "\n" not in message
    for part in ("env_kwargs {'turns': 1} -> {'turns': 2}", "loss_aggregation 'token_mean' -> 'sequence_mean'", "seed 0 -> 7"):
        assert part in message
    assert "steps" not in message.split(";")[0]  # more steps is allowed
    assert (tmp_path / "config.json").read_text() == saved and (tmp_path / "metrics.jsonl").read_text() == metrics


def test_cli_resume_on_another_env_exits_2_and_keeps_the_run(tmp_path, capsys):
    common = ["--model", "tiny-random", "--group-size", "2", "--prompts-per-step", "2", "--max-new-tokens", "3",
              "--no-progress", "--set", "plot=false", "--set", "torch_threads=1", "--out", str(tmp_path)]
    assert main(["train", "grpo", ENV_REF, "--steps", "1", *common]) == 0
    saved = (tmp_path / "config.json").read_text()
    capsys.readouterr()
    assert main(["train", "grpo", "llmgym/Wordle-v0", "--steps", "3", "--resume", "--lr", "0.5", *common]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "env_id" in err and "llmgym/Wordle-v0" in err
    assert (tmp_path / "config.json").read_text() == saved
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1


def test_resume_applies_the_configured_learning_rate_and_weight_decay_and_says_so(tmp_path, caplog):
    one_step_run(tmp_path)
    with caplog.at_level(logging.WARNING, logger="llmgym.trainers.checkpoint"):
        resumed = GRPOTrainer(small_config(tmp_path, steps=2, learning_rate=0.5, weight_decay=0.1), resume=True)
    assert resumed.step == 1
    # the checkpoint's optimizer had lr 1e-2 and no weight decay
    assert all(g["lr"] == 0.5 and g["weight_decay"] == 0.1 for g in resumed.optimizer.param_groups)
    assert "learning_rate 0.01 -> 0.5" in caplog.text and "steps 1 -> 2" in caplog.text
    resumed.train()
    resumed.close()
    assert json.loads((tmp_path / "config.json").read_text())["learning_rate"] == 0.5


def test_a_lora_checkpoint_of_another_rank_or_target_modules_is_a_one_line_error(tmp_path):
    one_step_run(tmp_path, lora=True, lora_r=4)
    with pytest.raises(ValueError, match="lora_r 4 -> 8"):  # caught by the settings check, before the weights are read
        GRPOTrainer(small_config(tmp_path, lora=True, lora_r=8), resume=True)
    (tmp_path / "config.json").unlink()  # a run folder without its settings: the weights themselves are checked
    with pytest.raises(ValueError, match="do not fit this model") as caught:
        GRPOTrainer(small_config(tmp_path, lora=True, lora_r=8), resume=True)
    assert "\n" not in str(caught.value) and "[4, " in str(caught.value)
    # same rank, fewer target modules: peft's non-strict load skipped the other adapters silently
    with pytest.raises(ValueError, match="the model lacks"):
        GRPOTrainer(small_config(tmp_path, lora=True, lora_r=4, lora_target_modules=["q_proj"]), resume=True)


def test_full_weights_of_another_shape_are_a_one_line_error(tmp_path):
    model = torch.nn.Linear(2, 3)
    save_checkpoint(tmp_path, 1, model, torch.optim.AdamW(model.parameters()), {})
    other = torch.nn.Linear(2, 5)
    with pytest.raises(ValueError, match=r"2 of other shapes \(e.g. bias: \[3\] saved, \[5\] in the model\)") as caught:
        load_checkpoint(tmp_path / "step_000001", other, torch.optim.AdamW(other.parameters()))
    assert "\n" not in str(caught.value)


# -- SFT -------------------------------------------------------------------------------------


def recorded(token_ids: list[int], mask: list[int], reward: float = 1.0) -> Episode:
    return Episode("x", turn_rewards=[reward], token_ids=token_ids, mask=mask,
                   messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])


@pytest.fixture
def no_model_load(monkeypatch):
    """Every check below must fail before the model is loaded."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(grpo, "load_policy_model", refuse)


@pytest.mark.parametrize("bad, message", [
    (recorded([5, 6, 7], [0, 0, 0]), "no policy token"),
    (recorded([5, 6, 7], [1, 0, 0]), "no policy token"),  # the first token is never trained on
    (recorded([5, 6, 7], [0, 1]), "2 entries for 3 token ids"),
    (recorded([5, -1, 7], [0, 1, 1]), "token id -1 is not an integer >= 0"),
    (recorded([5, 6, 7], [0, 2, 1]), "must be 0"),
])
def test_sft_refuses_episodes_it_cannot_train_on_before_loading_the_model(tmp_path, no_model_load, bad, message):
    episodes = [recorded([5, 6, 7], [0, 1, 1]), bad]
    with pytest.raises(ValueError, match=f"episode 2 of 2: .*{message}"):
        SFTTrainer(SFTConfig(out=str(tmp_path), model="tiny-random", progress=False), episodes=episodes)


def test_sft_refuses_a_max_length_that_cuts_every_policy_token(tmp_path, no_model_load):
    episodes = [recorded([5, 6, 7, 8, 9], [0, 0, 0, 1, 1])]
    with pytest.raises(ValueError, match="max_length 3 cuts every policy token"):
        SFTTrainer(SFTConfig(out=str(tmp_path), max_length=3, progress=False), episodes=episodes)


def test_tokenize_refuses_recorded_ids_without_policy_tokens_and_chats_cut_by_max_length():
    _, tokenizer = tiny_random_model(0)
    with pytest.raises(ValueError, match="no policy token"):  # was returned as it is, and trained on with loss 0
        tokenize_episode(recorded([5, 6, 7], [0, 0, 0]), tokenizer)
    chat = Episode("x", messages=[{"role": "system", "content": "a long system prompt " * 20},
                                  {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert sum(tokenize_episode(chat, tokenizer).mask) > 0
    with pytest.raises(ValueError, match="max_length 16 cuts every policy token"):
        tokenize_episode(chat, tokenizer, max_length=16)


def test_cli_sft_on_masks_without_policy_tokens_exits_2(tmp_path, capsys, no_model_load):
    save_jsonl([recorded([5, 6, 7], [0, 0, 0]) for _ in range(3)], tmp_path / "eps.jsonl")
    assert main(["train", "sft", "--episodes", str(tmp_path / "eps.jsonl"), "--model", "tiny-random",
                 "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "episode 1 of 3" in err and "no policy token" in err


def test_cli_sft_into_an_unwritable_folder_exits_2_before_loading_the_model(tmp_path, capsys, no_model_load):
    save_jsonl([recorded([5, 6, 7], [0, 1, 1])], tmp_path / "eps.jsonl")
    (tmp_path / "afile").write_text("")
    for out in (tmp_path / "afile" / "sub", tmp_path / "afile"):
        assert main(["train", "sft", "--episodes", str(tmp_path / "eps.jsonl"), "--model", "tiny-random",
                     "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {out}" in err and "is a file, not a folder" in err


def test_cli_export_messages_into_a_folder_or_of_nothing_exits_2(tmp_path, capsys):
    save_jsonl([recorded([5, 6, 7], [0, 1, 1], reward=1.0)], tmp_path / "eps.jsonl")
    assert main(["train", "sft", "--episodes", str(tmp_path / "eps.jsonl"), "--export-messages", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--export-messages {tmp_path} is a folder, not a file" in err
    chat = tmp_path / "chat.jsonl"
    assert main(["train", "sft", "--episodes", str(tmp_path / "eps.jsonl"), "--min-reward", "100",
                 "--export-messages", str(chat)]) == 2
    assert "total reward >= 100.0 (of 1); lower --min-reward" in capsys.readouterr().err  # as training says it
    assert not chat.exists()


# -- the JSONL loader ----------------------------------------------------------------------


def test_a_file_of_one_line_that_is_not_json_is_a_parse_error_not_empty(tmp_path, capsys):
    path = tmp_path / "g.jsonl"
    for text in ("{not json\n", "{not json"):  # with a newline it was not cut short; without, it is no episode's start
        path.write_text(text)
        with pytest.raises(ValueError, match="g.jsonl:1: not an episode"):
            load_jsonl(path)
    assert main(["train", "sft", "--episodes", str(path), "--model", "tiny-random"]) == 2
    err = capsys.readouterr().err
    assert "g.jsonl:1: not an episode" in err and "empty" not in err


def test_only_a_cut_short_last_line_is_skipped(tmp_path):
    path = tmp_path / "e.jsonl"
    with JSONLWriter(path) as writer:
        writer.write(Episode("x", seed=1, messages=[{"role": "user", "content": "é"}]))
    whole = Episode("x", seed=2, messages=[{"role": "user", "content": "é"}]).to_json().encode()
    good = path.read_bytes()
    cut = whole.index("é".encode()) + 1  # mid-character: the file is not valid UTF-8 there
    path.write_bytes(good + whole[:cut])
    assert [e.seed for e in load_jsonl(path)] == [1]
    path.write_bytes(whole[:20])  # a run killed while writing its first episode
    assert load_jsonl(path) == []
    path.write_bytes(good + whole[:cut] + b"\n")  # ends with a newline: not a write cut short
    with pytest.raises(ValueError, match="e.jsonl:2"):
        load_jsonl(path)
