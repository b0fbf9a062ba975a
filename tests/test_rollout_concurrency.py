"""The rollout engine respects a policy's own concurrency limit."""

from __future__ import annotations

import asyncio

import pytest

from llmgym import rollout
from llmgym.policy import Generation, Policy, PolicyRequest


class SlowCrane(Policy):
    """Guesses 'crane' after a short wait, recording how many requests overlap."""

    def __init__(self, limit):
        self.max_concurrency = limit
        self.in_flight = self.peak = 0

    async def agenerate(self, request: PolicyRequest) -> Generation:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return Generation({"role": "assistant", "content": "crane"})


@pytest.mark.parametrize("limit, expected_peak", [(1, 1), (None, 4)])
def test_policy_limit_caps_episodes_in_flight(limit, expected_peak):
    policy = SlowCrane(limit)
    episodes = rollout("llmgym/Wordle-v0", policy, seeds=4, max_concurrency=8)
    assert len(episodes) == 4 and policy.peak == expected_peak
