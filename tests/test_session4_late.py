"""Regression tests for problems found late in session 4's walkthroughs."""

from __future__ import annotations

import socket

import pytest

from llmgym.cli import main


def test_serve_max_model_len_sets_the_llama_cpp_context(monkeypatch, capsys):
    # a chat longer than 4,096 tokens could not be served at all: n_ctx had no flag
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


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-model-len", "0"], "--max-model-len must be at least 1"),
    (["--backend", "transformers", "--max-model-len", "512"], "the model's own context"),
    (["--backend", "scripted", "--max-model-len", "512"], "no model"),
])
def test_serve_max_model_len_refusals(argv, message, capsys):
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("env_id", "least"), [
    ("llmgym/TicTacToe-v0", 5), ("llmgym/ConnectFour-v0", 21), ("llmgym/Negotiation-v0", 4),
    ("llmgym/PrisonersDilemma-v0", 10),
])
def test_games_against_a_bot_refuse_a_turn_budget_that_cannot_finish_a_game(env_id, least):
    # Negotiation with max_turns=2 told the agent "the game lasts 8 turns" and ended every game unfinished (-1)
    import gymnasium as gym

    with pytest.raises(ValueError, match=f"max_turns must be >= {least}"):
        gym.make(env_id, max_turns=least - 1)
    env = gym.make(env_id, max_turns=least)
    env.reset(seed=0)
    env.close()


def test_checker_state_comparison_treats_nan_arrays_as_equal():
    import numpy as np

    from llmgym.checker import _first_difference

    assert _first_difference({"a": np.array([1.0, np.nan])}, {"a": np.array([1.0, np.nan])}) == ""
    assert _first_difference(np.array(["x"]), np.array(["x"])) == ""
    assert "arrays differ" in _first_difference(np.array([1.0]), np.array([2.0]))


def test_step_before_any_reset_says_no_episode_started():
    import gymnasium as gym

    env = gym.make("llmgym/Wordle-v0")
    with pytest.raises(gym.error.ResetNeeded):  # Gymnasium's order enforcing, on for every registered id
        env.step("crane")
    with pytest.raises(RuntimeError, match="no episode has started: call reset"):  # the env itself, unwrapped
        env.unwrapped.step("crane")
    env.reset(seed=0)
    env.close()


def test_calculator_errors_always_say_why():
    from llmgym.envs.math_tools.calculator import CalculatorError, evaluate

    with pytest.raises(CalculatorError, match="cannot evaluate: PrecisionExhausted"):  # was "cannot evaluate: "
        evaluate("ceil(pi**1000)")
