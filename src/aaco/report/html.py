"""The HTML renderer: one self-contained file (inline CSS, inline SVG charts, a few lines of
inline script), readable offline, every untrusted string escaped.

The page is built from the same report model as the JSON and terminal reports
(:func:`aaco.report.model.build_report`) plus the bundle's tables for the charts. Each
section appears only when its data exists; otherwise one line says what is missing.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import jinja2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from markupsafe import Markup

from aaco import __version__
from aaco.analysis.names import OpNames
from aaco.analysis.ops import op_aggregates
from aaco.errors import BundleError
from aaco.report import svg
from aaco.report.base import Renderer
from aaco.report.model import build_report, ceilings_lines, report_ops, session_op_names
from aaco.session.bundle import Session
from aaco.session.calibration import BACKEND_OF_PROVIDER
from aaco.session.paths import DIFF_FILE, ROOFLINE_FILE

TOP_BARS = 15
TIMELINE_X = "s since the first iteration"
TELEMETRY_X = "s since the first telemetry sample"
ICICLE_OPS = 12
ICICLE_KERNELS = 4


def _env() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(
        lambda name: resources.files("aaco.report").joinpath("templates").joinpath(name).read_text()
    )
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["ms"] = _ms
    env.filters["pct"] = lambda v, d=1: "unknown" if v is None else f"{v:.{d}f} %"
    env.filters["num"] = lambda v, d=3: "unknown" if v is None else f"{v:.{d}g}"
    return env


def _ms(v: float | None) -> str:
    if v is None:
        return "unknown"
    return f"{v:.1f}" if v >= 100 else f"{v:.3f}" if v >= 1 else f"{v:.4f}"


def _top_with_other(items: list[tuple[str, float, str]], n: int) -> list[tuple[str, float, str]]:
    items = sorted(items, key=lambda t: -t[1])
    if len(items) <= n:
        return items
    rest = items[n:]
    other = sum(v for _, v, _ in rest)
    return [*items[:n], (f"other ({len(rest)})", other, "")]


def _iterations(session: Session) -> dict[str, Any] | None:
    iters = session.iters()
    if iters is None or iters.num_rows == 0:
        return None
    t = iters.sort_by([("start_ns", "ascending")])
    phase = t.column("phase").to_pylist()
    start = t.column("start_ns").to_numpy().astype(np.float64)
    lat = t.column("latency_ns").to_numpy().astype(np.float64) / 1e6
    measured = [i for i, p in enumerate(phase) if p == "measured"]
    warm = [i for i, p in enumerate(phase) if p == "warmup"]
    t0 = float(start[0])
    xs = ((start - t0) / 1e9).tolist()
    shade = []
    if warm:
        shade.append((xs[warm[0]], xs[warm[-1]] + lat[warm[-1]] / 1e3, "warmup"))
    return {
        "t0_ns": t0,
        "xs": xs,
        "lat": lat.tolist(),
        "measured": [float(lat[i]) for i in measured],
        "shade": shade,
        "x_range": (0.0, max(xs[-1] + lat[-1] / 1e3, 1e-6)),
    }


def _telemetry_series(
    ev: pa.Table, t0_ns: float, x_range: tuple[float, float]
) -> tuple[list[tuple[str, str, list[float], list[float]]], int]:
    """(name, unit, xs, ys) of each telemetry series within ``x_range`` (seconds since
    ``t0_ns``), and how many samples lie in that range.

    Samples are cut to the range before the "two points" check: a series with two samples in
    the bundle but one during the iterations would be a one-point chart with empty axes.
    """
    ts = (ev.column("ts_ns").to_numpy().astype(np.float64) - t0_ns) / 1e9
    inside = ((ts >= x_range[0]) & (ts <= x_range[1])).tolist()
    times = ts.tolist()
    out: list[tuple[str, str, list[float], list[float]]] = []
    for col, name, unit in (
        ("proc_cpu_pct", "process CPU", "%"),
        ("sys_cpu_pct", "system CPU", "%"),
        ("cpu_freq_mhz", "CPU clock", "MHz"),
        ("load_1m", "1-min load", ""),
    ):
        if col not in ev.column_names:
            continue
        vals = ev.column(col).to_pylist()
        pairs = [
            (x, float(v))
            for x, v, k in zip(times, vals, inside, strict=True)
            if k and v is not None
        ]
        if len(pairs) >= 2:
            out.append((name, unit, [p[0] for p in pairs], [p[1] for p in pairs]))
    if {"proc_ctx_involuntary", "proc_ctx_voluntary"} <= set(ev.column_names):
        inv = ev.column("proc_ctx_involuntary").to_pylist()
        vol = ev.column("proc_ctx_voluntary").to_pylist()
        rate_x, rate_y = [], []
        # the rate between two samples belongs to the later one, whose predecessor may lie
        # before the range: differences over all samples, then the cut
        for i in range(1, len(times)):
            parts = [inv[i], inv[i - 1], vol[i], vol[i - 1]]
            if not inside[i] or None in parts or times[i] <= times[i - 1]:
                continue
            d = (inv[i] - inv[i - 1]) + (vol[i] - vol[i - 1])
            rate_x.append(times[i])
            rate_y.append(d / (times[i] - times[i - 1]))
        if len(rate_x) >= 2:
            out.append(("context switches", "/s", rate_x, rate_y))
    return out, sum(inside)


def _gpu_backend(meta: dict[str, Any]) -> bool:
    """Whether the run executed on a GPU: an ORT GPU execution provider, or torch on a
    device other than the CPU."""
    backend = meta.get("backend") or {}
    provider = str(backend.get("provider") or "")
    if backend.get("name") == "torch":
        return provider not in ("", "cpu")
    return BACKEND_OF_PROVIDER.get(provider) not in (None, "cpu")


def _timeline(session: Session, it: dict[str, Any] | None) -> tuple[list[Markup], list[str]]:
    """The unified timeline's charts (latency and telemetry on one time axis, sharing the
    crosshair and the zoom) and one line for each thing it cannot show, true to the case."""
    charts: list[Markup] = []
    notes: list[str] = []
    if it is not None:
        charts.append(Markup(_latency_chart("timeline-latency", it, "timeline")))
    ev = session.system_events()
    if ev is None or not ev.num_rows:
        run = session.meta.get("run") or {}
        notes.append(
            "Telemetry: off for this run (--no-telemetry)"
            if run.get("telemetry") is False
            else "Telemetry: no samples in this bundle"
        )
    else:
        if it is not None:
            t0, x_range, x_unit, shade = it["t0_ns"], it["x_range"], TIMELINE_X, it["shade"]
        else:
            # no iterations to align with (a failed or timed-out run): the samples alone
            ts = ev.column("ts_ns").to_numpy().astype(np.float64)
            t0, x_unit, shade = float(ts.min()), TELEMETRY_X, []
            x_range = (0.0, max((float(ts.max()) - t0) / 1e9, 1e-6))
        series, n = _telemetry_series(ev, t0, x_range)
        for name, unit, xs, ys in series:
            charts.append(
                Markup(
                    svg.line_chart(
                        f"telemetry-{name.replace(' ', '-')}",
                        [(name, xs, ys)],
                        x_unit,
                        unit,
                        name,
                        shade=shade,
                        x_range=x_range,
                        height=140,
                        align="timeline",
                    )
                )
            )
        span = f"{x_range[1] - x_range[0]:.3g} s"
        if n < 2:
            where = (
                f"during the {span} of iterations"
                if it is not None
                else "in the bundle (no timed iterations)"
            )
            notes.append(
                f"Telemetry: only {n} sample(s) {where}; run longer (--duration) or sample "
                "faster (--sample-hz)"
            )
        elif not series:
            notes.append(f"Telemetry: {n} samples in the {span} shown, none with two values")
    if _gpu_backend(session.meta):
        # AACO's sampler reads the CPU and the worker process (psutil, /proc) only
        notes.append("GPU utilization, clocks and power: not sampled in this bundle")
    return charts, notes


def _latency_chart(chart_id: str, it: dict[str, Any], align: str) -> str:
    return svg.line_chart(
        chart_id,
        [("latency", it["xs"], it["lat"])],
        TIMELINE_X,
        "ms",
        "latency per iteration",
        shade=it["shade"],
        x_range=it["x_range"],
        align=align,
    )


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _regression(diff: Any) -> dict[str, Any]:
    """The regression section's fields from ``regress/diff.json``, checked: a ValueError
    names the first field that is not what the page shows (the file may be hand-edited,
    truncated or from another version, and must not crash the report)."""
    if not isinstance(diff, dict):
        raise ValueError("not a JSON object")
    v = diff.get("verdict")
    if not isinstance(v, dict):
        raise ValueError("verdict is not an object")
    if not isinstance(diff.get("summary"), str):
        raise ValueError("summary is not a string")
    if not isinstance(v.get("verdict"), str):
        raise ValueError("verdict.verdict is not a string")
    if not _num(v.get("margin_pct")):
        raise ValueError("verdict.margin_pct is not a number")
    for key in ("median_delta_pct", "welch_p_value"):
        if v.get(key) is not None and not _num(v[key]):
            raise ValueError(f"verdict.{key} is not a number")
    base = v.get("baseline")
    if not isinstance(base, dict):
        raise ValueError("verdict.baseline is not an object")
    causes = v.get("candidate_causes") or []
    if not isinstance(causes, list) or not all(isinstance(c, dict) for c in causes):
        raise ValueError("verdict.candidate_causes is not a list of objects")
    warnings = v.get("warnings") or []
    if not isinstance(warnings, list):
        raise ValueError("verdict.warnings is not a list")
    if v.get("recommendation") is not None and not isinstance(v["recommendation"], str):
        raise ValueError("verdict.recommendation is not a string")
    evidence = diff.get("evidence") or {}
    ops = evidence.get("operators") if isinstance(evidence, dict) else None
    movers = (ops.get("top_movers") if isinstance(ops, dict) else None) or []
    if not isinstance(movers, list) or not all(
        isinstance(m, dict)
        and _num(m.get("delta_ms"))
        and all(m.get(k) is None or _num(m[k]) for k in ("baseline_ms", "session_ms"))
        for m in movers
    ):
        raise ValueError("evidence.operators.top_movers is not a list of operator deltas")
    return {
        "verdict": v["verdict"],
        "summary": diff["summary"],
        "baseline": str(base.get("name") or base.get("session_id") or "unknown"),
        "margin_pct": float(v["margin_pct"]),
        "median_delta_pct": v.get("median_delta_pct"),
        "welch_p_value": v.get("welch_p_value"),
        "causes": [(str(c.get("cause")), str(c.get("detail"))) for c in causes],
        "warnings": [str(w) for w in warnings],
        "recommendation": v.get("recommendation"),
        "movers": [
            {
                "name": str(m.get("name")),
                # movers of diffs written before labels existed are named as profiled
                "label": str(m.get("label") or m.get("name")),
                "status": str(m.get("status")),
                "baseline_ms": m.get("baseline_ms"),
                "session_ms": m.get("session_ms"),
                "delta_ms": float(m["delta_ms"]),
            }
            for m in movers
        ],
    }


def _icicle(session: Session, report: dict[str, Any], names: OpNames) -> dict[str, Any] | None:
    """model -> op type -> op -> kernel (kernels only when attributed); operators named by
    their original ONNX node (``node``: the profiled name, on hover)."""
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return None
    rows = op_aggregates(report_ops(ops), "node_name").to_pylist()
    kmap = session.table("op_kernel_map")
    kernels_by_op: dict[str, list[dict[str, Any]]] = {}
    iterations = report.get("op_iterations") or 1
    if kmap is not None and kmap.num_rows:
        attributed = kmap.filter(pc.is_valid(kmap.column("op_name")))
        g = attributed.group_by(["op_name", "kernel_name"]).aggregate([("dur_ns", "sum")])
        for r in g.to_pylist():
            kernels_by_op.setdefault(r["op_name"], []).append(
                {"name": r["kernel_name"], "value": r["dur_ns_sum"] / 1e6 / iterations}
            )
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_type.setdefault(r["op_type"], []).append(r)
    children = []
    for op_type, members in sorted(
        by_type.items(), key=lambda kv: -sum(m["ns_per_iter"] for m in kv[1])
    ):
        members.sort(key=lambda m: -m["ns_per_iter"])
        op_nodes = []
        for m in members[:ICICLE_OPS]:
            ks = sorted(kernels_by_op.get(m["node_name"], []), key=lambda k: -k["value"])
            op_nodes.append(
                {
                    "name": names.label(m["node_name"]),
                    "node": m["node_name"],
                    "value": m["ns_per_iter"] / 1e6,
                    "children": ks[:ICICLE_KERNELS],
                }
            )
        rest = sum(m["ns_per_iter"] for m in members[ICICLE_OPS:]) / 1e6
        if rest > 0:
            op_nodes.append({"name": f"{len(members) - ICICLE_OPS} more", "value": rest})
        children.append(
            {
                "name": op_type,
                "value": sum(m["ns_per_iter"] for m in members) / 1e6,
                "children": op_nodes,
            }
        )
    total = sum(c["value"] for c in children)
    return {"name": report["model"]["name"] or "model", "value": total, "children": children}


def _flatten(prefix: str, obj: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        for i, v in enumerate(obj):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out.append((prefix, "unknown" if obj is None else str(obj)))


def build_context(session: Session) -> dict[str, Any]:
    """Everything the template shows; charts are pre-rendered (escaped) SVG markup."""
    r = build_report(session)
    names = session_op_names(session)
    charts: dict[str, Markup] = {}
    captions: dict[str, str] = {}
    missing: dict[str, str] = {}
    it = _iterations(session)
    if it and it["measured"]:
        charts["latency_hist"] = Markup(
            svg.histogram("latency-hist", it["measured"], "ms", "latency histogram")
        )
        _, hi = svg.histogram_range(it["measured"])
        over = [v for v in it["measured"] if v > hi]
        if over:
            captions["latency_hist"] = (
                f"{len(over)} of {len(it['measured'])} iteration(s) beyond the range, "
                f"above {svg.fmt(hi)} ms (up to {svg.fmt(max(over))} ms): the red bar "
                "on the right"
            )
        charts["latency_timeline"] = Markup(_latency_chart("latency-timeline", it, "latency"))
    else:
        missing["latency"] = "no timed iterations in this bundle"
    all_ops = _all_ops(session)
    ops = [
        (
            o["name"],
            o["ms_per_iter"],
            f" ({o['op_type']}, {o['pct']:.1f} % of operator time, {o['calls']} calls)",
        )
        for o in all_ops
    ]
    if ops:
        bars = _top_with_other(ops, TOP_BARS)
        charts["ops"] = Markup(
            svg.hbar_chart(
                "ops-bars",
                # ranked by profiled name (unique), shown by the original ONNX node
                [(names.label(n), v, d) if d else (n, v, d) for n, v, d in bars],
                "ms/iter",
                "operators by time",
                nodes=[n if d else None for n, _, d in bars],
            )
        )
    else:
        missing["ops"] = "no operator profile (run without --no-profile, or import a trace)"
    kernels = [
        (
            k["short_name"] or k["name"],
            k["total_ms"],
            f" ({k['calls']} calls, avg {k['avg_us']:.1f} us; {k['name']})",
        )
        for k in r["top_kernels"]
    ]
    if kernels:
        charts["kernels"] = Markup(
            svg.hbar_chart("kernel-bars", kernels, "ms", "kernels by total time")
        )
        fams = [(k["family"], k["total_ms"], f" ({k['pct']:.1f} %)") for k in r["kernel_families"]]
        charts["families"] = Markup(
            svg.hbar_chart("family-bars", fams, "ms", "kernel families by total time")
        )
    else:
        missing["kernels"] = "no GPU kernel trace (aaco run --profile kernels, or aaco import)"
    tree = _icicle(session, r, names)
    if tree and tree["value"] > 0:
        charts["icicle"] = Markup(svg.icicle("icicle", tree, "ms/iter", "model, op, kernel time"))
    roof = r.get("roofline_summary") or {}
    points = [
        {**p, "label": names.label(str(p.get("name")))}
        if isinstance(p, dict) and p.get("level", "node") == "node" and "label" not in p
        else p
        for p in (session.json_file(ROOFLINE_FILE) or {}).get("points") or []
    ]
    ceil = roof.get("ceilings") or {}
    flops = ceil.get("flops_per_s")
    flops = flops if isinstance(flops, dict) else {}
    # the float32 roof, as in the terminal report (an int8 roof would flatter float ops)
    peak_f = flops.get("float32", max(flops.values(), default=None))
    levels = [
        (str(lv.get("name")), float(lv["bytes_per_s"]))
        for lv in ceil.get("memory_levels") or []
        if isinstance(lv, dict) and lv.get("bytes_per_s") and lv.get("name") != "DRAM"
    ]
    chart = svg.roofline(
        "roofline-chart", points, peak_f, ceil.get("bytes_per_s"), "roofline", levels
    )
    if chart:
        charts["roofline"] = Markup(chart)
    else:
        missing["roofline"] = "no operator with known work and time (cost model or profile)"
    timeline, timeline_notes = _timeline(session, it)
    regression: dict[str, Any] | None = None
    try:
        diff = session.json_file(DIFF_FILE)
        regression = None if diff is None else _regression(diff)
    except (BundleError, ValueError) as exc:
        missing["regression"] = f"{DIFF_FILE} is malformed ({exc})"
    env = session.env
    env_rows: list[tuple[str, str]] = []
    if env:
        _flatten("", env, env_rows)
    derived = r.get("metrics") or {}
    lat_src = r["summary"].get("latency_ms") or {}
    lat = {k: lat_src.get(k) for k in ("mean", "std", "p50", "p90", "p99", "count")}
    ceilings_head, ceilings_notes = ceilings_lines(r.get("roofline_summary"))
    return {
        "r": r,
        "ceilings_head": ceilings_head,
        "ceilings_notes": ceilings_notes,
        "lat": lat,
        "charts": charts,
        "captions": captions,
        "timeline": timeline,
        "timeline_notes": timeline_notes,
        "missing": missing,
        "regression": regression,
        "env_rows": env_rows,
        "derived": derived,
        "device": _device(session),
        "aaco_version": __version__,
    }


def _all_ops(session: Session) -> list[dict[str, Any]]:
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return []
    rows = op_aggregates(report_ops(ops), "node_name").to_pylist()
    return [
        {
            "name": o["node_name"],
            "op_type": o["op_type"],
            "ms_per_iter": o["ns_per_iter"] / 1e6,
            "pct": o["pct"],
            "calls": o["calls"],
        }
        for o in rows
    ]


def _device(session: Session) -> str:
    env = session.env or {}
    gpus = (env.get("gpus") or {}).get("devices") or []
    backend = (session.meta.get("backend") or {}).get("name")
    if backend not in (None, "cpu") and gpus:
        return str(gpus[0].get("name") or gpus[0])
    return str((env.get("cpu") or {}).get("model") or "unknown")


class HtmlRenderer(Renderer):
    name = "html"
    output_file_extension = ".html"

    def render(self, session: Session) -> str:
        return _env().get_template("report.html.j2").render(**build_context(session))
