"""Advantages against hand-computed values: outcome, turn-level credit, scaling, zero-signal groups, masking."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmgym.episode import Episode
from llmgym.trainers import advantages as adv
from llmgym.trainers.advantages import compute_advantages, merge_advantage_stats, turn_spans_of

EPS = 1e-4


def two_turn(group: int, r1: float, r2: float | None, truncated: bool = False) -> Episode:
    """prompt(2) gen(2) env(1) gen(1): turn spans (2,4) and (5,6); one turn when r2 is None."""
    if r2 is None:
        return Episode(
            "x",
            group=group,
            turn_rewards=[r1],
            token_ids=[1, 2, 3, 4],
            mask=[0, 0, 1, 1],
            turn_spans=[(2, 4)],
            truncated=truncated,
        )
    return Episode(
        "x",
        group=group,
        turn_rewards=[r1, r2],
        token_ids=[1, 2, 3, 4, 5, 6],
        mask=[0, 0, 1, 1, 0, 1],
        turn_spans=[(2, 4), (5, 6)],
        truncated=truncated,
    )


def test_outcome_plus_turn_credit_hand_computed():
    episodes = [two_turn(0, 1.0, 2.0), two_turn(0, 0.0, 0.0), two_turn(0, 0.5, None)]
    adv = compute_advantages(episodes, scale_rewards="group", turn_lambda=0.5)
    totals = np.array([3.0, 0.0, 0.5])
    std = totals.std(ddof=1)
    outcome = (totals - totals.mean()) / (std + EPS)
    np.testing.assert_allclose(adv.outcome, outcome, rtol=1e-9)
    # turn 1: all three reached it
    t1 = np.array([1.0, 0.0, 0.5])
    a1 = (t1 - t1.mean()) / (t1.std(ddof=1) + EPS)
    # turn 2: only episodes 0 and 1 reached it
    t2 = np.array([2.0, 0.0])
    a2 = (t2 - t2.mean()) / (t2.std(ddof=1) + EPS)
    np.testing.assert_allclose(adv.turn[0], [a1[0], a2[0]])
    np.testing.assert_allclose(adv.turn[2], [a1[2]])
    expected0 = [0, 0, outcome[0] + 0.5 * a1[0], outcome[0] + 0.5 * a1[0], 0, outcome[0] + 0.5 * a2[0]]
    np.testing.assert_allclose(adv.token_advantages[0], expected0)
    expected2 = [0, 0, outcome[2] + 0.5 * a1[2], outcome[2] + 0.5 * a1[2]]
    np.testing.assert_allclose(adv.token_advantages[2], expected2)
    assert adv.keep == [True, True, True] and adv.zero_signal_groups == 0 and adv.groups == 1


def test_batch_and_none_scaling():
    episodes = [two_turn(0, 1.0, None), two_turn(0, 0.0, None), two_turn(1, 4.0, None), two_turn(1, 0.0, None)]
    none = compute_advantages(episodes, scale_rewards="none", turn_lambda=0.0)
    np.testing.assert_allclose(none.outcome, [0.5, -0.5, 2.0, -2.0])
    batch = compute_advantages(episodes, scale_rewards="batch", turn_lambda=0.0)
    std = np.std([1.0, 0.0, 4.0, 0.0], ddof=1)
    np.testing.assert_allclose(batch.outcome, np.array([0.5, -0.5, 2.0, -2.0]) / (std + EPS))
    group = compute_advantages(episodes, scale_rewards="group", turn_lambda=0.0)
    np.testing.assert_allclose(group.outcome[:2], group.outcome[2:], rtol=1e-3)  # scale-free within each group


def test_single_turn_lambda_scales_outcome():
    episodes = [two_turn(0, 1.0, None), two_turn(0, 0.0, None)]
    plain = compute_advantages(episodes, turn_lambda=0.0)
    credit = compute_advantages(episodes, turn_lambda=1.0)
    np.testing.assert_allclose(credit.token_advantages[0], 2 * plain.token_advantages[0])


def test_zero_signal_groups_are_skipped_and_counted():
    episodes = [two_turn(0, 1.0, 0.0), two_turn(0, 0.0, 1.0), two_turn(1, 0.3, None), two_turn(1, 0.3, None)]
    # group 0: equal totals but different turn rewards -> signal only with turn credit
    plain = compute_advantages(episodes, turn_lambda=0.0)
    assert plain.zero_signal_groups == 2 and plain.keep == [False] * 4
    assert all(not a.any() for a in plain.token_advantages)
    credit = compute_advantages(episodes, turn_lambda=1.0)
    assert credit.zero_signal_groups == 1 and credit.keep == [True, True, False, False]
    assert credit.token_advantages[0][2] > 0 > credit.token_advantages[0][5]
    assert credit.stats["groups/zero_signal_fraction"] == 0.5


def test_truncated_masked_but_counted_in_group():
    episodes = [two_turn(0, 1.0, None, truncated=True), two_turn(0, 0.0, None), two_turn(0, 0.0, None)]
    masked = compute_advantages(episodes, turn_lambda=0.0, mask_truncated=True)
    unmasked = compute_advantages(episodes, turn_lambda=0.0)
    assert masked.keep == [False, True, True] and unmasked.keep == [True, True, True]
    np.testing.assert_allclose(masked.outcome, unmasked.outcome)  # still in the group's statistics


def reply(group: int, reward: float, finish: str = "stop", seed: int | None = None) -> Episode:
    return Episode(
        "x",
        seed=group if seed is None else seed,
        group=group,
        turn_rewards=[reward],
        token_ids=[1, 2, 3],
        mask=[0, 1, 1],
        metadata={"finish_reasons": [finish]},
    )


def test_mask_truncated_leaves_out_replies_cut_at_max_new_tokens():
    """Regression: mask_truncated used to keep replies cut at max_new_tokens (it left out env truncations only)."""
    episodes = [reply(0, 1.0), reply(0, 0.0, "length"), reply(0, 0.5)]
    assert [adv.cut_short(e) for e in episodes] == [False, True, False]
    masked = adv.compute_advantages(episodes, turn_lambda=0.0, mask_truncated=True)
    assert masked.keep == [True, False, True]
    unmasked = adv.compute_advantages(episodes, turn_lambda=0.0)
    assert unmasked.keep == [True, True, True]
    # the cut reply still counts in its group's mean and std
    assert masked.outcome[0] == pytest.approx(unmasked.outcome[0])


def test_only_the_last_reply_decides_and_env_truncation_still_counts():
    earlier_cut = Episode("x", metadata={"finish_reasons": ["length", "stop"]})
    assert not adv.cut_short(earlier_cut)  # the episode went on after the cut reply
    assert adv.cut_short(Episode("x", truncated=True))
    assert not adv.cut_short(Episode("x"))


def test_groups_default_to_env_and_seed():
    a = Episode("x", seed=1, turn_rewards=[1.0], token_ids=[1, 2], mask=[0, 1])
    b = Episode("x", seed=1, turn_rewards=[0.0], token_ids=[1, 2], mask=[0, 1])
    c = Episode("x", seed=2, turn_rewards=[5.0], token_ids=[1, 2], mask=[0, 1])
    adv = compute_advantages([a, b, c], turn_lambda=0.0)
    assert adv.groups == 2 and adv.keep == [True, True, False]
    assert math.isclose(adv.outcome[0], -adv.outcome[1])


def test_bad_episodes_raise_clear_errors():
    with pytest.raises(ValueError, match="no token_ids"):
        compute_advantages([Episode("x", turn_rewards=[1.0])])
    with pytest.raises(ValueError, match="mask has"):
        compute_advantages([Episode("x", turn_rewards=[1.0], token_ids=[1, 2], mask=[1])])
    bad = Episode("x", turn_rewards=[1.0, 0.0], token_ids=[1, 2, 3], mask=[0, 1, 1], turn_spans=[(1, 3)])
    with pytest.raises(ValueError, match="turn spans"):
        compute_advantages([bad])
    compute_advantages([bad], turn_lambda=0.0)  # fine without turn credit
    with pytest.raises(ValueError, match="scale_rewards"):
        compute_advantages([two_turn(0, 1.0, None)], scale_rewards="rank")


def test_turn_spans_from_mask_runs():
    assert turn_spans_of(Episode("x", token_ids=[1, 2, 3], mask=[1, 1, 1])) == [(0, 3)]
    assert turn_spans_of(Episode("x", token_ids=[1, 2], mask=[0, 0])) == []


def test_stats_merged_across_ranks_equal_the_whole_batch():
    # data parallel: each rank holds whole groups; merging the ranks' sums must describe the global batch
    episodes = [
        two_turn(0, 1.0, 2.0),
        two_turn(0, 0.0, 0.0),
        two_turn(1, 0.3, None),
        two_turn(1, 0.3, None),
        two_turn(2, 5.0, None),
        two_turn(2, -1.0, None),
        two_turn(2, 0.0, None),
    ]
    whole = compute_advantages(episodes, turn_lambda=0.5)
    ranks = [compute_advantages(episodes[:4], turn_lambda=0.5), compute_advantages(episodes[4:], turn_lambda=0.5)]
    merged = merge_advantage_stats([r.stat_sums for r in ranks])
    assert merged.keys() == whole.stats.keys()
    for key, value in whole.stats.items():
        assert merged[key] == pytest.approx(value, abs=1e-9), key
    kept = np.concatenate(
        [a[np.asarray(e.mask, bool)] for a, e, k in zip(whole.token_advantages, episodes, whole.keep) if k]
    )
    assert whole.stats["advantage/std"] == pytest.approx(kept.std()) and whole.stats["episodes/kept"] == 5
    assert whole.stats["groups/zero_signal_fraction"] == pytest.approx(1 / 3)
    assert ranks[0].stats["episodes/kept"] == 2  # one rank alone sees only its share
    assert merge_advantage_stats([compute_advantages([]).stat_sums])["advantage/std"] == 0.0


def test_rebn_credits_each_turn_with_its_discounted_return_over_the_batch():
    """ReBN (GEM, arXiv 2510.01051): G_t = r_t + gamma G_{t+1}, normalised over every turn of the batch, no groups."""
    episodes = [two_turn(0, 1.0, 2.0), two_turn(0, 0.0, 0.0), two_turn(1, 0.5, None)]
    got = compute_advantages(episodes, estimator="rebn", gamma=0.5)
    returns = [[1.0 + 0.5 * 2.0, 2.0], [0.0, 0.0], [0.5]]
    pooled = np.concatenate(returns)
    mean, scale = pooled.mean(), pooled.std(ddof=1) + EPS
    for episode_adv, expected in zip(got.turn, returns):
        np.testing.assert_allclose(episode_adv, (np.array(expected) - mean) / scale, rtol=1e-9)
    # tokens: turn 1 is (2, 4), turn 2 is (5, 6); prompt and env tokens get nothing
    first = (np.array(returns[0]) - mean) / scale
    np.testing.assert_allclose(got.token_advantages[0], [0, 0, first[0], first[0], 0, first[1]], rtol=1e-9)
    assert got.keep == [True, True, True] and got.zero_signal_groups == 0
    np.testing.assert_allclose(got.outcome, 0.0)


def test_rebn_takes_the_batch_statistics_from_every_rank():
    episodes = [two_turn(0, 1.0, None), two_turn(0, 0.0, None)]
    everyone = [[1.0], [0.0], [3.0], [3.0]]
    got = compute_advantages(episodes, estimator="rebn", batch_rewards=everyone)
    pooled = np.array([1.0, 0.0, 3.0, 3.0])
    np.testing.assert_allclose(got.turn[0], (1.0 - pooled.mean()) / (pooled.std(ddof=1) + EPS), rtol=1e-9)


def test_unknown_estimator_is_a_clear_error():
    with pytest.raises(ValueError, match="estimator must be one of"):
        compute_advantages([two_turn(0, 1.0, None)], estimator="ppo")
    assert adv.discounted_returns([1.0, 1.0, 1.0], 1.0).tolist() == [3.0, 2.0, 1.0]
