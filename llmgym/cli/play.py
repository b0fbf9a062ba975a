"""``llmgym play``: play one episode in the terminal, typing the actions yourself or watching a scripted policy.

Each turn shows the observation; type an action (plain text or a
``<tool_call>{...}</tool_call>``), or an empty line / end of input to stop.
Actions may be piped in, one a line; standard input closed or ``/dev/null``
is an error before the game starts.
With ``--policy scripted:NAME`` the scripted actor plays and the transcript is
printed. ``--out FILE`` appends the episode to a JSONL file.
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import sys
from typing import Any

from llmgym.cli import CLIError, check_output_path, parse_env_kwargs, unknown_env

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "play", help="play an environment in the terminal (you or a scripted policy)", description=__doc__
    )
    parser.add_argument("env_id", metavar="ENV_ID", help="a registered environment id (see `llmgym list`)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed (default 0)")
    parser.add_argument(
        "--policy",
        default="human",
        metavar="human|scripted:NAME",
        help="who plays: you (default) or a scripted actor, e.g. scripted:wordle",
    )
    parser.add_argument("--env-kwargs", default="{}", metavar="JSON", help="environment arguments as a JSON object")
    parser.add_argument("--out", metavar="FILE", help="append the episode to this JSONL file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    env, actor = _open_game(args)
    console = Console(highlight=False)
    _play_episode(env, actor, args.seed, console)
    if args.out:
        _append_episode(env, args, console)
    env.close()
    return 0


def _open_game(args: argparse.Namespace) -> tuple[Any, Any]:
    """Check the flags and standard input, then make the environment; returns it and the actor (``None``: a human).

    Raises:
        CLIError: an unknown env id, a negative seed, an unwritable ``--out``, a bad ``--policy``
            or ``--env-kwargs``, no standard input for a human to type on, or ``--out`` with an env
            that is not an :class:`~llmgym.env.LLMEnv`.
    """
    import gymnasium as gym

    import llmgym  # noqa: F401  registers the environments
    from llmgym.env import LLMEnv

    if args.env_id not in gym.registry:
        raise unknown_env(args.env_id, "play")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0 (Gymnasium seeds are non-negative), got {args.seed}")
    if args.out:  # before the game: a path found unwritable at the end would lose it
        check_output_path(args.out, "--out", folder=False)
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    actor = _actor(args.policy)
    if actor is None:
        _check_stdin()
    try:
        env = gym.make(args.env_id, **env_kwargs)
    except (TypeError, ValueError) as err:  # an unknown argument, or a value the env refuses
        raise CLIError(f"{args.env_id} does not take these --env-kwargs: {err}") from None
    if args.out and not isinstance(env.unwrapped, LLMEnv):
        env.close()
        raise CLIError("--out records episodes of llmgym environments (LLMEnv) only")
    return env, actor


def _play_episode(env: Any, actor: Any, seed: int, console: Any) -> None:
    """Reset with ``seed`` and step until the episode ends or the human stops, printing each turn."""
    from rich.markup import escape

    from llmgym.messages import assistant, user

    observation, info = env.reset(seed=seed)
    messages = list(info.get("messages") or [user(str(observation))])
    if messages and messages[0].get("role") == "system":
        console.print(f"[dim]system:[/dim] {escape(str(messages[0]['content']))}", markup=True)
    total, turn, done = 0.0, 0, False
    while not done:
        console.print(f"\n[bold cyan]observation[/bold cyan]\n{escape(str(observation))}", markup=True)
        turn += 1
        action = _next_action(actor, messages, turn, console)
        if action is None:
            console.print("stopped.")
            break
        observation, reward, terminated, truncated, info = env.step(action)
        messages = (
            list(info["messages"]) if "messages" in info else messages + [assistant(action), user(str(observation))]
        )
        total += reward
        parts = ", ".join(f"{k}={v:g}" for k, v in (info.get("reward_components") or {}).items())
        console.print(f"[dim]reward {reward:+.3f} ({parts})[/dim]", markup=True)
        done = terminated or truncated
    if done:
        console.print(
            f"\n{escape(str(observation))}\n[bold]episode over[/bold] ({'terminated' if terminated else 'truncated'})"
            f" after {turn} turns, total reward {total:+.3f}",
            markup=True,
        )


def _next_action(actor: Any, messages: list[dict[str, Any]], turn: int, console: Any) -> str | None:
    """The human's typed line (``None`` when they stop: an empty line or end of input), or the actor's shown action."""
    from rich.markup import escape

    if actor is None:
        try:
            action = input(f"turn {turn}> ")
        except EOFError:
            action = ""
        return action if action.strip() else None
    action = actor(messages)
    console.print(f"[bold green]turn {turn}>[/bold green] {escape(action)}", markup=True)
    return action


def _append_episode(env: Any, args: argparse.Namespace, console: Any) -> None:
    """Append the episode played to ``args.out`` (JSONL), with the policy that played it."""
    from llmgym.episode import JSONLWriter

    episode = env.unwrapped.episode(args.env_id)
    episode.policy = args.policy
    with JSONLWriter(args.out) as writer:
        writer.write(episode)
    console.print(f"episode appended to {args.out}")


def _actor(spec: str) -> Any:
    """``None`` for a human, else a function from the chat so far to the scripted action."""
    if spec == "human":
        return None
    kind, _, name = spec.partition(":")
    if kind != "scripted" or not name:
        raise CLIError(f"--policy must be 'human' or scripted:NAME (e.g. scripted:wordle), got {spec!r}")
    from llmgym.wrappers.scripted import load_scripted

    try:
        return load_scripted(name).act
    except ValueError as err:
        raise CLIError(str(err)) from None


def _check_stdin() -> None:
    """Refuse to start a game the human cannot play: standard input closed, or ``/dev/null``.

    A terminal, a pipe or a file of actions (one a line) is fine, and so is a stream
    without a file descriptor (a notebook's, an ``io.StringIO``): ``input()`` reads those.

    Raises:
        CLIError: naming what is wrong with standard input and what to do instead.
    """
    stdin = sys.stdin
    if stdin is None or stdin.closed:  # `llmgym play ID 0<&-`: Python starts with sys.stdin = None
        what = "closed"
    else:
        try:
            status = os.fstat(stdin.fileno())
        except io.UnsupportedOperation:  # no descriptor to look at
            return
        except OSError:  # its descriptor was closed
            what = "closed"
        else:
            if not (stat.S_ISCHR(status.st_mode) and status.st_rdev == os.stat(os.devnull).st_rdev):
                return
            what = os.devnull
    raise CLIError(
        f"standard input is {what}, so there is no one to type the actions: run `llmgym play` in a "
        "terminal, pipe the actions in (one a line), or let a scripted policy play (--policy scripted:NAME)"
    )
