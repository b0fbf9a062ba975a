"""Any registered single-agent llmgym env as an OpenEnv server: what ``llmgym serve-env`` runs.

Holds :func:`environment_class` (llmgym's OpenEnv ``Environment``: one Gymnasium env per session),
:func:`create_env_app` (OpenEnv's own FastAPI app around it) and :class:`ResetArgumentError` (a reset
request the env cannot take). OpenEnv does the serving: its
``/ws`` WebSocket gives each client connection a session of its own (a fresh env, built by
``gymnasium.make``), refuses connections beyond ``max_sessions`` (``CAPACITY_REACHED``), and closes a
session's env when its client disconnects or vanishes (the WebSocket ping fails). Its stateless
``/reset`` and ``/step`` routes build a throwaway env per call, as for every OpenEnv env; an episode
needs the WebSocket (``GenericEnvClient`` uses it). So ``POST /step`` never has an episode to step: it
answers 409 pointing to ``/ws``; a ``POST /reset`` with arguments the env does not take answers 422.

Example (needs the ``openenv`` extra)::

    $ llmgym serve-env llmgym/Wordle-v0 --port 8001 --max-sessions 64

    from openenv import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8001").sync() as env:
        result = env.reset(seed=0)
        result = env.step({"content": '<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>'})
        print(result.reward, result.observation["reward_components"], result.observation["text"])
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import gymnasium as gym

from llmgym.envs.adapters.openenv.wire import chat_models, observation_fields, to_env_action

__all__ = [
    "environment_class",
    "create_env_app",
    "answer_client_errors",
    "check_servable",
    "ResetArgumentError",
    "STEP_WITHOUT_EPISODE",
]

#: What ``POST /step`` answers (409): its throwaway env has had no reset, and never will.
STEP_WITHOUT_EPISODE = (
    "POST /step has no episode to step: the HTTP /reset and /step routes build a fresh env for every call, "
    "so no step follows a reset there. Play an episode over the WebSocket route /ws, one session per episode: "
    "openenv's GenericEnvClient, or gymnasium.make('llmgym/OpenEnv-v0', base_url=...)"
)


class ResetArgumentError(ValueError):
    """A reset request the env cannot take: a field besides seed, episode_id and options, or options that are no object.

    The client's error: ``POST /reset`` answers it with 422 (a WebSocket session with an error frame).
    """


def check_servable(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Build the env once and refuse one that cannot be served as an assistant-message env.

    Raises:
        gymnasium.error.Error: ``env_id`` is not registered.
        TypeError: its action space is not text (a classic Gymnasium env such as CartPole).
        Exception: whatever ``gymnasium.make`` raises for bad ``env_kwargs``.
    """
    env = gym.make(env_id, **(env_kwargs or {}))
    try:
        if not isinstance(env.action_space, gym.spaces.Text):
            raise TypeError(
                f"{env_id} takes {env.action_space!r} actions; serve-env serves envs whose actions are text"
            )
    finally:
        env.close()


