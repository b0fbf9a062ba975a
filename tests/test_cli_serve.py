"""``llmgym serve``: the flags it checks before loading a model, and the names it serves under."""

from __future__ import annotations

import json
import socket

import pytest
from cli_runs import one_line_error

from llmgym.cli import main


def test_serve_max_model_len_sets_the_llama_cpp_context(monkeypatch, capsys):
    """Regression: a chat longer than 4,096 tokens could not be served at all: ``n_ctx`` had no flag."""
    import llmgym.wrappers.server as server

    seen = {}

    def fake_create_app(policy, **kwargs):
        seen["n_ctx"] = policy.n_ctx
        return object()

    monkeypatch.setattr(server, "create_app", fake_create_app)
    monkeypatch.setattr(server, "serve", lambda app, **kwargs: None)
    with socket.socket() as sock:  # a free port for the bind check
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["serve", "--model", "tiny-random", "--max-model-len", "1024", "--port", str(port)]) == 0
    assert seen == {"n_ctx": 1024}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-model-len", "0"], "--max-model-len must be at least 1"),
        (["--backend", "transformers", "--max-model-len", "512"], "the model's own context"),
        (["--backend", "scripted", "--max-model-len", "512"], "no model"),
        (["--max-choices-per-request", "0"], "--max-choices-per-request must be at least 1"),
    ],
)
def test_serve_flag_refusals(argv, message, capsys):
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "expected"), [([], None), (["--max-choices-per-request", "512"], 512)])
def test_serve_passes_the_choices_cap_to_the_app(monkeypatch, argv, expected):
    import llmgym.wrappers.server as server
    from llmgym.wrappers.server.backend import DEFAULT_MAX_CHOICES

    seen = {}
    monkeypatch.setattr(server, "create_app", lambda policy, **kwargs: seen.update(kwargs))
    monkeypatch.setattr(server, "serve", lambda app, **kwargs: None)
    with socket.socket() as sock:  # a free port for the bind check
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["serve", "--backend", "scripted", "--port", str(port), *argv]) == 0
    assert seen["max_choices_per_request"] == (expected or DEFAULT_MAX_CHOICES)  # the flag's default is the app's


def test_serve_refuses_a_scripted_model_without_act(capsys):
    """Regression: it used to start and answer 500 to every request."""
    pytest.importorskip("fastapi")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["serve", "--backend", "scripted", "--model", "json:JSONDecoder", "--port", str(port)]) == 2
    assert "cannot load the scripted backend" in one_line_error(capsys)


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


def test_serve_port_in_use_is_a_clean_error(monkeypatch, capsys):
    import socket

    import llmgym.wrappers.scripted as scripted

    loaded = []
    monkeypatch.setattr(scripted, "load_scripted", lambda name: loaded.append(name))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert main(["serve", "--backend", "scripted", "--port", str(port)]) == 2
    assert "in use" in capsys.readouterr().err and not loaded  # no model loaded before the check
