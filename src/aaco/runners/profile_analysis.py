"""``analysis.json`` of an ``aaco profile`` bundle: the whole profile in one JSON file.

One object at the bundle root (keys in docs/report-json.md, "aaco profile: analysis.json"),
in the spirit of rocm-perf-lab's ``analysis.json``: the command and its exit statuses, the
runs and their wall-time statistics, the tracer and why it ran, the dominant kernels and
operators, the kernel roofline (when rocprofv3 collected counters), the critical path, the
bottleneck verdict and what to fix first, and the telemetry. It only gathers what the bundle
already holds (``session.json``, the summary, the trace tables, ``metrics/*.json`` and the
report model): a part the bundle lacks is null, never estimated.

Example::

    build_analysis(Session.load("sessions/latest"))["wall_time_s"]["median"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from aaco.report.model import build_report
from aaco.session.bundle import Session
from aaco.session.paths import (
    BOTTLENECK_FILE,
    CRITICAL_PATH_FILE,
    RECOMMENDATIONS_FILE,
    ROOFLINE_FILE,
)

__all__ = ["ANALYSIS_SCHEMA_VERSION", "TOP", "build_analysis"]

#: version of this file's layout
ANALYSIS_SCHEMA_VERSION = 1
#: rows kept in each ranked list
TOP = 10


def build_analysis(session: Session, final_path: Path | None = None) -> dict[str, Any]:
    """The ``analysis.json`` object of a profile bundle (any bundle: what it lacks is null);
    ``final_path``: where the bundle will be once published, when ``session`` is still the
    staging folder."""
    where = final_path if final_path is not None else session.path
    meta = session.meta
    prof = _obj(meta.get("profile"))
    summary = session.summary or {}
    report = build_report(session)
    runs = [r for r in prof.get("runs") or [] if isinstance(r, dict)]
    tracer = _obj(prof.get("tracer"))
    return {
        "analysis_schema_version": ANALYSIS_SCHEMA_VERSION,
        "session": {
            "id": where.name,
            "path": str(where),
            "created_utc": meta.get("created_utc"),
            "tag": meta.get("tag"),
            "status": session.status,
            "error": session.error,
        },
        "command": prof.get("command"),
        "executable": prof.get("executable"),
        "exit_status": prof.get("exit_status"),
        "exit_statuses": prof.get("exit_statuses") or [],
        "runs": {
            "requested": prof.get("repeat"),
            "ran": sum(1 for r in runs if r.get("pid") is not None),
            "measured": sum(
                1
                for r in runs
                if r.get("phase") == "measured" and r.get("pid") and r.get("status") == "completed"
            ),
            "traced_run": next((r.get("run") for r in runs if r.get("traced")), None),
            "per_run": [
                {
                    k: r.get(k)
                    for k in ("run", "phase", "traced", "wall_s", "status", "exit_status", "signal")
                }
                for r in runs
            ],
        },
        "wall_time_s": _wall_time(summary),
        "tracer": {
            k: tracer.get(k)
            for k in ("name", "requested", "reason", "traced_runs", "status", "error", "rows")
        }
        if tracer
        else None,
        "dominant_kernels": _kernels(session, report),
        "dominant_ops": _ops(session, report),
        "roofline": _roofline(session),
        "critical_path": _critical_path(session),
        "bottleneck": _bottleneck(session),
        "what_to_fix_first": _fixes(session),
        "telemetry": _telemetry(meta, summary),
        "warnings": report.get("warnings") or [],
    }


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _wall_time(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The measured runs' wall times (s): the summary's latency statistics, converted."""
    lat = summary.get("latency_ms")
    if not isinstance(lat, dict) or not lat.get("count"):
        return None

    def s(key: str) -> float | None:
        v = lat.get(key)
        return None if v is None else float(v) / 1e3

    return {
        "runs": lat.get("count"),
        "median": s("p50"),
        "mean": s("mean"),
        "min": s("min"),
        "max": s("max"),
        "std": s("std"),
        "cov": lat.get("cov"),
        "noisy": (summary.get("noise") or {}).get("noisy"),
    }


