"""Padding episodes into tensors, token for token.

Holds :class:`EpisodeBatch` and :func:`collate`. The trainer never
re-tokenizes text: it trains on ``Episode.token_ids`` exactly as the policy
produced them, with ``Episode.mask`` selecting the policy tokens and
``Episode.logprobs`` the generator's log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from llmgym.episode import Episode

__all__ = ["EpisodeBatch", "collate"]


@dataclass
class EpisodeBatch:
    """Right-padded tensors of a list of episodes, all ``[B, T]``.

    Attributes:
        input_ids: the episodes' token ids (padding: 0).
        attention_mask: 1 for real tokens.
        mask: 1 for policy tokens that enter the loss.
        advantages: per-token advantages (0 elsewhere).
        generator_logp: the generator's log-probs (0 elsewhere).
        has_generator_logp: whether every episode carried log-probs.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    generator_logp: torch.Tensor
    has_generator_logp: bool

    def to(self, device: torch.device | str) -> EpisodeBatch:
        """The same batch on ``device``."""
        return EpisodeBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.mask.to(device),
            self.advantages.to(device),
            self.generator_logp.to(device),
            self.has_generator_logp,
        )


def collate(
    episodes: list[Episode],
    token_advantages: list[np.ndarray] | None = None,
    max_length: int | None = None,
) -> EpisodeBatch:
    """Pad episodes into one batch.

    Args:
        episodes: episodes with ``token_ids`` and ``mask``.
        token_advantages: one array per episode, as long as its ``token_ids``
            (``None``: zeros, e.g. for SFT).
        max_length: cut longer episodes (their later tokens leave the loss).

    Raises:
        ValueError: an episode has no tokens or mismatched lengths (mask or
            advantages), or ``token_advantages`` has not one array per episode.

    Example:
        >>> batch = collate([Episode("x", token_ids=[7, 8, 9], mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.1]),
        ...                  Episode("x", token_ids=[7, 8], mask=[0, 1], logprobs=[0.0, -0.2])])
        >>> batch.input_ids.tolist(), batch.mask.tolist(), batch.has_generator_logp
        ([[7, 8, 9], [7, 8, 0]], [[0, 1, 1], [0, 1, 0]], True)
    """
    if not episodes:
        raise ValueError("cannot collate an empty list of episodes")
    if token_advantages is not None and len(token_advantages) != len(episodes):
        raise ValueError(f"got {len(token_advantages)} advantage arrays for {len(episodes)} episodes")
    lengths = []
    for index, episode in enumerate(episodes):
        if not episode.token_ids or len(episode.mask) != len(episode.token_ids):
            raise ValueError(
                f"episode {index} needs token_ids and a mask of the same length "
                f"(got {len(episode.token_ids)} tokens, {len(episode.mask)} mask entries)"
            )
        if token_advantages is not None and len(token_advantages[index]) != len(episode.token_ids):
            raise ValueError(
                f"episode {index} has {len(episode.token_ids)} tokens but {len(token_advantages[index])} advantages"
            )
        lengths.append(min(len(episode.token_ids), max_length or len(episode.token_ids)))
    width = max(lengths)
    shape = (len(episodes), width)
    input_ids = torch.zeros(shape, dtype=torch.long)
    attention_mask = torch.zeros(shape, dtype=torch.long)
    mask = torch.zeros(shape, dtype=torch.long)
    advantages = torch.zeros(shape, dtype=torch.float32)
    generator_logp = torch.zeros(shape, dtype=torch.float32)
    has_logp = True
    for row, (episode, length) in enumerate(zip(episodes, lengths)):
        input_ids[row, :length] = torch.tensor(episode.token_ids[:length])
        attention_mask[row, :length] = 1
        mask[row, :length] = torch.tensor(episode.mask[:length])
        if token_advantages is not None:
            advantages[row, :length] = torch.from_numpy(np.asarray(token_advantages[row][:length], dtype=np.float32))
        if len(episode.logprobs) == len(episode.token_ids):
            generator_logp[row, :length] = torch.tensor(episode.logprobs[:length], dtype=torch.float32)
        else:
            has_logp = False
    mask[:, 0] = 0  # the first token has no context to be predicted from
    return EpisodeBatch(input_ids, attention_mask, mask, advantages, generator_logp, has_logp)
