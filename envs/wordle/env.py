"""``llmgym/Wordle-v0``: guess a five-letter word in six tries.

Holds :class:`WordleEnv`, :func:`score_guess` (the game's feedback) and
:func:`load_words` (its word lists). The reference environment: every later
one copies its shape.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import cache
from importlib.resources import files
from typing import Any

from llmgym.env import LLMEnv
from llmgym.rubric import Reward, Rubric, TurnContext, format_error
from llmgym.tools import ToolError, tool

__all__ = [
    "WordleEnv",
    "score_guess",
    "fits_feedback",
    "plain_guess",
    "load_words",
    "answer_split",
    "ANSWER_SPLITS",
]

WORD_LENGTH = 5
#: the answer splits: every fifth answer (of the alphabetical list) is held out for evaluation
ANSWER_SPLITS = ("all", "train", "test")
# a reply that is just a word (the plain-text way to guess): "crane", "Guess: CRANE", "**crane**."
_PLAIN_GUESS = re.compile(r"^\s*(?:guess\s*[:=]\s*)?[\"'*`]*([A-Za-z]{5})[\"'*`.!]*\s*$", re.IGNORECASE)


@cache
def load_words() -> tuple[tuple[str, ...], frozenset[str]]:
    """The answer list (common words) and the set of valid guesses, read once per process."""
    data = files("llmgym.envs.wordle") / "data"
    answers = tuple(data.joinpath("answers.txt").read_text().split())
    guesses = frozenset(data.joinpath("guesses.txt").read_text().split()) | frozenset(answers)
    return answers, guesses


def answer_split(split: str = "all") -> tuple[str, ...]:
    """The answers of a split: ``"test"`` is every fifth answer of the list (the 2,000 most common
    words in alphabetical order; 400 words, the 5th, 10th, 15th...), ``"train"`` the other 1,600,
    ``"all"`` both: each split spans common and less common words alike.

    Train on ``"train"`` and evaluate on ``"test"``, and the evaluation's words were never
    an answer the agent was trained on: its numbers show play, not memory.

    Example:
        >>> train, test = answer_split("train"), answer_split("test")
        >>> len(train), len(test), set(train) & set(test)
        (1600, 400, set())
    """
    answers = load_words()[0]
    if split == "all":
        return answers
    if split == "test":
        return answers[4::5]
    if split == "train":
        return tuple(word for index, word in enumerate(answers) if index % 5 != 4)
    raise ValueError(f"answers must be one of {', '.join(ANSWER_SPLITS)}, got {split!r}")


def plain_guess(text: str) -> str | None:
    """The word a plain-text reply guesses: its last non-empty line, if that is one word (``crane``,
    ``Guess: CRANE``, ``**crane**.``); else ``None``.

    Example:
        >>> plain_guess("Guess: CRANE"), plain_guess("I think it is crane")
        ('CRANE', None)
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    match = _PLAIN_GUESS.match(lines[-1]) if lines else None
    return match.group(1) if match else None


def score_guess(guess: str, answer: str) -> str:
    """Wordle feedback: ``G`` right letter right spot, ``Y`` in the word elsewhere, ``x`` not (more) in it.

    Repeated letters are scored the way the game does: greens first, then
    yellows, left to right, only while unmatched copies remain in the answer.

    Example:
        >>> score_guess("crane", "react"), score_guess("eerie", "there")
        ('YYGxY', 'YxYxG')
    """
    # first pass: greens; the answer's letters they did not match are left for yellows
    marks = ["G" if g == a else "x" for g, a in zip(guess, answer)]
    unmatched = Counter(a for a, mark in zip(answer, marks) if mark != "G")
    # second pass: yellows, left to right, while unmatched copies remain
    for i, g in enumerate(guess):
        if marks[i] != "G" and unmatched[g] > 0:
            marks[i] = "Y"
            unmatched[g] -= 1
    return "".join(marks)


def fits_feedback(word: str, history: Iterable[tuple[str, str]]) -> bool:
    """Whether ``word`` could be the answer given every ``(guess, feedback)`` so far: each guess, scored
    against ``word``, gives the feedback it got. The answer always fits; a repeat of a guess never does
    (unless that guess solved it).

    Example:
        >>> fits_feedback("swept", [("taser", "YxYYx")]), fits_feedback("taser", [("taser", "YxYYx")])
        (True, False)
    """
    return all(score_guess(guess, word) == feedback for guess, feedback in history)


