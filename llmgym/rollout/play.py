"""Playing one episode, turn by turn: reset, ask the policy, record its tokens, step the env, build the record.

:func:`play_episode` is what each worker of :func:`llmgym.rollout.arollout` runs per (seed, index); its
state lives in :class:`_PlayState`. The steps are small functions in the order they run. Also holds what
the rollouts (this one and the multi-agent one) share: :func:`describe_error` (an error as a record keeps
it), :func:`env_name` and :func:`spec_id` (what an env is called), and :class:`EnvWorkerLost`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import time
import uuid
from typing import Any

import gymnasium as gym
import numpy as np

from llmgym.env import LLMEnv
from llmgym.episode import Episode, floor_logprobs
from llmgym.messages import Message, assistant, user
from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout.tokens import TokenMismatchError, TokenRecord

__all__ = ["play_episode", "EnvWorkerLost", "describe_error", "env_name", "spec_id"]


class EnvWorkerLost(RuntimeError):
    """The process that held the env died (a Ray actor killed): the episode is played again on a fresh env.

    Raised by a remote env's ``reset``/``step``; the rollout does not record the half-played
    episode, it plays it again from its reset (up to its ``worker_retries``), else records it as failed.
    """


async def play_episode(
    env: gym.Env,
    env_id: str | None,
    policy: Policy,
    sampling: SamplingParams,
    seed: int,
    index: int,
    group: int,
    executor: concurrent.futures.Executor | None = None,
) -> Episode:
    """One episode: reset, then generate and step until the env says it is over.

    An exception from the policy or the env ends this episode only; it is recorded
    in ``metadata["error"]`` with ``metadata["error_source"]`` ("policy" or "env").
    With ``executor``, the env's resets and steps run there: a remote env waits on the
    network, which must not hold up the other episodes' turns.

    Raises:
        EnvWorkerLost: the env's worker died; the caller plays the episode again or records it.
    """
    start = time.perf_counter()
    state = _PlayState()

    async def env_call(function: Any, *args: Any) -> None:
        if executor is None:
            function(*args)
        else:
            await asyncio.get_running_loop().run_in_executor(executor, function, *args)

    await env_call(_reset_episode, state, env, seed)
    turn = 0
    while state.error is None and not (state.terminated or state.truncated):
        turn += 1
        request = _turn_request(state, sampling, seed, index, turn)
        generation = await _generate(state, policy, request)
        if generation is None:  # the policy failed: the episode ends here
            break
        _record_reply(state, generation, turn, request.prefix_token_ids)
        await env_call(_step_episode, state, env, generation.message, turn)
    episode = _episode_record(state, env, env_id, seed)
    _fill_record(episode, state, policy, sampling, seed, index, group, start)
    return episode


@dataclasses.dataclass
class _PlayState:
    """What :func:`play_episode` has seen of one episode so far."""

    messages: list[Message] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    components: list[dict[str, float]] = dataclasses.field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    tokens: TokenRecord = dataclasses.field(default_factory=TokenRecord)
    thinking: list[int] = dataclasses.field(default_factory=list)  # thinking tokens per turn
    # thinking text a backend split off the reply, per turn
    reasoning: list[str | None] = dataclasses.field(default_factory=list)
    finish_reasons: list[str] = dataclasses.field(default_factory=list)
    generated_tokens: int | None = None
    model: str | None = None
    error: tuple[str, str] | None = None  # (where it came from, "Type: message")
    env_seconds: float = 0.0
    policy_seconds: float = 0.0
    # names the episode in its requests (PolicyRequest.episode_id): a policy routes its turns to one server
    episode_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)


def _reset_episode(state: _PlayState, env: gym.Env, seed: int) -> None:
    """Reset ``env`` into ``state``: its opening chat and tools, or the env's error."""
    tick = time.perf_counter()
    try:
        state.messages, state.tools = _reset(env, seed)
    except (TokenMismatchError, EnvWorkerLost):
        raise
    except Exception as err:  # a broken env (a sandbox that did not start) fails this episode only
        state.error = ("env", describe_error(err))
    state.env_seconds += time.perf_counter() - tick


def _turn_request(state: _PlayState, sampling: SamplingParams, seed: int, index: int, turn: int) -> PolicyRequest:
    """This turn's request: the chat so far, the tools, the turn's sampling, the tokens of the turns before."""
    return PolicyRequest(
        messages=list(state.messages),
        tools=state.tools,
        sampling=_turn_sampling(sampling, seed, index, turn),
        prefix_token_ids=state.tokens.prefix(),
        episode_id=state.episode_id,
    )