def _kernels(session: Session, report: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The kernels with the most GPU time; null without a kernel trace."""
    if session.table("kernels") is None:
        return None
    return [
        {
            "name": k.get("name"),
            "short_name": k.get("short_name"),
            "family": k.get("family"),
            "calls": k.get("calls"),
            "total_ms": k.get("total_ms"),
            "avg_us": k.get("avg_us"),
            "share": None if k.get("pct") is None else k["pct"] / 100.0,
        }
        for k in (report.get("top_kernels") or [])[:TOP]
    ]


def _ops(session: Session, report: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The operators with the most time (top level of each thread's nesting); null without
    an operator table."""
    if session.table("ops") is None:
        return None
    return [
        {
            "name": o.get("label") or o.get("name"),
            "op_type": o.get("op_type"),
            "calls": o.get("calls"),
            "total_ms": o.get("total_ms"),
            "share": None if o.get("pct") is None else o["pct"] / 100.0,
        }
        for o in (report.get("top_ops") or [])[:TOP]
    ]


def _roofline(session: Session) -> dict[str, Any] | None:
    """The kernel roofline from counters (``metrics/roofline.json`` and the kernel rows of
    ``metrics/roofline.parquet``); null when no counters were collected."""
    counters = session.table("kernel_counters")
    summary = session.json_file(ROOFLINE_FILE)
    if counters is None or not counters.num_rows or not isinstance(summary, dict):
        return None
    rows: list[dict[str, Any]] = []
    table = session.table("roofline")
    if table is not None and table.num_rows:
        kernels = table.filter(pc.equal(table.column("level"), "kernel"))
        order = pc.sort_indices(kernels, [("time_ns", "descending")])
        keep = (
            "name",
            "time_ns",
            "time_share",
            "flops",
            "bytes",
            "intensity",
            "achieved_flops_per_s",
            "achieved_bytes_per_s",
            "attainable_flops_per_s",
            "bound",
            "efficiency",
        )
        rows = [{k: r.get(k) for k in keep} for r in kernels.take(order).slice(0, TOP).to_pylist()]
    return {
        "ceilings": summary.get("ceilings"),
        "ceilings_note": summary.get("ceilings_note"),
        "weighted_efficiency": summary.get("weighted_efficiency"),
        "kernels": rows,
        "kernel_counters": summary.get("kernel_counters"),
    }


def _critical_path(session: Session) -> dict[str, Any] | None:
    """The primary process's critical path (``metrics/critical_path.json``): its length, the
    time by category, the operators that hold it and the what-ifs; null when absent."""
    data = session.json_file(CRITICAL_PATH_FILE)
    primary = data.get("primary") if isinstance(data, dict) else None
    if not isinstance(primary, dict):
        return None
    length = primary.get("length_ns")
    return {
        "process_id": primary.get("process_id"),
        "length_ms": None if length is None else length / 1e6,
        "wall_ms": None if primary.get("wall_ns") is None else primary["wall_ns"] / 1e6,
        "by_category": primary.get("by_category"),
        "top_operators": (primary.get("by_operator") or [])[:TOP],
        "what_if": primary.get("what_if") or [],
        "unexplained_wait_pct": primary.get("unexplained_wait_pct"),
    }


def _bottleneck(session: Session) -> dict[str, Any] | None:
    verdict = session.json_file(BOTTLENECK_FILE)
    if not isinstance(verdict, dict):
        return None
    return {
        "class": verdict.get("bottleneck_class"),
        "confidence": verdict.get("confidence"),
        "explanation": verdict.get("explanation"),
        "top_evidence": [
            {k: e.get(k) for k in ("signal", "value", "unit", "source")}
            for e in (verdict.get("top_evidence") or [])[:3]
            if isinstance(e, dict)
        ],
        "missing_evidence": [
            e.get("signal") for e in verdict.get("missing_evidence") or [] if isinstance(e, dict)
        ],
    }


def _fixes(session: Session) -> list[dict[str, Any]] | None:
    """The first three recommendations; null when the analyses did not run."""
    recs = session.json_file(RECOMMENDATIONS_FILE)
    if not isinstance(recs, list):
        return None
    keep = ("rank", "class", "action", "target", "gain_ms", "gain_pct", "gain_kind", "confidence")
    return [{k: r.get(k) for k in keep} for r in recs[:3] if isinstance(r, dict)]


def _telemetry(meta: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The command's resource usage (``wait4``, all runs) and the sampled telemetry over the
    measured runs (the whole process tree with the ``process_tree`` collector)."""
    worker, tel, info = (
        _obj(meta.get("worker")),
        _obj(summary.get("telemetry")),
        _obj(meta.get("telemetry")),
    )
    gpu, sched = _obj(summary.get("gpu")), _obj(summary.get("sched"))
    return {
        "scope": info.get("scope", "process") if info else None,
        "cpu_user_s": worker.get("cpu_user_s"),
        "cpu_system_s": worker.get("cpu_system_s"),
        "max_rss_bytes": worker.get("max_rss_bytes"),
        "rss_peak_bytes_sampled": tel.get("proc_rss_peak_bytes"),
        "proc_cpu_pct_mean": tel.get("proc_cpu_pct_mean"),
        "sys_cpu_pct_mean": tel.get("sys_cpu_pct_mean"),
        "samples": tel.get("samples"),
        "processes_max": info.get("processes_max"),
        "gpu": {k: gpu.get(k) for k in ("source", "energy_j", "avg_power_w", "throttled_share")}
        if gpu
        else None,
        "sched": {k: sched.get(k) for k in ("wait_share", "involuntary_switches_per_s")}
        if sched
        else None,
    }
