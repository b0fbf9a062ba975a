"""A tiny two-player game for self-play trainer tests: each player writes one word; more vowels wins.

``llmgym-test/ma-VowelDuel-v0`` is what the tests add to
:data:`llmgym.envs.multiagent.MULTIAGENT_ENVS` (:data:`ENV_ID`, built by :func:`env`). A
reply with at least one letter is a legal move; one without is an illegal attempt. The
winner gets +1, the loser -1, a tie 0. Random tokens are mostly letters, so a tiny random
model plays it legally and its games differ: the trainer gets signal to learn from. With
``broken=True`` the env raises while applying the second move in the games whose seed draws
below one half (an env bug that must end only those games).
"""

from __future__ import annotations

from typing import Any

from llmgym.envs.multiagent.base import TextGameEnv
from llmgym.tools import ToolError

__all__ = ["VowelDuel", "env", "ENV_ID"]

ENV_ID = "llmgym-test/ma-VowelDuel-v0"


class VowelDuel(TextGameEnv):
    """Two players write a word each, ``player_0`` first; the larger share of vowels wins."""

    system_prompt = "Write one word with as many vowels as you can."

    def __init__(self, broken: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.broken = broken

    def new_game(self, options: dict[str, Any] | None) -> str:
        self.shares: dict[str, float] = {}
        self.fails = self.broken and self.np_random.random() < 0.5
        return "player_0"

    def rules(self, agent: str) -> str:
        return f"{self.system_prompt}\nYou are {agent}."

    def state_text(self, agent: str) -> str:
        return f"Words written so far: {len(self.shares)}."

    def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> float:
        return self.read_text(agent, str(arguments))

    def read_text(self, agent: str, text: str) -> float:
        letters = [c for c in text.lower() if c.isalpha()]
        if not letters:
            raise ToolError("write a word: your reply has no letters")
        return sum(c in "aeiou" for c in letters) / len(letters)

    def apply(self, agent: str, move: float) -> str:
        if self.fails and agent == "player_1":
            raise RuntimeError("the duel's scoreboard broke")
        self.shares[agent] = move
        return f"{agent} wrote a word."

    def next_agent(self, agent: str) -> str | None:
        if len(self.shares) < 2:
            return "player_1"
        first, second = self.shares["player_0"], self.shares["player_1"]
        self.winner = None if first == second else ("player_0" if first > second else "player_1")
        return None


def env(**kwargs: Any) -> VowelDuel:
    """A new :class:`VowelDuel`."""
    return VowelDuel(**kwargs)
