"""Self-play GRPO, measured: SmolLM2-135M, warmed up on legal moves, plays itself; every checkpoint is evaluated.

Every stage is one of llmgym's public commands, run as a subprocess and printed before it runs
(``benchmarks/stages.py``), in ``OUT/<game>/`` for each of ``--games`` (Kuhn poker by default;
``tictactoe`` adds OpenSpiel's Tic-Tac-Toe):

1. ``eval-base``: ``llmgym eval <ma-id> --opponent random --opponent <bot>``: the base model against
   a uniformly random player and against the game's bot, ``eval_seeds`` seeds in each seat
   (200 games per opponent), the same seeds for every model;
2. ``exploitability-base`` (Kuhn): ``llmgym exploitability``: the base model's NashConv;
3. ``teacher``: ``llmgym eval <ma-id> --policy scripted:legal-random --opponent scripted:random``,
   ``teacher_seeds`` seeds in each seat: games in which both players answer with one legal action;
4. ``sft``: ``llmgym train sft --lora`` on every teacher episode, ``sft_epochs`` epochs. The base
   model answers with a legal move about 2% of the time, so in most GRPO groups every game ends the
   same way (the first mover forfeits) and self-play has no signal; the warm-up teaches the format
   of a legal move, not which move is good (no ``--min-reward``: that is GRPO's to learn);
5. ``eval-sft`` and ``exploitability-sft``: the evaluations of the SFT adapter;
6. ``grpo``: ``llmgym train grpo <ma-id> --lora --init-adapter sft/final --opponents ...``: one policy
   on both seats from the SFT adapter, a frozen snapshot of its LoRA weights every ``snapshot_every``
   steps into ``grpo/pool/step-<n>`` (the pool keeps them all, so every checkpoint can be evaluated),
   decoding on bf16 copies with a KV cache slot per episode (``rollout_precision``);
7. ``eval-step<N>`` and ``exploitability-step<N>`` for each snapshot (and the final adapter);
8. ``league``: ``llmgym league`` of the base model, the SFT adapter, every checkpoint, random and the
   bot, round robin in both seats, rated with openskill (the rating curve: each checkpoint's ordinal).

The bots: in Kuhn poker :class:`CFRBot`, which samples OpenSpiel's CFR average policy (300
iterations, NashConv 0.006: a near-Nash player no strategy beats on average over both seats; the
stages import it from this file, ``scripted:self_play:CFRBot``, with the script's folder on their
``PYTHONPATH``); in Tic-Tac-Toe the game's own ``scripted:mcts`` (OpenSpiel's MCTS, 200 simulations).

The report, per game and per point (base, SFT, each checkpoint): the legal-action rate (the model's
replies that named one legal action, of all it wrote), the win rate and mean return against random
and against the bot, each with a 95% CI over the 200 games (1.96 x standard error), the NashConv
beside uniform random's (0.9167 in Kuhn) and CFR's, and the league's mu, sigma and ordinal; the
paired differences against random (game by game, paired by seed and seat) final - base, sft - base
and final - sft, and each stage's wall time. ``benchmarks/results/self_play.json`` and a PNG beside it.

The defaults are sized to 90 minutes on the shared 2-core machine at 2 torch threads; the
arithmetic, from what was measured there, is in docs/self-play.md (The budget).

Run (``--tiny --model tiny-random`` exercises every stage in about three minutes)::

    python benchmarks/self_play.py [--out runs/self_play] [--games kuhn tictactoe]
    python benchmarks/self_play.py --tiny --model tiny-random --out /tmp/sp --results /tmp/sp.json

Each stage leaves ``stage.json`` when it finishes and a rerun skips it; a killed GRPO run resumes with
its snapshot pool (``--resume``), a killed teacher, SFT, evaluation, exploitability or league starts
over (a multi-agent evaluation has no ``--resume``). ``--steps`` above a finished run's trains on from
its last checkpoint; when the teacher, SFT or GRPO stage runs again, every stage after it runs again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import time
import zlib
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from stages import flags, mean_ci, run_stage  # benchmarks/stages.py: the script's own folder is on sys.path

from llmgym.episode import iter_jsonl

__all__ = ["CFRBot", "GAMES", "Recipe", "stages", "run", "report", "main"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = ROOT / "benchmarks" / "results" / "self_play.json"
RANDOM = "scripted:random"  # OpenSpiel's uniformly random legal move


class CFRBot:
    """Samples OpenSpiel's CFR average policy (near a Nash equilibrium) in a small game of imperfect information.

    The policy is solved once per process and game (300 iterations: 0.7 s in Kuhn poker); each action is drawn
    with entropy from the bot's seed, the game's seed and the history, so a seed replays a game.

    Args:
        seed: varies the draws.
        iterations: CFR iterations.
    """

    name = "cfr"

    def __init__(self, seed: int = 0, iterations: int = 300):
        self.seed, self.iterations = seed, iterations

    def act(self, env: Any, agent: str) -> str:
        game = env.unwrapped
        player = game.seats[agent]
        policy = _cfr_policy(str(game.text.game), self.iterations)
        probabilities = policy.action_probabilities(game.state, player)
        legal = game.state.legal_actions(player)
        game_seed = zlib.crc32(repr(game.np_random.bit_generator.state).encode())
        rng = np.random.default_rng([self.seed, game_seed, zlib.crc32(str(game.state.history()).encode())])
        weights = np.array([probabilities.get(action, 0.0) for action in legal])
        choice = int(rng.choice(len(legal), p=weights / weights.sum()))
        return game.text.action_names(game.state, player)[choice]


@lru_cache(maxsize=4)
def _cfr_policy(game: str, iterations: int) -> Any:
    import pyspiel

    from llmgym.envs.multiagent.exploitability import cfr_policy

    return cfr_policy(pyspiel.load_game(game), iterations)


@dataclasses.dataclass(frozen=True)
class Game:
    """A game of the experiment: its id, its bot, and whether its NashConv can be computed."""

    env_id: str
    bot: str
    exploitability: bool


GAMES = {
    "kuhn": Game("llmgym/ma-os-KuhnPoker-v0", "scripted:self_play:CFRBot", exploitability=True),
    "tictactoe": Game("llmgym/ma-os-TicTacToe-v0", "scripted:mcts", exploitability=False),
}


@dataclasses.dataclass
class Recipe:
    """What each stage runs; the defaults are the experiment's."""

    model: str = "smollm2"
    games: tuple[str, ...] = ("kuhn",)
    teacher_seeds: int = 50
    """Seeds in each seat of the teacher's games against random: 100 games, each seat's replies all legal (in Kuhn
    poker about 115 of the teacher's and as many of random's, every episode kept for SFT)."""
    teacher_seed: int = 0
    sft_epochs: int = 2
    """Short: the replies are single words, and the format is what the warm-up is for."""
    sft_lr: float = 5e-4
    sft_batch_size: int = 8
    steps: int = 32
    snapshot_every: int = 16
    """Steps between frozen snapshots: the pool's opponents and the evaluated checkpoints."""
    opponents: str = "self=0.5,pool=0.3,random=0.2"
    pool_size: int = 8
    """Snapshots the pool keeps: every one up to 112 steps, the initial weights too, so each checkpoint stays on disk
    for its evaluation (a run trained on with ``--steps`` keeps its command, which only ``--steps`` may change)."""
    group_size: int = 8
    prompts_per_step: int = 2
    lr: float = 1e-4
    temperature: float = 1.0
    max_new_tokens: int = 8
    rollout_precision: str = "auto"
    """How GRPO decodes (``GRPOConfig.rollout_precision``): ``bf16`` is a bf16 copy with a KV cache slot per episode,
    so a turn evaluates only what the slots do not hold (the rules every chat shares, the chat so far), not the whole
    chat; ``auto`` takes it where a probe of this machine (:func:`~llmgym.wrappers.hardware.matmul_rates`) finds bf16
    products faster than fp32's, else ``fp32`` (on a CPU without bf16 units bf16 products ran 60x slower)."""
    rate_every: int = 0
    """Steps between the trainer's own rating rounds (0: off; the final league rates every checkpoint)."""
    rate_games: int = 4
    eval_seeds: int = 100
    """Seeds per opponent and seat: 2 x 100 = 200 games against each opponent."""
    eval_seed: int = 100_000
    eval_temperature: float = 1.0
    """Sampling temperature of the evaluations and the league: the policy as it trained."""
    league_seeds: int = 10
    """Seeds per pair and seat in the league: 5 players, 10 pairs, 200 games."""
    backend: str = "llama.cpp"
    """The evaluations' and the league's backend: the shipped GGUF with each adapter as GGUF LoRA, decoded 16 games
    at a time in bf16 on the torch engine (4.5x faster than ``transformers`` on 8 Kuhn games: 16 s against 72 s)."""
    concurrency: int = 16
    torch_threads: int = 2

    @classmethod
    def tiny(cls, model: str) -> Recipe:
        """Budgets that run every stage in about three minutes (for tests and trying the script)."""
        return cls(
            model=model,
            teacher_seeds=2,
            sft_epochs=1,
            steps=2,
            snapshot_every=1,
            group_size=2,
            prompts_per_step=1,
            eval_seeds=2,
            league_seeds=1,
            backend="transformers",  # tiny-random's llama.cpp form has other weights than the one trained
        )

    def checkpoints(self) -> list[int]:
        """The evaluated steps: every snapshot, and the last step."""
        return sorted({*range(self.snapshot_every, self.steps + 1, self.snapshot_every), self.steps})


