"""Reasoning (``<think>``) blocks: tracking them while generating, a budget, and splitting them off.

Holds :class:`ThinkingTracker` (follows one generated sequence token by token,
counts thinking tokens and says when the budget forces the block closed),
:func:`prompt_opens_thinking` (templates such as DeepSeek-R1's open the block
in the generation prompt) and :func:`split_thinking` (reasoning text apart
from the answer, so the answer is the env action and the reasoning goes to
``reasoning_content``, which chat templates leave out of later prompts).

Counting: a generated token counts as thinking when the block was open before
it, so the closing tag counts and the opening tag does not. With a budget of
N, after N thinking tokens :data:`FORCED_CLOSE` is forced, so a force-closed
turn reports N plus the tokens of ``\n</think>`` thinking tokens.
"""

from __future__ import annotations

__all__ = ["THINK_OPEN", "THINK_CLOSE", "FORCED_CLOSE", "ThinkingTracker", "prompt_opens_thinking", "split_thinking"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
#: Text forced into the sequence when the budget runs out.
FORCED_CLOSE = "\n</think>\n\n"


def prompt_opens_thinking(prompt_tail: str) -> bool:
    """Whether a prompt ends inside an open ``<think>`` block.

    Example:
        >>> prompt_opens_thinking("<|im_start|>assistant\\n<think>\\n")
        True
        >>> prompt_opens_thinking("<think>\\n\\n</think>\\n\\n")
        False
    """
    return prompt_tail.rfind(THINK_OPEN) > prompt_tail.rfind(THINK_CLOSE)


def split_thinking(text: str, started_inside: bool = False) -> tuple[str | None, str]:
    """Split generated text into (reasoning, answer).

    Returns ``(None, text)`` when there is no think block. An unclosed block
    is all reasoning (the answer is empty).

    Example:
        >>> split_thinking("<think>hmm</think>\\n\\nIt is 5.")
        ('hmm', 'It is 5.')
        >>> split_thinking("hmm, 2+3\\n</think>\\n\\n5", started_inside=True)
        ('hmm, 2+3', '5')
        >>> split_thinking("plain answer")
        (None, 'plain answer')
    """
    if not started_inside:
        start = text.find(THINK_OPEN)
        if start < 0 or text[:start].strip():
            return None, text
        text = text[start + len(THINK_OPEN) :]
    end = text.find(THINK_CLOSE)
    if end < 0:
        return text.strip(), ""
    return text[:end].strip(), text[end + len(THINK_CLOSE) :].lstrip()


class ThinkingTracker:
    """Follows one generated sequence: is a ``<think>`` block open, how many tokens in it, must it close now.

    Args:
        budget: most thinking tokens before the block is force-closed; ``None`` = no cap.
        inside: whether the prompt already opened the block.

    Example:
        >>> tracker = ThinkingTracker(budget=2, inside=True)
        >>> tracker.feed("Let"); tracker.must_close()
        False
        >>> tracker.feed(" me"); tracker.must_close()
        True
        >>> tracker.feed("</think>"); tracker.inside, tracker.thinking_tokens
        (False, 3)
    """

    def __init__(self, budget: int | None = None, inside: bool = False) -> None:
        if budget is not None and budget < 0:
            raise ValueError(f"thinking_budget must be >= 0 or None, got {budget}")
        self.budget = budget
        self.started_inside = inside
        self.inside = inside
        self.thinking_tokens = 0
        self.forcing = False
        self._text = THINK_OPEN if inside else ""

    def feed(self, piece: str) -> None:
        """Record one generated token (its decoded text)."""
        if self.inside:
            self.thinking_tokens += 1
        self._text += piece
        self.inside = self._text.rfind(THINK_OPEN) > self._text.rfind(THINK_CLOSE)
        if not self.inside:
            self.forcing = False

    def must_close(self) -> bool:
        """True once when the budget is spent inside an open block (the caller then forces the close)."""
        if self.inside and not self.forcing and self.budget is not None and self.thinking_tokens >= self.budget:
            self.forcing = True
            return True
        return False
