"""The critical path in words, for every renderer: ``metrics/critical_path.json`` as the
report's ``critical_path`` key, as (label, text) rows for the terminal and HTML reports, and
as the longer listing of ``aaco analyze critical-path``.

A figure that is unknown reads "unknown", never 0; every reader is defensive (a key may be
missing, a file hand-edited).
"""

from __future__ import annotations

from typing import Any

from aaco.analysis.critical_path import CATEGORIES
from aaco.report.machine import Row, fnum
from aaco.session.bundle import Session
from aaco.session.paths import CRITICAL_PATH_FILE

__all__ = ["critical_path_key", "critical_path_lines", "critical_path_rows"]

#: operators, kernels and what-ifs kept in the report's key
TOP = 8

_LABELS = {
    "cpu_op": "CPU op",
    "runtime": "runtime/launch",
    "gpu_compute": "GPU compute",
    "copy": "copy",
    "sync_wait": "sync wait",
    "idle_gap": "idle gap",
}


def critical_path_key(session: Session) -> dict[str, Any]:
    """``{"critical_path": ...}``: the primary process's path, compact; empty when the
    bundle has none (no GPU trace, or written before the analysis existed)."""
    data = session.json_file(CRITICAL_PATH_FILE)
    if not isinstance(data, dict) or not isinstance(data.get("primary"), dict):
        return {}
    p = data["primary"]
    keep = ("process_id", "region_start_ns", "region_end_ns", "wall_ns", "length_ns",
            "by_category", "by_edge", "unexplained_wait_ns", "unexplained_wait_pct",
            "steps")  # fmt: skip
    out: dict[str, Any] = {k: p.get(k) for k in keep}
    out["by_operator"] = list(p.get("by_operator") or [])[:TOP]
    out["kernels"] = list(p.get("kernels") or [])[:TOP]
    out["what_if"] = list(p.get("what_if") or [])
    out["processes"] = len(data.get("processes") or [])
    return {"critical_path": out}


def _saves(w: dict[str, Any]) -> str:
    """ "saves 10.5%", or "costs 31.6%" for a what-if that lengthens the path."""
    pct = w.get("saved_pct")
    if isinstance(pct, int | float) and pct < 0:
        return f"costs {fnum(-pct, '.2f', '%')}"
    return f"saves {fnum(pct, '.2f', '%')}"


def _host_idle_note(p: dict[str, Any]) -> str | None:
    """Why what-ifs can save less than the categories suggest: host idle time is held."""
    idle = ((p.get("by_edge") or {}).get("idle_gap") or {}).get("pct")
    if isinstance(idle, int | float) and idle >= 10:
        return (
            f"what-ifs are lower bounds here: {idle:.0f}% of the path is host time no traced "
            "event covers (Python, I/O, waiting on another thread), which they keep as it is"
        )
    return None


def _ms(ns: Any) -> str:
    return fnum(ns / 1e6 if isinstance(ns, int | float) else None, ".3f", " ms")


def critical_path_rows(cp: Any) -> list[Row]:
    """Rows of the report's critical-path section; none without a path."""
    if not isinstance(cp, dict) or not isinstance(cp.get("length_ns"), int | float):
        return []
    length = cp["length_ns"]
    cats = cp.get("by_category") or {}
    parts = []
    for c in CATEGORIES:
        v = cats.get(c) or {}
        pct = v.get("pct") if isinstance(v, dict) else None
        if isinstance(pct, int | float) and pct >= 0.05:
            parts.append(f"{_LABELS[c]} {pct:.1f}%")
    procs = cp.get("processes") or 1
    where = f"process {cp.get('process_id')}" + (f" (of {procs})" if procs > 1 else "")
    steps = cp.get("steps")
    head = f"{_ms(length)} over {where}" + (f", {steps} steps" if steps else "")
    rows = [Row("critical path", head + " = the region's wall time")]
    rows.append(Row("  share", ", ".join(parts) or "unknown"))
    unexpl = cp.get("unexplained_wait_pct")
    if isinstance(unexpl, int | float) and unexpl > 0:
        rows.append(
            Row(
                "  unexplained",
                f"{unexpl:.1f}% of the path waited with no recorded dependency "
                f"({_ms(cp.get('unexplained_wait_ns'))}): syncs or stream waits the trace does "
                "not link",
                warn=unexpl >= 10,
            )
        )
    ops = [o for o in cp.get("by_operator") or [] if isinstance(o, dict)]
    if ops:
        rows.append(
            Row(
                "  operators",
                ", ".join(f"{o.get('operator')} {fnum(o.get('pct'), '.1f', '%')}" for o in ops[:5]),
            )
        )
    note = _host_idle_note(cp)
    if note and cp.get("what_if"):
        rows.append(Row("  note", note))
    for w in (cp.get("what_if") or [])[:TOP]:
        if not isinstance(w, dict):
            continue
        amdahl = w.get("amdahl_saved_ns")
        am_pct = 100.0 * amdahl / length if isinstance(amdahl, int) and length else None
        rows.append(
            Row(
                "  what-if",
                f"{w.get('label') or w.get('spec')}: {_ms(w.get('new_length_ns'))} "
                f"({_saves(w)}; Amdahl on summed time: "
                f"{fnum(am_pct, '.1f', '%')})",
            )
        )
    return rows


