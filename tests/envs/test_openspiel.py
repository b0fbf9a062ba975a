"""OpenSpiel's games as text envs: the curated ids pass the contracts, replies read as legal actions,
hidden information stays hidden, chance follows the seed, and an OpenSpiel failure ends one game only."""

from __future__ import annotations

import contextlib
import io

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("pettingzoo")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pyspiel  # noqa: E402
from gymnasium.utils.env_checker import check_env as gymnasium_check_env  # noqa: E402
from pettingzoo.test import api_test, parallel_api_test  # noqa: E402

import llmgym  # noqa: E402, F401  (registers the envs)
from llmgym.checker import check_env  # noqa: E402
from llmgym.envs.multiagent import (  # noqa: E402
    MULTIAGENT_ENVS,
    MULTIAGENT_KINDS,
    OPENSPIEL_GAMES,
    make_multiagent,
    openspiel_ids,
)
from llmgym.envs.multiagent.openspiel_game import OpenSpielEnv, OpenSpielText, env, kuhn_poker  # noqa: E402
from llmgym.envs.multiagent.openspiel_parallel import OpenSpielParallelEnv  # noqa: E402
from llmgym.envs.multiagent.openspiel_versus import MCTSBot, OpenSpielVersusEnv, RandomBot  # noqa: E402
from llmgym.envs.multiagent.rollout import play_match  # noqa: E402

MULTI = [openspiel_ids(name)[0] for name in OPENSPIEL_GAMES]
SINGLE = [openspiel_ids(name)[1] for name in OPENSPIEL_GAMES]
BOTS = {"player_0": RandomBot(0), "player_1": RandomBot(1)}


