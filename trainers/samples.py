"""Sample episodes of a training run, with the advantages they were trained with: ``out/samples.jsonl``.

Holds :class:`SampleLogger` and :func:`with_advantages`. Each step, the first
``sample_groups`` groups of rank 0's episodes are written as :class:`~llmgym.episode.Episode`
lines whose ``metadata`` also holds:

- ``train_step``: the step (as ``metrics.jsonl``'s ``step``);
- ``advantages``: one value per token of ``token_ids`` (0 where ``mask`` is 0), the
  advantage the loss gave that token;
- ``outcome_advantage`` and ``turn_advantages``: ``A_i`` and each turn's ``A_{i,t}``;
- ``in_loss``: whether the episode entered the loss (its group had signal);
- ``token_text``: each token decoded on its own, so a reader needs no tokenizer.

``llmgym view RUN`` colours each policy token by its advantage, so turn-level credit can
be seen landing on the turn that earned it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from llmgym.episode import Episode
from llmgym.trainers.advantages import Advantages
from llmgym.trainers.metrics import open_step_log

__all__ = ["SampleLogger", "with_advantages"]


def with_advantages(
    episodes: list[Episode], advantages: Advantages, step: int, groups: int, tokenizer: Any = None
) -> list[Episode]:
    """Copies of the episodes of the first ``groups`` groups, with their advantages in ``metadata``.

    Args:
        episodes: the step's episodes, in the order of ``advantages``.
        advantages: what :func:`~llmgym.trainers.advantages.compute_advantages` gave them.
        step: the training step.
        groups: how many groups (distinct ``Episode.group``, in order of appearance) to keep.
        tokenizer: decodes each token for ``token_text``; ``None`` leaves it out.

    Example:
        >>> from llmgym.trainers.advantages import compute_advantages
        >>> eps = [Episode("x", group=0, turn_rewards=[r], token_ids=[1, 2], mask=[0, 1], turn_spans=[(1, 2)])
        ...        for r in (1.0, 0.0)]
        >>> sample = with_advantages(eps, compute_advantages(eps), step=3, groups=1)
        >>> [e.metadata["advantages"] for e in sample], sample[0].metadata["train_step"]
        ([[0.0, 1.414], [0.0, -1.414]], 3)
    """
    chosen: list[Any] = []
    sample = []
    for index, episode in enumerate(episodes):
        if episode.group not in chosen:
            if len(chosen) == groups:
                continue
            chosen.append(episode.group)
        metadata = {
            **episode.metadata,
            "train_step": step,
            "advantages": [round(float(a), 4) + 0.0 for a in advantages.token_advantages[index]],  # no -0.0
            "outcome_advantage": round(float(advantages.outcome[index]), 4),
            "turn_advantages": [round(float(a), 4) for a in advantages.turn[index]],
            "in_loss": bool(advantages.keep[index]),
        }
        if tokenizer is not None:
            metadata["token_text"] = [tokenizer.decode([token]) for token in episode.token_ids]
        sample.append(dataclasses.replace(episode, metadata=metadata))
    return sample


class SampleLogger:
    """Appends each step's sample episodes to ``out/samples.jsonl``.

    Args:
        out: the run folder.
        resume_step: on resume, samples of later steps are dropped (as ``metrics.jsonl``'s lines).
    """

    def __init__(self, out: str | os.PathLike[str], resume_step: int | None = None):
        self.path = Path(out) / "samples.jsonl"
        self._file = open_step_log(self.path, resume_step, _step_of)

    def log(self, episodes: list[Episode]) -> None:
        """Write the episodes (from :func:`with_advantages`)."""
        for episode in episodes:
            self._file.write(episode.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _step_of(line: str) -> float:
    try:
        return int(json.loads(line)["metadata"]["train_step"])
    except (ValueError, KeyError, TypeError):
        return float("inf")  # a torn line from a kill: drop it
