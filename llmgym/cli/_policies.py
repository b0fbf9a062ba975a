"""The policies and players that ``llmgym eval``'s flags name, built from their specs.

Holds :func:`build_policy` (``--policy scripted:NAME``, ``--base-url``, or a
local ``--backend``), :func:`build_player` (a multi-agent ``--opponent`` spec:
``scripted:NAME``, ``self``, ``local[:BACKEND[:MODEL]]``,
``url:BASE_URL[@MODEL]``) with :func:`scripted_player`, and the checks that turn
a missing extra or an unreachable server into one line
(:func:`missing_extra`, :func:`check_url`, :func:`list_models`), and the local
model's ``--engine`` flag (:func:`add_engine_argument`, :func:`resolve_engine`) that
``eval`` and ``serve`` share. Adapters are imported inside the functions, so the CLI
starts fast.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from llmgym.cli import EXTRA_FOR_MODULE, CLIError

__all__ = [
    "build_policy",
    "build_player",
    "add_engine_argument",
    "resolve_engine",
    "scripted_player",
    "missing_extra",
    "check_url",
    "list_models",
    "server_models",
    "SELF",
    "OPPONENT_HELP",
    "STRICT_MODEL_OWNERS",
]

#: The ``--opponent`` spec that makes the evaluated policy play itself.
SELF = "self"


def add_engine_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--engine {auto,llama.cpp,torch}``: what decodes ``what`` for the llama.cpp backend."""
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "llama.cpp", "torch"],
        help=f"what decodes {what} of the llama.cpp backend: torch (bf16, a KV cache slot each; needs the "
        "transformers extra) or llama.cpp; auto: torch where installed on a CPU with AVX512-BF16 (default: auto)",
    )


def resolve_engine(choice: str) -> str:
    """``--engine``'s value with ``auto`` made concrete (:func:`~llmgym.wrappers.slot_batching.default_engine`)."""
    if choice != "auto":
        return choice
    from llmgym.wrappers.slot_batching import default_engine

    return default_engine()


def _local_batching(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """The ``load_policy`` arguments that make a local llama.cpp model decode ``--concurrency`` episodes together,
    a KV cache slot each, on ``--engine`` (none for one episode at a time, or another backend): ``load_policy``
    then builds a :class:`~llmgym.wrappers.torch_slot_policy.TorchSlotPolicy` (torch) or a
    :class:`~llmgym.wrappers.llamacpp_batch.LlamaCppBatchPolicy` (llama.cpp)."""
    concurrency = getattr(args, "concurrency", None) or 1
    if backend != "llama.cpp" or concurrency <= 1:
        return {}
    return {"slots": concurrency, "engine": getattr(args, "engine", "llama.cpp")}


OPPONENT_HELP = (
    "an opponent for a multi-agent game (llmgym/ma-*), repeatable: scripted:NAME (the game's scripted players, "
    "e.g. scripted:minimax for tic-tac-toe, or scripted:module:Class), self (self-play), "
    "local[:BACKEND[:MODEL]] or url:BASE_URL[@MODEL] (an OpenAI-compatible server)"
)


def build_policy(args: argparse.Namespace) -> Any:
    """The policy the arguments ask for; missing extras and unreachable servers become CLIErrors."""
    try:
        if args.policy:
            kind, _, name = args.policy.partition(":")
            if kind != "scripted" or not name:
                raise CLIError(f"--policy must look like scripted:NAME (e.g. scripted:wordle), got {args.policy!r}")
            from llmgym.wrappers.scripted import load_scripted

            try:
                return load_scripted(name)
            except ValueError as err:
                raise CLIError(str(err)) from None
        if args.base_url:
            from llmgym.wrappers.openai_policy import OpenAIPolicy

            cards = [list_models(url, args.api_key) for url in args.base_url]
            models = [[card["id"] for card in listed] for listed in cards]
            model = args.model or (models[0][0] if models[0] else None)
            if model is None:
                raise CLIError(f"{args.base_url[0]} lists no models; pass --model")
            for url, served, listed in zip(args.base_url, models, cards):
                if served and model not in served:
                    shown = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "")
                    if all(card.get("owned_by") in STRICT_MODEL_OWNERS for card in listed):
                        # every request would be a 404 (vLLM: "model does not exist")
                        raise CLIError(f"{url} does not serve model {model!r}; it serves: {shown}")
                    # others take names they do not list (Ollama: llama3.2 for llama3.2:latest; llama.cpp's
                    # server: any name): let the run report what the server says
                    print(
                        f"llmgym: {url} does not list model {model!r} (it lists: {shown}); trying it anyway",
                        file=sys.stderr,
                    )
            # eval needs no token ids: asking for them only costs bandwidth
            return OpenAIPolicy(
                model,
                base_url=args.base_url,
                api_key=args.api_key,
                return_tokens=False,
                max_concurrency=args.concurrency,
            )
        from llmgym.wrappers.models import load_policy

        try:
            return load_policy(args.backend, args.model, **_local_batching(args.backend, args))
        except (OSError, ValueError) as err:
            raise CLIError(f"cannot load the {args.backend} backend: {err}") from None
    except ImportError as err:
        raise CLIError(missing_extra(err)) from None


