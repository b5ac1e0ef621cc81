"""The terminal renderer: header, latency, top operators with share bars, telemetry, warnings;
for a serving benchmark, its load points (latency, throughput, tokens), server and client; for
an in-process generation (``aaco llm run``), also its prefill and decode side by side."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from aaco.report.att import format_att
from aaco.report.base import Renderer
from aaco.report.critical_path import critical_path_rows
from aaco.report.generation import (
    TextTable,
    generation_header,
    inflation_note,
    op_type_table,
    phase_table,
    split_line,
)
from aaco.report.machine import (
    Row,
    capsule_rows,
    contention,
    gpu_rows,
    sched_rows,
    top_threads_table,
)
from aaco.report.model import build_report, ceilings_lines
from aaco.report.serving import (
    PointTable,
    fmt_count,
    fmt_short,
    health_note,
    load_description,
    point_tables,
    server_line,
    sweep_line,
    telemetry_line,
)
from aaco.report.text import fmt_bytes, fmt_ms, render_text
from aaco.session.bundle import Session

BAR_WIDTH = 16


#: width from which operator tables add a column with ORT's own node name
ORT_NAME_WIDTH = 150


def clip(name: str, limit: int) -> str:
    """At most ``limit`` characters, the middle elided: node names differ at both ends (layer
    path, ORT's ``_output_0_nchwc`` suffix), and the ``+N fused`` suffix must stay."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "…" + name[len(name) - (limit - 1 - head) :]


def _label(row: dict[str, Any], key: str = "name") -> str:
    """A row's label (original ONNX node, docs/metrics.md "Operator names"); its name in
    reports written before labels existed."""
    return str(row.get("label") or row.get(key) or "?")


def _ort_column(rows: list[dict[str, Any]], width: int, key: str = "name") -> bool:
    """Whether a table gets the "ORT name" column: some row is renamed and the width allows."""
    return width >= ORT_NAME_WIDTH and any(_label(x, key) != x.get(key) for x in rows)


def bar(pct: float, width: int = BAR_WIDTH) -> str:
    filled = pct / 100 * width
    full = int(filled)
    half = "▌" if filled - full >= 0.5 and full < width else ""
    return "█" * full + half


def _header(r: dict[str, Any]) -> Panel:
    m, b, s = r["model"], r["backend"], r["session"]
    status = r["status"]
    style = "green" if status == "completed" else "bold red"
    lines = Text()
    lines.append("model    ", style="dim")
    lines.append(f"{m['name']}")
    if m.get("parameter_count") is not None:
        lines.append(
            f"  ({m['parameter_count'] / 1e6:.2f} M params, {m.get('node_count')} nodes)",
            style="dim",
        )
    lines.append("\nbackend  ", style="dim")
    active = b.get("providers_active") or []
    lines.append(f"{b['name']} ({b['provider']})" if b.get("provider") else f"{b['name']}")
    if active and active[0] != b["provider"]:
        lines.append(f"  active: {', '.join(active)}", style="yellow")
    lines.append("\nbatch    ", style="dim")
    lines.append(str(b.get("batch") if b.get("batch") is not None else "unknown"))
    lines.append("\nsession  ", style="dim")
    lines.append(f"{s['id']}  ")
    lines.append(status, style=style)
    if s.get("tag"):
        lines.append(f"  tag: {s['tag']}", style="dim")
    if s.get("error"):
        lines.append(f"\nerror    {s['error'].get('message')}", style="red")
    return Panel(lines, title="AACO session", title_align="left", expand=False)


def _latency(r: dict[str, Any]) -> Table | Text:
    summ = r["summary"]
    lat = summ.get("latency_ms")
    if not lat:
        return Text("latency: unknown (no measured iterations)", style="yellow")
    t = Table(
        title="Latency (ms), measured phase", title_justify="left", show_edge=False, pad_edge=False
    )
    for col in ("n", "mean", "std", "min", "p50", "p90", "p95", "p99", "max", "CoV"):
        t.add_column(col, justify="right")
    cov = lat.get("cov")
    t.add_row(
        str(lat["count"]),
        fmt_ms(lat["mean"]),
        fmt_ms(lat["std"]),
        fmt_ms(lat["min"]),
        fmt_ms(lat["p50"]),
        fmt_ms(lat["p90"]),
        fmt_ms(lat["p95"]),
        fmt_ms(lat["p99"]),
        fmt_ms(lat["max"]),
        "unknown" if cov is None else f"{cov:.1%}",
    )
    return t


def _throughput_line(r: dict[str, Any]) -> Text:
    summ = r["summary"]
    txt = Text()
    if summ.get("throughput") is not None:
        txt.append(f"throughput {summ['throughput']:.1f} items/s", style="bold")
        txt.append(f" (batch {summ['batch']}, {summ['iterations_per_s']:.1f} it/s)")
    elif summ.get("iterations_per_s") is not None:
        txt.append(f"throughput {summ['iterations_per_s']:.1f} iterations/s", style="bold")
        txt.append(" (batch unknown: items/s not computed)", style="dim")
    w = summ.get("warmup")
    if w:
        txt.append(f"\nwarmup     {w['count']} it, first {fmt_ms(w['first_iteration_ms'])} ms")
        if w.get("effect_pct") is not None:
            txt.append(f", mean {w['effect_pct']:+.1f}% vs measured")
    return txt


def _top_ops(r: dict[str, Any], width: int) -> Table | Text:
    top = r["top_ops"]
    prof = r["summary"].get("profile")
    if not top:
        if (r.get("requested") or {}).get("profile") == "imported":
            why = "none in this trace"
        elif (r.get("requested") or {}).get("profile") is False and str(
            (r.get("backend") or {}).get("name") or ""
        ).endswith("tracer"):
            # aaco profile: the tracer that ran recorded no framework operators
            why = "none recorded by this tracer (aaco profile --tracer torch for PyTorch ops)"
        elif (r.get("requested") or {}).get("profile") is False:
            why = "not requested (run without --no-profile to see where the time went)"
        else:
            why = "the profiled pass recorded no operator executions (see warnings)"
        return Text(f"operators: {why}", style="dim")
    n_iter = (prof.get("profiled_iterations") if prof else None) or r.get("op_iterations")
    where = "profiled pass" if prof else "trace, top-level ops"
    t = Table(
        title=f"Top operators ({where}, {n_iter or 'unknown'} iterations)",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    ort = _ort_column(top, width)
    t.add_column("node (original ONNX name)", no_wrap=True)
    if ort:
        t.add_column("ORT name", no_wrap=True)
    t.add_column("op type")
    t.add_column("ms/iter", justify="right")
    t.add_column("share", justify="right")
    t.add_column("", no_wrap=True)
    t.add_column("calls/it", justify="right")
    # Bars are scaled to the largest share so that flat profiles (50 convs at 2 % each)
    # still show their shape.
    top_pct = max((op["pct"] for op in top), default=0.0) or 1.0
    for op in top:
        calls = op["calls"] / n_iter if n_iter else op["calls"]
        t.add_row(
            escape(clip(_label(op), 52)),
            *([escape(clip(op["name"], 40))] if ort else []),
            escape(op["op_type"] or "?"),
            fmt_ms(op["ms_per_iter"]),
            f"{op['pct']:.1f}%",
            Text(bar(op["pct"] / top_pct * 100), style="cyan"),
            f"{calls:g}",
        )
    return t


def _op_types(r: dict[str, Any]) -> Text:
    types = r["top_op_types"][:8]
    if not types:
        return Text("")
    parts = [f"{escape(t['op_type'] or '?')} {t['pct']:.0f}%" for t in types]
    return Text("by op type: " + ", ".join(parts), style="dim")


def _coverage(r: dict[str, Any]) -> Text:
    prof = r["summary"].get("profile")
    if not prof or prof.get("coverage") is None:
        return Text("")
    same = prof.get("coverage_same_pass")
    txt = f"operator time {fmt_ms(prof.get('node_ms_per_iter_p50'))} ms/iter (median)"
    if same is not None:
        txt += f" = {same:.0%} of the profiled pass's latency,"
    txt += f" {prof['coverage']:.0%} of the measured p50"
    return Text(txt)


def _telemetry(r: dict[str, Any]) -> Text:
    tel = r.get("telemetry")
    if not tel and (r.get("requested") or {}).get("profile") == "imported":
        return Text("telemetry: none (imported trace)", style="dim")
    if not tel:
        if (r.get("requested") or {}).get("telemetry") is False:
            return Text("telemetry: not requested (run without --no-telemetry)", style="dim")
        return Text("telemetry: no samples were recorded", style="dim")

    def num(v: float | None, fmt: str, unit: str) -> str:
        return "unknown" if v is None else format(v, fmt) + unit

    scope = "measured phase" if tel.get("scope") == "window" else "whole run"
    return Text(
        f"telemetry  worker CPU {num(tel.get('proc_cpu_pct_mean'), '.0f', '%')}, "
        f"system CPU {num(tel.get('sys_cpu_pct_mean'), '.0f', '%')}, "
        f"ctx switches {num(tel.get('ctx_switches_per_s'), '.0f', '/s')}, "
        f"major faults {num(tel.get('major_faults_per_s'), '.1f', '/s')}, "
        f"CPU freq {num(tel.get('cpu_freq_mhz_mean'), '.0f', ' MHz')} "
        f"({tel.get('samples')} samples, {scope})"
    )


def _memory(r: dict[str, Any]) -> Text:
    """Peak RSS of the worker and of aaco itself, each named after its process."""
    worker = r.get("worker") or {}
    tel = r.get("telemetry") or {}
    parent = (r.get("aaco_process") or {}).get("max_rss_bytes")
    # Bundles written before max_rss_source existed hold wait4's ru_maxrss, which may be the
    # parent's peak (see aaco.runners.rss): only the sampled maximum is the worker's there.
    own = worker.get("max_rss_bytes") if "max_rss_source" in worker else None
    sampled = tel.get("proc_rss_peak_bytes")
    if own is not None:
        txt = f"memory     worker peak RSS {fmt_bytes(own)}"
    elif sampled is not None:
        txt = f"memory     worker peak RSS {fmt_bytes(sampled)} (sampled)"
    elif not worker and parent is None:
        return Text("")
    else:
        txt = "memory     worker peak RSS unknown"
    if parent is not None:
        txt += f", aaco (parent) peak RSS {fmt_bytes(parent)}"
    return Text(txt)


def _us(ns: float | None) -> str:
    return "unknown" if ns is None else f"{ns / 1e3:.1f} µs"


def _pct(v: float | None, scale: float = 1.0) -> str:
    return "unknown" if v is None else f"{v * scale:.1f}%"


def _kernel_metrics(r: dict[str, Any]) -> Text:
    m = r.get("metrics")
    if not m:
        return Text("")
    per = m.get("kernels_per_iteration") or {}
    txt = Text()
    txt.append("GPU kernels ", style="bold")
    txt.append(f"{m.get('kernel_count', 0):,} kernels")
    if per.get("iterations"):
        cv = per.get("cv")
        txt.append(
            f", {per['mean']:.1f}/iteration over {per['iterations']} iterations"
            + (f" (cv {cv * 100:.1f}%)" if cv is not None else "")
        )
    txt.append(f"\nGPU active {_pct(m.get('gpu_active_ratio'), 100)}")
    kar = m.get("kar")
    txt.append(f", KAR {'unknown' if kar is None else format(kar, '.2f')} kernels/graph node")
    txt.append(f", microkernels {_pct(m.get('microkernel_pct'))}")
    rate = m.get("launch_rate_per_s")
    txt.append(f", launch rate {'unknown' if rate is None else format(rate, ',.0f') + '/s'}")
    tax = m.get("launch_tax_score")
    txt.append(f", launch tax {'unknown' if tax is None else format(tax, '.2f')}")
    return txt


def _gpu_time(r: dict[str, Any]) -> Text:
    txt = Text()
    for row in r.get("temporal_breakdown") or []:
        dev = "?" if row.get("device") is None else row["device"]
        txt.append(
            f"GPU {dev} time  compute {_pct(row.get('compute_pct'))}, "
            f"non-compute {_pct(row.get('non_compute_pct'))}, idle {_pct(row.get('idle_pct'))} "
            f"of {fmt_ms((row.get('total_ns') or 0) / 1e6)} ms\n"
        )
    hta = (r.get("temporal_breakdown_hta") or [None])[0]
    ours = r.get("temporal_breakdown") or []
    if hta and hta.get("total_ns") and ours:
        # HTA's own figure when it differs from ours (rounding to µs, pooled devices, its
        # name rule): the number a user comparing with HTA will see there
        gap = max(
            abs((hta.get(f"{k}_pct") or 0.0) - (ours[0].get(f"{k}_pct") or 0.0))
            for k in ("idle", "compute", "non_compute")
        )
        if len(ours) > 1 or gap >= 0.01:
            txt.append(
                f"HTA's figure  compute {_pct(hta.get('compute_pct'))}, "
                f"non-compute {_pct(hta.get('non_compute_pct'))}, "
                f"idle {_pct(hta.get('idle_pct'))} of {fmt_ms(hta['total_ns'] / 1e6)} ms"
                f"{' (rounded to µs as HTA does)' if hta.get('rounded_to_us') else ''}\n"
            )
    idle = r.get("idle_breakdown") or []
    total = sum(x.get("idle_ns") or 0 for x in idle)
    if total:
        parts = [
            f"{label} {sum(x.get(k) or 0 for x in idle) / total:.0%}"
            for label, k in (
                ("host wait", "host_wait_ns"),
                ("kernel wait", "kernel_wait_ns"),
                ("other", "other_ns"),
            )
        ]
        txt.append(f"idle causes {', '.join(parts)} ({len(idle)} streams)\n")
    ls = r.get("launch_stats")
    if ls and ls.get("matched"):
        d, c = ls.get("launch_delay_ns") or {}, ls.get("cpu_launch_ns") or {}
        short = ls.get("short_kernels") or {}
        txt.append(
            f"launches    delay p50 {_us(d.get('p50'))} p95 {_us(d.get('p95'))}, "
            f"CPU launch p50 {_us(c.get('p50'))}, short kernels {_pct(short.get('share'), 100)} "
            f"(GPU time < launch time), {ls['matched']:,} launches matched\n"
        )
    att = r.get("attribution")
    if att and att.get("kernels"):
        methods = ", ".join(
            f"{name} {v['kernels']:,}" for name, v in (att.get("by_method") or {}).items()
        )
        txt.append(
            f"attribution {_pct(att.get('kernels_attributed_fraction'), 100)} of kernels "
            f"({_pct(att.get('gpu_time_attributed_share'), 100)} of GPU time) tied to an "
            f"operator" + (f": {methods}" if methods else "")
        )
    return txt


def _top_kernels(r: dict[str, Any]) -> Table | Text:
    top = r.get("top_kernels") or []
    if not top:
        return Text("")
    t = Table(title="Top kernels", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("kernel", no_wrap=True, max_width=60)
    t.add_column("family", no_wrap=True, min_width=13)
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    t.add_column("", no_wrap=True)
    t.add_column("calls", justify="right")
    t.add_column("avg µs", justify="right")
    top_pct = max((k["pct"] for k in top), default=0.0) or 1.0
    for k in top:
        name = k.get("short_name") or k["name"]
        if len(name) > 50:
            name = name[:49] + "…"
        t.add_row(
            escape(name),
            escape(k.get("family") or "?"),
            fmt_ms(k["total_ms"]),
            f"{k['pct']:.1f}%",
            Text(bar(k["pct"] / top_pct * 100), style="magenta"),
            f"{k['calls']:,}",
            f"{k['avg_us']:.1f}",
        )
    return t


def _families(r: dict[str, Any]) -> Text:
    fams = r.get("kernel_families") or []
    if not fams:
        return Text("")
    return Text(
        "by family: " + ", ".join(f"{f['family']} {f['pct']:.0f}%" for f in fams[:10]),
        style="dim",
    )


def _op_kernels(r: dict[str, Any], width: int) -> Table | Text:
    groups = r.get("top_op_kernels") or []
    if not groups:
        return Text("")
    t = Table(
        title="Operators by GPU time (kernels attributed to them)",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    ort = _ort_column(groups, width, "op_name")
    t.add_column("operator", no_wrap=True)
    if ort:
        t.add_column("ORT name", no_wrap=True)
    t.add_column("calls", justify="right")
    t.add_column("kernels/call", justify="right")
    t.add_column("GPU ms", justify="right")
    t.add_column("CPU ms", justify="right")
    t.add_column("launch ms", justify="right")
    t.add_column("top kernel", no_wrap=True)
    for g in groups:
        top = g.get("top_kernel") or ""
        kpc = g.get("kernels_per_call")
        ranged = g["op_calls"] == 0  # a marker range, not an operator row: no calls/CPU time
        t.add_row(
            escape(clip(_label(g, "op_name"), 40)),
            *([escape(clip(g["op_name"] or "?", 40))] if ort else []),
            "-" if ranged else f"{g['op_calls']:,}",
            "unknown" if kpc is None else f"{kpc:.1f}",
            fmt_ms(g["gpu_ms"]),
            "-" if ranged else fmt_ms(g["cpu_ms"]),
            fmt_ms(g["launch_overhead_ms"]),
            escape(top if len(top) <= 40 else top[:39] + "…"),
        )
    return t


def _rows(rows: list[Row]) -> Table:
    """Label and text side by side; a long text wraps under itself, not under the label."""
    t = Table.grid(padding=(0, 1))
    t.add_column(no_wrap=True, min_width=10)
    t.add_column()
    for i, row in enumerate(rows):
        t.add_row(
            Text(row.label, style="bold" if i == 0 else ""),
            Text(row.text, style="yellow" if row.warn else ""),
        )
    return t


def _machine_parts(r: dict[str, Any]) -> list[RenderableType]:
    """The GPU, the scheduler and the measurement capsule, each only when the bundle has
    it; a quiet scheduler is one line, a contended one adds its most-waiting threads."""
    parts: list[RenderableType] = []
    gpu = gpu_rows(r.get("gpu"))
    if gpu:
        parts.append(_rows(gpu))
    sched = r.get("sched")
    if isinstance(sched, dict):
        evidence = contention(sched)
        parts.append(_rows(sched_rows(sched, evidence)))
        threads = top_threads_table(sched) if evidence is not None else None
        if threads is not None:
            parts.append(_text_grid(threads))
    cp = critical_path_rows(r.get("critical_path"))
    if cp:
        parts.append(_rows(cp))
    if isinstance(r.get("att"), dict):
        parts.append(Text("\n".join(format_att(r["att"]))))
    capsule = capsule_rows(r.get("capsule"))
    if capsule:
        parts.append(_rows(capsule))
    return parts


def _warnings(r: dict[str, Any]) -> Text:
    txt = Text()
    for w in r["warnings"]:
        txt.append("warning: ", style="bold yellow")
        txt.append(w + "\n")
    return txt


def _kernel_parts(r: dict[str, Any], width: int) -> list[RenderableType]:
    if not r.get("metrics") and not r.get("top_kernels"):
        return []
    if not (r.get("metrics") or {}).get("kernel_count"):
        return [Text("GPU kernels: none in this trace", style="dim"), Text("")]
    return [
        _kernel_metrics(r),
        _gpu_time(r),
        _top_kernels(r),
        _families(r),
        Text(""),
        _op_kernels(r, width),
        Text(""),
    ]


def _num(v: Any, fmt: str = "{:.3g}") -> str:
    if v is None:
        return "unknown"
    if isinstance(v, (int, float)):
        return fmt.format(v)
    if isinstance(v, list):
        return ", ".join(str(x) for x in v[:5])
    return str(v)


def _bottleneck(r: dict[str, Any]) -> list[RenderableType]:
    b = r.get("bottleneck")
    if not b:
        return []
    cls = b.get("bottleneck_class") or "unknown"
    conf = b.get("confidence")
    head = Text("Bottleneck: ", style="bold")
    head.append(cls, style="bold red" if cls not in ("unknown", "balanced") else "bold")
    head.append(f"  (confidence {conf:.2f})" if conf is not None else "  (no confidence)")
    if b.get("explanation"):
        head.append(f"\n  {b['explanation']}")
    out: list[RenderableType] = [head]
    lines = Text()
    for e in (b.get("top_evidence") or [])[:4]:
        lines.append(
            f"  evidence  {e['signal']} = {_num(e.get('value'))} {e.get('unit') or ''}".rstrip()
            + f" ({e.get('comparison', '>=')} {_num(e.get('threshold'))}, weight "
            f"{e.get('weight')}, {e.get('source')})\n"
        )
    sec = b.get("secondary") or []
    if sec:
        lines.append("  secondary " + ", ".join(f"{x['class']} {x['score']:.2f}" for x in sec))
        lines.append("\n")
    missing = b.get("missing_evidence") or []
    if missing:
        shown = "; ".join(f"{m['signal']} ({m['reason']})" for m in missing[:4])
        more = f" +{len(missing) - 4} more" if len(missing) > 4 else ""
        lines.append(f"  missing   {shown}{more}", style="dim")
    out.append(lines)
    return out


def _roofline(r: dict[str, Any], width: int) -> list[RenderableType]:
    summ = r.get("roofline_summary") or {}
    rows = [x for x in r.get("roofline") or [] if x.get("level") == "node"][:8]
    if not summ and not rows:
        return []
    head, notes = ceilings_lines(summ)
    if head:
        line = Text(f"Roofline ceilings: {head}")
    elif notes and notes[0].startswith("no ceilings"):
        line, notes = Text(f"Roofline: {notes[0]}", style="yellow"), notes[1:]
    else:
        line = Text("Roofline: no ceilings (run `aaco calibrate` on this machine)", style="dim")
    parts: list[RenderableType] = [line]
    for note in notes:
        warn = "above the" in note or note.startswith(("no ceilings", "GPU time"))
        parts.append(Text(f"  {note}", style="yellow" if warn else "dim"))
    if summ:
        # bundles analysed before time_share_no_work existed have no such key
        no_work = (
            f"no work (dispatch, metadata, control flow) "
            f"{_pct(summ.get('time_share_no_work'), 100)}, "
            if "time_share_no_work" in summ
            else ""
        )
        parts.append(
            Text(
                f"operator time: memory-bound {_pct(summ.get('time_share_memory_bound'), 100)}, "
                f"compute-bound {_pct(summ.get('time_share_compute_bound'), 100)}, {no_work}"
                f"unknown {_pct(summ.get('time_share_unknown'), 100)}; time-weighted efficiency "
                f"{_pct(summ.get('weighted_efficiency'), 100)}"
            )
        )
    if rows:
        t = Table(show_edge=False, pad_edge=False)
        ort = _ort_column(rows, width)
        for col, just in (("node", "left"), *([("ORT name", "left")] if ort else []),
                          ("op type", "left"), ("ms/iter", "right"),
                          ("share", "right"), ("FLOP/B", "right"), ("GFLOP/s", "right"),
                          ("GB/s", "right"), ("bound", "left"), ("eff.", "right")):  # fmt: skip
            cap = 40 if col in ("node", "ORT name") else None
            t.add_column(col, justify=just, no_wrap=True, max_width=cap)  # type: ignore[arg-type]
        for x in rows:
            af, ab = x.get("achieved_flops_per_s"), x.get("achieved_bytes_per_s")
            t.add_row(
                escape(clip(_label(x), 40)),
                *([escape(clip(str(x["name"]), 40))] if ort else []),
                escape(str(x.get("op_type") or "")),
                fmt_ms(x["time_ns"] / 1e6 if x.get("time_ns") is not None else None),
                _pct(x.get("time_share"), 100),
                _num(x.get("intensity"), "{:.2f}"),
                _num(af / 1e9 if af else None, "{:.1f}"),
                _num(ab / 1e9 if ab else None, "{:.1f}"),
                x.get("bound") or "?",
                _pct(x.get("efficiency"), 100),
            )
        parts.append(t)
    return parts


def _recommendations(r: dict[str, Any]) -> list[RenderableType]:
    recs = r.get("recommendations") or []
    if not recs:
        return []
    out = Text("What to fix first\n", style="bold")
    for x in recs[:6]:
        kind = {"upper_bound": "up to ", "first_request": "first request: "}.get(
            x.get("gain_kind") or "", ""
        )
        out.append(f"{x['rank']:>2}. {x['class']:<18} ", style="bold")
        out.append(f"gain {kind}{fmt_ms(x.get('gain_ms'))} ms ({x.get('gain_pct', 0):.1f}%)")
        conf = x.get("confidence")  # None: the classifier has no confidence for the class
        out.append(f", confidence {conf:.2f}\n" if conf is not None else ", confidence unknown\n")
        targets = "; ".join(str(v) for v in x.get("target") or [])
        out.append(f"    target: {escape(targets)}\n", style="dim")
        out.append(f"    {escape(x.get('action') or '')}\n")
    return [out]


def _diagnosis_parts(r: dict[str, Any], width: int) -> list[RenderableType]:
    parts = [*_bottleneck(r), *_roofline(r, width), *_recommendations(r)]
    return [*parts, Text("")] if parts else []


def render_report(report: dict[str, Any], width: int = 110, color: bool = False) -> str:
    """Render a report model to terminal text (ANSI styles only when ``color``)."""
    if report.get("serving") is not None:
        return render_text(Group(*_serving_parts(report, width)), width, color)
    parts = [
        _header(report),
        _latency(report),
        _throughput_line(report),
        Text(""),
        _top_ops(report, width),
        _op_types(report),
        _coverage(report),
        Text(""),
        *_kernel_parts(report, width),
        *_diagnosis_parts(report, width),
        _telemetry(report),
        _memory(report),
        *_machine_parts(report),
        _warnings(report),
    ]
    return render_text(Group(*parts), width, color)


class TerminalRenderer(Renderer):
    name = "terminal"
    output_file_extension = ".txt"

    def __init__(self, width: int = 110, color: bool = False) -> None:
        self.width = width
        self.color = color

    def render(self, session: Session) -> str:
        # once per session, width and colour: the bundle's copy (110 columns, no colour) is
        # also what ``aaco import`` prints off a terminal
        return session.memo(
            f"render:terminal:{self.width}:{self.color}",
            lambda: render_report(build_report(session), width=self.width, color=self.color),
        )


# -- serving benchmarks (kind "serving": aaco llm bench, aaco llm run) -------------------------


def _serving_header(r: dict[str, Any]) -> Panel:
    s, cfg = r["session"], r["serving"]["config"]
    status = r["status"]
    lines = Text()

    def row(key: str, value: str, first: bool = False) -> None:
        lines.append(("" if first else "\n") + f"{key:<10}", style="dim")
        lines.append(value)

    gen = r.get("generation")
    if gen is not None:
        # no server and no client: what ran, where, and how much
        name = cfg.get("model") or r["model"]["name"]
        head = generation_header(gen, r["backend"].get("provider"), name)
        for i, (key, value) in enumerate(head):
            row(key, value, first=i == 0)
    else:
        row("model", str(cfg.get("model") or r["model"]["name"] or "unknown"), first=True)
        url = cfg.get("url")
        where = f"{url} (endpoint {cfg.get('endpoint') or 'unknown'})" if url else "in-process"
        row("server", where)
        if cfg.get("launch"):
            lines.append(f"  launched: {cfg['launch']}", style="dim")
        row("load", load_description(cfg.get("load")))
    sweep = cfg.get("sweep")
    if isinstance(sweep, dict) and sweep.get("values"):
        row("sweep", f"{sweep.get('parameter')} = {', '.join(map(fmt_count, sweep['values']))}")
    prompts = cfg.get("prompts")
    if isinstance(prompts, dict):
        sized = f", sized with {prompts['sized_with']}" if prompts.get("sized_with") else ""
        row(
            "prompts",
            f"{prompts.get('source') or 'unknown'}, {prompts.get('input_tokens', '?')} tokens "
            f"in, {prompts.get('output_tokens', '?')} out{sized}",
        )
    slo = cfg.get("slo_ms")
    if isinstance(slo, dict) and slo:
        row("SLOs", ", ".join(f"{k} <= {fmt_short(v)} ms" for k, v in slo.items()))
    row("session", f"{s['id']}  ")
    lines.append(status, style="green" if status == "completed" else "bold red")
    if s.get("tag"):
        lines.append(f"  tag: {s['tag']}", style="dim")
    if s.get("error"):
        lines.append(f"\nerror     {s['error'].get('message')}", style="red")
    title = "AACO in-process generation" if gen is not None else "AACO serving benchmark"
    return Panel(lines, title=title, title_align="left", expand=False)


def _grid(table: PointTable) -> Table:
    """A per-point table: the load point's name left, the figures right."""
    t = Table(title=table.title, title_justify="left", show_edge=False, pad_edge=False)
    for i, h in enumerate(table.headers):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in table.rows:
        t.add_row(*(escape(c) for c in row))
    return t


def _text_grid(table: TextTable) -> Table:
    t = Table(title=table.title, title_justify="left", show_edge=False, pad_edge=False)
    for h, numeric in zip(table.headers, table.numeric, strict=True):
        t.add_column(h, justify="right" if numeric else "left", no_wrap=True)
    for row in table.rows:
        t.add_row(*(escape(c) for c in row))
    return t


def _generation_parts(r: dict[str, Any]) -> list[RenderableType]:
    """Prefill vs decode: each phase's time per run, then its top operator types side by
    side; a line instead of the operators when there is no split."""
    gen = r.get("generation")
    if gen is None:
        return []
    parts: list[RenderableType] = []
    if gen["phases"]:
        parts += [_text_grid(phase_table(gen, r["serving"]["points"])), Text("")]
    ops = op_type_table(gen)
    if ops is not None:
        parts += [_text_grid(ops)]
    line = Text("operators  ", style="bold")
    line.append(split_line(gen), style="" if ops is not None else "yellow")
    parts.append(line)
    note = inflation_note(gen) if ops is not None else None
    if note is not None:
        parts.append(Text(f"note: {note}", style="dim"))
    return [*parts, Text("")]


def _serving_parts(r: dict[str, Any], width: int) -> list[RenderableType]:
    sv = r["serving"]
    parts: list[RenderableType] = [_serving_header(r)]
    tables = point_tables(sv)
    if not tables:
        parts.append(Text("serving: no load point was measured", style="yellow"))
    for t in tables:
        parts += [_grid(t), Text("")]
        sweep = sweep_line(sv)
        if t.key == "throughput" and sweep is not None:
            line = Text("sweep      ", style="bold")
            line.append(escape(sweep))
            parts += [line, Text("")]
    parts += _generation_parts(r)
    parts.append(Text(f"server     {escape(server_line(sv))}"))
    note = health_note(sv)
    if note is not None:
        parts.append(Text(f"client     {note}"))
    requested = (r.get("requested") or {}).get("telemetry")
    parts.append(Text(f"telemetry  {telemetry_line(r.get('telemetry'), requested)}"))
    if r.get("top_ops"):
        parts += [Text(""), _top_ops(r, width), _op_types(r)]
    parts += [Text(""), _warnings(r)]
    return parts
