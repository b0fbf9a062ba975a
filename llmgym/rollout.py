"""The rollout engine: many episodes at once, recorded token-exactly, streamed to JSONL.

Holds :func:`rollout` (blocking) and :func:`arollout` (async), which play a
policy on an environment for a list of seeds, ``group_size`` episodes per
seed (a GRPO group), and :func:`summarize`, which turns episodes into the
numbers ``llmgym eval`` prints. Token bookkeeping lives in
:mod:`llmgym.rollout_tokens`, statistics in :mod:`llmgym.rollout_stats`.

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
import contextlib
import concurrent.futures
import dataclasses
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence, Union

import gymnasium as gym
import numpy as np

from llmgym.env import LLMEnv
from llmgym.episode import Episode, JSONLWriter, floor_logprobs, iter_jsonl
from llmgym.messages import Message, assistant, user
from llmgym.policy import Generation, Policy, PolicyRequest, SamplingParams
from llmgym.rollout_stats import summarize
from llmgym.rollout_tokens import TokenMismatchError, TokenRecord

__all__ = ["rollout", "arollout", "run_sync", "summarize", "episode_key", "resume_conflict", "TokenMismatchError",
           "EnvSource"]

#: An env id for ``gymnasium.make`` or a function that builds a fresh env.
EnvSource = Union[str, Callable[[], gym.Env]]
#: ``progress(done, total, episode)``: called after every finished episode.
ProgressFn = Callable[[int, int, Episode], None]


def episode_key(episode: Episode) -> tuple[int | None, int]:
    """The (seed, index in its group) pair that identifies an episode within a run.

    Example:
        >>> episode_key(Episode("llmgym/Wordle-v0", seed=4, metadata={"group_index": 1}))
        (4, 1)
    """
    return episode.seed, int(episode.metadata.get("group_index", 0))


def resume_conflict(
    episode: Episode, env_id: str | None, env_kwargs: dict[str, Any] | None, sampling: SamplingParams,
) -> str | None:
    """Why ``episode``, read from a file being resumed, does not belong to a run of these settings; ``None`` if it does.

    Compares the env id, the env kwargs (``metadata["env_kwargs"]``, recorded for an env id
    since this check exists) and the sampling settings (``metadata["sampling"]``) except the
    seed: a resumed run may add seeds, and so a first seed of its own. ``None`` arguments
    and settings the episode does not record are not compared.

    Example:
        >>> ep = Episode("llmgym/Wordle-v0", metadata={"env_kwargs": {"max_turns": 6},
        ...              "sampling": {"temperature": 0.7, "top_p": 1.0, "seed": 0}})
        >>> resume_conflict(ep, "llmgym/Wordle-v0", {"max_turns": 6}, SamplingParams(seed=5)) is None
        True
        >>> resume_conflict(ep, "llmgym/Wordle-v0", {}, SamplingParams())
        "holds episodes played with env_kwargs {'max_turns': 6}, not {}"
        >>> resume_conflict(ep, "llmgym/Wordle-v0", None, SamplingParams(temperature=0.0))
        'holds episodes sampled with temperature=0.7, not temperature=0.0'
    """
    if env_id is not None and episode.env_id != env_id:
        return f"holds episodes of {episode.env_id!r}, not {env_id!r}"
    recorded, now = episode.metadata.get("env_kwargs"), _as_json(env_kwargs)
    if isinstance(recorded, dict) and isinstance(now, dict) and recorded != now:
        return f"holds episodes played with env_kwargs {recorded}, not {env_kwargs}"
    recorded = episode.metadata.get("sampling")
    if isinstance(recorded, dict):
        now = _as_json(dataclasses.asdict(sampling))
        for name, value in now.items():
            if name != "seed" and name in recorded and recorded[name] != value:
                return f"holds episodes sampled with {name}={recorded[name]!r}, not {name}={value!r}"
    return None


def _as_json(value: Any) -> Any:
    """``value`` as it reads back from a JSONL record (tuples become lists); ``None`` when it is not JSON."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return None


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
        seeds: the reset seeds, or an int ``n`` for seeds ``0..n-1``. Seeds must be distinct.
        group_size: episodes per seed (GRPO's G); episodes of one seed share ``Episode.group``.
        max_concurrency: episodes in flight at once (one env instance each).
        sampling: sampling settings for every turn (default :class:`SamplingParams`).
            With ``sampling.seed`` set, each turn gets its own seed derived from
            it, the episode's seed, its index in the group and the turn, so
            runs repeat exactly and the episodes of a group still differ.
        jsonl_path: stream every finished episode to this JSONL file.
        resume: keep the episodes already in ``jsonl_path`` and run only the
            missing (seed, index) pairs; episodes recorded as failed are run again.
        progress: ``True`` shows a rich progress bar on stderr; a callable is
            called as ``progress(done, total, episode)`` after each episode.
        env_kwargs: keyword arguments for ``gymnasium.make``.

    Returns:
        One :class:`~llmgym.Episode` per (seed, index), ordered by seed then
        index; episodes resumed from the file included.

    Raises:
        ValueError: bad arguments, a JSONL file to resume from another environment or other
            settings (:func:`resume_conflict`), or a policy that breaks the token-prefix
            contract (:class:`TokenMismatchError`).

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
        env, policy, seeds=seeds, group_size=group_size, max_concurrency=max_concurrency,
        sampling=sampling, jsonl_path=jsonl_path, resume=resume, progress=progress, env_kwargs=env_kwargs,
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
        future = pool.submit(_run_loop, loop, task)
        try:
            return future.result()
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
    recorded_kwargs = _as_json(env_kwargs or {}) if env_id is not None else None
    sampling = sampling or SamplingParams()
    groups = {seed: position for position, seed in enumerate(seed_list)}

    done: dict[tuple[int | None, int], Episode] = {}
    if resume and Path(jsonl_path).exists():
        _repair_tail(Path(jsonl_path))
        for episode in iter_jsonl(jsonl_path):
            conflict = resume_conflict(episode, env_id, recorded_kwargs, sampling)
            if conflict is not None:
                raise ValueError(f"{jsonl_path} {conflict}: resume with the same settings or write to another file")
            key = episode_key(episode)
            if key[0] in groups and key[1] < group_size and "error" not in episode.metadata:
                episode.group = groups[key[0]]  # this run's group numbering: the file may come from other seeds
                done[key] = episode
    jobs = [(seed, index) for seed in seed_list for index in range(group_size) if (seed, index) not in done]
    total = len(seed_list) * group_size

    results = dict(done)
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    writer = JSONLWriter(jsonl_path, append=resume) if jsonl_path is not None else None
    reporter = _Progress(progress, total, initial=len(done))

    env_built = False  # whether any worker has built an env yet

    async def worker() -> None:
        nonlocal env_built
        instance: gym.Env | None = None  # built for the first job; a factory that fails fails that job only
        try:
            while True:
                try:
                    seed, index = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                if instance is None:
                    try:
                        instance = make_env()
                        if not env_built:
                            _check_text_env(instance)
                        env_built = True
                    except Exception as err:
                        if not env_built:  # no env was ever built: bad arguments or a broken factory, not one bad episode
                            raise
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
                try:
                    instance.close()
                except Exception as err:  # the episodes are played and written: a failing close must not lose them
                    warnings.warn(f"closing the env failed: {_describe(err)}", RuntimeWarning, stacklevel=1)

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
        reporter.close()
        if writer is not None:
            writer.close()
    return [results[(seed, index)] for seed in seed_list for index in range(group_size)]


async def _play(
    env: gym.Env, env_id: str | None, policy: Policy, sampling: SamplingParams, seed: int, index: int, group: int,
) -> Episode:
    """One episode: reset, then generate and step until the env says it is over.

    An exception from the policy or the env ends this episode only; it is recorded
    in ``metadata["error"]`` with ``metadata["error_source"]`` ("policy" or "env").
    """
    start = time.perf_counter()
    env_seconds = policy_seconds = 0.0
    tokens = TokenRecord()
    thinking: list[int] = []
    reasoning: list[str | None] = []  # thinking text a backend split off the reply, per turn
    finish_reasons: list[str] = []
    generated_tokens: int | None = None
    error: tuple[str, str] | None = None  # (where it came from, "Type: message")
    model: str | None = None
    messages: list[Message] = []
    tools: list[dict[str, Any]] = []
    rewards: list[float] = []
    components: list[dict[str, float]] = []
    terminated = truncated = False

    tick = time.perf_counter()
    try:
        messages, tools = _reset(env, seed)
    except TokenMismatchError:
        raise
    except Exception as err:  # a broken env (a sandbox that did not start) fails this episode only
        error = ("env", _describe(err))
    env_seconds += time.perf_counter() - tick
    turn = 0
    while error is None and not (terminated or truncated):
        turn += 1
        request = PolicyRequest(
            messages=list(messages), tools=tools, sampling=_turn_sampling(sampling, seed, index, turn),
            prefix_token_ids=tokens.prefix(),
        )
        tick = time.perf_counter()
        try:
            generation = await policy.agenerate(request)
        except TokenMismatchError:
            raise
        except Exception as err:  # one episode's failure must not end the run
            error = ("policy", _describe(err))
            policy_seconds += time.perf_counter() - tick
            break
        policy_seconds += time.perf_counter() - tick
        if not isinstance(generation, Generation):
            raise TypeError(f"{type(policy).__name__}.agenerate returned {type(generation).__name__}, not a Generation")
        tokens.add(generation, turn, request.prefix_token_ids)
        thinking.append(int(generation.thinking_tokens))
        reasoning.append(generation.message.get("reasoning_content"))
        finish_reasons.append(generation.finish_reason)
        count = _count_generated(generation)
        if count is not None:
            generated_tokens = (generated_tokens or 0) + count
        model = model or generation.metadata.get("model")

        tick = time.perf_counter()
        try:
            reward, turn_components, after, terminated, truncated = _step(env, generation.message, messages, turn)
        except TokenMismatchError:
            raise
        except Exception as err:  # the record keeps the reply the env failed on, so the failure can be replayed
            error = ("env", _describe(err))
            messages = messages + [_assistant_message(generation.message)]
        else:
            rewards.append(reward)
            components.append(turn_components)
            messages = after
        env_seconds += time.perf_counter() - tick

    base = getattr(env, "unwrapped", env)
    episode = None
    if isinstance(base, LLMEnv) and (error is None or error[0] == "policy"):
        try:
            episode = base.episode(env_id)  # the env is sound: its own record is the truth
        except TokenMismatchError:
            raise
        except Exception as err:
            error = error or ("env", _describe(err))
    if episode is None:  # a plain env, or an env that failed: its state may be stale, so only what this loop saw counts
        episode = Episode(
            env_id=env_id or _env_name(env), seed=seed, messages=messages, tools=tools,
            turn_rewards=rewards, reward_components=components, terminated=terminated, truncated=truncated,
        )
    episode.seed = seed
    episode.group = group
    episode.policy = getattr(policy, "name", type(policy).__name__)
    tokens.fill(episode)
    episode.logprobs = floor_logprobs(episode.logprobs)  # as the JSONL file will hold them
    episode.timing = {
        "env_s": env_seconds,
        "policy_s": policy_seconds,
        "wall_s": time.perf_counter() - start,
    }
    episode.metadata.update({
        "group_index": index,
        "sampling": dataclasses.asdict(sampling),
        "thinking_tokens": sum(thinking),
        "turn_thinking_tokens": thinking,
        "finish_reasons": finish_reasons,
        "generated_tokens": generated_tokens,
    })
    if model is not None:
        episode.metadata["model"] = model
    if any(reasoning):
        episode.metadata["reasoning"] = reasoning
    if error is not None:
        episode.metadata["error_source"], episode.metadata["error"] = error
    return episode


def _check_text_env(env: gym.Env) -> None:
    """Refuse an env whose actions are not text (CartPole's ``Discrete(2)``): no episode of it could be played.

    An env that declares no action space at all is let through: it may well take text, as it did before this check.

    Raises:
        TypeError: ``env.action_space`` is set and is not a :class:`gymnasium.spaces.Text`.
    """
    space = getattr(env, "action_space", None)
    if space is not None and not isinstance(space, gym.spaces.Text):
        with contextlib.suppress(Exception):  # the refusal is the error worth showing, not a failing close
            env.close()
        raise TypeError(f"rollout plays text actions, but {_env_name(env)}'s action space is {space!r}; "
                        "use an llmgym env or a Gymnasium env with a Text action space")


def _unbuilt(source: EnvSource, env_id: str | None, policy: Policy, sampling: SamplingParams, seed: int, index: int,
             group: int, err: Exception) -> Episode:
    """The record of an episode whose env could not be built: nothing played, the error kept."""
    name = env_id or getattr(source, "__name__", type(source).__name__)
    return Episode(
        env_id=name, seed=seed, group=group, policy=getattr(policy, "name", type(policy).__name__),
        timing={"env_s": 0.0, "policy_s": 0.0, "wall_s": 0.0},
        metadata={"group_index": index, "sampling": dataclasses.asdict(sampling), "thinking_tokens": 0,
                  "turn_thinking_tokens": [], "finish_reasons": [], "generated_tokens": None,
                  "error_source": "env", "error": _describe(err)},
    )


def _reset(env: gym.Env, seed: int) -> tuple[list[Message], list[dict[str, Any]]]:
    """Reset ``env``; return the chat it starts with and the tools it offers."""
    observation, info = env.reset(seed=seed)
    return list(info.get("messages") or [user(str(observation))]), list(info.get("tools") or [])


def _step(
    env: gym.Env, reply: Message, messages: list[Message], turn: int,
) -> tuple[float, dict[str, float], list[Message], bool, bool]:
    """Step ``env`` with the policy's ``reply``.

    Returns:
        The reward, its components, the chat after the step, terminated, truncated.

    Raises:
        Exception: whatever the env raises; ``ValueError`` for a reward that is not a finite number.
    """
    observation, reward, terminated, truncated, info = env.step(_action(reply))
    reward = _finite_reward(reward, turn)
    components = dict(info.get("reward_components") or {})
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


def _env_name(env: gym.Env) -> str:
    """The env's registered id, else its class name; never raises, even on a half-built env."""
    spec = getattr(env, "spec", None)
    spec_id = getattr(spec, "id", None)
    if isinstance(spec_id, str):
        return spec_id
    return type(getattr(env, "unwrapped", env)).__name__


def _repair_tail(path: Path) -> None:
    """End a JSONL file cut short mid-line (a killed run) cleanly, so appended lines stay whole.

    A last line that is a complete episode gets its newline; a half-written one is cut off
    (:func:`~llmgym.episode.iter_jsonl` skips it too, so that episode is played again).
    """
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    try:
        Episode.from_json(data[cut:].decode("utf-8"))
        complete = True
    except (ValueError, TypeError, UnicodeDecodeError):
        complete = False
    with open(path, "r+b") as file:
        if complete:
            file.seek(0, os.SEEK_END)
            file.write(b"\n")
        else:
            file.truncate(cut)


def _check_seeds(seeds: Sequence[int] | int) -> list[int]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if seeds < 0:
            raise ValueError(f"seeds as a count must be >= 0, got {seeds}")
        return list(range(int(seeds)))
    seed_list = [int(s) for s in seeds]
    if len(set(seed_list)) != len(seed_list):
        raise ValueError("seeds must be distinct; use group_size to play one seed several times")
    return seed_list


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
    content = message.get("content")
    return content if isinstance(content, str) else ""


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
                TextColumn("episodes"), BarColumn(), MofNCompleteColumn(), TextColumn("mean reward {task.fields[mean]}"),
                TimeRemainingColumn(), console=Console(stderr=True), transient=False,
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
