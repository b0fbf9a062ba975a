"""What of a new prompt a key/value cache can keep: the tokens it shares with what the cache holds.

Holds :func:`common_prefix`, which both batched engines' slot choice uses (torch-free: the
llama.cpp engine imports it without torch).
"""

from __future__ import annotations

__all__ = ["common_prefix"]


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens ``a`` and ``b`` share at their start (what of a new prompt a KV cache holding ``a`` can keep).

    Example:
        >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
        2
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
