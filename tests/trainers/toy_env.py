"""A tiny env for trainer tests: reward = fraction of vowels among the letters of each reply.

``llmgym-test/Vowels-v0`` is registered on import, so configs can name it as
``tests.trainers.toy_env:llmgym-test/Vowels-v0`` (Gymnasium's ``module:id`` form),
also in ``torchrun`` subprocesses. ``turns`` sets how many replies an episode takes;
``difficulty`` (default 1) raises the fraction to that power (harder to reach a high
reward) and is named in the prompt, for curriculum tests.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from llmgym.env import LLMEnv
from llmgym.rubric import Reward, Rubric, TurnContext

__all__ = ["VowelsEnv", "vowel_fraction", "ENV_ID", "ENV_REF"]

ENV_ID = "llmgym-test/Vowels-v0"
ENV_REF = f"{__name__}:{ENV_ID}"


def vowel_fraction(ctx: TurnContext) -> float:
    """Fraction of the reply's letters that are vowels (0 without letters)."""
    letters = [c for c in ctx.action_text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


class VowelsEnv(LLMEnv):
    """Reply ``turns`` times; every reply is rewarded by its fraction of vowels to the power ``difficulty``."""

    description = "Write replies full of vowels (trainer test env)."

    def __init__(self, turns: int = 1, difficulty: int = 1, **kwargs: Any):
        if difficulty < 1:
            raise ValueError(f"difficulty must be >= 1, got {difficulty}")
        self.difficulty = difficulty
        super().__init__(max_turns=turns, **kwargs)
        self.turns = turns

    def setup(self, options: dict[str, Any] | None) -> str:
        return "Write some letters." if self.difficulty == 1 else f"Write some letters (difficulty {self.difficulty})."

    def on_text(self, text: str) -> str:
        return "More letters." if len(self.turn_contexts) + 1 < self.turns else ""

    def is_done(self) -> bool:
        return len(self.turn_contexts) + 1 >= self.turns

    def build_rubric(self) -> Rubric:
        if self.difficulty == 1:
            return Rubric([Reward(vowel_fraction, name="vowels")])
        return Rubric([Reward(self.powered_vowel_fraction, name="vowels")])

    def powered_vowel_fraction(self, ctx: TurnContext) -> float:
        """:func:`vowel_fraction` to the power ``difficulty``."""
        return vowel_fraction(ctx) ** self.difficulty


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=VowelsEnv)
