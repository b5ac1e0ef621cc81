"""Dashboard pages: sessions with filters, a session's report, two sessions compared, and a
configuration's history with its change points. Server-rendered, escaped, offline."""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from aaco import __version__
from aaco.errors import AacoError
from aaco.regress.diff import diff_sessions
from aaco.regress.history import SERIES
from aaco.report import svg
from aaco.session.catalog import session_row

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


_CHART_W, _CHART_H = 760, 230
_LEFT, _RIGHT, _TOP, _BOTTOM = 60, 30, 24, 32  # room for the y labels, the last x label, legend


def _nice_step(span: float, most: int) -> float:
    """The smallest of 1, 2, 5 x 10^k that cuts ``span`` into at most ``most`` steps."""
    raw = max(span, 1e-12) / most
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if m * mag >= raw)


def _tick_labels(step: float, ticks: list[float]) -> list[str]:
    # one format for the whole axis ("5" and "10", or "0.5" and "1.0"), never "5" and "10.0"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{t:.{decimals}f}" for t in ticks]


def history_chart(chart_id: str, group: dict[str, Any]) -> str:
    """Each series change points are searched on (p50, p90; p99 too when every session has
    it) per session, x = session index; a change point is marked on its own series, with
    its session, magnitude and p-value on hover."""
    rows = group["sessions"]
    if not rows:
        return ""
    columns = {**SERIES, "p99": "p99_ms"}
    series: list[tuple[str, list[float]]] = []
    for metric, column in columns.items():
        values = [r.get(column) for r in rows]
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            series.append((metric, [float(v) for v in values]))  # type: ignore[arg-type]
    if not series:
        return ""
    n = len(rows)
    x_hi = float(max(1, n - 1))
    y_hi = max(v for _, vs in series for v in vs) * 1.05 or 1.0
    x0, x1, y0, y1 = _LEFT, _CHART_W - _RIGHT, _CHART_H - _BOTTOM, _TOP

    def px(i: float) -> float:
        return x0 + i / x_hi * (x1 - x0)

    def py(v: float) -> float:
        return y0 - v / y_hi * (y0 - y1)

    e = escape
    parts = [
        f'<svg id="{e(chart_id)}" class="chart" role="img" aria-label="history" '
        f'viewBox="0 0 {_CHART_W} {_CHART_H}" width="100%" '
        'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">',
        f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}"/>',
        f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}"/>',
    ]
    x_step = max(1.0, _nice_step(x_hi, 10))  # sessions are whole numbers
    x_ticks = [float(t) * x_step for t in range(int(x_hi // x_step) + 1)]
    for t, label in zip(x_ticks, _tick_labels(x_step, x_ticks), strict=True):
        parts.append(
            f'<text class="tick" x="{px(t):.1f}" y="{y0 + 14}" text-anchor="middle">{label}</text>'
        )
    parts.append(f'<text class="unit" x="{x1}" y="{y0 + 28}" text-anchor="end">session #</text>')
    y_step = _nice_step(y_hi, 4)
    y_ticks = [t * y_step for t in range(int(y_hi / y_step + 1e-9) + 1)]
    for t, label in zip(y_ticks, _tick_labels(y_step, y_ticks), strict=True):
        parts.append(
            f'<text class="tick" x="{x0 - 4}" y="{py(t) + 4:.1f}" text-anchor="end">{label}</text>'
        )
    parts.append(f'<text class="unit" x="{x0 - 4}" y="{y1 - 8}" text-anchor="end">ms</text>')
    color = {}
    for k, (metric, values) in enumerate(series):
        c = color[metric] = svg.PALETTE[k % len(svg.PALETTE)]
        pts = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(values))
        parts.append(
            f'<g class="series" data-name="{e(metric)}"><polyline fill="none" stroke="{c}" '
            f'stroke-width="1.4" points="{pts}"><title>{e(metric)} ms</title></polyline>'
        )
        for i, v in enumerate(values):
            parts.append(
                f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="2.5" fill="{c}">'
                f"<title>#{i} {e(rows[i]['id'])}: {e(metric)} {_fmt(v)} ms</title></circle>"
            )
        parts.append("</g>")
        parts.append(
            f'<text class="legend" x="{x0 + 10 + k * 110}" y="{y1 - 8}" fill="{c}">'
            f"{e(metric)} ms</text>"
        )
    values_of = dict(series)
    for cp in group["change_points"]:
        metric, i = cp["metric"], int(cp["index"])
        if metric not in values_of or not 0 <= i < n:
            continue  # a series not drawn: its change point is still listed under the chart
        x, y = px(i), py(values_of[metric][i])
        title = (
            f"{metric} change point at #{i}, session {cp['session_id']}: "
            f"{cp['magnitude_pct']:+.1f} % (p = {cp['p_value']:.2g})"
        )
        parts.append(
            f'<g class="cp" data-metric="{e(metric)}" data-session="{e(cp["session_id"])}">'
            f"<title>{e(title)}</title>"
            f'<line x1="{x:.1f}" y1="{y1}" x2="{x:.1f}" y2="{y0}" stroke="{color[metric]}" '
            'stroke-dasharray="4 3"/>'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="none" stroke="{color[metric]}" '
            'stroke-width="2"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def preselect(rows: list[dict[str, Any]]) -> dict[str, str | None]:
    """What "compare selected" starts from (``rows`` newest first): the newest two completed
    sessions of one model, else the newest two completed ones. Failed runs cannot be
    compared, so preselecting one would only produce an error."""
    done = [r for r in rows if r.get("status") == "completed"]
    for i, newer in enumerate(done):
        older = next((r for r in done[i + 1 :] if r.get("model") == newer.get("model")), None)
        if older is not None:
            return {"session": newer["id"], "baseline": older["id"]}
    return {
        "session": done[0]["id"] if done else None,
        "baseline": done[1]["id"] if len(done) > 1 else None,
    }


def mount(
    app: FastAPI,
    root: Path,
    rows_of: Callable[[Path], list[dict[str, Any]]],
    filter_rows: Callable[..., list[dict[str, Any]]],
    find: Callable[[Path, str], Any],
    detail: Callable[[object, Path], str],
    history_of: Callable[[str | None, str | None, str | None], list[dict[str, Any]]],
) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(
        model: str | None = None,
        backend: str | None = None,
        tag: str | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> HTMLResponse:
        rows = rows_of(root)
        choices = {
            k: sorted({str(r[k]) for r in rows if r.get(k) is not None})
            for k in ("model", "backend", "tag")
        }
        shown = filter_rows(
            rows, model or None, backend or None, tag or None, None, since or None, until or None
        )
        shown.reverse()
        filters = {"model": model, "backend": backend, "tag": tag, "since": since, "until": until}
        return _page(
            "sessions.html.j2",
            "Sessions",
            rows=shown,
            total=len(rows),
            choices=choices,
            filters=filters,
            picked=preselect(shown),
        )

    @app.get("/ui/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare(baseline: str, session: str) -> HTMLResponse:
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
    def history(
        model: str | None = None, backend: str | None = None, tag: str | None = None
    ) -> HTMLResponse:
        groups = history_of(model or None, backend or None, tag or None)
        charts = [Markup(history_chart(f"history-{i}", g)) for i, g in enumerate(groups)]
        return _page(
            "history.html.j2",
            "History",
            groups=groups,
            charts=charts,
            model=model,
            backend=backend,
            tag=tag,
        )
