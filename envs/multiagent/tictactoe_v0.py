"""PettingZoo-style entry: ``tictactoe_v0.env()`` builds the game (see :mod:`llmgym.envs.multiagent.tictactoe`)."""

from llmgym.envs.multiagent.tictactoe import env

__all__ = ["env"]
