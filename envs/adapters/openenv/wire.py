"""What an llmgym env served through OpenEnv sends and takes: one assistant turn in, one step's outcome out.

Holds :func:`chat_models` (the OpenEnv ``Action`` and ``Observation`` models), :func:`to_env_action`
and :func:`from_env_action` (a wire action and the action ``LLMEnv.step`` takes), :func:`observation_fields`
and :func:`to_info` (a reset or step and the observation's fields) and :func:`is_chat_schema` (whether a
server's ``/schema`` is this one).

The action is an assistant message: ``{"content": "..."}`` for text (tool calls written in it with the
``<tool_call>`` protocol), ``{"content": "...", "tool_calls": [...]}`` for native OpenAI tool calls.
The observation carries the Gymnasium step whole: ``text`` (the observation string), ``reward``,
``done`` (terminated or truncated) with ``terminated`` and ``truncated`` apart, and the step's ``info``
(``messages``, ``tools``, ``reward_components``, ``turn``; any other key of the env's info in ``extra``).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = [
    "chat_models",
    "to_env_action",
    "from_env_action",
    "observation_fields",
    "to_info",
    "is_chat_schema",
    "INFO_FIELDS",
]

#: The keys of an llmgym env's ``info`` that the observation carries as fields of their own.
INFO_FIELDS = ("messages", "tools", "reward_components", "turn")


@functools.cache
def chat_models() -> tuple[type, type]:
    """``(ChatAction, ChatObservation)``: OpenEnv pydantic models, built on first use (``openenv`` is an extra).

    Raises:
        ImportError: ``openenv`` is not installed (names the extra).
    """
    try:
        from openenv.core.env_server.types import Action, Observation
    except ImportError as err:
        raise ImportError('serving llmgym envs through OpenEnv needs openenv: pip install "llmgym[openenv]"') from err
    from pydantic import Field

    class ChatAction(Action):
        """One assistant turn: text, and native OpenAI tool calls when there are any."""

        content: str = Field(default="", description="the assistant's text; <tool_call> blocks in it are tool calls")
        # ``list[Any]``: a malformed call is the env's to answer with an error observation, not a 422 here
        tool_calls: list[Any] | None = Field(default=None, description="native OpenAI tool calls, if any")

    class ChatObservation(Observation):
        """One Gymnasium reset or step of an llmgym env."""

        text: str = Field(default="", description="the observation: what the agent reads this turn")
        terminated: bool = Field(default=False, description="the task is over")
        truncated: bool = Field(default=False, description="the turn or token budget ran out")
        messages: list[dict[str, Any]] = Field(default_factory=list, description="the chat so far, OpenAI format")
        tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI schemas of the env's tools")
        reward_components: dict[str, float] = Field(default_factory=dict, description="this turn's rewards by name")
        turn: int = Field(default=0, description="turns played")
        extra: dict[str, Any] = Field(default_factory=dict, description="any other key of the env's info")

    return ChatAction, ChatObservation


def to_env_action(content: str, tool_calls: list[Any] | None) -> str | dict[str, Any]:
    """The action ``LLMEnv.step`` takes for a wire action: its text, or the assistant message when it has tool calls.

    Example:
        >>> to_env_action("crane", None)
        'crane'
        >>> call = {"id": "c0", "type": "function", "function": {"name": "guess", "arguments": "{}"}}
        >>> to_env_action("", [call])["role"]
        'assistant'
    """
    if tool_calls:
        return {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}
    return content


def from_env_action(action: str | dict[str, Any]) -> dict[str, Any]:
    """The wire action for an llmgym action (the inverse of :func:`to_env_action`).

    Raises:
        TypeError: ``action`` is neither a string nor a dict (a programming error, as ``LLMEnv.step`` says).

    Example:
        >>> from_env_action("crane"), from_env_action({"role": "assistant", "content": "hi"})
        ({'content': 'crane'}, {'content': 'hi'})
    """
    if isinstance(action, str):
        return {"content": action}
    if not isinstance(action, dict):
        raise TypeError(f"an action must be str or an OpenAI assistant message dict, got {type(action).__name__}")
    content = action.get("content")
    wire: dict[str, Any] = {"content": content if isinstance(content, str) else ""}
    if action.get("tool_calls"):
        wire["tool_calls"] = action["tool_calls"]
    return wire


def observation_fields(text: str, info: dict[str, Any], terminated: bool, truncated: bool) -> dict[str, Any]:
    """The fields of a ``ChatObservation`` for one Gymnasium reset or step (reward set by the caller)."""
    return {
        "text": text,
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "done": bool(terminated or truncated),
        **{key: info[key] for key in INFO_FIELDS if key in info},
        "extra": {key: value for key, value in info.items() if key not in INFO_FIELDS},
    }


def to_info(observation: dict[str, Any]) -> dict[str, Any]:
    """The env's ``info`` back from an observation's fields (the inverse of :func:`observation_fields`).

    Example:
        >>> to_info({"text": "hi", "messages": [], "tools": [], "reward_components": {}, "turn": 0, "extra": {}})
        {'messages': [], 'tools': [], 'reward_components': {}, 'turn': 0}
    """
    info = {key: observation[key] for key in INFO_FIELDS if key in observation}
    info.update(observation.get("extra") or {})
    return info


def is_chat_schema(schema: dict[str, Any]) -> bool:
    """Whether a server's ``/schema`` is an llmgym env's (:func:`chat_models`), so a client may relay it whole.

    Example:
        >>> fields = {"text": {}, "messages": {}, "terminated": {}, "truncated": {}}
        >>> is_chat_schema({"action": {"properties": {"content": {}, "tool_calls": {}}},
        ...                 "observation": {"properties": fields}})
        True
        >>> is_chat_schema({"action": {"properties": {"message": {}}}, "observation": {"properties": {}}})
        False
    """
    action = (schema.get("action") or {}).get("properties") or {}
    observation = (schema.get("observation") or {}).get("properties") or {}
    return {"content", "tool_calls"} <= set(action) and {"text", "messages", "terminated", "truncated"} <= set(
        observation
    )
