"""PettingZoo-style entry: ``negotiation_v0.env()`` builds the game (see :mod:`llmgym.envs.multiagent.negotiation`)."""

from llmgym.envs.multiagent.negotiation import env

__all__ = ["env"]
