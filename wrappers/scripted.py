"""Scripted policies: any ``act(observation) -> str`` object played as a :class:`~llmgym.policy.Policy`.

Holds :class:`ScriptedPolicy` and :func:`load_scripted`, which resolves names
like ``"wordle"`` (the built-in :class:`~llmgym.envs.wordle.solver.WordleSolver`)
or ``"package.module:Class"``. ``llmgym eval --policy scripted:wordle`` uses
them to run a whole evaluation with no model.

A scripted actor is usually stateful (it remembers the feedback so far) while
one policy serves many concurrent episodes. So for each request the policy
builds a fresh actor and replays the episode's observations, read from the
request's messages, through it: every request is answered independently and
the same chat always gets the same action.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from llmgym.messages import Message
from llmgym.policy import Generation, Policy, PolicyRequest

__all__ = ["Actor", "ScriptedPolicy", "load_scripted", "SCRIPTED_ACTORS", "observations"]

#: Built-in scripted actors by short name.
SCRIPTED_ACTORS: dict[str, str] = {
    "wordle": "llmgym.envs.wordle.solver:WordleSolver",
    "wordle-sampler": "llmgym.envs.wordle.solver:WordleSampler",
    "wordle-random": "llmgym.envs.wordle.solver:RandomGuesser",
    "multiply": "llmgym.envs.multiply:MultiplySolver",
    "multiply-mixed": "llmgym.envs.multiply:MixedMultiplyTeacher",
    "code-tests": "llmgym.envs.code_tests.solver:CodeTestsSolver",
    "code-tests-flawed": "llmgym.envs.code_tests.solver:FlawedCodeTestsSolver",
    "legal-random": "llmgym.envs.multiagent.legal_random:LegalRandom",
}


class Actor(Protocol):
    """Anything that answers an observation with an action text."""

    def act(self, observation: str) -> str: ...


def observations(messages: list[Message]) -> list[str]:
    """The observations an agent saw in a chat: what came after each assistant turn.

    The first observation is the first user message; each later one joins
    the contents of the tool and user messages that followed an assistant
    message. The system prompt is not an observation.

    Example:
        >>> observations([{"role": "system", "content": "rules"}, {"role": "user", "content": "start"},
        ...               {"role": "assistant", "content": "a"}, {"role": "tool", "content": "ok"}])
        ['start', 'ok']
    """
    seen: list[str] = []
    current: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            seen.append("\n".join(current))
            current = []
        elif role in ("user", "tool"):
            current.append(str(message.get("content") or ""))
    seen.append("\n".join(current))
    return seen


class ScriptedPolicy(Policy):
    """Play a scripted actor as a policy.

    Args:
        factory: makes a fresh actor (a class with ``act(observation) -> str``).
        name: the policy's name in episode records.

    Example:
        >>> from llmgym.envs.wordle.solver import WordleSolver
        >>> from llmgym.rollout import rollout
        >>> episodes = rollout("llmgym/Wordle-v0", ScriptedPolicy(WordleSolver), seeds=[1])
        >>> episodes[0].terminated, episodes[0].component_totals()["solved"]
        (True, 1.0)
    """

    def __init__(self, factory: Callable[[], Actor], name: str | None = None):
        if not callable(factory):
            raise TypeError(f"factory must make an actor (a class or function), got {type(factory).__name__}")
        self.factory = factory
        self.name = name or f"scripted:{getattr(factory, '__name__', type(factory).__name__)}"

    def act(self, messages: list[Message]) -> str:
        """The actor's action after replaying every observation in ``messages``."""
        actor = self.factory()
        action = ""
        for observation in observations(messages):
            action = actor.act(observation)
        if not isinstance(action, str):
            raise TypeError(f"{type(actor).__name__}.act returned {type(action).__name__}, not str")
        return action

    async def agenerate(self, request: PolicyRequest) -> Generation:
        return Generation({"role": "assistant", "content": self.act(request.messages)})

    def generate(self, requests: list[PolicyRequest]) -> list[Generation]:
        return [Generation({"role": "assistant", "content": self.act(r.messages)}) for r in requests]


def import_user_module(name: str) -> Any:
    """``importlib.import_module(name)``, also finding a module in the current folder.

    ``python -m`` puts the current folder on ``sys.path``, an installed ``llmgym`` command
    does not: ``--policy scripted:my_actor:Actor`` beside ``my_actor.py`` failed with
    "No module named 'my_actor'". The folder is appended, so it never shadows an installed package.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        here = os.getcwd()
        if err.name != name.partition(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(name)


def load_scripted(spec: str, **kwargs: Any) -> ScriptedPolicy:
    """A :class:`ScriptedPolicy` for a built-in name (``"wordle"``) or ``"module:Class"``.

    Args:
        spec: a key of :data:`SCRIPTED_ACTORS` or an import path ``"module:attr"``.
        **kwargs: passed to the actor's constructor.

    Raises:
        ValueError: the name is unknown, the import path does not resolve, or what it
            names does not make an :class:`Actor` (an object with ``act(observation) -> str``).

    Example:
        >>> load_scripted("wordle").name
        'scripted:wordle'
        >>> try:
        ...     load_scripted("json:JSONDecoder")
        ... except ValueError as err:
        ...     print(err)
        scripted policy 'json:JSONDecoder' (json:JSONDecoder) is a class without an act(observation) -> str method
    """
    target = SCRIPTED_ACTORS.get(spec, spec)
    if ":" not in target:
        raise ValueError(
            f"unknown scripted policy {spec!r}; built-in: {', '.join(sorted(SCRIPTED_ACTORS))}, "
            "or give an import path like 'mypackage.module:MyActor'"
        )
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(import_user_module(module_name), attr)
    except (
        ImportError,
        AttributeError,
        ValueError,
        TypeError,
    ) as err:  # ValueError, TypeError: empty or relative module
        raise ValueError(f"cannot load scripted policy {spec!r} ({target}): {err}") from None
    if not callable(factory):
        raise ValueError(f"scripted policy {spec!r} ({target}) is a {type(factory).__name__}, not a class or function")
    what = f"scripted policy {spec!r} ({target})"
    if isinstance(factory, type) and not callable(getattr(factory, "act", None)):
        raise ValueError(f"{what} is a class without an act(observation) -> str method")
    make = (lambda: factory(**kwargs)) if kwargs else factory
    # one actor made now, so a factory that makes no actor fails here, not on every request of the run
    try:
        actor = make()
    except Exception as err:
        raise ValueError(f"{what} cannot make an actor: {type(err).__name__}: {err}") from None
    if not callable(getattr(actor, "act", None)):
        raise ValueError(f"{what} makes a {type(actor).__name__}, which has no act(observation) -> str method")
    return ScriptedPolicy(make, name=f"scripted:{spec}")