async def _generate(state: _PlayState, policy: Policy, request: PolicyRequest) -> Generation | None:
    """The policy's reply to ``request``; ``None`` when it failed, with the error in ``state``.

    Raises:
        TypeError: the policy returned no :class:`Generation`, or one whose message is no dict.
        TokenMismatchError: the policy broke the token-prefix contract.
    """
    tick = time.perf_counter()
    try:
        generation = await policy.agenerate(request)
    except TokenMismatchError:
        raise
    except Exception as err:  # one episode's failure must not end the run
        state.error = ("policy", describe_error(err))
        state.policy_seconds += time.perf_counter() - tick
        return None
    state.policy_seconds += time.perf_counter() - tick
    if not isinstance(generation, Generation):
        raise TypeError(f"{type(policy).__name__}.agenerate returned {type(generation).__name__}, not a Generation")
    if not isinstance(generation.message, dict):
        raise TypeError(
            f"{type(policy).__name__}.agenerate returned a Generation whose message is a "
            f"{type(generation.message).__name__}, not a dict {{'role': 'assistant', 'content': ...}}"
        )
    content = generation.message.get("content")
    if content is not None and not isinstance(content, str):  # playing it as "" would hide a broken policy
        state.error = ("policy", f"TypeError: the reply's content is of type {type(content).__name__}, not a string")
        return None
    return generation


def _record_reply(state: _PlayState, generation: Generation, turn: int, prefix_token_ids: list[int] | None) -> None:
    """Record one turn's reply: its tokens, thinking, finish reason, token count and model."""
    state.tokens.add(generation, turn, prefix_token_ids)
    state.thinking.append(int(generation.thinking_tokens))
    state.reasoning.append(generation.message.get("reasoning_content"))
    state.finish_reasons.append(generation.finish_reason)
    count = _count_generated(generation)
    if count is not None:
        state.generated_tokens = (state.generated_tokens or 0) + count
    state.model = state.model or generation.metadata.get("model")


def _step_episode(state: _PlayState, env: gym.Env, reply: Message, turn: int) -> None:
    """Step ``env`` with ``reply`` into ``state``: the reward, its components, the chat after it, or the env's error."""
    tick = time.perf_counter()
    try:
        reward, components, after, state.terminated, state.truncated = _step(env, reply, state.messages, turn)
    except (TokenMismatchError, EnvWorkerLost):
        raise
    except Exception as err:  # the record keeps the reply the env failed on, so the failure can be replayed
        state.error = ("env", describe_error(err))
        state.messages = state.messages + [_assistant_message(reply)]
    else:
        state.rewards.append(reward)
        state.components.append(components)
        state.messages = after
    state.env_seconds += time.perf_counter() - tick


def _episode_record(state: _PlayState, env: gym.Env, env_id: str | None, seed: int) -> Episode:
    """The played episode: an :class:`LLMEnv`'s own record with the outcome this loop saw, else this loop's record.

    A failure to build the env's record becomes the episode's env error (unless it already has one).
    """
    base = getattr(env, "unwrapped", env)
    if isinstance(base, LLMEnv) and (state.error is None or state.error[0] == "policy"):
        try:
            episode = base.episode(env_id)  # the env is sound: its chat, tools and components are the truth
        except TokenMismatchError:
            raise
        except Exception as err:
            state.error = state.error or ("env", describe_error(err))
        else:  # but the outcome is what the caller's env returned, through its wrappers (TimeLimit, TransformReward)
            episode.turn_rewards = state.rewards
            episode.terminated, episode.truncated = state.terminated, state.truncated
            if len(episode.reward_components) != len(state.rewards):  # a wrapper did not step the base env every turn
                episode.reward_components = state.components
            return episode
    # a plain env, or an env that failed: its state may be stale, so only what this loop saw counts
    return Episode(
        env_id=env_id or env_name(env),
        seed=seed,
        messages=state.messages,
        tools=state.tools,
        turn_rewards=state.rewards,
        reward_components=state.components,
        terminated=state.terminated,
        truncated=state.truncated,
    )


def _fill_record(
    episode: Episode,
    state: _PlayState,
    policy: Policy,
    sampling: SamplingParams,
    seed: int,
    index: int,
    group: int,
    start: float,
) -> None:
    """Add what the run knows to ``episode``: seed, group, policy, tokens, timing, per-turn metadata, any error."""
    episode.seed = seed
    episode.group = group
    episode.policy = getattr(policy, "name", type(policy).__name__)
    state.tokens.fill(episode)
    episode.logprobs = floor_logprobs(episode.logprobs)  # as the JSONL file will hold them
    episode.timing = {
        "env_s": state.env_seconds,
        "policy_s": state.policy_seconds,
        "wall_s": time.perf_counter() - start,
    }
    episode.metadata.update(
        {
            "group_index": index,
            "sampling": dataclasses.asdict(sampling),
            "thinking_tokens": sum(state.thinking),
            "turn_thinking_tokens": state.thinking,
            "finish_reasons": state.finish_reasons,
            "generated_tokens": state.generated_tokens,
        }
    )
    if state.model is not None:
        episode.metadata["model"] = state.model
    if any(state.reasoning):
        episode.metadata["reasoning"] = state.reasoning
    if state.error is not None:
        episode.metadata["error_source"], episode.metadata["error"] = state.error


