"""How a rollout runs: workers, turns, records, the JSONL stream.

Holds :func:`rollout` (blocking) and :func:`arollout` (async), which play a
policy on an environment for a list of seeds, ``group_size`` episodes per
seed (a GRPO group), and :func:`summarize`, which turns episodes into the
numbers ``llmgym eval`` prints. Token bookkeeping lives in
:mod:`llmgym.rollout.tokens`, statistics in :mod:`llmgym.rollout.stats`, the
checks of a resumed file in :mod:`llmgym.rollout.resume`.

How a run works: ``max_concurrency`` workers (asyncio tasks) each own one env
instance and take (seed, index-in-group) jobs from a queue. Each turn awaits
``policy.agenerate(request)``; a local batched policy groups the requests of
concurrent episodes itself, a server policy keeps up to ``max_concurrency``
requests in flight. ``env.step`` runs in the event loop (it is fast). Every
finished episode is written to the JSONL file at once (flushed), so a crash
loses nothing, and ``resume=True`` skips the (seed, index) pairs already in
the file (a file of other settings is refused: :func:`resume_conflict`).

An exception from the policy or from the env on one episode does not stop
the run: the episode is recorded with ``metadata["error"]`` and
``metadata["error_source"]`` and the run goes on (a policy does its own
retries). A policy that breaks the token-prefix contract raises
:class:`TokenMismatchError`, because training on such tokens would be wrong.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from llmgym.env import LLMEnv
from llmgym.episode import Episode, JSONLWriter, floor_logprobs
from llmgym.messages import Message, assistant, user
from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout.resume import as_recorded, episode_key, resume_conflict, resumed_episodes
from llmgym.rollout.stats import summarize
from llmgym.rollout.tokens import TokenMismatchError, TokenRecord

__all__ = [
    "rollout",
    "arollout",
    "run_sync",
    "summarize",
    "episode_key",
    "resume_conflict",
    "TokenMismatchError",
    "EnvSource",
]

#: An env id for ``gymnasium.make`` or a function that builds a fresh env.
EnvSource = str | Callable[[], gym.Env]
#: ``progress(done, total, episode)``: called after every finished episode.
ProgressFn = Callable[[int, int, Episode], None]


def rollout(
    env: EnvSource,
    policy: Policy,
    *,
    seeds: Sequence[int] | int,
    group_size: int = 1,
    max_concurrency: int = 32,
    sampling: SamplingParams | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool | ProgressFn = False,
    env_kwargs: dict[str, Any] | None = None,
) -> list[Episode]:
    """Play ``policy`` on ``env`` for every seed, ``group_size`` times each; return the episodes.

    Args:
        env: a registered env id (made with ``gymnasium.make(env, **env_kwargs)``)
            or a function returning a fresh env.
        policy: any :class:`~llmgym.policy.Policy`.
        seeds: the reset seeds, or an int ``n`` for seeds ``0..n-1``: distinct ints >= 0 (numpy ints too).
        group_size: episodes per seed (GRPO's G); episodes of one seed share ``Episode.group``.
        max_concurrency: episodes in flight at once (one env instance each).
        sampling: sampling settings for every turn (default :class:`SamplingParams`).
            With ``sampling.seed`` set, each turn gets its own seed derived from
            it, the episode's seed, its index in the group and the turn, so
            runs repeat exactly and the episodes of a group still differ.
        jsonl_path: stream every finished episode to this JSONL file.
        resume: keep the episodes already in ``jsonl_path`` and run only the
            missing (seed, index) pairs; episodes recorded as failed are run again.
            Without it the file is emptied, once the first env is built and checked.
        progress: ``True`` shows a rich progress bar on stderr; a callable is
            called as ``progress(done, total, episode)`` after each episode.
        env_kwargs: keyword arguments for ``gymnasium.make``.

    Returns:
        One :class:`~llmgym.Episode` per (seed, index), ordered by seed then
        index; episodes resumed from the file included.

    Raises:
        ValueError: bad arguments (a negative seed), a JSONL file to resume from another
            environment or other settings (:func:`resume_conflict`), or a policy that breaks
            the token-prefix contract (:class:`TokenMismatchError`).
        TypeError: seeds that are not ints, an env whose actions are not text, or a policy
            that returns no :class:`~llmgym.policy.Generation` or one whose message is no dict.

    Example:
        >>> from llmgym.policy import Generation
        >>> class Crane(Policy):
        ...     async def agenerate(self, request):
        ...         return Generation({"role": "assistant", "content": "crane"})
        >>> episodes = rollout("llmgym/Wordle-v0", Crane(), seeds=[0, 1], group_size=2)
        >>> [(e.seed, e.group, e.metadata["group_index"]) for e in episodes]
        [(0, 0, 0), (0, 0, 1), (1, 1, 0), (1, 1, 1)]
    """
    coro = arollout(
        env,
        policy,
        seeds=seeds,
        group_size=group_size,
        max_concurrency=max_concurrency,
        sampling=sampling,
        jsonl_path=jsonl_path,
        resume=resume,
        progress=progress,
        env_kwargs=env_kwargs,
    )
    return run_sync(coro)


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous code, also inside a running event loop (a notebook).

    Example:
        >>> async def answer():
        ...     return 42
        >>> run_sync(answer())
        42
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside a running loop: asyncio.run would refuse, so the coroutine gets a thread and a loop of its own.
    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        try:  # from before the thread starts: a Ctrl-C at any moment it runs must reach the except below
            return pool.submit(_run_loop, loop, task).result()
        except BaseException:  # Ctrl-C here: stop the coroutine too, instead of waiting for it to run to its end
            loop.call_soon_threadsafe(task.cancel)
            raise


def _run_loop(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> Any:
    """Run ``task`` on ``loop`` in this thread, then close the loop as :func:`asyncio.run` does."""
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(task)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for other in pending:
                other.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def arollout(
    env: EnvSource,
    policy: Policy,
    *,
    seeds: Sequence[int] | int,
    group_size: int = 1,
    max_concurrency: int = 32,
    sampling: SamplingParams | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool | ProgressFn = False,
    env_kwargs: dict[str, Any] | None = None,
) -> list[Episode]:
    """The async form of :func:`rollout` (same arguments), for callers with an event loop."""
    seed_list = _check_seeds(seeds)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if resume and jsonl_path is None:
        raise ValueError("resume=True needs jsonl_path: the file to resume from")
    make_env = _env_factory(env, env_kwargs)
    env_id = env if isinstance(env, str) else None
    # recorded in every episode, so that a resume can refuse other settings; kwargs that are not JSON are not
    recorded_kwargs = as_recorded(env_kwargs or {}) if env_id is not None else None
    sampling = sampling or SamplingParams()
    groups = {seed: position for position, seed in enumerate(seed_list)}

    # The first env is built and checked before the file is touched: a run that cannot start (bad env_kwargs, a
    # broken factory, an env that does not take text) must not wipe an earlier run's episodes. It plays too.
    spare = make_env() if seed_list else None
    try:
        if spare is not None:
            _check_text_env(spare)
        if env_id is None and spare is not None:
            # a factory's env counts by the id it is registered under, in its records and in a resume's check; a
            # class name (an unregistered env) is no id: a file of a subclass may be resumed with its fixed parent
            env_id = _spec_id(spare)
        done = resumed_episodes(jsonl_path, env_id, recorded_kwargs, sampling, groups, group_size) if resume else {}
        writer = JSONLWriter(jsonl_path, append=resume) if jsonl_path is not None else None
    except BaseException:
        if spare is not None:
            with contextlib.suppress(Exception):  # the reason the run did not start is the error worth showing
                spare.close()
        raise
    jobs = [(seed, index) for seed in seed_list for index in range(group_size) if (seed, index) not in done]
    total = len(seed_list) * group_size

    results = dict(done)
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    reporter = _Progress(progress, total, initial=len(done))

    async def worker() -> None:
        nonlocal spare
        instance, spare = spare, None  # the first worker plays on the env built above; a later one builds its own
        try:
            while True:
                try:
                    seed, index = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                if instance is None:
                    try:
                        instance = make_env()
                    except Exception as err:  # an env was built before, so not bad arguments: one failed episode
                        episode = _unbuilt(env, env_id, policy, sampling, seed, index, groups[seed], err)
                if instance is not None:
                    episode = await _play(instance, env_id, policy, sampling, seed, index, groups[seed])
                if recorded_kwargs is not None:
                    episode.metadata["env_kwargs"] = recorded_kwargs
                results[(seed, index)] = episode
                if writer is not None:
                    writer.write(episode)
                reporter.advance(episode)
                # a policy that never suspends (a scripted one) would otherwise hold the event loop for the whole
                # run, and Ctrl-C (which cancels the main task) would only reach it once every episode was played
                await asyncio.sleep(0)
        finally:
            if instance is not None:
                _close(instance)

    policy_limit = getattr(policy, "max_concurrency", None)
    if policy_limit is not None:  # the policy knows its own sweet spot (llama.cpp: one stream)
        max_concurrency = min(max_concurrency, policy_limit)
    workers = [asyncio.create_task(worker()) for _ in range(min(max_concurrency, len(jobs)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if spare is not None:  # no job left to play (all resumed)
            _close(spare)
        reporter.close()
        if writer is not None:
            writer.close()
    return [results[(seed, index)] for seed in seed_list for index in range(group_size)]


async def _play(
    env: gym.Env,
    env_id: str | None,
    policy: Policy,
    sampling: SamplingParams,
    seed: int,
    index: int,
    group: int,
) -> Episode:
    """One episode: reset, then generate and step until the env says it is over.

    An exception from the policy or the env ends this episode only; it is recorded
    in ``metadata["error"]`` with ``metadata["error_source"]`` ("policy" or "env").
    """
    start = time.perf_counter()
    state = _PlayState()
    _reset_episode(state, env, seed)
    turn = 0
    while state.error is None and not (state.terminated or state.truncated):
        turn += 1
        request = _turn_request(state, sampling, seed, index, turn)
        generation = await _generate(state, policy, request)
        if generation is None:  # the policy failed: the episode ends here
            break
        _record_reply(state, generation, turn, request.prefix_token_ids)
        _step_episode(state, env, generation.message, turn)
    episode = _episode_record(state, env, env_id, seed)
    _fill_record(episode, state, policy, sampling, seed, index, group, start)
    return episode


@dataclasses.dataclass
class _PlayState:
    """What :func:`_play` has seen of one episode so far."""

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


def _reset_episode(state: _PlayState, env: gym.Env, seed: int) -> None:
    """Reset ``env`` into ``state``: its opening chat and tools, or the env's error."""
    tick = time.perf_counter()
    try:
        state.messages, state.tools = _reset(env, seed)
    except TokenMismatchError:
        raise
    except Exception as err:  # a broken env (a sandbox that did not start) fails this episode only
        state.error = ("env", _describe(err))
    state.env_seconds += time.perf_counter() - tick


def _turn_request(state: _PlayState, sampling: SamplingParams, seed: int, index: int, turn: int) -> PolicyRequest:
    """This turn's request: the chat so far, the tools, the turn's sampling, the tokens of the turns before."""
    return PolicyRequest(
        messages=list(state.messages),
        tools=state.tools,
        sampling=_turn_sampling(sampling, seed, index, turn),
        prefix_token_ids=state.tokens.prefix(),
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
        state.error = ("policy", _describe(err))
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
    except TokenMismatchError:
        raise
    except Exception as err:  # the record keeps the reply the env failed on, so the failure can be replayed
        state.error = ("env", _describe(err))
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
            state.error = state.error or ("env", _describe(err))
        else:  # but the outcome is what the caller's env returned, through its wrappers (TimeLimit, TransformReward)
            episode.turn_rewards = state.rewards
            episode.terminated, episode.truncated = state.terminated, state.truncated
            if len(episode.reward_components) != len(state.rewards):  # a wrapper did not step the base env every turn
                episode.reward_components = state.components
            return episode
    # a plain env, or an env that failed: its state may be stale, so only what this loop saw counts
    return Episode(
        env_id=env_id or _env_name(env),
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


def _close(env: gym.Env) -> None:
    """Close ``env``; a failure is a ``RuntimeWarning``: the episodes are played and written, and must not be lost."""
    try:
        env.close()
    except Exception as err:
        warnings.warn(f"closing the env failed: {_describe(err)}", RuntimeWarning, stacklevel=1)


def _check_text_env(env: gym.Env) -> None:
    """Refuse an env whose actions are not text (CartPole's ``Discrete(2)``): no episode of it could be played.

    An env that declares no action space at all is let through: it may well take text, as it did before this check.

    Raises:
        TypeError: ``env.action_space`` is set and is not a :class:`gymnasium.spaces.Text`.
    """
    space = getattr(env, "action_space", None)
    if space is not None and not isinstance(space, gym.spaces.Text):
        raise TypeError(
            f"rollout plays text actions, but {_env_name(env)}'s action space is {space!r}; "
            "use an llmgym env or a Gymnasium env with a Text action space"
        )


def _unbuilt(
    source: EnvSource,
    env_id: str | None,
    policy: Policy,
    sampling: SamplingParams,
    seed: int,
    index: int,
    group: int,
    err: Exception,
) -> Episode:
    """The record of an episode whose env could not be built: nothing played, the error kept."""
    name = env_id or getattr(source, "__name__", type(source).__name__)
    return Episode(
        env_id=name,
        seed=seed,
        group=group,
        policy=getattr(policy, "name", type(policy).__name__),
        timing={"env_s": 0.0, "policy_s": 0.0, "wall_s": 0.0},
        metadata={
            "group_index": index,
            "sampling": dataclasses.asdict(sampling),
            "thinking_tokens": 0,
            "turn_thinking_tokens": [],
            "finish_reasons": [],
            "generated_tokens": None,
            "error_source": "env",
            "error": _describe(err),
        },
    )


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


def _describe(err: Exception) -> str:
    """An exception as ``metadata["error"]`` records it: ``"Type: message"``."""
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


def _env_name(env: gym.Env) -> str:
    """The env's registered id, else its class name; never raises, even on a half-built env."""
    return _spec_id(env) or type(getattr(env, "unwrapped", env)).__name__


def _spec_id(env: gym.Env) -> str | None:
    """The id ``env`` is registered under (``env.spec.id``); ``None`` for an unregistered env."""
    spec_id = getattr(getattr(env, "spec", None), "id", None)
    return spec_id if isinstance(spec_id, str) else None


def _check_seeds(seeds: Sequence[int] | int) -> list[int]:
    """``seeds`` as a list of plain ints: an int ``n`` stands for ``0..n-1``; numpy ints are welcome.

    Raises:
        TypeError: ``seeds`` is a bool, or neither an int nor a sequence of ints (``[1.5]``).
        ValueError: a seed is negative (gymnasium's ``reset`` refuses it), or seeds repeat.
    """
    if _is_int(seeds):
        if seeds < 0:
            raise ValueError(f"seeds as a count must be >= 0, got {seeds}")
        return list(range(int(seeds)))
    if isinstance(seeds, (bool, np.bool_, str, bytes)) or not isinstance(seeds, Iterable):
        raise TypeError(f"seeds must be a count (an int) or a sequence of ints, got {seeds!r}")
    seed_list = list(seeds)
    for seed in seed_list:
        if not _is_int(seed):
            raise TypeError(f"seeds must be ints, got {seed!r} ({type(seed).__name__})")
        if seed < 0:
            raise ValueError(f"seeds must be >= 0 (gymnasium's reset refuses a negative seed), got {seed}")
    seed_list = [int(seed) for seed in seed_list]
    if len(set(seed_list)) != len(seed_list):
        raise ValueError("seeds must be distinct; use group_size to play one seed several times")
    return seed_list


def _is_int(value: Any) -> bool:
    """Whether ``value`` is an int or a numpy int, and not a bool (``True`` is no seed)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _env_factory(env: EnvSource, env_kwargs: dict[str, Any] | None) -> Callable[[], gym.Env]:
    if isinstance(env, str):
        gym.spec(env)  # an unknown id fails here, before any worker starts
        kwargs = dict(env_kwargs or {})
        return lambda: gym.make(env, **kwargs)
    if env_kwargs:
        raise ValueError("env_kwargs only apply to an env id; pass them to your env factory instead")
    if not callable(env):
        raise TypeError(f"env must be an env id or a function returning an env, got {type(env).__name__}")
    return env


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


class _Progress:
    """Reports finished episodes to a rich progress bar or a callback."""

    def __init__(self, progress: bool | ProgressFn, total: int, initial: int):
        self.callback = progress if callable(progress) else None
        self.total, self.done = total, initial
        self.bar = None
        if progress is True:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("episodes"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("mean reward {task.fields[mean]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.rewards: list[float] = []
            self.task = self.bar.add_task("rollout", total=total, completed=initial, mean="-")
            self.bar.start()

    def advance(self, episode: Episode) -> None:
        self.done += 1
        if self.bar is not None:
            self.rewards.append(episode.total_reward)
            self.bar.update(self.task, advance=1, mean=f"{np.mean(self.rewards):.3f}")
        if self.callback is not None:
            self.callback(self.done, self.total, episode)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
