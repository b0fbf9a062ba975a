"""Checkpoints (llmgym/trainers/checkpoint.py): steps in order, pruned to ``keep``, weights that must fit the model;
and under a kill at any moment of a save: never more than ``keep``, always one to resume from, and what the kill
left behind cleaned when a run opens its folder.

A kill is simulated by :func:`killed_at`: the chosen change to the file system (a rename, a file or folder
removal) does not happen, and neither does any later one, cleanup handlers included, as under ``kill -9``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from llmgym.trainers import checkpoint
from llmgym.trainers.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, tidy_checkpoints
from tests.trainers.toy_env import ENV_REF


class Killed(BaseException):
    """The process died here."""


@contextlib.contextmanager
def killed_at(monkeypatch: pytest.MonkeyPatch, when: Callable[[int, str, tuple], bool]) -> Iterator[list[str]]:
    """Kill the process at the first ``os.replace``, ``os.unlink`` or ``os.rmdir`` call for which
    ``when(number, name, args)`` is true (``number`` counts the calls from 1); yields the calls made, by name."""
    calls: list[str] = []
    dead = False
    originals = {name: getattr(os, name) for name in ("replace", "unlink", "rmdir")}

    def primitive(name: str) -> Callable:
        def call(*args, **kwargs):
            nonlocal dead
            if dead:
                return None  # a dead process changes nothing more
            calls.append(name)
            if when(len(calls), name, args):
                dead = True
                raise Killed
            return originals[name](*args, **kwargs)

        return call

    for name in originals:
        monkeypatch.setattr(os, name, primitive(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            monkeypatch.setattr(os, name, original)


def tiny() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(2, 2)
    return model, torch.optim.AdamW(model.parameters())


def in_view(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


#: name -> (the steps saved before, the step the killed save writes, the steps a restart may resume from, by keep)
SCENARIOS = {
    "the next step": lambda keep: (list(range(1, keep + 1)), keep + 1, {keep, keep + 1}),
    "a step saved again": lambda keep: (list(range(1, keep + 1)), keep, {keep}),
    # the earlier run's checkpoints are deleted before the new one comes in: any of them, or none, may be left
    "a run started over": lambda keep: ([50, 100][-keep:], 1, {None, 1, 50, 100}),
}


def save_before(root: Path, steps: list[int], keep: int) -> None:
    model, optimizer = tiny()
    for step in steps:
        save_checkpoint(root, step, model, optimizer, {"episodes_seen": step}, keep=keep)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("keep", [1, 2, 3])
def test_a_kill_at_any_moment_of_a_save_leaves_at_most_keep_and_one_to_resume(tmp_path, monkeypatch, scenario, keep):
    """Renaming the new checkpoint in before pruning left keep + 1 to a kill between the two."""
    before, new, resumable = SCENARIOS[scenario](keep)
    save_before(tmp_path / "unkilled", before, keep)
    with killed_at(monkeypatch, lambda number, name, args: False) as made:
        save_checkpoint(tmp_path / "unkilled", new, *tiny(), {}, keep=keep)
    assert len(made) >= 2  # at least: the rename into place, and the cleanup after it
    for kill in range(1, len(made) + 1):
        root = tmp_path / f"kill_{kill}"
        save_before(root, before, keep)
        with killed_at(monkeypatch, lambda number, name, args, kill=kill: number == kill), pytest.raises(Killed):
            save_checkpoint(root, new, *tiny(), {"episodes_seen": new}, keep=keep)
        assert len(in_view(root)) <= keep, (kill, in_view(root))

        tidy_checkpoints(root, keep)  # the run starts again
        assert sorted(p.name for p in root.iterdir()) == in_view(root), kill  # no temporary folder left
        assert len(in_view(root)) <= keep
        folder = latest_checkpoint(root)
        state = None if folder is None else load_checkpoint(folder, *tiny())  # whole: weights, optimizer, RNG
        assert (state and state["step"]) in resumable, (kill, in_view(root))


def test_a_save_killed_before_its_rename_leaves_nothing_but_the_previous_checkpoint_in_view(tmp_path, monkeypatch):
    """keep=1: the old checkpoint leaves the view (whole) before the new one comes in; the next start puts it back."""
    save_before(tmp_path, [1], keep=1)
    into_place = lambda number, name, args: name == "replace" and Path(args[1]).name == "step_000002"  # noqa: E731
    with killed_at(monkeypatch, into_place), pytest.raises(Killed):
        save_checkpoint(tmp_path, 2, *tiny(), {}, keep=1)
    assert in_view(tmp_path) == []
    tidy_checkpoints(tmp_path, keep=1)
    assert in_view(tmp_path) == ["step_000001"] == sorted(p.name for p in tmp_path.iterdir())
    assert load_checkpoint(latest_checkpoint(tmp_path), *tiny())["episodes_seen"] == 1


def test_a_kill_while_writing_leaves_a_temporary_folder_that_the_next_start_removes(tmp_path, monkeypatch):
    save_before(tmp_path, [1], keep=2)

    def killed_writing(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(torch, "save", killed_writing)  # after model.safetensors, before optimizer.pt
    with killed_at(monkeypatch, lambda number, name, args: True), pytest.raises(Killed):  # no cleanup either
        save_checkpoint(tmp_path, 2, *tiny(), {}, keep=2)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".step-")]
    assert len(leftovers) == 1 and (tmp_path / leftovers[0] / "model.safetensors").is_file()
    tidy_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]


def test_the_start_removes_excess_checkpoints_and_half_deleted_ones(tmp_path):
    save_before(tmp_path, [1, 2, 3, 4], keep=4)
    (tmp_path / "step_000002" / "trainer_state.json").unlink()  # a delete cut short: no longer whole
    hidden = tmp_path / ".step_000001.old"
    os.replace(tmp_path / "step_000001", hidden)
    tidy_checkpoints(tmp_path, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000004"]


def test_a_renamed_away_checkpoint_is_put_back_only_when_newer_than_every_one_in_view(tmp_path):
    save_before(tmp_path, [1, 2], keep=2)
    os.replace(tmp_path / "step_000001", tmp_path / ".step_000001.old")
    tidy_checkpoints(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002"]
    os.replace(tmp_path / "step_000002", tmp_path / ".step_000002.old")
    tidy_checkpoints(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002"]


def test_a_tidy_of_a_missing_folder_does_nothing(tmp_path):
    tidy_checkpoints(tmp_path / "none")
    assert not (tmp_path / "none").exists()


# -- numbering, pruning, overwriting -------------------------------------------------------------------


def names(root) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_a_run_started_over_keeps_its_checkpoint_and_resumes_from_it(tmp_path):
    """A fresh run in a folder holding an earlier run's later checkpoints pruned the one it had just written."""
    model, optimizer = tiny()
    for step in (5, 10):
        save_checkpoint(tmp_path, step, model, optimizer, {"run": "old"}, keep=2)
    folder = save_checkpoint(tmp_path, 1, model, optimizer, {"run": "new"}, keep=2)
    assert folder.is_dir()
    assert latest_checkpoint(tmp_path) == folder  # not the earlier run's step 10
    assert names(tmp_path) == ["step_000001"]


