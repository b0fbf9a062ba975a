"""Helpers for the CLI tests: a scripted Wordle eval, and the one-line error a refused command prints."""

from llmgym.cli import main

WORDLE = "llmgym/Wordle-v0"


def eval_wordle(out, *extra):
    """``llmgym eval`` of Wordle with the scripted solver into ``out``; returns the exit status."""
    return main(["eval", WORDLE, "--policy", "scripted:wordle", "--out", str(out), "--no-progress", *extra])


def one_line_error(capsys) -> str:
    """The error printed, with nothing printed before it (no game, no run started)."""
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith("llmgym: error: "), err
    assert out == "", out
    return err
