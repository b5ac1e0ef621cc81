"""Renderers of ``aaco diff``, ``aaco history`` and ``aaco check`` results.

Each takes the JSON-ready dictionary the regress stage produced and returns text; only the
CLI prints. Names from traces are untrusted: rich markup is escaped, Markdown table cells
have their pipes and angle brackets escaped. A diff or history group of serving sessions
(``kind: "serving"``) has renderers of its own, chosen here.
"""

from __future__ import annotations

import html
import io
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aaco.analysis.compare import DIFFERENT_MACHINES, INCONCLUSIVE, REGRESSION
from aaco.report.terminal import ORT_NAME_WIDTH
from aaco.report.text import fmt_ms


def verdict_line(diff: dict[str, Any]) -> str:
    """``REGRESSION +18.3 % [+15.1, +21.0] p50, high confidence, suspected cause: ...``;
    for serving sessions ``REGRESSION ttft p99 +30.2 % [+25.0, +36.1] at concurrency=4, ...``."""
    v = diff["verdict"]
    if v.get("kind") == "serving":
        return _serving_verdict_line(v)
    lo, hi = v["ci_pct"]
    line = (
        f"{v['verdict']} {v['latency_delta_pct']:+.1f} % [{lo:+.1f}, {hi:+.1f}] {v['metric']}, "
        f"{v['confidence_label']} confidence"
    )
    if v["verdict"] in (REGRESSION, INCONCLUSIVE):
        line += f", suspected cause: {v['suspected_cause'] or 'unknown'}"
    return line


def _serving_verdict_line(v: dict[str, Any]) -> str:
    if v["metric"] == "failed_fraction":
        f = v["failed_fraction"]
        what = (
            f"failed requests {f['baseline']:.1%} -> {f['session']:.1%} "
            f"({v['delta_pct']:+.1f} points)"
        )
    else:
        lo, hi = v["ci_pct"]
        what = f"{v['metric']} {v['delta_pct']:+.1f} % [{lo:+.1f}, {hi:+.1f}]"
    line = f"{v['verdict']} {what} at {v['point']}, {v['confidence_label']} confidence"
    if v["verdict"] in (REGRESSION, INCONCLUSIVE):
        line += f", suspected cause: {v['suspected_cause'] or 'unknown'}"
    return line


def _pct(v: float | None, digits: int = 1) -> str:
    return "unknown" if v is None else f"{v:+.{digits}f} %"


