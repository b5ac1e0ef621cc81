"""The REST API (``aaco serve``) and the dashboard (``aaco dashboard``): one FastAPI app.

Why FastAPI pages rather than Streamlit: one small dependency set serves both the API and
the dashboard; the pages are plain server-rendered HTML that reuse the self-contained report,
so they work offline, with no websocket runtime, and are tested over plain HTTP and in a
real browser. FastAPI publishes the OpenAPI schema at ``/openapi.json``.

Session ids are looked up among the bundles under the sessions root; an id is never joined
to a path, so ``../`` or an absolute path cannot reach outside the root (400 for a malformed
id, 404 for an unknown one), and a bundle symlinked in from outside the root is not one of
its bundles. ``latest`` names the newest session, as in the CLI. A damaged bundle file is a
422, and no response carries the server's paths. With a token, every route needs
``Authorization: Bearer <token>`` (or the cookie that ``/?token=...`` sets for a browser).
"""

from __future__ import annotations

import hmac
import html
import io
import math
import os
import re
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

from aaco import __version__
from aaco.errors import AacoError, UsageError

try:
    from fastapi import FastAPI, HTTPException, Query, Request, Security
    from fastapi import Path as PathParam
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from fastapi.security import HTTPBearer
    from pydantic import BaseModel, ConfigDict, Field
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise UsageError("the web server needs FastAPI and uvicorn: pip install 'aaco[web]'") from exc

import pyarrow as pa
import pyarrow.parquet as pq

from aaco.regress.baseline import (
    baseline_file,
    baseline_sessions,
    is_baseline_name,
    list_baselines,
    load_baseline,
)
from aaco.regress.diff import DEFAULT_THRESHOLD, diff_sessions
from aaco.regress.history import history as build_history
from aaco.regress.history import history_from_rows
from aaco.report.model import build_report
from aaco.report.renderers import get_renderer_class
from aaco.session.bundle import Session, iter_sessions, resolve_latest
from aaco.session.catalog import list_sessions, session_row
from aaco.session.paths import LATEST
from aaco.session.schema import TABLES
from aaco.web import pages

# matched with fullmatch: ``$`` would also accept a trailing newline
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
TOKEN_COOKIE = "aaco_token"
MAX_LIMIT = 10_000
PARQUET = "application/vnd.apache.parquet"
SECURITY_SCHEME = "bearer"


class Problem(BaseModel):
    """Every error response: one line, no server paths."""

    detail: str


# module level: with postponed annotations FastAPI resolves these names in the module
SessionId = Annotated[
    str, PathParam(description="a session id (its bundle's folder name), or `latest`")
]
TableName = Annotated[
    str,
    PathParam(
        description="a bundle table (404 for another name or one the bundle lacks)",
        json_schema_extra={"enum": sorted(TABLES)},
    ),
]
Ids = str | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]


class DiffRequest(BaseModel):
    """``POST /diff``: the sessions to compare; extra keys are ignored (older clients)."""

    baseline: Ids = Field(
        description="a session id, a saved baseline name, or a list of ids (several runs)"
    )
    session: Ids = Field(description="a session id, or a list of ids (several runs)")
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        ge=0.0,
        lt=1.0,
        strict=True,  # strict: true and "0.1" are not fractions
        description="smallest shift that counts, as a fraction",
    )
    gates: list[str] | None = Field(
        None,
        description="what decides the verdict: quantiles (p10, p50, ...) for model runs, "
        "METRIC:QUANTILE (ttft:p99, output_tokens_per_s:p50, ...) for serving sessions; "
        "default p10, or ttft:p50, ttft:p99, tpot:p50, output_tokens_per_s:p50",
    )
    point: str | None = Field(
        None,
        description="serving sessions with several load points: N, concurrency=N or rate=R",
    )
    allow_contention: bool = Field(
        False,
        description="judge even when other processes took the CPU during a measured phase "
        "(by default that makes a REGRESSION or IMPROVEMENT inconclusive)",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"baseline": "20261124_080731_920619", "session": "20261124_081632_2a2b44"}
            ]
        }
    )


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        400: "malformed session id",
        401: "missing or wrong bearer token (when the server has one)",
        404: "unknown session, or one outside the sessions root",
        409: "the session id names folders under two dates",
        422: "invalid parameters, or a damaged bundle",
    }
    return {c: {"model": Problem, "description": what[c]} for c in codes}


_ALL = (400, 401, 404, 409, 422)


def _detail(error: object, root: Path) -> str:
    """An error message without the server's paths (bundles are named relative to root)."""
    text = str(error).replace(str(root) + os.sep, "").replace(str(root), "<sessions root>")
    home = _home_pattern()
    return home.sub("~", text) if home else text


