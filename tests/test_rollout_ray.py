"""Rollouts with each env on a Ray actor (``rollout(..., ray=True)``), on a local Ray instance the test starts.

A worker killed mid-episode: its episode is played again on a fresh actor (or, with no retries
left, recorded as failed); the JSONL file holds every episode exactly once.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from llmgym.policy import Policy, PolicyRequest
from llmgym.rollout import rollout
from llmgym.wrappers.scripted import load_scripted

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # starting Ray and its worker processes: ~10-20 s on a busy 2-core machine

WORDLE = "llmgym/Wordle-v0"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _actor_pids() -> list[int]:
    """The processes of live env actors (Ray titles an actor's process ``ray::_EnvHost...``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"ray::_EnvHost" in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


class KillsWorkers(Policy):
    """The scripted Wordle solver, which kills the env actors' processes on its ``at``-th request (mid-episode).

    Every listed actor process is killed (one of an earlier test's actors may still be exiting), so
    the one or two episodes in flight then are lost mid-episode.
    """

    def __init__(self, at: int):
        self.inner, self.at, self.requests, self.killed = load_scripted("wordle"), at, 0, []
        self.name = self.inner.name

    async def agenerate(self, request: PolicyRequest):
        self.requests += 1
        if self.requests == self.at:
            for pid in _actor_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                except ProcessLookupError:
                    pass
        return await self.inner.agenerate(request)


def _same_play(a, b) -> bool:
    return (a.env_id, a.seed, a.messages, a.turn_rewards, a.reward_components, a.terminated) == (
        b.env_id,
        b.seed,
        b.messages,
        b.turn_rewards,
        b.reward_components,
        b.terminated,
    )


def test_ray_rollout_records_the_local_episodes(tmp_path):
    path = tmp_path / "ray.jsonl"
    remote = rollout(WORDLE, load_scripted("wordle"), seeds=4, max_concurrency=2, ray=True, jsonl_path=path)
    local = rollout(WORDLE, load_scripted("wordle"), seeds=4)
    assert all(_same_play(a, b) for a, b in zip(remote, local))
    assert len(path.read_text().splitlines()) == 4


def test_a_worker_killed_mid_episode_is_replayed_never_lost_nor_duplicated(tmp_path):
    path = tmp_path / "killed.jsonl"
    policy = KillsWorkers(at=3)  # two episodes in flight, each past its first turn
    episodes = rollout(WORDLE, policy, seeds=4, max_concurrency=2, ray=True, jsonl_path=path)
    assert policy.killed
    local = rollout(WORDLE, load_scripted("wordle"), seeds=4)
    assert all("error" not in e.metadata for e in episodes)
    assert all(_same_play(a, b) for a, b in zip(episodes, local))  # replayed from its reset: the same episode
    assert 1 <= sum(e.metadata.get("worker_retries", 0) for e in episodes) <= 2
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((line["seed"], line["metadata"]["group_index"]) for line in lines) == [(s, 0) for s in range(4)]


def test_with_no_retries_left_the_episode_is_recorded_as_failed(tmp_path):
    path = tmp_path / "failed.jsonl"
    episodes = rollout(
        WORDLE, KillsWorkers(at=3), seeds=4, max_concurrency=2, ray=True, jsonl_path=path, worker_retries=0
    )
    failed = [e for e in episodes if "error" in e.metadata]
    assert 1 <= len(failed) <= 2
    assert all(e.metadata["error"].startswith("EnvWorkerLost: the Ray actor of") for e in failed)
    assert all(e.metadata["error_source"] == "env" and e.messages == [] for e in failed)
    assert len(path.read_text().splitlines()) == 4  # the failed one too, once: a resume plays it again


def test_ray_needs_an_env_id():
    with pytest.raises(TypeError, match="pass an env id"):
        rollout(lambda: None, load_scripted("wordle"), seeds=1, ray=True)


def test_grpo_collects_its_episodes_on_ray_actors(tmp_path):
    """The trainer's collection goes through the same rollout: ``GRPOConfig(ray=True)`` trains on envs played by
    actors (a registered id: the actors import llmgym, not the test's modules)."""
    pytest.importorskip("torch")
    from llmgym.trainers.config import GRPOConfig
    from llmgym.trainers.grpo import GRPOTrainer

    config = GRPOConfig(
        env_id="llmgym/WordleCompact-v0", env_kwargs={"max_turns": 2}, model="tiny-random", out=str(tmp_path), steps=1,
        prompts_per_step=2, group_size=2, max_new_tokens=3, progress=False, plot=False, torch_threads=1, ray=True,
    )  # fmt: skip
    trainer = GRPOTrainer(config)
    history = trainer.train()
    trainer.close()
    assert history[-1]["episodes_seen"] == 4
    assert history[-1]["reward/invalid_guess/mean"] > 0  # the env's own rubric scored the actors' episodes
