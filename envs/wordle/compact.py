"""``llmgym/WordleCompact``: Wordle in plain words with what is known so far, sized for small models.

Holds :class:`CompactWordleEnv` (``-v0``: the game, its feedback and its rewards are
``Wordle-v0``'s; what the agent sees is shorter and easier to act on) and
:class:`CompactWordleEnvV1` (``-v1``: the same game, with turn rewards that pay for
using the feedback and charge a repeated guess).
"""

from __future__ import annotations

from typing import Any

from llmgym.envs.wordle.env import WORD_LENGTH, WordleEnv, fits_feedback, plain_guess
from llmgym.rubric import Reward, Rubric, TurnContext
from llmgym.tools import ToolError

__all__ = ["CompactWordleEnv", "CompactWordleEnvV1"]


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
    - v1: turn rewards for using the feedback (``consistent``) and against repeating a guess
      (``repeated_guess``); the game and the observations are unchanged (:class:`CompactWordleEnvV1`).
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


class CompactWordleEnvV1(CompactWordleEnv):
    """``WordleCompact-v0`` with turn rewards that pay for using the feedback and charge a repeated guess.

    ## Description

    The game, its replies and its observations are ``WordleCompact-v0``'s (plain words, the
    ``Known:`` summary, six replies). Only the rewards change: ``-v0`` pays a turn only for
    new letters, so a player that ignores the feedback, or repeats a word it knows is valid,
    loses nothing on the way and learns nothing from its turns. ``-v1`` pays each guess that
    could still be the answer and charges each repeat.

    ## Action Space

    ``Text``: the reply; its last non-empty line is read as the guess.

    ## Observation Space

    ``Text``: the feedback line, the summary and the guesses left, or an error.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``information`` | 0.2 | turn | as ``-v0``: newly placed + newly found letters, over 10; at most 1.0 an episode |
    | ``invalid_guess`` | -0.1 | turn | as ``-v0``: 1 when the reply made no valid guess |
    | ``consistent`` | 0.05 | turn | 1 when the reply's guess is a listed word that fits all earlier feedback |
    | ``repeated_guess`` | -0.1 | turn | 1 when the reply's guess was guessed before |
    | ``solved`` | 1.0 | end | 1 when the word was found |
    | ``speed`` | 0.5 | end | when solved: 1.0 in one guess, down to 1/6 in six |
    | ``format_error`` | 0 | turn | metric: always 0 (there are no tool calls) |

    A guess fits the feedback when, scored against it, each earlier guess gets the feedback it got
    (:func:`~llmgym.envs.wordle.env.fits_feedback`): it could still be the answer. The first guess has
    no feedback to fit and earns no ``consistent``; a non-word never does.

    Why these sizes: ``consistent`` is worth as much per guess as an average guess's
    ``information``, and five of them (0.25) more than all the ``information`` an episode can
    pay (0.2), so a player that uses the feedback gains clearly over one that guesses valid
    words blindly; yet it is below what one guess less is worth in ``speed`` (0.5 / 6), so a
    player that knows the word never gains by putting off the solving guess with other words
    that fit. ``repeated_guess`` charges a repeat as ``invalid_guess`` charges a non-word: both
    spend a reply and show nothing new, and a new valid word always costs less than a repeat.

    How it could be gamed, and why that does not pay: the answer always fits the feedback,
    so a fitting guess is good play, not a trick. A non-word built from the ``Known:`` letters
    earns nothing (only words of the list count) and costs ``invalid_guess``. A few memorised
    words that fit early feedback earn a ``consistent`` or two but almost never solve. Rare
    words that fit but are never answers, played to put off the solving guess, earn 0.05 each
    and lose more in ``speed``. A repeat costs 0.1 a reply. ``tests/envs/test_wordle_rewards.py``
    checks that each of these players scores below the honest scripted solver.

    ## Starting State

    As ``WordleCompact-v0``; ``answers="train"`` / ``"test"`` draw from the split
    (:func:`~llmgym.envs.wordle.env.answer_split`).

    ## Episode End

    As ``WordleCompact-v0``: solved, six valid guesses, or six replies.

    ## Arguments

    Args:
        max_guesses: valid guesses allowed.
        max_turns: replies allowed, invalid ones included.
        answers: ``"all"``, ``"train"`` or ``"test"``.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release (:class:`CompactWordleEnv`): plain words, the running summary, six replies,
      ``Wordle-v0``'s rewards.
    - v1: ``consistent`` (0.05 a guess that fits all earlier feedback) and ``repeated_guess`` (-0.1 a
      repeat) added; the game, the observations and the other rewards are ``-v0``'s.
    """

    description = "WordleCompact with turn rewards for guesses that fit the feedback and a charge for repeats."

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                *super().build_rubric().rewards,
                Reward(self._consistent, weight=0.05, name="consistent"),
                Reward(self._repeated_guess, weight=-0.1, name="repeated_guess"),
            ]
        )

    def turn_guess(self, turn: int) -> tuple[int, str] | None:
        """``(index, word)`` of the guess made in reply ``turn`` (one at most: the reply is the word), or ``None``."""
        made = [(i, word) for i, (word, _, guess_turn) in enumerate(self.guesses) if guess_turn == turn]
        return made[-1] if made else None

    def _consistent(self, ctx: TurnContext) -> float:
        made = self.turn_guess(ctx.turn)
        if made is None or made[0] == 0:  # no valid guess, or the first: no feedback to fit yet
            return 0.0
        index, word = made
        return 1.0 if fits_feedback(word, [(guess, marks) for guess, marks, _ in self.guesses[:index]]) else 0.0

    def _repeated_guess(self, ctx: TurnContext) -> float:
        made = self.turn_guess(ctx.turn)
        if made is None:
            return 0.0
        index, word = made
        return 1.0 if any(guess == word for guess, _, _ in self.guesses[:index]) else 0.0
