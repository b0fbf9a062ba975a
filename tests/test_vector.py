"""Tests for llmgym.vector: sync and async vector envs match single envs exactly; SAME_STEP wastes no action."""

from __future__ import annotations

import copy
import multiprocessing as mp
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils.shared_memory import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import llmgym
from llmgym import LLMEnv, Text
from llmgym.envs.wordle.solver import WordleSolver
from llmgym.vector import SharedTextBatch


class ParrotEnv(LLMEnv):
    """Repeats the action back (unicode and all), so observations test the transport."""

    def setup(self, options: dict[str, Any] | None) -> str:
        return f"Say something 🙂 (episode seed {int(self.np_random.integers(1000))})"

    def on_text(self, text: str) -> str:
        return f"you said: {text}"


llmgym.register("llmgym-test/Parrot-v0", ParrotEnv, kwargs={"max_turns": 3})

ACTIONS = ["héllo 🙂", "", "中文 \x00 control", "x" * 5000, "\ud800 lone surrogate"]


def single_env_transitions(num_envs: int, seed: int) -> list[tuple]:
    envs = [gym.make("llmgym-test/Parrot-v0") for _ in range(num_envs)]
    out = [tuple(env.reset(seed=seed + i)[0] for i, env in enumerate(envs))]
    for step in range(2):
        out.append(tuple(env.step(ACTIONS[(i + step) % len(ACTIONS)])[0] for i, env in enumerate(envs)))
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda n: llmgym.make_vec("llmgym-test/Parrot-v0", n, "sync"),
        lambda n: llmgym.make_vec("llmgym-test/Parrot-v0", n, "async"),
        # plain Gymnasium defaults: async with shared_memory=True goes through llmgym's Text codec
        lambda n: gym.make_vec("llmgym-test/Parrot-v0", n, vectorization_mode="async"),
    ],
    ids=["sync", "async", "async-shared-memory"],
)
def test_vector_observations_equal_single_envs(make):
    num_envs = len(ACTIONS)
    envs = make(num_envs)
    try:
        got = [tuple(envs.reset(seed=10)[0])]
        for step in range(2):
            actions = [ACTIONS[(i + step) % len(ACTIONS)] for i in range(num_envs)]
            got.append(tuple(envs.step(actions)[0]))
    finally:
        envs.close()
    assert got == single_env_transitions(num_envs, 10)
    assert all(type(obs) is str for batch in got for obs in batch)


def played_turns(autoreset_mode: AutoresetMode, num_envs: int = 4, steps: int = 30) -> int:
    """Turns actually played by the sub-envs when the solver acts on every vector step."""
    envs = llmgym.make_vec("llmgym/Wordle-v0", num_envs, autoreset_mode=autoreset_mode)
    solvers = [WordleSolver() for _ in range(num_envs)]
    obs, info = envs.reset(seed=0)
    finished_turns = 0
    for _ in range(steps):
        obs, rewards, terminated, truncated, info = envs.step([s.act(o) for s, o in zip(solvers, obs)])
        if autoreset_mode == AutoresetMode.SAME_STEP and "final_info" in info:
            finished_turns += sum(int(t) for t, done in zip(info["final_info"]["turn"], info["_final_info"]) if done)
        elif autoreset_mode == AutoresetMode.NEXT_STEP:
            finished_turns += sum(int(t) for t, done in zip(info["turn"], terminated | truncated) if done)
    current = sum(int(t) for t in info["turn"]) if autoreset_mode == AutoresetMode.SAME_STEP else 0
    if autoreset_mode == AutoresetMode.NEXT_STEP:
        current = sum(int(t) for t, done in zip(info["turn"], terminated | truncated) if not done)
    envs.close()
    return finished_turns + current


def test_same_step_autoreset_plays_every_action():
    assert played_turns(AutoresetMode.SAME_STEP) == 4 * 30


def test_next_step_autoreset_wastes_one_action_per_episode():
    played = played_turns(AutoresetMode.NEXT_STEP)
    assert 4 * 30 * 0.6 < played < 4 * 30  # each finished episode cost one thrown-away action


def test_same_step_reports_the_final_observation():
    envs = llmgym.make_vec("llmgym/Wordle-v0", 2)
    obs, _ = envs.reset(seed=0, options={"answer": "crane"})
    obs, rewards, terminated, _, info = envs.step(["crane", "slate"])
    assert terminated.tolist() == [True, False]
    assert obs[0].startswith("Guess the five-letter word")  # already the next episode
    assert "Solved in 1 guess!" in info["final_obs"][0]
    assert rewards[0] > 1.0
    envs.close()


def test_make_vec_refuses_unknown_modes():
    with pytest.raises(ValueError, match="vectorization_mode"):
        llmgym.make_vec("llmgym/Wordle-v0", 2, "vector_entry_point")


def test_shared_text_memory_is_a_live_view():
    space = Text(max_length=32)
    memory = create_shared_memory(space, n=2, ctx=mp)
    view = read_from_shared_memory(space, memory, n=2)
    assert isinstance(view, SharedTextBatch)
    write_to_shared_memory(space, 0, "héllo 🙂", memory)
    write_to_shared_memory(space, 1, "\ud800", memory)
    assert view == ("héllo 🙂", "\ud800") and view[0] == "héllo 🙂"
    snapshot = copy.deepcopy(view)
    write_to_shared_memory(space, 0, "", memory)
    assert view[0] == "" and snapshot == ("héllo 🙂", "\ud800") and type(snapshot) is tuple
    with pytest.raises(ValueError, match="does not contain"):
        write_to_shared_memory(space, 0, "x" * 33, memory)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_wrong_number_of_actions_plays_none_and_leaves_the_envs_in_step(mode):
    envs = llmgym.make_vec("llmgym/Wordle-v0", 2, mode)
    try:
        envs.reset(seed=0)
        for bad in (["crane"], ["crane", "hello", "extra"], "hello"):
            with pytest.raises(ValueError, match="one per sub-environment"):
                envs.step(bad)
        first = envs.step(["crane", "hello"])[0]
        second = envs.step(["crane", "hello"])[0]
    finally:
        envs.close()
    assert [o.splitlines()[-1] for o in first] == ["5 guesses left."] * 2
    assert [o.splitlines()[-1] for o in second] == ["4 guesses left."] * 2
