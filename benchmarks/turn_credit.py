"""Turn-level credit against trajectory-level GRPO: the MT-GRPO paper's three arms, in miniature, on a CPU.

The paper (Zeng, Wei, Brown et al., "Reinforcing Multi-Turn Reasoning in LLM Agents via
Turn-Level Credit Assignment", arXiv 2505.11821) trains Qwen2.5-7B on a two-turn search task
and compares:

- **GRPO-OR**: the outcome reward alone;
- **GRPO-MR**: the turn rewards merged into the trajectory's reward;
- **MT-GRPO**: turn-level advantages.

Here the task is ``llmgym/Multiply-v0`` (a three-digit times a two-digit number: a calculator
turn, then an answer turn; ``envs/multiply.py``) and the model SmolLM2-135M-Instruct with LoRA,
in three settings, each a matrix of its own (``SETTINGS``): ``product``; ``convert`` (the
product in a larger unit, which the calculator can compute too); ``round`` (that value rounded
to a whole number, a step the calculator's result leaves to the model).
The arms differ only in what reaches the advantages (``trainers/advantages.py``):

=========  ==============================  =============  ==============================================
arm        env                             ``turn_lambda``  advantage of a token on turn t
=========  ==============================  =============  ==============================================
``or``     ``turn_rewards=False``          0              ``A_i`` of the outcome (``correct``) alone
``mr``     turn rewards paid               0              ``A_i`` of the summed turn rewards and outcome
``mt``     turn rewards paid               lambda (1.0)   ``A_i + lambda * A_{i,t}``
=========  ==============================  =============  ==============================================

The base model never writes the tags (0 tool calls in 200 held-out episodes), so every arm
starts from one shared SFT warm-up on ``scripted:multiply-mixed`` episodes: a teacher that
uses the calculator on half the questions and answers the other half at once. The warm-up
model calls the tool on some questions and guesses the product on others, the paper's
starting point for the question "does the arm learn to use the tool?".

Stages per setting, in ``OUT/<setting>/`` (each one ``llmgym`` command, run once and recorded:
``benchmarks/stages.py``)::

    teacher -> sft -> eval-base, eval-sft -> grpo-{or,mr,mt}-s{0,1} -> eval-{or,mr,mt}-s{0,1}

Every GRPO run has the same budget (steps, episodes per step, tokens per reply) and draws
training questions from seeds below ``eval_seed``; each is evaluated on the same 200 held-out
seeds from ``eval_seed`` on (llama.cpp, the adapter as GGUF LoRA). The report gives, per arm
and per run, the tool-call rate, the tool-execution success rate, the rate of calculations
that returned the product, final-answer accuracy and the mean reward (every turn reward
paid, whatever the arm trained on), with 95% CIs (1.96 x standard error over episodes),
paired differences between the arms on the same seeds, the curves over training, and each
stage's wall time: ``benchmarks/results/turn_credit.json`` and a PNG beside it.

Run::

    python benchmarks/turn_credit.py                         # everything (about 3 hours on 2 cores)
    python benchmarks/turn_credit.py --seeds 0 & python benchmarks/turn_credit.py --seeds 1
    python benchmarks/turn_credit.py --settings round        # one setting's matrix
    python benchmarks/turn_credit.py --tiny --model tiny-random --out /tmp/tc --results /tmp/tc.json

Processes sharing ``--out`` take turns on each stage (a lock per stage): a second process
waits for a stage the first is running and then finds it done, so ``--seeds 0`` and
``--seeds 1`` run side by side on two cores. The report is written, by whichever process
finishes last, once every stage of every setting has finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

from stages import flags, mean_ci, run_stage  # benchmarks/stages.py: the script's own folder is on sys.path

from llmgym.envs.multiply import MultiplyEnv
from llmgym.episode import iter_jsonl

__all__ = ["ARMS", "Recipe", "run", "report", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "turn_credit.json"
ENV_ID = "llmgym/Multiply-v0"
#: the task settings, each a matrix of its own: the product itself; the product in a larger unit (cents -> dollars,
#: one more step, which the calculator can take too); that value rounded to a whole number (a step the calculator's
#: result leaves to the model, so a right calculation need not end in a right answer)
SETTINGS = {"product": {}, "convert": {"convert": True}, "round": {"convert": True, "rounded": True}}
#: each arm's env settings and whether the turn-level term reaches the advantages
ARMS = {
    "or": {"env_kwargs": {"turn_rewards": False}, "turn_level": False},
    "mr": {"env_kwargs": {}, "turn_level": False},
    "mt": {"env_kwargs": {}, "turn_level": True},
}
ARM_NAMES = {"or": "GRPO-OR", "mr": "GRPO-MR", "mt": "MT-GRPO"}
#: the weights of Multiply-v0's components with every turn reward paid, read from its rubric (metrics weigh 0)
WEIGHTS = MultiplyEnv().rubric.weights()


@dataclasses.dataclass
class Recipe:
    """Every stage's budget; the defaults are the published run's."""

    model: str = "smollm2"
    teacher_episodes: int = 128
    sft_lr: float = 5e-4
    sft_batch_size: int = 8
    grpo_steps: int = 30
    grpo_group_size: int = 8
    grpo_prompts_per_step: int = 2
    grpo_lr: float = 1e-4
    turn_lambda: float = 1.0
    temperature: float = 1.0
    max_new_tokens: int = 24
    seeds: tuple[int, ...] = (0, 1)
    #: more training seeds for the settings whose result hinges on them (round: the arms differ there)
    more_seeds: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: {"round": (2, 3)})
    #: run only these training seeds (``--seeds``); the report still covers every seed
    only_seeds: tuple[int, ...] | None = None
    arms: tuple[str, ...] = ("or", "mr", "mt")
    settings: tuple[str, ...] = ("product", "convert", "round")
    eval_episodes: int = 200
    eval_seed: int = 100_000  # training questions come from seeds below it
    eval_backend: str = "llama.cpp"
    torch_threads: int = 1

    @classmethod
    def tiny(cls, model: str) -> Recipe:
        """Budgets that run every stage in a minute or two (tests, trying the script)."""
        return cls(
            model=model,
            teacher_episodes=8,
            sft_batch_size=4,
            grpo_steps=1,
            grpo_group_size=2,
            grpo_prompts_per_step=2,
            max_new_tokens=8,
            seeds=(0,),
            more_seeds={},
            settings=("convert",),
            eval_episodes=2,
            eval_backend="transformers",  # tiny-random's llama.cpp form has other weights than the one trained
        )


def seeds_of(recipe: Recipe, setting: str, running: bool = False) -> tuple[int, ...]:
    """A setting's training seeds; with ``running``, only those ``--seeds`` asked to run."""
    seeds = recipe.seeds + recipe.more_seeds.get(setting, ())
    return tuple(s for s in seeds if recipe.only_seeds is None or s in recipe.only_seeds) if running else seeds


