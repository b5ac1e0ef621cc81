"""The REST API (``aaco serve``) and the dashboard (``aaco dashboard``): one FastAPI app.

Why FastAPI pages rather than Streamlit: one small dependency set serves both the API and
the dashboard; the pages are plain server-rendered HTML that reuse the self-contained report,
so they work offline, with no websocket runtime, and are tested over plain HTTP and in a
real browser. FastAPI publishes the OpenAPI schema at ``/openapi.json``.

Session ids are looked up among the bundles under the sessions root; an id is never joined
to a path, so ``../`` or an absolute path cannot reach outside the root (400 for a malformed
id, 404 for an unknown one). With a token, every route needs ``Authorization: Bearer
<token>`` (or the cookie that ``/?token=...`` sets for a browser).
"""

from __future__ import annotations

import hmac
import io
import math
import os
import re
from pathlib import Path
from typing import Any

from aaco import __version__
from aaco.errors import AacoError, UsageError

try:
    from fastapi import Body, FastAPI, HTTPException, Query, Request
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise UsageError("the web server needs FastAPI and uvicorn: pip install 'aaco[web]'") from exc

import pyarrow as pa
import pyarrow.parquet as pq

from aaco.session.bundle import Session, iter_sessions
from aaco.session.schema import TABLES

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
TOKEN_COOKIE = "aaco_token"
MAX_LIMIT = 10_000


def _detail(error: object, root: Path) -> str:
    """An error message without the server's paths (bundles are named relative to root)."""
    return str(error).replace(str(root) + os.sep, "").replace(str(root), "<sessions root>")


def _find(root: Path, session_id: str) -> Session:
    if not SESSION_ID.match(session_id) or ".." in session_id:
        raise HTTPException(status_code=400, detail="malformed session id")
    matches = [p for p in iter_sessions(root) if p.name == session_id]
    if not matches:
        raise HTTPException(status_code=404, detail=f"no session {session_id}")
    if len(matches) > 1:
        where = ", ".join(str(p.relative_to(root)) for p in matches)
        detail = f"session id {session_id} is ambiguous: {where}"
        raise HTTPException(status_code=409, detail=detail)
    try:
        return Session.load(matches[0])
    except AacoError as exc:
        raise HTTPException(status_code=422, detail=_detail(exc, root)) from exc


def _rows(root: Path) -> list[dict[str, Any]]:
    from aaco.session.catalog import list_sessions

    rows = list_sessions(root)
    for r in rows:
        r.pop("path", None)  # the API speaks ids, not server paths
        if "error" in r:
            r["error"] = _detail(r["error"], root)
    return rows


