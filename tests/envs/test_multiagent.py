"""Tests for the multi-agent text games, their single-agent versions and multi-agent rollouts."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo import ParallelEnv
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.test.seed_test import parallel_seed_test, seed_test

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.multiagent import (
    MULTIAGENT_ENVS,
    MULTIAGENT_KINDS,
    connect_four,
    connect_four_v0,
    make_multiagent,
    negotiation,
    negotiation_v0,
    prisoners_dilemma,
    prisoners_dilemma_v0,
    tictactoe,
    tictactoe_v0,
)
from llmgym.envs.multiagent.base import play_human
from llmgym.envs.multiagent.rollout import play_match, win_matrix
from llmgym.policy import Generation, Policy, PolicyRequest

AEC_FACTORIES = [tictactoe_v0.env, connect_four_v0.env, negotiation_v0.env]
SINGLE_IDS = ["llmgym/TicTacToe-v0", "llmgym/ConnectFour-v0", "llmgym/Negotiation-v0", "llmgym/PrisonersDilemma-v0"]
GARBAGE = [
    "",
    " ",
    "\n\n",
    "🙂" * 50,
    "x" * 20_000,
    "<tool_call>",
    "</tool_call>",
    "<tool_call>{not json}</tool_call>",
    '<tool_call>{"name": "move"}</tool_call>',
    '<tool_call>{"name": "move", "arguments": []}</tool_call>',
    '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
    '<tool_call>["a", 1]</tool_call>',
    '<tool_call>{"name": "move", "arguments": {"cell": 7, "column": "x"}}</tool_call>',
    '<tool_call>{"name": "propose", "arguments": '
    '{"books": -1, "hats": 99999999999999999999, "balls": "a"}}</tool_call>',
    '<tool_call>{"name": "play", "arguments": {"move": "X"}}</tool_call>',
    "column 99999999999999999999999",
    "I win! Game over, player_0 is the winner.",
    "\x00\x01\x02",
    "a1 b2 c3",
    "1 2 3 4 5 6 7",
    {"role": "assistant", "content": None, "tool_calls": "nope"},
    {"role": "assistant", "content": 5},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "move", "arguments": "{bad"}}]},
]


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns that text observations are not numpy arrays
        return fn(*args, **kwargs)


def _play(game, players, seed=0):
    """Play an AEC game to the end with scripted players; returns each agent's total reward."""
    game.reset(seed=seed)
    totals = dict.fromkeys(game.possible_agents, 0.0)
    for agent in game.agent_iter(10_000):
        _, reward, terminated, truncated, _ = game.last()
        totals[agent] += reward
        game.step(None if terminated or truncated else players[agent].act(game, agent))
    return totals


class RandomCell:
    name = "random"

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def act(self, env, agent):
        return str(self.rng.choice(env.unwrapped.empty_cells()))


class RandomColumn:
    name = "random"

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def act(self, env, agent):
        return f"column {self.rng.choice(env.unwrapped.open_columns())}"


class Say:
    """A scripted player that always writes the same text."""

    def __init__(self, text, name="say"):
        self.text, self.name = text, name

    def act(self, env, agent):
        return self.text


# -- PettingZoo API --------------------------------------------------------------------


@pytest.mark.parametrize("factory", AEC_FACTORIES)
def test_aec_api_and_seeds(factory):
    _quiet(api_test, factory(), num_cycles=100)
    _quiet(seed_test, factory, num_cycles=50)
    game = factory()
    game.reset(seed=0)
    assert game.possible_agents == ["player_0", "player_1"]
    for agent in game.possible_agents:
        assert game.observation_space(agent) is game.observation_space(agent)
        assert game.action_space(agent) is game.action_space(agent)
        assert game.observation_space(agent).contains(game.observe(agent))
    assert all(type(v) is bool for v in [*game.terminations.values(), *game.truncations.values()])


def test_parallel_api_and_seeds():
    _quiet(parallel_api_test, prisoners_dilemma_v0.parallel_env(), num_cycles=60)
    _quiet(parallel_api_test, prisoners_dilemma_v0.parallel_env(num_rounds=(2, 6)), num_cycles=60)
    _quiet(parallel_seed_test, prisoners_dilemma_v0.parallel_env)