def adapter(out: Path, recipe: Recipe, step: int) -> Path:
    """The LoRA adapter of ``step``: its frozen snapshot, or the final adapter after the last step."""
    return out / "grpo" / "final" if step == recipe.steps else out / "grpo" / "pool" / f"step-{step}"


def stages(recipe: Recipe, game_name: str, out: Path) -> dict[str, list[str]]:
    """Each stage's ``llmgym`` arguments for one game, in order."""
    game = GAMES[game_name]
    warm = out / "sft" / "final"  # the SFT adapter: where GRPO starts
    runs = {"eval-base": _evaluation(recipe, game, recipe.model, out / "eval-base")}
    if game.exploitability:
        runs["exploitability-base"] = _exploitability(recipe, game, None, out / "exploitability-base")
    runs["teacher"] = _teacher(recipe, game, out / "teacher")
    runs["sft"] = _sft(recipe, out / "teacher" / "episodes.jsonl", out / "sft")
    checkpoints = {"sft": warm, **{f"step{step}": adapter(out, recipe, step) for step in recipe.checkpoints()}}
    for name, weights in checkpoints.items():
        runs[f"eval-{name}"] = _evaluation(recipe, game, str(weights), out / f"eval-{name}")
        if game.exploitability:
            runs[f"exploitability-{name}"] = _exploitability(recipe, game, weights, out / f"exploitability-{name}")
        if name == "sft":
            runs["grpo"] = _grpo(recipe, game, warm, out / "grpo")
    players = {"base": recipe.model, **{name: str(weights) for name, weights in checkpoints.items()}}
    league = [f"--player={name}=local:{recipe.backend}:{model}" for name, model in players.items()]
    league += [f"--player=random={RANDOM}", f"--player=bot={game.bot}"]
    league += flags(games_per_pair=recipe.league_seeds, seed=recipe.eval_seed, **_sampling(recipe))
    runs["league"] = ["league", game.env_id, *league, "--no-progress", "--out", str(out / "league")]
    return runs


