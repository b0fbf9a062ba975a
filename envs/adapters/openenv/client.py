"""``llmgym/OpenEnv-v0``: any OpenEnv server as a Gymnasium text environment.

Holds :class:`OpenEnvEnv`. It plays one session of the server over OpenEnv's own client
(``GenericEnvClient``, a WebSocket), in one of two ways, chosen from the server's ``/schema``:

- an llmgym env served by ``llmgym serve-env`` (its schema is :func:`~.wire.chat_models`'): the
  server's env does everything, and every reset and step comes back whole (observation, reward,
  terminated, truncated, ``info``): the same episode as the env played locally;
- any other OpenEnv env (its own action model, such as the echo env of ``openenv init``): the action
  model becomes one tool, ``act``, whose parameters are the action's JSON schema; a tool call is
  checked against it and sent as the action. The observation's fields (without ``metadata``) are the
  text the agent reads, as JSON. With ``text_field`` (by default the action's only string field,
  when it has exactly one) a reply without a tool call is sent as that field.

Errors: a server that cannot be reached raises ``ConnectionError`` (at ``reset``, when the session
starts); one full of sessions raises ``RuntimeError`` naming OpenEnv's ``CAPACITY_REACHED``.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from llmgym.envs.adapters.openenv.wire import from_env_action, is_chat_schema, to_info
from llmgym.messages import Message, system, tool_result, user
from llmgym.parsing import parse_action
from llmgym.spaces import Text

__all__ = ["OpenEnvEnv", "ACT_TOOL"]

#: The tool a generic OpenEnv env's action is sent through.
ACT_TOOL = "act"
_INSTALL_HINT = 'llmgym/OpenEnv-v0 needs openenv: pip install "llmgym[openenv]"'


class OpenEnvEnv(gym.Env[str, str]):
    """One session of an OpenEnv server as a Gymnasium env whose observations and actions are text.

    ## Description

    The two ways of the module docstring: an ``llmgym serve-env`` server plays its own
    env, every reset and step coming back whole; any other OpenEnv env gets one tool,
    ``act``, whose parameters are its action's JSON schema.

    ## Action Space

    ``Text``: a tool call (``act`` for a generic env, the served env's tools otherwise)
    or, with ``text_field``, a plain reply sent as that field.

    ## Observation Space

    ``Text``: the served env's observation, or a generic env's observation fields
    (without ``metadata``) as JSON.

    ## Rewards

    An llmgym server: the served env's own. A generic env: ``reward`` is the server's
    reward (``None`` counts as 0), in ``info["reward_components"]`` as ``env_reward``,
    with ``format_error`` (weight 0: a metric) for a turn whose action was not sent (bad
    JSON, unknown tool, arguments that do not match the schema, or a server that
    refused them). How it could be gamed is the served env's matter.

    ## Starting State

    The server's reset, with the seed and options passed on.

    ## Episode End

    - Terminated: the server's ``done``.
    - Truncated: after ``max_turns`` turns (a generic env), or as the served env says.

    ## Arguments

    Args:
        base_url: the server (``http://host:port``; ``ws://`` works too).
        max_turns: turn budget of a generic env (an llmgym server keeps its env's own).
        text_field: the action field a reply without a tool call is sent as (generic env);
            default: the action's only string field, if it has exactly one.
        timeout: seconds to wait for the server's answer to one reset or step.
        max_action_chars: the action space's limit.

    Raises:
        ImportError: ``openenv`` is not installed.
        ConnectionError: the server's ``/schema`` cannot be read.
        ValueError: ``max_turns`` below 1, or a ``text_field`` the action has no string field of.

    Example (a server must run: ``llmgym serve-env llmgym/Wordle-v0 --port 8001``)::

        env = gym.make("llmgym/OpenEnv-v0", base_url="http://127.0.0.1:8001")
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("crane")

    ## Version History

    - v0: initial release.
    """

    metadata = {"render_modes": []}
    #: Its reset and step wait on the network: the rollout engine runs them off its event loop.
    remote = True

    def __init__(
        self,
        base_url: str,
        max_turns: int = 20,
        text_field: str | None = None,
        timeout: float = 60.0,
        max_action_chars: int = 32_768,
    ):
        try:
            import httpx
            from openenv import GenericEnvClient
        except ImportError as err:
            raise ImportError(f"{_INSTALL_HINT} ({err})") from err
        if not isinstance(base_url, str) or not base_url.strip():
            raise ValueError(f"base_url must be the server's URL, got {base_url!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        self.base_url = base_url.rstrip("/")
        self.max_turns = max_turns
        self.observation_space = Text(max_length=65_536)
        self.action_space = Text(max_length=max_action_chars)
        http_url = self.base_url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        try:
            schema = httpx.get(f"{http_url}/schema", timeout=timeout).raise_for_status().json()
            about = httpx.get(f"{http_url}/metadata", timeout=timeout).json()
        except (httpx.HTTPError, ValueError) as err:
            raise ConnectionError(f"cannot read the OpenEnv server's /schema at {http_url}: {err}") from err
        self.relay = is_chat_schema(schema)
        self.server_name = str(about.get("name") or "OpenEnv env")
        self.description = str(about.get("description") or "")
        self.action_schema = _action_parameters(schema.get("action") or {})
        self.text_field = None if self.relay else _text_field(self.action_schema, text_field)
        self.tool_schemas = [] if self.relay else [_act_tool(self.server_name, self.description, self.action_schema)]
        self._client = GenericEnvClient(base_url=self.base_url, message_timeout_s=timeout).sync()
        self.messages: list[Message] = []
        self.turn = 0
        self._over = True

    # -- the Gymnasium API -----------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        kwargs: dict[str, Any] = {} if seed is None else {"seed": seed}
        if options is not None:
            kwargs["options"] = options
        result = self._client.reset(**kwargs)
        self.turn, self._over = 0, bool(result.done)
        if self.relay:
            observation = result.observation
            return observation["text"], to_info(observation)
        text = _render(result.observation)
        self.messages = [system(self._system_prompt()), user(text)]
        return text, self._info({})

    def step(self, action: str | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.relay:  # the server's env checks the order and the action itself
            result = self._client.step(from_env_action(action))
            observation = result.observation
            info = to_info(observation)
            return (
                observation["text"],
                float(result.reward or 0.0),
                observation["terminated"],
                observation["truncated"],
                info,
            )
        if self._over:
            raise RuntimeError("the episode is over: call reset() before step()")
        self.turn += 1
        parsed = parse_action(action, id_prefix=f"call_{self.turn}")
        self.messages.append(parsed.message)
        payload, error = self._payload(parsed)
        reward, terminated = 0.0, False
        if error is None:
            try:
                result = self._client.step(payload)
            except RuntimeError as err:  # the server refused the action's fields: the agent's to fix
                if "VALIDATION_ERROR" not in str(err):
                    raise
                error = f"the server refused the action: {err}"
            else:
                text = _render(result.observation)
                reward, terminated = float(result.reward or 0.0), bool(result.done)
        if error is not None:
            text = f"Format error: {error}"
        if parsed.tool_calls:
            self.messages.append(tool_result(parsed.tool_calls[0], text))
            for extra in parsed.tool_calls[1:]:
                self.messages.append(tool_result(extra, f"Error: one {ACT_TOOL} call per turn; this one was not sent"))
        else:
            self.messages.append(user(text))
        truncated = not terminated and self.turn >= self.max_turns
        self._over = terminated or truncated
        components = {"env_reward": reward, "format_error": float(error is not None)}
        return text, reward, terminated, truncated, self._info(components)

    def close(self) -> None:
        self._client.close()

    # -- a generic OpenEnv env ---------------------------------------------------

    def _payload(self, parsed: Any) -> tuple[dict[str, Any] | None, str | None]:
        """The action to send for a parsed turn, or why there is none."""
        if parsed.errors:
            return None, "; ".join(parsed.errors)
        if parsed.tool_calls:
            call = parsed.tool_calls[0]
            if call.name != ACT_TOOL:
                return None, f"unknown tool {call.name[:64]!r}; call {ACT_TOOL} with the action's fields"
            problem = _schema_problem(call.arguments, self.action_schema)
            return (None, problem) if problem else (dict(call.arguments), None)
        if self.text_field is None:
            return None, f"call the {ACT_TOOL} tool with the action's fields"
        return {self.text_field: parsed.content}, None

    def _system_prompt(self) -> str:
        how = f"Act by calling the {ACT_TOOL} tool with the action's fields"
        if self.text_field is not None:
            how += f", or reply in plain text (sent as {self.text_field!r})"
        about = f": {self.description}" if self.description else ""
        return f"You act in the environment {self.server_name}{about}. {how}."

    def _info(self, components: dict[str, float]) -> dict[str, Any]:
        return {
            "messages": list(self.messages),
            "tools": self.tool_schemas,
            "reward_components": components,
            "turn": self.turn,
        }


def _action_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """The action's JSON schema as tool parameters, without OpenEnv's ``metadata`` field (no choice of the agent)."""
    parameters = json.loads(json.dumps(schema))
    parameters.get("properties", {}).pop("metadata", None)
    parameters["required"] = [name for name in parameters.get("required", []) if name != "metadata"]
    parameters.pop("title", None)
    parameters.setdefault("type", "object")
    return parameters


def _text_field(parameters: dict[str, Any], chosen: str | None) -> str | None:
    """The string field a plain-text reply is sent as: ``chosen``, else the only string field, else none."""
    strings = [name for name, spec in parameters.get("properties", {}).items() if spec.get("type") == "string"]
    if chosen is not None:
        if chosen not in strings:
            raise ValueError(f"text_field {chosen!r} is not a string field of the action; its string fields: {strings}")
        return chosen
    return strings[0] if len(strings) == 1 else None


def _act_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    about = f" ({description})" if description else ""
    return {
        "type": "function",
        "function": {"name": ACT_TOOL, "description": f"Take one action in {name}{about}.", "parameters": parameters},
    }


def _schema_problem(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not match the action's schema, or ``None``."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"invalid arguments for {ACT_TOOL}" + (f" at {where}" if where else "") + f": {error.message[:300]}"


def _render(observation: dict[str, Any]) -> str:
    """A generic observation as the agent reads it: its fields as JSON, without OpenEnv's ``metadata``."""
    fields = {key: value for key, value in observation.items() if key != "metadata"}
    return json.dumps(fields, ensure_ascii=False, default=str)
