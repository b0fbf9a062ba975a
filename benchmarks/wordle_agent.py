"""The Wordle agent, end to end: teacher episodes, SFT warm-up, GRPO with turn-level credit, held-out evaluation.

Every stage is one of llmgym's public commands, run as a subprocess and printed before it runs:

1. ``teacher``: ``llmgym eval llmgym/WordleCompact-v1 --policy scripted:wordle-sampler`` on the training
   answers (``answers="train"``): the opener ``arose``, then a random common word (any of the 2,000)
   consistent with all the feedback so far (about 98% solved, held-out answers too);
2. ``sft``: ``llmgym train sft --lora`` on the solved teacher episodes;
3. ``grpo-<arm>-s<seed>``: ``llmgym train grpo --lora --init-adapter <sft>/final`` on the training
   answers, in three arms with the same budget: ``outcome`` (``turn_lambda 0``), ``turn`` (Wordle's
   per-turn rewards reach the advantages through ``turn_lambda 1``) and ``rebn`` (per-turn
   discounted returns normalised over the batch);
4. ``eval-*``: ``llmgym eval`` of the base model, the SFT and the GRPO adapters, and a player that
   guesses random valid words, on the same held-out seeds of the 400 answers no stage trained on
   (``answers="test"``, :func:`llmgym.envs.wordle.env.answer_split`);
5. ``all400-*``: the same models once on each of the 400 held-out answers (``answer_by_seed``);
6. the report: per model mean reward, solved rate, valid-guess rate (turns with a valid guess),
   repeats and guesses consistent with the feedback, each with a 95% CI (1.96 x standard error),
   paired-by-seed differences (SFT - base, each GRPO arm - SFT, arm - arm) with their CIs, each
   model's replies sorted by which clue they ignore (``benchmarks/wordle_diagnosis.py``);
   ``benchmarks/results/wordle_agent.json`` and a PNG beside it (the GRPO reward per component over
   steps, and the models' bars).

Each stage leaves ``stage.json`` (its command and wall time) in the run folder when it finishes; a
rerun skips finished stages, and a killed one resumes (``--resume`` for the evaluations and GRPO,
SFT starts over). A stage folder made by a different command is an error rather than reused, except
GRPO asked for more steps (``--grpo-steps``): it trains on from its last checkpoint, and the stages that
read its adapter run again.

Run (the defaults reproduce the shipped numbers; ``--tiny --model tiny-random`` exercises every
stage in a minute)::

    python benchmarks/wordle_agent.py [--out runs/wordle_agent] [--ship]
    python benchmarks/wordle_agent.py --tiny --model tiny-random --out /tmp/wordle-try --results /tmp/wa.json

``--ship`` copies the GRPO adapter into the package (``llmgym/wrappers/agents/smollm2-wordle``),
where ``--model smollm2-wordle`` finds it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

from stages import flags, mean_ci, run_stage  # benchmarks/stages.py: the script's own folder is on sys.path
from wordle_diagnosis import diagnose

from llmgym.envs.wordle.env import answer_split
from llmgym.episode import iter_jsonl

__all__ = ["Recipe", "run", "report", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "wordle_agent.json"
SHIPPED = ROOT / "wrappers" / "agents" / "smollm2-wordle"
ENV_ID = "llmgym/WordleCompact-v1"


@dataclasses.dataclass
class Recipe:
    """What each stage runs; the defaults are the recipe's."""

    model: str = "smollm2"
    teacher_episodes: int = 640
    sft_epochs: int = 6
    sft_val_fraction: float = 0.1
    sft_patience: int = 1
    sft_lr: float = 5e-4
    sft_batch_size: int = 8
    grpo_arms: dict[str, dict[str, Any]] = dataclasses.field(
        default_factory=lambda: {
            "outcome": {"turn_lambda": 0.0},
            "turn": {"turn_lambda": 1.0},
            "rebn": {"advantage_estimator": "rebn", "gamma": 0.9},
        }
    )
    """GRPO arms by name: each one's ``llmgym train grpo`` settings. ``outcome``: ``turn_lambda 0`` (the turn
    rewards kept as metrics); ``turn``: group-relative turn credit; ``rebn``: per-turn discounted returns
    normalised over the batch (GEM's ReBN)."""
    arm_seeds: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: {"rebn": (0,)})
    """Training seeds of the arms that run fewer than ``grpo_seeds`` (the third arm, added after the two tied)."""
    grpo_seeds: tuple[int, ...] = (0, 1)
    grpo_steps: int = 40
    grpo_group_size: int = 8
    grpo_prompts_per_step: int = 2
    grpo_lr: float = 5e-5
    grpo_temperature: float = 1.0
    max_new_tokens: int = 8
    eval_episodes: int = 200
    eval_seed: int = 100_000
    every_answer: tuple[str, ...] | None = None
    """The models also evaluated once on each of the 400 held-out answers (``all400-<model>`` stages);
    ``None``: every model (random, teacher, base, SFT and each GRPO run)."""
    eval_backend: str = "llama.cpp"  # the adapters as GGUF LoRA on the Q4_1 base: what --model smollm2-wordle runs
    torch_threads: int = 1

    @classmethod
    def tiny(cls, model: str) -> Recipe:
        """Budgets that exercise every stage in about a minute (for tests and trying the script)."""
        return cls(
            model=model,
            teacher_episodes=12,
            sft_epochs=2,
            sft_batch_size=4,
            grpo_seeds=(0,),
            arm_seeds={},
            every_answer=("sft",),
            grpo_steps=1,
            grpo_group_size=2,
            grpo_prompts_per_step=1,
            eval_episodes=2,
            eval_backend="transformers",  # tiny-random's llama.cpp form has other weights than the one trained
        )

    def grpo_runs(self) -> list[str]:
        """The GRPO stages' names, ``grpo-<arm>-s<seed>``."""
        return [f"grpo-{arm}-s{seed}" for arm, seed in _arms_and_seeds(self)]