def test_multiagent_registry_builds_every_id():
    assert set(MULTIAGENT_ENVS) == set(MULTIAGENT_KINDS)
    for env_id, kind in MULTIAGENT_KINDS.items():
        game = make_multiagent(env_id)
        assert (kind == "parallel") == isinstance(game, ParallelEnv)
    with pytest.raises(ValueError, match="known"):
        make_multiagent("llmgym/ma-Chess-v0")


# -- game rules and scripted players ---------------------------------------------------


def test_tictactoe_minimax_never_loses():
    for seed in range(6):
        assert _play(
            tictactoe.env(),
            {"player_0": tictactoe.MinimaxPlayer(seed), "player_1": tictactoe.MinimaxPlayer(seed + 1)},
            seed,
        ) == {"player_0": 0.0, "player_1": 0.0}
        vs_random = _play(
            tictactoe.env(), {"player_0": RandomCell(seed), "player_1": tictactoe.MinimaxPlayer(seed)}, seed
        )
        assert vs_random["player_1"] >= 0.0


@pytest.mark.parametrize(
    "action",
    [
        "b2",
        "B2",
        "I take the centre.\nB2.",
        "move: b2",
        '<tool_call>{"name": "move", "arguments": {"cell": "b2"}}</tool_call>',
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "move", "arguments": '{"cell": "b2"}'}}
            ],
        },
    ],
)
def test_tictactoe_reads_plain_text_and_tool_calls(action):
    game = tictactoe.env()
    game.reset(seed=0)
    game.step(action)
    assert game.board == "....X...." and game.agent_selection == "player_1"


def test_illegal_moves_cost_and_retry_then_forfeit():
    game = tictactoe.env()
    game.reset(seed=0)
    game.step("b2")
    game.step("b2")  # taken
    assert game.agent_selection == "player_1" and game.rewards["player_1"] == pytest.approx(-0.1)
    assert "Illegal move: b2 is taken" in game.observe("player_1")["text"]
    game.step("a1 and c3")  # two cells
    game.step("I win!")  # no cell: the third illegal attempt in a row forfeits
    assert game.terminations == {"player_0": True, "player_1": True}
    assert game.winner == "player_0" and game.forfeited == "player_1"
    assert game._cumulative_rewards["player_1"] == pytest.approx(-1.1)
    assert game.outcome() == {"player_0": "win", "player_1": "loss"}
    with pytest.raises(ValueError, match="when an agent is dead, the only valid action is None"):
        game.step("a1")  # a dead agent's only valid action is None
    fresh = tictactoe.env()
    fresh.reset()
    with pytest.raises(TypeError, match="its action must be str or an assistant message dict, got int"):
        fresh.step(4)  # a programming error, not an agent's mistake


def test_connect_four_rules_and_negamax():
    game = connect_four.env()
    game.reset(options={"moves": [1, 1, 1, 1, 1, 1]})
    game.step("column 1")  # full
    assert "column 1 is full" in game.observe("player_0")["text"]
    game.step("I play column 4 because column 3 is weaker")  # two columns named: ambiguous, illegal
    assert game.columns[3] == "" and game.agent_selection == "player_0"
    game.step("4")
    assert game.columns[3] == "X" and game.agent_selection == "player_1"
    assert connect_four.best_column(["XXX", "OO", "", "", "", "", ""], "O", depth=3) == 0  # blocks
    for seed in range(3):
        result = _play(
            connect_four.env(), {"player_0": RandomColumn(seed), "player_1": connect_four.NegamaxPlayer(4)}, seed
        )
        assert result["player_1"] == 1.0


