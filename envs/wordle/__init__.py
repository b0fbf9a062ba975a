"""``llmgym/Wordle-v0``, the reference environment (:mod:`llmgym.envs.wordle.env`), and its variant
``llmgym/WordleCompact-v0`` (:mod:`llmgym.envs.wordle.compact`)."""

from llmgym.envs.wordle.env import WordleEnv, load_words, score_guess
from llmgym.envs.wordle.solver import WordleSolver

__all__ = ["WordleEnv", "WordleSolver", "load_words", "score_guess"]
