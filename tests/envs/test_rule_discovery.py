"""Tests for llmgym/RuleDiscovery-v0: hidden per-seed rules, solvability, rewards, cheating, fuzz."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.rule_discovery import LEVELS, OraclePlayer, RuleDiscoveryEnv, play_human


def _call(name, **arguments):
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _run(env, actor, seed):
    env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(actor(env))
        total += reward
        done = terminated or truncated
    return total


def test_registered_and_passes_check_env():
    env = gym.make("llmgym/RuleDiscovery-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env.unwrapped)
    obs, info = env.reset(seed=0)
    assert "@" in obs and [t["function"]["name"] for t in info["tools"]] == ["move", "interact", "look"]


@pytest.mark.parametrize("difficulty", list(LEVELS))
def test_oracle_solves_every_level(difficulty):
    env = RuleDiscoveryEnv(difficulty=difficulty)
    for seed in range(8):
        total = _run(env, OraclePlayer().act, seed)
        assert env.reached_goal and total > 1.0
        assert env.episode().component_totals()["goal"] == 1.0


def test_rules_are_drawn_per_seed():
    env = RuleDiscoveryEnv(difficulty="hard")
    rules = set()
    for seed in range(12):
        env.reset(seed=seed)
        rules.add((tuple(sorted(env.symbols.items())), env.condition, env.collect, tuple(sorted(env.controls.items()))))
    assert len(rules) == 12
    env.reset(seed=0)
    assert sorted(env.controls.values()) == sorted([(-1, 0), (1, 0), (0, -1), (0, 1)])
    easy = RuleDiscoveryEnv(difficulty="easy")
    easy.reset(seed=0)
    assert easy.controls["up"] == (-1, 0) and f"The goal is {easy.symbols['goal']}" in easy.messages[1]["content"]
    env.reset(seed=0, options={"difficulty": "easy"})
    assert len(env.grid) == LEVELS["easy"]["size"] and env.max_turns == LEVELS["easy"]["max_turns"]
    with pytest.raises(ValueError, match="difficulty"):
        RuleDiscoveryEnv(difficulty="impossible")


def test_rules_behave_as_drawn():
    env = RuleDiscoveryEnv(difficulty="medium")
    env.reset(seed=5)
    size = len(env.grid)
    env.grid = [["floor"] * size for _ in range(size)]
    env.position = env.start = (3, 3)
    env.grid[2][3], env.grid[3][4], env.grid[4][3] = "wall", "hazard", "block"
    up = next(name for name, delta in env.controls.items() if delta == (-1, 0))
    right = next(name for name, delta in env.controls.items() if delta == (0, 1))
    down = next(name for name, delta in env.controls.items() if delta == (1, 0))
    assert "stops you" in env.move(up) and env.position == (3, 3)
    assert "pushing" in env.move(down) and env.grid[5][3] == "block" and env.position == (4, 3)
    env.move(up)
    env.position = (3, 3)
    assert "thrown back" in env.move(right) and env.position == env.start


def test_determinism_same_seed_same_episode():
    rng = np.random.default_rng(0)
    actions = [_call("move", direction=str(d)) for d in rng.choice(["up", "down", "left", "right"], size=25)]
    actions += [_call("interact"), _call("look"), "hello"]
    traces = []
    for _ in range(2):
        env = gym.make("llmgym/RuleDiscovery-v0", difficulty="hard")
        trace = [env.reset(seed=11)[0]]
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            trace.append((obs, reward, terminated, truncated, info["reward_components"]))
            if terminated or truncated:
                break
        traces.append(trace)
    assert traces[0] == traces[1]


def test_fuzz_never_raises():
    env = gym.make("llmgym/RuleDiscovery-v0")
    env.reset(seed=2)
    garbage = [
        "",
        "🙂" * 100,
        "x" * 100_000,
        "<tool_call>{",
        '<tool_call>{"name": "move", "arguments": {"direction": "north"}}</tool_call>',
        '<tool_call>{"name": "move", "arguments": {"direction": 5}}</tool_call>',
        '<tool_call>{"name": "teleport", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "look", "arguments": {"x": 1}}</tool_call>',
        {"role": "assistant", "content": None, "tool_calls": [{"bad": 1}]},
    ]
    for action in garbage * 3:
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and reward < 0 and info["reward_components"]["invalid"] == 1.0
        if terminated or truncated:
            env.reset(seed=3)


def test_cheating_and_idling_score_far_below_the_oracle():
    env = RuleDiscoveryEnv(difficulty="medium")
    rng = np.random.default_rng(0)
    policies = {
        "claims the goal": lambda e: "I reached the goal! The game is won.",
        "look spam": lambda e: _call("look"),
        "interact spam": lambda e: _call("interact"),
        "random walk": lambda e: _call("move", direction=str(rng.choice(["up", "down", "left", "right"]))),
    }
    for seed in range(4):
        oracle = _run(env, OraclePlayer().act, seed)
        for name, policy in policies.items():
            assert _run(env, policy, seed) < oracle - 0.7, name


def test_exploration_reward_is_capped():
    env = RuleDiscoveryEnv(difficulty="hard", max_turns=400)
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(400):
        _, _, terminated, truncated, _ = env.step(
            _call("move", direction=str(rng.choice(["up", "down", "left", "right"])))
        )
        if terminated or truncated:
            break
    totals = env.episode().component_totals()
    items = 0.1 * (env.coins_collected + env.has_key + env.switch_on)
    assert totals["progress"] <= 0.2 + items + 1e-9


def test_play_human(monkeypatch, capsys):
    env = RuleDiscoveryEnv(difficulty="easy")
    env.reset(seed=4)
    oracle = OraclePlayer()
    moves = []
    done = False
    while not done:  # record the oracle's moves as a person would type them
        action = oracle.act(env)
        moves.append(action)
        *_, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    typed = iter(moves)
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    assert play_human("easy", seed=4) > 1.0
    assert "Goal reached!" in capsys.readouterr().out


def test_plain_text_commands_act_like_tool_calls():
    by_text, by_tool = RuleDiscoveryEnv(difficulty="hard"), RuleDiscoveryEnv(difficulty="hard")
    by_text.reset(seed=9)
    by_tool.reset(seed=9)
    for text, call in [
        ("Let me try.\nup", _call("move", direction="up")),
        ("move left", _call("move", direction="left")),
        ("interact", _call("interact")),
        ("LOOK.", _call("look")),
    ]:
        a, b = by_text.step(text), by_tool.step(call)
        assert a[0] == b[0] and a[1] == b[1] and a[4]["reward_components"]["invalid"] == 0.0
    _, reward, *_ = by_text.step("I think the goal is up there")
    assert reward == pytest.approx(-0.05)


def test_rule_discovery_unhashable_difficulty_is_a_clear_value_error():
    import pytest

    from llmgym.envs.rule_discovery import RuleDiscoveryEnv

    with pytest.raises(ValueError, match="difficulty"):
        RuleDiscoveryEnv(difficulty=["easy"])
    env = RuleDiscoveryEnv()
    for bad in (["easy"], {"level": 1}):
        with pytest.raises(ValueError, match="difficulty"):
            env.reset(seed=0, options={"difficulty": bad})
    observation, _ = env.reset(seed=0, options={"difficulty": "easy"})
    assert observation.startswith("Difficulty: easy.")


@pytest.mark.parametrize("max_turns", [0, -2])
def test_rule_discovery_refuses_a_turn_budget_below_one(max_turns):
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        gym.make("llmgym/RuleDiscovery-v0", max_turns=max_turns)


def test_rule_discovery_turn_budget_follows_the_level_unless_fixed():
    env = gym.make("llmgym/RuleDiscovery-v0", max_turns=None)
    assert env.unwrapped.max_turns == 50
    env.reset(seed=0, options={"difficulty": "hard"})
    assert env.unwrapped.max_turns == 80
    fixed = gym.make("llmgym/RuleDiscovery-v0", max_turns=4)
    fixed.reset(seed=0, options={"difficulty": "hard"})
    assert fixed.unwrapped.max_turns == 4


def test_rule_discovery_accepts_max_tool_calls():
    env = gym.make("llmgym/RuleDiscovery-v0", difficulty="easy", max_tool_calls=2)
    assert env.unwrapped.max_tool_calls == 2
    env.reset(seed=0)
    obs, *_ = env.step(_call("look") + _call("look"))
    assert obs.count("Map:") == 2
    default = gym.make("llmgym/RuleDiscovery-v0", difficulty="easy")
    assert default.unwrapped.max_tool_calls == 1  # one action a turn unless asked otherwise
    default.reset(seed=0)
    obs, *_ = default.step(_call("look") + _call("look"))
    assert obs.count("Map:") == 1
