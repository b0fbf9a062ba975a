"""OpenEnv both ways: ``llmgym serve-env`` played by OpenEnv's own client; OpenEnv servers as ``llmgym/OpenEnv-v0``."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import pytest
from openenv_servers import (
    ThreadedServer,
    echo_env_module,
    need_openenv,
    start_serve_env,
    stop,
)

import llmgym
from llmgym.cli import main
from llmgym.rollout import rollout

GUESS = '<tool_call>{"name": "guess", "arguments": {"word": "%s"}}</tool_call>'
NATIVE = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "guess", "arguments": '{"word": "slate"}'}}],
}
ACTIONS = ["hello", GUESS % "crane", NATIVE, "}}{{", GUESS % "qqqqq", GUESS % "pious", GUESS % "dwarf"]


@pytest.fixture(scope="module")
def wordle_url():
    """``llmgym/Wordle-v0`` behind OpenEnv's app, in this process, two sessions at most."""
    need_openenv()
    from llmgym.envs.adapters.openenv.server import create_env_app

    server = ThreadedServer(create_env_app("llmgym/Wordle-v0", max_sessions=2))
    yield server.url
    server.stop()


def _local_trace(seed: int, actions: list) -> list:
    env = gym.make("llmgym/Wordle-v0")
    trace = [env.reset(seed=seed)]
    for action in actions:
        step = env.step(action)
        trace.append(step)
        if step[2] or step[3]:
            break
    env.close()
    return trace


def test_generic_env_client_plays_a_served_env(wordle_url):
    from openenv import GenericEnvClient

    local = _local_trace(3, ACTIONS)
    with GenericEnvClient(base_url=wordle_url).sync() as client:
        result = client.reset(seed=3)
        text, info = local[0]
        assert result.observation["text"] == text and result.reward is None and result.done is False
        assert result.observation["tools"] == info["tools"] and result.observation["tools"][0]["function"]["name"]
        assert result.observation["messages"] == info["messages"]
        for action, (text, reward, terminated, truncated, info) in zip(ACTIONS, local[1:]):
            wire = (
                {"content": action} if isinstance(action, str) else {"content": "", "tool_calls": action["tool_calls"]}
            )
            result = client.step(wire)
            observation = result.observation
            assert observation["text"] == text and result.reward == pytest.approx(reward)
            assert observation["reward_components"] == info["reward_components"]
            assert (observation["terminated"], observation["truncated"]) == (terminated, truncated)
            assert result.done == (terminated or truncated)
            assert observation["messages"] == info["messages"]
        assert client.state()["step_count"] == len(local) - 1


def test_sessions_are_isolated_and_capped(wordle_url):
    from openenv import GenericEnvClient

    first, second = GenericEnvClient(base_url=wordle_url).sync(), GenericEnvClient(base_url=wordle_url).sync()
    try:
        a, b = first.reset(seed=1), second.reset(seed=2)
        assert a.observation["messages"] == _local_trace(1, [])[0][1]["messages"]
        for word in ["crane", "slate"]:  # interleaved: each session keeps its own episode
            a, b = first.step({"content": GUESS % word}), second.step({"content": GUESS % word})
        assert a.observation["messages"] == _local_trace(1, [GUESS % "crane", GUESS % "slate"])[-1][4]["messages"]
        assert b.observation["messages"] == _local_trace(2, [GUESS % "crane", GUESS % "slate"])[-1][4]["messages"]
        with GenericEnvClient(base_url=wordle_url).sync() as third:
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                third.reset(seed=0)
    finally:
        first.close()
        second.close()
    with GenericEnvClient(base_url=wordle_url).sync() as again:  # closed sessions free their places
        assert again.reset(seed=0).observation["turn"] == 0


def test_bad_requests_are_server_errors_not_crashes(wordle_url):
    from openenv import GenericEnvClient

    with GenericEnvClient(base_url=wordle_url).sync() as client:
        with pytest.raises(RuntimeError, match="reset"):
            client.step({"content": "crane"})  # before any reset
        with pytest.raises(RuntimeError, match="bogus"):
            client.reset(seed=0, bogus=1)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"words": "crane"})
        assert client.reset(seed=0).observation["turn"] == 0  # the session still works


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_the_http_routes_answer_a_clients_mistake_with_what_to_do(wordle_url):
    """Were 500s, each with a traceback in the server's log: every POST /step (ResetNeeded), a bad reset field."""
    import httpx

    log = _Records()
    logging.getLogger("uvicorn.error").addHandler(log)
    try:
        step = httpx.post(f"{wordle_url}/step", json={"action": {"content": GUESS % "crane"}}, timeout=30)
        bogus = httpx.post(f"{wordle_url}/reset", json={"seed": 0, "bogus": 1}, timeout=30)
        options = httpx.post(f"{wordle_url}/reset", json={"options": 5}, timeout=30)
        reset = httpx.post(f"{wordle_url}/reset", json={"seed": 3}, timeout=30)
    finally:
        logging.getLogger("uvicorn.error").removeHandler(log)
    assert step.status_code == 409
    assert "WebSocket route /ws" in step.json()["detail"] and "GenericEnvClient" in step.json()["detail"]
    assert bogus.status_code == 422 and "got also ['bogus']: leave them out" in bogus.json()["detail"]
    assert options.status_code == 422 and "options must be a JSON object" in options.json()["detail"]
    assert reset.status_code == 200 and reset.json()["observation"]["text"] == _local_trace(3, [])[0][0]
    assert not [r for r in log.records if r.exc_info], [r.getMessage() for r in log.records]


