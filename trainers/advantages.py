"""Group-relative advantages with turn-level credit assignment.

Holds :func:`compute_advantages` and its result :class:`Advantages`, plus
:func:`turn_spans_of` and :func:`group_signal` (which groups carry signal, what
the episode collector asks before the step's advantages are computed). The
formula (also in ``docs/training.md``), for the episodes ``i`` of one group
``g`` (same env seed), with ``R_i`` the episode's total reward and ``r_{i,t}``
its reward on turn ``t``::

    A_i        = (R_i - mean_{j in g} R_j) / (s_g + eps)
    A_{i,t}    = (r_{i,t} - mean_{j in g_t} r_{j,t}) / (s_{g,t} + eps)
    adv(token) = A_i + lambda * A_{i,t}      for the tokens the policy generated on turn t

``g_t`` is the set of the group's episodes that reached turn ``t``. The scale
``s`` is the sample standard deviation (``ddof=1``, as TRL) of the same
values in the group (``scale_rewards="group"``), of the whole batch's values
(``"batch"``: all episodes, or all episodes that reached turn ``t``); with
``"none"`` (Dr. GRPO) the centred values are not divided at all. A turn
index only one episode of the group reached has ``A_{i,t} = 0``. With ``lambda = 0`` this is plain GRPO; for single-turn
envs ``A_{i,1} = A_i``, so the advantage is ``(1 + lambda) * A_i``.

``estimator="rebn"`` is the other estimator (GEM's return batch normalisation,
arXiv 2510.01051): no groups and no outcome term; each turn's tokens get the
discounted return from that turn on, normalised over every turn of the batch::

    G_{i,t}    = sum_{k >= t} gamma^(k - t) r_{i,k}
    adv(token) = (G_{i,t} - mean_batch G) / (std_batch G + eps)   for the tokens of turn t

A turn is credited with what follows it and nothing before it, which the group
baseline cannot do once episodes of one seed diverge.

A group whose episodes all have the same total reward and (when
``lambda != 0``) the same reward on every turn carries no signal: its
episodes are left out of the loss and counted in ``zero_signal_groups``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from llmgym.episode import Episode

__all__ = [
    "Advantages",
    "compute_advantages",
    "discounted_returns",
    "ESTIMATORS",
    "cut_short",
    "group_key",
    "group_signal",
    "merge_advantage_stats",
    "turn_spans_of",
]


#: The advantage estimators :func:`compute_advantages` knows (see the module docstring).
ESTIMATORS = ("grpo", "rebn")


@dataclass
class Advantages:
    """Advantages of a batch of episodes.

    Attributes:
        token_advantages: per episode, one value per token of ``token_ids``
            (0 where ``mask`` is 0).
        outcome: per episode, the outcome advantage ``A_i``.
        turn: per episode, the turn advantages ``A_{i,t}``, one per turn.
        keep: per episode, whether it enters the loss (its group has signal
            and it is not masked as :func:`cut_short`).
        groups: how many groups the batch holds.
        zero_signal_groups: how many of them carry no signal.
        stats: summary numbers for logging.
    """

    token_advantages: list[np.ndarray]
    outcome: np.ndarray
    turn: list[np.ndarray]
    keep: list[bool]
    groups: int
    zero_signal_groups: int
    stats: dict[str, float] = field(default_factory=dict)
    stat_sums: list[float] = field(default_factory=list)  # what :func:`merge_advantage_stats` adds up across ranks


def turn_spans_of(episode: Episode) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans of each turn's generated tokens.

    ``episode.turn_spans`` when recorded, else the runs of ``mask == 1``.

    Example:
        >>> turn_spans_of(Episode("x", token_ids=[5, 6, 7, 8, 9, 10], mask=[0, 1, 1, 0, 1, 0]))
        [(1, 3), (4, 5)]
    """
    if episode.turn_spans:
        return [tuple(span) for span in episode.turn_spans]
    spans, start = [], None
    for index, bit in enumerate([*episode.mask, 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            spans.append((start, index))
            start = None
    return spans


def cut_short(episode: Episode) -> bool:
    """Whether ``mask_truncated`` leaves ``episode`` out of the loss (DAPO's overlong filtering).

    True when the env truncated it, or when its last reply was cut at ``max_new_tokens``
    (finish reason ``"length"``): for a single-turn env the latter is the only way an
    episode runs over.

    Example:
        >>> cut_short(Episode("x", metadata={"finish_reasons": ["stop", "length"]}))
        True
        >>> cut_short(Episode("x", metadata={"finish_reasons": ["length", "stop"]}))
        False
    """
    reasons = episode.metadata.get("finish_reasons") or []
    return bool(episode.truncated) or (bool(reasons) and reasons[-1] == "length")


def group_signal(episodes: list[Episode], turn_lambda: float = 1.0) -> dict[object, bool]:
    """Per group (keyed by :func:`group_key`), whether it carries signal.

    The same test :func:`compute_advantages` leaves groups out of the loss by: their
    total rewards differ, or (with ``turn_lambda != 0``) their rewards on some turn do.

    Example:
        >>> eps = [Episode("x", group=0, turn_rewards=[1.0]), Episode("x", group=0, turn_rewards=[0.0]),
        ...        Episode("x", group=1, turn_rewards=[1.0]), Episode("x", group=1, turn_rewards=[1.0])]
        >>> group_signal(eps, turn_lambda=0.0)
        {0: True, 1: False}
    """
    totals = np.array([e.total_reward for e in episodes], dtype=np.float64)
    return {key: _has_signal(episodes, indices, totals, turn_lambda) for key, indices in _groups_of(episodes).items()}


def compute_advantages(
    episodes: list[Episode],
    scale_rewards: str = "group",
    turn_lambda: float = 1.0,
    mask_truncated: bool = False,
    eps: float = 1e-4,
    batch_rewards: list[list[float]] | None = None,
    estimator: str = "grpo",
    gamma: float = 1.0,
) -> Advantages:
    """Outcome plus turn-level advantages for every token of every episode.

    Args:
        episodes: the batch; ``episode.group`` says which episodes share a seed
            (``None`` groups by ``(env_id, seed)``). Each needs ``token_ids``
            and ``mask`` from a token-returning policy.
        scale_rewards: ``"group"``, ``"batch"`` or ``"none"`` (see the module docstring).
        turn_lambda: weight of the turn-level advantage.
        mask_truncated: leave episodes the env truncated, or whose last reply was cut at
            ``max_new_tokens`` (:func:`cut_short`), out of the loss.
        eps: added to the scale before dividing.
        batch_rewards: the turn rewards of every episode of the whole batch, for
            ``scale_rewards="batch"`` when ``episodes`` are only a share of it (one
            rank's under data parallelism); ``None``: the batch is ``episodes``.
        estimator: ``"grpo"`` (the formula above) or ``"rebn"`` (discounted returns normalised over the batch;
            ``scale_rewards`` and ``turn_lambda`` do not apply, and every group is kept).
        gamma: the discount of ``"rebn"``'s returns.

    Returns:
        The advantages, which episodes to keep, and counts for logging.

    Raises:
        ValueError: an episode has no tokens, a mask of the wrong length, or
            (with ``turn_lambda != 0``) a different number of turn spans than turn rewards.

    Example:
        >>> def ep(group, rewards):
        ...     return Episode("x", group=group, turn_rewards=rewards,
        ...                    token_ids=[1, 2, 3], mask=[0, 1, 1], turn_spans=[(1, 3)])
        >>> adv = compute_advantages([ep(0, [1.0]), ep(0, [0.0]), ep(1, [1.0]), ep(1, [1.0])],
        ...                          turn_lambda=0.0)
        >>> [round(float(a), 3) for a in adv.outcome], adv.keep, adv.zero_signal_groups
        ([0.707, -0.707, 0.0, 0.0], [True, True, False, False], 1)
    """
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if estimator == "rebn":
        return _return_advantages(episodes, batch_rewards, gamma, mask_truncated, eps)
    spans = _turn_spans_checked(episodes, turn_lambda)
    members = _groups_of(episodes)

    # Group rewards: each episode's total R_i, and the whole batch's spread for scale_rewards="batch"
    totals = np.array([e.total_reward for e in episodes], dtype=np.float64)  # (episodes,)
    max_turns = max((e.num_turns for e in episodes), default=0)
    batch = [list(e.turn_rewards) for e in episodes] if batch_rewards is None else [list(r) for r in batch_rewards]
    batch_std, turn_batch_std = _batch_stds(batch, max_turns)

    # Group-relative advantages: the outcome A_i and the turn-level credit A_{i,t}
    outcome = _outcome_advantages(totals, members, scale_rewards, batch_std, eps)
    turn = _turn_advantages(episodes, members, scale_rewards, turn_batch_std, eps)

    # A group whose rewards all agree carries no signal: its advantages are zeroed and it leaves the loss
    keep = [True] * len(episodes)
    zero_signal = 0
    for indices in members.values():
        if not _has_signal(episodes, indices, totals, turn_lambda):
            zero_signal += 1
            outcome[indices] = 0.0
            for i in indices:
                turn[i][:] = 0.0
                keep[i] = False

    # Token advantages A_i + lambda * A_{i,t}; with mask_truncated, cut-short episodes leave the loss too
    token_advantages = [
        _token_advantages(episode, outcome[i], turn[i], spans[i], turn_lambda) for i, episode in enumerate(episodes)
    ]
    if mask_truncated:
        keep = [k and not cut_short(episode) for k, episode in zip(keep, episodes)]

    sums = _stat_sums(token_advantages, episodes, keep, outcome, len(members), zero_signal)
    return Advantages(
        token_advantages, outcome, turn, keep, len(members), zero_signal, merge_advantage_stats([sums]), sums
    )


def discounted_returns(rewards: list[float], gamma: float) -> np.ndarray:
    """``G_t = sum_{k >= t} gamma^(k - t) r_k`` for every turn ``t``; shape (turns,).

    Example:
        >>> discounted_returns([0.0, 0.5, 1.0], 0.5).tolist()
        [0.5, 1.0, 1.0]
    """
    returns = np.zeros(len(rewards))
    following = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        following = rewards[t] + gamma * following
        returns[t] = following
    return returns


def _return_advantages(
    episodes: list[Episode], batch_rewards: list[list[float]] | None, gamma: float, mask_truncated: bool, eps: float
) -> Advantages:
    """ReBN: each turn's discounted return, centred and scaled by the mean and std of the batch's turn returns."""
    spans = _turn_spans_checked(episodes, turn_lambda=1.0)  # one span per turn reward: returns are per turn
    batch = [e.turn_rewards for e in episodes] if batch_rewards is None else batch_rewards
    pooled = np.concatenate([discounted_returns(list(r), gamma) for r in batch] or [np.zeros(0)])
    mean, std = (float(pooled.mean()), _std(list(pooled))) if pooled.size else (0.0, 0.0)
    turn = [(discounted_returns(list(e.turn_rewards), gamma) - mean) / (std + eps) for e in episodes]
    outcome = np.zeros(len(episodes))
    token_advantages = [_token_advantages(e, 0.0, turn[i], spans[i], 1.0) for i, e in enumerate(episodes)]
    keep = [not (mask_truncated and cut_short(e)) for e in episodes]
    groups = len(_groups_of(episodes))
    sums = _stat_sums(token_advantages, episodes, keep, outcome, groups, 0)
    return Advantages(token_advantages, outcome, turn, keep, groups, 0, merge_advantage_stats([sums]), sums)


def _turn_spans_checked(episodes: list[Episode], turn_lambda: float) -> list[list[tuple[int, int]]]:
    """Every episode's turn spans (:func:`turn_spans_of`), after checking it can be trained on.

    Raises:
        ValueError: an episode has no tokens, a mask of the wrong length, or (with
            ``turn_lambda != 0``) a different number of turn spans than turn rewards.
    """
    spans = []
    for index, episode in enumerate(episodes):
        if not episode.token_ids:
            raise ValueError(
                f"episode {index} (seed {episode.seed}) has no token_ids: generate with a policy that "
                "returns tokens (returns_tokens=True), e.g. TransformersPolicy"
            )
        if len(episode.mask) != len(episode.token_ids):
            raise ValueError(
                f"episode {index}: mask has {len(episode.mask)} entries for {len(episode.token_ids)} tokens"
            )
        episode_spans = turn_spans_of(episode)
        if turn_lambda != 0 and len(episode_spans) != len(episode.turn_rewards):
            raise ValueError(
                f"episode {index}: {len(episode_spans)} turn spans but {len(episode.turn_rewards)} turn rewards; "
                "turn-level credit needs one span per turn (or set turn_lambda=0)"
            )
        spans.append(episode_spans)
    return spans


def group_key(episode: Episode) -> object:
    """The group an episode belongs to: ``episode.group``, else ``(env_id, seed)``."""
    return episode.group if episode.group is not None else (episode.env_id, episode.seed)


def _groups_of(episodes: list[Episode]) -> dict[object, list[int]]:
    """The indices of the episodes of each group, keyed by :func:`group_key`."""
    members: dict[object, list[int]] = defaultdict(list)
    for index, episode in enumerate(episodes):
        members[group_key(episode)].append(index)
    return members


def _batch_stds(turn_rewards: list[list[float]], max_turns: int) -> tuple[float, list[float]]:
    """The whole batch's std of total rewards, and per turn ``t`` of the rewards of the episodes that reached it."""
    total_std = _std([float(sum(rewards)) for rewards in turn_rewards])
    turn_stds = [_std([rewards[t] for rewards in turn_rewards if len(rewards) > t]) for t in range(max_turns)]
    return total_std, turn_stds


def _std(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _outcome_advantages(
    totals: np.ndarray, members: dict[object, list[int]], scale_rewards: str, batch_std: float, eps: float
) -> np.ndarray:
    """``A_i``: each episode's total reward, centred on its group's mean and scaled."""
    outcome = np.zeros(len(totals))  # (episodes,)
    for indices in members.values():
        values = totals[indices]
        outcome[indices] = (values - values.mean()) / _scale(values, scale_rewards, batch_std, eps)
    return outcome


def _turn_advantages(
    episodes: list[Episode],
    members: dict[object, list[int]],
    scale_rewards: str,
    turn_batch_std: list[float],
    eps: float,
) -> list[np.ndarray]:
    """``A_{i,t}``: each turn's reward, centred on the mean of the group's episodes that reached that turn and scaled.

    A turn only one episode of the group reached keeps 0.
    """
    turn = [np.zeros(e.num_turns) for e in episodes]  # per episode: (num_turns,)
    for indices in members.values():
        for t, batch_std in enumerate(turn_batch_std):
            reached, rewards = _reached(episodes, indices, t)
            if len(reached) < 2:
                continue
            scale = _scale(rewards, scale_rewards, batch_std, eps)
            for i, value in zip(reached, (rewards - rewards.mean()) / scale):
                turn[i][t] = value
    return turn


def _reached(episodes: list[Episode], indices: list[int], t: int) -> tuple[list[int], np.ndarray]:
    """The episodes among ``indices`` that reached turn ``t``, and their rewards on it."""
    reached = [i for i in indices if episodes[i].num_turns > t]
    return reached, np.array([episodes[i].turn_rewards[t] for i in reached])


def _scale(values: np.ndarray, mode: str, batch_std: float, eps: float) -> float:
    """The divisor of the centred values: ``std + eps``, or exactly 1 for ``"none"``."""
    if mode == "none":
        return 1.0
    if mode == "batch":
        return batch_std + eps
    return (float(values.std(ddof=1)) if len(values) > 1 else 0.0) + eps


def _has_signal(episodes: list[Episode], indices: list[int], totals: np.ndarray, turn_lambda: float) -> bool:
    """Whether a group's total rewards differ, or (with ``turn_lambda != 0``) its rewards on some turn do."""
    if np.ptp(totals[indices]) > 1e-12:
        return True
    if turn_lambda == 0:
        return False
    for t in range(max(episodes[i].num_turns for i in indices)):
        reached, rewards = _reached(episodes, indices, t)
        if len(reached) >= 2 and np.ptp(rewards) > 1e-12:
            return True
    return False


def _token_advantages(
    episode: Episode, outcome: float, turn: np.ndarray, spans: list[tuple[int, int]], turn_lambda: float
) -> np.ndarray:
    """``A_i + lambda * A_{i,t}`` on the tokens the policy generated on turn ``t``, 0 elsewhere; shape (tokens,)."""
    mask = np.asarray(episode.mask, dtype=np.float64)
    values = mask * outcome
    for t, (start, end) in enumerate(spans):
        if t < len(turn):
            values[start:end] += turn_lambda * turn[t] * mask[start:end]
    return values


def _stat_sums(
    token_advantages: list[np.ndarray],
    episodes: list[Episode],
    keep: list[bool],
    outcome: np.ndarray,
    groups: int,
    zero_signal: int,
) -> list[float]:
    """The sums :func:`merge_advantage_stats` turns into logged statistics, over the kept episodes' generated tokens."""
    kept = [a[np.asarray(e.mask, dtype=bool)] for a, e, k in zip(token_advantages, episodes, keep) if k]
    flat = np.concatenate(kept) if kept else np.zeros(0)
    return [
        float(flat.size),
        float(flat.sum()),
        float(np.square(flat).sum()),
        float(np.abs(flat).max()) if flat.size else 0.0,
        float(np.abs(outcome).sum()),
        float(len(outcome)),
        float(sum(keep)),
        float(groups),
        float(zero_signal),
    ]


def merge_advantage_stats(parts: list[list[float]]) -> dict[str, float]:
    """The logged advantage statistics of several batches' :attr:`Advantages.stat_sums` together.

    Data-parallel ranks each hold whole groups: merging every rank's sums gives the
    statistics of the global batch (one rank's alone would describe only its share).
    """
    tokens, total, squares, abs_max, outcome_abs, episodes, kept, groups, zero_signal = (
        [part[i] for part in parts] for i in range(9)
    )
    count = sum(tokens)
    mean = sum(total) / count if count else 0.0
    return {
        "advantage/mean": mean,
        "advantage/std": float(np.sqrt(max(sum(squares) / count - mean * mean, 0.0))) if count else 0.0,
        "advantage/abs_max": max(abs_max, default=0.0),
        "advantage/outcome_abs_mean": sum(outcome_abs) / sum(episodes) if sum(episodes) else 0.0,
        "episodes/kept": sum(kept),
        "groups/zero_signal_fraction": sum(zero_signal) / max(sum(groups), 1.0),
    }