def _quiet(test, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        test(*args, **kwargs)


def test_at_least_ten_curated_games_each_with_both_ids():
    assert len(OPENSPIEL_GAMES) >= 10
    assert set(MULTI) <= set(MULTIAGENT_ENVS) and set(SINGLE) <= set(llmgym.list_envs())
    assert not set(SINGLE) & {"llmgym/TicTacToe-v0", "llmgym/ConnectFour-v0"}  # the native games keep their ids


@pytest.mark.parametrize("env_id", MULTI)
def test_curated_games_pass_pettingzoo_api_test(env_id):
    if MULTIAGENT_KINDS[env_id] == "parallel":
        _quiet(parallel_api_test, make_multiagent(env_id), num_cycles=40)
    else:
        _quiet(api_test, make_multiagent(env_id), num_cycles=40)


@pytest.mark.parametrize("env_id", MULTI)
def test_curated_games_play_to_the_end_between_bots_with_openspiel_returns(env_id):
    """Every action name a bot writes reads back as that action; rewards are OpenSpiel's returns."""
    games = play_match(lambda: make_multiagent(env_id), BOTS, seeds=[0, 1], env_id=env_id)
    for game in games:
        outcomes = {agent: episode.metadata["outcome"] for agent, episode in game.items()}
        assert set(outcomes.values()) <= {"win", "draw", "loss"}, outcomes
        totals = [game[a].total_reward + game[a].metadata.get("reward_before_first_turn", 0.0) for a in game]
        text = make_multiagent(env_id).unwrapped.text
        assert all(text.game.min_utility() <= t <= text.game.max_utility() for t in totals)


@pytest.mark.parametrize("env_id", SINGLE)
def test_single_agent_ids_pass_check_env_and_the_fuzzer(env_id):
    gymnasium_check_env(gym.make(env_id).unwrapped, skip_render_check=True)
    report = check_env(env_id, episodes=1)  # llmgym's checker: determinism, hostile actions, budgets...
    assert report.passed, [(r.name, r.summary, r.details[:3]) for r in report.results if r.passed is False]


def test_kuhn_each_player_sees_only_its_own_card():
    for seed in range(6):
        game = kuhn_poker()
        game.reset(seed=seed)
        cards = [int(card) for card in game.state.history()[:2]]  # the two chance draws: player 0's, player 1's
        seen = {agent: [game.observe(agent)["text"]] for agent in game.possible_agents}
        game.step("Bet")
        seen["player_1"].append(game.observe("player_1")["text"])
        game.step("Pass")  # a fold: neither card is shown down
        for player, agent in enumerate(game.possible_agents):
            texts = [*seen[agent], game.observe(agent)["text"]]
            views = [
                part.split("\n")[:3] for text in texts for part in text.split(f"Your view (player {player}):\n")[1:]
            ]
            names = ["Jack", "Queen", "King"]
            assert len(views) >= 2 and all(
                card == f"Your card: {names[cards[player]]}"
                and state.startswith(f"Information state: {cards[player]}")
                and names[cards[1 - player]] not in "".join(view)
                for view in views
                for card, _, state in [view]
            )
            assert all(f"{cards[0]} {cards[1]}" not in text for text in texts)  # OpenSpiel's whole-state string


def test_chance_follows_the_seed():
    def deal(seed):
        game = env("leduc_poker")
        game.reset(seed=seed)
        return [game.observe(a)["text"] for a in game.possible_agents], game.state.history()

    assert deal(3) == deal(3)
    assert len({str(deal(seed)[1]) for seed in range(8)}) > 1
    text = OpenSpielText("liars_dice")
    states = []
    for _ in range(2):
        state = text.game.new_initial_state()
        text.apply_chance(state, np.random.default_rng(5))
        states.append(state.history())
    assert states[0] == states[1] and not text.game.new_initial_state().history()


def test_an_illegal_reply_gets_a_retry_observation_then_forfeits():
    game = env("tic_tac_toe", max_retries=1)
    game.reset(seed=0)
    game.step("I resign")
    text = game.observe("player_0")["text"]
    assert game.agent_selection == "player_0" and "Illegal move" in text and "x(1,1)" in text
    assert game.rewards["player_0"] == pytest.approx(-0.1)
    game.step("x(0,0) or x(1,1)")  # two actions named: illegal too, and the second in a row forfeits
    assert "several legal actions" in game.observe("player_0")["text"]
    assert game.terminations == {"player_0": True, "player_1": True} and game.outcome()["player_0"] == "loss"
    assert game.rewards == {"player_0": pytest.approx(-1.1), "player_1": 1.0}


def test_a_forfeit_costs_the_game_lowest_utility():
    game = kuhn_poker(max_retries=0)
    game.reset(seed=0)
    game.step("fold!")
    assert game.rewards["player_0"] == pytest.approx(-2.1) and game.rewards["player_1"] == 2.0


def test_replies_are_read_as_one_legal_action():
    text = OpenSpielText("nim", {"pile_sizes": "2;3"})
    state = text.game.new_initial_state()
    names = text.action_names(state, 0)
    assert text.read_action(state, 0, "  PILE:2, TAKE:3 ") == state.legal_actions(0)[names.index("pile:2, take:3;")]
    assert (
        text.read_action(state, 0, "pile:1, take:1 looks bad.\npile:2, take:1;")
        == state.legal_actions(0)[names.index("pile:2, take:1;")]
    )
    with pytest.raises(ValueError, match="legal actions: pile:1, take:1;"):
        text.read_action(state, 0, "I take everything")
    hex_text = OpenSpielText("hex", {"board_size": 11})
    hex_state = hex_text.game.new_initial_state()
    assert (
        hex_text.read_action(hex_state, 0, "a10")
        == hex_state.legal_actions(0)[hex_text.action_names(hex_state, 0).index("a10")]
    )  # a1 is not read inside a10


def test_a_tool_call_plays_an_action():
    game = env("connect_four")
    game.reset(seed=0)
    game.step('<tool_call>{"name": "play", "arguments": {"action": "x3"}}</tool_call>')
    assert game.state.history() == [3] and game.agent_selection == "player_1"
    assert "player 0 played x3." in game.observe("player_1")["text"]


def test_prompt_is_the_chat_of_a_first_decision():
    games = play_match(kuhn_poker, BOTS, seeds=[4])
    first = games[0]["player_0"].messages[:2]
    game = kuhn_poker()
    game.reset(seed=4)
    assert game.text.prompt(game.state, 0) == first


def test_any_openspiel_game_by_name_through_the_factory():
    game = env("nim", params={"pile_sizes": "1;2", "is_misere": False})
    game.reset(seed=0)
    assert "is_misere is False" in game.observe("player_0")["text"]
    games = play_match(lambda: env("pig", params={"winscore": 10}), BOTS, seeds=[0])
    assert games[0]["player_0"].metadata["outcome"] in ("win", "loss")
    blotto = make_multiagent("llmgym/ma-os-Goofspiel-v0", params={"num_cards": 3})
    assert "1 to 3" in blotto.reset(seed=0)[0]["player_0"]["text"]


def test_an_unknown_name_or_wrong_kind_of_game_errors_clearly():
    with pytest.raises(ValueError, match="unknown OpenSpiel game 'kuhn'.*Did you mean.*kuhn_poker"):
        env("kuhn")
    with pytest.raises(ValueError, match="simultaneous moves: build it with parallel_env"):
        env("goofspiel")
    with pytest.raises(ValueError, match="cannot load"):
        env("nim", params={"no_such_parameter": 1})
    with pytest.raises(ValueError, match="two-player"):
        env("kuhn_poker", params={"players": 3})


class _FailingState:
    """An OpenSpiel state whose next move fails inside OpenSpiel."""

    def __init__(self, state: pyspiel.State):
        self.inner = state

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def apply_action(self, action):
        raise pyspiel.SpielError("engine failure")


class _FailsOnSecondMove(OpenSpielEnv):
    def step(self, action):
        if self.agents and self.history:
            self.state = _FailingState(self.state)
        super().step(action)


def test_an_openspiel_error_ends_that_game_without_crashing_the_match():
    games = play_match(lambda: _FailsOnSecondMove("tic_tac_toe"), BOTS, seeds=[0, 1])
    for game in games:
        for episode in game.values():
            assert episode.metadata["outcome"] == "unfinished" and episode.total_reward == 0.0
        assert "OpenSpiel failed" in game["player_1"].messages[-1]["content"]
    sound = play_match(lambda: env("tic_tac_toe"), BOTS, seeds=[0])
    assert sound[0]["player_0"].metadata["outcome"] in ("win", "draw", "loss")


def test_versus_seats_and_bots():
    seats = set()
    for seed in range(6):
        versus = gym.make("llmgym/os-TicTacToe-v0", seat="random").unwrapped
        observation, _ = versus.reset(seed=seed)
        seats.add(versus.game.seats["player_0"])
        assert "Legal actions:" in observation  # the agent is always to move when it reads its first observation
    assert seats == {0, 1}
    versus = OpenSpielVersusEnv("tic_tac_toe", opponent="mcts", seat=1)
    observation, _ = versus.reset(seed=0)
    assert "You are player 1 of 2" in observation and "player 0 played" in observation
    with pytest.raises(ValueError, match="opponent='random'"):
        OpenSpielVersusEnv("kuhn_poker", opponent="mcts")
    with pytest.raises(ValueError, match="seat must be 0"):
        OpenSpielVersusEnv("goofspiel", params={"num_cards": 3}, seat=1)


def test_mcts_beats_random_at_tic_tac_toe():
    text = OpenSpielText("tic_tac_toe")
    games = play_match(
        lambda: env("tic_tac_toe"), {"player_0": MCTSBot(text, seed=0), "player_1": RandomBot(0)}, seeds=range(4)
    )
    assert [g["player_0"].metadata["outcome"] for g in games].count("loss") == 0


def test_goofspiel_locks_one_action_while_the_other_retries():
    game = OpenSpielParallelEnv("goofspiel", {"num_cards": 3})
    game.reset(seed=0)
    observations, rewards, *_, infos = game.step({"player_0": "[P0]Bid: 2", "player_1": "bid seven"})
    assert infos["player_1"]["needs_action"] and not infos["player_0"]["needs_action"]
    assert "Illegal action" in observations["player_1"]["text"] and rewards["player_1"] == pytest.approx(-0.1)
    observations, *_ = game.step({"player_0": "ignored", "player_1": "[P1]Bid: 1"})
    assert "player 0 [P0]Bid: 2, player 1 [P1]Bid: 1" in observations["player_0"]["text"]