def stages(recipe: Recipe, out: Path) -> dict[str, list[str]]:
    """Each stage's ``llmgym`` arguments, in order."""
    train, test = json.dumps({"answers": "train"}), json.dumps({"answers": "test"})
    sft_adapter = out / "sft" / "final"
    held_out = ["eval", ENV_ID, "--env-kwargs", test, "-n", str(recipe.eval_episodes), "--seed", str(recipe.eval_seed)]
    held_out += flags(no_progress=True)
    model_eval = flags(max_tokens=recipe.max_new_tokens, backend=recipe.eval_backend)
    if recipe.eval_backend == "llama.cpp":  # one llama.cpp stream, as the published runs (eval's default engine
        model_eval += flags(engine="llama.cpp")  # became torch where it is installed)
    teacher = flags(policy="scripted:wordle-sampler", env_kwargs=train, num_seeds=recipe.teacher_episodes, seed=0)
    sft = flags(episodes=out / "teacher" / "episodes.jsonl", min_reward=1.0, model=recipe.model, lora=True)
    sft += flags(epochs=recipe.sft_epochs, val_fraction=recipe.sft_val_fraction, patience=recipe.sft_patience)
    sft += flags(lr=recipe.sft_lr, batch_size=recipe.sft_batch_size)
    grpo = flags(env_kwargs=train, model=recipe.model, lora=True, init_adapter=sft_adapter, steps=recipe.grpo_steps)
    grpo += flags(group_size=recipe.grpo_group_size, prompts_per_step=recipe.grpo_prompts_per_step)
    grpo += flags(max_new_tokens=recipe.max_new_tokens, lr=recipe.grpo_lr, temperature=recipe.grpo_temperature)
    grpo += flags(set=f"torch_threads={recipe.torch_threads}")
    runs = {
        "teacher": ["eval", ENV_ID, *teacher, "--no-progress", "--out", str(out / "teacher")],
        "sft": ["train", "sft", *sft, "--no-progress", "--out", str(out / "sft")],
    }
    for name, (arm, seed) in zip(recipe.grpo_runs(), _arms_and_seeds(recipe)):
        arm_flags = flags(**recipe.grpo_arms[arm], seed=seed)
        runs[name] = ["train", "grpo", ENV_ID, *grpo, *arm_flags, "--no-progress", "--out", str(out / name)]
    runs["eval-random"] = [*held_out, "--policy", "scripted:wordle-random", "--out", str(out / "eval-random")]
    runs["eval-teacher"] = [*held_out, "--policy", "scripted:wordle-sampler", "--out", str(out / "eval-teacher")]
    runs["eval-base"] = [*held_out, *model_eval, "--model", recipe.model, "--out", str(out / "eval-base")]
    runs["eval-sft"] = [*held_out, *model_eval, "--model", str(sft_adapter), "--out", str(out / "eval-sft")]
    for name in recipe.grpo_runs():
        adapter = str(out / name / "final")
        runs[f"eval-{name}"] = [*held_out, *model_eval, "--model", adapter, "--out", str(out / f"eval-{name}")]
    runs.update(_every_answer_stages(recipe, out, model_eval))
    return runs