def stages(recipe: Recipe, out: Path, setting: str) -> dict[str, list[str]]:
    """Each stage's ``llmgym`` arguments for one setting (its folder ``out``), in order."""
    task = SETTINGS[setting]
    task_flags = ["--env-kwargs", json.dumps(task)] if task else []
    sft_adapter = out / "sft" / "final"
    held_out = ["eval", ENV_ID, *task_flags, "-n", str(recipe.eval_episodes), "--seed", str(recipe.eval_seed)]
    held_out += flags(max_tokens=recipe.max_new_tokens, no_progress=True, backend=recipe.eval_backend)
    if recipe.eval_backend == "llama.cpp":  # one llama.cpp stream, as the published runs (eval's default engine
        held_out += flags(engine="llama.cpp")  # became torch where it is installed)
    teacher = flags(policy="scripted:multiply-mixed", num_seeds=recipe.teacher_episodes, seed=0)
    sft = flags(episodes=out / "teacher" / "episodes.jsonl", model=recipe.model, lora=True)
    sft += flags(lr=recipe.sft_lr, batch_size=recipe.sft_batch_size)
    result = {
        "teacher": ["eval", ENV_ID, *task_flags, *teacher, "--no-progress", "--out", str(out / "teacher")],
        "sft": ["train", "sft", *sft, "--no-progress", "--out", str(out / "sft")],
        "eval-base": [*held_out, "--model", recipe.model, "--out", str(out / "eval-base")],
        "eval-sft": [*held_out, "--model", str(sft_adapter), "--out", str(out / "eval-sft")],
    }
    for arm in recipe.arms:
        for seed in seeds_of(recipe, setting, running=True):
            run = f"{arm}-s{seed}"
            env_kwargs = json.dumps({**task, **ARMS[arm]["env_kwargs"]})
            grpo = flags(env_kwargs=env_kwargs, model=recipe.model, lora=True)
            grpo += flags(init_adapter=sft_adapter, steps=recipe.grpo_steps, seed=seed)
            grpo += flags(group_size=recipe.grpo_group_size, prompts_per_step=recipe.grpo_prompts_per_step)
            grpo += flags(max_new_tokens=recipe.max_new_tokens, lr=recipe.grpo_lr, temperature=recipe.temperature)
            grpo += flags(turn_lambda=recipe.turn_lambda if ARMS[arm]["turn_level"] else 0.0)
            grpo += ["--set", f"seed_pool={recipe.eval_seed}", "--set", f"torch_threads={recipe.torch_threads}"]
            result[f"grpo-{run}"] = ["train", "grpo", ENV_ID, *grpo, "--no-progress", "--out", str(out / f"grpo-{run}")]
            adapter = out / f"grpo-{run}" / "final"
            result[f"eval-{run}"] = [*held_out, "--model", str(adapter), "--out", str(out / f"eval-{run}")]
    return result