def _sampling(recipe: Recipe) -> dict[str, Any]:
    """The evaluations' and the league's sampling and concurrency flags."""
    return {
        "temperature": recipe.eval_temperature,
        "max_tokens": recipe.max_new_tokens,
        "concurrency": recipe.concurrency,
    }


def _evaluation(recipe: Recipe, game: Game, model: str, folder: Path) -> list[str]:
    """``llmgym eval`` of ``model`` against random and the bot, in both seats."""
    players = ["--opponent", RANDOM, "--opponent", game.bot]
    budget = flags(num_seeds=recipe.eval_seeds, seed=recipe.eval_seed, **_sampling(recipe))
    model_flags = flags(model=model, backend=recipe.backend)
    return ["eval", game.env_id, *model_flags, *players, *budget, "--no-progress", "--out", str(folder)]


def _exploitability(recipe: Recipe, game: Game, weights: Path | None, folder: Path) -> list[str]:
    """``llmgym exploitability`` of the base model, or of it with ``weights`` (a LoRA adapter)."""
    extra = flags(adapter=weights) if weights is not None else []
    return ["exploitability", game.env_id, "--model", recipe.model, *extra, "--device", "cpu", "--out", str(folder)]


def _teacher(recipe: Recipe, game: Game, folder: Path) -> list[str]:
    """``llmgym eval`` of ``scripted:legal-random`` against random in both seats: the SFT episodes."""
    players = ["--policy", "scripted:legal-random", "--opponent", RANDOM]
    budget = flags(num_seeds=recipe.teacher_seeds, seed=recipe.teacher_seed)
    return ["eval", game.env_id, *players, *budget, "--no-progress", "--out", str(folder)]