def test_negotiation_deals_values_and_accept_rules():
    game = negotiation.env()
    game.reset(seed=3)
    for agent in game.possible_agents:
        assert sum(c * v for c, v in zip(game.counts, game.values[agent])) == negotiation.TOTAL_VALUE
        assert "private values" in game.observe("player_0")["text"]
    game.step("I accept")  # nothing on the table
    assert game.agent_selection == "player_0" and game.rewards["player_0"] == pytest.approx(-0.1)
    game.step("Fair split?\nI propose: 1 book, 0 hats")
    assert game.proposal == ("player_0", (1, 0, 0))
    assert "player_0 says: Fair split?" in game.observe("player_1")["text"]
    game.step('<tool_call>{"name": "accept", "arguments": {}}</tool_call>')
    rest = tuple(c - t for c, t in zip(game.counts, (1, 0, 0)))
    assert game.deal == {"player_0": (1, 0, 0), "player_1": rest}
    assert game.rewards["player_1"] == pytest.approx(game.value("player_1", rest) / 10)
    deals = [
        _play(negotiation.env(), {"player_0": negotiation.HagglerPlayer(), "player_1": negotiation.HagglerPlayer()}, s)
        for s in range(5)
    ]
    assert all(r["player_0"] > 0 and r["player_1"] > 0 for r in deals)


def test_prisoners_dilemma_payoffs_messages_and_hold():
    game = prisoners_dilemma.parallel_env(num_rounds=3)
    game.reset(seed=0)
    obs, rewards, *_ = game.step(
        {
            "player_0": "Let's both cooperate.\nC",
            "player_1": '<tool_call>{"name": "play", "arguments": {"move": "D", "message": "sorry"}}</tool_call>',
        }
    )
    assert rewards == {"player_0": 0.0, "player_1": 5.0}
    assert "player_1 says: sorry" in obs["player_0"]["text"] and "Let's both cooperate." in obs["player_1"]["text"]
    obs, rewards, _, _, infos = game.step({"player_0": "C", "player_1": "maybe"})  # player_1 illegal: player_0 waits
    assert rewards == {"player_0": 0.0, "player_1": -1.0} and len(game.history) == 1
    assert infos["player_0"]["needs_action"] is False and infos["player_1"]["needs_action"] is True
    obs, rewards, *_ = game.step({"player_0": "D", "player_1": "C"})  # player_0's D is ignored: C stays locked in
    assert game.history[-1] == {"player_0": "C", "player_1": "C"} and rewards == {"player_0": 3.0, "player_1": 3.0}
    hidden = prisoners_dilemma.parallel_env(num_rounds=(3, 9))
    lengths = {hidden.reset(seed=s)[0] and hidden.num_rounds for s in range(20)}
    assert len(lengths) > 1 and all(3 <= n <= 9 for n in lengths)
    assert "not told" in hidden.reset(seed=0)[0]["player_0"]["text"]


# -- fuzz and determinism --------------------------------------------------------------


@pytest.mark.parametrize("factory", AEC_FACTORIES)
def test_aec_fuzz_never_raises(factory):
    game = factory()
    game.reset(seed=1)
    for action in GARBAGE * 2:
        if not game.agents:
            game.reset(seed=2)
        agent = game.agent_selection
        game.step(None if game.terminations[agent] else action)
        assert game.observation_space(agent).contains(game.observe(agent))


def test_parallel_fuzz_never_raises():
    game = prisoners_dilemma.parallel_env()
    game.reset(seed=1)
    for action in GARBAGE:
        if not game.agents:
            game.reset(seed=2)
        obs, *_ = game.step({a: action for a in game.agents})
        assert all(game.observation_space(a).contains(o) for a, o in obs.items())


@pytest.mark.parametrize("env_id", SINGLE_IDS)
def test_single_agent_check_env_fuzz_and_determinism(env_id):
    env = gym.make(env_id)
    _quiet(check_env, env.unwrapped)
    runs = []
    for _ in range(2):
        obs, info = env.reset(seed=7)
        trace = [obs]
        for action in GARBAGE[:8] + ["b2", "column 4", "I propose: 1 book", "C"]:
            obs, reward, terminated, truncated, info = env.step(action)
            trace.append((obs, reward, terminated, truncated))
            if terminated or truncated:
                obs, info = env.reset(seed=8)
        runs.append(trace)
    assert runs[0] == runs[1]


# -- cheating must not pay -------------------------------------------------------------


def _single_agent_return(env_id, actor, seed=0):
    env = gym.make(env_id)
    env.reset(seed=seed)
    game = env.unwrapped.game
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(actor(game))
        total += reward
        done = terminated or truncated
    return total


