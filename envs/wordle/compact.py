"""``llmgym/WordleCompact-v0``: Wordle in plain words with what is known so far, sized for small models.

Holds :class:`CompactWordleEnv`. The game, its feedback and its rewards are
``Wordle-v0``'s; what the agent sees is shorter and easier to act on.
"""

from __future__ import annotations

from typing import Any

from llmgym.envs.wordle.env import WORD_LENGTH, WordleEnv, plain_guess
from llmgym.tools import ToolError

__all__ = ["CompactWordleEnv"]


class CompactWordleEnv(WordleEnv):
    """Wordle with plain-word replies and a running summary of what the feedback has shown.

    ## Description

    ``Wordle-v0``'s game and rewards with three changes that make it cheap to play
    and learn for a small model on a CPU:

    - no tools: the agent replies with one word (the last line of the reply, as
      ``Wordle-v0`` reads a plain guess), so a turn is a few tokens instead of a
      tool call's ~20, and the prompt carries no tool schema;
    - each feedback line is followed by what all the feedback so far has shown:
      ``Known: _R__E, also A; not C N T S`` (placed letters, letters in the word
      but not placed, letters not in the word), so using the feedback needs no
      bookkeeping over the history;
    - ``max_turns`` defaults to 6: an invalid reply costs a turn as well as the
      ``invalid_guess`` penalty, so an episode is at most six replies.

    ## Action Space

    ``Text``: the reply; its last non-empty line is read as the guess.

    ## Observation Space

    ``Text``: the feedback line, the summary and the guesses left, or an error.

    ## Rewards

    As ``Wordle-v0`` (``information``, ``invalid_guess``, ``solved``, ``speed``);
    ``format_error`` stays 0 (there are no tool calls to get wrong).

    ## Starting State

    As ``Wordle-v0``; ``answers="train"`` / ``"test"`` draw from the split
    (:func:`~llmgym.envs.wordle.env.answer_split`).

    ## Episode End

    As ``Wordle-v0``, with six replies by default.

    ## Arguments

    Args:
        max_guesses: valid guesses allowed.
        max_turns: replies allowed, invalid ones included.
        answers: ``"all"``, ``"train"`` or ``"test"``.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release: plain words, the running summary, six replies. It was added as
      ``llmgym/Wordle-v1``; a variant of ``Wordle-v0``, not a revision of it, so it has a name
      of its own, and ``llmgym/Wordle-v1`` stays for one release as a deprecated alias.
    """

    description = "Wordle in plain words, with a running summary of the feedback: sized for small models."
    system_prompt = (
        "Play Wordle: find the hidden five-letter word in at most 6 guesses. Reply with one word only. "
        "Feedback per letter: G = right spot, Y = in the word elsewhere, x = not in the word."
    )

    def __init__(self, max_guesses: int = 6, max_turns: int = 6, answers: str = "all", **kwargs: Any):
        super().__init__(max_guesses=max_guesses, max_turns=max_turns, answers=answers, **kwargs)

    guess = None  # no guess tool: the agent replies with the word

    def on_text(self, text: str) -> str:
        word = plain_guess(text)
        if word is None:
            return "No guess found. Reply with one five-letter word."
        try:
            return self.play_guess(word)
        except ToolError as err:
            return f"Error: {err}."

    def play_guess(self, word: str) -> str:
        shown = super().play_guess(word)
        if self.solved or len(self.guesses) >= self.max_guesses:
            return shown
        feedback, _, rest = shown.partition("\n")
        return "\n".join(line for line in (feedback, self.known(), rest) if line)

    def known(self) -> str:
        """What the feedback so far has shown: ``Known: _R__E, also A; not C N T S``."""
        placed = "".join(self.answer[i].upper() if i in self._greens else "_" for i in range(WORD_LENGTH))
        unplaced = sorted(self._letters - {self.answer[i] for i in self._greens})
        absent = sorted({c for word, marks, _ in self.guesses for c, m in zip(word, marks) if m == "x"} - self._letters)
        text = f"Known: {placed}"
        if unplaced:
            text += ", also " + " ".join(unplaced).upper()
        if absent:
            text += "; not " + " ".join(absent).upper()
        return text
