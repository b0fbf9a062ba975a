"""``llmgym/Wordle-v0``: the reference environment (see :mod:`llmgym.envs.wordle.env`)."""

from llmgym.envs.wordle.env import WordleEnv, load_words, score_guess
from llmgym.envs.wordle.solver import WordleSolver

__all__ = ["WordleEnv", "WordleSolver", "load_words", "score_guess"]