def test_cheating_scores_below_honest_play_tictactoe():
    honest = [
        _single_agent_return("llmgym/TicTacToe-v0", lambda g: tictactoe.MinimaxPlayer(1).act(g, "player_0"), s)
        for s in range(3)
    ]
    assert honest == [0.0, 0.0, 0.0]  # perfect play against perfect play: a draw
    cheats = {
        "claims a win": lambda g: "I win! Three in a row, the game is over.",
        "illegal spam": lambda g: "b2",
        "two moves at once": lambda g: "a1 b1 c1",
        "plays for the opponent": lambda g: (
            '<tool_call>{"name": "move", "arguments": {"cell": "a1", "player": "player_1"}}</tool_call>'
        ),
        "out-of-turn double call": lambda g: (
            '<tool_call>{"name": "move", "arguments": {"cell": "a1"}}</tool_call>'
            '<tool_call>{"name": "move", "arguments": {"cell": "b1"}}</tool_call>'
        ),
    }
    for name, cheat in cheats.items():
        assert _single_agent_return("llmgym/TicTacToe-v0", cheat) <= -1.0, name


def test_cheating_scores_below_honest_play_in_aec_games():
    honest = _play(
        connect_four.env(), {"player_0": connect_four.NegamaxPlayer(2), "player_1": connect_four.NegamaxPlayer(2)}
    )
    spam = _play(connect_four.env(), {"player_0": Say("column 9"), "player_1": connect_four.NegamaxPlayer(2)})
    assert spam["player_0"] < min(honest.values()) - 0.2
    haggler = negotiation.HagglerPlayer()
    for seed in range(3):
        fair = _play(negotiation.env(), {"player_0": haggler, "player_1": haggler}, seed)["player_0"]
        claim = _play(
            negotiation.env(),
            {"player_0": Say("Deal! We agreed I get all 4 books, 9 hats and 9 balls."), "player_1": haggler},
            seed,
        )["player_0"]
        greedy = _play(
            negotiation.env(), {"player_0": Say("I propose: 9 books, 9 hats, 9 balls"), "player_1": haggler}, seed
        )["player_0"]
        assert claim < 0 < fair and greedy < fair


def test_cheating_does_not_pay_in_prisoners_dilemma():
    def total(p0, p1):
        game = prisoners_dilemma.parallel_env()
        game.reset(seed=0)
        score = 0.0
        while game.agents:
            _, rewards, *_ = game.step({"player_0": p0.act(game, "player_0"), "player_1": p1.act(game, "player_1")})
            score += rewards["player_0"]
        return score

    tft = prisoners_dilemma.TitForTat()
    honest = total(tft, tft)
    assert honest == 30.0
    assert total(Say("We both cooperated, I get 5 this round.\nC and D"), tft) < 0
    assert total(prisoners_dilemma.AlwaysDefect(), tft) < honest


# -- rollouts ----------------------------------------------------------------------------


class ByteBoardPolicy(Policy):
    """A real (if simple) policy: reads the last board in its chat, takes the first empty cell.

    It tokenizes text as UTF-8 bytes and keeps the prefix contract, so the rollout's
    token bookkeeping is exercised end to end.
    """

    name = "first-empty"
    returns_tokens = True

    async def agenerate(self, request: PolicyRequest) -> Generation:
        last = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        rows = [line for line in last.splitlines() if line[:1] in "123" and len(line) == 8][-3:]
        board = "".join(row[3:].replace(" ", "") for row in rows)
        cell = tictactoe.cell_name(board.index("."))
        prefix = request.prefix_token_ids or []
        new = [m for m in request.messages[_after_last_assistant(request.messages) :]]
        prompt = prefix + list(json.dumps(new).encode())
        generated = list(cell.encode())
        return Generation(
            {"role": "assistant", "content": cell},
            prompt_token_ids=prompt,
            token_ids=generated,
            logprobs=[-0.5] * len(generated),
        )


def _after_last_assistant(messages):
    indices = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return indices[-1] + 1 if indices else 0


