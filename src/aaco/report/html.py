"""The HTML renderer: one self-contained file (inline CSS, inline SVG charts, a few lines of
inline script), readable offline, every untrusted string escaped.

The page is built from the same report model as the JSON and terminal reports
(:func:`aaco.report.model.build_report`) plus the bundle's tables for the charts. Each
section appears only when its data exists; otherwise one line says what is missing. A serving
benchmark (``kind: "serving"``) gets its own page (``serving.html.j2``, same style and script):
its load points, the sweep's throughput-latency curve, the latency distributions and one bar
per request on a timeline shared with requests in flight, the server's queue and telemetry;
an in-process generation (``aaco llm run``) adds its prefill and decode side by side, with
each phase's operator-type shares as stacked bars.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from importlib import resources
from typing import Any

import jinja2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from markupsafe import Markup

from aaco import __version__
from aaco.analysis.names import OpNames
from aaco.errors import BundleError
from aaco.report import svg
from aaco.report.att import format_att
from aaco.report.base import Renderer
from aaco.report.critical_path import critical_path_rows
from aaco.report.generation import (
    generation_header,
    inflation_note,
    op_type_table,
    phase_share_bars,
    phase_table,
    split_line,
)
from aaco.report.machine import (
    Row,
    capsule_rows,
    column_series,
    contention,
    gpu_rows,
    sched_rows,
    throttle_periods,
    top_threads_table,
    used_devices,
    worker_wait_series,
)
from aaco.report.model import (
    build_report,
    ceilings_lines,
    ranked_op_aggregates,
    session_op_names,
)
from aaco.report.regress import banner_warnings
from aaco.report.serving import (
    RequestSpan,
    fmt_short,
    health_note,
    in_flight,
    is_serving,
    itl_samples,
    load_description,
    measured_values,
    point_tables,
    point_windows,
    request_spans,
    server_line,
    server_series,
    sweep_line,
    telemetry_line,
)
from aaco.session.bundle import Session
from aaco.session.calibration import BACKEND_OF_PROVIDER
from aaco.session.paths import DIFF_FILE, ROOFLINE_FILE

TOP_BARS = 15
TIMELINE_X = "s since the first iteration"
TELEMETRY_X = "s since the first telemetry sample"
ICICLE_OPS = 12
ICICLE_KERNELS = 4


@functools.cache
def _env() -> jinja2.Environment:
    """One environment per process: its compiled templates are kept between renders (``aaco
    ab`` and ``aaco run --repeat`` render a report per run)."""
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
    machine = {name: session.table(name) for name in MACHINE_TABLES}
    if it is not None:
        t0, x_range, x_unit, shade = it["t0_ns"], it["x_range"], TIMELINE_X, it["shade"]
    else:
        # no iterations to align with (a failed or timed-out run): the samples alone
        t0, x_range = _samples_axis([ev, *machine.values()])
        x_unit, shade = TELEMETRY_X, []
    if ev is None or not ev.num_rows:
        run = session.meta.get("run") or {}
        notes.append(
            "Telemetry: off for this run (--no-telemetry)"
            if run.get("telemetry") is False
            else "Telemetry: no samples in this bundle"
        )
    else:
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
    gpu = machine["gpu_telemetry"]
    more, more_notes = _machine_charts(machine, t0, x_range, x_unit)
    charts += more
    notes += more_notes
    if _gpu_backend(session.meta) and (gpu is None or not gpu.num_rows):
        # no GPU collector ran (an older AACO, or no NVML / amdsmi on the machine)
        notes.append("GPU utilization, clocks and power: not sampled in this bundle")
    return charts, notes


#: the machine's telemetry tables drawn on the timeline
MACHINE_TABLES = ("gpu_telemetry", "sched_threads", "sched_system")


def _samples_axis(tables: list[pa.Table | None]) -> tuple[float, tuple[float, float]]:
    """Time origin (ns) and x range (s) spanning every sample of ``tables``."""
    stamps = [
        t.column("ts_ns").to_numpy().astype(np.float64)
        for t in tables
        if t is not None and t.num_rows
    ]
    if not stamps:
        return 0.0, (0.0, 1e-6)
    lo = min(float(ts.min()) for ts in stamps)
    hi = max(float(ts.max()) for ts in stamps)
    return lo, (0.0, max((hi - lo) / 1e9, 1e-6))


def _machine_charts(
    tables: dict[str, pa.Table | None], t0: float, x_range: tuple[float, float], x_unit: str
) -> tuple[list[Markup], list[str]]:
    """The GPU tracks (per device the worker used: SM clock against its maximum, power
    against its limit, utilisation; throttled periods shaded) and the scheduler track (the
    worker's run-queue wait and the other tasks' CPU on its CPUs), on the timeline's axis."""
    charts: list[Markup] = []
    notes: list[str] = []

    def inside(samples: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
        pts = [((t - t0) / 1e9, v) for t, v in samples]
        pts = [(x, v) for x, v in pts if x_range[0] <= x <= x_range[1]]
        return [x for x, _ in pts], [v for _, v in pts]

    def add(
        chart_id: str,
        lines: list[tuple[str, list[tuple[int, float]]]],
        unit: str,
        label: str,
        shade: list[tuple[float, float, str]],
    ) -> bool:
        drawn = [(name, *inside(samples)) for name, samples in lines]
        drawn = [d for d in drawn if len(d[1]) >= 2]
        if not drawn:
            return False
        chart = svg.line_chart(
            chart_id, drawn, x_unit, unit, label, shade=shade, x_range=x_range, height=140,
            align="timeline",
        )  # fmt: skip
        if chart:
            charts.append(Markup(chart))
        return bool(chart)

    gpu = tables["gpu_telemetry"]
    if gpu is not None and gpu.num_rows:
        devices = used_devices(gpu)
        if not devices:
            notes.append("GPU telemetry: no sampled device held the worker's context")
        throttled = False
        for dev, t in devices.items():
            bands = [
                ((a - t0) / 1e9, (b - t0) / 1e9, f"GPU {dev} clocks throttled: {why}")
                for a, b, why in throttle_periods(t)
            ]
            throttled = throttled or bool(bands)
            power = column_series(t, "power_w") or column_series(t, "power_avg_w")
            drew = [
                add(
                    f"timeline-gpu{dev}-sm-clock",
                    [
                        (f"GPU {dev} SM clock", column_series(t, "sm_clock_mhz")),
                        (f"GPU {dev} SM clock max", column_series(t, "sm_clock_max_mhz")),
                    ],
                    "MHz",
                    f"GPU {dev} SM clock",
                    bands,
                ),
                add(
                    f"timeline-gpu{dev}-power",
                    [
                        (f"GPU {dev} power", power),
                        (f"GPU {dev} power limit", column_series(t, "power_limit_w")),
                    ],
                    "W",
                    f"GPU {dev} power",
                    bands,
                ),
                add(
                    f"timeline-gpu{dev}-util",
                    [
                        (f"GPU {dev} busy", column_series(t, "util_gpu_pct")),
                        (f"GPU {dev} memory busy", column_series(t, "util_mem_pct")),
                    ],
                    "%",
                    f"GPU {dev} utilisation",
                    bands,
                ),
            ]
            if not any(drew):
                notes.append(f"GPU {dev}: fewer than two samples with values in the time shown")
        if throttled:
            notes.append(
                "GPU charts: shaded where the GPU's clocks were throttled (hover a band for "
                "the reasons)"
            )
    threads, system = tables["sched_threads"], tables["sched_system"]
    if (threads is not None and threads.num_rows) or (system is not None and system.num_rows):
        drew_sched = add(
            "timeline-sched",
            [
                ("worker run-queue wait", worker_wait_series(threads)),
                ("other tasks on the worker's CPUs", column_series(system, "other_cpu_pct")),
            ],
            "% of one CPU",
            "scheduler: worker run-queue wait and other tasks' CPU",
            [],
        )
        if not drew_sched:
            notes.append("Scheduler: fewer than two samples in the time shown")
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
    # runs on different machines: a banner under the verdict, not one warning among many
    banner, others = banner_warnings(warnings)
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
        "banner": banner,
        "warnings": others,
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


def _op_rows(session: Session) -> list[dict[str, Any]]:
    """Per-operator aggregates of the ranked rows, computed once per loaded session."""

    def make() -> list[dict[str, Any]]:
        aggregates = ranked_op_aggregates(session)
        return [] if aggregates is None else aggregates.to_pylist()

    rows: list[dict[str, Any]] = session.memo("html_op_rows", make)
    return copy.deepcopy(rows)


def _icicle(session: Session, report: dict[str, Any], names: OpNames) -> dict[str, Any] | None:
    """model -> op type -> op -> kernel (kernels only when attributed); operators named by
    their original ONNX node (``node``: the profiled name, on hover)."""
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return None
    rows = _op_rows(session)
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
        "machine": _machine_context(r),
        "aaco_version": __version__,
    }


