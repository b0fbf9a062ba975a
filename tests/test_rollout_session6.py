"""Rollout records what the caller's env returned, never wipes a file it cannot start on, and checks its inputs."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.wordle.env import WordleEnv
from llmgym.episode import load_jsonl
from llmgym.policy import Generation, Policy
from llmgym.rollout import rollout, summarize
from llmgym.spaces import Text
from llmgym.wrappers.scripted import load_scripted

WORDLE = "llmgym/Wordle-v0"


class Guess(Policy):
    """Replies ``content`` every turn (a wrong guess by default: an episode only a budget ends)."""

    def __init__(self, content="zzzzz"):
        self.content = content

    async def agenerate(self, request):
        return Generation({"role": "assistant", "content": self.content})


# -- wrappers on the env: the record is what the outermost env returned ------------------------


def test_a_time_limit_from_env_kwargs_is_recorded_as_truncation(tmp_path):
    path = tmp_path / "run.jsonl"
    episodes = rollout(WORDLE, Guess(), seeds=2, env_kwargs={"max_episode_steps": 2}, jsonl_path=path)
    assert [(e.num_turns, e.terminated, e.truncated) for e in episodes] == [(2, False, True)] * 2
    assert summarize(episodes)["truncated_rate"] == 1.0
    assert load_jsonl(path) == episodes


def test_a_time_limit_from_a_factory_is_recorded_as_truncation():
    episode = rollout(lambda: gym.wrappers.TimeLimit(gym.make(WORDLE), 3), Guess(), seeds=1)[0]
    assert (episode.num_turns, episode.terminated, episode.truncated) == (3, False, True)
    assert "error" not in episode.metadata


def test_a_reward_wrapper_gives_the_turn_rewards_and_the_base_env_the_rest():
    raw = rollout(WORDLE, load_scripted("wordle"), seeds=[4])[0]
    shaped = rollout(lambda: gym.wrappers.TransformReward(gym.make(WORDLE), lambda r: 100 * r - 1),
                     load_scripted("wordle"), seeds=[4])[0]
    assert shaped.turn_rewards == pytest.approx([100 * r - 1 for r in raw.turn_rewards])
    assert shaped.reward_components == raw.reward_components  # the base env's, unweighted and unshaped
    assert shaped.messages == raw.messages and shaped.tools == raw.tools
    assert (shaped.terminated, shaped.truncated) == (raw.terminated, raw.truncated) == (True, False)


# -- a run that cannot start leaves an earlier run's file alone -----------------------------


@pytest.mark.parametrize("env, env_kwargs, error", [
    ("CartPole-v1", None, TypeError),  # actions are not text
    (WORDLE, {"nonsense_kw": 1}, TypeError),  # the env refuses its kwargs
    (lambda: (_ for _ in ()).throw(RuntimeError("no sandbox")), None, RuntimeError),  # a factory that never builds
])
def test_a_run_that_cannot_start_keeps_the_earlier_file(tmp_path, env, env_kwargs, error):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=3, jsonl_path=path)
    before = path.read_bytes()
    with pytest.raises(error):
        rollout(env, load_scripted("wordle"), seeds=[0], jsonl_path=path, env_kwargs=env_kwargs)
    assert path.read_bytes() == before


def test_the_first_env_is_played_and_an_env_refused_up_front_is_closed(tmp_path):
    built, closed = [], []

    class Counted(WordleEnv):
        def __init__(self):
            super().__init__()
            built.append(self)

        def close(self):
            closed.append(self)
            super().close()

    rollout(Counted, load_scripted("wordle"), seeds=3, max_concurrency=1)
    assert len(built) == 1 and closed == built  # the env built to check the run is the one that plays

    class Discrete(gym.Env):
        action_space = gym.spaces.Discrete(2)

        def close(self):
            closed.append(self)

    closed.clear()
    with pytest.raises(TypeError, match="action space is Discrete"):
        rollout(Discrete, load_scripted("wordle"), seeds=[0], jsonl_path=tmp_path / "x.jsonl")
    assert len(closed) == 1 and not (tmp_path / "x.jsonl").exists()


# -- resume: a factory's env counts by its registered id ------------------------------------


def test_resuming_with_a_factory_of_another_env_is_refused(tmp_path):
    path = tmp_path / "run.jsonl"
    rollout(WORDLE, load_scripted("wordle"), seeds=[0, 1], jsonl_path=path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="holds episodes of 'llmgym/Wordle-v0', not 'llmgym/MathTools-v0'"):
        rollout(lambda: gym.make("llmgym/MathTools-v0"), load_scripted("wordle"), seeds=[0, 1, 5], jsonl_path=path,
                resume=True)
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


# -- reward components of a plain env -------------------------------------------------------


class PlainEnv(gym.Env):
    """A plain Gymnasium text env of two turns whose reward components are ``components``."""

    observation_space = action_space = Text(max_length=100)

    def __init__(self, components):
        self.components = components

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return "start", {}

    def step(self, action):
        self.turn += 1
        return "obs", np.float32(0.5), np.bool_(self.turn >= 2), False, {"reward_components": self.components}


@pytest.mark.parametrize("value", [np.bool_(True), np.float32(1.0), True, np.int64(1)])
def test_numpy_reward_components_are_recorded_as_floats(tmp_path, value):
    path = tmp_path / "run.jsonl"
    episodes = rollout(lambda: PlainEnv({"solved": value}), Guess(), seeds=[0, 1], jsonl_path=path)
    for episode in episodes:
        assert "error" not in episode.metadata
        assert episode.reward_components == [{"solved": 1.0}, {"solved": 1.0}]
        assert all(type(v) is float for c in episode.reward_components for v in c.values())
    assert load_jsonl(path) == episodes


@pytest.mark.parametrize("value, error", [
    ("yes", "ValueError: the env's reward component 'solved' on turn 1 is 'yes', not a number"),
    (None, "ValueError: the env's reward component 'solved' on turn 1 is None, not a number"),
    (math.nan, "ValueError: the env returned a non-finite reward component 'solved'=nan on turn 1"),
])
def test_a_reward_component_that_is_no_number_fails_the_episode_not_the_run(tmp_path, value, error):
    path = tmp_path / "run.jsonl"
    episodes = rollout(lambda: PlainEnv({"solved": value}), Guess(), seeds=[0, 1], jsonl_path=path)
    assert [(e.metadata["error_source"], e.metadata["error"]) for e in episodes] == [("env", error)] * 2
    assert load_jsonl(path) == episodes and summarize(episodes)["failed"] == 2


# -- seeds and policy replies ---------------------------------------------------------------


@pytest.mark.parametrize("seeds, error, match", [
    ([1.5], TypeError, r"seeds must be ints, got 1\.5 \(float\)"),
    ([0, 2.0], TypeError, r"seeds must be ints, got 2\.0"),
    (True, TypeError, "seeds must be a count"),
    ([True], TypeError, "seeds must be ints, got True"),
    ("012", TypeError, "seeds must be a count"),
    (1.5, TypeError, "seeds must be a count"),
    ([-1], ValueError, "seeds must be >= 0"),
    (-1, ValueError, "seeds as a count must be >= 0"),
])
def test_bad_seeds_are_refused_up_front(tmp_path, seeds, error, match):
    path = tmp_path / "run.jsonl"
    with pytest.raises(error, match=match):
        rollout(WORDLE, Guess(), seeds=seeds, jsonl_path=path)
    assert not path.exists()


def test_numpy_int_seeds_are_plain_ints():
    episodes = rollout(WORDLE, load_scripted("wordle"), seeds=np.array([3, 1]))
    assert [e.seed for e in episodes] == [3, 1] and all(type(e.seed) is int for e in episodes)
    assert [e.seed for e in rollout(WORDLE, load_scripted("wordle"), seeds=np.int64(2))] == [0, 1]


def test_a_generation_whose_message_is_no_dict_stops_the_run_with_a_type_error():
    class Bare(Policy):
        async def agenerate(self, request):
            return Generation("crane")  # type: ignore[arg-type]

    with pytest.raises(TypeError, match="Bare.agenerate returned a Generation whose message is a str, not a dict"):
        rollout(WORDLE, Bare(), seeds=[0])


def test_reply_content_that_is_no_string_is_a_policy_error(tmp_path):
    path = tmp_path / "run.jsonl"
    episodes = rollout(WORDLE, Guess(content=123), seeds=[0, 1], jsonl_path=path)
    for episode in episodes:
        assert episode.metadata["error_source"] == "policy"
        assert episode.metadata["error"] == "TypeError: the reply's content is of type int, not a string"
        assert episode.num_turns == 0 and [m["role"] for m in episode.messages] == ["system", "user"]
    assert load_jsonl(path) == episodes
    # None (a reply with no text) is still played, as an empty guess
    episode = rollout(WORDLE, Guess(content=None), seeds=[0])[0]
    assert "error" not in episode.metadata and episode.num_turns >= 1
