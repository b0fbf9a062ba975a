"""``llmgym/WikiSearch-v0``: multi-hop questions over a generated wiki (see :mod:`.env`)."""

from llmgym.envs.wiki_search.env import WikiSearchEnv, answer_matches
from llmgym.envs.wiki_search.solver import WikiSearchSolver
from llmgym.envs.wiki_search.world import Question, World, generate_world, make_question

__all__ = [
    "WikiSearchEnv",
    "WikiSearchSolver",
    "World",
    "Question",
    "generate_world",
    "make_question",
    "answer_matches",
]
