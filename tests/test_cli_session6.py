"""CLI regressions: outputs and flags checked up front, scripted actors checked at load, Ctrl-C, honest resumes and
served-model names, multi-agent ids in list/check/play."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from llmgym.cli import main
from llmgym.episode import load_jsonl, save_jsonl
from llmgym.rollout import rollout
from llmgym.wrappers.scripted import load_scripted

WORDLE = "llmgym/Wordle-v0"


def _eval(out, *extra):
    return main(["eval", WORDLE, "--policy", "scripted:wordle", "--out", str(out), "--no-progress", *extra])


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith("llmgym: error: ")
    return captured.err


# --- output paths are checked before anything is played ---


def test_eval_out_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    assert _eval(afile, "-n", "2") == 2  # was FileExistsError after the policy loaded
    assert "--out" in _one_line_error(capsys) and afile.read_text() == "mine"
    assert _eval(afile / "run", "-n", "2") == 2
    assert "is a file, not a folder" in _one_line_error(capsys)


def test_eval_with_opponents_checks_out_too(tmp_path, capsys):
    pytest.importorskip("pettingzoo")
    afile = tmp_path / "afile"
    afile.write_text("")
    code = main(["eval", "llmgym/ma-TicTacToe-v0", "-n", "2", "--policy", "scripted:minimax",
                 "--opponent", "scripted:random", "--out", str(afile), "--no-progress"])
    assert code == 2 and "is a file, not a folder" in _one_line_error(capsys)


def test_play_out_is_checked_before_the_game_starts(tmp_path, capsys):
    # a folder used to fail with IsADirectoryError once the whole episode had been played (a human lost the game)
    assert main(["play", WORDLE, "--policy", "scripted:wordle", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "is a folder, not a file" in captured.err and "observation" not in captured.out
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["play", WORDLE, "--policy", "scripted:wordle", "--out", str(afile / "x.jsonl")]) == 2
    assert "afile is a file, not a folder" in _one_line_error(capsys)


def test_init_into_a_file_is_a_usage_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["init", "zz-env", "--dir", str(afile)]) == 2  # was NotADirectoryError
    assert "is a file, not a folder" in _one_line_error(capsys)


# --- flags ---


@pytest.mark.parametrize("url", ["notaurl", "", "ftp://host/v1", "http://[::1/v1"])
def test_a_base_url_that_is_not_http_is_refused(tmp_path, capsys, url):
    assert main(["eval", WORDLE, "-n", "1", "--base-url", url, "--out", str(tmp_path)]) == 2  # was a ValueError traceback
    assert "is not a server URL" in _one_line_error(capsys)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_temperature_is_refused(tmp_path, capsys, value):
    assert _eval(tmp_path / "run", "-n", "1", f"--temperature={value}") == 2
    assert "--temperature must be >= 0 and finite" in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_plot_without_matplotlib_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    assert _eval(tmp_path / "run", "-n", "2", "--plot") == 2
    assert 'pip install "llmgym[plot]"' in _one_line_error(capsys)
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def test_summary_file_holds_the_plot_path_as_json_output_does(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert _eval(tmp_path / "run", "-n", "2", "--plot", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved == printed and saved["run"]["plot"] == str(tmp_path / "run" / "rewards.png")


def test_an_unknown_option_shows_the_usage_of_its_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["play", WORDLE, "--n", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: llmgym play") and "llmgym play: error: unrecognized arguments: --n 3" in err


def test_did_you_mean_prefers_the_id_that_differs_only_in_case(tmp_path, capsys):
    assert main(["eval", "llmgym/wordle-v0", "--policy", "scripted:wordle", "--out", str(tmp_path)]) == 2
    assert "Did you mean: llmgym/Wordle-v0? (" in _one_line_error(capsys)  # no unrelated ids after it


def test_a_scripted_policy_warns_about_the_model_flags_it_ignores(tmp_path, capsys):
    assert _eval(tmp_path / "run", "-n", "1", "--model", "gpt-4", "--backend", "transformers") == 0
    assert "ignoring --model, --backend" in capsys.readouterr().err


# --- scripted actors are checked when loaded ---


@pytest.mark.parametrize("spec, message", [
    ("json:JSONDecoder", "is a class without an act(observation) -> str method"),
    ("os:getenv", "cannot make an actor: TypeError"),
    ("collections:OrderedDict", "is a class without an act(observation) -> str method"),
])
def test_load_scripted_refuses_what_makes_no_actor(spec, message):
    with pytest.raises(ValueError, match="scripted policy") as err:
        load_scripted(spec)
    assert message in str(err.value)


def test_eval_play_and_serve_refuse_a_scripted_policy_without_act(tmp_path, capsys):
    # eval used to play every episode and report them all failed; play raised a traceback
    assert main(["eval", WORDLE, "-n", "2", "--policy", "scripted:json:JSONDecoder", "--out", str(tmp_path / "b"),
                 "--no-progress"]) == 2
    assert "without an act(" in _one_line_error(capsys) and not (tmp_path / "b").exists()
    assert main(["play", WORDLE, "--policy", "scripted:os:getenv"]) == 2
    assert "cannot make an actor" in _one_line_error(capsys)


def test_serve_refuses_a_scripted_model_without_act(capsys):
    pytest.importorskip("fastapi")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # it used to start and answer 500 to every request
    assert main(["serve", "--backend", "scripted", "--model", "json:JSONDecoder", "--port", str(port)]) == 2
    assert "cannot load the scripted backend" in _one_line_error(capsys)


# --- Ctrl-C ---


def test_ctrl_c_stops_a_scripted_eval_at_once(tmp_path):
    # the scripted policy never gave the event loop a turn: SIGINT was noticed only after all 3000 episodes
    out = tmp_path / "run"
    script = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "  # even if SIGINT was ignored
              "from llmgym.cli import main; sys.exit(main())")
    process = subprocess.Popen(
        [sys.executable, "-c", script, "eval", WORDLE, "-n", "3000", "--policy", "scripted:wordle",
         "--out", str(out), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        path = out / "episodes.jsonl"
        while not (path.exists() and path.stat().st_size > 0):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, err = process.communicate(timeout=20)
        stopped_after = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130 and "llmgym: interrupted" in err and "Traceback" not in err, err
    assert stopped_after < 5
    episodes = load_jsonl(path)  # every line whole
    assert 0 < len(episodes) < 3000
    assert len({e.seed for e in episodes}) == len(episodes)


# --- resume refuses other settings ---


def test_resume_with_other_env_kwargs_is_refused_naming_both(tmp_path, capsys):
    out = tmp_path / "run"
    assert _eval(out, "-n", "2", "--env-kwargs", '{"max_turns": 6}') == 0
    assert all(e.metadata["env_kwargs"] == {"max_turns": 6} for e in load_jsonl(out / "episodes.jsonl"))
    capsys.readouterr()
    assert _eval(out, "-n", "3", "--resume") == 2  # used to mix 6-turn and 10-turn episodes in one summary
    assert "env_kwargs {'max_turns': 6}, not {}" in _one_line_error(capsys)
    assert len(load_jsonl(out / "episodes.jsonl")) == 2
    assert _eval(out, "-n", "3", "--resume", "--env-kwargs", '{"max_turns": 6}') == 0
    assert len(load_jsonl(out / "episodes.jsonl")) == 3


def test_resume_with_other_sampling_is_refused_but_other_seeds_are_fine(tmp_path, capsys):
    out = tmp_path / "run"
    assert _eval(out, "-n", "2") == 0
    capsys.readouterr()
    assert _eval(out, "-n", "3", "--resume", "--temperature", "0") == 2
    assert "temperature=0.7, not temperature=0.0" in _one_line_error(capsys)
    assert _eval(out, "-n", "2", "--resume", "--max-tokens", "64") == 2
    assert "max_tokens=256, not max_tokens=64" in _one_line_error(capsys)
    assert _eval(out, "-n", "2", "--seed", "2", "--resume") == 0  # more seeds, same settings
    assert sorted(e.seed for e in load_jsonl(out / "episodes.jsonl")) == [0, 1, 2, 3]


def test_resume_of_a_file_without_recorded_env_kwargs_reads_the_summary(tmp_path, capsys):
    out = tmp_path / "run"
    assert _eval(out, "-n", "2", "--env-kwargs", '{"max_turns": 6}') == 0
    episodes = load_jsonl(out / "episodes.jsonl")
    for episode in episodes:
        del episode.metadata["env_kwargs"]  # as written before episodes recorded them
    save_jsonl(episodes, out / "episodes.jsonl")
    capsys.readouterr()
    assert _eval(out, "-n", "3", "--resume") == 2
    assert "summary.json" in _one_line_error(capsys)


def test_rollout_resume_refuses_other_env_kwargs(tmp_path):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=2, jsonl_path=path, env_kwargs={"max_turns": 6})
    with pytest.raises(ValueError, match=r"env_kwargs \{'max_turns': 6\}, not \{'max_turns': 5\}"):
        rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True, env_kwargs={"max_turns": 5})
    with pytest.raises(ValueError, match=r"env_kwargs \{'max_turns': 6\}, not \{\}"):
        rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True)  # no kwargs: the defaults
    resumed = rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True,
                      env_kwargs={"max_turns": 6})
    assert [e.seed for e in resumed] == [0, 1, 2]


# --- served model names ---


def test_served_names_say_what_is_served(tmp_path):
    from llmgym.cli.serve import served_name

    gguf = tmp_path / "my-model.Q4.gguf"
    gguf.write_bytes(b"")
    (tmp_path / "checkpoint-100").mkdir()
    assert served_name("llama.cpp", str(gguf)) == "my-model.Q4"
    assert served_name("transformers", str(tmp_path / "checkpoint-100") + "/") == "checkpoint-100"
    assert served_name("transformers", "tiny-random") == "tiny-random"
    assert served_name("llama.cpp", "SmolLM2") == "smollm2-135m"
    assert served_name("scripted", "wordle") == "scripted-wordle"


def test_a_scripted_server_lists_itself_by_its_own_name(start_scripted_serve):
    import urllib.request

    url = start_scripted_serve()
    with urllib.request.urlopen(url + "/models", timeout=10) as response:
        listed = [card["id"] for card in json.loads(response.read())["data"]]
    assert listed == ["scripted-wordle"]  # was smollm2-135m: results read "openai:smollm2-135m" with reward 1.5


# --- multi-agent ids ---


def test_list_shows_the_multiagent_games(capsys):
    pytest.importorskip("pettingzoo")
    assert main(["list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["llmgym/ma-TicTacToe-v0"]["multiagent"] is True and not rows[WORDLE]["multiagent"]
    assert main(["list"]) == 0
    assert "multi-agent:" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["check"], ["play"]])
def test_check_and_play_name_the_command_for_a_multiagent_game(command, capsys):
    pytest.importorskip("pettingzoo")
    assert main([*command, "llmgym/ma-TicTacToe-v0"]) == 2  # was "unknown environment"
    err = _one_line_error(capsys)
    assert "is a multi-agent game" in err and "llmgym eval llmgym/ma-TicTacToe-v0 --opponent SPEC" in err


# --- llmgym check ---


def test_check_takes_env_kwargs_like_the_other_commands(capsys):
    assert main(["check", WORDLE, "--episodes", "1", "--env-kwargs", '{"max_turns": 3}', "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    assert main(["check", WORDLE, "--episodes", "1", "--kwargs", '{"max_turns": 3}', "--json"]) == 0  # the old name
    capsys.readouterr()


@pytest.mark.parametrize("kwargs", ['{"colour": 1}', '{"max_turns": -1}'])
def test_check_with_kwargs_the_env_refuses_is_a_usage_error(kwargs, capsys):
    assert main(["check", WORDLE, "--env-kwargs", kwargs]) == 2  # was "FAIL make", exit 1: as if the env were broken
    assert "does not take these --env-kwargs" in _one_line_error(capsys)


def test_list_names_the_extra_a_multiagent_game_needs(monkeypatch):
    # a fresh `pip install -e ".[local]"` has no pettingzoo: the row said "(cannot load: ModuleNotFoundError)"
    import builtins

    from llmgym.cli.list_envs import _describe_multiagent

    real_import = builtins.__import__

    def no_pettingzoo(name, *args, **kwargs):
        if name == "pettingzoo" or name.startswith("pettingzoo."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    for module in [m for m in sys.modules if m.startswith(("pettingzoo", "llmgym.envs.multiagent.", "envs.multiagent."))]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(builtins, "__import__", no_pettingzoo)
    assert _describe_multiagent("llmgym/ma-TicTacToe-v0") == '(needs pettingzoo (pip install "llmgym[multiagent]"))'
