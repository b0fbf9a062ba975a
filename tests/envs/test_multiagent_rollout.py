"""Multi-agent rollouts (envs/multiagent/rollout.py): a failing player and what the match and win matrix record."""

from __future__ import annotations

import asyncio

from llmgym.envs.multiagent import prisoners_dilemma, tictactoe
from llmgym.envs.multiagent.rollout import aplay_match, win_matrix
from llmgym.policy import Generation, Policy, PolicyRequest


class _Broken(Policy):
    name = "broken"

    async def agenerate(self, request: PolicyRequest) -> Generation:
        raise ConnectionError("server went away")


class _SlowCooperator(Policy):
    name = "slow"

    async def agenerate(self, request: PolicyRequest) -> Generation:
        await asyncio.sleep(0.1)
        return Generation({"role": "assistant", "content": "C"})


def test_parallel_policy_failure_leaves_no_move_running_into_the_finished_episodes():
    async def match():
        games = await aplay_match(
            prisoners_dilemma.parallel_env, {"player_0": _Broken(), "player_1": _SlowCooperator()}, seeds=[0]
        )
        episode = games[0]["player_1"]
        before = (list(episode.messages), list(episode.turn_rewards))
        await asyncio.sleep(0.3)  # the slow seat's move used to land in the returned episode now
        return episode, before

    episode, (messages, turn_rewards) = asyncio.run(match())
    assert episode.messages == messages and episode.turn_rewards == turn_rewards
    assert "server went away" in episode.metadata["error"]


class _IllegalThenBroken(Policy):
    """One illegal move (-0.1 in its first game), then a dead server."""

    name = "flaky"

    def __init__(self):
        self.calls = 0

    async def agenerate(self, request: PolicyRequest) -> Generation:
        self.calls += 1
        if self.calls == 1:
            return Generation({"role": "assistant", "content": "no cell here"})
        raise ConnectionError("server went away")


def test_win_matrix_mean_reward_counts_only_finished_games():
    matrix, games = win_matrix(
        tictactoe.env,
        {"minimax": tictactoe.MinimaxPlayer(0), "flaky": _IllegalThenBroken()},
        seeds=[0],
        max_concurrency=1,
    )
    assert all(e.metadata["outcome"] == "unfinished" for g in games for e in g.values())
    assert sum(matrix.counts["flaky"]["minimax"].values()) == 0
    assert matrix.mean_reward["flaky"]["minimax"] == 0.0  # was -0.1: a partial reward over zero finished games