def _every_answer_stages(recipe: Recipe, out: Path, model_eval: list[str]) -> dict[str, list[str]]:
    """``all400-<model>``: one game per held-out answer (``answer_by_seed``, seeds 0..399)."""
    every = json.dumps({"answers": "test", "answer_by_seed": True})
    count = len(answer_split("test")) if recipe.eval_episodes >= 200 else recipe.eval_episodes
    base = ["eval", ENV_ID, "--env-kwargs", every, "-n", str(count), "--seed", "0", *flags(no_progress=True)]
    players = {"random": ["--policy", "scripted:wordle-random"], "teacher": ["--policy", "scripted:wordle-sampler"]}
    players["base"] = [*model_eval, "--model", recipe.model]
    players["sft"] = [*model_eval, "--model", str(out / "sft" / "final")]
    players.update({name: [*model_eval, "--model", str(out / name / "final")] for name in recipe.grpo_runs()})
    names = recipe.every_answer if recipe.every_answer is not None else tuple(players)
    return {f"all400-{name}": [*base, *players[name], "--out", str(out / f"all400-{name}")] for name in names}


def _arms_and_seeds(recipe: Recipe) -> list[tuple[str, int]]:
    return [(arm, seed) for arm in recipe.grpo_arms for seed in recipe.arm_seeds.get(arm, recipe.grpo_seeds)]


def inputs(recipe: Recipe) -> dict[str, list[str]]:
    """The stages whose outputs each stage reads: a stage that ran again makes these run again too."""
    needs = {"sft": ["teacher"], "eval-sft": ["sft"], "all400-sft": ["sft"]}
    for name in recipe.grpo_runs():
        needs[name], needs[f"eval-{name}"], needs[f"all400-{name}"] = ["sft"], [name], [name]
    return needs


def run(recipe: Recipe, out: Path, only: tuple[str, ...] = ()) -> dict[str, float]:
    """Every stage in order, or those whose names start with one of ``only`` (skipping finished ones)."""
    out.mkdir(parents=True, exist_ok=True)
    walls, ran, needs = {}, set(), inputs(recipe)
    for name, args in stages(recipe, out).items():
        if only and not name.startswith(only):
            continue
        if ran & set(needs.get(name, ())) and (out / name).exists():
            shutil.rmtree(out / name)  # made from an input that has changed since
        record = run_stage(name, args, out / name, out / "logs", recipe.torch_threads)
        walls[name] = record["wall_s"]
        if record["ran"]:
            ran.add(name)
    return walls


# -- the report -------------------------------------------------------------------------------


def episode_scores(path: Path) -> dict[int, dict[str, float]]:
    """Per seed: total reward, solved (0/1), guesses, and the share of guesses that were valid, repeated, and
    consistent with every earlier feedback line (of the guesses after the first)."""
    scores = {}
    for episode in iter_jsonl(path):
        totals, turns = episode.component_totals(), max(episode.num_turns, 1)
        scores[episode.seed] = {
            "reward": episode.total_reward,
            "solved": totals.get("solved", 0.0),
            "guesses": float(episode.num_turns),
            "valid": 1.0 - totals.get("invalid_guess", 0.0) / turns,
            "repeats": totals.get("repeated_guess", 0.0) / turns,
            "consistent": totals.get("consistent", 0.0) / max(turns - 1, 1),
        }
    return scores


METRICS = ("solved", "reward", "valid", "repeats", "consistent")


def summarize(per_seed: dict[int, dict[str, float]], seeds: list[int]) -> dict[str, dict[str, float]]:
    """Each metric's mean with its 95% CI over ``seeds``, and the mean guesses of the solved games."""
    stats = {metric: mean_ci([per_seed[seed][metric] for seed in seeds]) for metric in METRICS}
    solved = [per_seed[seed]["guesses"] for seed in seeds if per_seed[seed]["solved"]]
    stats["guesses_when_solved"] = mean_ci(solved) if solved else {"mean": math.nan, "ci95": math.nan, "n": 0}
    return stats


