"""Routing over several inference servers: the router's rules, then real ``llmgym serve`` servers, one killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from llmgym.episode import load_jsonl
from llmgym.policy import Policy, PolicyRequest
from llmgym.rollout import rollout
from llmgym.wrappers.routing import ServerRouter
from tests.servers import free_port, wait_healthy

pytest.importorskip("openai")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_new_episodes_go_to_the_least_busy_server_and_stay_there():
    router = ServerRouter(3)
    placed = {}
    for episode in "abcdef":
        placed[episode] = router.pick(episode)
        router.begin(placed[episode])
    assert sorted(router.in_flight) == [2, 2, 2]  # spread evenly
    router.end(placed["a"])
    router.end(placed["b"])
    for episode in "abcdef":  # later turns: the same server, however busy it is
        assert router.pick(episode) == placed[episode]
    fresh = router.pick("g")
    assert router.in_flight[fresh] == min(router.in_flight)


def test_a_failed_server_is_taken_out_and_its_episodes_move():
    clock = Clock()
    router = ServerRouter(2, retry_after=10, clock=clock)
    assert router.pick("a") == 0 and router.pick("b") == 1
    router.fail(0)
    assert router.pick("a") == 1 and router.pick("new") == 1  # moved; new episodes avoid it
    assert router.pick("a", exclude={1}) == 0  # every other server excluded: tried rather than fail
    clock.now = 10.0
    router.begin(1)
    assert router.is_up(0) and router.pick("another") == 0  # back after retry_after, and the least busy
    router.fail(1)
    router.fail(0)
    assert router.pick("c") in (0, 1)  # all out: still placed
    with pytest.raises(ValueError, match="every server is excluded"):
        router.pick("c", exclude={0, 1})


def test_forgotten_episodes_are_routed_as_new_ones():
    router = ServerRouter(2, max_episodes=2)
    first = router.pick("a")
    router.begin(first)
    router.pick("b")
    router.pick("c")  # "a" is the least recently used: forgotten
    assert "a" not in router.episodes and len(router.episodes) == 2
    with pytest.raises(ValueError, match="at least one server"):
        ServerRouter(0)


class Recorder(Policy):
    """Passes requests to ``inner``; records which server answered each turn of each episode, and can act mid-run."""

    def __init__(self, inner: Policy, on_turn=None):
        self.inner, self.on_turn = inner, on_turn
        self.name = inner.name
        self.turns: list[tuple[str, str]] = []

    async def agenerate(self, request: PolicyRequest):
        generation = await self.inner.agenerate(request)
        self.turns.append((request.episode_id, generation.metadata["base_url"]))
        if self.on_turn is not None:
            self.on_turn(len(self.turns))
        return generation


def _serve(port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "llmgym", "serve", "--backend", "scripted", "--model", "wordle"]
        + ["--model-name", "wordle-bot", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.mark.slow  # three server processes: ~10-20 s on a busy 2-core machine
def test_episodes_survive_a_server_killed_mid_run(tmp_path):
    from llmgym.wrappers.openai_policy import OpenAIPolicy

    ports = [free_port() for _ in range(3)]
    processes = [_serve(port) for port in ports]
    urls = [f"http://127.0.0.1:{port}/v1" for port in ports]
    policy = None
    try:
        for url, process in zip(urls, processes):
            wait_healthy(url.removesuffix("/v1"), process)
        victim = urls[0]

        def kill_victim(turns: int) -> None:
            if turns == 12:  # a dozen turns in: episodes are in flight on every server
                processes[0].send_signal(signal.SIGKILL)
                processes[0].wait()

        policy = OpenAIPolicy("wordle-bot", base_url=urls, max_retries=0, return_tokens=False, timeout=30)
        recorder = Recorder(policy, kill_victim)
        path = tmp_path / "episodes.jsonl"
        episodes = rollout("llmgym/Wordle-v0", recorder, seeds=range(12), max_concurrency=6, jsonl_path=path)
    finally:
        if policy is not None:
            policy.close()
        for process in processes:
            process.kill()
            process.wait()

    # nothing lost, nothing duplicated: every episode played to its end, once, in the file
    assert all("error" not in e.metadata for e in episodes), [e.metadata.get("error") for e in episodes]
    assert all(e.component_totals()["solved"] == 1.0 for e in episodes)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(line["seed"] for line in lines) == list(range(12)) and len(load_jsonl(path)) == 12

    by_episode: dict[str, list[str]] = {}
    for episode, url in recorder.turns:
        by_episode.setdefault(episode, []).append(url)
    assert len(by_episode) == 12
    # taken out: no request answered by it once the turns answered before the kill (up to 6 in flight) are in
    assert victim not in {url for _, url in recorder.turns[12 + 6 :]}
    moved = 0
    for urls_used in by_episode.values():
        # sticky: an episode changes server only when its server dies, and then once, for good
        changes = [i for i in range(1, len(urls_used)) if urls_used[i] != urls_used[i - 1]]
        assert len(changes) <= 1
        if changes:
            assert urls_used[0] == victim and victim not in urls_used[changes[0] :]
            moved += 1
    assert moved >= 1  # some episodes were on the killed server and went on elsewhere
    assert len({urls_used[0] for urls_used in by_episode.values()}) == 3  # new episodes were spread over all three
