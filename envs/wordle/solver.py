"""A scripted Wordle player: keeps the answers consistent with the feedback so far.

Used as the honest baseline in tests and benchmarks, and by ``llmgym play``
demos. It reads only the observations, like any agent.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from llmgym.envs.wordle.env import load_words, score_guess

__all__ = ["WordleSolver"]

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