def _att_rows(att: Any) -> list[Row]:
    """The ATT instruction summary's lines as rows (same text as the terminal report)."""
    if not isinstance(att, dict):
        return []
    lines = format_att(att)
    return [Row(lines[0], "")] + [Row("  ", ln.strip()) for ln in lines[1:]]


def _machine_context(r: dict[str, Any]) -> dict[str, Any] | None:
    """The "GPU and scheduler" section: the same rows as the terminal report, and the
    most-waiting threads of a contended run; None when the bundle has none of it."""
    sched = r.get("sched")
    evidence = contention(sched) if isinstance(sched, dict) else None
    sections = [
        (title, rows)
        for title, rows in (
            ("GPU", gpu_rows(r.get("gpu"))),
            ("Scheduler", sched_rows(sched, evidence) if isinstance(sched, dict) else []),
            ("Measurement capsule", capsule_rows(r.get("capsule"))),
            ("Critical path", critical_path_rows(r.get("critical_path"))),
            ("ATT instructions", _att_rows(r.get("att"))),
        )
        if rows
    ]
    if not sections:
        return None

    def cells(rows: list[Row]) -> list[tuple[str, str, bool, bool]]:
        # (label, text, sub-row, warns)
        return [(x.label.strip(), x.text, x.label.startswith(" "), x.warn) for x in rows]

    return {
        "sections": [(title, cells(rows)) for title, rows in sections],
        "threads": top_threads_table(sched) if evidence is not None else None,
    }


