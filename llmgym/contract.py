"""The llmgym contract for one step and for one tool schema, as functions that say what breaks it.

Holds :func:`step_problem` (``step`` must return a ``str`` observation inside the
observation space, a finite Python ``float`` reward, Python ``bool`` flags and an
``info`` dict) and :func:`tool_schema_problems` (a tool schema must be an OpenAI
function schema whose parameters are valid JSON Schema, Draft 2020-12, with a
description for the tool and for each argument). The ``fuzz`` and ``tool_schemas``
checks of :mod:`llmgym.checker` apply them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import gymnasium as gym
import jsonschema

from llmgym.parsing import clip_text

__all__ = ["step_problem", "tool_schema_problems"]

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def step_problem(env: gym.Env, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> str | None:
    """What is wrong with the values one ``env.step`` returned, or None when they keep the contract.

    Example:
        >>> import gymnasium as gym
        >>> import llmgym
        >>> env = gym.make("llmgym/Wordle-v0")
        >>> obs, info = env.reset(seed=0)
        >>> step_problem(env, *env.step("crane")) is None
        True
        >>> step_problem(env, obs, 1, False, False, {})
        'reward 1 is not a finite Python float'
    """
    if not isinstance(obs, str):
        return f"observation is {type(obs).__name__}, not str"
    if not env.observation_space.contains(obs):
        return f"observation of {len(obs)} characters is not in {env.observation_space}"
    if type(reward) is not float or not math.isfinite(reward):
        return f"reward {reward!r} is not a finite Python float"
    if type(terminated) is not bool or type(truncated) is not bool:
        return f"terminated/truncated must be Python bool, got {type(terminated).__name__}/{type(truncated).__name__}"
    if not isinstance(info, dict):
        return f"info is {type(info).__name__}, not dict"
    return None


def tool_schema_problems(schema: Any) -> list[str]:
    """What is wrong with one tool schema: one line per problem, none when it is a valid OpenAI function schema.

    Example:
        >>> tool_schema_problems({"type": "function", "function": {"name": "guess", "description": "Guess a word.",
        ...     "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}})
        ["tool 'guess': argument 'word' has no description (add it under Args: in the docstring)"]
    """
    if not isinstance(schema, dict) or schema.get("type") != "function" or not isinstance(schema.get("function"), dict):
        return [
            "not an OpenAI function schema ({'type': 'function', 'function': {...}}): "
            f"{clip_text(repr(schema), 80)}"
        ]
    function = schema["function"]
    name = function.get("name")
    where = f"tool {name!r}"
    problems = []
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        problems.append(f"{where}: the name must match {_TOOL_NAME.pattern}")
    if not isinstance(function.get("description"), str) or not function["description"].strip():
        problems.append(f"{where}: no description (give the function a docstring)")
    parameters = function.get("parameters")
    if not isinstance(parameters, dict):
        return problems + [f"{where}: parameters must be a JSON Schema object"]
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as err:
        problems.append(f"{where}: parameters are not valid JSON Schema: {clip_text(err.message, 120)}")
    if parameters.get("type") != "object":
        problems.append(f"{where}: parameters must have type 'object', got {parameters.get('type')!r}")
    for key, prop in (parameters.get("properties") or {}).items():
        if isinstance(prop, dict) and not prop.get("description"):
            problems.append(f"{where}: argument {key!r} has no description (add it under Args: in the docstring)")
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as err:
        problems.append(f"{where}: the schema is not plain JSON ({err})")
    return problems