def missing_extra(err: ImportError) -> str:
    """A one-line install hint for an ImportError."""
    text = str(err)
    if "pip install" in text:
        return text
    module = (err.name or "").split(".")[0]
    extra = EXTRA_FOR_MODULE.get(module)
    if extra is None:
        return f"a package is missing: {text}"
    return f'{module} is not installed: pip install "llmgym[{extra}]"'


#: ``owned_by`` of the model cards of servers that refuse (404) any model name they do not list.
STRICT_MODEL_OWNERS = frozenset({"llmgym", "vllm"})


def server_models(url: str, api_key: str | None) -> list[str]:
    """The model ids a server lists at ``URL/models``; a clear CLIError when it cannot be reached."""
    return [card["id"] for card in list_models(url, api_key)]


def check_url(url: str) -> None:
    """Refuse a server URL that is not ``http(s)://HOST...``.

    Raises:
        CLIError: naming the URL and the form it should have.

    Example:
        >>> check_url("http://127.0.0.1:8000/v1")
        >>> try:
        ...     check_url("notaurl")
        ... except CLIError as err:
        ...     print(err)
        'notaurl' is not a server URL: give its OpenAI-compatible /v1 URL, e.g. http://127.0.0.1:8000/v1
    """
    try:
        parts = urllib.parse.urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # a malformed host, e.g. an unclosed IPv6 bracket
        ok = False
    if not ok:
        raise CLIError(
            f"{url!r} is not a server URL: give its OpenAI-compatible /v1 URL, e.g. http://127.0.0.1:8000/v1"
        )