def _home_pattern() -> re.Pattern[str] | None:
    home = str(Path.home())
    return _prefix_pattern([home]) if len(home) > 1 else None


def _prefix_pattern(prefixes: list[str]) -> re.Pattern[str]:
    """Any of ``prefixes`` as a whole path prefix: ``/home/ann`` matches ``/home/ann/x`` and
    ``--model=/home/ann``, not ``/home/anna`` or ``/x/home/ann``. Longest first, so a root
    under the home folder is named as the root."""
    alts = "|".join(re.escape(p) for p in sorted(set(prefixes), key=len, reverse=True))
    return re.compile(rf"(?<![\w./-])(?:{alts})(?![\w.-])")


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root)


def _latest(root: Path) -> list[Path]:
    """The bundle ``latest`` names, as the CLI resolves it: the root's ``latest`` pointer
    (the last published run); without a usable pointer, the newest bundle by created time."""
    bundles = list(iter_sessions(root))
    pointer = root / LATEST
    if pointer.exists():
        target = resolve_latest(pointer).resolve()
        chosen = [b for b in bundles if b.resolve() == target]
        if chosen:
            return chosen[:1]
    newest: tuple[datetime, str, Path] | None = None
    for b in bundles:
        try:
            created = _parse_when(Session.load(b).meta.get("created_utc"))
        except AacoError:
            continue  # a malformed bundle is nobody's latest
        key = (created or datetime.min.replace(tzinfo=timezone.utc), b.name, b)
        if newest is None or key[:2] > newest[:2]:
            newest = key
    return [newest[2]] if newest else []


def _find(root: Path, session_id: str) -> Session:
    if not SESSION_ID.fullmatch(session_id) or ".." in session_id:
        raise HTTPException(status_code=400, detail="malformed session id")
    if session_id == LATEST:
        matches = _latest(root)
    else:
        matches = [p for p in iter_sessions(root) if p.name == session_id]
    if not matches:
        raise HTTPException(status_code=404, detail=f"no session {session_id}")
    if len(matches) > 1:
        where = ", ".join(str(p.relative_to(root)) for p in matches)
        detail = f"session id {session_id} is ambiguous: {where}"
        raise HTTPException(status_code=409, detail=detail)
    try:
        s = Session.load(matches[0])
    except AacoError as exc:
        raise HTTPException(status_code=422, detail=_detail(exc, root)) from exc
    if not _inside(s.path, root):  # iter_sessions skips these already; a second look is cheap
        raise HTTPException(status_code=404, detail=f"no session {session_id}")
    return s


def _rows(root: Path) -> list[dict[str, Any]]:
    rows = list_sessions(root)
    for r in rows:
        r.pop("path", None)  # the API speaks ids, not server paths
        if "error" in r:
            r["error"] = _detail(r["error"], root)
    return rows


class _Scrub:
    """Replaces the sessions root by ``<sessions root>`` and the home folder by ``~`` in a
    response (every string of a JSON value, or an HTML page): responses carry no server
    paths, while the bundle files keep them."""

    def __init__(self, roots: list[Path]) -> None:
        home = str(Path.home())
        names = {str(r): "<sessions root>" for r in roots}
        if len(home) > 1:
            names.setdefault(home, "~")
        self._names = names
        self._pattern = _prefix_pattern(list(names))
        escaped = {html.escape(k): html.escape(v) for k, v in names.items()}
        self._html_names = escaped
        self._html_pattern = _prefix_pattern(list(escaped))

    def json(self, v: Any) -> Any:
        if isinstance(v, str):
            return self._pattern.sub(lambda m: self._names[m.group(0)], v)
        if isinstance(v, list):
            return [self.json(x) for x in v]
        if isinstance(v, dict):
            return {k: self.json(x) for k, x in v.items()}
        return v

    def html(self, text: str) -> str:
        return self._html_pattern.sub(lambda m: self._html_names[m.group(0)], text)