def _reset(env: gym.Env, seed: int) -> tuple[list[Message], list[dict[str, Any]]]:
    """Reset ``env``; return the chat it starts with and the tools it offers."""
    observation, info = env.reset(seed=seed)
    return list(info.get("messages") or [user(str(observation))]), list(info.get("tools") or [])


def _step(
    env: gym.Env,
    reply: Message,
    messages: list[Message],
    turn: int,
) -> tuple[float, dict[str, float], list[Message], bool, bool]:
    """Step ``env`` with the policy's ``reply``.

    Returns:
        The reward, its components, the chat after the step, terminated, truncated.

    Raises:
        Exception: whatever the env raises; ``ValueError`` for a reward that is not a finite number.
    """
    observation, reward, terminated, truncated, info = env.step(_action(reply))
    reward = _finite_reward(reward, turn)
    components = _float_components(info.get("reward_components") or {}, turn)
    if "messages" in info:
        after = list(info["messages"])
    else:  # a plain Gymnasium env: keep the chat ourselves
        after = messages + [_assistant_message(reply), user(str(observation))]
    return reward, components, after, bool(terminated), bool(truncated)


def describe_error(err: Exception) -> str:
    """An exception as ``metadata["error"]`` records it: ``"Type: message"``.

    Example:
        >>> describe_error(ValueError("no such word"))
        'ValueError: no such word'
    """
    return f"{type(err).__name__}: {err}"


def _finite_reward(reward: Any, turn: int) -> float:
    """The env's reward as a plain float.

    Raises:
        ValueError: it is not a number, or not a finite one (an LLMEnv's rubric refuses those itself;
            a plain Gymnasium env is checked here).
    """
    value = float(reward)
    if not math.isfinite(value):
        raise ValueError(f"the env returned a non-finite reward {value} on turn {turn}")
    return value


def _float_components(components: dict[str, Any], turn: int) -> dict[str, float]:
    """The env's reward components as plain floats (a plain env may give ``numpy.bool_`` or ``numpy.float32``).

    Raises:
        ValueError: a component is not a number (a string counts as none), or not a finite one.
    """
    floats = {}
    for name, value in dict(components).items():
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError(value)
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"the env's reward component {name!r} on turn {turn} is {value!r}, not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"the env returned a non-finite reward component {name!r}={number} on turn {turn}")
        floats[str(name)] = number
    return floats


def env_name(env: gym.Env) -> str:
    """The env's registered id, else its class name; never raises, even on a half-built env."""
    return spec_id(env) or type(getattr(env, "unwrapped", env)).__name__


def spec_id(env: gym.Env) -> str | None:
    """The id ``env`` is registered under (``env.spec.id``); ``None`` for an unregistered env."""
    spec_id = getattr(getattr(env, "spec", None), "id", None)
    return spec_id if isinstance(spec_id, str) else None


def _turn_sampling(sampling: SamplingParams, seed: int, index: int, turn: int) -> SamplingParams:
    """This turn's sampling: the same settings, with a seed of its own when ``sampling.seed`` is set."""
    if sampling.seed is None:
        return sampling
    entropy = [sampling.seed % 2**32, seed % 2**32, index, turn]
    turn_seed = int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)
    return dataclasses.replace(sampling, seed=turn_seed)


def _action(message: Message) -> str | dict[str, Any]:
    """The env action: the message itself when it carries native tool calls, else its text."""
    if message.get("tool_calls"):
        return message
    return message.get("content") or ""  # a string, or None (checked in _generate)


def _assistant_message(message: Message) -> Message:
    if message.get("tool_calls"):
        return dict(message)
    return assistant(str(message.get("content") or ""))


def _count_generated(generation: Generation) -> int | None:
    """Generated tokens of one turn: the ids, else the backend's usage count (OpenAI ``usage``), else unknown."""
    if generation.token_ids is not None:
        return len(generation.token_ids)
    usage = generation.metadata.get("usage")
    count = usage.get("completion_tokens") if isinstance(usage, dict) else generation.metadata.get("completion_tokens")
    return int(count) if isinstance(count, (int, float)) and not isinstance(count, bool) else None
