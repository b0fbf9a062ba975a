"""A scripted player for llmgym's OpenSpiel text games that reads only its chat, like a model.

Holds :class:`LegalRandom` (``scripted:legal-random``): it answers with one of the legal actions
listed in its newest observation, drawn uniformly, and :func:`listed_actions`, which reads that
list. It plays any OpenSpiel game llmgym shows as text (``llmgym/os-<Name>-v0`` against a bot,
``llmgym/ma-os-<Name>-v0`` in either seat), because every such observation ends with the list
:meth:`~llmgym.envs.multiagent.openspiel_text.OpenSpielText.observation_text` writes::

    Legal actions:
    Pass
    Bet
    Your move (player 0): reply with exactly one of the legal actions.

It is the teacher of the self-play experiment's SFT warm-up (``benchmarks/self_play.py``): a
model that imitates it learns to answer with exactly one legal action, nothing about which one
is good. Unlike OpenSpiel's ``RandomBot`` (``scripted:random``), which reads the game's state,
it needs nothing but the text, so it plays wherever a text policy does (``llmgym eval --policy``).
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["LegalRandom", "listed_actions", "LEGAL_ACTIONS_HEADER", "MOVE_REQUEST"]

#: The line that opens the list of legal actions in an OpenSpiel text observation.
LEGAL_ACTIONS_HEADER = "Legal actions:"
#: How the line after the list starts: the request to move.
MOVE_REQUEST = "Your move"


def listed_actions(observation: str) -> list[str]:
    """The legal actions of the last list in ``observation``: the lines after its last ``Legal actions:`` line,
    up to the request to move (or a blank line, or the end).

    Example:
        >>> listed_actions("Your view (player 1):\\n2p\\nLegal actions:\\nPass\\nBet\\nYour move (player 1): reply ...")
        ['Pass', 'Bet']
        >>> listed_actions("Game over: player 0 wins.")
        []
    """
    lines = observation.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == LEGAL_ACTIONS_HEADER]
    if not starts:
        return []
    actions = []
    for line in lines[starts[-1] + 1 :]:
        if not line.strip() or line.startswith(MOVE_REQUEST):
            break
        actions.append(line.strip())
    return actions


class LegalRandom:
    """Answer with one of the listed legal actions, drawn uniformly, written exactly as listed.

    The draw is seeded by ``seed`` and the observations so far, so replaying a chat gives the same
    action (as :class:`~llmgym.wrappers.scripted.ScriptedPolicy`, which replays it for every request,
    needs) and different histories draw independently. The same chat always gets the same action: in
    Kuhn poker, where a player's chat is its card and the actions so far, that is one legal action per
    information state, each drawn uniformly.

    Args:
        seed: varies the draws.

    Example:
        >>> player = LegalRandom()
        >>> player.act("Your view (player 0):\\n1\\nLegal actions:\\nPass\\nBet\\nYour move (player 0): ...") in {
        ...     "Pass", "Bet"}
        True
    """

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.seen: list[str] = []  # this chat's observations: what the draw is seeded by

    def act(self, observation: str) -> str:
        """One action of the last list of legal actions in ``observation``.

        Raises:
            ValueError: the observation lists no legal actions (it is no OpenSpiel text game's, or not a turn to move).
        """
        self.seen.append(observation)
        actions = listed_actions(observation)
        if not actions:
            raise ValueError(
                f"LegalRandom found no {LEGAL_ACTIONS_HEADER!r} list in the observation; it plays llmgym's OpenSpiel "
                "text games (llmgym/os-*, llmgym/ma-os-*), whose observations list the legal actions when it is to move"
            )
        entropy = hashlib.sha256("\n".join([str(self.seed), *self.seen]).encode()).digest()
        return random.Random(entropy).choice(actions)