def test_round_trip_gives_the_local_episode(wordle_url):
    remote = gym.make("llmgym/OpenEnv-v0", base_url=wordle_url)
    local = gym.make("llmgym/Wordle-v0")
    assert remote.reset(seed=7) == local.reset(seed=7)
    for action in ACTIONS:
        step = remote.step(action)
        assert step == local.step(action)
        if step[2] or step[3]:
            break
    remote.close()
    local.close()
    assert "llmgym/OpenEnv-v0" not in llmgym.list_envs()  # it needs a server: not among the envs that play as they are


def test_rollout_over_openenv_records_the_local_episodes(wordle_url):
    from llmgym.wrappers.scripted import load_scripted

    policy = load_scripted("wordle")
    remote = rollout("llmgym/OpenEnv-v0", policy, seeds=[0, 1], env_kwargs={"base_url": wordle_url}, max_concurrency=2)
    local = rollout("llmgym/Wordle-v0", policy, seeds=[0, 1])
    for a, b in zip(remote, local):
        assert "error" not in a.metadata
        assert (a.messages, a.turn_rewards, a.reward_components) == (b.messages, b.turn_rewards, b.reward_components)
        assert (a.tools, a.terminated, a.truncated, a.seed) == (b.tools, b.terminated, b.truncated, b.seed)


def test_openenv_example_env_as_an_llmgym_env(tmp_path):
    need_openenv()
    import importlib

    from gymnasium.utils.env_checker import check_env

    server = ThreadedServer(importlib.import_module(echo_env_module(tmp_path)).app)
    try:
        env = gym.make("llmgym/OpenEnv-v0", base_url=server.url, max_turns=4)
        text, info = env.reset(seed=0)
        assert json.loads(text)["echoed_message"] and info["tools"][0]["function"]["name"] == "act"
        assert info["tools"][0]["function"]["parameters"]["required"] == ["message"]
        text, reward, terminated, truncated, info = env.step("hello")  # plain text goes as the only string field
        assert json.loads(text) == {"echoed_message": "hello", "message_length": 5} and reward == 0.5
        assert info["reward_components"] == {"env_reward": 0.5, "format_error": 0.0}
        text, reward, *_ = env.step('<tool_call>{"name": "act", "arguments": {"message": "hi"}}</tool_call>')
        assert json.loads(text)["echoed_message"] == "hi" and reward == pytest.approx(0.2)
        text, reward, terminated, truncated, info = env.step(
            '<tool_call>{"name": "act", "arguments": {"message": 3}}</tool_call>'
        )
        assert text.startswith("Format error: invalid arguments for act") and reward == 0.0
        assert info["reward_components"]["format_error"] == 1.0 and [m["role"] for m in info["messages"]][-1] == "tool"
        text, *_, truncated, info = env.step('<tool_call>{"name": "shout", "arguments": {}}</tool_call>')
        assert "unknown tool" in text and truncated and info["turn"] == 4
        with pytest.raises(RuntimeError, match="reset"):
            env.step("again")
        check_env(env.unwrapped, skip_render_check=True)
        env.close()
    finally:
        server.stop()


def test_unreachable_server_is_a_clear_error():
    need_openenv()
    with pytest.raises(ConnectionError, match="cannot read the OpenEnv server"):
        gym.make("llmgym/OpenEnv-v0", base_url="http://127.0.0.1:9", timeout=2)


@pytest.mark.slow  # a server process and a client process: ~15 s here
def test_serve_env_command_serves_and_drops_a_vanished_client(tmp_path):
    """The CLI end to end: a client process killed mid-episode frees its session."""
    need_openenv()
    from openenv import GenericEnvClient

    process, url = start_serve_env("llmgym/Wordle-v0", "--max-sessions", "1")
    holder = None
    try:
        script = textwrap.dedent(
            f"""
            import sys, time
            from openenv import GenericEnvClient
            client = GenericEnvClient(base_url={url!r}).sync()
            client.reset(seed=0)
            print("ready", flush=True)
            time.sleep(120)
            """
        )
        holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "ready"
        with GenericEnvClient(base_url=url).sync() as client:
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                client.reset(seed=0)
        holder.send_signal(signal.SIGKILL)  # the client vanishes without closing its session
        holder.wait()
        deadline = time.monotonic() + 30
        while True:
            try:
                with GenericEnvClient(base_url=url).sync() as client:
                    assert client.reset(seed=4).observation["text"] == _local_trace(4, [])[0][0]
                break
            except RuntimeError:
                assert time.monotonic() < deadline, "the vanished client's session was never closed"
                time.sleep(0.2)
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        stop(process)


def test_serve_env_refuses_bad_arguments(capsys):
    assert main(["serve-env", "llmgym/Nope-v0"]) == 2
    assert "unknown environment 'llmgym/Nope-v0'" in capsys.readouterr().err
    assert main(["serve-env", "llmgym/Wordle-v0", "--max-sessions", "0"]) == 2
    assert "--max-sessions must be at least 1" in capsys.readouterr().err
    assert main(["serve-env", "llmgym/Wordle-v0", "--env-kwargs", "[1]"]) == 2
    assert "--env-kwargs must be a JSON object" in capsys.readouterr().err
    need_openenv()
    assert main(["serve-env", "CartPole-v1"]) == 2
    assert "serve-env serves envs whose actions are text" in capsys.readouterr().err
