"""``llmgym serve-env``: a registered single-agent environment as an OpenEnv server (HTTP and WebSocket).

OpenEnv's own server code serves it (its ``Environment`` interface and app): OpenEnv's
``GenericEnvClient``, or ``gym.make("llmgym/OpenEnv-v0", base_url=...)``, plays it from another
process or machine, one isolated episode per WebSocket session.
"""

from __future__ import annotations

import argparse

from llmgym.cli import CLIError, parse_env_kwargs, unknown_env
from llmgym.cli.serve import check_port


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve-env",
        help="serve an environment as an OpenEnv server",
        description=__doc__
        + " Routes (OpenEnv's): /ws (one session per episode), /reset and /step (stateless: a fresh env per call, "
        "so /step answers 409 pointing to /ws), /state, /schema, /metadata, /health. Needs the openenv extra.",
    )
    parser.add_argument("env_id", help="a registered single-agent environment id (llmgym list)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback only)")
    parser.add_argument("--port", type=int, default=8001, help="port (default: %(default)s)")
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=16,
        help="episodes served at once, one env each; further clients are refused (default: %(default)s)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=None,
        help="close a session unused for this many seconds (default: only when its client disconnects)",
    )
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of keyword arguments for gymnasium.make")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gymnasium as gym

    if not 0 < args.port < 65536:
        raise CLIError(f"--port must be between 1 and 65535, got {args.port}")
    if args.max_sessions < 1:
        raise CLIError(f"--max-sessions must be at least 1, got {args.max_sessions}")
    if args.session_timeout is not None and not args.session_timeout > 0:
        raise CLIError(f"--session-timeout must be positive seconds, got {args.session_timeout}")
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    if args.env_id not in gym.registry:
        raise unknown_env(args.env_id, "serve-env")
    check_port(args.host, args.port)
    from llmgym.envs.adapters.openenv.server import create_env_app

    try:
        app = create_env_app(
            args.env_id,
            max_sessions=args.max_sessions,
            env_kwargs=env_kwargs,
            session_timeout=args.session_timeout,
        )
    except ImportError as err:
        raise CLIError(str(err)) from None
    except (TypeError, ValueError, gym.error.Error) as err:
        raise CLIError(f"cannot serve {args.env_id}: {err}") from None
    import uvicorn

    print(f"llmgym serve-env: {args.env_id} on http://{args.host}:{args.port} (OpenEnv, /ws sessions)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