def paired(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], seeds: list[int]) -> dict[str, Any]:
    """``a - b`` seed by seed, per metric, with its 95% CI."""
    return {metric: mean_ci([a[seed][metric] - b[seed][metric] for seed in seeds]) for metric in METRICS}


def pooled(runs: list[dict[int, dict[str, float]]]) -> dict[int, dict[str, float]]:
    """Per seed, the mean over several training seeds' evaluations (an arm's score on each held-out game)."""
    seeds = set.intersection(*(set(run) for run in runs))
    return {seed: {m: sum(run[seed][m] for run in runs) / len(runs) for m in runs[0][seed]} for seed in seeds}


def report(recipe: Recipe, out: Path, walls: dict[str, float]) -> dict[str, Any]:
    """Each evaluated model's metrics with CIs, paired differences, the SFT and GRPO curves, stage times."""
    evaluations = finished_evaluations(out, "eval-")
    scores = {name: episode_scores(episodes) for name, episodes in evaluations.items()}
    for arm in recipe.grpo_arms:  # an arm's score on a game: the mean over its training seeds
        runs = [scores[name] for name in recipe.grpo_runs() if name.startswith(f"grpo-{arm}-") and name in scores]
        if runs:
            scores[f"grpo-{arm}"] = pooled(runs)
    seeds = sorted(set.intersection(*(set(s) for s in scores.values())))
    pairs = [("sft", "base")] + [(f"grpo-{arm}", "sft") for arm in recipe.grpo_arms]
    pairs += [("grpo-turn", "grpo-outcome"), ("grpo-rebn", "grpo-outcome"), ("grpo-rebn", "grpo-turn")]
    return {
        "benchmark": "wordle_agent",
        "command": "python benchmarks/wordle_agent.py",
        "env": ENV_ID,
        "recipe": dataclasses.asdict(recipe),
        "held_out_seeds": len(seeds),
        "models": {name: summarize(per_seed, seeds) for name, per_seed in scores.items()},
        "paired": {f"{a} - {b}": paired(scores[a], scores[b], seeds) for a, b in pairs if a in scores and b in scores},
        "every_answer": _every_answer_report(out),
        "diagnosis": {name: diagnose(episodes) for name, episodes in evaluations.items()},
        "sft_curve": _curve(out / "sft", ("loss", "val_loss", "epoch")),
        "grpo_curves": {name: _curve(out / name, ("reward", "time/step")) for name in recipe.grpo_runs()},
        "stage_wall_s": walls,
        "total_wall_s": sum(walls.values()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
    }


def finished_evaluations(out: Path, prefix: str) -> dict[str, Path]:
    """The ``episodes.jsonl`` of every finished evaluation stage named ``<prefix><model>``, by model."""
    return {
        path.name.removeprefix(prefix): path / "episodes.jsonl"
        for path in sorted(out.glob(f"{prefix}*"))
        if (path / "summary.json").exists()
    }


def _every_answer_report(out: Path) -> dict[str, Any]:
    """The ``all400-*`` evaluations (one game per held-out answer): each model's metrics, and each trained
    run minus SFT answer by answer."""
    scores = {name: episode_scores(episodes) for name, episodes in finished_evaluations(out, "all400-").items()}
    if not scores:
        return {}
    answers = sorted(set.intersection(*(set(s) for s in scores.values())))
    trained = [name for name in scores if name.startswith("grpo-")]
    return {
        "answers": len(answers),
        "models": {name: summarize(per_answer, answers) for name, per_answer in scores.items()},
        "paired": {
            f"{name} - sft": paired(scores[name], scores["sft"], answers) for name in trained if "sft" in scores
        },
    }


def _curve(folder: Path, prefixes: tuple[str, ...]) -> list[dict[str, float]]:
    """A run's metrics.jsonl rows, only ``step`` and the keys starting with ``prefixes``."""
    path = folder / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if k == "step" or k.startswith(prefixes)} for row in rows]


