"""An environment that raises, and floats JSON cannot hold, cost one episode at most, never the run."""

from __future__ import annotations

import asyncio
import json
import math

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.wordle.env import WordleEnv
from llmgym.episode import LOGPROB_FLOOR, Episode, load_jsonl
from llmgym.policy import Generation, Policy
from llmgym.rollout import TokenMismatchError, rollout, summarize
from llmgym.spaces import Text
from llmgym.wrappers.scripted import ScriptedPolicy, load_scripted

WORDLE = "llmgym/Wordle-v0"


class SandboxDied(RuntimeError):
    """What a broken third-party env raises."""


class StepFailsOnSeed(WordleEnv):
    """Wordle whose second step raises on one seed (a sandbox that dies mid-episode)."""

    def __init__(self, bad_seed: int):
        super().__init__()
        self.bad_seed = bad_seed

    def step(self, action):
        if self.seed_used == self.bad_seed and self.turn_rewards:
            raise SandboxDied("sandbox died")
        return super().step(action)


class ResetFailsOnSeed(WordleEnv):
    """Wordle whose ``setup`` raises on one seed, after ``reset`` has already taken the new seed."""

    def __init__(self, bad_seed: int):
        super().__init__()
        self.bad_seed = bad_seed

    def setup(self, options):
        if self.seed_used == self.bad_seed:
            raise SandboxDied("no sandbox for this seed")
        return super().setup(options)


def _strict_loads(line: str):
    """``json.loads`` that refuses NaN and Infinity, as strict JSON readers (JavaScript, jq, Go) do."""

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_an_env_step_error_fails_one_episode_and_the_run_goes_on(tmp_path):
    path = tmp_path / "run.jsonl"
    episodes = rollout(
        lambda: StepFailsOnSeed(bad_seed=2),
        load_scripted("wordle"),
        seeds=[0, 1, 2, 3],
        max_concurrency=2,
        jsonl_path=path,
    )
    assert [e.seed for e in episodes] == [0, 1, 2, 3]
    failed = episodes[2]
    assert failed.metadata["error"] == "SandboxDied: sandbox died"
    assert failed.metadata["error_source"] == "env"
    # the turn played before the failure is kept, and the reply the env choked on closes the chat
    assert failed.num_turns == 1 and not failed.terminated and not failed.truncated
    assert failed.messages[-1]["role"] == "assistant" and len(failed.metadata["finish_reasons"]) == 2
    assert failed.env_id == "StepFailsOnSeed" and failed.group == 2 and failed.metadata["group_index"] == 0
    for episode in episodes[:2] + episodes[3:]:
        assert "error" not in episode.metadata and episode.terminated and episode.total_reward > 0
    assert summarize(episodes)["failed"] == 1
    written = load_jsonl(path)
    assert sorted(e.seed for e in written) == [0, 1, 2, 3]
    assert next(e for e in written if e.seed == 2) == failed


def test_a_failed_env_reset_is_recorded_without_the_previous_episode(tmp_path):
    path = tmp_path / "run.jsonl"
    # one env instance: seed 5 fails right after seed 4 played on it, so the env still holds seed 4's chat
    episodes = rollout(
        lambda: ResetFailsOnSeed(bad_seed=5),
        load_scripted("wordle"),
        seeds=[4, 5, 6],
        max_concurrency=1,
        jsonl_path=path,
    )
    assert [e.seed for e in episodes] == [4, 5, 6]
    failed = episodes[1]
    assert failed.metadata["error"] == "SandboxDied: no sandbox for this seed"
    assert failed.metadata["error_source"] == "env"
    assert failed.messages == [] and failed.turn_rewards == [] and failed.reward_components == []
    assert failed.token_ids == [] and failed.metadata["finish_reasons"] == []
    assert not failed.terminated and not failed.truncated
    assert episodes[0].terminated and episodes[2].terminated and "error" not in episodes[2].metadata
    assert [e.seed for e in load_jsonl(path)] == [4, 5, 6]


def test_a_failed_first_reset_needs_nothing_from_the_env():
    class Broken(gym.Env):
        """Fails in reset before setting any attribute, and has no spec: nothing on it can be trusted."""

        def __init__(self):
            self.observation_space = self.action_space = Text(max_length=10)

        def reset(self, *, seed=None, options=None):
            raise OSError("image not found")

    episodes = rollout(Broken, load_scripted("wordle"), seeds=[7, 8])
    assert [(e.seed, e.env_id, e.metadata["error"]) for e in episodes] == [
        (7, "Broken", "OSError: image not found"),
        (8, "Broken", "OSError: image not found"),
    ]


