"""Mistakes on the command line are one-line errors with exit status 2, found before any work (or model load)
starts: output paths that cannot be written, a human game with standard input closed, a resume with nothing
to resume, an unknown option or env id, a multi-agent id given to check or play, a scripted policy without ``act``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import eval_wordle, one_line_error

from llmgym.cli import CLIError, check_output_path, main

WORDLE = "llmgym/Wordle-v0"
#: a folder no one may create anything in, root included
VIRTUAL = Path("/proc")
needs_proc = pytest.mark.skipif(not (VIRTUAL / "self").exists(), reason="needs Linux's /proc")


# -- the one check of output paths ------------------------------------------------------


@needs_proc
@pytest.mark.parametrize("folder", [True, False])
def test_a_path_in_a_folder_that_refuses_files_is_refused_even_for_root(folder):
    """Permission bits let root through; /proc refuses it all the same (the JSONL writer then failed mid-run)."""
    with pytest.raises(CLIError, match=r"^--out /proc/llmgym-x: cannot create .*; choose another --out$"):
        check_output_path(VIRTUAL / "llmgym-x", "--out", folder=folder)


def test_a_path_under_a_file_is_refused(tmp_path):
    (tmp_path / "afile").write_text("")
    with pytest.raises(CLIError, match="afile is a file, not a folder; choose another --out"):
        check_output_path(tmp_path / "afile" / "a" / "b", "--out", folder=True)


def test_the_check_leaves_nothing_behind(tmp_path):
    assert check_output_path(tmp_path / "a" / "b" / "run", "--out", folder=True) == tmp_path / "a" / "b" / "run"
    assert check_output_path(tmp_path / "c" / "episodes.jsonl", "--out", folder=False)
    (tmp_path / "kept.jsonl").write_text("mine\n")
    check_output_path(tmp_path / "kept.jsonl", "--out", folder=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl"]
    assert (tmp_path / "kept.jsonl").read_text() == "mine\n"


# -- eval, play, train: each output option -------------------------------------------------


@needs_proc
def test_eval_into_an_uncreatable_folder_is_one_line(capsys):
    code = main(["eval", WORDLE, "--policy", "scripted:wordle", "-n", "1", "--no-progress", "--out", "/proc/llmgym-x"])
    assert code == 2 and "--out /proc/llmgym-x" in one_line_error(capsys)


@needs_proc
def test_play_into_an_uncreatable_file_is_one_line_before_the_game(capsys):
    assert main(["play", WORDLE, "--policy", "scripted:wordle", "--out", "/proc/llmgym-x/e.jsonl"]) == 2
    assert "--out /proc/llmgym-x/e.jsonl" in one_line_error(capsys)


@needs_proc
def test_train_grpo_into_an_uncreatable_folder_is_refused_before_torch(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llmgym.trainers.grpo", None)  # importing the trainer would fail the test
    assert main(["train", "grpo", WORDLE, "--out", "/proc/llmgym-x"]) == 2
    assert "--out /proc/llmgym-x: cannot create" in one_line_error(capsys)


@needs_proc
@pytest.mark.parametrize("flag", ["--out", "--export-messages"])
def test_train_sft_outputs_are_refused_before_torch_and_before_reading_episodes(capsys, monkeypatch, tmp_path, flag):
    monkeypatch.setitem(sys.modules, "llmgym.trainers.sft", None)
    path = "/proc/llmgym-x" + ("/chat.jsonl" if flag == "--export-messages" else "")
    assert main(["train", "sft", "--episodes", str(tmp_path / "missing.jsonl"), flag, path]) == 2
    assert f"{flag} {path}: cannot create" in one_line_error(capsys)


def test_train_grpo_resume_without_a_checkpoint_is_refused_before_the_model_loads(capsys, monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from llmgym.trainers import grpo

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(grpo, "load_policy_model", refuse)
    assert main(["train", "grpo", WORDLE, "--resume", "--out", str(tmp_path / "run")]) == 2
    err = one_line_error(capsys)
    assert "no checkpoint under" in err and "without --resume" in err
    assert not (tmp_path / "run").exists()


# -- play needs someone to type --------------------------------------------------------------


def test_play_with_standard_input_gone_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)  # what Python starts with when descriptor 0 is closed
    assert main(["play", WORDLE]) == 2
    assert "standard input is closed" in one_line_error(capsys)
    with open(os.devnull) as null:
        monkeypatch.setattr(sys, "stdin", null)
        assert main(["play", WORDLE]) == 2
    assert f"standard input is {os.devnull}" in one_line_error(capsys)


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell closes descriptor 0")
@pytest.mark.parametrize("redirect", ["< /dev/null", "0<&-"])
def test_play_from_a_shell_with_standard_input_closed_or_null_exits_2(redirect):
    """Was ``RuntimeError: input(): lost sys.stdin`` (closed) and a silent empty game (``/dev/null``)."""
    command = f"'{sys.executable}' -m llmgym play {WORDLE} {redirect}"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--policy scripted:NAME" in done.stderr


def test_play_with_piped_actions_still_plays(capsys):
    done = subprocess.run(
        [sys.executable, "-m", "llmgym", "play", WORDLE], input="crane\n", capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "CRANE" in done.stdout and "stopped." in done.stdout


# -- an output path that is a file, or under one ------------------------------------


def test_eval_out_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    assert eval_wordle(afile, "-n", "2") == 2  # was FileExistsError after the policy loaded
    assert "--out" in one_line_error(capsys) and afile.read_text() == "mine"
    assert eval_wordle(afile / "run", "-n", "2") == 2
    assert "is a file, not a folder" in one_line_error(capsys)


def test_eval_with_opponents_checks_out_too(tmp_path, capsys):
    pytest.importorskip("pettingzoo")
    afile = tmp_path / "afile"
    afile.write_text("")
    code = main(
        [
            "eval",
            "llmgym/ma-TicTacToe-v0",
            "-n",
            "2",
            "--policy",
            "scripted:minimax",
            "--opponent",
            "scripted:random",
            "--out",
            str(afile),
            "--no-progress",
        ]
    )
    assert code == 2 and "is a file, not a folder" in one_line_error(capsys)


def test_play_out_is_checked_before_the_game_starts(tmp_path, capsys):
    """Regression: a folder used to fail with IsADirectoryError once the whole episode had been played (a human lost
    the game)."""
    assert main(["play", WORDLE, "--policy", "scripted:wordle", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "is a folder, not a file" in captured.err and "observation" not in captured.out
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["play", WORDLE, "--policy", "scripted:wordle", "--out", str(afile / "x.jsonl")]) == 2
    assert "afile is a file, not a folder" in one_line_error(capsys)


def test_init_into_a_file_is_a_usage_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["init", "zz-env", "--dir", str(afile)]) == 2  # was NotADirectoryError
    assert "is a file, not a folder" in one_line_error(capsys)


# -- commands, ids and policies that cannot be used --------------------------------------


def test_an_unknown_option_shows_the_usage_of_its_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["play", WORDLE, "--n", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: llmgym play") and "llmgym play: error: unrecognized arguments: --n 3" in err


def test_did_you_mean_prefers_the_id_that_differs_only_in_case(tmp_path, capsys):
    assert main(["eval", "llmgym/wordle-v0", "--policy", "scripted:wordle", "--out", str(tmp_path)]) == 2
    assert "Did you mean: llmgym/Wordle-v0? (" in one_line_error(capsys)  # no unrelated ids after it


@pytest.mark.parametrize("command", [["check"], ["play"]])
def test_check_and_play_name_the_command_for_a_multiagent_game(command, capsys):
    pytest.importorskip("pettingzoo")
    assert main([*command, "llmgym/ma-TicTacToe-v0"]) == 2  # was "unknown environment"
    err = one_line_error(capsys)
    assert "is a multi-agent game" in err and "llmgym eval llmgym/ma-TicTacToe-v0 --opponent SPEC" in err


def test_eval_play_and_serve_refuse_a_scripted_policy_without_act(tmp_path, capsys):
    """Regression: eval used to play every episode and report them all failed; play raised a traceback."""
    assert (
        main(
            [
                "eval",
                WORDLE,
                "-n",
                "2",
                "--policy",
                "scripted:json:JSONDecoder",
                "--out",
                str(tmp_path / "b"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "without an act(" in one_line_error(capsys) and not (tmp_path / "b").exists()
    assert main(["play", WORDLE, "--policy", "scripted:os:getenv"]) == 2
    assert "cannot make an actor" in one_line_error(capsys)
