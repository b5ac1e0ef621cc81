"""The report model: one JSON-ready dictionary per session, shared by every renderer.

Keys documented in docs/report-json.md are stable: later versions add keys, never rename.
"""

from __future__ import annotations

from typing import Any

from aaco.analysis.ops import op_aggregates
from aaco.session.bundle import Session

REPORT_SCHEMA_VERSION = 1
TOP_N = 15


def _top_ops(session: Session, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return [], []
    originals: dict[str, list[str] | None] = {}
    sub = ops.select(["node_name", "original_nodes"]).to_pylist()
    for row in sub:
        originals.setdefault(row["node_name"], row["original_nodes"])
    by_node = op_aggregates(ops, "node_name").slice(0, n).to_pylist()
    top = [
        {
            "name": r["node_name"],
            "op_type": r["op_type"],
            "provider": r["provider"],
            "total_ms": r["total_ns"] / 1e6,
            "ms_per_iter": r["ns_per_iter"] / 1e6,
            "mean_ms": r["mean_ns"] / 1e6,
            "pct": r["pct"],
            "calls": r["calls"],
            "original_nodes": originals.get(r["node_name"]),
        }
        for r in by_node
    ]
    by_type = [
        {
            "op_type": r["op_type"],
            "provider": r["provider"],
            "total_ms": r["total_ns"] / 1e6,
            "ms_per_iter": r["ns_per_iter"] / 1e6,
            "pct": r["pct"],
            "calls": r["calls"],
        }
        for r in op_aggregates(ops, "op_type").to_pylist()
    ]
    return top, by_type


COVERAGE_TOLERANCE = 0.15
INFLATION_WARN = 1.10


def coverage_warnings(profile: dict[str, Any]) -> list[str]:
    """Explain node-time coverage far from 100 %: overhead outside operators, a profiled pass
    that ran at another speed than the measured one, or overlapping operators."""
    out: list[str] = []
    cov = profile.get("coverage")
    same = profile.get("coverage_same_pass")
    inflation = profile.get("profiler_inflation")
    if inflation is not None and abs(inflation - 1.0) > INFLATION_WARN - 1.0:
        how = "slower" if inflation > 1 else "faster"
        out.append(
            f"the profiled pass ran {abs(inflation - 1):.0%} {how} than the measured one "
            "(the profiler's cost per node on a model of many small ones, or a change in "
            "machine load): read per-operator times as shares, not absolute ms"
        )
    share = same if same is not None else (cov if not out else None)
    if share is not None and share < 1.0 - COVERAGE_TOLERANCE:
        out.append(
            f"operators account for {share:.0%} of the latency; the other {1 - share:.0%} is "
            "overhead outside operators (session.run binding, input/output copies, scheduling"
            + ("; part of it may be the profiler's own bookkeeping)" if out else ")")
        )
    elif share is not None and share > 1.0 + COVERAGE_TOLERANCE:
        out.append(
            f"operator time adds up to {share:.0%} of the latency: operators overlap "
            "(parallel execution)"
        )
    return out


def build_report(session: Session, top_n: int = TOP_N) -> dict[str, Any]:
    """The ``aaco report --format json`` object (see docs/report-json.md)."""
    meta = session.meta
    summary = session.summary or {}
    model_meta = session.model_meta or {}
    top, by_type = _top_ops(session, top_n)
    warnings = list(summary.get("warnings") or [])
    if session.status != "completed":
        err = session.error or {}
        warnings.insert(0, f"run {session.status}: {err.get('message', 'no reason recorded')}")
    for f in meta.get("failures") or []:
        warnings.append(f"{f.get('stage')}: {f.get('error')}")
    warnings.extend(coverage_warnings(summary.get("profile") or {}))
    throughput = summary.get("throughput") or {}
    lat = summary.get("latency_ms") or {}
    run = meta.get("run") or {}
    return {
        "report_schema_version": REPORT_SCHEMA_VERSION,
        "session": {
            "id": session.session_id,
            "path": str(session.path),
            "created_utc": meta.get("created_utc"),
            "tag": meta.get("tag"),
            "error": session.error,
        },
        "model": {
            "name": (meta.get("model") or {}).get("name"),
            "path": (meta.get("model") or {}).get("path"),
            "source": (meta.get("model") or {}).get("source"),
            "sha256": model_meta.get("sha256"),
            "parameter_count": model_meta.get("parameter_count"),
            "node_count": model_meta.get("node_count"),
            "opset": model_meta.get("opset"),
        },
        "backend": {
            "name": (meta.get("backend") or {}).get("name"),
            "provider": (meta.get("backend") or {}).get("provider"),
            "providers_active": (meta.get("backend") or {}).get("providers_active"),
            "batch": (meta.get("run") or {}).get("batch"),
        },
        "status": session.status,
        "summary": {
            "latency_ms": summary.get("latency_ms"),
            "throughput": throughput.get("items_per_s"),
            "iterations_per_s": throughput.get("iterations_per_s"),
            "batch": throughput.get("batch"),
            "measured_iterations": lat.get("count"),
            "measured_wall_s": summary.get("measured_wall_s"),
            "warmup": summary.get("warmup"),
            "noise": summary.get("noise"),
            "profile": summary.get("profile"),
        },
        "top_ops": top,
        "top_op_types": by_type,
        "telemetry": summary.get("telemetry"),
        "worker": summary.get("worker"),
        "requested": {"profile": run.get("profile"), "telemetry": run.get("telemetry")},
        "warnings": warnings,
    }
