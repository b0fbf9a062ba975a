"""The Wordle agent, end to end: teacher episodes, SFT warm-up, GRPO with turn-level credit, held-out evaluation.

Every stage is one of llmgym's public commands, run as a subprocess and printed before it runs:

1. ``teacher``: ``llmgym eval llmgym/WordleCompact-v0 --policy scripted:wordle-sampler`` on the training
   answers (``answers="train"``): a player that guesses a random training answer consistent with
   all the feedback so far (about 98% solved);
2. ``sft``: ``llmgym train sft --lora`` on the solved teacher episodes;
3. ``grpo``: ``llmgym train grpo --lora --init-adapter <sft>/final`` on the training answers, with
   Wordle's per-turn rewards (``information``, ``invalid_guess``) reaching the advantages through
   ``turn_lambda``;
4. ``eval-*``: ``llmgym eval`` of the base model, the SFT and the GRPO adapters, and a player that
   guesses random valid words, on the same held-out seeds of the 400 answers no stage trained on
   (``answers="test"``, :func:`llmgym.envs.wordle.env.answer_split`);
5. the report: per model mean reward, solved rate, valid-guess rate (turns with a valid guess) and
   information, each with a 95% CI (1.96 x standard error), and paired-by-seed differences
   (SFT - base, GRPO - SFT) with their CIs; ``benchmarks/results/wordle_agent.json`` and a PNG beside
   it (the GRPO reward per component over steps, and the models' bars).

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

from llmgym.episode import iter_jsonl

__all__ = ["Recipe", "run", "report", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "wordle_agent.json"
SHIPPED = ROOT / "wrappers" / "agents" / "smollm2-wordle"
ENV_ID = "llmgym/WordleCompact-v0"


@dataclasses.dataclass
class Recipe:
    """What each stage runs; the defaults are the shipped agent's."""

    model: str = "smollm2"
    teacher_episodes: int = 640
    sft_epochs: int = 1
    sft_lr: float = 5e-4
    sft_batch_size: int = 8
    grpo_steps: int = 40
    grpo_group_size: int = 8
    grpo_prompts_per_step: int = 2
    grpo_lr: float = 5e-5
    grpo_turn_lambda: float = 1.0
    grpo_temperature: float = 1.0
    max_new_tokens: int = 8
    eval_episodes: int = 200
    eval_seed: int = 100_000
    eval_backend: str = "llama.cpp"  # the adapters as GGUF LoRA on the Q4_1 base: what --model smollm2-wordle runs
    torch_threads: int = 1

    @classmethod
    def tiny(cls, model: str) -> Recipe:
        """Budgets that exercise every stage in about a minute (for tests and trying the script)."""
        return cls(
            model=model,
            teacher_episodes=8,
            sft_batch_size=4,
            grpo_steps=1,
            grpo_group_size=2,
            grpo_prompts_per_step=1,
            eval_episodes=2,
            eval_backend="transformers",  # tiny-random's llama.cpp form has other weights than the one trained
        )


def stages(recipe: Recipe, out: Path) -> dict[str, list[str]]:
    """Each stage's ``llmgym`` arguments, in order."""
    train, test = json.dumps({"answers": "train"}), json.dumps({"answers": "test"})
    sft_adapter, grpo_adapter = out / "sft" / "final", out / "grpo" / "final"
    held_out = ["eval", ENV_ID, "--env-kwargs", test, "-n", str(recipe.eval_episodes), "--seed", str(recipe.eval_seed)]
    held_out += flags(max_tokens=recipe.max_new_tokens, no_progress=True, backend=recipe.eval_backend)
    if recipe.eval_backend == "llama.cpp":  # one llama.cpp stream, as the published runs (eval's default engine
        held_out += flags(engine="llama.cpp")  # became torch where it is installed)
    teacher = flags(policy="scripted:wordle-sampler", env_kwargs=train, num_seeds=recipe.teacher_episodes, seed=0)
    sft = flags(episodes=out / "teacher" / "episodes.jsonl", min_reward=1.0, model=recipe.model, lora=True)
    sft += flags(epochs=recipe.sft_epochs, lr=recipe.sft_lr, batch_size=recipe.sft_batch_size)
    grpo = flags(env_kwargs=train, model=recipe.model, lora=True, init_adapter=sft_adapter, steps=recipe.grpo_steps)
    grpo += flags(group_size=recipe.grpo_group_size, prompts_per_step=recipe.grpo_prompts_per_step)
    grpo += flags(max_new_tokens=recipe.max_new_tokens, lr=recipe.grpo_lr, turn_lambda=recipe.grpo_turn_lambda)
    grpo += flags(temperature=recipe.grpo_temperature, set=f"torch_threads={recipe.torch_threads}")
    return {
        "teacher": ["eval", ENV_ID, *teacher, "--no-progress", "--out", str(out / "teacher")],
        "sft": ["train", "sft", *sft, "--no-progress", "--out", str(out / "sft")],
        "grpo": ["train", "grpo", ENV_ID, *grpo, "--no-progress", "--out", str(out / "grpo")],
        "eval-random": [*held_out, "--policy", "scripted:wordle-random", "--out", str(out / "eval-random")],
        "eval-base": [*held_out, "--model", recipe.model, "--out", str(out / "eval-base")],
        "eval-sft": [*held_out, "--model", str(sft_adapter), "--out", str(out / "eval-sft")],
        "eval-grpo": [*held_out, "--model", str(grpo_adapter), "--out", str(out / "eval-grpo")],
    }


#: the stages whose outputs each stage reads: a stage that ran again makes these run again too
INPUTS = {"sft": ["teacher"], "grpo": ["sft"], "eval-sft": ["sft"], "eval-grpo": ["grpo"]}


