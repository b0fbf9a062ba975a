"""The viewer's web page: a FastAPI app on 127.0.0.1, or one self-contained HTML file.

Holds :func:`create_app`, :func:`export_html` and :func:`page_html`. The page is plain
JavaScript (``static/app.js``) with uPlot for the curves (``static/uPlot.iife.min.js``,
vendored, MIT), so nothing is built or downloaded. Served, it asks the API for one
page of rows at a time; exported, the same script reads the rows and episodes
embedded in the file and filters them itself.

Episode text is untrusted: the script only ever puts it in the page as text
(``textContent``), and a Content-Security-Policy allows no script but the page's
own, so even text that reached the page as markup could not run.

API (JSON): ``/api/info``; ``/api/episodes?source=&offset=&limit=&sort=&desc=&min_reward=
&max_reward=&component=&component_min=&component_max=&outcome=&q=&step=``;
``/api/episode?source=&index=``; ``/api/metrics?source=``; ``/api/compare?offset=&limit=``.
Every answer is strict JSON in UTF-8 whatever the files hold (see
:mod:`~llmgym.viewer.safe_json`); lines that are not episodes are skipped when indexed and
listed in ``/api/info`` as each source's ``bad_lines``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from llmgym.viewer.index import Query
from llmgym.viewer.safe_json import sendable
from llmgym.viewer.sources import Viewer, ViewerError

__all__ = ["create_app", "export_html", "page_html", "STATIC", "EXPORT_EPISODES"]

STATIC = Path(__file__).parent / "static"
_SCRIPTS = ("uPlot.iife.min.js", "app.js")
_STYLES = ("uPlot.min.css", "app.css")
#: Most episodes of each source an exported file holds (the first ones in the file).
EXPORT_EPISODES = 2000
_SERVED_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def page_html(inline: bool, data: dict[str, Any] | None = None) -> str:
    """The page: linking ``static/`` (served), or with the scripts, styles and ``data`` inside (exported)."""
    if not inline:
        styles = "".join(f'<link rel="stylesheet" href="static/{name}">' for name in _STYLES)
        scripts = "".join(f'<script src="static/{name}"></script>' for name in _SCRIPTS)
        policy = _SERVED_POLICY
    else:
        codes = [(STATIC / name).read_text(encoding="utf-8") for name in _SCRIPTS]
        styles = "".join(f"<style>{(STATIC / name).read_text(encoding='utf-8')}</style>" for name in _STYLES)
        scripts = "".join(f"<script>{code}</script>" for code in codes)
        hashes = " ".join(f"'sha256-{_sha256(code)}'" for code in codes)
        policy = f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"
        embedded = _json_for_html(data or {})
        scripts = f'<script type="application/json" id="llmgym-data">{embedded}</script>' + scripts
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>llmgym view</title>{styles}</head>"
        f'<body><div id="app"><p class="muted">Loading…</p></div>{scripts}</body></html>\n'
    )


def _sha256(code: str) -> str:
    return base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii")


def _json_for_html(data: Any) -> str:
    """JSON that cannot end the ``<script>`` element holding it: ``<``, ``>`` and ``&`` as ``\\u`` escapes."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except ValueError:  # an out-of-range number or an unpaired surrogate from a file (UnicodeError is one)
        text = json.dumps(sendable(data), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def create_app(viewer: Viewer) -> Any:
    """The FastAPI app that serves ``viewer``'s page and API (indexing should be started: :meth:`Viewer.start`)."""
    from fastapi import FastAPI

    app = FastAPI(
        title="llmgym view",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=_sendable_json_response(),
    )
    _add_security_headers(app)
    _add_error_answers(app)
    _add_page_routes(app)
    _add_episode_routes(app, viewer)
    _add_run_routes(app, viewer)
    return app


def _sendable_json_response() -> type:
    """A response class for strict JSON (as FastAPI's) that fits a value from a file where it does not."""
    from fastapi.responses import JSONResponse

    class SendableJSONResponse(JSONResponse):
        """Strict JSON (as FastAPI's), with :func:`sendable` making a value from a file fit where it does not."""

        def render(self, content: Any) -> bytes:
            try:
                return super().render(content)
            except ValueError:  # inf from 1e400, an unpaired surrogate (UnicodeEncodeError is a ValueError)
                return super().render(sendable(content))

    return SendableJSONResponse


def _add_security_headers(app: Any) -> None:
    """Every answer: no content sniffing, and the page's Content-Security-Policy."""

    @app.middleware("http")
    async def no_sniffing(request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = _SERVED_POLICY
        return response


def _add_error_answers(app: Any) -> None:
    """A bad request answers 400, a missing episode or file 404, each with a ``detail`` that says why."""
    from fastapi.responses import JSONResponse

    @app.exception_handler(ViewerError)
    @app.exception_handler(ValueError)
    async def bad_request(request: Any, err: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=400)

    @app.exception_handler(IndexError)
    async def not_found(request: Any, err: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=404)

    @app.exception_handler(OSError)
    async def file_gone(request: Any, err: OSError) -> JSONResponse:
        # the file was removed or cut while the page was open: the episode is not there any more
        return JSONResponse({"detail": f"cannot read {err.filename or 'the file'}: {err.strerror or err}"}, 404)


def _add_page_routes(app: Any) -> None:
    """``/``: the page, and ``/static/{name}``: its scripts and styles (only the files in ``static/``)."""
    from fastapi import HTTPException
    from fastapi.responses import FileResponse, HTMLResponse

    static_files = {p.name: p for p in STATIC.iterdir() if p.is_file()}

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return page_html(inline=False)

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        if name not in static_files:
            raise HTTPException(404, f"no file {name}")
        return FileResponse(static_files[name])


def _add_episode_routes(app: Any, viewer: Viewer) -> None:
    """``/api/info``, ``/api/episodes`` (one filtered, sorted page of rows) and ``/api/episode`` (one record)."""
    from fastapi import Query as Param

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        return viewer.info()

    @app.get("/api/episodes")
    def episodes(
        source: int = 0,
        offset: int = 0,
        limit: int = Param(50, ge=0, le=1000),
        sort: str = "index",
        desc: bool = False,
        min_reward: float | None = None,
        max_reward: float | None = None,
        component: str | None = None,
        component_min: float | None = None,
        component_max: float | None = None,
        outcome: str | None = None,
        q: str = "",
        step: int | None = None,
    ) -> dict[str, Any]:
        query = Query(
            min_reward=min_reward,
            max_reward=max_reward,
            component=component or None,
            component_min=component_min,
            component_max=component_max,
            outcome=outcome or None,
            text=q,
            step=step,
            sort=sort,
            descending=desc,
            offset=offset,
            limit=limit,
        )
        index = viewer.index(source)
        return {**index.page(query), "indexing": index.indexing}

    @app.get("/api/episode")
    def episode(source: int = 0, index: int = 0) -> dict[str, Any]:
        return viewer.index(source).episode(index)


def _add_run_routes(app: Any, viewer: Viewer) -> None:
    """``/api/metrics`` (a run's logged metrics) and ``/api/compare`` (two sources' episodes side by side)."""
    from fastapi import Query as Param

    @app.get("/api/metrics")
    def metrics(source: int = 0) -> dict[str, Any]:
        if not 0 <= source < len(viewer.sources):
            raise ViewerError(f"no source {source}")
        return {"rows": viewer.sources[source].metrics()}

    @app.get("/api/compare")
    def compare(offset: int = 0, limit: int = Param(50, ge=0, le=1000)) -> dict[str, Any]:
        return viewer.compare(offset, limit)


def export_html(viewer: Viewer, out: str | os.PathLike[str], max_episodes: int = EXPORT_EPISODES) -> dict[str, Any]:
    """Write the page with its data to one HTML file that opens anywhere, offline.

    Indexes every source first. Each source contributes its first ``max_episodes``
    episodes (rows and full records), a run its metrics, a comparison all its rows.
    Lines that are not episodes are left out and listed in the file's info.

    Returns:
        per source, the episodes written, the episodes there are, and its lines that are
        not episodes (``bad_line_count``, ``bad_lines``: the first ones, see
        :attr:`~llmgym.viewer.index.EpisodeIndex.bad_lines`).

    Raises:
        ViewerError: a source could not be indexed (its file cannot be read); nothing is written.
    """
    viewer.wait()
    for source in viewer.sources:
        if source.index is not None and source.index.error:
            raise ViewerError(f"cannot export {source.label}: {source.index.error}")
    sources, written = [], []
    for source in viewer.sources:
        rows, records = [], []
        if source.index is not None:
            count = min(len(source.index), max_episodes)
            rows = source.index.rows(range(count))
            records = [source.index.episode(i) for i in range(count)]
            written.append(
                {
                    "label": source.label,
                    "written": count,
                    "episodes": len(source.index),
                    "bad_line_count": source.index.bad_line_count,
                    "bad_lines": source.index.bad_lines,
                }
            )
        sources.append({"rows": rows, "episodes": records, "metrics": source.metrics()})
    data = {"info": viewer.info(), "sources": sources}
    if len(viewer.sources) == 2:
        data["compare"] = viewer.compare(0, 10**9)
    Path(out).write_text(page_html(inline=True, data=data), encoding="utf-8")
    return {"sources": written}
