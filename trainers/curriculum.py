"""A curriculum over an env's difficulty levels, driven by the measured solve rate.

Holds :class:`Curriculum`, :func:`check_curriculum` (its settings' checks) and
:func:`group_solve_rates`. The trainer makes its
envs with ``env_kwargs[kwarg] = level``; after every step it reports the solve
rate of each group it played (the fraction of the group's episodes whose total
reward reaches ``solve_threshold``), measured on the groups as first sampled,
before zero-signal groups are resampled (resampling drops all-solved groups and
would bias the rate down). Once ``window`` groups were played at the current
level, their mean solve rate decides:

- ``>= promote_at``: next level (the last level stays);
- ``< demote_at`` (when set): previous level (the first level stays);

and a change empties the window, so every decision is made on ``window`` fresh
groups of one level. The state is JSON-ready and goes into checkpoints.

Example:
    >>> curriculum = Curriculum("difficulty", [1, 2, 3], promote_at=0.75, window=2)
    >>> curriculum.env_kwargs({"max_turns": 4})
    {'max_turns': 4, 'difficulty': 1}
    >>> curriculum.update([1.0])["curriculum/level"]  # one group: the window is not full yet
    1
    >>> curriculum.update([0.5])["curriculum/next_level"]  # mean 0.75 over 2 groups: promoted
    2
    >>> curriculum.level
    2
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from llmgym.episode import Episode

__all__ = ["Curriculum", "check_curriculum", "group_solve_rates"]


def group_solve_rates(episodes: Iterable[Episode], solve_threshold: float) -> list[float]:
    """Per group (``Episode.group``), the fraction of its episodes with total reward >= ``solve_threshold``."""
    groups: dict[Any, list[bool]] = defaultdict(list)
    for episode in episodes:
        groups[episode.group].append(episode.total_reward >= solve_threshold)
    return [sum(solved) / len(solved) for _, solved in sorted(groups.items(), key=lambda item: str(item[0]))]


def check_curriculum(
    kwarg: str, levels: Sequence[Any], promote_at: float, demote_at: float | None, window: int
) -> None:
    """Refuse curriculum settings :class:`Curriculum` cannot run with (a config checks them before any model loads).

    Raises:
        ValueError: no kwarg or levels, rates outside [0, 1], ``demote_at >= promote_at``, or ``window < 1``.
    """
    if not kwarg:
        raise ValueError("the curriculum needs the name of the env keyword argument that sets the level")
    if not levels:
        raise ValueError(f"the curriculum over {kwarg!r} needs at least one level")
    if not 0.0 <= promote_at <= 1.0:
        raise ValueError(f"promote_at must be in [0, 1], got {promote_at}")
    if demote_at is not None and not 0.0 <= demote_at < promote_at:
        raise ValueError(f"demote_at must be in [0, promote_at={promote_at}), got {demote_at}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")


class Curriculum:
    """Which difficulty level the envs are made with, and when it changes.

    Args:
        kwarg: the env keyword argument that sets the level (``"difficulty"``).
        levels: the levels, easiest first (values passed as ``kwarg``).
        promote_at: window solve rate at or above which the next level starts.
        demote_at: window solve rate below which the previous level comes back; ``None`` never demotes.
        window: groups played at a level before its solve rate is judged.
        solve_threshold: an episode counts as solved when its total reward is at least this.

    Raises:
        ValueError: no levels, rates outside [0, 1], ``demote_at >= promote_at``, or ``window < 1``.
    """

    def __init__(
        self,
        kwarg: str,
        levels: Sequence[Any],
        promote_at: float = 0.8,
        demote_at: float | None = None,
        window: int = 8,
        solve_threshold: float = 1.0,
    ):
        check_curriculum(kwarg, levels, promote_at, demote_at, window)
        self.kwarg, self.levels = kwarg, list(levels)
        self.promote_at, self.demote_at = float(promote_at), demote_at
        self.window, self.solve_threshold = int(window), float(solve_threshold)
        self.index = 0
        self.recent: list[float] = []  # solve rates of the groups played at the current level, oldest first

    @classmethod
    def from_config(cls, config: Any) -> Curriculum:
        """The curriculum a :class:`~llmgym.trainers.config.GRPOConfig` with ``curriculum_kwarg`` describes."""
        return cls(
            config.curriculum_kwarg,
            config.curriculum_levels,
            config.curriculum_promote_at,
            config.curriculum_demote_at,
            config.curriculum_window,
            config.solve_threshold,
        )

    @property
    def level(self) -> Any:
        """The current level (a value of ``levels``)."""
        return self.levels[self.index]

    def env_kwargs(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` with the current level set."""
        return {**base, self.kwarg: self.level}

    def update(self, solve_rates: Sequence[float]) -> dict[str, Any]:
        """Record the solve rates of the groups just played at the current level; promote or demote.

        Returns:
            Metrics: ``curriculum/level`` (the level these groups were played at),
            ``curriculum/level_index``, ``curriculum/solve_rate`` (mean over the window
            so far), ``curriculum/window_groups``, ``curriculum/change`` (+1, -1 or 0) and
            ``curriculum/next_level``.
        """
        played, played_index = self.level, self.index
        self.recent = (self.recent + [float(r) for r in solve_rates])[-self.window :]
        rate = sum(self.recent) / len(self.recent) if self.recent else 0.0
        filled, change = len(self.recent), 0
        if filled >= self.window:
            if rate >= self.promote_at and self.index + 1 < len(self.levels):
                change = 1
            elif self.demote_at is not None and rate < self.demote_at and self.index > 0:
                change = -1
        if change:
            self.index += change
            self.recent = []
        return {
            "curriculum/level": played,
            "curriculum/level_index": played_index,
            "curriculum/solve_rate": rate,
            "curriculum/window_groups": filled,
            "curriculum/change": change,
            "curriculum/next_level": self.level,
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state for checkpoints."""
        return {"kwarg": self.kwarg, "levels": self.levels, "index": self.index, "recent": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: the checkpoint's curriculum had other levels or another kwarg.
        """
        if state.get("kwarg") != self.kwarg or list(state.get("levels", [])) != self.levels:
            raise ValueError(
                f"the checkpoint's curriculum ({state.get('kwarg')!r} over {state.get('levels')}) differs from the "
                f"config's ({self.kwarg!r} over {self.levels}); resume with the same curriculum settings"
            )
        self.index = int(state["index"])
        self.recent = [float(r) for r in state.get("recent", [])]