def plot(results: dict[str, Any], path: Path) -> None:
    """The SFT losses (train and held-out) by epoch, each GRPO run's reward, and each model's solved rate and
    share of consistent guesses with CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (sft, grpo, bars) = plt.subplots(1, 3, figsize=(15, 4))
    rows = results["sft_curve"]
    sft.plot([r["step"] for r in rows if "loss" in r], [r["loss"] for r in rows if "loss" in r], label="train")
    sft.plot([r["step"] for r in rows if "val_loss" in r], [r["val_loss"] for r in rows if "val_loss" in r], "o-")
    sft.set(xlabel="SFT step", ylabel="NLL per policy token", title="SFT (dots: held-out episodes, per epoch)")
    for name, rows in results["grpo_curves"].items():
        grpo.plot([r["step"] for r in rows], [r.get("reward/mean", math.nan) for r in rows], label=name)
    grpo.set(xlabel="GRPO step", ylabel="mean reward (training answers)", title="GRPO")
    if results["grpo_curves"]:
        grpo.legend(fontsize=7)
    names = list(results["models"])
    for offset, metric in ((-0.2, "solved"), (0.2, "consistent")):
        stats = [results["models"][name][metric] for name in names]
        bars.bar([i + offset for i in range(len(names))], [s["mean"] for s in stats], width=0.4, label=metric)
        bars.errorbar(
            [i + offset for i in range(len(names))], [s["mean"] for s in stats], [s["ci95"] for s in stats], fmt="none"
        )
    bars.set_xticks(range(len(names)), names, rotation=30, fontsize=7)
    bars.set(title=f"held-out answers, {results['held_out_seeds']} games (95% CI)")
    bars.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def best_run(out: Path) -> str:
    """The trained run whose adapter solved most held-out games (GRPO runs and SFT)."""
    solved = {
        path.name.removeprefix("eval-"): json.loads((path / "summary.json").read_text())["success_rate"]
        for path in out.glob("eval-*")
        if (path / "summary.json").exists() and path.name.startswith(("eval-grpo-", "eval-sft"))
    }
    return max(sorted(solved), key=solved.get)


def ship(out: Path, target: Path = SHIPPED) -> Path:
    """Copy the GRPO adapter into the package: the peft weights in fp16 with ``smollm2`` as their base (not this
    machine's path), and their llama.cpp GGUF form, so a ``local`` install runs it without converting."""
    from safetensors.torch import load_file, save_file

    from llmgym.wrappers.lora_gguf import write_lora_gguf

    source = out / best_run(out) / "final"
    target.mkdir(parents=True, exist_ok=True)
    weights = {name: tensor.half() for name, tensor in load_file(source / "adapter_model.safetensors").items()}
    save_file(weights, target / "adapter_model.safetensors")
    config = json.loads((source / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "smollm2"
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_lora_gguf(target, target / "adapter.gguf")
    return target


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "wordle_agent", help="run folder")
    parser.add_argument("--model", default="smollm2", help="base model (tiny-random to try the pipeline)")
    parser.add_argument("--tiny", action="store_true", help="tiny budgets: every stage in about a minute")
    parser.add_argument("--results", type=Path, default=RESULTS, help="results JSON (a PNG is written beside it)")
    parser.add_argument("--ship", action="store_true", help="copy the best trained adapter into the package")
    parser.add_argument("--grpo-steps", type=int, help="GRPO steps (more than a finished run's: it trains on)")
    parser.add_argument(
        "--only", nargs="+", default=(), metavar="PREFIX", help="run only the stages starting with these (eval-sft...)"
    )
    parser.add_argument("--threads", type=int, help="torch threads per stage (default 1: a shared machine)")
    args = parser.parse_args(argv)
    recipe = Recipe.tiny(args.model) if args.tiny else Recipe(model=args.model)
    if args.grpo_steps is not None:
        recipe.grpo_steps = args.grpo_steps
    if args.threads is not None:
        recipe.torch_threads = args.threads
    walls = run(recipe, args.out.resolve(), tuple(args.only))
    results = report(recipe, args.out.resolve(), walls)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.results.with_suffix(".png"))
    for name, stats in results["models"].items():
        print(f"{name:>16}: " + "  ".join(f"{m} {stats[m]['mean']:.3f}±{stats[m]['ci95']:.3f}" for m in METRICS))
    for pair, stats in results["paired"].items():
        print(f"{pair:>28}: " + "  ".join(f"{m} {stats[m]['mean']:+.3f}±{stats[m]['ci95']:.3f}" for m in stats))
    every = results["every_answer"]
    for name, stats in every.get("models", {}).items():
        print(f"{name:>16} on all {every['answers']} held-out answers: solved {stats['solved']['mean']:.3f}")
    print(f"total {results['total_wall_s'] / 60:.1f} min; results in {args.results}")
    if args.ship:
        print(f"shipped {best_run(args.out.resolve())}'s adapter to {ship(args.out.resolve())}")
    return results


if __name__ == "__main__":
    main()
