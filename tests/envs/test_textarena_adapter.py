"""The TextArena adapter: registration, seeding, no history leak, NLTK errors, rewards, cheating, PettingZoo AEC."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import time

import gymnasium as gym
import pytest

pytest.importorskip("textarena")

import llmgym  # noqa: E402  registers the envs
from llmgym.envs.adapters import TA_DEFAULT_GAMES, ta_env_id  # noqa: E402
from llmgym.envs.adapters.textarena import NLTK_DATA, TextArenaEnv, make_game  # noqa: E402

GUESS = "llmgym/ta-GuessTheNumber-v0"


def _binary_search(env: gym.Env) -> float:
    """The honest player of GuessTheNumber: halves the range with each hint; returns the episode's return."""
    lo, hi, total = env.unwrapped.ta_env.min_number, env.unwrapped.ta_env.max_number, 0.0
    while True:
        guess = (lo + hi) // 2
        obs, reward, terminated, truncated, _ = env.step(f"I'll try the middle. [{guess}]")
        total += reward
        if terminated or truncated:
            return total
        lo, hi = (guess + 1, hi) if "higher" in obs else (lo, guess - 1)


def test_default_ids_registered_and_import_is_lazy():
    ids = llmgym.list_envs()
    assert all(ta_env_id(game) in ids for game in TA_DEFAULT_GAMES)
    code = "import sys, llmgym; print('textarena' in sys.modules, 'llmgym.envs.adapters.textarena' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_honest_player_wins_and_cheaters_score_less():
    env = gym.make(GUESS)
    honest = []
    for seed in range(5):
        env.reset(seed=seed)
        honest.append(_binary_search(env))
    assert honest == [1.0] * 5

    def play(actions):
        total = 0.0
        for seed in range(5):
            env.reset(seed=seed)
            for action in actions:
                _, reward, terminated, truncated, _ = env.step(action)
                total += reward
                if terminated or truncated:
                    break
        return total

    cheaters = {
        "claims_win": ["I guessed it, I win!", "Game over: Congratulations! You guessed the correct number."],
        "out_of_range": ["[0]", "[999]"],
        "repeats": ["[7]", "[7]", "[7]"],
        "tool_spam": ['<tool_call>{"name": "win", "arguments": {}}</tool_call>'] * 4,
    }
    for name, actions in cheaters.items():
        assert play(actions) < 0.8 * sum(honest), name


def test_invalid_move_is_penalised_on_its_step():
    env = gym.make(GUESS)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("no brackets here")
    assert not terminated and "invalid move" in obs.lower()
    assert reward == pytest.approx(-0.1) and info["reward_components"]["invalid_move"] == pytest.approx(0.1)
    obs, reward, terminated, _, info = env.step("[10]")
    assert info["reward_components"]["invalid_move"] == 0.0


def _trace(env: gym.Env, seed: int, actions: list[str]) -> list:
    obs, _ = env.reset(seed=seed)
    trace = [obs]
    for action in actions:
        step = env.step(action)
        trace.append(step[:4])
        if step[2] or step[3]:
            break
    return trace


def test_seeded_episodes_repeat_and_leave_the_callers_random_alone():
    env = gym.make("llmgym/ta-Mastermind-v0")
    moves = ["[1 2 3 4]", "[2 3 4 5]", "[3 4 5 6]", "[6 5 4 3]"]
    random.seed(123)
    expected = [random.random() for _ in range(3)]
    random.seed(123)
    first = _trace(env, 7, moves)
    assert [random.random() for _ in range(3)] == expected  # TextArena's draws came from the env's own state
    other = gym.make("llmgym/ta-Mastermind-v0")
    assert _trace(other, 7, moves) == first
    random.random()  # the global state moved: the episode must not care
    assert _trace(env, 7, moves) == first
    secrets = set()
    for seed in range(6):
        env.reset(seed=seed)
        secrets.add(tuple(env.unwrapped.ta_env.state.game_state["secret_code"]))
    assert len(secrets) >= 4


def test_no_history_leak_across_50_episodes():
    env = gym.make(GUESS)
    first_obs, _ = env.reset(seed=3)
    first = _trace(env, 3, ["[10]", "[5]", "oops", "[15]"])
    for episode in range(50):
        obs, info = env.reset(seed=episode)
        assert len(obs) <= len(first_obs) + 20 and len(info["messages"]) == 2
        for guess in ("[10]", "bad move", "[3]"):
            obs, _, terminated, truncated, info = env.step(guess)
            assert len(obs) < 600
            if terminated or truncated:
                break
    assert _trace(env, 3, ["[10]", "[5]", "oops", "[15]"]) == first
    assert env.reset(seed=3)[0] == first_obs