def test_checkpoints_are_ordered_by_step_number_past_six_digits(tmp_path):
    model, optimizer = tiny()
    for step in (999_999, 1_000_000, 1_000_001):
        save_checkpoint(tmp_path, step, model, optimizer, {}, keep=2)
    assert names(tmp_path) == ["step_1000000", "step_1000001"]
    assert latest_checkpoint(tmp_path).name == "step_1000001"


def test_keep_counts_the_new_checkpoint_and_the_ones_before_it(tmp_path):
    model, optimizer = tiny()
    save_checkpoint(tmp_path, 1, model, optimizer, {}, keep=3)
    save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=3)
    assert names(tmp_path) == ["step_000001", "step_000002"]
    for step in (3, 4):
        save_checkpoint(tmp_path, step, model, optimizer, {}, keep=3)
    assert names(tmp_path) == ["step_000002", "step_000003", "step_000004"]
    save_checkpoint(tmp_path, 5, model, optimizer, {}, keep=1)
    assert names(tmp_path) == ["step_000005"]


def test_a_kill_while_overwriting_a_checkpoint_leaves_a_loadable_one(tmp_path, monkeypatch):
    """Re-saving a step deleted the old folder in place: a kill mid-delete left trainer_state.json without weights."""
    model, optimizer = tiny()
    save_checkpoint(tmp_path, 1, model, optimizer, {"episodes_seen": 4}, keep=2)
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, *args, **kwargs):
        weights = Path(path) / "model.safetensors"
        if "step_000001" in Path(path).name and weights.exists():  # the old checkpoint: die after its first file
            weights.unlink()
            raise KeyboardInterrupt
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 1, model, optimizer, {"episodes_seen": 8}, keep=2)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", real_rmtree)
    folder = latest_checkpoint(tmp_path)
    assert folder is not None
    assert load_checkpoint(folder, *tiny())["step"] == 1


