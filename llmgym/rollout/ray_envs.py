"""Rollout environments on Ray actors: each env instance lives in a Ray worker process of its own.

Holds :class:`RayEnv` (a Gymnasium env whose reset and step run on its actor) and
:func:`ray_env_factory` (what ``rollout(..., ray=True)`` builds envs with). Needs the ``ray`` extra;
``ray`` is imported only here, when a Ray rollout starts.

The rollout itself stays in the calling process: it asks the policy for each turn (a local model,
or inference servers through :class:`~llmgym.wrappers.openai_policy.OpenAIPolicy`) and sends the
action to the episode's actor, as verl and SkyRL keep environments on actors and generation on vLLM
servers. Heavy envs (sandboxes, search indexes, browsers) then use the cluster's CPUs, not the
trainer's. An actor whose process dies raises :class:`~llmgym.rollout.play.EnvWorkerLost` on its next
call: the rollout replaces the env and plays the episode again from its reset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from llmgym.rollout.play import EnvWorkerLost

__all__ = ["RayEnv", "ray_env_factory"]

_INSTALL_HINT = 'rollouts on Ray actors need ray: pip install "llmgym[ray]"'


class _EnvHost:
    """What runs inside the actor: one env, made there by id (the worker imports llmgym, which registers it)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]):
        import llmgym  # noqa: F401  (registers the ids in this worker)

        self.env = gym.make(env_id, **env_kwargs)

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.env.observation_space, self.env.action_space

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


class RayEnv(gym.Env):
    """A Gymnasium env played on a Ray actor: ``gymnasium.make(env_id, **env_kwargs)`` runs in the actor's process.

    Args:
        env_id: a registered env id (it must be registered in the workers too: llmgym's and plugins' are).
        env_kwargs: keyword arguments for ``gymnasium.make``.
        actor_options: Ray actor options (``num_cpus``, ``resources``...); by default the actor
            reserves no CPU (``num_cpus=0``), as envs mostly wait for the policy.

    Raises:
        ImportError: ``ray`` is not installed.
        EnvWorkerLost: (from ``reset``/``step``) the actor's process died.
    """

    metadata = {"render_modes": []}
    #: Every reset and step is a round trip to the actor: the rollout engine runs them off its event loop.
    remote = True

    def __init__(
        self, env_id: str, env_kwargs: dict[str, Any] | None = None, actor_options: dict[str, Any] | None = None
    ):
        try:
            import ray
        except ImportError as err:
            raise ImportError(_INSTALL_HINT) from err
        self._ray = ray
        if not ray.is_initialized():
            ray.init(log_to_driver=False)
        options = {"num_cpus": 0, **(actor_options or {})}
        self.env_id = env_id
        self.spec = gym.spec(env_id)  # episodes are recorded under the id, as for a local env
        self._actor = ray.remote(_EnvHost).options(**options).remote(env_id, dict(env_kwargs or {}))
        self.observation_space, self.action_space = self._call("spaces")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._call("reset", seed, options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self._call("step", action)

    def close(self) -> None:
        try:
            self._ray.get(self._actor.close.remote())
        except self._ray.exceptions.RayActorError:
            pass  # already gone: nothing to close
        self._ray.kill(self._actor)

    def _call(self, method: str, *args: Any) -> Any:
        """Call the actor's ``method`` and wait; an exception of the env comes back as itself."""
        try:
            return self._ray.get(getattr(self._actor, method).remote(*args))
        except self._ray.exceptions.RayActorError as err:  # the process died (killed, out of memory, node lost)
            raise EnvWorkerLost(f"the Ray actor of {self.env_id} died: {str(err).splitlines()[0]}") from err
        except self._ray.exceptions.RayTaskError as err:  # the env raised: the same exception, for the record
            raise err.as_instanceof_cause() from None


def ray_env_factory(
    env_id: str, env_kwargs: dict[str, Any] | None, actor_options: dict[str, Any]
) -> Callable[[], RayEnv]:
    """A function that builds a :class:`RayEnv` (a new actor) each call; ``env_id`` is checked first.

    Raises:
        gymnasium.error.Error: ``env_id`` is not registered.
        ImportError: ``ray`` is not installed.
    """
    gym.spec(env_id)
    try:
        import ray  # noqa: F401
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    kwargs = dict(env_kwargs or {})
    return lambda: RayEnv(env_id, kwargs, actor_options)