def test_an_llmenv_whose_episode_record_is_broken_after_a_failed_reset():
    class NoRecord(ResetFailsOnSeed):
        def episode(self, env_id=None):
            raise AttributeError("'NoRecord' object has no attribute 'board'")

    episodes = rollout(lambda: NoRecord(bad_seed=3), load_scripted("wordle"), seeds=[3])
    assert episodes[0].metadata["error"] == "SandboxDied: no sandbox for this seed"
    assert episodes[0].seed == 3 and episodes[0].messages == []


def test_resume_replays_an_episode_the_env_failed(tmp_path):
    path = tmp_path / "run.jsonl"
    first = rollout(lambda: StepFailsOnSeed(bad_seed=1), load_scripted("wordle"), seeds=3, jsonl_path=path)
    assert [("error" in e.metadata) for e in first] == [False, True, False]
    resumed = rollout(WordleEnv, load_scripted("wordle"), seeds=3, jsonl_path=path, resume=True)
    assert not any("error" in e.metadata for e in resumed) and [e.seed for e in resumed] == [0, 1, 2]
    assert resumed[0] == first[0] and resumed[2] == first[2]
    assert [e.seed for e in load_jsonl(path)] == [0, 1, 2, 1]  # the file keeps the failed line; the newer wins


class Echo:
    def act(self, observation):
        return observation


class PlainEnv(gym.Env):
    """A plain Gymnasium text env whose reward on its second turn is ``second_reward``, or whose step raises."""

    def __init__(self, second_reward=1.0):
        self.observation_space = self.action_space = Text(max_length=100)
        self.second_reward = second_reward

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return f"w{seed}", {}

    def step(self, action):
        self.turn += 1
        if self.turn == 2 and isinstance(self.second_reward, Exception):
            raise self.second_reward
        return action, (1.0 if self.turn == 1 else self.second_reward), False, self.turn >= 3, {}


@pytest.mark.parametrize(
    "second_reward, error",
    [
        (KeyError("board"), "KeyError: 'board'"),
        (math.nan, "ValueError: the env returned a non-finite reward nan on turn 2"),
        ("high", "ValueError: could not convert string to float: 'high'"),
    ],
)
def test_a_plain_env_that_raises_or_returns_a_bad_reward(tmp_path, second_reward, error):
    path = tmp_path / "run.jsonl"
    episodes = rollout(lambda: PlainEnv(second_reward), ScriptedPolicy(Echo), seeds=[1, 2], jsonl_path=path)
    for episode in episodes:
        assert episode.metadata["error"] == error and episode.metadata["error_source"] == "env"
        assert episode.turn_rewards == [1.0] and episode.env_id == "PlainEnv"
        assert [m["role"] for m in episode.messages] == ["user", "assistant", "user", "assistant"]
    assert load_jsonl(path) == episodes


def test_a_policy_error_is_marked_as_the_policys():
    class Down(Policy):
        async def agenerate(self, request):
            raise ConnectionError("server went away")

    episode = rollout(WORDLE, Down(), seeds=[0])[0]
    assert episode.metadata["error"] == "ConnectionError: server went away"
    assert episode.metadata["error_source"] == "policy"


class Interrupt(BaseException):
    """Stands in for Ctrl-C or a cancellation: not an ``Exception``."""


def test_an_interrupt_or_token_mismatch_in_the_env_still_stops_the_run():
    class Interrupted(WordleEnv):
        def step(self, action):
            raise Interrupt()

    with pytest.raises(Interrupt):
        rollout(Interrupted, load_scripted("wordle"), seeds=2)

    class Mismatch(WordleEnv):  # a wrapper that checks tokens itself and refuses them
        def step(self, action):
            raise TokenMismatchError("turn 1: prefix broken")

    with pytest.raises(TokenMismatchError):
        rollout(Mismatch, load_scripted("wordle"), seeds=2)


# -- floats that strict JSON cannot hold -----------------------------------------------


def test_an_episode_with_minus_infinity_logprobs_is_written_as_strict_json(tmp_path):
    episode = Episode(
        "x",
        token_ids=[1, 2, 3],
        mask=[0, 1, 1],
        logprobs=[0.0, -math.inf, -0.5],
        timing={"wall_s": math.inf},
        metadata={"score": math.nan, "nested": [{"v": -math.inf}]},
    )
    line = episode.to_json()
    data = _strict_loads(line)
    assert data["logprobs"] == [0.0, LOGPROB_FLOOR, -0.5]
    assert data["timing"] == {"wall_s": None} and data["metadata"] == {"score": None, "nested": [{"v": None}]}
    back = Episode.from_json(line)
    assert back.logprobs == [0.0, -9999.0, -0.5]
    assert episode.logprobs[1] == -math.inf  # writing does not change the episode in memory


