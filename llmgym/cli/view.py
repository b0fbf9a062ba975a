"""``llmgym view``: read episodes, compare two runs, follow a training run, in a local web page."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from llmgym.cli import CLIError, check_output_path

if TYPE_CHECKING:
    from llmgym.viewer.sources import Viewer


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "view",
        help="look at episodes, evals and training runs in a local web page",
        description=__doc__ + " PATH is an episodes .jsonl file, an `llmgym eval --out` folder or an "
        "`llmgym train grpo --out` folder; a second PATH compares the two on the seeds both played.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="what to show (two: compare them)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback only)")
    parser.add_argument("--port", type=int, default=8765, help="port (default: %(default)s; 0 picks a free one)")
    parser.add_argument(
        "--export",
        metavar="FILE",
        default=None,
        help="write one self-contained HTML file (data, scripts and styles inside) instead of serving",
    )
    parser.add_argument(
        "--export-episodes",
        type=int,
        default=None,
        metavar="N",
        help="episodes of each source in the exported file (default: the first 2000)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from llmgym.viewer.sources import Viewer, ViewerError

    if len(args.paths) > 2:
        raise CLIError(f"give one PATH to view or two to compare, not {len(args.paths)}")
    if args.export_episodes is not None and args.export_episodes < 1:
        raise CLIError("--export-episodes must be >= 1")
    if args.export is not None:
        check_output_path(args.export, "--export", folder=False)
    try:
        viewer = Viewer(args.paths)
    except ViewerError as err:
        raise CLIError(str(err)) from None
    if args.export is not None:
        return _export(viewer, args)
    return _serve(viewer, args)


def _export(viewer: Viewer, args: argparse.Namespace) -> int:
    from llmgym.viewer.app import EXPORT_EPISODES, export_html
    from llmgym.viewer.sources import ViewerError

    try:
        written = export_html(viewer.start(), args.export, args.export_episodes or EXPORT_EPISODES)
    except ViewerError as err:
        raise CLIError(str(err)) from None
    for source in written["sources"]:
        more = (
            f" (the first {source['written']} of {source['episodes']})"
            if source["written"] < source["episodes"]
            else ""
        )
        print(f"{source['label']}: {source['written']} episodes{more}")
        if source["bad_line_count"]:
            print(f"{source['label']}: {_skipped(source['bad_line_count'], source['bad_lines'])}")
    print(f"wrote {args.export}")
    return 0


def _skipped(count: int, bad_lines: list[dict]) -> str:
    """``3 lines skipped, not episodes: line 4 (reason); ...`` (the first three named)."""
    named = "; ".join(f"line {bad['line']} ({bad['reason']})" for bad in bad_lines[:3])
    return f"{count} line{'s' if count != 1 else ''} skipped, not episodes: {named}{'; ...' if count > 3 else ''}"


def _serve(viewer: Viewer, args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from llmgym.viewer.app import create_app
    except ImportError as err:
        raise CLIError(f'llmgym view needs {err.name!r}, which is not installed: pip install "llmgym[view]"') from None
    from llmgym.cli.serve import check_port

    if args.port != 0:
        check_port(args.host, args.port)
    app = create_app(viewer.start())
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))

    async def announce() -> None:
        # the URL once the socket is bound (with --port 0, the port the system chose)
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        print(f"llmgym view: http://{args.host}:{port}/  (Ctrl-C stops it)", flush=True)

    async def serve() -> None:
        await asyncio.gather(server.serve(), announce())

    asyncio.run(serve())
    return 0