def _all_ops(session: Session) -> list[dict[str, Any]]:
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return []
    rows = _op_rows(session)
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


# -- serving benchmarks (kind "serving") ----------------------------------------------------
#: requests drawn on the per-request timeline at most (evenly spaced in send order beyond)
MAX_REQUEST_BARS = 500
SERVING_X = "s since the first request"
#: the distributions drawn: (chart key, title, requests column or "itl", unit)
_DISTRIBUTIONS = (
    ("ttft", "TTFT: time to the first answer token", "ttft_ns"),
    ("tpot", "TPOT: time per output token after the first", "tpot_ns"),
    ("itl", "ITL: inter-token latency, one sample per token", "itl"),
    ("e2e", "E2E: request latency", "e2e_ns"),
)


def _point_values(session: Session, key: str, point: int) -> list[float]:
    if key == "itl":
        return itl_samples(session, point)
    return measured_values(session, key, point)


def _distributions(
    session: Session, points: list[dict[str, Any]]
) -> tuple[list[tuple[str, Markup]], list[str]]:
    """One histogram per metric for a single load point, one CDF per metric (a line per
    point) for several; and a line for each metric without values."""
    charts: list[tuple[str, Markup]] = []
    notes: list[str] = []
    for key, title, col in _DISTRIBUTIONS:
        per_point = [(p["label"], _point_values(session, col, int(p["point"]))) for p in points]
        per_point = [(name, vals) for name, vals in per_point if vals]
        if not per_point:
            notes.append(f"{title}: unknown (no request has it)")
            continue
        if len(points) == 1:
            chart = svg.histogram(f"{key}-hist", per_point[0][1], "ms", title, item="sample")
            charts.append((f"{title} (histogram)", Markup(chart)))
        else:
            series = [(name, *svg.cdf_series(vals)) for name, vals in per_point]
            chart = svg.xy_chart(
                f"{key}-cdf", series, "ms", "fraction", title, y_range=(0.0, 1.0), height=220
            )
            charts.append((f"{title} (CDF per load point)", Markup(chart)))
    return charts, notes