def list_models(url: str, api_key: str | None) -> list[dict[str, Any]]:
    """The model cards (each with a string ``id``) a server lists at ``URL/models``; a clear CLIError when it
    cannot be reached."""
    import os

    check_url(url)
    key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    request = urllib.request.Request(url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read().decode() or "{}")
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise CLIError(f"the server at {url} refused the API key (HTTP {err.code}); pass --api-key") from None
        if err.code == 404:
            raise CLIError(f"{url}/models was not found (HTTP 404): is {url} an OpenAI-compatible /v1 URL?") from None
        return []  # it answers: let the run report what it says
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise CLIError(
            f"cannot reach the server at {url} ({reason}). Is it running (`llmgym serve`, `vllm serve`) "
            "and does the URL end in /v1?"
        ) from None
    data = body.get("data") if isinstance(body, dict) else None
    return [m for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def scripted_player(env_id: str, name: str) -> Any:
    """A scripted player for ``env_id``: one of the game's own by name
    (:func:`~llmgym.envs.multiagent.evaluation.scripted_players`), a text actor of
    :data:`~llmgym.wrappers.scripted.SCRIPTED_ACTORS` by name (``legal-random``), or ``module:Class``.

    Raises:
        CLIError: an unknown name, a path that does not import, a class without ``act``.
    """
    from llmgym.envs.multiagent.evaluation import scripted_players

    players = scripted_players(env_id)
    if name in players:
        return players[name]()
    head, _, rest = name.partition("-")
    if head in ("negamax", "haggler") and head in players and rest:
        try:
            numbers = [int(x) for x in rest.split("-")]
            return players[head](*numbers)
        except (ValueError, TypeError) as err:
            raise CLIError(f"bad scripted player {name!r}: {err}") from None
    from llmgym.wrappers.scripted import SCRIPTED_ACTORS

    name = SCRIPTED_ACTORS.get(name, name)  # a text actor by its short name: it plays from its chat, as a model
    if ":" not in name:
        known = ", ".join(sorted(players)) or "none"
        raise CLIError(
            f"unknown scripted player {name!r} for {env_id}; built-in: {known} "
            "(or an import path like scripted:mypackage.module:MyPlayer)"
        )
    from llmgym.wrappers.scripted import import_user_module

    module_name, _, attr = name.partition(":")
    try:
        factory = getattr(import_user_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise CLIError(f"cannot load scripted player {name!r}: {err}") from None
    act = getattr(factory, "act", None)
    if act is None:
        raise CLIError(f"scripted player {name!r} has no act() method")
    if len(inspect.signature(act).parameters) >= 3:  # act(self, env, agent): a game-aware player
        return factory()
    from llmgym.wrappers.scripted import ScriptedPolicy

    return ScriptedPolicy(factory, name=attr)  # act(observation) -> str, replayed from the chat


def build_player(spec: str, env_id: str, args: argparse.Namespace, evaluated: Any = None) -> Any:
    """The player an ``--opponent`` (or multi-agent ``--policy``) spec names.

    Args:
        spec: ``scripted:NAME``, ``self``, ``local[:BACKEND[:MODEL]]`` or ``url:BASE_URL[@MODEL]``.
        env_id: the multi-agent game (for scripted names).
        args: the eval arguments (API key, concurrency).
        evaluated: the evaluated policy, returned for ``self``.

    Raises:
        CLIError: a malformed spec, an unknown name, a missing extra, an unreachable server.
    """
    kind, _, rest = spec.partition(":")
    try:
        if spec == SELF:
            if evaluated is None:
                raise CLIError("'self' is an opponent spec (the evaluated policy plays itself), not a --policy")
            return evaluated
        if kind == "scripted" and rest:
            return scripted_player(env_id, rest)
        if kind == "local":
            backend, _, model = rest.partition(":")
            from llmgym.wrappers.models import load_policy

            backend = backend or "llama.cpp"
            try:  # batched as the evaluated policy is
                return load_policy(backend, model or None, **_local_batching(backend, args))
            except (OSError, ValueError) as err:
                raise CLIError(f"cannot load the opponent {spec!r}: {err}") from None
        if kind == "url" and rest:
            url, model = rest, None
            at = rest.rfind("@")
            if at > 0 and "/" not in rest[at:]:
                url, model = rest[:at], rest[at + 1 :] or None
            models = server_models(url, args.api_key)
            model = model or (models[0] if models else None)
            if model is None:
                raise CLIError(f"{url} lists no models; name one: url:{url}@MODEL")
            from llmgym.wrappers.openai_policy import OpenAIPolicy

            return OpenAIPolicy(
                model, base_url=url, api_key=args.api_key, return_tokens=False, max_concurrency=args.concurrency or 32
            )
    except ImportError as err:
        raise CLIError(missing_extra(err)) from None
    raise CLIError(
        f"bad opponent spec {spec!r}: use scripted:NAME, self, local[:BACKEND[:MODEL]] or url:BASE_URL[@MODEL]"
    )