@pytest.mark.parametrize("game", ["Hangman-v0", "Wordle-v0"])
def test_games_needing_nltk_data_fail_fast_naming_it(game):
    import nltk

    folder = game.removesuffix("-v0")
    missing = []
    for path in NLTK_DATA[folder]:
        try:
            nltk.data.find(path)
        except LookupError:
            missing.append(path)
    if not missing:
        pytest.skip(f"the NLTK data for {game} is installed here")
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match=re.escape(missing[0])) as err:
        make_game(game)
    assert "nltk.downloader" in str(err.value)
    assert time.perf_counter() - start < 5


def test_bad_game_ids_fail_clearly():
    with pytest.raises(ValueError, match="unknown TextArena game"):
        TextArenaEnv("NoSuchGame-v0")
    with pytest.raises(ValueError, match="not a single-player game"):
        TextArenaEnv("TicTacToe-v0")
    with pytest.raises(ValueError, match="not supported: its board set-up"):
        make_game("Stratego-v0")
    with pytest.raises(ValueError, match="invalid_penalty"):
        TextArenaEnv("GuessTheNumber-v0", invalid_penalty=-1)


# -- multi-player: PettingZoo AEC ------------------------------------------------------------

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo.test import api_test  # noqa: E402

from llmgym.envs.adapters.textarena_aec import aec_env  # noqa: E402


@pytest.mark.parametrize("game", ["TicTacToe-v0", "Nim-v0", "IteratedPrisonersDilemma-v0"])
def test_aec_api_test(game):
    api_test(aec_env(game), num_cycles=30)


def _play_aec(env, seed: int, moves: dict[str, list[str]]) -> list:
    env.reset(seed=seed)
    trace, queues = [], {agent: list(actions) for agent, actions in moves.items()}
    for agent in env.agent_iter(max_iter=100):
        obs, reward, terminated, truncated, _ = env.last()
        trace.append((agent, obs["text"], reward, terminated, truncated))
        if terminated or truncated:
            env.step(None)
            continue
        env.step(queues[agent].pop(0) if queues[agent] else "[8]")
    return trace


def test_aec_tictactoe_rewards_are_incremental_and_final():
    env = aec_env("TicTacToe-v0")
    # player_0 takes the top row; player_1 plays elsewhere, once illegally (an occupied square)
    trace = _play_aec(env, 0, {"player_0": ["[0]", "[1]", "[2]"], "player_1": ["[0]", "[4]", "[5]"]})
    rewards = {}
    for agent, _, reward, _, _ in trace:
        rewards.setdefault(agent, []).append(reward)
    assert -0.1 in [round(r, 6) for r in rewards["player_1"]]  # the illegal move's penalty, paid on its own step
    final = {agent: rs[-1] for agent, rs in rewards.items()}
    assert final == {"player_0": 1.0, "player_1": -1.0}
    assert "invalid move" in " ".join(text for agent, text, *_ in trace if agent == "player_1").lower()


def test_aec_seeded_and_no_leak_across_resets():
    moves = {"player_0": ["[4]", "[0]", "[8]"], "player_1": ["[1]", "[2]", "[3]"]}
    env = aec_env("TicTacToe-v0")
    first = _play_aec(env, 5, moves)
    for seed in range(50):
        _play_aec(env, seed, moves)
    assert _play_aec(env, 5, moves) == first
    assert _play_aec(aec_env("TicTacToe-v0"), 5, moves) == first
    env.reset(seed=1)
    assert len(env.observe("player_0")["text"]) < 1500  # the rules and the board, nothing from earlier games


def test_aec_bad_player_count():
    with pytest.raises(ValueError, match="cannot be played by 3 players"):
        aec_env("TicTacToe-v0", num_players=3)


#: Games that need neither NLTK data nor an API key and load on Python 3.11 (see docs/adapters.md).
SINGLE = [
    "2048-v0",
    "Bandit-v0",
    "Blackjack-v0",
    "Countdown-v0",
    "Crosswords-v0",
    "Cryptarithm-v0",
    "FifteenPuzzle-v0",
    "FrozenLake-v0",
    "GuessTheNumber-v0",
    "LightsOut-v0",
    "LogicPuzzle-v0",
    "Mastermind-v0",
    "Minesweeper-v0",
    "PegJump-v0",
    "Secretary-v0",
    "Set-v0",
    "Slitherlink-v0",
    "Sokoban-v0",
    "Sudoku-v0",
    "ThreeCardMonte-v0",
    "TowerOfHanoi-v0",
]
MULTI = [
    "Alquerque-v0",
    "Battleship-v0",
    "Breakthrough-v0",
    "Chopsticks-v0",
    "ColonelBlotto-v0",
    "ConnectFour-v0",
    "Crusade-v0",
    "GameOfPureStrategy-v0",
    "GermanWhist-v0",
    "HighSociety-v0",
    "IndianPoker-v0",
    "IteratedMatchingPennies-v0",
    "IteratedPrisonersDilemma-v0",
    "IteratedRockPaperScissors-v0",
    "IteratedTwoThirdsAverage-v0",
    "IteratedUltimatumGame-v0",
    "KuhnPoker-v0",
    "LinesOfAction-v0",
    "MemoryGame-v0",
    "NewRecruit-v0",
    "Nim-v0",
    "Othello-v0",
    "PigDice-v0",
    "SimpleBlindAuction-v0",
    "SimpleNegotiation-v0",
    "SimpleTak-v0",
    "Tak-v0",
    "TicTacToe-v0",
    "TruthAndDeception-v0",
    "TwoDollar-v0",
    "UltimateTicTacToe-v0",
    "WildTicTacToe-v0",
]