def create_app(root: Path, token: str | None = None) -> FastAPI:
    """The app over the sessions under ``root``; ``token`` makes every route need it."""
    root = root.resolve()
    if token is not None and not token:
        raise UsageError("the API token must not be empty")
    app = FastAPI(
        title="AACO API",
        version=__version__,
        description="Sessions, reports, tables, diffs and history of an AACO sessions root.",
        docs_url=None,  # Swagger UI would load from a CDN; the schema is at /openapi.json
        redoc_url=None,
    )

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if token is not None:
            sent = request.headers.get("authorization", "")
            given = sent[7:] if sent.lower().startswith("bearer ") else ""
            given = given or request.cookies.get(TOKEN_COOKIE, "")
            query = request.query_params.get("token", "")
            if query and request.url.path == "/" and _same(query, token):
                resp = RedirectResponse("/", status_code=303)
                resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
                return resp
            if not _same(given, token):
                return JSONResponse(
                    {"detail": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        response: Response = await call_next(request)
        return response

    # -- API --------------------------------------------------------------------------------
    @app.get("/sessions", tags=["sessions"])
    def sessions(
        model: str | None = None,
        backend: str | None = None,
        tag: str | None = None,
        status: str | None = None,
        since: str | None = Query(None, description="created_utc >= this ISO date/time"),
        offset: int = Query(0, ge=0),
        limit: int = Query(100, ge=1, le=MAX_LIMIT),
    ) -> dict[str, Any]:
        """Sessions under the root, newest first, filtered; paged with offset/limit."""
        rows = _filter(_rows(root), model, backend, tag, status, since)
        rows.reverse()
        return {
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "items": rows[offset : offset + limit],
        }

    @app.get("/sessions/{session_id}", tags=["sessions"])
    def session(session_id: str) -> dict[str, Any]:
        """A session's metadata (session.json) and headline numbers."""
        from aaco.session.catalog import session_row

        s = _find(root, session_id)
        row = session_row(s)
        row.pop("path", None)
        return {"summary": row, "meta": s.meta, "tables": sorted(_tables_of(s))}

    @app.get("/sessions/{session_id}/report.json", tags=["reports"])
    def report_json(session_id: str) -> dict[str, Any]:
        from aaco.report.model import build_report

        report = build_report(_find(root, session_id))
        report["session"].pop("path", None)
        return report

    @app.get("/sessions/{session_id}/report.html", tags=["reports"], response_class=HTMLResponse)
    def report_html(session_id: str) -> HTMLResponse:
        from aaco.report.html import HtmlRenderer

        return HTMLResponse(HtmlRenderer().render(_find(root, session_id)))

    @app.get("/sessions/{session_id}/tables/{name}", tags=["tables"])
    def table(
        session_id: str,
        name: str,
        format: str = Query("json", pattern="^(json|parquet)$"),
        offset: int = Query(0, ge=0),
        limit: int = Query(1000, ge=1, le=MAX_LIMIT),
    ) -> Response:
        """Rows of a bundle table, paged; ``format=parquet`` returns the page as Parquet."""
        if name not in TABLES:
            raise HTTPException(status_code=404, detail=f"unknown table {name!r}")
        s = _find(root, session_id)
        t = s.table(name)
        if t is None:
            raise HTTPException(status_code=404, detail=f"session has no table {name!r}")
        page = t.slice(offset, limit)
        if format == "parquet":
            buf = io.BytesIO()
            pq.write_table(page, buf)
            return Response(
                buf.getvalue(),
                media_type="application/vnd.apache.parquet",
                headers={"X-Total-Count": str(t.num_rows)},
            )
        return JSONResponse(
            {
                "table": name,
                "total": t.num_rows,
                "offset": offset,
                "limit": limit,
                "columns": [{"name": f.name, "type": str(f.type)} for f in t.schema],
                "rows": _jsonable(page),
            }
        )

    @app.post("/diff", tags=["regression"])
    def diff(
        body: dict[str, Any] = Body(  # noqa: B008 - FastAPI's way of declaring a body
            ...,
            examples=[{"baseline": "20261124_080731_920619", "session": "20261124_081632_2a2b44"}],
        ),
    ) -> dict[str, Any]:
        """Compare sessions (ids, or a saved baseline name for ``baseline``); nothing is written.

        Body: ``baseline`` and ``session`` (an id or a list of ids), optional ``threshold``
        (fraction, default 0.03) and ``gates`` (list, default ["p10"]).
        """
        from aaco.regress.baseline import (
            baseline_file,
            baseline_sessions,
            is_baseline_name,
            load_baseline,
        )
        from aaco.regress.diff import DEFAULT_THRESHOLD, diff_sessions

        if "baseline" not in body or "session" not in body:
            raise HTTPException(status_code=422, detail="body needs 'baseline' and 'session'")

        def ids(v: Any) -> list[str]:
            if isinstance(v, str):
                return [v]
            if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                return v
            raise HTTPException(status_code=422, detail="ids must be a string or a list")

        threshold = body.get("threshold", DEFAULT_THRESHOLD)
        gates = body.get("gates", ["p10"])
        if (
            not isinstance(threshold, (int, float))
            or isinstance(threshold, bool)
            or not 0.0 <= threshold < 1.0
        ):
            raise HTTPException(status_code=422, detail="threshold: a fraction in [0, 1)")
        if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
            raise HTTPException(status_code=422, detail="gates: a list of quantile names")
        base: list[Session] = []
        name = None
        try:
            for b in ids(body["baseline"]):
                if is_baseline_name(b) and baseline_file(root, b).is_file():
                    runs = baseline_sessions(root, load_baseline(root, b))
                    if not all(r.path.is_relative_to(root) for r in runs):
                        raise HTTPException(
                            status_code=422,
                            detail=f"baseline {b!r} points outside the sessions root",
                        )
                    base += runs
                    name = b
                else:
                    base.append(_find(root, b))
            news = [_find(root, x) for x in ids(body["session"])]
            result = diff_sessions(
                base, news, threshold=float(threshold), gates=gates, baseline_name=name
            )
        except AacoError as exc:
            raise HTTPException(status_code=422, detail=_detail(exc, root)) from exc
        result["baseline_ref"].pop("session_path", None)
        return result

    @app.get("/history", tags=["regression"])
    def history(
        model: str | None = None, backend: str | None = None, tag: str | None = None
    ) -> list[dict[str, Any]]:
        """Sessions of each configuration over time with their change points."""
        from aaco.regress.history import history as build

        groups: list[dict[str, Any]] = build(root, model=model, backend=backend, tag=tag)
        for g in groups:
            for r in g["sessions"]:
                r.pop("path", None)
        return groups

    @app.get("/baselines", tags=["regression"])
    def baselines() -> list[dict[str, Any]]:
        from aaco.regress.baseline import list_baselines

        out = list_baselines(root)
        for b in out:
            b.pop("session_path", None)
            for r in b.get("runs") or []:
                r.pop("session_path", None)
        return out

    # -- dashboard --------------------------------------------------------------------------
    from aaco.web import pages

    pages.mount(app, root, _rows, _filter, _find, _detail)
    return app


def _filter(
    rows: list[dict[str, Any]],
    model: str | None,
    backend: str | None,
    tag: str | None,
    status: str | None = None,
    since: str | None = None,
) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if model and r.get("model") != model:
            continue
        if backend and r.get("backend") != backend:
            continue
        if tag and r.get("tag") != tag:
            continue
        if status and r.get("status") != status:
            continue
        if since and str(r.get("created_utc") or "") < since:
            continue
        out.append(r)
    return out


def _tables_of(s: Session) -> list[str]:
    return [name for name in TABLES if s.has_table(name)]


def _same(given: str, token: str) -> bool:
    """Constant-time comparison of UTF-8 bytes, so a non-ASCII token cannot raise. Header
    and cookie values arrive decoded as latin-1; their raw bytes are compared too."""
    want = token.encode()
    try:
        raw = given.encode("latin-1")
    except UnicodeEncodeError:
        raw = b""
    return hmac.compare_digest(given.encode(), want) | hmac.compare_digest(raw, want)


def _clean(v: Any) -> Any:
    """JSON-safe: NaN and infinities (also inside lists and structs) -> null, bytes -> hex."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def _jsonable(t: pa.Table) -> list[dict[str, Any]]:
    return [_clean(r) for r in t.to_pylist()]
