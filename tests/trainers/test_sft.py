"""SFT warm-up: episode selection, assistant-only masks, messages export, learning on recorded episodes; inputs it
cannot train on refused before the model loads, and the episodes file it reads."""

from __future__ import annotations

import doctest
import json

import pytest
import torch

pytest.importorskip("transformers")

from llmgym.cli import main  # noqa: E402
from llmgym.episode import Episode, JSONLWriter, load_jsonl, save_jsonl  # noqa: E402
from llmgym.trainers import sft  # noqa: E402
from llmgym.trainers.config import SFTConfig  # noqa: E402
from llmgym.trainers.sft import SFTTrainer, export_messages, select_episodes, tokenize_episode  # noqa: E402
from llmgym.wrappers.models import tiny_random_model  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "guess", "description": "Guess.", "parameters": {"type": "object"}}}]


def teacher_episode(answer: str, reward: float) -> Episode:
    call = {"id": "c1", "type": "function", "function": {"name": "guess", "arguments": json.dumps({"word": answer})}}
    return Episode(
        "llmgym/Wordle-v0",
        seed=0,
        tools=TOOLS,
        turn_rewards=[0.0, reward],
        messages=[
            {"role": "system", "content": "Play."},
            {"role": "user", "content": "Guess the word."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "guess", "content": "x x G x x"},
            {"role": "assistant", "content": f"It is {answer}."},
        ],
    )


def test_doctests():
    assert doctest.testmod(sft).failed == 0


