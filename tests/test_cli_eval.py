"""``llmgym eval`` end to end through ``main([...])``, with the scripted Wordle policy (no model)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
from cli_runs import eval_wordle, one_line_error

from llmgym.cli import CLIError, main
from llmgym.cli._policies import missing_extra
from llmgym.cli.eval import exit_status
from llmgym.episode import Episode, load_jsonl, save_jsonl

WORDLE = "llmgym/Wordle-v0"


def _eval(tmp_path, *extra):
    return main(
        ["eval", WORDLE, "--policy", "scripted:wordle", "--out", str(tmp_path / "run"), "--no-progress", *extra]
    )


def test_scripted_eval_writes_episodes_and_summary(tmp_path, capsys):
    assert _eval(tmp_path, "-n", "3", "--group-size", "2", "--seed", "10", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    episodes = load_jsonl(tmp_path / "run" / "episodes.jsonl")
    assert sorted((e.seed, e.metadata["group_index"]) for e in episodes) == [
        (s, i) for s in (10, 11, 12) for i in (0, 1)
    ]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert printed == saved
    assert saved["episodes"] == 6 and saved["failed"] == 0 and saved["success_rate"] == 1.0
    assert saved["reward"]["mean"] == pytest.approx(sum(e.total_reward for e in episodes) / 6)
    assert set(saved["components"]) == {"information", "invalid_guess", "solved", "speed", "format_error"}
    assert saved["run"]["policy"] == "scripted:wordle" and saved["run"]["seeds"] == [10, 12]


def test_table_output_and_plot(tmp_path, capsys):
    assert _eval(tmp_path, "-n", "2", "--plot") == 0
    out = capsys.readouterr().out
    assert "mean reward" in out and "success rate" in out and "tool calls" in out and "speed" in out
    png = (tmp_path / "run" / "rewards.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_exit_status_reports_the_first_error_and_fails_when_everything_failed(capsys):
    ok = Episode(WORDLE, seed=0)
    broken = [Episode(WORDLE, seed=s, metadata={"error": f"boom {s}"}) for s in (1, 2)]
    assert exit_status(0, 3, "episode", [ok]) == 0 and capsys.readouterr().out == ""
    assert exit_status(2, 3, "episode", [ok, *broken], retry="; retry") == 1
    assert capsys.readouterr().out == "llmgym: 2 of 3 episodes failed (first error: boom 1); retry\n"
    with pytest.raises(CLIError, match="every game failed; the first error: boom 1"):
        exit_status(2, 2, "game", broken)


def test_resume_plays_only_the_missing_episodes(tmp_path, capsys):
    assert _eval(tmp_path, "-n", "2") == 0
    first = load_jsonl(tmp_path / "run" / "episodes.jsonl")
    assert _eval(tmp_path, "-n", "4", "--resume", "--json") == 0
    episodes = load_jsonl(tmp_path / "run" / "episodes.jsonl")
    assert [e.seed for e in episodes] == [0, 1, 2, 3]
    assert episodes[:2] == first
    capsys.readouterr()
    code = main(
        [
            "eval",
            WORDLE,
            "--policy",
            "scripted:llmgym.envs.wordle.solver:WordleSolver",
            "--out",
            str(tmp_path / "run"),
            "--resume",
            "--no-progress",
        ]
    )
    assert code == 2 and "resume with the same policy" in capsys.readouterr().err


def test_unknown_env_id_suggests_close_matches(tmp_path, capsys):
    code = main(["eval", "llmgym/Wordel-v0", "--policy", "scripted:wordle", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "unknown environment 'llmgym/Wordel-v0'" in err and "llmgym/Wordle-v0" in err
    assert "Traceback" not in err


def test_unreachable_server_is_named(tmp_path, capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    code = main(["eval", WORDLE, "-n", "1", "--base-url", url, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot reach the server at {url}" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-kwargs", "{not json"], "--env-kwargs is not valid JSON"),
        (["--env-kwargs", '{"colour": 1}'], "does not take these --env-kwargs"),
        (["--env-kwargs", '{"max_turns": -1}'], "max_turns must be >= 1"),  # the env's ValueError, not a traceback
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--policy", "scripted:chess"], "unknown scripted policy 'chess'"),
        (["--policy", "human"], "--policy must look like scripted:NAME"),
        (["-n", "0"], "--num-seeds must be at least 1"),
        (["--temperature", "-1"], "--temperature must be >= 0"),
        (["--top-p", "0"], "--top-p must be in (0, 1]"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path, capsys, args, message):
    code = main(["eval", WORDLE, "--policy", "scripted:wordle", "--out", str(tmp_path), "--no-progress", *args])
    assert code == 2 and message in capsys.readouterr().err


def test_a_missing_local_model_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    code = main(["eval", WORDLE, "--model", str(tmp_path / "nope.gguf"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot load the llama.cpp backend" in err and "Traceback" not in err


def test_missing_extras_are_named():
    assert missing_extra(ImportError("No module named 'matplotlib'", name="matplotlib")) == (
        'matplotlib is not installed: pip install "llmgym[plot]"'
    )
    assert "llmgym[local]" in missing_extra(ImportError("x", name="llama_cpp.llama"))
    hint = 'the OpenAI-compatible policy needs the openai package: pip install "llmgym[openai]"'
    assert missing_extra(ImportError(hint)) == hint


def test_eval_with_a_local_transformers_checkpoint(tmp_path, capsys):
    models = pytest.importorskip("llmgym.wrappers.models")
    pytest.importorskip("llmgym.wrappers.transformers_policy")
    model, tokenizer = models.tiny_random_model(seed=0)
    checkpoint = tmp_path / "tiny"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    code = main(
        [
            "eval",
            WORDLE,
            "-n",
            "2",
            "--backend",
            "transformers",
            "--model",
            str(checkpoint),
            "--max-tokens",
            "8",
            "--env-kwargs",
            '{"max_turns": 2}',
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["episodes"] == 2 and summary["failed"] == 0
    assert summary["turns"] == 2.0 and summary["generated_tokens"] > 0


@pytest.fixture
def scripted_server(start_scripted_serve):
    """A real ``llmgym serve --backend scripted`` on a free loopback port."""
    return start_scripted_serve()


def test_eval_against_a_real_llmgym_serve(tmp_path, capsys, scripted_server):
    code = main(
        [
            "eval",
            WORDLE,
            "-n",
            "4",
            "--base-url",
            scripted_server,
            "--concurrency",
            "4",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["failed"] == 0 and summary["success_rate"] == 1.0
    assert summary["run"]["policy"] == "openai:scripted-wordle"  # the model name comes from /v1/models
    episodes = load_jsonl(tmp_path / "run" / "episodes.jsonl")
    assert all(e.metadata["model"] == "scripted-wordle" for e in episodes)
    # the scripted server counts no tokens: unknown, not "0 generated tokens"
    assert summary["generated_tokens"] is None and all(e.metadata["generated_tokens"] is None for e in episodes)


def test_a_model_the_server_does_not_serve_is_refused_before_playing(tmp_path, capsys, scripted_server):
    # every request would be a 404; eval used to play every episode, then report that all had failed
    code = main(
        [
            "eval",
            WORDLE,
            "-n",
            "2",
            "--base-url",
            scripted_server,
            "--model",
            "gpt-4",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ]
    )
    assert code == 2 and "does not serve model 'gpt-4'; it serves: scripted-wordle" in capsys.readouterr().err
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def test_a_scripted_policy_module_in_the_current_folder_is_found(tmp_path, monkeypatch, capsys):
    # the installed `llmgym` command does not put the current folder on sys.path (python -m does)
    import sys

    (tmp_path / "my_scripted_actor.py").write_text(
        "class Actor:\n    def act(self, observation):\n        return 'crane'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_scripted_actor", raising=False)
    from llmgym.cli import main

    assert (
        main(
            [
                "eval",
                "llmgym/Wordle-v0",
                "-n",
                "1",
                "--policy",
                "scripted:my_scripted_actor:Actor",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    assert sys.path[-1] == str(tmp_path)  # appended: never in front of installed packages


@pytest.mark.parametrize("url", ["notaurl", "", "ftp://host/v1", "http://[::1/v1"])
def test_a_base_url_that_is_not_http_is_refused(tmp_path, capsys, url):
    # was a ValueError traceback
    assert main(["eval", WORDLE, "-n", "1", "--base-url", url, "--out", str(tmp_path)]) == 2
    assert "is not a server URL" in one_line_error(capsys)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_temperature_is_refused(tmp_path, capsys, value):
    assert eval_wordle(tmp_path / "run", "-n", "1", f"--temperature={value}") == 2
    assert "--temperature must be >= 0 and finite" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_plot_without_matplotlib_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    assert eval_wordle(tmp_path / "run", "-n", "2", "--plot") == 2
    assert 'pip install "llmgym[plot]"' in one_line_error(capsys)
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def test_summary_file_holds_the_plot_path_as_json_output_does(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert eval_wordle(tmp_path / "run", "-n", "2", "--plot", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved == printed and saved["run"]["plot"] == str(tmp_path / "run" / "rewards.png")


def test_a_scripted_policy_warns_about_the_model_flags_it_ignores(tmp_path, capsys):
    assert eval_wordle(tmp_path / "run", "-n", "1", "--model", "gpt-4", "--backend", "transformers") == 0
    assert "ignoring --model, --backend" in capsys.readouterr().err


def test_ctrl_c_stops_a_scripted_eval_at_once(tmp_path):
    """Regression: the scripted policy never gave the event loop a turn: SIGINT was noticed only after all 3000
    episodes."""
    out = tmp_path / "run"
    script = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "  # even if SIGINT was ignored
        "from llmgym.cli import main; sys.exit(main())"
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            script,
            "eval",
            WORDLE,
            "-n",
            "3000",
            "--policy",
            "scripted:wordle",
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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


def test_resume_with_other_env_kwargs_is_refused_naming_both(tmp_path, capsys):
    out = tmp_path / "run"
    assert eval_wordle(out, "-n", "2", "--env-kwargs", '{"max_turns": 6}') == 0
    assert all(e.metadata["env_kwargs"] == {"max_turns": 6} for e in load_jsonl(out / "episodes.jsonl"))
    capsys.readouterr()
    assert eval_wordle(out, "-n", "3", "--resume") == 2  # used to mix 6-turn and 10-turn episodes in one summary
    assert "env_kwargs {'max_turns': 6}, not {}" in one_line_error(capsys)
    assert len(load_jsonl(out / "episodes.jsonl")) == 2
    assert eval_wordle(out, "-n", "3", "--resume", "--env-kwargs", '{"max_turns": 6}') == 0
    assert len(load_jsonl(out / "episodes.jsonl")) == 3


def test_resume_with_other_sampling_is_refused_but_other_seeds_are_fine(tmp_path, capsys):
    out = tmp_path / "run"
    assert eval_wordle(out, "-n", "2") == 0
    capsys.readouterr()
    assert eval_wordle(out, "-n", "3", "--resume", "--temperature", "0") == 2
    assert "temperature=0.7, not temperature=0.0" in one_line_error(capsys)
    assert eval_wordle(out, "-n", "2", "--resume", "--max-tokens", "64") == 2
    assert "max_tokens=256, not max_tokens=64" in one_line_error(capsys)
    assert eval_wordle(out, "-n", "2", "--seed", "2", "--resume") == 0  # more seeds, same settings
    assert sorted(e.seed for e in load_jsonl(out / "episodes.jsonl")) == [0, 1, 2, 3]


def test_resume_of_a_file_without_recorded_env_kwargs_reads_the_summary(tmp_path, capsys):
    out = tmp_path / "run"
    assert eval_wordle(out, "-n", "2", "--env-kwargs", '{"max_turns": 6}') == 0
    episodes = load_jsonl(out / "episodes.jsonl")
    for episode in episodes:
        del episode.metadata["env_kwargs"]  # as written before episodes recorded them
    save_jsonl(episodes, out / "episodes.jsonl")
    capsys.readouterr()
    assert eval_wordle(out, "-n", "3", "--resume") == 2
    assert "summary.json" in one_line_error(capsys)


@pytest.mark.parametrize(("engine", "concurrency"), [("torch", 16), ("llama.cpp", 1)])
def test_the_local_models_engine_sets_the_default_concurrency(tmp_path, capsys, engine, concurrency):
    """The torch engine decodes 16 episodes together by default; llama.cpp's own batches measured no faster than its
    single stream, so with that engine eval plays one episode at a time."""
    pytest.importorskip("llama_cpp")
    if engine == "torch":
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    code = main(
        [
            "eval",
            WORDLE,
            "-n",
            "2",
            "--model",
            "tiny-random",
            "--engine",
            engine,
            "--max-tokens",
            "4",
            "--env-kwargs",
            '{"max_turns": 2}',
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["episodes"] == 2 and summary["failed"] == 0
    assert summary["run"]["concurrency"] == concurrency and summary["run"]["engine"] == engine
