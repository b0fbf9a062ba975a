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
from llmgym.progress import ProgressBar
from llmgym.rollout.output_lock import hold_output
from llmgym.rollout.play import EnvWorkerLost, describe_error, env_name, play_episode, spec_id
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
    _check_arguments(group_size, max_concurrency, resume, jsonl_path, worker_retries)
    env_id = env if isinstance(env, str) else None
    run = _Run(
        source=env,
        env_id=env_id,
        make_env=_env_factory(env, env_kwargs, ray),
        policy=policy,
        sampling=sampling or SamplingParams(),
        groups={seed: position for position, seed in enumerate(seed_list)},
        # recorded in every episode, so that a resume can refuse other settings; kwargs that are not JSON are not
        recorded_kwargs=as_recorded(env_kwargs or {}) if env_id is not None else None,
        worker_retries=worker_retries,
    )
    run.open(jsonl_path, resume, group_size)
    try:
        jobs = [(seed, index) for seed in seed_list for index in range(group_size) if (seed, index) not in run.results]
        run.reporter = _Progress(progress, len(seed_list) * group_size, initial=len(run.results))
        await run.play(jobs, max_concurrency)
    finally:
        run.close()
    return [run.results[(seed, index)] for seed in seed_list for index in range(group_size)]


def _check_arguments(
    group_size: int,
    max_concurrency: int,
    resume: bool,
    jsonl_path: str | os.PathLike[str] | None,
    worker_retries: int,
) -> None:
    """Refuse the counts and the resume that no rollout can run with.

    Raises:
        ValueError: a count below its least value, or ``resume`` without a file.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if resume and jsonl_path is None:
        raise ValueError("resume=True needs jsonl_path: the file to resume from")
    if worker_retries < 0:
        raise ValueError(f"worker_retries must be >= 0, got {worker_retries}")


@dataclasses.dataclass
class _Run:
    """One rollout: what every worker plays with, the jobs left, the episodes played and where they go.

    :meth:`open` builds the first env and holds the output, :meth:`play` runs the workers (each
    :meth:`work`), :meth:`close` lets go of everything, whatever happened.
    """

    source: EnvSource
    env_id: str | None
    make_env: Callable[[], gym.Env]
    policy: Policy
    sampling: SamplingParams
    groups: dict[int, int]  # seed -> its group number (its position among the seeds)
    recorded_kwargs: dict[str, Any] | None
    worker_retries: int
    results: dict[tuple[int, int], Episode] = dataclasses.field(default_factory=dict)
    spare: gym.Env | None = None  # the first env built; the first worker plays on it
    writer: JSONLWriter | None = None
    reporter: _Progress | None = None
    # a remote env's reset and step wait on the network: off the event loop, one thread per episode in flight
    executor: concurrent.futures.ThreadPoolExecutor | None = None
    attempts: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)  # played again: worker died
    queue: asyncio.Queue[tuple[int, int]] = dataclasses.field(default_factory=asyncio.Queue)
    output: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)  # holds jsonl_path

    def open(self, jsonl_path: str | os.PathLike[str] | None, resume: bool, group_size: int) -> None:
        """Build and check the first env, then hold ``jsonl_path``, read the episodes resumed and open the writer.

        The env comes first: a run that cannot start (bad env_kwargs, a broken factory, an env that does not
        take text) must not wipe an earlier run's episodes. On any failure, whatever was taken is let go.
        """
        self.spare = self.make_env() if self.groups else None
        try:
            if self.spare is not None:
                _check_text_env(self.spare)
                # a factory's env counts by the id it is registered under, in its records and in a resume's check;
                # a class name (an unregistered env) is no id: a file of a subclass may be resumed with its parent
                self.env_id = self.env_id or spec_id(self.spare)
            if jsonl_path is not None:  # two runs appending to one file would record episodes twice
                self.output.enter_context(hold_output(jsonl_path))
            if resume:
                self.results = resumed_episodes(
                    jsonl_path, self.env_id, self.recorded_kwargs, self.sampling, self.groups, group_size
                )
            self.writer = JSONLWriter(jsonl_path, append=resume) if jsonl_path is not None else None
        except BaseException:
            if self.spare is not None:
                with contextlib.suppress(Exception):  # the reason the run did not start is the error worth showing
                    self.spare.close()
                self.spare = None
            self.close()
            raise

    async def play(self, jobs: list[tuple[int, int]], max_concurrency: int) -> None:
        """Play every (seed, index) of ``jobs``, ``max_concurrency`` at once; a failure of one cancels the others."""
        if self.spare is not None and getattr(getattr(self.spare, "unwrapped", self.spare), "remote", False):
            self.executor = concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="llmgym-env")
        policy_limit = getattr(self.policy, "max_concurrency", None)
        if policy_limit is not None:  # the policy knows its own sweet spot (llama.cpp: one stream)
            max_concurrency = min(max_concurrency, policy_limit)
        for job in jobs:
            self.queue.put_nowait(job)
        tasks = [asyncio.create_task(self.work()) for _ in range(min(max_concurrency, len(jobs)))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def work(self) -> None:
        """One worker: take jobs until none is left, playing them on an env of its own."""
        instance, self.spare = self.spare, None  # the first worker plays on the env built by open
        try:
            while not self.queue.empty():
                seed, index = self.queue.get_nowait()
                instance, episode = await self._play_job(instance, seed, index)
                if episode is not None:
                    self._record(seed, index, episode)
                # a policy that never suspends (a scripted one) would otherwise hold the event loop for the whole
                # run, and Ctrl-C (which cancels the main task) would only reach it once every episode was played
                await asyncio.sleep(0)
        finally:
            if instance is not None:
                _close(instance)

    async def _play_job(self, instance: gym.Env | None, seed: int, index: int) -> tuple[gym.Env | None, Episode | None]:
        """Play (seed, index) on ``instance``, built first if ``None``.

        Returns:
            The env to play the next job on (``None``: build a fresh one), and the episode, or ``None`` when
            its env worker died and it went back in the queue to be played again.
        """
        if instance is None:
            try:
                if self.executor is None:
                    instance = self.make_env()
                else:  # a remote env starts its session or worker over the network: off the event loop too
                    instance = await asyncio.get_running_loop().run_in_executor(self.executor, self.make_env)
            except Exception as err:  # an env was built before, so not bad arguments: one failed episode
                return None, self._unbuilt(seed, index, err)
        group = self.groups[seed]
        try:
            episode = await play_episode(
                instance, self.env_id, self.policy, self.sampling, seed, index, group, self.executor
            )
        except EnvWorkerLost as err:  # nothing of it is kept: played again on a fresh env, or failed
            _close(instance)
            self.attempts[(seed, index)] = self.attempts.get((seed, index), 0) + 1
            if self.attempts[(seed, index)] <= self.worker_retries:
                self.queue.put_nowait((seed, index))
                return None, None
            return None, self._unbuilt(seed, index, err)
        return instance, episode

    def _record(self, seed: int, index: int, episode: Episode) -> None:
        """Keep a finished episode, write it to the file at once and report it."""
        if self.attempts.get((seed, index)):
            episode.metadata["worker_retries"] = self.attempts[(seed, index)]
        if self.recorded_kwargs is not None:
            episode.metadata["env_kwargs"] = self.recorded_kwargs
        self.results[(seed, index)] = episode
        if self.writer is not None:
            self.writer.write(episode)
        if self.reporter is not None:
            self.reporter.advance(episode)

    def _unbuilt(self, seed: int, index: int, err: Exception) -> Episode:
        return _unbuilt(self.source, self.env_id, self.policy, self.sampling, seed, index, self.groups[seed], err)

    def close(self) -> None:
        """Close the env no worker took (all resumed), the thread pool, the bar and the file; let go of the file."""
        if self.spare is not None:
            _close(self.spare)
            self.spare = None
        if self.executor is not None:
            self.executor.shutdown(wait=False)
        if self.reporter is not None:
            self.reporter.close()
        if self.writer is not None:
            self.writer.close()
        self.output.close()


def _close(env: gym.Env) -> None:
    """Close ``env``; a failure is a ``RuntimeWarning``: the episodes are played and written, and must not be lost."""
    try:
        env.close()
    except Exception as err:
        warnings.warn(f"closing the env failed: {describe_error(err)}", RuntimeWarning, stacklevel=1)


def _check_text_env(env: gym.Env) -> None:
    """Refuse an env whose actions are not text (CartPole's ``Discrete(2)``): no episode of it could be played.

    An env that declares no action space at all is let through: it may well take text, as it did before this check.

    Raises:
        TypeError: ``env.action_space`` is set and is not a :class:`gymnasium.spaces.Text`.
    """
    space = getattr(env, "action_space", None)
    if space is not None and not isinstance(space, gym.spaces.Text):
        raise TypeError(
            f"rollout plays text actions, but {env_name(env)}'s action space is {space!r}; "
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
            "error": describe_error(err),
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


def _env_factory(
    env: EnvSource, env_kwargs: dict[str, Any] | None, ray: bool | dict[str, Any]
) -> Callable[[], gym.Env]:
    """What builds each worker's env: ``gymnasium.make`` of an id, the caller's factory, or a Ray actor's env.

    Raises:
        ValueError, TypeError: an env or arguments no env can be built from (an unknown id fails here,
            before any worker starts).
    """
    make_env = _local_env_factory(env, env_kwargs)
    if ray is False:
        return make_env
    if not isinstance(env, str):
        raise TypeError("ray=True places envs by id on Ray actors: pass an env id, not a factory")
    from llmgym.rollout.ray_envs import ray_env_factory

    return ray_env_factory(env, env_kwargs, {} if ray is True else dict(ray))


def _local_env_factory(env: EnvSource, env_kwargs: dict[str, Any] | None) -> Callable[[], gym.Env]:
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
    """Reports finished episodes to a progress bar (with their mean reward) or a callback."""

    def __init__(self, progress: bool | ProgressFn, total: int, initial: int):
        self.callback = progress if callable(progress) else None
        self.total, self.done = total, initial
        self.bar = ProgressBar("episodes", total, completed=initial, metric="mean reward", shown=progress is True)
        self.rewards, self.played = 0.0, 0  # of the episodes played in this run (the bar's mean)

    def advance(self, episode: Episode) -> None:
        self.done += 1
        self.rewards += episode.total_reward
        self.played += 1
        self.bar.advance(value=self.rewards / self.played)
        if self.callback is not None:
            self.callback(self.done, self.total, episode)

    def close(self) -> None:
        self.bar.close()