_LOGIN_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Token needed · AACO dashboard</title></head>
<body style="font:14px/1.45 system-ui,sans-serif;margin:40px;color:#1d2330">
<h1>Token needed</h1><p>This AACO server was started with a token. Open
<code>/?token=...</code> once, with the token given to <code>--token</code> (or
<code>$AACO_TOKEN</code>); the browser then keeps it in a cookie.</p></body></html>
"""


def _lake_rows(lake: Path) -> list[dict[str, Any]]:
    """The lake's sessions as listing rows (``aaco ls``'s keys, and where each ran)."""
    from aaco.lake.read import lake_rows  # lazy: duckdb

    rows = []
    for r in lake_rows(lake):
        r["id"] = r.pop("session_id")
        r.pop("source_path", None)  # the API speaks ids, not paths
        r.pop("created", None)  # created_utc says it
        r["date"] = str(r["date"]) if r.get("date") is not None else None
        rows.append(r)
    return rows


def create_app(root: Path, token: str | None = None, lake: Path | None = None) -> FastAPI:
    """The app over the sessions under ``root``; ``token`` makes every route need it.
    With ``lake`` (:mod:`aaco.lake`), the listing and the history are the lake's, every
    machine's; a session's own pages still need its bundle under ``root``."""
    if lake is not None:
        from aaco.lake.layout import open_lake  # lazy: pyarrow

        open_lake(lake, create=False)
    as_given = Path(os.path.abspath(root))
    root = root.resolve()
    if token is not None and not token:
        raise UsageError("the API token must not be empty")
    scrub = _Scrub([root, as_given])

    def rows_of(root: Path) -> list[dict[str, Any]]:
        return _rows(root) if lake is None else _lake_rows(lake)

    def history_of(model: str | None, backend: str | None, tag: str | None) -> list[dict[str, Any]]:
        """History groups of the root's sessions, or the lake's (every machine's)."""
        if lake is None:
            groups = build_history(root, model=model, backend=backend, tag=tag)
        else:
            from aaco.lake.read import history_rows  # lazy: duckdb

            groups = history_from_rows(history_rows(lake), model=model, backend=backend, tag=tag)
        return groups

    # documents the bearer token in the schema; the middleware below enforces it
    bearer = HTTPBearer(
        auto_error=False,
        scheme_name=SECURITY_SCHEME,
        description="the token the server was started with (--token or $AACO_TOKEN)",
    )
    app = FastAPI(
        title="AACO API",
        version=__version__,
        description="Sessions, reports, tables, diffs and history of an AACO sessions root. "
        'Errors are `{"detail": "one line"}` without server paths.',
        docs_url=None,  # Swagger UI would load from a CDN; the schema is at /openapi.json
        redoc_url=None,
        dependencies=[Security(bearer)],
    )
    plain_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain_openapi()
            if token is None:  # no token configured: the scheme is declared but optional
                for ops in schema["paths"].values():
                    for op in ops.values():
                        if "security" in op:
                            op["security"] = [{}, *op["security"]]
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]

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
                headers = {"WWW-Authenticate": "Bearer"}
                if "text/html" in request.headers.get("accept", ""):
                    # a browser without the cookie: say how to log in, not a bare JSON body
                    return HTMLResponse(_LOGIN_PAGE, status_code=401, headers=headers)
                return JSONResponse(
                    {"detail": "missing or wrong bearer token"}, status_code=401, headers=headers
                )
        response: Response = await call_next(request)
        return response

    @app.exception_handler(AacoError)
    @app.exception_handler(pa.ArrowException)
    @app.exception_handler(OSError)
    async def _damaged(request: Request, exc: Exception) -> JSONResponse:
        # Session reads its files lazily: a damaged table or JSON file surfaces here
        return JSONResponse({"detail": _detail(exc, root)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors():
            loc = list(e.get("loc", ()))
            if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
                loc = loc[1:]  # where a field came from is clear from the field
            where = ".".join(str(x) for x in loc)
            parts.append(f"{where}: {e.get('msg', 'invalid')}" if where else str(e.get("msg")))
        return JSONResponse({"detail": "; ".join(parts) or "invalid request"}, status_code=422)

    # -- API --------------------------------------------------------------------------------
    @app.get("/sessions", tags=["sessions"], responses=_responses(401, 422))
    def sessions(
        model: str | None = None,
        backend: str | None = None,
        tag: str | None = None,
        status: str | None = None,
        since: str | None = Query(None, description="created_utc >= this ISO date/date-time"),
        until: str | None = Query(
            None, description="created_utc <= this ISO date-time (a date: that whole day)"
        ),
        offset: int = Query(0, ge=0),
        limit: int = Query(100, ge=1, le=MAX_LIMIT),
    ) -> dict[str, Any]:
        """Sessions under the root, newest first, filtered; paged with offset/limit."""
        rows = _filter(rows_of(root), model, backend, tag, status, since, until)
        rows.reverse()
        return {
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "items": rows[offset : offset + limit],
        }

    @app.get("/sessions/{session_id}", tags=["sessions"], responses=_responses(*_ALL))
    def session(session_id: SessionId) -> dict[str, Any]:
        """A session's metadata (session.json) and headline numbers."""
        s = _find(root, session_id)
        row = session_row(s)
        row.pop("path", None)
        out: dict[str, Any] = scrub.json({"summary": row, "meta": s.meta})
        out["tables"] = sorted(_tables_of(s))
        return out

    @app.get("/sessions/{session_id}/report.json", tags=["reports"], responses=_responses(*_ALL))
    def report_json(session_id: SessionId) -> dict[str, Any]:
        report = build_report(_find(root, session_id))
        report["session"].pop("path", None)
        out: dict[str, Any] = scrub.json(report)
        return out

    @app.get(
        "/sessions/{session_id}/report.html",
        tags=["reports"],
        response_class=HTMLResponse,
        responses=_responses(*_ALL),
    )
    def report_html(session_id: SessionId) -> HTMLResponse:
        page = get_renderer_class("html")().render(_find(root, session_id))
        return HTMLResponse(scrub.html(page))

    @app.get(
        "/sessions/{session_id}/tables/{name}",
        tags=["tables"],
        responses={
            200: {
                "description": "a page of rows: JSON, or Parquet with `format=parquet` (the "
                "total row count in `X-Total-Count`)",
                "content": {PARQUET: {"schema": {"type": "string", "format": "binary"}}},
            },
            **_responses(*_ALL),
        },
    )
    def table(
        session_id: SessionId,
        name: TableName,
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
                buf.getvalue(), media_type=PARQUET, headers={"X-Total-Count": str(t.num_rows)}
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

    @app.post("/diff", tags=["regression"], responses=_responses(*_ALL))
    def diff(body: DiffRequest) -> dict[str, Any]:
        """Compare sessions (ids, `latest`, or a saved baseline name for ``baseline``); nothing
        is written."""

        def ids(v: str | list[str]) -> list[str]:
            return [v] if isinstance(v, str) else v

        base: list[Session] = []
        name = None
        for b in ids(body.baseline):
            if is_baseline_name(b) and baseline_file(root, b).is_file():
                runs = baseline_sessions(root, load_baseline(root, b))
                # resolved paths: a record or a symlink must not lead outside the root
                if not _inside(baseline_file(root, b), root) or not all(
                    _inside(r.path, root) for r in runs
                ):
                    raise HTTPException(
                        status_code=422, detail=f"baseline {b!r} points outside the sessions root"
                    )
                base += runs
                name = b
            else:
                base.append(_find(root, b))
        news = [_find(root, x) for x in ids(body.session)]
        result = diff_sessions(
            base,
            news,
            threshold=body.threshold,
            gates=body.gates,
            point=body.point,
            baseline_name=name,
            sessions_root=root,
            check_contention=not body.allow_contention,
        )
        result["baseline_ref"].pop("session_path", None)
        out: dict[str, Any] = scrub.json(result)
        return out

    @app.get("/history", tags=["regression"], responses=_responses(401, 422))
    def history(
        model: str | None = None, backend: str | None = None, tag: str | None = None
    ) -> list[dict[str, Any]]:
        """Sessions of each configuration over time with their change points."""
        groups = history_of(model, backend, tag)
        for g in groups:
            for r in g["sessions"]:
                r.pop("path", None)
        out: list[dict[str, Any]] = scrub.json(groups)
        return out

    @app.get("/baselines", tags=["regression"], responses=_responses(401, 422))
    def baselines() -> list[dict[str, Any]]:
        out = list_baselines(root)
        for b in out:
            b.pop("session_path", None)
            for r in b.get("runs") or []:
                r.pop("session_path", None)
        scrubbed: list[dict[str, Any]] = scrub.json(out)
        return scrubbed

    # -- dashboard --------------------------------------------------------------------------
    pages.mount(app, root, rows_of, _filter, _find, _detail, history_of)
    return app


def _parse_when(value: object, end: bool = False) -> datetime | None:
    """An ISO date or date-time as an aware datetime (naive means UTC), None when it is not
    one. A date alone is its first instant, or with ``end`` its last, so ``until=<date>``
    takes in that whole day."""
    if not isinstance(value, str):
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        day = None
    if day is not None:
        first = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        return first + timedelta(days=1, microseconds=-1) if end else first
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _bound(value: str | None, name: str, end: bool = False) -> datetime | None:
    if not value:
        return None
    when = _parse_when(value, end)
    if when is None:
        raise HTTPException(
            status_code=422, detail=f"{name}: not an ISO date or date-time: {value[:40]!r}"
        )
    return when


def _filter(
    rows: list[dict[str, Any]],
    model: str | None,
    backend: str | None,
    tag: str | None,
    status: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> list[dict[str, Any]]:
    first, last = _bound(since, "since"), _bound(until, "until", end=True)
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
        if first or last:
            # compared as instants: "2026-11-25T10:00+02:00" is before "2026-11-25T09:00Z"
            created = _parse_when(r.get("created_utc"))
            if created is None or (first and created < first) or (last and created > last):
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