def _console(width: int, color: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return (
        Console(file=buf, width=width, color_system="standard" if color else None, highlight=False),
        buf,
    )


_STYLE = {
    "REGRESSION": "bold red",
    "IMPROVEMENT": "bold green",
    "NO CHANGE": "bold",
    "INCONCLUSIVE": "bold yellow",
}


def banner_warnings(warnings: list[Any]) -> tuple[list[str], list[str]]:
    """A diff's warnings split into the banner, shown right under the verdict line (runs
    on different machines: ``DIFFERENT MACHINES ...``), and the others, in order."""
    texts = [str(w) for w in warnings]
    banner = [w for w in texts if w.startswith(DIFFERENT_MACHINES)]
    return banner, [w for w in texts if not w.startswith(DIFFERENT_MACHINES)]


def _banner(con: Console, banner: list[str]) -> None:
    for w in banner:
        con.print(f"[bold red]!! {escape(w)}[/]")


def _md_banner(banner: list[str]) -> list[str]:
    """The banner as Markdown quotes: ``> ⚠️ **DIFFERENT MACHINES**: ...``."""
    out = []
    for w in banner:
        head, sep, rest = w.partition(":")
        out += [f"> ⚠️ **{_md(head)}**{sep}{_md(rest)}", ""]
    return out


def render_diff_terminal(diff: dict[str, Any], width: int = 110, color: bool = False) -> str:
    """The terminal rendering of a diff: the verdict line first, then the banner of runs on
    different machines, the context, the other warnings and the tables."""
    if diff.get("kind") == "serving":
        return render_serving_diff_terminal(diff, width, color)
    con, buf = _console(width, color)
    v = diff["verdict"]
    banner, warnings = banner_warnings(v["warnings"])
    con.print(f"[{_STYLE.get(v['verdict'], 'bold')}]{escape(verdict_line(diff))}[/]")
    _banner(con, banner)
    comp = diff["comparison"]
    floor = v["noise_floor_pct"]
    con.print(
        f"baseline {escape(str(v['baseline']['name'] or v['baseline']['session_id']))} -> "
        f"session {escape(v['session']['session_id'])}; margin ±{v['margin_pct']:.1f} % "
        f"(threshold {v['threshold_pct']:.1f} %, noise floor "
        f"{'unknown' if floor is None else format(floor, '.1f') + ' %'}); "
        f"Welch p={v['welch_p_value']:.2g} (for reference)"
    )
    for w in warnings:
        con.print(f"[bold yellow]warning:[/] {escape(w)}")
    t = Table(title="latency (measured iterations)", title_justify="left")
    for col in (
        "metric",
        "baseline ms",
        "session ms",
        "delta",
        f"{(1 - comp['alpha']):.0%} CI",
        "gate",
    ):
        t.add_column(col, justify="right" if col not in ("metric", "gate") else "left")
    for name, m in comp["metrics"].items():
        lo, hi = m["ci_pct"]
        gate = m["verdict"] if name in comp["gates"] else ""
        t.add_row(
            name,
            fmt_ms(m["baseline_ms"]),
            fmt_ms(m["session_ms"]),
            _pct(m["delta_pct"]),
            f"[{lo:+.1f}, {hi:+.1f}]",
            gate,
        )
    con.print(t)
    ev = diff["evidence"]
    et = Table(title="evidence", title_justify="left")
    for col in ("signal", "baseline", "session", "delta"):
        et.add_column(col, justify="left" if col == "signal" else "right")
    for key, s in ev["scalars"].items():
        if s["delta"] is None:
            continue
        d = _pct(s["delta_pct"]) if s["delta_pct"] is not None else f"{s['delta']:+.3g}"
        et.add_row(
            f"{key} ({s['unit']})" if s["unit"] else key,
            f"{s['baseline']:.4g}",
            f"{s['session']:.4g}",
            d,
        )
    bn = ev["bottleneck"]
    if bn["baseline"] or bn["session"]:
        et.add_row(
            "bottleneck class",
            str(bn["baseline"] or "unknown"),
            str(bn["session"] or "unknown"),
            "changed" if bn["changed"] else "same",
        )
    con.print(et)
    for title, key in (("operators", "operators"), ("kernels", "kernels")):
        mv = ev.get(key)
        if not mv or not mv["top_movers"]:
            continue
        mt = Table(title=f"top {title} by change (ms per iteration)", title_justify="left")
        # operators by their original ONNX node, ORT's name beside it when wide enough
        ort = width >= ORT_NAME_WIDTH and any(
            r.get("label", r["name"]) != r["name"] for r in mv["top_movers"]
        )
        cols = ("name", *(("ORT name",) if ort else ()), "status", "baseline", "session", "delta")
        for col in cols:
            left = col in ("name", "ORT name", "status")
            mt.add_column(col, justify="left" if left else "right", overflow="fold")
        for r in mv["top_movers"]:
            mt.add_row(
                escape(r.get("label") or r["name"]),
                *((escape(r["name"]),) if ort else ()),
                r["status"],
                "–" if r["baseline_ms"] is None else fmt_ms(r["baseline_ms"]),
                "–" if r["session_ms"] is None else fmt_ms(r["session_ms"]),
                f"{r['delta_ms']:+.4f}",
            )
        con.print(mt)
        if mv["added"] or mv["removed"]:
            con.print(f"{title}: {len(mv['added'])} added, {len(mv['removed'])} removed")
    _causes_and_gaps(con, v, ev)
    return buf.getvalue()


def _causes_and_gaps(con: Console, v: dict[str, Any], ev: dict[str, Any]) -> None:
    """The end of a terminal diff: candidate causes, the recommendation, what was unknown."""
    if v["candidate_causes"]:
        con.print("candidate causes:")
        for c in v["candidate_causes"]:
            con.print(f"  - {escape(c['cause'])}: {escape(c['detail'])}")
    if v["recommendation"]:
        con.print(f"recommendation: {escape(v['recommendation'])}")
    if ev["missing"]:
        con.print(f"unknown (not in both bundles): {escape(', '.join(ev['missing']))}")


def _md(text: Any) -> str:
    return html.escape(str(text)).replace("|", "\\|").replace("\n", " ")


def render_diff_markdown(diff: dict[str, Any]) -> str:
    """A compact table for a pull-request comment."""
    if diff.get("kind") == "serving":
        return render_serving_diff_markdown(diff)
    v = diff["verdict"]
    comp = diff["comparison"]
    banner, warnings = banner_warnings(v["warnings"])
    icon = {"REGRESSION": "🔴", "IMPROVEMENT": "🟢", "NO CHANGE": "⚪", "INCONCLUSIVE": "🟡"}[
        v["verdict"]
    ]
    lines = [
        f"### {icon} {_md(verdict_line(diff))}",
        "",
        *_md_banner(banner),
        f"Baseline {_md(v['baseline']['name'] or v['baseline']['session_id'])} → session "
        f"{_md(v['session']['session_id'])}, margin ±{v['margin_pct']:.1f} %, "
        f"Welch p = {v['welch_p_value']:.2g} (reference only)",
        "",
        "| metric | baseline ms | session ms | delta | 95 % CI | gate |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, m in comp["metrics"].items():
        if name not in ("p10", "p50", "p90", "p99") and name not in comp["gates"]:
            continue
        lo, hi = m["ci_pct"]
        gate = m["verdict"] if name in comp["gates"] else ""
        lines.append(
            f"| {name} | {fmt_ms(m['baseline_ms'])} | {fmt_ms(m['session_ms'])} | "
            f"{_pct(m['delta_pct'])} | [{lo:+.1f}, {hi:+.1f}] | {gate} |"
        )
    ev = diff["evidence"]
    for title, key in (("operator", "operators"), ("kernel", "kernels")):
        mv = ev.get(key)
        if mv and mv["top_movers"]:
            lines += ["", f"| top {title} movers | status | delta ms/iter |", "|---|---|---:|"]
            for r in mv["top_movers"][:5]:
                name = r.get("label") or r["name"]
                lines.append(f"| {_md(name)} | {r['status']} | {r['delta_ms']:+.4f} |")
    lines.append("")
    for c in v["candidate_causes"]:
        lines.append(f"- **{_md(c['cause'])}**: {_md(c['detail'])}")
    if v["recommendation"]:
        lines.append(f"- **recommendation**: {_md(v['recommendation'])}")
    for w in warnings:
        lines.append(f"- ⚠️ {_md(w)}")
    known = [(k, x) for k, x in ev["scalars"].items() if x["delta"] is not None]
    if known:
        # collapsed: the comment stays compact, the evidence one click away
        lines += [
            "",
            "<details><summary>evidence</summary>",
            "",
            "| signal | baseline | session | delta |",
            "|---|---:|---:|---:|",
        ]
        for key, x in known:
            d = _pct(x["delta_pct"]) if x["delta_pct"] is not None else f"{x['delta']:+.3g}"
            unit = f" ({x['unit']})" if x["unit"] else ""
            lines.append(f"| {key}{_md(unit)} | {x['baseline']:.4g} | {x['session']:.4g} | {d} |")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


# -- serving sessions ---------------------------------------------------------------------
#: the quantiles a serving diff shows for each metric (its gates too)
_SERVING_SHOWN = ("p50", "p90", "p99")


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "unknown"
    return fmt_ms(v) if unit == "ms" else f"{v:.4g}"


def _serving_rows(diff: dict[str, Any]) -> list[tuple[str, str, str, str, str, str, str]]:
    """(metric, quantile, baseline, session, delta, interval, gate) of every shown quantile,
    then the inter-token latencies (reported, not gated) and the failed requests."""
    rows = []
    srv = diff["serving"]
    for name, m in srv["metrics"].items():
        comp = m["comparison"]
        unit = m["unit"]
        if comp is None:
            rows.append((f"{name} ({unit})", "", "unknown", "unknown", "", "", ""))
            continue
        gates = comp["gates"]
        for q, shift in comp["metrics"].items():
            if q not in _SERVING_SHOWN and q not in gates:
                continue
            lo, hi = shift["ci_pct"]
            base = shift.get("baseline_ms", shift.get("baseline"))
            sess = shift.get("session_ms", shift.get("session"))
            rows.append(
                (
                    f"{name} ({unit})",
                    q,
                    _value(base, unit),
                    _value(sess, unit),
                    _pct(shift["delta_pct"]),
                    f"[{lo:+.1f}, {hi:+.1f}]",
                    (shift["verdict"] or "") if q in gates else "",
                )
            )
    itl = diff["evidence"].get("itl_ms") or {}
    if itl.get("baseline") and itl.get("session"):
        for q in _SERVING_SHOWN:
            a, b = itl["baseline"][q], itl["session"][q]
            rows.append(
                (
                    "itl (ms)",
                    q,
                    fmt_ms(a),
                    fmt_ms(b),
                    _pct((b / a - 1) * 100 if a else None),
                    "",
                    "not gated",
                )
            )
    f = srv["failures"]
    rows.append(
        (
            "failed requests",
            "",
            f"{f['baseline']['failed']}/{f['baseline']['measured']} "
            f"({f['baseline']['fraction']:.1%})",
            f"{f['session']['failed']}/{f['session']['measured']} ({f['session']['fraction']:.1%})",
            f"{f['delta_points']:+.1f} pts",
            f"p={f['p_regression']:.2g}",
            f["verdict"] or "",
        )
    )
    return rows


def _serving_context(diff: dict[str, Any]) -> str:
    v = diff["verdict"]
    margins = ", ".join(f"{k} ±{x:.1f} %" for k, x in v["margins_pct"].items())
    floors = diff["noise_floor"]["by_metric"]
    learned = [
        f"{k} {x['floor_pct']:.1f} %" for k, x in floors.items() if x["floor_pct"] is not None
    ]
    return (
        f"baseline {v['baseline']['name'] or v['baseline']['session_id']} -> session "
        f"{v['session']['session_id']} at {v['point']}; margins {margins} (threshold "
        f"{v['threshold_pct']:.1f} %, noise floor {', '.join(learned) or 'unknown'})"
    )


def _throughput_note(diff: dict[str, Any]) -> str:
    t = diff["serving"]["throughput"]
    if t["window_s"] is None:
        return f"output tokens/s not compared: {t['unknown']}"
    runs = t["run_output_tokens_per_s"]

    def figs(xs: list[float | None]) -> str:
        return ", ".join("unknown" if x is None else f"{x:.4g}" for x in xs)

    return (
        f"output tokens/s: quantiles over windows of {t['window_s']:.3g} s "
        f"({', '.join(map(str, t['windows']['baseline']))} vs "
        f"{', '.join(map(str, t['windows']['session']))} windows); the runs' own figures "
        f"{figs(runs['baseline'])} -> {figs(runs['session'])} tokens/s"
    )


def render_serving_diff_terminal(
    diff: dict[str, Any], width: int = 110, color: bool = False
) -> str:
    """The terminal rendering of a serving diff: verdict line first, then every metric."""
    con, buf = _console(width, color)
    v = diff["verdict"]
    banner, warnings = banner_warnings(v["warnings"])
    con.print(f"[{_STYLE.get(v['verdict'], 'bold')}]{escape(verdict_line(diff))}[/]")
    _banner(con, banner)
    con.print(escape(_serving_context(diff)))
    for w in warnings:
        con.print(f"[bold yellow]warning:[/] {escape(w)}")
    t = Table(title="serving (measured phase, successful requests)", title_justify="left")
    for col in ("metric", "quantile", "baseline", "session", "delta", "95% CI", "gate"):
        t.add_column(col, justify="left" if col in ("metric", "quantile", "gate") else "right")
    for row in _serving_rows(diff):
        t.add_row(*(escape(c) for c in row))
    con.print(t)
    con.print(escape(_throughput_note(diff)))
    ev = diff["evidence"]
    et = Table(title="evidence", title_justify="left")
    for col in ("signal", "baseline", "session", "delta"):
        et.add_column(col, justify="left" if col == "signal" else "right", overflow="fold")
    for d in ev["settings"]:
        et.add_row(
            escape(d["key"]), escape(_short(d["baseline"])), escape(_short(d["session"])), "changed"
        )
    for key, x in ev["scalars"].items():
        if x["delta"] is None:
            continue
        d = _pct(x["delta_pct"]) if x["delta_pct"] is not None else f"{x['delta']:+.3g}"
        et.add_row(
            f"{key} ({x['unit']})" if x["unit"] else key,
            f"{x['baseline']:.4g}",
            f"{x['session']:.4g}",
            d,
        )
    if et.row_count:
        con.print(et)
    _causes_and_gaps(con, v, ev)
    return buf.getvalue()


def _short(v: Any) -> str:
    s = "unset" if v is None else str(v)
    return s if len(s) <= 40 else s[:37] + "..."


def render_serving_diff_markdown(diff: dict[str, Any]) -> str:
    """A compact table of a serving diff for a pull-request comment."""
    v = diff["verdict"]
    banner, warnings = banner_warnings(v["warnings"])
    icon = {"REGRESSION": "🔴", "IMPROVEMENT": "🟢", "NO CHANGE": "⚪", "INCONCLUSIVE": "🟡"}[
        v["verdict"]
    ]
    lines = [
        f"### {icon} {_md(verdict_line(diff))}",
        "",
        *_md_banner(banner),
        _md(_serving_context(diff)),
        "",
        "| metric | quantile | baseline | session | delta | 95 % CI | gate |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in _serving_rows(diff):
        lines.append("| " + " | ".join(_md(c) for c in row) + " |")
    lines += ["", _md(_throughput_note(diff)), ""]
    for c in v["candidate_causes"]:
        lines.append(f"- **{_md(c['cause'])}**: {_md(c['detail'])}")
    if v["recommendation"]:
        lines.append(f"- **recommendation**: {_md(v['recommendation'])}")
    for w in warnings:
        lines.append(f"- ⚠️ {_md(w)}")
    settings = diff["evidence"]["settings"]
    if settings:
        lines += ["", "| setting | baseline | session |", "|---|---|---|"]
        for d in settings:
            lines.append(
                f"| {_md(d['key'])} | {_md(_short(d['baseline']))} | {_md(_short(d['session']))} |"
            )
    return "\n".join(lines) + "\n"


def _machine_label(group: dict[str, Any]) -> str:
    """`` (host, device)`` of a history group read from a lake; empty otherwise."""
    m = group.get("machine") or {}
    parts = [str(m[k]) for k in ("hostname", "device") if m.get(k)]
    return f" ({escape(', '.join(parts))})" if parts else ""


def render_history_terminal(
    groups: list[dict[str, Any]], width: int = 110, color: bool = False
) -> str:
    con, buf = _console(width, color)
    if not groups:
        con.print("no completed sessions match")
        return buf.getvalue()
    for g in groups:
        if g.get("kind") == "serving":
            _serving_history_group(con, g)
            continue
        cp_at: dict[int, list[dict[str, Any]]] = {}
        for c in g["change_points"]:
            cp_at.setdefault(c["index"], []).append(c)
        settings = ", ".join(
            f"{k} {escape(str(g[k]))}" for k in ("threads", "preprocess") if g.get(k) is not None
        )
        con.print(
            f"[bold]{escape(str(g['model']))}[/] on {escape(str(g['backend']))}, "
            f"batch {g['batch']}{', ' + settings if settings else ''}, "
            f"fingerprint {escape(str(g['fingerprint']))}{_machine_label(g)}: "
            f"{len(g['sessions'])} session(s)"
        )
        t = Table()
        for col in (
            "#",
            "session",
            "created (UTC)",
            "tag",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "items/s",
            "change",
        ):
            numeric = col in ("#", "p50 ms", "p90 ms", "p99 ms", "items/s")
            # ids and times are what a reader looks up: never cut them in a narrow pipe
            t.add_column(
                col,
                justify="right" if numeric else "left",
                no_wrap=col in ("session", "created (UTC)", "change"),
                overflow="fold" if col == "tag" else "ellipsis",
            )
        for i, r in enumerate(g["sessions"]):
            mark = "\n".join(f"{c['metric']} {c['magnitude_pct']:+.0f}%" for c in cp_at.get(i, []))
            thr = r["throughput"]
            t.add_row(
                str(i),
                escape(r["id"]),
                str(r["created_utc"] or "")[:19].replace("T", " "),
                escape(str(r["tag"] or "")),
                fmt_ms(r["p50_ms"]),
                fmt_ms(r["p90_ms"]),
                fmt_ms(r["p99_ms"]),
                "unknown" if thr is None else f"{thr:.1f}",
                mark,
            )
        con.print(t)
        if g["change_points"]:
            for c in g["change_points"]:
                con.print(
                    f"change point ({c['metric']}) at #{c['index']} {escape(c['session_id'])}: "
                    f"{c['before_ms']:.4g} -> {c['after_ms']:.4g} ms "
                    f"({c['magnitude_pct']:+.1f} %), p={c['p_value']:.2g}"
                )
        else:
            con.print(
                f"no change points (window {g['method']['window']}, p < {g['method']['max_p']:g})"
            )
    return buf.getvalue()


def _serving_history_group(con: Console, g: dict[str, Any]) -> None:
    cp_at: dict[int, list[dict[str, Any]]] = {}
    for c in g["change_points"]:
        cp_at.setdefault(c["index"], []).append(c)
    con.print(
        f"[bold]{escape(str(g['model']))}[/] served by {escape(str(g['backend']))} at "
        f"{escape(str(g['load']))}, fingerprint {escape(str(g['fingerprint']))}"
        f"{_machine_label(g)}: "
        f"{len(g['sessions'])} session(s)"
    )
    t = Table()
    cols = (
        "#",
        "session",
        "created (UTC)",
        "tag",
        "ttft p50 ms",
        "ttft p99 ms",
        "tpot p50 ms",
        "out tok/s",
        "failed",
        "change",
    )
    numeric = {"#", "ttft p50 ms", "ttft p99 ms", "tpot p50 ms", "out tok/s", "failed"}
    for col in cols:
        t.add_column(
            col,
            justify="right" if col in numeric else "left",
            no_wrap=col in ("session", "created (UTC)", "change"),
            overflow="fold" if col == "tag" else "ellipsis",
        )
    for i, r in enumerate(g["sessions"]):
        mark = "\n".join(f"{c['metric']} {c['magnitude_pct']:+.0f}%" for c in cp_at.get(i, []))
        tput, failed = r["output_tokens_per_s"], r["failed_fraction"]
        t.add_row(
            str(i),
            escape(r["id"]),
            str(r["created_utc"] or "")[:19].replace("T", " "),
            escape(str(r["tag"] or "")),
            fmt_ms(r["ttft_p50_ms"]),
            fmt_ms(r["ttft_p99_ms"]),
            fmt_ms(r["tpot_p50_ms"]),
            "unknown" if tput is None else f"{tput:.1f}",
            "unknown" if failed is None else f"{failed:.1%}",
            mark,
        )
    con.print(t)
    for c in g["change_points"]:
        con.print(
            f"change point ({c['metric']}) at #{c['index']} {escape(c['session_id'])}: "
            f"{c['before_ms']:.4g} -> {c['after_ms']:.4g} ms "
            f"({c['magnitude_pct']:+.1f} %), p={c['p_value']:.2g}"
        )
    if not g["change_points"]:
        con.print(
            f"no change points (window {g['method']['window']}, p < {g['method']['max_p']:g})"
        )


def render_check_terminal(result: dict[str, Any]) -> str:
    lines = []
    for r in result["results"]:
        value = (
            "unknown"
            if r["value"] is None
            else f"{r['value']:.4g}{(' ' + r['unit']) if r['unit'] else ''}"
        )
        lines.append(f"{r['status'].upper():7} {r['rule']}  (value {value})")
    lines.append(
        f"SLA {'met' if result['passed'] else 'VIOLATED'}: "
        f"{len(result['results']) - result['failed']}/{len(result['results'])} rule(s) pass"
        + (f" at {result['point']}" if result.get("point") else "")
    )
    return "\n".join(lines) + "\n"
