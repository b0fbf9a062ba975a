"""``llmgym/MathTools-v0``: word problems with calculator and Python tools (see :mod:`.env`)."""

from llmgym.envs.math_tools.calculator import CalculatorError, evaluate, parse_answer
from llmgym.envs.math_tools.env import MathToolsEnv, answers_match
from llmgym.envs.math_tools.problems import Problem, generate_problem
from llmgym.envs.math_tools.solver import MathToolsSolver

__all__ = [
    "MathToolsEnv",
    "MathToolsSolver",
    "Problem",
    "generate_problem",
    "evaluate",
    "parse_answer",
    "answers_match",
    "CalculatorError",
]