def test_select_and_export(tmp_path):
    episodes = [teacher_episode("crane", 1.0), teacher_episode("slate", 0.0)]
    assert len(select_episodes(episodes, min_reward=0.5)) == 1
    path = tmp_path / "chat.jsonl"
    assert export_messages(episodes, path) == 2
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["tools"] == TOOLS and rows[0]["reward"] == 1.0
    assistant = [m for m in rows[0]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"] == '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'
    assert all(set(m) >= {"role", "content"} for m in rows[0]["messages"])


def test_mask_covers_only_assistant_turns():
    _, tokenizer = tiny_random_model(0)
    episode = tokenize_episode(teacher_episode("crane", 1.0), tokenizer)
    assert len(episode.token_ids) == len(episode.mask) and sum(episode.mask) > 0
    learned = tokenizer.decode([t for t, m in zip(episode.token_ids, episode.mask) if m])
    context = tokenizer.decode([t for t, m in zip(episode.token_ids, episode.mask) if not m])
    assert '"word": "crane"' in learned and "It is crane." in learned
    assert "Guess the word." in context and "x x G x x" in context and "Guess the word." not in learned
    # each learned span ends at the end-of-turn token the model stops at, not at the template's newline after it
    ends = [i for i in range(len(episode.mask) - 1) if episode.mask[i] and not episode.mask[i + 1]] + [
        len(episode.mask) - 1
    ]
    assert all(episode.token_ids[i] == tokenizer.eos_token_id for i in ends if episode.mask[i])
    assert episode.mask[-1] == 0 and tokenizer.decode(episode.token_ids[-1:]) == "\n"
    # recorded ids are used as they are; ids of another tokenizer are refused
    recorded = Episode("x", token_ids=[1, 2, 3], mask=[0, 1, 1], messages=[{"role": "assistant", "content": "?"}])
    assert tokenize_episode(recorded, tokenizer) is recorded
    with pytest.raises(ValueError, match="retokenize"):
        tokenize_episode(Episode("x", token_ids=[10**7], mask=[1]), tokenizer)
    with pytest.raises(ValueError, match="no assistant turn"):
        tokenize_episode(Episode("x", messages=[{"role": "user", "content": "hi"}]), tokenizer)


@pytest.mark.gpu
def test_sft_learns_the_good_episodes(tmp_path):
    episodes = [teacher_episode("crane", 1.0) for _ in range(4)] + [teacher_episode("zzzzz", 0.0) for _ in range(4)]
    save_jsonl(episodes, tmp_path / "episodes.jsonl")
    model, tokenizer = tiny_random_model(0)
    config = SFTConfig(
        episodes=str(tmp_path / "episodes.jsonl"),
        out=str(tmp_path / "run"),
        min_reward=1.0,
        epochs=6,
        batch_size=4,
        micro_batch_size=2,
        learning_rate=1e-2,
        progress=False,
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer)
    assert len(trainer.episodes) == 4
    history = trainer.train()
    assert len(history) == 6
    assert history[-1]["loss"] < 0.75 * history[0]["loss"]
    assert (tmp_path / "run" / "final" / "config.json").is_file()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 6
    with pytest.raises(ValueError, match="min-reward"):
        SFTTrainer(SFTConfig(min_reward=5.0), model=model, tokenizer=tokenizer, episodes=episodes)


def test_sft_lora_keeps_base_weights(tmp_path):
    model, tokenizer = tiny_random_model(0)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    config = SFTConfig(
        out=str(tmp_path), lora=True, lora_r=4, epochs=1, batch_size=2, learning_rate=1e-2, progress=False
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer, episodes=[teacher_episode("crane", 1.0)] * 2)
    trainer.train()
    state = trainer.model.get_base_model().state_dict()
    assert all(
        torch.equal(
            v,
            state[k.replace(".weight", ".base_layer.weight")]
            if k.replace(".weight", ".base_layer.weight") in state
            else state[k],
        )
        for k, v in base.items()
    )
    assert (tmp_path / "final" / "adapter_config.json").is_file()


# -- inputs it cannot train on, refused before the model loads -------------------------------------


def recorded(token_ids: list[int], mask: list[int], reward: float = 1.0) -> Episode:
    return Episode(
        "x",
        turn_rewards=[reward],
        token_ids=token_ids,
        mask=mask,
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    )


@pytest.fixture
def no_model_load(monkeypatch):
    """Every check below must fail before the model is loaded."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(sft, "load_policy_model", refuse)


@pytest.mark.parametrize(
    "bad, message",
    [
        (recorded([5, 6, 7], [0, 0, 0]), "no policy token"),
        (recorded([5, 6, 7], [1, 0, 0]), "no policy token"),  # the first token is never trained on
        (recorded([5, 6, 7], [0, 1]), "2 entries for 3 token ids"),
        (recorded([5, -1, 7], [0, 1, 1]), "token id -1 is not an integer >= 0"),
        (recorded([5, 6, 7], [0, 2, 1]), "must be 0"),
    ],
)
def test_sft_refuses_episodes_it_cannot_train_on_before_loading_the_model(tmp_path, no_model_load, bad, message):
    """Regression: SFT used to train on episodes without policy tokens, and crash mid-run on a short mask or bad id."""
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
    chat = Episode(
        "x",
        messages=[
            {"role": "system", "content": "a long system prompt " * 20},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
        ],
    )
    assert sum(tokenize_episode(chat, tokenizer).mask) > 0
    with pytest.raises(ValueError, match="max_length 16 cuts every policy token"):
        tokenize_episode(chat, tokenizer, max_length=16)


def test_sft_with_no_episode_kept_fails_before_loading_the_model(tmp_path, monkeypatch):
    from llmgym.trainers.sft import SFTTrainer

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(sft, "load_policy_model", no_load)
    path = tmp_path / "episodes.jsonl"
    save_jsonl([Episode("x", turn_rewards=[0.5])], path)
    with pytest.raises(ValueError, match="lower --min-reward"):
        SFTTrainer(SFTConfig(episodes=str(path), min_reward=1.0, model="tiny-random"))
    path.write_text("")
    with pytest.raises(ValueError, match="file is empty"):
        SFTTrainer(SFTConfig(episodes=str(path), model="tiny-random"))


def test_cli_sft_on_masks_without_policy_tokens_exits_2(tmp_path, capsys, no_model_load):
    save_jsonl([recorded([5, 6, 7], [0, 0, 0]) for _ in range(3)], tmp_path / "eps.jsonl")
    assert (
        main(
            [
                "train",
                "sft",
                "--episodes",
                str(tmp_path / "eps.jsonl"),
                "--model",
                "tiny-random",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "episode 1 of 3" in err and "no policy token" in err


def test_cli_sft_into_an_unwritable_folder_exits_2_before_loading_the_model(tmp_path, capsys, no_model_load):
    """Regression: an --out that is a file used to fail only after the model had loaded."""
    save_jsonl([recorded([5, 6, 7], [0, 1, 1])], tmp_path / "eps.jsonl")
    (tmp_path / "afile").write_text("")
    for out in (tmp_path / "afile" / "sub", tmp_path / "afile"):
        assert (
            main(
                [
                    "train",
                    "sft",
                    "--episodes",
                    str(tmp_path / "eps.jsonl"),
                    "--model",
                    "tiny-random",
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {out}" in err and "is a file, not a folder" in err


def test_cli_export_messages_into_a_folder_or_of_nothing_exits_2(tmp_path, capsys):
    """Regression: --export-messages used to write an empty selection, or crash on a folder."""
    save_jsonl([recorded([5, 6, 7], [0, 1, 1], reward=1.0)], tmp_path / "eps.jsonl")
    assert main(["train", "sft", "--episodes", str(tmp_path / "eps.jsonl"), "--export-messages", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--export-messages {tmp_path} is a folder, not a file" in err
    chat = tmp_path / "chat.jsonl"
    assert (
        main(
            [
                "train",
                "sft",
                "--episodes",
                str(tmp_path / "eps.jsonl"),
                "--min-reward",
                "100",
                "--export-messages",
                str(chat),
            ]
        )
        == 2
    )
    assert "total reward >= 100.0 (of 1); lower --min-reward" in capsys.readouterr().err  # as training says it
    assert not chat.exists()


# -- the episodes file ---------------------------------------------------------------------


def test_a_file_of_one_line_that_is_not_json_is_a_parse_error_not_empty(tmp_path, capsys):
    """Regression: a one-line episodes file that is not JSON used to read as empty."""
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


def test_sft_validation_loss_stops_training_and_keeps_the_best_epoch(tmp_path):
    words = ["crane", "slate", "trace", "crate", "react", "caret", "stare", "arose"]
    episodes = [teacher_episode(word, 1.0) for word in words]
    model, tokenizer = tiny_random_model(0)
    config = SFTConfig(
        out=str(tmp_path / "run"),
        epochs=8,
        val_fraction=0.25,
        patience=1,
        batch_size=2,
        micro_batch_size=2,
        learning_rate=5e-2,  # large: the held-out loss soon stops falling
        progress=False,
    )
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer, episodes=episodes)
    assert (len(trainer.episodes), len(trainer.val_episodes)) == (6, 2)
    history = trainer.train()
    val_losses = [row["val_loss"] for row in history if "val_loss" in row]
    epochs_run = history[-1]["epoch"] + 1
    assert len(val_losses) == epochs_run
    assert epochs_run < 8 and val_losses[-1] >= min(val_losses)  # stopped once it no longer fell
    assert trainer.validation_loss() == pytest.approx(min(val_losses), rel=1e-4)  # the best epoch's weights
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["val_loss"] for row in logged if "val_loss" in row] == val_losses


def test_sft_patience_needs_a_validation_set(tmp_path, no_model_load):
    with pytest.raises(ValueError, match="patience needs a validation set"):
        SFTTrainer(SFTConfig(out=str(tmp_path), patience=2, progress=False), episodes=[teacher_episode("crane", 1)])
    with pytest.raises(ValueError, match="val_fraction must be in"):
        SFTTrainer(SFTConfig(out=str(tmp_path), val_fraction=1.0, progress=False), episodes=[teacher_episode("a", 1)])
