"""Scripted Wordle players, reading only the observations, like any agent.

- :class:`WordleSolver`: keeps the answers consistent with the feedback so far and
  guesses the best of them; the honest baseline in tests and benchmarks
  (``scripted:wordle``).
- :class:`WordleSampler`: the same opener, then a random common word consistent with
  the feedback (``scripted:wordle-sampler``): the teacher of the Wordle agent's SFT
  warm-up, varied enough that a model learns the rule rather than one decision tree.
- :class:`RandomGuesser`: a random valid word every turn (``scripted:wordle-random``),
  the floor a learned agent is compared with.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter

from llmgym.envs.wordle.env import fits_feedback, load_words, score_guess

__all__ = ["WordleSolver", "WordleSampler", "RandomGuesser"]

_FEEDBACK = re.compile(r"^([A-Z]{5}) ([GYx]) ([GYx]) ([GYx]) ([GYx]) ([GYx])$", re.MULTILINE)


class WordleSolver:
    """Guess the most letter-frequent word still consistent with all feedback.

    Example:
        >>> import gymnasium as gym, llmgym
        >>> env = gym.make("llmgym/Wordle-v0")
        >>> obs, info = env.reset(seed=1)
        >>> solver, done = WordleSolver(), False
        >>> while not done:
        ...     obs, reward, terminated, truncated, info = env.step(solver.act(obs))
        ...     done = terminated or truncated
        >>> env.unwrapped.solved
        True
    """

    def __init__(self, use_tool: bool = True):
        self.use_tool = use_tool
        self.answers = load_words()[0]
        self.reset()

    def reset(self) -> None:
        """Forget the current game."""
        self.candidates = list(self.answers)
        self.history: list[tuple[str, str]] = []

    def act(self, observation: str) -> str:
        """The next action for ``observation`` (a new game starts when no feedback is shown)."""
        found = [(m.group(1).lower(), "".join(m.groups()[1:])) for m in _FEEDBACK.finditer(observation)]
        if not found and not self.history or "Guess the five-letter word" in observation:
            self.reset()
        for guess, feedback in found:
            self.history.append((guess, feedback))
            self.candidates = [w for w in self.candidates if score_guess(guess, w) == feedback]
        word = self._choose()
        if not self.use_tool:
            return word
        return "<tool_call>" + json.dumps({"name": "guess", "arguments": {"word": word}}) + "</tool_call>"

    def _choose(self) -> str:
        pool = self.candidates or list(self.answers)
        counts = Counter(letter for word in pool for letter in set(word))
        return max(pool, key=lambda w: (sum(counts[c] for c in set(w)), w))


class WordleSampler(WordleSolver):
    """The solver's opener, then a random common word consistent with all feedback, as a plain word.

    Its vocabulary is every common word, the 2,000 answers of ``answers="all"``, as a person's
    is: which words are answers of training episodes is the env's choice (``answers="train"``),
    never the teacher's, so a model that imitates it sees held-out words used as guesses
    whenever the feedback allows them, though never as the answer of a training episode
    (:func:`~llmgym.envs.wordle.env.answer_split`). The choice is seeded by the observations so
    far, so replaying a chat gives the same guess (as :class:`~llmgym.wrappers.scripted.ScriptedPolicy`
    needs) while different games take different paths.

    Example:
        >>> sampler = WordleSampler()
        >>> sampler.act("Guess the five-letter word. You have 6 guesses.")
        'arose'
        >>> guess = sampler.act("AROSE x x x x G\\nKnown: ____E; not A O R S\\n5 guesses left.")
        >>> guess.endswith("e") and not set("aors") & set(guess)
        True
    """

    def __init__(self):
        super().__init__(use_tool=False)
        self.seen: list[str] = []  # this game's observations: the seed of each choice

    def act(self, observation: str) -> str:
        if "Guess the five-letter word" in observation:
            self.seen = []
        self.seen.append(observation)
        return super().act(observation)

    def _choose(self) -> str:
        if not self.history:
            return super()._choose()
        # an answer given with reset(options=) may be outside the common words: then any valid word that fits
        pool = self.candidates or [w for w in sorted(load_words()[1]) if fits_feedback(w, self.history)]
        return _seeded_by(self.seen).choice(pool)


class RandomGuesser:
    """A valid word drawn at random every turn, as a plain word (seeded by the observations so far)."""

    def __init__(self):
        self.words = sorted(load_words()[1])
        self.seen: list[str] = []

    def act(self, observation: str) -> str:
        self.seen.append(observation)
        return _seeded_by(self.seen).choice(self.words)


def _seeded_by(observations: list[str]) -> random.Random:
    """A generator seeded by a game's observations so far: replaying a chat makes the same choices."""
    return random.Random(hashlib.sha256("\n".join(observations).encode()).digest())