class WordleEnv(LLMEnv):
    """Guess the hidden five-letter word in six tries, with green/yellow/grey feedback.

    ## Description

    The agent guesses with the ``guess`` tool or by replying with just the word
    (the last line of the reply: ``crane``, ``Guess: CRANE``). Each valid guess gets
    a line of feedback, ``CRANE Y Y G x Y``: ``G`` right letter in the right spot,
    ``Y`` in the word elsewhere, ``x`` not in the word (or no more copies of it).
    Guesses must be words of the list; other attempts are answered with an error
    and cost a turn, not a guess. One reply may hold several ``guess`` calls.

    ## Action Space

    ``Text``: assistant text (``<tool_call>`` blocks or a plain word) or an OpenAI
    assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the feedback line(s), then how many guesses are left, or an error.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``information`` | 0.2 | turn | newly placed (green) + newly found letters, over 10; at most 1.0 an episode |
    | ``invalid_guess`` | -0.1 | turn | 1 when the turn made no valid guess (a non-word, a malformed call, prose) |
    | ``solved`` | 1.0 | end | 1 when the word was found |
    | ``speed`` | 0.5 | end | when solved: 1.0 in one guess, down to 1/6 in six |
    | ``format_error`` | 0 | turn | metric: malformed tool-call format |

    How it could be gamed, and why that does not pay: guessing non-words packed
    with common letters (``eeaar``) would reveal letters cheaply; only dictionary
    words get feedback, so such guesses earn nothing and cost ``invalid_guess``.
    Fishing for information without trying to solve is capped at 0.2 per episode,
    far below ``solved`` + ``speed``. Claiming success in prose is just an invalid
    guess. Repeating a guess reveals nothing new, so it earns nothing.
    ``tests/envs/test_wordle.py`` checks that such cheating policies score below
    the honest scripted solver.

    ## Starting State

    A word drawn from the answers of the split (``answers``: all 2,000, the 1,600 of
    ``"train"`` or the 400 held-out ones of ``"test"``, see :func:`answer_split`) with
    ``self.np_random``, or ``reset(options={"answer": "crane"})``. With ``answer_by_seed=True`` the
    word of ``reset(seed=s)`` is the split's answer number ``s`` (modulo its size): seeds
    ``0 .. N-1`` play each of the split's ``N`` answers once (``llmgym eval ... -n 400 --seed 0``).

    ## Episode End

    - Terminated: the word is guessed, or ``max_guesses`` valid guesses were made
      (the observation then reveals the word).
    - Truncated: ``max_turns`` replies (invalid ones included) or the token budget ran
      out; the observation ends ``Out of turns. The word was ...`` (or ``Out of tokens.``).

    ## Arguments

    Args:
        max_guesses: valid guesses allowed (the game's six).
        max_turns: turn budget including invalid attempts.
        answers: which answers the hidden word is drawn from: ``"all"``, ``"train"`` or
            ``"test"`` (:func:`answer_split`); guesses may be any word of the list either way.
        answer_by_seed: the answer of ``reset(seed=s)`` is the split's answer ``s`` (modulo its size),
            not a random draw: an evaluation over seeds ``0 .. N-1`` plays every answer once.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "Guess a five-letter word in six tries from green/yellow/grey feedback (guess tool or plain text)."
    system_prompt = (
        "You are playing Wordle. Find the hidden five-letter English word in at most 6 guesses. "
        "After each guess you get feedback for each letter: G = right letter in the right spot, "
        "Y = the letter is in the word but elsewhere, x = the letter is not in the word (or not that many times). "
        "Guesses must be real English words. Guess by calling the guess tool, or reply with just the word."
    )

    def __init__(
        self,
        max_guesses: int = 6,
        max_turns: int = 10,
        answers: str = "all",
        answer_by_seed: bool = False,
        **kwargs: Any,
    ):
        if isinstance(max_guesses, bool) or not isinstance(max_guesses, int) or max_guesses < 1:
            raise ValueError(f"max_guesses must be an integer >= 1, got {max_guesses!r}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.max_guesses = max_guesses
        # the prompt states this env's budget, never the game's six when fewer are allowed
        self.system_prompt = type(self).system_prompt.replace(
            "at most 6 guesses", f"at most {max_guesses} {_plural(max_guesses, 'guess', 'guesses')}"
        )
        self.answers, self.valid_words = answer_split(answers), load_words()[1]
        self.answer_split = answers
        self.answer_by_seed = bool(answer_by_seed)
        self.answer = ""
        self.guesses: list[tuple[str, str, int]] = []  # (word, feedback, turn)
        self.solved = False  # True once the word has been guessed
        self._greens: set[int] = set()  # positions found green
        self._letters: set[str] = set()  # letters found in the word
        self._new_facts: dict[int, int] = {}  # turn -> facts its guesses revealed

    def setup(self, options: dict[str, Any] | None) -> str:
        answer = (options or {}).get("answer")
        if answer is None and self.answer_by_seed and self.seed_used is not None:
            answer = self.answers[self.seed_used % len(self.answers)]
        elif answer is None:
            answer = self.answers[int(self.np_random.integers(len(self.answers)))]
        elif not isinstance(answer, str) or answer.lower() not in self.valid_words:
            raise ValueError(f"options['answer'] must be a valid five-letter word, got {answer!r}")
        self.answer = answer.lower()
        self.guesses = []
        self.solved = False
        self._greens, self._letters = set(), set()
        self._new_facts = {}
        # the turn budget binds: say so, or the first reply would be planned for six
        if self.max_turns < self.max_guesses:
            return (
                f"Guess the five-letter word. You have {self.max_guesses} guesses but only {self.max_turns} "
                f"{_plural(self.max_turns, 'reply', 'replies')}: one reply may hold several guess tool calls."
            )
        return (
            f"Guess the five-letter word. You have {self.max_guesses} {_plural(self.max_guesses, 'guess', 'guesses')}."
        )

    @tool
    def guess(self, word: str) -> str:
        """Guess the hidden word.

        Args:
            word: a five-letter English word.
        """
        return self.play_guess(word)

    def play_guess(self, word: str) -> str:
        """Score one guess and say what is left; a guess that is not allowed raises :class:`~llmgym.tools.ToolError`."""
        word = word.strip().lower()
        if word not in self.valid_words:  # every valid word has five letters: tell the two mistakes apart only here
            if len(word) != WORD_LENGTH or not word.isalpha():
                raise ToolError(f"{word[:20]!r} is not five letters; guess a five-letter word")
            raise ToolError(f"{word!r} is not in the word list; guess a real English word")
        if len(self.guesses) >= self.max_guesses:
            raise ToolError("no guesses left")
        feedback = score_guess(word, self.answer)
        turn = len(self.turn_contexts) + 1
        self.guesses.append((word, feedback, turn))
        self.solved = feedback == "G" * WORD_LENGTH
        # for the information reward: facts (placed letters, letters known to be in the word) no earlier guess revealed
        known = len(self._greens) + len(self._letters)
        for i, (letter, mark) in enumerate(zip(word, feedback)):
            if mark == "G":
                self._greens.add(i)
            if mark != "x":
                self._letters.add(letter)
        self._new_facts[turn] = self._new_facts.get(turn, 0) + len(self._greens) + len(self._letters) - known
        # the reply: the feedback, then what is left
        made = len(self.guesses)
        left = self.max_guesses - made
        replies = self.max_turns - turn  # replies after this one
        shown = f"{word.upper()} {' '.join(feedback)}"
        if self.solved:
            return f"{shown}\nSolved in {made} {_plural(made, 'guess', 'guesses')}!"
        if left == 0:
            return f"{shown}\nOut of guesses. The word was {self.answer.upper()}."
        if replies == 0:  # the last reply: step() says "Out of turns" once its guesses are all scored (a later
            return shown  # guess in this same reply may still solve it)
        if replies < left:  # the turn budget binds: never promise guesses there are no replies for
            return (
                f"{shown}\n{left} {_plural(left, 'guess', 'guesses')} left "
                f"in {replies} {_plural(replies, 'reply', 'replies')}."
            )
        return f"{shown}\n{left} {_plural(left, 'guess', 'guesses')} left."

    def truncation_note(self) -> str:
        # said once, after every guess of the last reply: never before one of them solves it
        budget = "turns" if len(self.turn_contexts) >= self.max_turns else "tokens"
        return f"Out of {budget}. The word was {self.answer.upper()}."

    def on_text(self, text: str) -> str:
        word = plain_guess(text)
        if word is None:
            return (
                "No guess found. Reply with just a five-letter word, or call "
                '<tool_call>{"name": "guess", "arguments": {"word": "..."}}</tool_call>'
            )
        result = self.tools["guess"].call({"word": word})
        return result.content

    def is_done(self) -> bool:
        return self.solved or len(self.guesses) >= self.max_guesses

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(self._information, weight=0.2, name="information"),
                Reward(self._invalid_guess, weight=-0.1, name="invalid_guess"),
                Reward(lambda ctx: 1.0 if self.solved else 0.0, weight=1.0, when="end", name="solved"),
                Reward(self._speed, weight=0.5, when="end", name="speed"),
                Reward(format_error, weight=0.0),
            ]
        )

    def _information(self, ctx: TurnContext) -> float:
        return self._new_facts.get(ctx.turn, 0) / (2 * WORD_LENGTH)

    def _invalid_guess(self, ctx: TurnContext) -> float:
        # guesses are kept in turn order: this turn made one iff the last guess is from this turn
        return 0.0 if self.guesses and self.guesses[-1][2] == ctx.turn else 1.0

    def _speed(self, ctx: TurnContext) -> float:
        if not self.solved:
            return 0.0
        return (self.max_guesses + 1 - len(self.guesses)) / self.max_guesses


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many