def test_play_match_policy_vs_scripted_records_per_agent_episodes():
    policy = ByteBoardPolicy()
    games = play_match(
        tictactoe.env,
        {"player_0": policy, "player_1": tictactoe.MinimaxPlayer(0)},
        seeds=[0, 1, 2],
        env_id="llmgym/ma-TicTacToe-v0",
    )
    assert len(games) == 3
    for game in games:
        mine, theirs = game["player_0"], game["player_1"]
        assert mine.metadata["outcome"] == "loss" and theirs.metadata["outcome"] == "win"
        assert mine.total_reward == -1.0 and theirs.total_reward == 1.0
        assert mine.policy == "first-empty" and mine.metadata["players"] == {
            "player_0": "first-empty",
            "player_1": "minimax",
        }
        actions = [m["content"] for m in mine.messages if m["role"] == "assistant"]
        assert len(actions) == mine.num_turns == len(mine.turn_spans)
        generated = [bytes(mine.token_ids[a:b]).decode() for a, b in mine.turn_spans]
        assert generated == actions and sum(mine.mask) == sum(len(a) for a in actions)
        assert mine.messages[0]["role"] == "system" and mine.messages[-1]["content"].endswith("player_1 wins.")
        assert llmgym.Episode.from_json(mine.to_json()) == mine


def test_self_play_and_win_matrix():
    policy = ByteBoardPolicy()
    games = play_match(tictactoe.env, {"player_0": policy, "player_1": policy}, seeds=[0])
    assert games[0]["player_0"].metadata["outcome"] == "win"  # first-empty as X completes the top row first
    matrix, all_games = win_matrix(
        tictactoe.env, {"minimax": tictactoe.MinimaxPlayer(0), "first-empty": policy}, seeds=[0, 1]
    )
    assert matrix.counts["minimax"]["first-empty"] == {"win": 4, "draw": 0, "loss": 0}
    assert matrix.counts["first-empty"]["minimax"] == {"win": 0, "draw": 0, "loss": 4}
    assert matrix.score("minimax", "first-empty") == 1.0 and len(all_games) == 4
    assert "4/0/0" in matrix.format() and matrix.mean_reward["minimax"]["first-empty"] == 1.0
    ipd, _ = win_matrix(
        prisoners_dilemma.parallel_env,
        {"tft": prisoners_dilemma.TitForTat(), "defect": prisoners_dilemma.AlwaysDefect()},
        seeds=[0],
    )
    assert ipd.counts["defect"]["tft"]["win"] == 2  # defecting wins the head-to-head...
    with pytest.raises(ValueError, match="missing"):
        play_match(tictactoe.env, {"player_0": policy}, seeds=[0])


def test_matches_also_run_from_inside_a_running_event_loop():
    # as in a notebook: asyncio.run would refuse; play_match and win_matrix run their loop in a thread instead
    import asyncio

    policy = ByteBoardPolicy()

    async def notebook_cell():
        games = play_match(tictactoe.env, {"player_0": policy, "player_1": policy}, seeds=[0])
        matrix, _ = win_matrix(tictactoe.env, {"minimax": tictactoe.MinimaxPlayer(0), "first-empty": policy}, seeds=[0])
        return games, matrix

    games, matrix = asyncio.run(notebook_cell())
    assert games[0]["player_0"].metadata["outcome"] == "win"
    assert matrix.counts["minimax"]["first-empty"] == {"win": 2, "draw": 0, "loss": 0}


