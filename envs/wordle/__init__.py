"""``llmgym/Wordle-v0``, the reference environment (:mod:`llmgym.envs.wordle.env`), its variant
``llmgym/WordleCompact-v0`` and that variant's revision ``-v1`` (:mod:`llmgym.envs.wordle.compact`),
and scripted players (:mod:`llmgym.envs.wordle.solver`)."""

from llmgym.envs.wordle.env import WordleEnv, load_words, score_guess
from llmgym.envs.wordle.solver import WordleSolver

__all__ = ["WordleEnv", "WordleSolver", "load_words", "score_guess"]
