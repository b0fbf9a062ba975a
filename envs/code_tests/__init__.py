"""``llmgym/CodeTests-v0``: write a function, graded on hidden tests in a sandbox (see :mod:`.env`)."""

from llmgym.envs.code_tests.env import CodeTestsEnv
from llmgym.envs.code_tests.harness import GradeReport, grade
from llmgym.envs.code_tests.problems import CodeProblem, make_problem
from llmgym.envs.code_tests.solver import CodeTestsSolver, FlawedCodeTestsSolver, write_solution

__all__ = [
    "CodeTestsEnv",
    "CodeTestsSolver",
    "FlawedCodeTestsSolver",
    "CodeProblem",
    "GradeReport",
    "grade",
    "make_problem",
    "write_solution",
]
