"""Dashboard pages: sessions with filters, a session's report, two sessions compared, and a
configuration's history with its change points. Server-rendered, escaped, offline."""

from __future__ import annotations

import math
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from aaco import __version__
from aaco.errors import AacoError
from aaco.report import svg

_ENV = jinja2.Environment(
    loader=jinja2.FunctionLoader(
        lambda name: resources.files("aaco.web").joinpath("templates").joinpath(name).read_text()
    ),
    autoescape=True,
)


def _fmt(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "unknown" if v is None else str(v)
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:.3f}" if abs(v) >= 1 else f"{v:.4g}"


def _page(name: str, title: str, **ctx: Any) -> HTMLResponse:
    html = _ENV.get_template(name).render(title=title, version=__version__, fmt=_fmt, **ctx)
    return HTMLResponse(html)


def history_chart(chart_id: str, group: dict[str, Any]) -> str:
    """p50 and p99 per session (x = session index) with change points as dashed lines."""
    rows = group["sessions"]
    xs = [float(i) for i in range(len(rows))]
    series = [("p50 ms", xs, [float(r["p50_ms"]) for r in rows])]
    p99 = [r.get("p99_ms") for r in rows]
    if all(isinstance(v, (int, float)) for v in p99):
        series.append(("p99 ms", xs, [float(v) for v in p99]))  # type: ignore[arg-type]
    chart = svg.line_chart(
        chart_id, series, "session #", "ms", "history", x_range=(0.0, max(1.0, xs[-1]))
    )
    if not chart or not group["change_points"]:
        return chart
    # change points: the chart's x axis spans 60 .. 750 px over (0, n - 1)
    span = max(1.0, xs[-1])
    marks = "".join(
        f'<line class="cp" x1="{60 + c["index"] / span * 690:.1f}" y1="10" '
        f'x2="{60 + c["index"] / span * 690:.1f}" y2="170"><title>change point '
        f"({svg._e(c['metric'])}) at #{c['index']}: {c['magnitude_pct']:+.1f} %</title></line>"
        for c in group["change_points"]
    )
    return chart.replace("</svg>", marks + "</svg>")


def mount(
    app: FastAPI,
    root: Path,
    rows_of: Callable[[Path], list[dict[str, Any]]],
    filter_rows: Callable[..., list[dict[str, Any]]],
    find: Callable[[Path, str], Any],
    detail: Callable[[object, Path], str],
) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(
        model: str | None = None,
        backend: str | None = None,
        tag: str | None = None,
        since: str | None = None,
    ) -> HTMLResponse:
        rows = rows_of(root)
        choices = {
            k: sorted({str(r[k]) for r in rows if r.get(k) is not None})
            for k in ("model", "backend", "tag")
        }
        shown = filter_rows(rows, model or None, backend or None, tag or None, None, since or None)
        shown.reverse()
        filters = {"model": model, "backend": backend, "tag": tag, "since": since}
        return _page(
            "sessions.html.j2",
            "Sessions",
            rows=shown,
            total=len(rows),
            choices=choices,
            filters=filters,
        )

    @app.get("/ui/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare(baseline: str, session: str) -> HTMLResponse:
        from aaco.regress.diff import diff_sessions
        from aaco.session.catalog import session_row

        a, b = find(root, baseline), find(root, session)
        try:
            diff = diff_sessions(a, b, allow_model_change=True)
        except AacoError as exc:
            error = detail(exc, root)
            return _page("compare.html.j2", "Compare", error=error, diff=None, a=None, b=None)
        return _page(
            "compare.html.j2",
            "Compare",
            error=None,
            diff=diff,
            a=session_row(a),
            b=session_row(b),
        )

    @app.get("/ui/history", response_class=HTMLResponse, include_in_schema=False)
    def history(model: str | None = None, backend: str | None = None) -> HTMLResponse:
        from aaco.regress.history import history as build

        groups = build(root, model=model or None, backend=backend or None)
        charts = [Markup(history_chart(f"history-{i}", g)) for i, g in enumerate(groups)]
        return _page(
            "history.html.j2", "History", groups=groups, charts=charts, model=model, backend=backend
        )