def _shares(title: str, rows: Any, key: str, limit: int) -> list[str]:
    """A titled list of ``{key, ns, pct}`` rows: time, share, name."""
    rows = [r for r in rows or [] if isinstance(r, dict)][:limit]
    out = [f"  {title}:"] if rows else []
    for r in rows:
        out.append(f"    {_ms(r.get('ns')):>14}  {fnum(r.get('pct'), '6.2f', '%')}  {r.get(key)}")
    return out


def critical_path_lines(summary: dict[str, Any], segments: int = 20) -> list[str]:
    """``aaco analyze critical-path``: every process's path, categories, operators, kernels
    with slack, what-ifs and the longest segments."""
    lines: list[str] = []
    if summary.get("step") is not None:
        lines.append(f"ProfilerStep#{summary['step']} only")
    for p in summary.get("processes") or []:
        length = p.get("length_ns")
        lines.append(
            f"process {p.get('process_id') if p.get('process_id') is not None else 'unknown'}: "
            f"critical path {_ms(length)} "
            f"(region {_ms(p.get('wall_ns'))}; {p.get('stats', {}).get('nodes')} nodes, "
            f"{p.get('stats', {}).get('edges')} edges)"
        )
        lines.append("  by category:")
        for c in CATEGORIES:
            v = (p.get("by_category") or {}).get(c) or {}
            lines.append(
                f"    {_LABELS[c]:<15} {_ms(v.get('ns')):>14}  {fnum(v.get('pct'), '6.2f', '%')}"
            )
        lines.append(
            f"  unexplained wait: {_ms(p.get('unexplained_wait_ns'))} "
            f"({fnum(p.get('unexplained_wait_pct'), '.2f', '%')})"
        )
        lines += _shares("by operator", p.get("by_operator"), "operator", 10)
        ks = p.get("kernels") or []
        if ks:
            lines.append("  kernels (time on path, total, min slack):")
            for k in ks[:10]:
                lines.append(
                    f"    {_ms(k.get('on_path_ns')):>14} {_ms(k.get('total_ns')):>14} "
                    f"{_ms(k.get('min_slack_ns')):>14}  x{k.get('count')} {str(k.get('name'))[:70]}"
                )
        lines += _shares("runtime calls on the path", p.get("runtime_calls"), "name", 5)
        wis = p.get("what_if") or []
        if wis:
            lines.append("  what-if (re-timed DAG; Amdahl's law on summed time beside it):")
            note = _host_idle_note(p)
            if note:
                lines.append(f"    ({note})")
            for w in wis:
                am = w.get("amdahl_saved_ns")
                am_pct = 100.0 * am / length if isinstance(am, int) and length else None
                lines.append(
                    f"    {w.get('label') or w.get('spec')}: {_ms(w.get('new_length_ns'))}, "
                    f"{_saves(w)} (Amdahl {fnum(am_pct, '.2f', '%')}; "
                    f"{w.get('matched')} matched"
                    + (": nothing matched the pattern" if not w.get("matched") else "")
                    + ")"
                )
        segs = sorted(p.get("segments") or [], key=lambda s: -(s.get("dur_ns") or 0))[:segments]
        if segs:
            lines.append(
                f"  longest path segments (of {p.get('segments_total')}), in time order: "
                "start (from the region start), duration, kind, where, event"
            )
            for s in sorted(segs, key=lambda s: s.get("start_ns") or 0):
                flag = " (unexplained)" if s.get("unexplained") else ""
                if s.get("meanwhile"):
                    flag += f" [meanwhile {s['meanwhile'][:60]}]"
                lines.append(
                    f"    +{_ms((s.get('start_ns') or 0) - (p.get('region_start_ns') or 0)):>13} "
                    f"{_ms(s.get('dur_ns')):>13}  {s.get('kind'):<20} {s.get('where'):<22} "
                    f"{str(s.get('name') or '')[:60]}{flag}"
                )
        st = p.get("stats") or {}
        notes = [
            f"{st[k]} {label}"
            for k, label in (
                ("repaired_nesting", "improperly nested host events repaired"),
                ("clock_skew_dropped", "launch links dropped for clock skew"),
                ("backward_dropped", "edges dropped that pointed back in time"),
                ("orphan_gpu_starts", "GPU activities with no recorded cause"),
                ("sync_unlinked", "blocking syncs with no GPU work to link"),
                ("stream_waits_unlinked", "stream waits on unrecorded events"),
            )
            if st.get(k)
        ]
        if notes:
            lines.append("  notes: " + "; ".join(notes))
        lines.append("")
    return lines
