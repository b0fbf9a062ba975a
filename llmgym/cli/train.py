"""``llmgym train``: GRPO on an environment, or SFT warm-up on recorded episodes.

``llmgym train grpo ENV_ID --steps 50 --group-size 8 --out runs/x`` trains with
the settings of :class:`~llmgym.trainers.config.GRPOConfig`: flags override a
``--config`` TOML file, and ``--set KEY=VALUE`` reaches any field (the value is
read as TOML: ``--set beta=0.04 --set lora_target_modules='["q_proj"]'``).
A field given twice on the command line (``--steps 5 --set steps=7``) must have one
value, and the environment id (ENV_ID, ``--set env_id=...`` or ``env_id`` in the
``--config`` file) must agree wherever it is given: a disagreement is an error.
``llmgym train sft --episodes runs/eval/episodes.jsonl --min-reward 1 --out runs/sft``
fine-tunes on the good episodes; ``--export-messages FILE`` writes them in the
chat ``messages`` format (Hugging Face datasets, TRL's SFTTrainer) instead.
For data parallel training run ``torchrun --nproc-per-node N -m llmgym.trainers.grpo --config cfg.toml``.
The trainers are imported inside the command, so ``import llmgym`` stays light.
"""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any

import tomllib

from llmgym.cli import CLIError, check_output_path, multiagent_ids

__all__ = ["add_parser", "run_grpo", "run_sft"]

# flag -> GRPOConfig field, for the flags that only copy a value
_GRPO_FLAGS = {
    "model": "model",
    "out": "out",
    "steps": "steps",
    "group_size": "group_size",
    "prompts_per_step": "prompts_per_step",
    "max_new_tokens": "max_new_tokens",
    "lr": "learning_rate",
    "beta": "beta",
    "turn_lambda": "turn_lambda",
    "advantage_estimator": "advantage_estimator",
    "gamma": "gamma",
    "loss": "loss_aggregation",
    "scale_rewards": "scale_rewards",
    "temperature": "temperature",
    "seed": "seed",
    "base_url": "base_url",
    "micro_batch_size": "micro_batch_size",
    "device": "device",
    "init_adapter": "init_adapter",
    "opponents": "opponents",
    "snapshot_every": "snapshot_every",
    "pool_size": "pool_size",
    "rate_every": "rate_every",
    "rate_games": "rate_games",
    "exploitability_every": "exploitability_every",
}

_GRPO_PRECEDENCE = (
    "GRPO with turn-level credit on an environment. Settings: the flags and --set override a --config file; "
    "a field given twice on the command line (--steps 5 --set steps=7) must have one value, and the env id must "
    "agree wherever it is given (ENV_ID, --set env_id, env_id in --config): a disagreement exits 2. "
    "A --config file without env_id trains on GRPOConfig's default, llmgym/Wordle-v0."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model: GRPO on an environment, SFT on episodes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(title="trainers", metavar="TRAINER")
    _add_grpo_parser(commands)
    _add_sft_parser(commands)
    parser.set_defaults(func=lambda args: parser.print_help() or 0)


def _add_grpo_parser(commands: argparse._SubParsersAction) -> None:
    """``llmgym train grpo``: a flag for each often-set GRPOConfig field, ``--config`` and ``--set`` for the rest."""
    grpo = commands.add_parser(
        "grpo", help="GRPO with turn-level credit on an environment", description=_GRPO_PRECEDENCE
    )
    grpo.add_argument(
        "env_id", nargs="?", metavar="ENV_ID", help="environment id (or --set env_id=ID, or env_id in --config)"
    )
    grpo.add_argument("--config", help="TOML file with GRPOConfig keys")
    grpo.add_argument("--model", help="model name or path, or tiny-random (default smollm2)")
    grpo.add_argument("--out", help="run folder (default runs/grpo)")
    grpo.add_argument("--steps", type=int, help="optimizer rounds")
    grpo.add_argument("--group-size", type=int, help="episodes per seed (G)")
    grpo.add_argument("--prompts-per-step", type=int, help="seeds (groups) per step")
    grpo.add_argument("--max-new-tokens", type=int, help="most tokens generated per turn")
    grpo.add_argument("--lr", type=float, help="learning rate")
    grpo.add_argument("--beta", type=float, help="KL weight (0 = no reference model)")
    grpo.add_argument("--turn-lambda", type=float, help="weight of the turn-level advantage")
    grpo.add_argument(
        "--advantage-estimator",
        choices=["grpo", "rebn"],
        help="grpo: group-relative outcome + turn credit; rebn: per-turn discounted returns normalised over the batch",
    )
    grpo.add_argument("--gamma", type=float, help="discount of rebn's per-turn returns (default 0.9)")
    grpo.add_argument("--loss", choices=["sequence_mean", "token_mean", "dr_grpo"], help="loss aggregation")
    grpo.add_argument("--scale-rewards", choices=["group", "batch", "none"], help="advantage scaling")
    grpo.add_argument("--temperature", type=float, help="sampling temperature")
    grpo.add_argument("--micro-batch-size", type=int, help="episodes per forward/backward")
    grpo.add_argument("--seed", type=int, help="run seed (not the weights of --model tiny-random, always seed 0)")
    grpo.add_argument("--device", help="auto, cpu, cuda, cuda:1...")
    grpo.add_argument("--lora", action="store_true", default=None, help="train a LoRA adapter")
    grpo.add_argument(
        "--ray", action="store_true", default=None, help="play the environments on Ray actors (the ray extra)"
    )
    grpo.add_argument(
        "--init-adapter", metavar="DIR", help="start the LoRA adapter from this one (e.g. an SFT run's final/)"
    )
    grpo.add_argument(
        "--base-url", help="generate on this OpenAI-compatible server, pushing the LoRA adapter each step"
    )
    _add_self_play_flags(grpo)
    grpo.add_argument(
        "--env-kwargs",
        metavar="JSON",
        help="environment arguments as a JSON object ('{\"max_turns\": 4}', as llmgym eval) "
        'or an inline TOML table ("{max_turns = 4}")',
    )
    grpo.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any GRPOConfig field (TOML value; none for None); repeatable",
    )
    grpo.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    grpo.add_argument("--no-progress", action="store_true", help="no progress bar")
    grpo.set_defaults(func=run_grpo)


