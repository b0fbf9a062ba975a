"""``TextGameEnv`` is a base class, not a game: building it (or a subclass that leaves a rule out) is a TypeError
naming what a game must define; the games built on it still build and pass PettingZoo's ``api_test``."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.test import api_test, parallel_api_test  # noqa: E402

from llmgym.envs.multiagent import connect_four_v0, negotiation_v0, prisoners_dilemma_v0, tictactoe_v0  # noqa: E402
from llmgym.envs.multiagent.base import TextGameEnv  # noqa: E402

RULES = ("new_game", "rules", "state_text", "read_call", "read_text", "apply", "next_agent")


def test_the_base_class_says_what_a_game_must_define_when_built():
    """It was built, and PettingZoo's api_test then failed with ``KeyError: None``."""
    with pytest.raises(TypeError, match="abstract") as caught:
        TextGameEnv()
    assert all(name in str(caught.value) for name in RULES)


def test_a_game_that_leaves_a_rule_out_is_refused_naming_it():
    class NoNextAgent(TextGameEnv):
        def new_game(self, options: dict[str, Any] | None) -> str:
            return "player_0"

        def rules(self, agent: str) -> str:
            return "rules"

        def state_text(self, agent: str) -> str:
            return "state"

        def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> Any:
            return None

        def read_text(self, agent: str, text: str) -> Any:
            return text

        def apply(self, agent: str, move: Any) -> str:
            return f"{agent} played {move}"

    with pytest.raises(TypeError, match="next_agent"):
        NoNextAgent()


@pytest.mark.filterwarnings("ignore:(Observation|Action):UserWarning")  # text spaces, not Box or Discrete
@pytest.mark.parametrize("factory", [tictactoe_v0.env, connect_four_v0.env, negotiation_v0.env])
def test_the_games_still_build_and_pass_the_aec_api_test(factory):
    api_test(factory(), num_cycles=20)


@pytest.mark.filterwarnings("ignore:(Observation|Action):UserWarning")
def test_the_parallel_game_still_passes_the_parallel_api_test():
    parallel_api_test(prisoners_dilemma_v0.parallel_env(), num_cycles=20)
