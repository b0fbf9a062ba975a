"""Spaces for text environments.

Holds :class:`Text`, a Gymnasium ``Text`` space that contains any Python
string up to ``max_length`` characters: prose, unicode, emoji and the empty
reply. Gymnasium's own ``spaces.Text`` defaults to 62 alphanumerics and
``min_length=1``, so an LLM's reply is almost never "contained" in it.
Gymnasium's ``flatten``/``flatdim``/``unflatten``/``flatten_space`` refuse it
with a ``ValueError``: turn text into numbers with a wrapper (docs/interop.md).
"""

from __future__ import annotations

import string
from typing import Any, NoReturn

import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import flatdim, flatten, flatten_space, unflatten

__all__ = ["Text", "PRINTABLE"]

#: Characters :meth:`Text.sample` draws from: ASCII printable plus a few
#: non-ASCII letters and an emoji, so samples exercise unicode handling.
PRINTABLE: str = string.printable + "éüßλ中🙂"


class Text(spaces.Text):
    """A text space that contains any ``str`` of at most ``max_length`` characters.

    Args:
        max_length: the longest string the space contains.
        charset: characters :meth:`sample` draws from (membership ignores it).
        seed: seed for the space's own random generator.

    Example:
        >>> space = Text(max_length=20)
        >>> "Héllo 🙂, world!" in space, "" in space, "x" * 21 in space
        (True, True, False)
        >>> _ = space.seed(0)
        >>> isinstance(space.sample(), str)
        True
        >>> Text(20) == Text(20, charset="abc")
        False
    """

    def __init__(self, max_length: int = 65536, *, charset: str = PRINTABLE, seed: int | None = None):
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        super().__init__(max_length=max_length, min_length=0, charset=charset, seed=seed)

    def contains(self, x: Any) -> bool:
        """True for any ``str`` no longer than ``max_length``."""
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of printable characters, at most 64 long."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        if not self.characters:  # an empty charset makes only the empty string
            return ""
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        chars = np.array(list(self.characters))
        return "".join(self.np_random.choice(chars, size=length))

    @property
    def is_np_flattenable(self) -> bool:
        """False: a string of any characters has no fixed-size numeric form."""
        return False

    def __repr__(self) -> str:
        charset = "" if self.character_set == frozenset(PRINTABLE) else f", charset={self.characters!r}"
        return f"llmgym.Text(max_length={self.max_length}{charset})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, Text)
            and other.max_length == self.max_length
            and other.character_set == self.character_set
        )


def _refuse_flatten(space: Text, *args: Any) -> NoReturn:
    # Gymnasium's Text flattening indexes each character in the charset; ours contains
    # any character, so that would fail on the first emoji (or on any reply at all).
    raise ValueError(
        f"{space!r} cannot be flattened to numbers: it contains strings of any characters. "
        "Turn text into numbers first, e.g. with llmgym.wrappers.classic_rl.sb3.TextEmbeddingObservation "
        "(observations) or CandidateActions (actions); see docs/interop.md"
    )


for _function in (flatdim, flatten, flatten_space, unflatten):
    _function.register(Text, _refuse_flatten)
