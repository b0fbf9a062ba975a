"""TRL interop: any llmgym env as a GRPOTrainer environment, and episodes as chat ``messages`` datasets.

Holds:

- :func:`trl_environment`: a class for TRL's ``GRPOTrainer(environment_factory=...)``
  hook. TRL builds one instance per rollout, calls ``reset(**example)``
  (the returned first observation is appended to the prompt's last user
  message), exposes every public method as a tool (here: the env's tools,
  same names, arguments and docstrings), and scores the rollout with
  ``get_reward()`` (here: the episode's summed turn rewards).
- :func:`trl_dataset`: the prompt dataset for it, one row per seed
  (system prompt + an empty user message the first observation fills).
- :func:`episodes_to_messages` / :func:`save_messages_jsonl`: episodes as rows
  ``{"messages": [...], "tools": [...], "reward": ...}``, the chat format
  TRL (SFT, GRPO), verl and OpenRLHF read.

What the hook cannot carry: TRL passes only tool calls to the environment,
so an env that also reads plain-text answers (Wordle's bare guesses) sees
tool calls only; every tool call is one env turn; and a rollout that stops
before the episode ends is scored with the rewards earned so far (end-of-
episode rubric terms only arrive when the episode ends). For full-fidelity
multi-turn training with llmgym's own rollouts, use the GRPO trainer beside
this module (:mod:`llmgym.trainers.grpo`).
Tested with TRL 1.16 (``pip install trl==1.16.0``; TRL marks the hook experimental).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterable
from typing import Any, get_type_hints

import gymnasium as gym

from llmgym.env import LLMEnv
from llmgym.episode import Episode
from llmgym.parsing import TOOL_CALL_OPEN, parse_text_tool_calls

__all__ = ["trl_environment", "trl_dataset", "episodes_to_messages", "save_messages_jsonl", "LLMGymEnvironment"]


class LLMGymEnvironment:
    """Base of the classes :func:`trl_environment` builds: one llmgym episode per TRL rollout.

    Public methods other than ``reset`` and ``get_reward`` become TRL tools,
    so helpers here are private.
    """

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}

    def __init__(self) -> None:
        self.env = gym.make(self.env_id, **self.env_kwargs)
        if not isinstance(self.env.unwrapped, LLMEnv):
            raise TypeError(f"{self.env_id} is not an llmgym LLMEnv; TRL needs its tools")
        self._calls = 0
        self._over = True

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None, **example: Any) -> str:
        """Start the episode for one dataset row; returns the first observation (TRL appends it to the prompt)."""
        obs, _ = self.env.reset(seed=None if seed is None else int(seed), options=options)
        self._calls, self._over = 0, False
        return obs

    def get_reward(self) -> float:
        """The episode's return: the sum of its turn rewards so far."""
        return float(sum(self.env.unwrapped.turn_rewards))

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self._over:
            return "Error: the episode is over; no further tool calls are run."
        self._calls += 1
        action = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"call_{self._calls}", "type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        }
        obs, _, terminated, truncated, _ = self.env.step(action)
        self._over = terminated or truncated
        return obs + ("\n[The episode is over.]" if self._over else "")

    def _episode(self) -> Episode:
        """The llmgym record of the episode played so far."""
        return self.env.unwrapped.episode(self.env_id)


def trl_environment(env_id: str, **env_kwargs: Any) -> type[LLMGymEnvironment]:
    """A class for ``GRPOTrainer(environment_factory=trl_environment("llmgym/Wordle-v0"))``.

    Args:
        env_id: a registered llmgym id.
        **env_kwargs: passed to ``gymnasium.make`` for every instance.

    Raises:
        TypeError: the id is not an :class:`~llmgym.LLMEnv`.
        ValueError: the env has no tools, or a tool name clashes with ``reset``/``get_reward`` or starts with ``_``.

    Example:
        >>> import llmgym
        >>> Wordle = trl_environment("llmgym/Wordle-v0")
        >>> env = Wordle()
        >>> env.reset(seed=0)
        'Guess the five-letter word. You have 6 guesses.'
        >>> env.guess(word="crane").splitlines()[0], round(env.get_reward(), 2)
        ('CRANE x x x x Y', 0.02)
    """
    probe = gym.make(env_id, **env_kwargs)
    if not isinstance(probe.unwrapped, LLMEnv):
        raise TypeError(f"{env_id} is not an llmgym LLMEnv; TRL needs its tools")
    if not probe.unwrapped.tools:
        probe.close()
        raise ValueError(
            f"{env_id} has no tools: TRL passes only tool calls to the environment, so a model could never act in it; "
            "train it with llmgym.trainers instead"
        )
    methods: dict[str, Any] = {}
    for name, bound in probe.unwrapped.tools.items():
        if name in ("reset", "get_reward") or name.startswith("_") or not name.isidentifier():
            raise ValueError(f"tool {name!r} cannot be a TRL tool method; rename it")
        methods[name] = _tool_method(name, bound.tool.fn)
    probe.close()
    class_name = "".join(part for part in env_id.replace("/", "_").replace("-", "_").split("_") if part.isidentifier())
    return type(
        f"{class_name}TRL",
        (LLMGymEnvironment,),
        {"env_id": env_id, "env_kwargs": dict(env_kwargs), "__doc__": f"{env_id} as a TRL environment.", **methods},
    )