def run(recipe: Recipe, out: Path) -> dict[str, float]:
    """Every stage in order (skipping finished ones); wall seconds per stage."""
    out.mkdir(parents=True, exist_ok=True)
    walls, ran = {}, set()
    for name, args in stages(recipe, out).items():
        if ran & set(INPUTS.get(name, ())) and (out / name).exists():
            shutil.rmtree(out / name)  # made from an input that has changed since
        record = run_stage(name, args, out / name, out / "logs", recipe.torch_threads)
        walls[name] = record["wall_s"]
        if record["ran"]:
            ran.add(name)
    return walls


# -- the report -------------------------------------------------------------------------------


def episode_scores(path: Path) -> dict[int, dict[str, float]]:
    """Per seed: total reward, solved (0/1), turns with a valid guess over turns, information, turns."""
    scores = {}
    for episode in iter_jsonl(path):
        totals, turns = episode.component_totals(), episode.num_turns
        scores[episode.seed] = {
            "reward": episode.total_reward,
            "solved": totals.get("solved", 0.0),
            "valid_guess_rate": 1.0 - totals.get("invalid_guess", 0.0) / turns if turns else 0.0,
            "information": totals.get("information", 0.0),
            "turns": float(turns),
        }
    return scores


METRICS = ("reward", "solved", "valid_guess_rate", "information", "turns")
PAIRS = (("sft", "base"), ("grpo", "sft"), ("grpo", "base"))


def report(recipe: Recipe, out: Path, walls: dict[str, float]) -> dict[str, Any]:
    """The results: each model's metrics with CIs, paired differences, the GRPO curve, stage wall times."""
    scores = {
        name: episode_scores(out / f"eval-{name}" / "episodes.jsonl") for name in ("random", "base", "sft", "grpo")
    }
    seeds = sorted(set.intersection(*(set(s) for s in scores.values())))
    models = {
        name: {metric: mean_ci([per_seed[seed][metric] for seed in seeds]) for metric in METRICS}
        for name, per_seed in scores.items()
    }
    paired = {
        f"{a}-{b}": {
            metric: mean_ci([scores[a][seed][metric] - scores[b][seed][metric] for seed in seeds])
            for metric in ("reward", "solved", "valid_guess_rate")
        }
        for a, b in PAIRS
    }
    curve = [json.loads(line) for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "benchmark": "wordle_agent",
        "command": "python benchmarks/wordle_agent.py",
        "env": ENV_ID,
        "recipe": dataclasses.asdict(recipe),
        "held_out_seeds": len(seeds),
        "models": models,
        "paired": paired,
        "grpo_curve": [
            {key: value for key, value in row.items() if key == "step" or key.startswith(("reward", "time/step"))}
            for row in curve
        ],
        "stage_wall_s": walls,
        "total_wall_s": sum(walls.values()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
    }


def plot(results: dict[str, Any], path: Path) -> None:
    """The GRPO reward per component over steps, and each model's solved rate and mean reward with CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curve, bars) = plt.subplots(1, 2, figsize=(11, 4))
    rows = results["grpo_curve"]
    for key in sorted({key for row in rows for key in row if key.startswith("reward/") and key.endswith("mean")}):
        curve.plot([row["step"] for row in rows], [row.get(key, math.nan) for row in rows], label=key)
    curve.set(xlabel="GRPO step", ylabel="per episode (training answers)", title="GRPO rewards")
    curve.legend(fontsize=7)
    names = list(results["models"])
    for offset, metric in ((-0.2, "solved"), (0.2, "reward")):
        stats = [results["models"][name][metric] for name in names]
        bars.bar(
            [i + offset for i in range(len(names))],
            [s["mean"] for s in stats],
            yerr=[s["ci95"] for s in stats],
            width=0.4,
            label=metric,
        )
    bars.set_xticks(range(len(names)), names)
    bars.axhline(0, color="black", linewidth=0.5)
    bars.set(title=f"held-out answers, {results['held_out_seeds']} episodes (95% CI)")
    bars.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def ship(out: Path, target: Path = SHIPPED) -> Path:
    """Copy the GRPO adapter into the package: the peft weights in fp16 with ``smollm2`` as their base (not this
    machine's path), and their llama.cpp GGUF form, so a ``local`` install runs it without converting."""
    from safetensors.torch import load_file, save_file

    from llmgym.wrappers.lora_gguf import write_lora_gguf

    source = out / "grpo" / "final"
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
    parser.add_argument("--ship", action="store_true", help="copy the GRPO adapter into the package")
    parser.add_argument("--grpo-steps", type=int, help="GRPO steps (more than a finished run's: it trains on)")
    args = parser.parse_args(argv)
    recipe = Recipe.tiny(args.model) if args.tiny else Recipe(model=args.model)
    if args.grpo_steps is not None:
        recipe.grpo_steps = args.grpo_steps
    walls = run(recipe, args.out.resolve())
    results = report(recipe, args.out.resolve(), walls)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.results.with_suffix(".png"))
    for name, stats in results["models"].items():
        shown = "  ".join(f"{m} {stats[m]['mean']:.3f}±{stats[m]['ci95']:.3f}" for m in METRICS[:4])
        print(f"{name:>6}: {shown}")
    for pair, stats in results["paired"].items():
        shown = "  ".join(f"{m} {stats[m]['mean']:+.3f}±{stats[m]['ci95']:.3f}" for m in stats)
        print(f"{pair:>10}: {shown}")
    print(f"total {results['total_wall_s'] / 60:.1f} min; results in {args.results}")
    if args.ship:
        print(f"shipped the GRPO adapter to {ship(args.out.resolve())}")
    return results


if __name__ == "__main__":
    main()
