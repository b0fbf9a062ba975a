"""Summary statistics of a set of episodes: what ``llmgym eval`` reports.

Holds :func:`summarize` and :func:`mean_ci` (mean with a Student-t 95%
confidence interval, numpy only). Episodes recorded as failed (a policy
error, ``metadata["error"]``) are counted but left out of every statistic.

Success rule: when the environment has a ``solved`` reward component, an
episode succeeds if it terminated and its final turn's ``solved`` value is
positive; otherwise an episode succeeds if its total reward is positive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmgym.episode import Episode

__all__ = ["summarize", "mean_ci", "is_success"]

# Student-t 0.975 quantiles for 1..30 degrees of freedom (scipy.stats.t.ppf, 6 decimals).
_T975 = (
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.13145,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.04523,
    2.042272,
)
_Z975 = 1.959963984540054


def _t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df <= len(_T975):
        return _T975[df - 1]
    # Cornish-Fisher expansion (Abramowitz & Stegun 26.7.5); error < 1e-5 for df > 30.
    z, n = _Z975, float(df)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / n + g2 / n**2 + g3 / n**3 + g4 / n**4


def mean_ci(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, sample standard deviation and the half-width of a 95% t-interval.

    ``None`` stands for undefined (no values; no interval from one value), so
    the result stays valid JSON.

    Example:
        >>> stats = mean_ci([1.0, 2.0, 3.0])
        >>> stats["mean"], stats["std"], round(stats["ci95"], 4)
        (2.0, 1.0, 2.4841)
    """
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return {"mean": None, "std": None, "ci95": None, "n": 0}
    mean = float(array.mean())
    if array.size == 1:
        return {"mean": mean, "std": 0.0, "ci95": None, "n": 1}
    std = float(array.std(ddof=1))
    return {"mean": mean, "std": std, "ci95": _t975(array.size - 1) * std / math.sqrt(array.size), "n": int(array.size)}


def _has_solved(episodes: Sequence[Episode]) -> bool:
    return any("solved" in components for e in episodes for components in e.reward_components)


def is_success(episode: Episode, solved_rule: bool) -> bool:
    """Whether ``episode`` succeeded (see the module docstring for the rule)."""
    if solved_rule:
        final = episode.reward_components[-1] if episode.reward_components else {}
        return bool(episode.terminated and final.get("solved", 0.0) > 0)
    return episode.total_reward > 0


def _tool_calls(episode: Episode) -> tuple[int, int]:
    """(tool results, tool results that report an error) in the episode's chat."""
    results = [m for m in episode.messages if m.get("role") == "tool"]
    errors = sum(1 for m in results if str(m.get("content") or "").startswith("Error"))
    return len(results), errors


def _generated(episode: Episode) -> int | None:
    """Generated tokens of an episode: the rollout's count, else the mask, else unknown."""
    count = episode.metadata.get("generated_tokens")
    if count is not None:
        return int(count)
    return sum(episode.mask) if episode.mask else None


def summarize(episodes: Sequence[Episode]) -> dict[str, Any]:
    """The headline numbers of a run.

    Returns a JSON-ready dict: ``episodes`` (all), ``failed`` (policy errors,
    excluded below), ``reward`` (mean, std, ``ci95`` half-width, n),
    ``success_rate`` and ``success_rule``, mean ``turns``, mean
    ``generated_tokens`` (over episodes that report them) and ``thinking_tokens`` per episode, ``components``
    (mean per-episode total of each reward component), ``tool_calls`` and
    ``tool_error_rate`` (tool results starting with ``Error``, over all tool
    results), ``terminated_rate``/``truncated_rate`` and ``timing`` (summed
    env and policy seconds, mean episode wall seconds). Undefined means
    (no completed episode) are ``None``.

    Example:
        >>> eps = [
        ...     Episode("x", seed=0, turn_rewards=[0.0, 1.0], reward_components=[{}, {"solved": 1.0}], terminated=True),
        ...     Episode("x", seed=1, turn_rewards=[0.0], reward_components=[{"solved": 0.0}], truncated=True),
        ... ]
        >>> s = summarize(eps)
        >>> s["success_rate"], s["reward"]["mean"], s["components"], s["success_rule"]
        (0.5, 0.5, {'solved': 0.5}, 'solved')
    """
    ok = [e for e in episodes if "error" not in e.metadata]
    solved_rule = _has_solved(ok)
    names = sorted({name for e in ok for components in e.reward_components for name in components})
    totals = [e.component_totals() for e in ok]
    calls = [_tool_calls(e) for e in ok]
    n_calls = sum(c for c, _ in calls)
    n = len(ok)

    def mean(values: list[float]) -> float | None:
        return float(np.mean(values)) if values else None

    return {
        "episodes": len(episodes),
        "failed": len(episodes) - n,
        "reward": mean_ci([e.total_reward for e in ok]),
        "success_rate": mean([float(is_success(e, solved_rule)) for e in ok]),
        "success_rule": "solved" if solved_rule else "reward>0",
        "turns": mean([float(e.num_turns) for e in ok]),
        "generated_tokens": mean([float(t) for t in (_generated(e) for e in ok) if t is not None]),
        "thinking_tokens": mean([float(e.metadata.get("thinking_tokens", 0)) for e in ok]),
        "components": {name: mean([t.get(name, 0.0) for t in totals]) for name in names},
        "tool_calls": n_calls,
        "tool_error_rate": sum(e for _, e in calls) / n_calls if n_calls else 0.0,
        "terminated_rate": mean([float(e.terminated) for e in ok]),
        "truncated_rate": mean([float(e.truncated) for e in ok]),
        "timing": {
            "env_s": float(sum(e.timing.get("env_s", 0.0) for e in episodes)),
            "policy_s": float(sum(e.timing.get("policy_s", 0.0) for e in episodes)),
            "episode_wall_s": mean([e.timing.get("wall_s", 0.0) for e in ok]),
        },
    }