def _tool_method(name: str, fn: Any) -> Any:
    """A method with the tool's name, signature and docstring that plays it as one env turn."""
    signature = inspect.signature(fn)
    hints = get_type_hints(fn)
    parameters = list(signature.parameters)[1:]  # after self

    def method(self: LLMGymEnvironment, *args: Any, **arguments: Any) -> str:
        # TRL passes keywords; a direct call may pass them by position, as the signature allows
        if len(args) > len(parameters):
            raise TypeError(f"{name}() takes {len(parameters)} arguments, got {len(args)} positional")
        positional = dict(zip(parameters, args))
        if positional.keys() & arguments.keys():
            raise TypeError(f"{name}() got several values for {sorted(positional.keys() & arguments.keys())}")
        return self._call_tool(name, {**positional, **arguments})

    method.__name__ = method.__qualname__ = name
    method.__doc__ = inspect.getdoc(fn)
    method.__signature__ = signature.replace(return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {k: v for k, v in hints.items() if k != "return"} | {"return": str}
    return method


def trl_dataset(env_id: str, seeds: Iterable[int], **env_kwargs: Any) -> Any:
    """The prompt dataset for :func:`trl_environment`: one row per seed.

    Each prompt is the env's system prompt and an empty user message, which
    ``reset`` fills with the seed's first observation. Needs ``datasets``.
    """
    from datasets import Dataset

    env = gym.make(env_id, **env_kwargs)
    system_prompt = env.unwrapped.system_prompt
    env.close()
    seeds = [int(s) for s in seeds]
    prompt = [{"role": "system", "content": system_prompt}, {"role": "user", "content": ""}]
    return Dataset.from_dict({"prompt": [prompt] * len(seeds), "seed": seeds})


def episodes_to_messages(episodes: Iterable[Episode], arguments_as: str = "dict") -> list[dict[str, Any]]:
    """Episodes as chat rows: ``{"messages", "tools", "reward", "turn_rewards", "env_id", "seed"}``.

    Args:
        episodes: llmgym episode records.
        arguments_as: ``"dict"`` (what transformers chat templates and TRL
            expect in ``tool_calls``) or ``"json"`` (the OpenAI wire format, a string).

    Every call is in ``tool_calls``, once: an assistant turn written in the text
    protocol loses its ``<tool_call>`` blocks from ``content`` (the env recorded
    them, parsed, in ``tool_calls``). ``trainers.sft.export_messages`` keeps the
    other form, for templates without tools: blocks in the text, no ``tool_calls``.

    Raises:
        ValueError: an unknown ``arguments_as``.

    Example:
        >>> from llmgym import Episode
        >>> episode = Episode("llmgym/Wordle-v0", seed=1, turn_rewards=[0.5], messages=[
        ...     {"role": "assistant", "content": "", "tool_calls": [
        ...         {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}]}])
        >>> episodes_to_messages([episode])[0]["messages"][0]["tool_calls"][0]["function"]["arguments"]
        {'word': 'crane'}
    """
    if arguments_as not in ("dict", "json"):
        raise ValueError(f"arguments_as must be 'dict' or 'json', got {arguments_as!r}")
    rows = []
    for episode in episodes:
        messages = []
        for message in episode.messages:
            message = dict(message)
            if message.get("tool_calls"):
                if TOOL_CALL_OPEN in (message.get("content") or ""):  # text protocol: the env parsed the calls
                    message["content"] = parse_text_tool_calls(message["content"])[0]  # keep each call once
                message["tool_calls"] = [_convert_call(call, arguments_as) for call in message["tool_calls"]]
            messages.append(message)
        rows.append(
            {
                "messages": messages,
                "tools": episode.tools,
                "reward": episode.total_reward,
                "turn_rewards": list(episode.turn_rewards),
                "env_id": episode.env_id,
                "seed": episode.seed,
            }
        )
    return rows


def _convert_call(call: dict[str, Any], arguments_as: str) -> dict[str, Any]:
    function = dict(call.get("function", {}))
    arguments = function.get("arguments", {})
    if arguments_as == "dict" and isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:  # JSONDecodeError, or an integer past int()'s digit limit
            arguments = {"_raw": arguments}  # recorded malformed arguments stay visible, never crash an export
    elif arguments_as == "json" and not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    function["arguments"] = arguments
    return {**call, "function": function}


def save_messages_jsonl(episodes: Iterable[Episode], path: str | os.PathLike[str], arguments_as: str = "json") -> int:
    """Write episodes as chat rows to a JSONL file; returns the row count.

    ``datasets.load_dataset("json", ...)`` reads the file.

    Arguments default to JSON strings here: a column whose value is a dict
    with different keys per tool would not fit one Arrow schema.
    """
    rows = episodes_to_messages(episodes, arguments_as=arguments_as)
    with open(path, "w", encoding="utf-8") as file:
        for row in rows:
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)