def test_play_human_reads_moves_from_the_terminal(monkeypatch, capsys):
    moves = iter(["b2", "oops", "a1", "a3", "c2", "b3", "c3", "c1", "a2"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(moves))
    totals = play_human(tictactoe.env(), opponent=tictactoe.MinimaxPlayer(0), seed=0)
    assert totals["player_0"] <= 0.0 and "Total rewards" in capsys.readouterr().out


class BrokenPolicy(Policy):
    name = "broken"

    async def agenerate(self, request: PolicyRequest) -> Generation:
        raise ConnectionError("server went away")


def test_play_match_groups_and_policy_failures():
    games = play_match(
        tictactoe.env,
        {"player_0": ByteBoardPolicy(), "player_1": tictactoe.MinimaxPlayer(0)},
        seeds=[5, 6],
        group_size=2,
    )
    assert [g["player_0"].group for g in games] == [0, 0, 1, 1] and [g["player_1"].seed for g in games] == [5, 5, 6, 6]
    failed = play_match(tictactoe.env, {"player_0": BrokenPolicy(), "player_1": tictactoe.MinimaxPlayer(0)}, seeds=[0])[
        0
    ]
    assert failed["player_0"].truncated and "server went away" in failed["player_0"].metadata["error"]
    assert failed["player_1"].metadata["outcome"] == "unfinished"
    with pytest.raises(TypeError, match="Policy or have act"):
        play_match(tictactoe.env, {"player_0": object(), "player_1": tictactoe.MinimaxPlayer(0)}, seeds=[0])


def test_prisoners_dilemma_both_forfeit_at_once():
    game = prisoners_dilemma.parallel_env()
    game.reset(seed=0)
    for _ in range(3):
        _, rewards, terminations, *_ = game.step({"player_0": "?", "player_1": "??"})
    assert terminations == {"player_0": True, "player_1": True} and rewards == {"player_0": -6.0, "player_1": -6.0}
    assert game.outcome() == {"player_0": "loss", "player_1": "loss"} and not game.agents


@pytest.mark.slow  # loading the SmolLM2 tokenizer takes ~25 s on the shared CPU
def test_llm_self_play_episodes_feed_the_grpo_trainer():
    """A real transformers policy (tiny random Llama) in both seats; its episodes go through GRPO's advantages and
    collate."""
    pytest.importorskip("transformers")
    from llmgym.policy import SamplingParams
    from llmgym.trainers.advantages import compute_advantages
    from llmgym.trainers.batch import collate
    from llmgym.wrappers.models import tiny_random_model
    from llmgym.wrappers.transformers_policy import TransformersPolicy

    policy = TransformersPolicy(*tiny_random_model(seed=0), batch_size=8)
    sampling = SamplingParams(max_tokens=6, temperature=1.0, seed=0)
    games = play_match(
        tictactoe.env, {"player_0": policy, "player_1": policy}, seeds=[0, 1], group_size=2, sampling=sampling
    )
    games += play_match(
        prisoners_dilemma.parallel_env,
        {"player_0": policy, "player_1": prisoners_dilemma.TitForTat()},
        seeds=[0],
        sampling=sampling,
    )
    episodes = [
        game[agent] for game in games for agent in game if game[agent].policy == policy.name and game[agent].num_turns
    ]
    assert episodes and all(
        len(e.token_ids) == len(e.mask) == len(e.logprobs) and len(e.turn_spans) == e.num_turns for e in episodes
    )
    assert all(e.metadata["outcome"] in ("win", "draw", "loss") for e in episodes)
    advantages = compute_advantages(episodes)
    batch = collate(episodes, advantages.token_advantages)
    assert batch.input_ids.shape[0] == len(episodes) and int(batch.mask.sum()) == sum(sum(e.mask) for e in episodes)


def test_text_players_work_as_scripted_policies_on_the_single_agent_envs():
    from llmgym.rollout import rollout
    from llmgym.wrappers.scripted import load_scripted

    ttt = rollout(
        "llmgym/TicTacToe-v0", load_scripted("llmgym.envs.multiagent.tictactoe:TextMinimaxPlayer"), seeds=[0, 1, 2]
    )
    assert [e.total_reward for e in ttt] == [0.0, 0.0, 0.0] and all(e.terminated for e in ttt)
    c4 = rollout(
        "llmgym/ConnectFour-v0",
        load_scripted("llmgym.envs.multiagent.connect_four:TextNegamaxPlayer"),
        seeds=[0],
        env_kwargs={"depth": 2},
    )
    assert c4[0].terminated and c4[0].component_totals()["game"] == 1.0  # depth-6 search beats a depth-2 opponent


def test_rollout_chat_states_the_rules_once():
    game = play_match(
        negotiation.env, {"player_0": negotiation.HagglerPlayer(), "player_1": negotiation.HagglerPlayer()}, seeds=[0]
    )[0]
    for episode in game.values():
        system, first = episode.messages[0]["content"], episode.messages[1]["content"]
        assert system == negotiation.NegotiationEnv.system_prompt and system not in first and "private values" in first