def run(recipe: Recipe, out: Path) -> dict[str, dict[str, float]]:
    """Every setting's stages in order, skipping finished ones; wall seconds per setting and stage."""
    walls: dict[str, dict[str, float]] = {}
    for setting in recipe.settings:
        folder = out / setting
        folder.mkdir(parents=True, exist_ok=True)
        walls[setting] = {
            name: run_stage(name, args, folder / name, folder / "logs", recipe.torch_threads)["wall_s"]
            for name, args in stages(recipe, folder, setting).items()
        }
    return walls


# -- the report -------------------------------------------------------------------------------

METRICS = ("tool_call", "tool_success", "tool_found", "accuracy", "reward")


def episode_scores(path: Path) -> dict[int, dict[str, float]]:
    """Per held-out seed: the episode's metrics (each 0 or 1, and the reward with every turn reward paid)."""
    scores = {}
    for episode in iter_jsonl(path):
        totals = episode.component_totals()
        scores[episode.seed] = {
            "tool_call": min(totals.get("called_tool", 0.0), 1.0),
            "tool_success": min(totals.get("tool_ran", 0.0), 1.0),
            "tool_found": min(totals.get("tool_found", 0.0), 1.0),
            "accuracy": totals.get("correct", 0.0),
            "reward": sum(weight * totals.get(name, 0.0) for name, weight in WEIGHTS.items()),
        }
    return scores


def curve(path: Path) -> list[dict[str, float]]:
    """A GRPO run's training curve: per step the components' means and the reward with every turn reward paid."""
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        metrics = json.loads(line)
        mean = {name: metrics.get(f"reward/{name}/mean", 0.0) for name in WEIGHTS}
        rows.append(
            {
                "step": metrics["step"],
                "tool_call": mean["called_tool"],
                "tool_success": mean["tool_ran"],
                "tool_found": mean["tool_found"],
                "accuracy": mean["correct"],
                "reward": sum(weight * mean[name] for name, weight in WEIGHTS.items()),
                "zero_signal": metrics.get("groups/zero_signal", math.nan),
                "advantage_std": metrics.get("advantage/std", math.nan),
                "step_s": metrics.get("time/step_s", math.nan),
            }
        )
    return rows