def _sft(recipe: Recipe, episodes: Path, folder: Path) -> list[str]:
    """``llmgym train sft --lora`` on every teacher episode: both players' replies are legal moves, and the format of
    a legal move is what it teaches (no ``--min-reward``: which move wins is for GRPO)."""
    args = flags(episodes=episodes, model=recipe.model, lora=True, epochs=recipe.sft_epochs, lr=recipe.sft_lr)
    args += flags(batch_size=recipe.sft_batch_size)
    return ["train", "sft", *args, "--no-progress", "--out", str(folder)]


def _grpo(recipe: Recipe, game: Game, warm: Path, folder: Path) -> list[str]:
    """``llmgym train grpo`` by self-play from the SFT adapter ``warm``, snapshots every ``snapshot_every`` steps."""
    args = flags(model=recipe.model, lora=True, init_adapter=warm, steps=recipe.steps, group_size=recipe.group_size)
    args += flags(prompts_per_step=recipe.prompts_per_step, lr=recipe.lr, temperature=recipe.temperature)
    args += flags(max_new_tokens=recipe.max_new_tokens, opponents=recipe.opponents)
    args += flags(snapshot_every=recipe.snapshot_every, pool_size=recipe.pool_size)
    args += flags(rate_every=recipe.rate_every, rate_games=recipe.rate_games)
    args += flags(exploitability_every=recipe.snapshot_every if game.exploitability else 0)
    args += flags(set=f"torch_threads={recipe.torch_threads}")
    args += flags(set=f"rollout_precision={rollout_precision(recipe)}")
    return ["train", "grpo", game.env_id, *args, "--no-progress", "--out", str(folder)]


def rollout_precision(recipe: Recipe) -> str:
    """The recipe's ``rollout_precision``, ``auto`` resolved as the trainers resolve ``precision="auto"`` on this CPU
    at the stages' threads (bf16 where its products are at least 1.2x as fast as fp32's)."""
    if recipe.rollout_precision != "auto":
        return recipe.rollout_precision
    return _cpu_precision(recipe.torch_threads).dtype