def _add_self_play_flags(grpo: argparse.ArgumentParser) -> None:
    """The self-play settings of a multi-agent ENV_ID (docs/training.md, "Self-play")."""
    grpo.add_argument(
        "--opponents",
        type=_opponents_value,
        metavar="KIND=W,...",
        help="self-play opponent mix, drawn per game: self, pool, or the game's scripted players "
        "(random, mcts, minimax...), e.g. self=0.5,pool=0.3,random=0.2 (default self=1)",
    )
    grpo.add_argument("--snapshot-every", type=int, help="snapshot the LoRA adapter into OUT/pool every N steps")
    grpo.add_argument("--pool-size", type=int, help="snapshots the pool keeps (default 4)")
    grpo.add_argument("--rate-every", type=int, help="rate the policy in a league every N steps (OUT/ratings.jsonl)")
    grpo.add_argument("--rate-games", type=int, help="seeds per pair and seat of the rating league (default 8)")
    grpo.add_argument("--exploitability-every", type=int, help="log the NashConv every N steps (Kuhn and Leduc poker)")


def _opponents_value(text: str) -> dict[str, float]:
    """``--opponents self=0.5,pool=0.5`` as a mix (argparse reports a malformed one as a usage error)."""
    from llmgym.trainers.opponents import parse_opponents

    try:
        return parse_opponents(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_sft_parser(commands: argparse._SubParsersAction) -> None:
    """``llmgym train sft``: fine-tune on recorded episodes, or export them as chat messages."""
    sft = commands.add_parser("sft", help="SFT warm-up on recorded episodes (or export them as chat messages)")
    sft.add_argument("--episodes", required=True, help="episodes JSONL (llmgym eval output)")
    sft.add_argument("--min-reward", type=float, help="keep episodes with at least this total reward")
    sft.add_argument("--model", help="model name or path, or tiny-random (default smollm2)")
    sft.add_argument("--out", help="run folder (default runs/sft)")
    sft.add_argument("--epochs", type=int, help="passes over the episodes (at most, with --patience)")
    sft.add_argument(
        "--val-fraction", type=float, help="episodes held out for a validation loss after every epoch (e.g. 0.1)"
    )
    sft.add_argument(
        "--patience", type=int, help="stop after this many epochs without a lower validation loss; keep the best"
    )
    sft.add_argument("--lr", type=float, help="learning rate")
    sft.add_argument("--batch-size", type=int, help="episodes per optimizer step")
    sft.add_argument("--lora", action="store_true", default=None, help="train a LoRA adapter")
    sft.add_argument(
        "--retokenize",
        action="store_true",
        help="render messages with this model's template even when episodes carry token ids",
    )
    sft.add_argument("--export-messages", metavar="FILE", help="only write the kept episodes as chat messages JSONL")
    sft.add_argument("--no-progress", action="store_true", help="no progress bar")
    sft.set_defaults(func=run_sft)


def _toml_value(text: str) -> Any:
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string


def _env_kwargs_value(text: str) -> Any:
    """``--env-kwargs`` as JSON (what ``llmgym eval`` and ``llmgym play`` take) or as an inline TOML table."""
    try:
        return json.loads(text)
    except ValueError:
        return _toml_value(text)


#: a GRPOConfig field -> (where the command line gave it, its value)
_Given = dict[str, tuple[str, Any]]


def _flag_values(args: argparse.Namespace) -> _Given:
    """The fields set by ENV_ID and the dedicated flags, each with the flag that set it."""
    given: _Given = {}
    if args.env_id:
        given["env_id"] = (f"ENV_ID {args.env_id}", args.env_id)
    for flag, field in _GRPO_FLAGS.items():
        if getattr(args, flag) is not None:
            given[field] = (f"--{flag.replace('_', '-')} {getattr(args, flag)}", getattr(args, flag))
    if args.lora:
        given["lora"] = ("--lora", True)
    if args.ray:
        given["ray"] = ("--ray", True)
    if args.no_progress:
        given["progress"] = ("--no-progress", False)
    if args.env_kwargs:
        value = _env_kwargs_value(args.env_kwargs)
        if not isinstance(value, dict):
            raise CLIError(
                f"--env-kwargs must be a JSON object like '{{\"max_turns\": 4}}' or an inline TOML table "
                f"like '{{max_turns = 4}}', got {args.env_kwargs!r}"
            )
        given["env_kwargs"] = (f"--env-kwargs {args.env_kwargs}", value)
    return given


def _set_values(args: argparse.Namespace, cls: type) -> _Given:
    """The fields of the ``--set KEY=VALUE`` items, values read as TOML and type-checked.

    ``--set KEY=none`` (or ``null``) sets ``None`` for a field that accepts it, since TOML has no null.

    Raises:
        CLIError: an item is not ``KEY=VALUE``, names no field of ``cls``, has a value of the
            wrong type, or sets a field an earlier ``--set`` set to another value.
    """
    hints = typing.get_type_hints(cls)
    given: _Given = {}
    unknown, problems = [], []
    for item in args.set:
        key, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise CLIError(f"--set needs KEY=VALUE, got {item!r}")
        if key not in hints:
            unknown.append(key)
            continue
        none = text.lower() in ("none", "null") and type(None) in typing.get_args(hints[key])
        label = f"--set {item}"
        try:
            value = _typed({key: (label, None if none else _toml_value(text))}, cls)[key][1]
        except CLIError as err:
            problems.append(str(err))
            continue
        if key in given and given[key][1] != value:
            raise CLIError(f"{key} is given twice with different values: {given[key][0]} and {label}; give one")
        given[key] = (label, value)
    if unknown:
        raise CLIError(f"unknown {cls.__name__} fields {unknown} in --set")
    if problems:
        raise CLIError("; ".join(problems))
    return given


def _typed(given: _Given, cls: type) -> _Given:
    """``given`` with its values checked against ``cls``'s field types, as a ``--config`` file's are.

    Raises:
        CLIError: values of the wrong type, each one named.
    """
    from llmgym.trainers.config import FieldTypeError, check_field_types

    try:
        values = check_field_types(cls, {field: value for field, (_, value) in given.items()})
    except FieldTypeError as err:
        raise CLIError(str(err)) from None
    return {field: (given[field][0], value) for field, value in values.items()}


def _config_env_id(path: str) -> str | None:
    """The ``env_id`` a ``--config`` TOML file sets, or ``None``."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file).get("env_id")
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise CLIError(f"cannot read --config {path}: {err}") from None


def _grpo_overrides(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The GRPOConfig fields the command line sets, checked for types and for agreement.

    ENV_ID, the dedicated flags and ``--set`` may name the same field only with the same
    value; they all win over a ``--config`` file, except ``env_id``, which must agree with it.

    Raises:
        CLIError: a malformed or unknown ``--set``, a value of the wrong type, one field given
            two different values, or no environment id anywhere (no ENV_ID, ``--set env_id``
            or ``--config``).
    """
    flags, sets = _typed(_flag_values(args), cls), _set_values(args, cls)
    for field in sorted(flags.keys() & sets.keys()):
        if flags[field][1] != sets[field][1]:
            raise CLIError(
                f"{field} is given twice with different values: {flags[field][0]} and {sets[field][0]}; give one"
            )
    given = {**flags, **sets}
    if args.config:
        in_file = _config_env_id(args.config)
        if in_file is not None and "env_id" in given and given["env_id"][1] != in_file:
            raise CLIError(
                f"env_id is given twice with different values: {given['env_id'][0]} and "
                f"env_id = {in_file!r} in {args.config}; give one"
            )
    elif "env_id" not in given:
        raise CLIError("give an ENV_ID, --set env_id=ID or a --config file that sets env_id")
    return {field: value for field, (_, value) in given.items()}


def run_grpo(args: argparse.Namespace) -> int:
    try:
        from llmgym.trainers.config import GRPOConfig, ServerConfigError, load_config
    except ImportError as err:
        raise CLIError(f'training needs the train extra ({err.name} is missing): pip install "llmgym[train]"') from None
    import gymnasium as gym

    import llmgym  # noqa: F401  registers the environments

    overrides = _grpo_overrides(args, GRPOConfig)
    try:
        config = load_config(args.config, GRPOConfig, **overrides) if args.config else GRPOConfig(**overrides)
    except (ValueError, TypeError, OSError, ServerConfigError) as err:
        raise CLIError(str(err)) from None
    check_output_path(config.out, "--out", folder=True)  # before torch and the model load, seconds away
    try:
        from llmgym.trainers.grpo import GRPOTrainer
    except ImportError as err:
        raise CLIError(f'training needs the train extra ({err.name} is missing): pip install "llmgym[train]"') from None
    try:
        # finds the checkpoint to resume and makes one env before loading the model
        game = _self_play_game(config)  # a multi-agent id: the game the trainer plays by self-play
        if game is None:
            trainer = GRPOTrainer(config, resume=args.resume)
        else:
            trainer = GRPOTrainer(config, resume=args.resume, game=game)
    except (ValueError, TypeError, FileNotFoundError, OSError, ImportError, ServerConfigError) as err:
        raise CLIError(str(err)) from None
    except gym.error.Error as err:  # an unknown env id; gymnasium's message has its own "did you mean"
        raise CLIError(f"cannot make environment {config.env_id!r}: {err} (`llmgym list` shows them all)") from None
    try:
        history = trainer.train()
    finally:
        trainer.close()
    if history:
        last = history[-1]
        print(f"step {last['step']}: reward {last.get('reward/mean', float('nan')):.3f}; run in {config.out}")
    elif args.resume:  # resumed at or past the last step: say so instead of finishing silently
        print(
            f"nothing to train: the run in {config.out} resumed at step {trainer.step}, and steps is {config.steps}; "
            "raise --steps to train on"
        )
    return 0


def _self_play_game(config: Any) -> Any:
    """The game a multi-agent ENV_ID is trained on by self-play (the trainer itself never imports the envs);
    ``None`` for a single-agent id."""
    if config.env_id not in multiagent_ids():
        return None
    from llmgym.envs.multiagent.evaluation import MultiAgentGame

    return MultiAgentGame(config.env_id, config.env_kwargs)


def run_sft(args: argparse.Namespace) -> int:
    from llmgym.episode import load_jsonl
    from llmgym.trainers.config import SFTConfig

    if args.export_messages:  # before torch and the model load, seconds away
        check_output_path(args.export_messages, "--export-messages", folder=False)
    else:
        check_output_path(args.out or SFTConfig.out, "--out", folder=True)
    try:
        from llmgym.trainers.sft import SFTTrainer, export_messages, select_episodes
    except ImportError as err:
        raise CLIError(f'training needs the train extra ({err.name} is missing): pip install "llmgym[train]"') from None
    try:
        episodes = load_jsonl(args.episodes)
    except (OSError, ValueError) as err:
        raise CLIError(f"cannot read episodes: {err}") from None
    if args.export_messages:
        try:  # as training does, an empty selection is an error, not an empty file
            count = export_messages(select_episodes(episodes, args.min_reward, at_least_one=True), args.export_messages)
        except ValueError as err:
            raise CLIError(str(err)) from None
        except OSError as err:  # refused since the check above: a full disk, a folder made in the meantime
            raise CLIError(f"cannot write --export-messages {args.export_messages}: {err.strerror or err}") from None
        print(f"wrote {count} of {len(episodes)} episodes to {args.export_messages}")
        return 0
    fields = {
        "min_reward": args.min_reward,
        "model": args.model,
        "out": args.out,
        "epochs": args.epochs,
        "val_fraction": args.val_fraction,
        "patience": args.patience,
        "learning_rate": args.lr,
        "batch_size": args.batch_size,
        "lora": args.lora,
    }
    settings = {k: v for k, v in fields.items() if v is not None}
    if args.no_progress:
        settings["progress"] = False
    try:
        config = SFTConfig(episodes=args.episodes, **settings)
        trainer = SFTTrainer(config, episodes=episodes, retokenize=args.retokenize)
    except (ValueError, TypeError, FileNotFoundError, OSError, ImportError) as err:
        raise CLIError(str(err)) from None
    history = trainer.train()
    print(
        f"{len(trainer.episodes)} episodes, {len(history)} steps, last loss {history[-1]['loss']:.4f}; "
        f"weights in {config.out}/final"
    )
    return 0