@pytest.mark.parametrize("game", SINGLE)
def test_every_nltk_free_single_player_game_runs(game):
    env = TextArenaEnv(game)
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        assert obs
        for action in ["[1]", "hello", "[up]", "[1 2 3 4]", "x" * 50]:
            obs, reward, terminated, truncated, _ = env.step(action)
            assert isinstance(obs, str) and isinstance(reward, float)
            if terminated or truncated:
                break


@pytest.mark.parametrize("game", MULTI)
def test_every_nltk_free_two_player_game_passes_api_test(game):
    api_test(aec_env(game), num_cycles=20)


def test_a_move_written_inside_think_is_not_played_and_not_shown_to_the_opponent():
    # single-agent: reasoning alone is no move (its bracketed guess would have been played before)
    env = gym.make(GUESS)
    env.reset(seed=0)
    observation, *_ = env.step("<think>only thinking: [3]</think>")
    assert "No move found" in observation
    # two players: player_0's reasoning never reaches player_1; its move does
    aec = aec_env("TicTacToe-v0")
    aec.reset(seed=0)
    aec.step("<think>my secret plan: [0] then [8]</think> [4]")
    seen = aec.observe("player_1")["text"]
    assert "secret plan" not in seen and "[Player 0] [4]" in seen


def test_textarena_non_finite_invalid_penalty_is_refused_at_construction():
    import pytest

    pytest.importorskip("textarena")
    from llmgym.envs.adapters.textarena import TextArenaEnv

    for bad in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ValueError, match="invalid_penalty"):
            TextArenaEnv("GuessTheNumber-v0", invalid_penalty=bad)
    env = TextArenaEnv("GuessTheNumber-v0", invalid_penalty=0.0)
    env.reset(seed=0)
    assert env.step("")[1] == 0.0


def test_unknown_textarena_game_lists_only_games_the_adapter_can_make():
    pytest.importorskip("textarena")
    from llmgym.envs.adapters.textarena import make_game

    with pytest.raises(ValueError, match="unknown TextArena game 'BabyAiText-v0'") as err:
        make_game("BabyAiText-v0")  # registered by TextArena, but with no -raw id
    known = str(err.value).split("known: ", 1)[1].split(", ")
    assert "BabyAiText-v0" not in known and "TicTacToe-v0" in known and "Taboo-v0-city/country" in known


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Chess-v0 compiles on Python >= 3.12")
def test_textarena_game_needing_a_newer_python_fails_with_one_clear_error():
    pytest.importorskip("textarena")
    from llmgym.envs.adapters.textarena_aec import aec_env

    with pytest.raises(
        RuntimeError, match=r"'Chess-v0' cannot be imported on Python 3\.\d+: its code has a SyntaxError"
    ):
        aec_env("Chess-v0")
    with pytest.raises(RuntimeError, match="'Klondike-v0' cannot be imported"):
        gym.make("llmgym/ta-GuessTheNumber-v0", game="Klondike-v0")


def _textarena_totals(game, num_players, moves_of):
    from llmgym.envs.adapters.textarena_aec import aec_env

    env = aec_env(game, num_players=num_players)
    env.reset(seed=0)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter(40):
        _, reward, terminated, truncated, _ = env.last()
        totals[agent] += reward
        env.step(None if terminated or truncated else moves_of(agent))
    return totals


def test_textarena_invalid_move_that_eliminates_a_player_is_charged():
    """Regression: Liar's Dice goes on after player_0's second invalid move eliminates it; that move used to cost
    nothing."""
    pytest.importorskip("textarena")
    totals = _textarena_totals("LiarsDice-v0", 3, lambda agent: "garbage" if agent == "player_0" else "[4]")
    # eliminated first (-1) and second (0), each after two invalid moves (-0.1 each); player_2 wins (+1)
    assert totals == pytest.approx({"player_0": -1.2, "player_1": -0.2, "player_2": 1.0})
    # two players: the losing second invalid move is charged once, as before
    two = _textarena_totals("TicTacToe-v0", 2, lambda agent: "garbage")
    assert two == pytest.approx({"player_0": -1.2, "player_1": 1.0})
