"""How a rollout runs: workers, turns, records, the JSONL stream.

Holds :func:`rollout` (blocking) and :func:`arollout` (async), which play a
policy on an environment for a list of seeds, ``group_size`` episodes per
seed (a GRPO group). One episode is played by :mod:`llmgym.rollout.play`;
token bookkeeping lives in :mod:`llmgym.rollout.tokens`, statistics
(``summarize``) in :mod:`llmgym.rollout.stats`, the checks of a resumed file
in :mod:`llmgym.rollout.resume`.

How a run works: ``max_concurrency`` workers (asyncio tasks) each own one env
instance and take (seed, index-in-group) jobs from a queue. Each turn awaits
``policy.agenerate(request)``; a local batched policy groups the requests of
concurrent episodes itself, a server policy keeps up to ``max_concurrency``
requests in flight. ``env.step`` runs in the event loop (it is fast). Every
finished episode is written to the JSONL file at once (flushed), so a crash
loses nothing, and ``resume=True`` skips the (seed, index) pairs already in
the file (a file of other settings is refused: :func:`~llmgym.rollout.resume.resume_conflict`).
The run holds the file (:func:`~llmgym.rollout.output_lock.hold_output`) from before it reads or
empties it until its last episode is written: a second process's run on it is refused.

An exception from the policy or from the env on one episode does not stop
the run: the episode is recorded with ``metadata["error"]`` and
``metadata["error_source"]`` and the run goes on (a policy does its own
retries). An env whose worker process died (:class:`~llmgym.rollout.play.EnvWorkerLost`, a Ray
actor killed) is replaced, and its episode played again from its reset, up to ``worker_retries``
times, then recorded as failed: an episode is never lost, and never written twice.

Remote envs (``env.unwrapped.remote`` true: ``llmgym/OpenEnv-v0``, the Ray actors of ``ray=True``)
wait on the network in reset and step; theirs run on a thread pool of ``max_concurrency`` threads,
so one episode's round trip does not hold up the others' turns. A policy that breaks the token-prefix contract raises
:class:`~llmgym.rollout.tokens.TokenMismatchError`, because training on such tokens would be wrong.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from llmgym.episode import Episode, JSONLWriter
from llmgym.policy import Policy, SamplingParams
from llmgym.rollout.output_lock import hold_output
from llmgym.rollout.play import EnvWorkerLost, _describe, _env_name, _play, _spec_id
from llmgym.rollout.resume import as_recorded, resumed_episodes

__all__ = ["rollout", "arollout", "run_sync", "EnvSource"]

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
    ray: bool | dict[str, Any] = False,
    worker_retries: int = 2,
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
        ray: ``True`` (or a dict of Ray actor options, such as ``{"num_cpus": 1}``) puts each env
            instance on a Ray actor of its own (:mod:`llmgym.rollout.ray_envs`, extra ``ray``; ``env``
            must be an id). Ray is started if it is not (``ray.init()``), or joined as the caller set it up.
        worker_retries: times an episode whose env worker died is played again on a fresh one
            before it is recorded as failed.

    Returns:
        One :class:`~llmgym.Episode` per (seed, index), ordered by seed then
        index; episodes resumed from the file included.

    Raises:
        ValueError: bad arguments (a negative seed), a JSONL file to resume from another
            environment or other settings (:func:`~llmgym.rollout.resume.resume_conflict`), or a policy that breaks
            the token-prefix contract (:class:`~llmgym.rollout.tokens.TokenMismatchError`).
        OutputInUseError: another process's run holds ``jsonl_path``
            (:class:`~llmgym.rollout.output_lock.OutputInUseError`, naming its pid).
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
        ray=ray,
        worker_retries=worker_retries,
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
    ray: bool | dict[str, Any] = False,
    worker_retries: int = 2,
) -> list[Episode]:
    """The async form of :func:`rollout` (same arguments), for callers with an event loop."""
    seed_list = _check_seeds(seeds)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if resume and jsonl_path is None:
        raise ValueError("resume=True needs jsonl_path: the file to resume from")
    if worker_retries < 0:
        raise ValueError(f"worker_retries must be >= 0, got {worker_retries}")
    make_env = _env_factory(env, env_kwargs)
    if ray is not False:
        if not isinstance(env, str):
            raise TypeError("ray=True places envs by id on Ray actors: pass an env id, not a factory")
        from llmgym.rollout.ray_envs import ray_env_factory

        make_env = ray_env_factory(env, env_kwargs, {} if ray is True else dict(ray))
    env_id = env if isinstance(env, str) else None
    # recorded in every episode, so that a resume can refuse other settings; kwargs that are not JSON are not
    recorded_kwargs = as_recorded(env_kwargs or {}) if env_id is not None else None
    sampling = sampling or SamplingParams()
    groups = {seed: position for position, seed in enumerate(seed_list)}

    # The first env is built and checked before the file is touched: a run that cannot start (bad env_kwargs, a
    # broken factory, an env that does not take text) must not wipe an earlier run's episodes. It plays too.
    spare = make_env() if seed_list else None
    output = contextlib.ExitStack()  # holds jsonl_path against other processes until the writer is closed
    try:
        if spare is not None:
            _check_text_env(spare)
        if env_id is None and spare is not None:
            # a factory's env counts by the id it is registered under, in its records and in a resume's check; a
            # class name (an unregistered env) is no id: a file of a subclass may be resumed with its fixed parent
            env_id = _spec_id(spare)
        if jsonl_path is not None:  # two runs appending to one file would record episodes twice
            output.enter_context(hold_output(jsonl_path))
        done = resumed_episodes(jsonl_path, env_id, recorded_kwargs, sampling, groups, group_size) if resume else {}
        writer = JSONLWriter(jsonl_path, append=resume) if jsonl_path is not None else None
    except BaseException:
        output.close()
        if spare is not None:
            with contextlib.suppress(Exception):  # the reason the run did not start is the error worth showing
                spare.close()
        raise
    jobs = [(seed, index) for seed in seed_list for index in range(group_size) if (seed, index) not in done]
    total = len(seed_list) * group_size

    results = dict(done)
    # a remote env's reset and step wait on the network: off the event loop, one thread per episode in flight
    remote = spare is not None and bool(getattr(getattr(spare, "unwrapped", spare), "remote", False))
    executor = (
        concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="llmgym-env") if remote else None
    )
    attempts: dict[tuple[int, int], int] = {}  # episodes played again after their env worker died
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
                        if executor is None:
                            instance = make_env()
                        else:  # a remote env starts its session or worker over the network: off the event loop too
                            instance = await asyncio.get_running_loop().run_in_executor(executor, make_env)
                    except Exception as err:  # an env was built before, so not bad arguments: one failed episode
                        episode = _unbuilt(env, env_id, policy, sampling, seed, index, groups[seed], err)
                if instance is not None:
                    try:
                        episode = await _play(instance, env_id, policy, sampling, seed, index, groups[seed], executor)
                    except EnvWorkerLost as err:  # nothing of it is kept: played again on a fresh env, or failed
                        _close(instance)
                        instance = None
                        attempts[(seed, index)] = attempts.get((seed, index), 0) + 1
                        if attempts[(seed, index)] <= worker_retries:
                            queue.put_nowait((seed, index))
                            continue
                        episode = _unbuilt(env, env_id, policy, sampling, seed, index, groups[seed], err)
                if attempts.get((seed, index)):
                    episode.metadata["worker_retries"] = attempts[(seed, index)]
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
        if executor is not None:
            executor.shutdown(wait=False)
        reporter.close()
        if writer is not None:
            writer.close()
        output.close()
    return [results[(seed, index)] for seed in seed_list for index in range(group_size)]


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
    """The record of an episode with nothing played to keep (its env was not built, or its worker died)."""
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
