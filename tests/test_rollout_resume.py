"""Resuming a rollout from its JSONL file: only missing seeds are played, and a file of other settings is refused."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  registers the envs
from llmgym.episode import load_jsonl
from llmgym.rollout import rollout
from llmgym.wrappers.scripted import load_scripted

WORDLE = "llmgym/Wordle-v0"


def test_resume_keeps_a_complete_last_line_that_lost_its_newline(tmp_path):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=2, jsonl_path=path)
    path.write_text(path.read_text().rstrip("\n"))
    calls = []
    rollout(
        WORDLE,
        load_scripted("wordle"),
        seeds=3,
        jsonl_path=path,
        resume=True,
        progress=lambda done, total, episode: calls.append(episode.seed),
    )
    assert calls == [2]
    assert [e.seed for e in load_jsonl(path)] == [0, 1, 2]


def test_resumed_episodes_take_this_runs_group_numbers(tmp_path):
    # the file numbers seed 1 as group 1; resumed with seeds [1, 2], seed 2 is new in group 1: the two must not share it
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=[0, 1], group_size=2, jsonl_path=path)
    resumed = rollout(WORDLE, load_scripted("wordle"), seeds=[1, 2], group_size=2, jsonl_path=path, resume=True)
    assert [(e.seed, e.group) for e in resumed] == [(1, 0), (1, 0), (2, 1), (2, 1)]


def test_resuming_with_a_factory_of_another_env_is_refused(tmp_path):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=[0, 1], jsonl_path=path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="holds episodes of 'llmgym/Wordle-v0', not 'llmgym/MathTools-v0'"):
        rollout(
            lambda: gym.make("llmgym/MathTools-v0"),
            load_scripted("wordle"),
            seeds=[0, 1, 5],
            jsonl_path=path,
            resume=True,
        )
    assert path.read_bytes() == before


def test_resuming_with_a_factory_of_the_same_env_plays_only_the_missing_seeds(tmp_path):
    path = tmp_path / "run.jsonl"
    first = rollout(WORDLE, load_scripted("wordle"), seeds=[0, 1], jsonl_path=path)
    factory = lambda: gym.wrappers.TimeLimit(gym.make(WORDLE), 20)  # noqa: E731  wrappers keep the spec id
    episodes = rollout(factory, load_scripted("wordle"), seeds=[0, 1, 2], jsonl_path=path, resume=True)
    assert episodes[:2] == first and episodes[2].env_id == WORDLE and "error" not in episodes[2].metadata
    assert [e.seed for e in load_jsonl(path)] == [0, 1, 2]
    # and a factory's own file resumes with the same factory
    again = rollout(factory, load_scripted("wordle"), seeds=[0, 1, 2, 3], jsonl_path=path, resume=True)
    assert again[:3] == episodes and [e.seed for e in load_jsonl(path)] == [0, 1, 2, 3]


def test_rollout_resume_refuses_other_env_kwargs(tmp_path):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=2, jsonl_path=path, env_kwargs={"max_turns": 6})
    with pytest.raises(ValueError, match=r"env_kwargs \{'max_turns': 6\}, not \{'max_turns': 5\}"):
        rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True, env_kwargs={"max_turns": 5})
    with pytest.raises(ValueError, match=r"env_kwargs \{'max_turns': 6\}, not \{\}"):
        rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True)  # no kwargs: the defaults
    resumed = rollout(
        WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True, env_kwargs={"max_turns": 6}
    )
    assert [e.seed for e in resumed] == [0, 1, 2]