def test_a_save_cut_short_by_a_kill_does_not_leave_its_temporary_folder_forever(tmp_path):
    model, optimizer = tiny()
    leftover = tmp_path / ".step-killed"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"\0" * 16)
    save_checkpoint(tmp_path, 1, model, optimizer, {}, keep=2)
    assert names(tmp_path) == ["step_000001"]


def test_full_weights_of_another_shape_are_a_one_line_error(tmp_path):
    """Regression: weights of another shape used to dump torch's multi-line state-dict error."""
    model = torch.nn.Linear(2, 3)
    save_checkpoint(tmp_path, 1, model, torch.optim.AdamW(model.parameters()), {})
    other = torch.nn.Linear(2, 5)
    with pytest.raises(ValueError, match=r"2 of other shapes \(e.g. bias: \[3\] saved, \[5\] in the model\)") as caught:
        load_checkpoint(tmp_path / "step_000001", other, torch.optim.AdamW(other.parameters()))
    assert "\n" not in str(caught.value)


def test_saving_weights_shows_no_transformers_progress_bar(tmp_path, capfd):
    # "Writing model shards" bars broke into the trainer's own progress bar and showed with progress=False
    from transformers.utils import logging as hf_logging

    from llmgym.trainers.checkpoint import save_weights
    from llmgym.wrappers.models import tiny_random_model

    model, tokenizer = tiny_random_model(seed=0)
    assert hf_logging.is_progress_bar_enabled()
    save_weights(model, tokenizer, tmp_path / "final")
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the user's setting is restored
    assert (tmp_path / "final" / "model.safetensors").is_file()


# -- GRPO end to end: a trainer tidies its folder when it opens it, and resumes with no step lost or repeated --


def grpo_config(out: Path, **overrides):
    pytest.importorskip("transformers")
    from llmgym.trainers.config import GRPOConfig

    settings = dict(
        env_id=ENV_REF,
        env_kwargs={"turns": 1},
        model="tiny-random",
        out=str(out),
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=3,
        learning_rate=1e-2,
        save_every=1,
        keep_checkpoints=1,
        progress=False,
        plot=False,
        torch_threads=1,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


@pytest.mark.gpu
def test_grpo_killed_mid_save_resumes_with_no_step_lost_or_repeated(tmp_path, monkeypatch):
    from llmgym.trainers.grpo import GRPOTrainer

    straight = GRPOTrainer(grpo_config(tmp_path / "straight"))
    straight.train()
    straight.close()

    out = tmp_path / "killed"
    killed = GRPOTrainer(grpo_config(out))
    into_place = lambda number, name, args: name == "replace" and Path(args[1]).name == "step_000002"  # noqa: E731
    with killed_at(monkeypatch, into_place), pytest.raises(Killed):
        killed.train()
    killed.close()
    assert in_view(out / "checkpoints") == []  # step 1 renamed away whole, step 2 not yet in

    resumed = GRPOTrainer(grpo_config(out), resume=True)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000001"]
    assert resumed.step == 1
    resumed.train()
    resumed.close()
    for key, value in straight.model.state_dict().items():
        torch.testing.assert_close(value, resumed.model.state_dict()[key], rtol=0, atol=1e-6, msg=key)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert in_view(out / "checkpoints") == ["step_000002"]


def test_a_grpo_trainer_cleans_its_checkpoints_when_it_opens_its_folder(tmp_path):
    from llmgym.trainers.grpo import GRPOTrainer

    out = tmp_path / "run"
    first = GRPOTrainer(grpo_config(out, keep_checkpoints=3))
    first.train()
    first.close()
    checkpoints = out / "checkpoints"
    assert in_view(checkpoints) == ["step_000001", "step_000002"]
    (checkpoints / ".step-k1ll3d").mkdir()  # a save killed while writing
    (checkpoints / ".step-k1ll3d" / "model.safetensors").write_bytes(b"\0" * 8)
    shutil.copytree(checkpoints / "step_000001", checkpoints / ".step_000001.old")  # killed before its delete
    resumed = GRPOTrainer(grpo_config(out, steps=3, keep_checkpoints=1), resume=True)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000002"]
    assert resumed.step == 2
    resumed.close()