@cache
def _cpu_precision(threads: int) -> Any:
    """:func:`~llmgym.trainers.precision.choose_precision` of ``auto`` on this CPU at ``threads`` torch threads."""
    import torch

    from llmgym.trainers.precision import choose_precision

    torch.set_num_threads(threads)
    return choose_precision("auto", torch.device("cpu"))


def run(recipe: Recipe, out: Path, only: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """Every game's stages in order, or those whose names start with one of ``only``; wall seconds per stage."""
    path = os.environ.get("PYTHONPATH", "")
    if str(HERE) not in path.split(os.pathsep):  # the stages' players import this file's bots as ``self_play``
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), path]))
    walls: dict[str, dict[str, float]] = {}
    for game_name in recipe.games:
        folder, walls[game_name], stale = out / game_name, {}, False
        folder.mkdir(parents=True, exist_ok=True)
        for name, args in stages(recipe, game_name, folder).items():
            if only and not name.startswith(only):
                continue
            stage = folder / name
            unfinished = stage.exists() and not (stage / "stage.json").exists()
            if stage.exists() and (stale or (unfinished and name != "grpo")):
                shutil.rmtree(stage)  # made from older teacher, SFT or GRPO output, or killed (GRPO resumes)
            record = run_stage(name, args, stage, folder / "logs", recipe.torch_threads)
            walls[game_name][name] = record["wall_s"]
            stale |= name in ("teacher", "sft", "grpo") and record["ran"]
    return walls


# -- the report -------------------------------------------------------------------------------

#: An evaluation's opponents, in the order ``_evaluation`` gives them.
OPPONENTS = ("random", "bot")


def model_games(folder: Path) -> list[dict[str, Any]]:
    """The evaluated model's side of each game in an ``eval-*`` folder: the opponent (``random`` or ``bot``),
    seed, seat, outcome, reward (penalties for illegal replies included), replies written and illegal ones."""
    summary = json.loads((folder / "summary.json").read_text())
    policy, opponents = summary["policy"], dict(zip(summary["players"][1:], OPPONENTS))
    games = []
    for episode in iter_jsonl(folder / "episodes.jsonl"):
        agent, players = episode.metadata["agent"], episode.metadata["players"]
        if players[agent] != policy:
            continue
        other = next(name for seat, name in players.items() if seat != agent)
        replies, illegal = illegal_replies(episode.messages)
        reward = episode.total_reward + episode.metadata.get("reward_before_first_turn", 0.0)
        outcome = episode.metadata["outcome"]
        games.append({"opponent": opponents[other], "seed": episode.seed, "seat": agent, "outcome": outcome})
        games[-1].update({"reward": reward, "replies": replies, "illegal": illegal})
    return games


