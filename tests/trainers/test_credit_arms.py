"""The three credit arms of benchmarks/turn_credit.py (the MT-GRPO paper's GRPO-OR, GRPO-MR and MT-GRPO) on one
group of Multiply-v0 episodes, against advantages computed by hand: a regression guard on the formulas.

The group (one question, three replies):

- ep1: ``<calc>`` finds the product (turn reward 0.5), then answers it (1.0);
- ep2: ``<calc>`` finds the product (0.5), then answers wrong (0.0);
- ep3: guesses at once, wrong (0.0), one turn.

Each generated reply is two tokens. ``scale_rewards="group"``: divide by the group's sample std (ddof=1) + 1e-4.
"""

from __future__ import annotations

import pytest

from llmgym.envs.multiply import MultiplyEnv
from llmgym.episode import Episode
from llmgym.trainers.advantages import compute_advantages

REPLIES = (
    ["<calc>347 * 89</calc>", "<answer>30883</answer>"],
    ["<calc>347 * 89</calc>", "<answer>30000</answer>"],
    ["<answer>12345</answer>"],
)


def group(turn_rewards: bool) -> list[Episode]:
    """The three episodes as the env scores them, with two prompt tokens and two generated tokens per turn."""
    episodes = []
    for replies in REPLIES:
        env = MultiplyEnv(turn_rewards=turn_rewards)
        env.reset(options={"a": 347, "b": 89})
        rewards = [env.step(reply)[1] for reply in replies]
        token_ids, mask, spans = [], [], []
        for _ in replies:
            token_ids += [1, 2, 3, 4]
            mask += [0, 0, 1, 1]
            spans.append((len(mask) - 2, len(mask)))
        episodes.append(Episode("x", seed=0, turn_rewards=rewards, token_ids=token_ids, mask=mask, turn_spans=spans))
    return episodes


def per_turn(advantages) -> list[list[float]]:
    """Each episode's advantage on each of its turns (both tokens of a turn carry the same value)."""
    return [[float(a[i]) for i in range(2, len(a), 4)] for a in advantages.token_advantages]


def test_the_rewards_each_arm_trains_on():
    assert [e.turn_rewards for e in group(turn_rewards=False)] == [[0.0, 1.0], [0.0, 0.0], [0.0]]
    assert [e.turn_rewards for e in group(turn_rewards=True)] == [[0.5, 1.0], [0.5, 0.0], [0.0]]


def test_grpo_or_outcome_alone():
    # totals 1, 0, 0: mean 1/3, std sqrt(1/3) = 0.57735
    got = per_turn(compute_advantages(group(turn_rewards=False), turn_lambda=0.0))
    expected = [[1.15450, 1.15450], [-0.57725, -0.57725], [-0.57725]]
    for row, want in zip(got, expected):
        assert row == pytest.approx(want, abs=1e-4)
    # the tool call that found the product is charged like the guess: the outcome cannot tell them apart
    assert got[1][0] == pytest.approx(got[2][0])


def test_grpo_mr_merged_turn_rewards():
    # totals 1.5, 0.5, 0: mean 2/3, deviations 5/6, -1/6, -2/3, std sqrt(7/12) = 0.76376
    got = per_turn(compute_advantages(group(turn_rewards=True), turn_lambda=0.0))
    expected = [[1.09095, 1.09095], [-0.21819, -0.21819], [-0.87276]]
    for row, want in zip(got, expected):
        assert row == pytest.approx(want, abs=1e-4)


def test_mt_grpo_turn_level_advantages():
    # A_i as GRPO-MR; turn 1 rewards 0.5, 0.5, 0 (std sqrt(1/12) = 0.28868): A_{i,1} = 0.57715, 0.57715, -1.15430;
    # turn 2 only ep1 and ep2 reached: 1, 0 (std 0.70711): A_{i,2} = 0.70701, -0.70701
    got = per_turn(compute_advantages(group(turn_rewards=True), turn_lambda=1.0))
    expected = [
        [1.09095 + 0.57715, 1.09095 + 0.70701],
        [-0.21819 + 0.57715, -0.21819 - 0.70701],
        [-0.87276 - 1.15430],
    ]
    for row, want in zip(got, expected):
        assert row == pytest.approx(want, abs=1e-4)
    # the successful tool call is now credited, and its wrong answer charged, each on its own turn
    assert got[1][0] > 0 > got[1][1]


def test_turn_lambda_scales_only_the_turn_term():
    episodes = group(turn_rewards=True)
    merged = per_turn(compute_advantages(episodes, turn_lambda=0.0))
    half = per_turn(compute_advantages(episodes, turn_lambda=0.5))
    full = per_turn(compute_advantages(episodes, turn_lambda=1.0))
    for m, h, f in zip(merged, half, full):
        assert h == pytest.approx([(a + b) / 2 for a, b in zip(m, f)], abs=1e-9)
