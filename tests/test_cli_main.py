"""The CLI's shared error handling."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_missing_extra_names_the_extra_to_install():
    # A real import failure: hide pettingzoo from the interpreter, then play a game that needs it.
    script = textwrap.dedent("""
        import sys
        sys.modules["pettingzoo"] = None  # makes `import pettingzoo` raise ModuleNotFoundError
        from llmgym.cli import main
        sys.exit(main(["eval", "llmgym/TicTacToe-v0", "-n", "1", "--policy", "scripted:wordle", "--no-progress"]))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert 'pip install "llmgym[multiagent]"' in result.stderr and "Traceback" not in result.stderr


def test_help_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "llmgym", "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("list", "eval", "serve", "train", "play", "check", "init"):
        assert command in out


def test_check_refuses_a_negative_seed_as_a_usage_error(capsys):
    from llmgym.cli import main

    # it used to report "FAIL make ... raised ValueError" and exit 1, as if the env were broken
    assert main(["check", "llmgym/Wordle-v0", "--seed", "-1", "--episodes", "1"]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err


def test_list_shows_bracketed_descriptions_as_text(capsys):
    # rich read "moves in [brackets]" as markup and printed "moves in , TextArena's own rules"
    from llmgym.cli import main

    assert main(["list"]) == 0
    assert "[brackets]" in capsys.readouterr().out
