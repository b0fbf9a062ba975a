"""PettingZoo-style entry: ``connect_four_v0.env()`` builds the game.

See :mod:`llmgym.envs.multiagent.connect_four`.
"""

from llmgym.envs.multiagent.connect_four import env

__all__ = ["env"]