@functools.cache
def environment_class() -> type:
    """llmgym's OpenEnv ``Environment`` class, built on first use (``openenv`` is an optional extra).

    Its constructor takes ``(env_id, env_kwargs)``; OpenEnv's server makes one per session.
    """
    action_cls, observation_cls = chat_models()  # without openenv: an ImportError naming the extra
    Environment, EnvironmentMetadata, State = _openenv_server_types()

    import llmgym
    from llmgym.registry import describe

    class LLMGymEnvironment(Environment):
        """One llmgym env (``gymnasium.make(env_id, **env_kwargs)``) behind OpenEnv's ``reset``/``step``/``state``."""

        # Every session builds its own env instance: nothing is shared between sessions.
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
            super().__init__()
            self.env_id = env_id
            self.env = gym.make(env_id, **(env_kwargs or {}))
            self._state = State(episode_id=None, step_count=0)

        def reset(
            self,
            seed: int | None = None,
            episode_id: str | None = None,
            options: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> Any:
            _check_reset_arguments(options, kwargs)
            text, info = self.env.reset(seed=seed, options=options)
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
            return observation_cls(**observation_fields(text, info, False, False), reward=None)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            text, reward, terminated, truncated, info = self.env.step(to_env_action(action.content, action.tool_calls))
            self._state.step_count += 1
            return observation_cls(**observation_fields(text, info, terminated, truncated), reward=float(reward))

        @property
        def state(self) -> Any:
            return self._state

        def get_metadata(self) -> Any:
            return EnvironmentMetadata(
                name=self.env_id,
                description=describe(self.env_id) or f"the llmgym environment {self.env_id}",
                version=f"llmgym {llmgym.__version__}",
            )

        def close(self) -> None:
            self.env.close()

    return LLMGymEnvironment


def _openenv_server_types() -> tuple[type, type, type]:
    """OpenEnv's ``Environment``, ``EnvironmentMetadata`` and ``State``.

    Raises:
        ImportError: openenv is installed but does not import; the message says how to reinstall it.
    """
    try:
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.types import EnvironmentMetadata, State
    except ImportError as err:  # installed, but its own dependencies are not right (fastmcp 3 needs mcp<2)
        raise ImportError(
            f'openenv is installed but cannot be imported ({err}): pip install "llmgym[openenv]"'
        ) from err
    return Environment, EnvironmentMetadata, State


def _check_reset_arguments(options: Any, extra: dict[str, Any]) -> None:
    """Refuse a reset message with fields besides seed, episode_id and options, or options that are no object.

    Raises:
        ResetArgumentError: what the client must change.
    """
    if extra:  # OpenEnv passes every field of the reset message on: a typo must not pass silently
        raise ResetArgumentError(f"reset takes seed, episode_id and options; got also {sorted(extra)}: leave them out")
    if options is not None and not isinstance(options, dict):
        raise ResetArgumentError(f"reset's options must be a JSON object, got {options!r}")


def create_env_app(
    env_id: str,
    *,
    max_sessions: int = 16,
    env_kwargs: dict[str, Any] | None = None,
    session_timeout: float | None = None,
) -> Any:
    """OpenEnv's FastAPI app serving ``env_id``: one env per WebSocket session, at most ``max_sessions`` at once.

    Args:
        env_id: a registered single-agent llmgym (or any text-action Gymnasium) env id.
        max_sessions: sessions (episodes in flight) the server holds at once; the next is refused
            with OpenEnv's ``CAPACITY_REACHED`` error.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        session_timeout: seconds after which OpenEnv's reaper closes a session that has not been used
            (``None``: never; a disconnected client's session is closed at once anyway).

    Raises:
        ImportError: ``openenv`` is not installed.
        ValueError: ``max_sessions`` below 1 or a ``session_timeout`` that is not positive.
        TypeError, gymnasium.error.Error: see :func:`check_servable`.
    """
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
    if session_timeout is not None and session_timeout <= 0:
        raise ValueError(f"session_timeout must be positive seconds, got {session_timeout}")
    environment = environment_class()  # the ImportError first: it says what to install
    check_servable(env_id, env_kwargs)
    from openenv.core.env_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    action_cls, observation_cls = chat_models()
    app = create_app(
        functools.partial(environment, env_id, dict(env_kwargs or {})),
        action_cls,
        observation_cls,
        env_name=env_id.replace("/", "-"),  # OpenEnv mounts task routes under /{env_name}/
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout),
    )
    answer_client_errors(app)
    return app


def answer_client_errors(app: Any) -> None:
    """Answer the HTTP routes' client errors with a 4xx that says what to do, instead of a 500 and a logged traceback.

    OpenEnv's ``/reset`` and ``/step`` let an env's exception through to FastAPI. Two are the client's:
    ``gymnasium.error.ResetNeeded`` (a step before a reset, which is every ``POST /step``) answers 409
    with :data:`STEP_WITHOUT_EPISODE`; :class:`ResetArgumentError` answers 422. Any other exception is
    still a server error. WebSocket sessions are not concerned: OpenEnv answers their errors itself.
    """
    from fastapi.responses import JSONResponse

    async def step_without_episode(request: Any, err: Exception) -> Any:
        return JSONResponse({"detail": STEP_WITHOUT_EPISODE}, status_code=409)

    async def bad_reset_arguments(request: Any, err: Exception) -> Any:
        return JSONResponse({"detail": str(err)}, status_code=422)

    app.add_exception_handler(gym.error.ResetNeeded, step_without_episode)
    app.add_exception_handler(ResetArgumentError, bad_reset_arguments)