def illegal_replies(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """(replies, illegal replies) in a player's chat: a reply is illegal when the game answers it with
    ``Illegal move:`` (the game tells only the player who made it, also when that ends the game)."""
    replies = illegal = 0
    for message, answer in zip(messages, [*messages[1:], None]):
        if message["role"] != "assistant":
            continue
        replies += 1
        illegal += answer is not None and str(answer.get("content") or "").startswith("Illegal move:")
    return replies, illegal


def point_summary(games: list[dict[str, Any]]) -> dict[str, Any]:
    """The legal-action rate over every reply, and per opponent the win rate, score (draws count half) and mean
    reward over finished games, each with its 95% CI; games an error stopped are counted, not scored."""
    attempts = [0.0] * sum(g["illegal"] for g in games)
    attempts += [1.0] * sum(g["replies"] - g["illegal"] for g in games)
    result: dict[str, Any] = {"legal": mean_ci(attempts), "failed_games": 0}
    for opponent in OPPONENTS:
        mine = [g for g in games if g["opponent"] == opponent and g["outcome"] != "unfinished"]
        result["failed_games"] += sum(g["opponent"] == opponent for g in games) - len(mine)
        if not mine:  # every game against it failed: nothing to score
            continue
        result[opponent] = {
            "win": mean_ci([float(g["outcome"] == "win") for g in mine]),
            "score": mean_ci([{"win": 1.0, "draw": 0.5}.get(g["outcome"], 0.0) for g in mine]),
            "reward": mean_ci([g["reward"] for g in mine]),
        }
    return result


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]], opponent: str) -> dict[str, Any]:
    """``a - b`` against ``opponent`` game by game (same seed and seat), for the win and the reward."""

    def by_game(games: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
        return {(g["seed"], g["seat"]): g for g in games if g["opponent"] == opponent and g["outcome"] != "unfinished"}

    first, second = by_game(a), by_game(b)
    keys = sorted(set(first) & set(second))
    win = [float(first[k]["outcome"] == "win") - float(second[k]["outcome"] == "win") for k in keys]
    return {"win": mean_ci(win), "reward": mean_ci([first[k]["reward"] - second[k]["reward"] for k in keys])}


def game_report(recipe: Recipe, game_name: str, out: Path) -> dict[str, Any]:
    """One game's points (base, each checkpoint), the paired final - base difference, NashConv references, the
    league and the training metrics."""
    names = {"base": 0, "sft": 0, **{f"step{s}": s for s in recipe.checkpoints()}}
    games = {
        name: model_games(out / f"eval-{name}") for name in names if (out / f"eval-{name}" / "summary.json").exists()
    }
    standings = _standings(out / "league" / "league.json")
    points = []
    for name, step in names.items():
        point = {"name": name, "step": step, **(point_summary(games[name]) if name in games else {})}
        point["nash_conv"] = _nash_conv(out / f"exploitability-{name}" / "exploitability.json").get("model")
        point["policy"] = _policy(out / f"exploitability-{name}" / "exploitability.json")
        point["rating"] = standings.get(name)
        points.append(point)
    final = f"step{recipe.checkpoints()[-1]}"
    pairs = [(final, "base"), ("sft", "base"), (final, "sft")]  # the whole recipe, the warm-up, GRPO
    references = _nash_conv(out / "exploitability-base" / "exploitability.json")
    return {
        "env_id": GAMES[game_name].env_id,
        "bot": GAMES[game_name].bot,
        "points": points,
        "paired": {
            f"{a} - {b} vs random": paired(games[a], games[b], "random") for a, b in pairs if a in games and b in games
        },
        "nash_conv_uniform": references.get("uniform"),
        "nash_conv_cfr": references.get("cfr"),
        "league": standings,
        "training": _rows(out / "grpo" / "metrics.jsonl"),
    }


def _nash_conv(path: Path) -> dict[str, float]:
    """An ``exploitability.json``'s NashConv of the model, uniform random and CFR (empty without the file)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    values = data["nash_conv"]
    cfr = next(value for name, value in values.items() if name.startswith("cfr-"))
    return {"model": values[data["run"]["model"]], "uniform": values["uniform"], "cfr": cfr}


def _policy(path: Path) -> dict[str, dict[str, float]] | None:
    """An ``exploitability.json``'s table of the model's policy: information state -> action -> probability."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data.get("policies", {}).get(data["run"]["model"])


def _standings(path: Path) -> dict[str, dict[str, float]]:
    """A ``league.json``'s players: mu, sigma, ordinal and score (empty without the file)."""
    if not path.exists():
        return {}
    keys = ("mu", "sigma", "ordinal", "score", "games")
    return {row["name"]: {k: row[k] for k in keys} for row in json.loads(path.read_text())["standings"]}


def _rows(path: Path) -> list[dict[str, Any]]:
    """A training run's ``metrics.jsonl`` rows."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(recipe: Recipe, out: Path, walls: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Every game's report, the recipe, stage times and the machine."""
    return {
        "benchmark": "self_play",
        "command": "python benchmarks/self_play.py",
        "recipe": dataclasses.asdict(recipe),
        "games": {name: game_report(recipe, name, out / name) for name in recipe.games},
        "stage_wall_s": walls,
        "total_wall_s": sum(sum(stages.values()) for stages in walls.values()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "matmul": _cpu_precision(recipe.torch_threads).as_dict()["matmul"],
            "rollout_precision": rollout_precision(recipe),
        },
        "date": time.strftime("%Y-%m-%d"),
    }


def _cell(stats: dict[str, float] | None, signed: bool = False) -> str:
    if not stats:
        return "-"
    return f"{stats['mean']:{'+' if signed else ''}.3f}±{stats['ci95']:.3f}"


def table(results: dict[str, Any]) -> str:
    """Each game's points as the terminal shows them: legal-action rate, win rates, NashConv and league ordinal."""
    lines = []
    for game in results["games"].values():
        lines.append(f"{game['env_id']} (bot: {game['bot'].rpartition(':')[2]})")
        lines.append(f"{'point':<9}{'legal':>14}{'win vs random':>16}{'win vs bot':>16}{'NashConv':>10}{'ordinal':>9}")
        for point in game["points"]:
            nash = "-" if point["nash_conv"] is None else f"{point['nash_conv']:.4f}"
            ordinal = "-" if point["rating"] is None else f"{point['rating']['ordinal']:.2f}"
            wins = [_cell(point.get(opponent, {}).get("win")) for opponent in OPPONENTS]
            lines.append(
                f"{point['name']:<9}{_cell(point.get('legal')):>14}{wins[0]:>16}{wins[1]:>16}{nash:>10}{ordinal:>9}"
            )
        if game["nash_conv_uniform"] is not None:
            lines.append(f"NashConv of uniform random {game['nash_conv_uniform']:.4f}, CFR {game['nash_conv_cfr']:.4f}")
        lines += policy_lines(game["points"])
        for pair, stats in game["paired"].items():
            lines.append(f"{pair}: win {_cell(stats['win'], True)}, reward {_cell(stats['reward'], True)}")
        references = {k: v["ordinal"] for k, v in game["league"].items() if k in ("random", "bot")}
        if references:
            lines.append("league ordinal: " + ", ".join(f"{k} {v:.2f}" for k, v in references.items()))
    return "\n".join(lines)


def policy_lines(points: list[dict[str, Any]]) -> list[str]:
    """Each scored point's probability of its first legal action at every information state (Kuhn: Pass), so a
    reader sees whether the policy depends on the card."""
    scored = [p for p in points if p.get("policy")]
    if not scored:
        return []
    states = list(scored[0]["policy"])
    first = next(iter(scored[0]["policy"][states[0]]))
    lines = [f"P({first}) at each information state", f"{'state':<9}" + " ".join(f"{s:>5}" for s in states)]
    for point in scored:
        cells = " ".join(f"{next(iter(point['policy'][state].values())):>5.2f}" for state in states)
        lines.append(f"{point['name']:<9}{cells}")
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    """Per game, against the training step: the legal-action rate, the win rates against random and the bot, the
    NashConv beside uniform's and CFR's, and the league ordinal beside random's and the bot's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = results["games"]
    figure, axes = plt.subplots(len(games), 4, figsize=(18, 4 * len(games)), squeeze=False)
    for (name, game), (legal, wins, nash, rating) in zip(games.items(), axes):
        # the curve starts at the warm-up (step 0); the base model, also step 0, is a line of its own
        base = next((p for p in game["points"] if p["name"] == "base"), {})
        points = [p for p in game["points"] if "legal" in p and p["name"] != "base"]
        steps = [p["step"] for p in points]
        legal.errorbar(steps, [p["legal"]["mean"] for p in points], [p["legal"]["ci95"] for p in points], fmt="o-")
        _base_line(legal, base.get("legal", {}).get("mean"))
        legal.set(xlabel="GRPO step (0: the SFT warm-up)", ylabel="legal replies", title=f"{name}: legal-action rate")
        for opponent, colour in zip(OPPONENTS, ("C0", "C1")):
            stats = [p[opponent]["win"] for p in points]
            means, errors = [s["mean"] for s in stats], [s["ci95"] for s in stats]
            wins.errorbar(steps, means, errors, fmt="o-", color=colour, label=f"vs {opponent}")
            _base_line(wins, base.get(opponent, {}).get("win", {}).get("mean"), colour, f"base vs {opponent}")
        wins.set(xlabel="GRPO step (0: the SFT warm-up)", ylabel="win rate", title=f"{name}: win rate, both seats")
        wins.legend()
        scored = [p for p in points if p["nash_conv"] is not None]
        nash.plot([p["step"] for p in scored], [p["nash_conv"] for p in scored], "o-", label="model")
        for label, value, style in (("uniform", game["nash_conv_uniform"], "--"), ("CFR", game["nash_conv_cfr"], ":")):
            if value is not None:
                nash.axhline(value, linestyle=style, color="grey", label=label)
        _base_line(nash, base.get("nash_conv"))
        nash.set(xlabel="GRPO step (0: the SFT warm-up)", ylabel="NashConv", title=f"{name}: NashConv (0 = Nash)")
        nash.legend()
        rated = [p for p in points if p["rating"] is not None]
        rating.plot([p["step"] for p in rated], [p["rating"]["ordinal"] for p in rated], "o-", label="checkpoint")
        for label, style in (("random", "--"), ("bot", ":")):
            if label in game["league"]:
                rating.axhline(game["league"][label]["ordinal"], linestyle=style, color="grey", label=label)
        _base_line(rating, (base.get("rating") or {}).get("ordinal"))
        rating.set(xlabel="GRPO step (0: the SFT warm-up)", ylabel="ordinal (mu - 3 sigma)", title=f"{name}: league")
        rating.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _base_line(axis: Any, value: float | None, colour: str = "C3", label: str = "base model") -> None:
    """The base model's value as a thin dash-dot line across ``axis`` (nothing when it was not measured)."""
    if value is not None:
        axis.axhline(value, linestyle="-.", linewidth=1, color=colour, alpha=0.6, label=label)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "self_play", help="run folder")
    parser.add_argument("--model", default="smollm2", help="base model (tiny-random to try the pipeline)")
    parser.add_argument("--games", nargs="+", choices=sorted(GAMES), help="games to train on (default kuhn)")
    parser.add_argument("--tiny", action="store_true", help="tiny budgets: every stage in about three minutes")
    parser.add_argument("--results", type=Path, default=RESULTS, help="results JSON (a PNG is written beside it)")
    parser.add_argument("--steps", type=int, help="GRPO steps (more than a finished run's: it trains on)")
    parser.add_argument(
        "--only", nargs="+", default=(), metavar="PREFIX", help="run only the stages starting with these (eval-base...)"
    )
    parser.add_argument("--threads", type=int, help="torch threads per stage (default 2)")
    parser.add_argument("--opponents", help=f"GRPO's opponent mix (default {Recipe.opponents})")
    parser.add_argument("--lr", type=float, help=f"GRPO's learning rate (default {Recipe.lr:g})")
    args = parser.parse_args(argv)
    recipe = Recipe.tiny(args.model) if args.tiny else Recipe(model=args.model)
    if args.games:
        recipe.games = tuple(args.games)
    if args.steps is not None:
        recipe.steps = args.steps
    if args.threads is not None:
        recipe.torch_threads = args.threads
    recipe.opponents = args.opponents or recipe.opponents
    recipe.lr = args.lr or recipe.lr
    walls = run(recipe, args.out.resolve(), tuple(args.only))
    results = report(recipe, args.out.resolve(), walls)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.results.with_suffix(".png"))
    print(table(results))
    print(f"total {results['total_wall_s'] / 60:.1f} min; results in {args.results}")
    return results


if __name__ == "__main__":
    main()