def report(recipe: Recipe, out: Path, walls: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Every setting's :func:`report_setting`, with the recipe and the machine."""
    return {
        "benchmark": "turn_credit",
        "command": "python benchmarks/turn_credit.py",
        "env": ENV_ID,
        "paper": "Zeng et al., arXiv 2505.11821 (MT-GRPO)",
        "recipe": dataclasses.asdict(recipe),
        "settings": {
            setting: report_setting(recipe, out / setting, setting, walls[setting]) | {"env_kwargs": SETTINGS[setting]}
            for setting in recipe.settings
        },
        "total_wall_s": sum(sum(w.values()) for w in walls.values()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
    }


def first_step_over(rows: list[dict[str, float]], metric: str, level: float) -> int | None:
    """The first step whose 5-step mean of ``metric`` (training episodes) reaches ``level``; ``None`` if none."""
    smooth = _moving_mean([row[metric] for row in rows], 5)
    return next((row["step"] for row, value in zip(rows, smooth) if value >= level), None)


def report_setting(recipe: Recipe, out: Path, setting: str, walls: dict[str, float]) -> dict[str, Any]:
    """Per arm (both training seeds pooled) and per run: each metric with its CI; paired differences; curves."""
    setting_seeds = seeds_of(recipe, setting)
    runs = [f"{arm}-s{seed}" for arm in recipe.arms for seed in setting_seeds]
    scores = {name: episode_scores(out / f"eval-{name}" / "episodes.jsonl") for name in ["base", "sft", *runs]}
    seeds = sorted(set.intersection(*(set(s) for s in scores.values())))

    def pooled(names: list[str]) -> dict[str, dict[str, float]]:
        return {m: mean_ci([scores[n][s][m] for n in names for s in seeds]) for m in METRICS}

    arms = {"base": pooled(["base"]), "sft": pooled(["sft"])}
    arms |= {arm: pooled([f"{arm}-s{seed}" for seed in setting_seeds]) for arm in recipe.arms}
    per_run = {name: pooled([name]) for name in runs}
    paired = {}
    for a, b in (("mt", "or"), ("mt", "mr"), ("mr", "or")):
        if a in recipe.arms and b in recipe.arms:
            paired[f"{a}-{b}"] = {
                m: mean_ci(
                    [scores[f"{a}-s{x}"][s][m] - scores[f"{b}-s{x}"][s][m] for x in setting_seeds for s in seeds]
                )
                for m in METRICS
            }
    curves = {name: curve(out / f"grpo-{name}" / "metrics.jsonl") for name in runs}
    return {
        "held_out_seeds": len(seeds),
        "arms": arms,
        "runs": per_run,
        "paired": paired,
        "curves": curves,
        "steps_to_tool_success_90": {name: first_step_over(rows, "tool_success", 0.9) for name, rows in curves.items()},
        "stage_wall_s": walls,
        "wall_s": sum(walls.values()),
    }


def plot(results: dict[str, Any], path: Path) -> None:
    """The paper's Figure-2 shape: tool-execution success, accuracy and reward over training, one line per run;
    one row per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("tool_success", "tool execution success"), ("accuracy", "final-answer accuracy"), ("reward", "reward"))
    settings = results["settings"]
    figure, axes = plt.subplots(len(settings), len(panels), figsize=(13, 3.6 * len(settings)), squeeze=False)
    colours = {"or": "tab:blue", "mr": "tab:orange", "mt": "tab:green"}
    for row, (setting, data) in zip(axes, settings.items()):
        for axis, (metric, title) in zip(row, panels):
            for name, rows in data["curves"].items():
                arm = name.split("-")[0]
                smooth = _moving_mean([r[metric] for r in rows], 5)
                axis.plot([r["step"] for r in rows], smooth, color=colours[arm], alpha=0.8, label=name)
            axis.set(xlabel="GRPO step", ylabel="training episodes, 5-step mean", title=f"{setting}: {title}")
        row[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _moving_mean(values: list[float], width: int) -> list[float]:
    return [
        sum(values[max(0, i - width + 1) : i + 1]) / len(values[max(0, i - width + 1) : i + 1])
        for i in range(len(values))
    ]


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "turn_credit", help="run folder")
    parser.add_argument("--model", default="smollm2", help="base model (tiny-random to try the pipeline)")
    parser.add_argument("--tiny", action="store_true", help="tiny budgets: every stage in a minute or two")
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds to run (default: the recipe's)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), help="arms to run (default: all three)")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), help="settings to run (default: all)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="results JSON (a PNG is written beside it)")
    args = parser.parse_args(argv)
    recipe = Recipe.tiny(args.model) if args.tiny else Recipe(model=args.model)
    full = recipe
    if args.seeds or args.arms or args.settings:
        recipe = dataclasses.replace(
            recipe,
            only_seeds=tuple(args.seeds) if args.seeds else None,
            arms=tuple(args.arms or recipe.arms),
            settings=tuple(args.settings or recipe.settings),
        )
    walls = run(recipe, args.out)
    # the report covers the whole matrix: written once every run of it has finished its evaluation
    everything = {setting: stages(full, args.out / setting, setting) for setting in full.settings}
    missing = [f"{setting}/{name}" for setting, named in everything.items() for name in named]
    missing = [name for name in missing if not (args.out / name / "stage.json").is_file()]
    if missing:
        print(f"not reported yet: waiting for {', '.join(missing)}")
        return None
    recorded = {
        setting: {name: json.loads((args.out / setting / name / "stage.json").read_text())["wall_s"] for name in named}
        for setting, named in everything.items()
    }
    results = report(full, args.out, {setting: {**recorded[setting], **walls.get(setting, {})} for setting in recorded})
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.results.with_suffix(".png"))
    print(table(results))
    return results


def table(results: dict[str, Any]) -> str:
    """Per setting, the arms' held-out metrics, one row each."""
    lines = []
    for setting, data in results["settings"].items():
        lines.append(f"{setting} ({data['held_out_seeds']} held-out questions)")
        lines.append(f"{'arm':<8} " + " ".join(f"{m:>16}" for m in METRICS))
        for arm, stats in data["arms"].items():
            cells = " ".join(f"{stats[m]['mean']:>8.3f} ± {stats[m]['ci95']:<5.3f}" for m in METRICS)
            lines.append(f"{ARM_NAMES.get(arm, arm):<8} {cells}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