def _fig(point: dict[str, Any], section: str, key: str) -> float | None:
    d = point.get(section)
    v = d.get(key) if isinstance(d, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _getter(section: str, key: str) -> Callable[[dict[str, Any]], float | None]:
    """The function that reads one figure of a point (``_fig``)."""
    return lambda point: _fig(point, section, key)


Curve = tuple[tuple[str, list[float], list[float]], list[str], list[int]]


def _curve(
    points: list[dict[str, Any]],
    name: str,
    x: Callable[[dict[str, Any]], float | None],
    y: Callable[[dict[str, Any]], float | None],
    hover: str,
) -> Curve | None:
    """(series, one hover text per dot, the points' indices) over the points whose x and y
    are both known (an unknown figure is left out, not drawn as 0); None under two."""
    pts = [
        (i, xv, yv)
        for i, p in enumerate(points)
        if (xv := x(p)) is not None and (yv := y(p)) is not None
    ]
    if len(pts) < 2:
        return None
    texts = [f"{points[i]['label']}: {hover.format(x=xv, y=yv)}" for i, xv, yv in pts]
    return (name, [p[1] for p in pts], [p[2] for p in pts]), texts, [p[0] for p in pts]


def _chart(
    chart_id: str, curves: list[Curve | None], x_unit: str, y_unit: str, knee: int | None
) -> str:
    """An xy chart of ``curves``, the knee's dot of the first curve ringed."""
    drawn = [c for c in curves if c is not None]
    marks = []
    if drawn and knee is not None and knee in drawn[0][2]:
        (_, xs, ys), texts, idx = drawn[0]
        k = idx.index(knee)
        marks.append((xs[k], ys[k], "knee: " + texts[k].split(":")[0]))
    return svg.xy_chart(
        chart_id,
        [c[0] for c in drawn],
        x_unit,
        y_unit,
        chart_id.replace("-", " "),
        dots=[c[1] for c in drawn],
        marks=marks,
    )


def _sweep_charts(sv: dict[str, Any]) -> list[tuple[str, Markup]]:
    """Latency against throughput, and throughput and goodput against load, across a
    sweep; the knee ringed."""
    points = sv["points"]
    if len(points) < 2:
        return []
    sweep = sv.get("sweep") or {}
    knee = sweep.get("knee")
    k = knee.get("index") if isinstance(knee, dict) else None
    param = str(sweep.get("parameter") or (points[0].get("load") or {}).get("mode") or "load")
    tput, load = _getter("throughput", "output_tokens_per_s"), _getter("load", param)
    charts = []
    for key, name in (("ttft_ms", "TTFT"), ("e2e_ms", "E2E")):
        hover = "{x:.4g} tok/s, {y:.4g} ms"
        curves = [
            _curve(points, f"{name} {q}", tput, _getter(key, q), hover) for q in ("p50", "p99")
        ]
        charts.append(
            (
                f"{name} (ms) against output throughput (tok/s), one dot per load point",
                _chart(f"sweep-{name.lower()}", curves, "output tok/s", "ms", k),
            )
        )
    curve = _curve(points, "output tok/s", load, tput, "{y:.4g} tok/s")
    charts.append(
        (
            f"Output throughput (tok/s) against {param}",
            _chart("sweep-throughput", [curve], param, "tok/s", k),
        )
    )
    if any("goodput_requests_per_s" in (p.get("throughput") or {}) for p in points):
        curves = [
            _curve(points, name, load, _getter("throughput", key), "{y:.4g} req/s")
            for name, key in (
                ("requests/s", "requests_per_s"),
                ("goodput requests/s", "goodput_requests_per_s"),
            )
        ]
        charts.append(
            (
                f"Requests/s and goodput (requests meeting every SLO) against {param}",
                _chart("sweep-goodput", curves, param, "req/s", None),
            )
        )
    return [(title, Markup(chart)) for title, chart in charts if chart]


def _request_timeline(
    session: Session, spans: list[RequestSpan], labels: dict[int, str]
) -> tuple[Markup | None, str, float, tuple[float, float]]:
    """The per-request timeline, its caption, its time origin (ns) and x range (s)."""
    if not spans:
        return None, "", 0.0, (0.0, 1.0)
    t0 = float(min(s.start_ns for s in spans))
    ends = [s.end_ns for s in spans if s.end_ns is not None] or [s.sent_ns for s in spans]
    x_range = (0.0, max((max(ends) - t0) / 1e9, 1e-6))
    shown = spans
    caption = f"All {len(spans)} requests, in send order"
    if len(spans) > MAX_REQUEST_BARS:
        idx = sorted(
            {round(k * (len(spans) - 1) / (MAX_REQUEST_BARS - 1)) for k in range(MAX_REQUEST_BARS)}
        )
        shown = [spans[i] for i in idx]
        caption = (
            f"{len(shown)} of {len(spans)} requests drawn (evenly spaced in send order; every "
            "figure counts them all)"
        )

    def sec(ns: int | None) -> float | None:
        return None if ns is None else (ns - t0) / 1e9

    bars = []
    for s in shown:
        label = labels.get(s.point, f"point {s.point}")
        ttft = (s.first_content_ns - s.sent_ns) / 1e6 if s.first_content_ns is not None else None
        e2e = (s.end_ns - s.sent_ns) / 1e6 if s.end_ns is not None else None
        hover = (
            f"request {s.request} ({label}, {s.phase}, {s.status}): queued "
            f"{s.queued_ns / 1e6:.3f} ms, TTFT {_ms(ttft)} ms, E2E {_ms(e2e)} ms, "
            f"{s.output_tokens if s.output_tokens is not None else 'unknown'} output tokens"
            + (f"; {s.error}" if s.error else "")
        )
        bars.append(
            svg.RequestBar(
                request=s.request,
                point=s.point,
                intended=sec(s.intended_ns),
                sent=(s.sent_ns - t0) / 1e9,
                first=sec(s.first_token_ns),
                end=sec(s.end_ns),
                failed=s.status != "ok",
                warmup=s.phase != "measured",
                hover=hover,
            )
        )
    windows = point_windows(session.meta)
    bands = [
        ((a - t0) / 1e9, (b - t0) / 1e9, labels.get(i, f"point {i}"))
        for i, (a, b) in sorted(windows.items())
    ]
    chart = svg.request_timeline(
        "request-timeline", bars, x_range, SERVING_X, "one bar per request", bands
    )
    caption += (
        "; grey: queued (intended to actual send), orange: send to the first generated token, "
        "blue: decode to the end, red: failed; warmup faded; shaded bands: the load points"
    )
    return Markup(chart), caption, t0, x_range


def _steps(samples: list[tuple[int, float]], t0: float) -> tuple[list[float], list[float]]:
    """A step line through ``samples`` (ns, value): each value holds until the next one."""
    xs: list[float] = []
    ys: list[float] = []
    for t, v in samples:
        x = (t - t0) / 1e9
        if ys:
            xs.append(x)
            ys.append(ys[-1])
        xs.append(x)
        ys.append(v)
    return xs, ys


def _load_charts(
    session: Session, spans: list[RequestSpan], t0: float, x_range: tuple[float, float]
) -> tuple[list[Markup], list[str]]:
    """Requests in flight and the server's queue and KV cache, then the watched process's
    telemetry, on the timeline's time axis (shared crosshair and zoom)."""
    charts: list[Markup] = []
    notes: list[str] = []

    def add(chart_id: str, lines: list[tuple[str, list[float], list[float]]], unit: str) -> None:
        chart = svg.line_chart(
            chart_id,
            lines,
            SERVING_X,
            unit,
            lines[0][0],
            x_range=x_range,
            height=150,
            align="serving",
        )
        if chart:
            charts.append(Markup(chart))

    series = server_series(session.table("server_metrics"))
    flight = [(t, float(n)) for t, n in in_flight(spans)]
    requests = [("in flight (client)", *_steps(flight, t0))] if flight else []
    for metric, name in (("running", "running (server)"), ("waiting", "waiting (server)")):
        if series.get(metric):
            requests.append((name, *_steps(series[metric], t0)))
    if requests:
        add("serving-requests", requests, "requests")
    if series.get("kv_cache_usage"):
        kv = [(t, v * 100) for t, v in series["kv_cache_usage"]]
        add("serving-kv-cache", [("server KV-cache usage", *_steps(kv, t0))], "%")
    if not series:
        notes.append("Server metrics: none in this bundle (no /metrics, or scraping was off)")
    ev = session.system_events()
    if ev is None or not ev.num_rows:
        notes.append("Telemetry: no samples in this bundle")
        return charts, notes
    tel = session.meta.get("telemetry")
    who = str((tel if isinstance(tel, dict) else {}).get("process") or "watched")
    lines, _ = _telemetry_series(ev, t0, x_range)
    for name, unit, xs, ys in lines:
        name = name.replace("process", f"{who} process")
        add(f"telemetry-{name.replace(' ', '-')}", [(name, xs, ys)], unit)
    if not lines:
        notes.append("Telemetry: fewer than two samples during the requests")
    return charts, notes


def _cards(sv: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary cards: one load point's headline figures, or the sweep's."""
    points = sv["points"]
    ok = sum(int((p.get("requests") or {}).get("ok") or 0) for p in points)
    failed = sum(int((p.get("requests") or {}).get("failed") or 0) for p in points)
    cards = [("requests ok / failed", f"{ok} / {failed}")]
    if len(points) == 1:
        p = points[0]
        tp = p.get("throughput") or {}

        def pair(name: str) -> str:
            d = p.get(name) if isinstance(p.get(name), dict) else {}
            return f"{fmt_short(d.get('p50'))} / {fmt_short(d.get('p99'))}"

        cards += [
            ("TTFT p50 / p99 (ms)", pair("ttft_ms")),
            ("TPOT p50 / p99 (ms)", pair("tpot_ms")),
            ("ITL p50 / p99 (ms)", pair("itl_ms")),
            ("E2E p50 / p99 (ms)", pair("e2e_ms")),
            ("output (tok/s)", fmt_short(tp.get("output_tokens_per_s"))),
            ("requests/s", fmt_short(tp.get("requests_per_s"))),
        ]
        if "goodput_requests_per_s" in tp:
            cards.append(
                (
                    "goodput (req/s, good %)",
                    f"{fmt_short(tp.get('goodput_requests_per_s'))} "
                    f"({fmt_short(tp.get('good_fraction'), 100)} %)",
                )
            )
    elif points:
        best = max(
            points,
            key=lambda p: (p.get("throughput") or {}).get("output_tokens_per_s") or 0.0,
        )
        knee = (sv.get("sweep") or {}).get("knee")
        cards += [
            ("load points", str(len(points))),
            (
                "peak output (tok/s)",
                f"{fmt_short((best.get('throughput') or {}).get('output_tokens_per_s'))} "
                f"at {best['label']}",
            ),
            (
                "knee",
                points[knee["index"]]["label"]
                if isinstance(knee, dict)
                and isinstance(knee.get("index"), int)
                and 0 <= knee["index"] < len(points)
                else "none found",
            ),
        ]
    return cards


def _generation_context(r: dict[str, Any]) -> dict[str, Any] | None:
    """The "Prefill vs decode" section: the phase table, the top operator types side by
    side, each phase's op-type shares as a stacked bar, and what the split rests on."""
    gen = r.get("generation")
    if gen is None:
        return None
    chart = svg.stacked_shares(
        "phase-op-shares",
        phase_share_bars(gen),
        "share of each phase's operator time by op type",
    )
    note = inflation_note(gen) if gen["split_available"] else None
    provider = gen["model"].get("provider") or r["backend"].get("provider") or "unknown provider"
    sv_model = r["serving"]["config"].get("model") or r["model"]["name"]
    return {
        "header": generation_header(gen, provider, sv_model),
        "provider": str(provider),
        "tables": [
            t
            for t in (
                phase_table(gen, r["serving"]["points"]) if gen["phases"] else None,
                op_type_table(gen),
            )
            if t is not None
        ],
        "chart": Markup(chart) if chart else None,
        "split_line": split_line(gen),
        "split_available": gen["split_available"],
        "notes": [note] if note else [],
    }


def build_serving_context(session: Session) -> dict[str, Any]:
    """What the serving template shows; charts are pre-rendered (escaped) SVG markup."""
    r = build_report(session)
    sv = r["serving"]
    cfg = sv["config"]
    points = sv["points"]
    spans = request_spans(session)
    labels = {int(p["point"]): str(p["label"]) for p in points if isinstance(p.get("point"), int)}
    dists, dist_notes = _distributions(session, points) if points else ([], [])
    timeline, caption, t0, x_range = _request_timeline(session, spans, labels)
    load_charts, load_notes = _load_charts(session, spans, t0, x_range) if spans else ([], [])
    config_rows: list[tuple[str, str]] = []
    _flatten("", cfg, config_rows)
    env_rows: list[tuple[str, str]] = []
    if session.env:
        _flatten("", session.env, env_rows)
    requested = (r.get("requested") or {}).get("telemetry")
    generation = _generation_context(r)
    load = load_description(cfg.get("load"))
    model = str(cfg.get("model") or r["model"]["name"] or "unknown")
    if generation is not None:
        head = dict(generation["header"])
        server = f"in-process, {generation['provider']}"
        model, load = head["model"], head["load"]
    elif cfg.get("url"):
        server = f"{cfg.get('url')} (endpoint {cfg.get('endpoint') or 'unknown'})"
    else:
        server = "in-process"
    return {
        "r": r,
        "sv": sv,
        "title": "AACO generation report" if generation is not None else "AACO serving report",
        "model": model,
        "server": server,
        "generation": generation,
        "health_note": health_note(sv),
        "load": load,
        "cards": _cards(sv),
        "tables": point_tables(sv),
        "sweep_line": sweep_line(sv),
        "sweep_charts": _sweep_charts(sv),
        "distributions": dists,
        "distribution_notes": dist_notes,
        "timeline": timeline,
        "timeline_caption": caption,
        "load_charts": load_charts,
        "load_notes": load_notes,
        "server_line": server_line(sv),
        "telemetry_line": telemetry_line(r.get("telemetry"), requested),
        "config_rows": config_rows,
        "env_rows": env_rows,
        "aaco_version": __version__,
    }


class HtmlRenderer(Renderer):
    name = "html"
    output_file_extension = ".html"

    def render(self, session: Session) -> str:
        if is_serving(session):
            return _env().get_template("serving.html.j2").render(**build_serving_context(session))
        return _env().get_template("report.html.j2").render(**build_context(session))