def test_nan_logprobs_become_the_floor_too():
    line = Episode("x", token_ids=[1, 2], mask=[1, 1], logprobs=[math.nan, math.inf]).to_json()
    assert _strict_loads(line)["logprobs"] == [LOGPROB_FLOOR, LOGPROB_FLOOR]


def test_finite_episodes_are_written_as_before():
    episode = Episode("x", token_ids=[1, 2], mask=[0, 1], logprobs=[0.0, -12345.5], timing={"wall_s": 0.25})
    assert Episode.from_json(episode.to_json()) == episode  # a finite log-prob below the floor is kept as is


class MinusInfinity(Policy):
    """A token-exact policy that reports log-prob -inf for its forced last token."""

    returns_tokens = True

    async def agenerate(self, request):
        prompt = (request.prefix_token_ids or [1, 2]) + [3]
        return Generation(
            {"role": "assistant", "content": "crane"},
            prompt_token_ids=prompt,
            token_ids=[4, 5],
            logprobs=[-0.5, -math.inf],
        )


def test_a_rollout_with_minus_infinity_logprobs_loses_no_episode(tmp_path):
    path = tmp_path / "run.jsonl"
    episodes = rollout(WORDLE, MinusInfinity(), seeds=2, jsonl_path=path)
    assert all(LOGPROB_FLOOR in e.logprobs and "error" not in e.metadata for e in episodes)
    for line in path.read_text().splitlines():
        _strict_loads(line)
    written = load_jsonl(path)
    assert written == episodes  # the run's episodes hold what the file holds
    torch = pytest.importorskip("torch")
    from llmgym.trainers.batch import collate

    batch = collate(written)
    assert batch.has_generator_logp and bool(torch.isfinite(batch.generator_logp).all())


def test_an_llmenv_whose_episode_record_raises_after_a_sound_episode():
    class NoRecord(WordleEnv):
        def episode(self, env_id=None):
            raise AttributeError("'NoRecord' object has no attribute 'board'")

    episode = rollout(NoRecord, load_scripted("wordle"), seeds=[0])[0]
    assert episode.metadata["error"] == "AttributeError: 'NoRecord' object has no attribute 'board'"
    assert episode.metadata["error_source"] == "env" and episode.seed == 0
    assert episode.terminated and episode.total_reward > 0  # what the loop saw of the game is kept


def test_an_env_factory_failing_after_the_first_build_fails_that_episode_only(tmp_path):
    calls = []

    def factory():  # the second env (the second worker's) cannot be built; the third can
        calls.append(1)
        if len(calls) == 2:
            raise SandboxDied("no sandbox slot")
        return WordleEnv()

    class Yielding(Policy):  # gives the event loop a turn, so both workers start
        def __init__(self):
            self.inner = load_scripted("wordle")

        async def agenerate(self, request):
            await asyncio.sleep(0)
            return await self.inner.agenerate(request)

    path = tmp_path / "run.jsonl"
    episodes = rollout(factory, Yielding(), seeds=[0, 1, 2, 3], max_concurrency=2, jsonl_path=path)
    failed = [e for e in episodes if "error" in e.metadata]
    assert len(failed) == 1 and failed[0].metadata["error_source"] == "env"
    assert failed[0].metadata["error"] == "SandboxDied: no sandbox slot" and failed[0].env_id == "factory"
    assert failed[0].messages == [] and failed[0].turn_rewards == []
    assert all(e.terminated and e.total_reward > 0 for e in episodes if e is not failed[0])
    assert sorted(e.seed for e in load_jsonl(path)) == [0, 1, 2, 3] and len(calls) == 3


def test_an_env_that_can_never_be_built_raises_instead_of_failing_every_episode():
    with pytest.raises(TypeError, match="bogus"):
        rollout(WORDLE, load_scripted("wordle"), seeds=2, env_kwargs={"bogus": 1})


class CloseFails(WordleEnv):
    def close(self):
        raise SandboxDied("cleanup failed")


def test_a_failing_env_close_warns_and_keeps_the_episodes():
    with pytest.warns(RuntimeWarning, match="cleanup failed"):
        episodes = rollout(CloseFails, load_scripted("wordle"), seeds=2)
    assert len(episodes) == 2 and all(e.terminated for e in episodes)


def test_an_env_whose_actions_are_not_text_is_refused_up_front():
    # every episode used to fail on its first step (an AssertionError recorded as an env error)
    with pytest.raises(TypeError, match="CartPole-v1's action space is Discrete"):
        rollout("CartPole-v1", load_scripted("wordle"), seeds=2)
