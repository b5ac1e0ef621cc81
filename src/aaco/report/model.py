"""The report model: one JSON-ready dictionary per session, shared by every renderer.

Keys documented in docs/report-json.md are stable: later versions add keys, never rename.
"""

from __future__ import annotations

import copy
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.attribution import outermost_ops
from aaco.analysis.names import OpName, OpNames, op_names
from aaco.analysis.ops import op_aggregates
from aaco.analysis.timeline import kernel_summary
from aaco.report.att import att_key
from aaco.report.critical_path import critical_path_key
from aaco.report.generation import generation_section
from aaco.report.machine import machine_keys
from aaco.report.serving import SERVING_KIND, serving_section, serving_telemetry
from aaco.session.bundle import Session
from aaco.session.paths import (
    ATTRIBUTION_SUMMARY_FILE,
    BOTTLENECK_FILE,
    DERIVED_METRICS_FILE,
    RECOMMENDATIONS_FILE,
    ROOFLINE_FILE,
)

REPORT_SCHEMA_VERSION = 1
TOP_N = 15


def report_ops(ops: pa.Table) -> pa.Table:
    """The operator rows the report ranks: ONNX Runtime nodes when there are any; otherwise
    framework ops at the top of their thread's nesting (``aten::linear``, not the
    ``aten::addmm`` inside it), so that shares add up to 100 % of operator time."""
    sources = set(pc.unique(ops.column("source")).to_pylist())
    if "onnxruntime" in sources:
        return (
            ops.filter(pc.equal(ops.column("source"), "onnxruntime")) if len(sources) > 1 else ops
        )
    rows = pa.array(range(ops.num_rows), pa.int64())
    return ops.filter(pc.equal(outermost_ops(ops), rows))


def ranked_ops(session: Session) -> pa.Table | None:
    """:func:`report_ops` of the session's operators, computed once per loaded session (the
    report model and the HTML page both rank them); None when the bundle has no ops."""
    ops = session.ops()
    if ops is None:
        return None
    return session.memo("report_ops", lambda: report_ops(ops))


def ranked_op_aggregates(session: Session) -> pa.Table | None:
    """Per-node aggregates (:func:`aaco.analysis.ops.op_aggregates`) of :func:`ranked_ops`,
    computed once per loaded session; None when the bundle has no ops."""
    ops = ranked_ops(session)
    if ops is None:
        return None
    return session.memo("report_op_aggregates", lambda: op_aggregates(ops, "node_name"))


def session_op_names(session: Session) -> OpNames:
    """The names every renderer shows for the session's operators: original ONNX nodes where
    the bundle maps ORT's nodes to them (:mod:`aaco.analysis.names`)."""
    return session.memo("op_names", lambda: op_names(session.ops(), session.table("op_costs")))


def _top_ops(
    session: Session, n: int, names: OpNames
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ops = ranked_ops(session)
    aggregates = ranked_op_aggregates(session)
    if ops is None or aggregates is None or ops.num_rows == 0:
        return [], []
    originals: dict[str, list[str] | None] = {}
    sub = ops.select(["node_name", "original_nodes"]).to_pylist()
    for row in sub:
        originals.setdefault(row["node_name"], row["original_nodes"])
    by_node = aggregates.slice(0, n).to_pylist()
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
            **names.get(r["node_name"]).to_json(),
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


def _ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def _kernel_rows(table: pa.Table, key: str, n: int) -> list[dict[str, Any]]:
    rows = table.slice(0, n).to_pylist()
    return [
        {
            key: r[key],
            **(
                {"short_name": r.get("short_name"), "family": r.get("family")}
                if key == "name"
                else {}
            ),
            "total_ms": r["total_ns"] / 1e6,
            "pct": r["share"] * 100.0,
            "calls": r["count"],
            "avg_us": r["mean_ns"] / 1e3,
            "min_us": r["min_ns"] / 1e3,
            "max_us": r["max_ns"] / 1e3,
        }
        for r in rows
    ]


def _op_kernel_groups(session: Session, n: int, names: OpNames) -> list[dict[str, Any]]:
    groups = session.table("kernel_groups")
    if groups is None or groups.num_rows == 0:
        return []
    order = pc.sort_indices(groups, [("gpu_time_ns", "descending")])
    rows = groups.take(order).slice(0, n).to_pylist()
    return [
        {
            "op_name": r["op_name"],
            "op_type": r["op_type"],
            "op_calls": r["op_calls"],
            "kernel_count": r["kernel_count"],
            "kernels_per_call": r["kernels_per_call"],
            "gpu_ms": _ms(r["gpu_time_ns"]),
            "cpu_ms": _ms(r["cpu_time_ns"]),
            "launch_overhead_ms": _ms(r["launch_overhead_ns"]),
            "top_kernel": r["top_kernel"],
            **names.get(r["op_name"] or "").to_json(),
        }
        for r in rows
    ]


#: keys of ``derived_metrics.json`` copied into the report's ``metrics`` object
METRIC_KEYS = (
    "gpu_active_ratio",
    "kar",
    "microkernel_pct",
    "launch_rate_per_s",
    "launch_tax_score",
    "kernel_count",
    "kernels_per_iteration",
)


def kernel_section(
    session: Session, top_n: int = TOP_N, names: OpNames | None = None
) -> dict[str, Any]:
    """Kernel-level keys of the report; empty lists / nulls when the bundle has no trace."""
    kernels = session.table("kernels")
    derived = session.json_file(DERIVED_METRICS_FILE) or {}
    has = kernels is not None and kernels.num_rows > 0
    return {
        "metrics": {k: derived.get(k) for k in METRIC_KEYS} if derived else None,
        "top_kernels": _kernel_rows(kernel_summary(kernels, by="name"), "name", top_n)
        if has and kernels is not None
        else [],
        "kernel_families": _kernel_rows(kernel_summary(kernels, by="family"), "family", 20)
        if has and kernels is not None
        else [],
        "temporal_breakdown": derived.get("temporal_breakdown"),
        "temporal_breakdown_hta": derived.get("temporal_breakdown_hta"),
        "hta_selection": derived.get("hta_selection"),
        "idle_breakdown": derived.get("idle_breakdown"),
        "launch_stats": derived.get("launch_stats"),
        "attribution": session.json_file(ATTRIBUTION_SUMMARY_FILE),
        "top_op_kernels": _op_kernel_groups(
            session, top_n, names if names is not None else session_op_names(session)
        ),
        "trace_window": derived.get("window"),
    }


def _op_iterations(session: Session) -> int | None:
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return None
    return len(pc.unique(ops.column("iteration")).drop_null()) or None


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
    """The ``aaco report --format json`` object (see docs/report-json.md).

    Built once per loaded session (the JSON, text and HTML copies of one bundle share it);
    each caller gets its own copy to edit."""
    model = session.memo(f"report_model:{top_n}", lambda: _build_report(session, top_n))
    return copy.deepcopy(model)


def _build_report(session: Session, top_n: int) -> dict[str, Any]:
    meta = session.meta
    summary = session.summary or {}
    model_meta = session.model_meta or {}
    names = session_op_names(session)
    top, by_type = _top_ops(session, top_n, names)
    warnings = list(summary.get("warnings") or [])
    if session.status != "completed":
        err = session.error or {}
        warnings.insert(0, f"run {session.status}: {err.get('message', 'no reason recorded')}")
    for f in meta.get("failures") or []:
        warnings.append(f"{f.get('stage')}: {f.get('error')}")
    warnings.extend(coverage_warnings(summary.get("profile") or {}))
    serving = serving_section(session)
    if serving is not None:
        if not serving["summary_present"]:
            warnings.append(
                "no serving summary in this bundle (metrics/serving_summary.json): the "
                "benchmark ended before it was written"
            )
        warnings.extend(serving["warnings"])
    throughput = summary.get("throughput") or {}
    lat = summary.get("latency_ms") or {}
    run = meta.get("run") or {}
    return {
        "report_schema_version": REPORT_SCHEMA_VERSION,
        # the keys of a serving benchmark only: a model run's report keeps the keys it had
        # (docs/report-json.md; tests/test_bundle_shape.py compares them)
        **({"kind": SERVING_KIND} if serving is not None else {}),
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
        "op_iterations": _op_iterations(session),
        "top_op_types": by_type,
        "telemetry": summary.get("telemetry") if serving is None else serving_telemetry(session),
        "worker": summary.get("worker"),
        "aaco_process": meta.get("aaco_process"),
        "requested": {"profile": run.get("profile"), "telemetry": run.get("telemetry")},
        **kernel_section(session, top_n, names),
        # a serving benchmark has no model run to diagnose (aaco.diagnose skips it); files
        # an older AACO wrote there anyway are not shown
        **(diagnosis_section(session, top_n, names) if serving is None else _no_diagnosis()),
        **({"serving": serving} if serving is not None else {}),
        # aaco llm run's prefill/decode split; null for aaco llm bench
        **({"generation": generation_section(session)} if serving is not None else {}),
        # GPU telemetry, scheduler evidence and the measurement capsule, when the bundle has
        # them (a bundle written before them keeps the keys it had)
        **machine_keys(session),
        # the causal CPU+GPU critical path, when the bundle has a GPU trace
        **critical_path_key(session),
        # rocprofv3 --att instruction analysis, when imported
        **att_key(session),
        "warnings": warnings,
    }


def _no_diagnosis() -> dict[str, Any]:
    """The diagnosis keys of a bundle that has none."""
    return {"bottleneck": None, "roofline": [], "roofline_summary": None, "recommendations": []}


def _gb(v: Any) -> str:
    return f"{v / 1e9:,.1f}" if isinstance(v, int | float) and v > 0 else "unknown"


def ceilings_lines(summary: dict[str, Any] | None) -> tuple[str | None, list[str]]:
    """The roofline's ceilings in words for every renderer: (headline or None when there
    are no ceilings, notes), from ``metrics/roofline.json``.

    Headline: source and quality, device, the float32 roof and the bandwidth roof of each
    memory level (DRAM only when the ceilings have no levels). Notes: how the ceilings were
    got (a first-run calibration, or why there are none), why operator times are unknown
    on a GPU (``time_note``) and the above-the-roof warning.
    """
    summary = summary or {}
    notes = [
        n
        for n in (summary.get("ceilings_note"), summary.get("time_note"))
        if isinstance(n, str) and n
    ]
    above = (summary.get("above_roof") or {}).get("message")
    if isinstance(above, str) and above:
        notes.append(above)
    ceil = summary.get("ceilings")
    if not isinstance(ceil, dict):
        return None, notes
    source = str(ceil.get("source"))
    quality = [q for q in (ceil.get("mode"), ceil.get("contention")) if q]
    if quality:
        source += ", " + ", ".join(str(q) for q in quality)
    flops = ceil.get("flops_per_s")
    f32 = flops.get("float32") if isinstance(flops, dict) else None
    levels = [lv for lv in ceil.get("memory_levels") or [] if isinstance(lv, dict)]
    if levels:
        memory = "memory roofs " + ", ".join(
            f"{lv.get('name')} {_gb(lv.get('bytes_per_s'))}" for lv in levels
        )
    else:
        memory = f"memory {_gb(ceil.get('bytes_per_s'))}"
    head = f"{source} ({ceil.get('device')}): float32 {_gb(f32)} GFLOP/s, {memory} GB/s"
    return head, notes


def diagnosis_section(
    session: Session, top_n: int = TOP_N, names: OpNames | None = None
) -> dict[str, Any]:
    """``bottleneck``, ``roofline`` (top rows by time), ``roofline_summary`` and
    ``recommendations`` from the bundle's diagnosis files (null / empty when absent).

    Operator rows get ``label`` and ``original_name`` (:mod:`aaco.analysis.names`), also
    in bundles diagnosed before the files carried them."""
    if names is None:
        names = session_op_names(session)
    verdict = session.json_file(BOTTLENECK_FILE)
    summary = session.json_file(ROOFLINE_FILE)
    recs = session.json_file(RECOMMENDATIONS_FILE)
    bottleneck = None
    if isinstance(verdict, dict):
        bottleneck = {
            k: verdict.get(k)
            for k in (
                "bottleneck_class",
                "confidence",
                "score",
                "secondary",
                "top_evidence",
                "missing_evidence",
                "explanation",
                "per_op",
            )
        }
        bottleneck["per_op"] = _name_rows(bottleneck.get("per_op"), names)
    rows: list[dict[str, Any]] = []
    table = session.table("roofline")
    if table is not None and table.num_rows:
        rows = _name_rows(table.slice(0, top_n).to_pylist(), names)
    roof = None
    if isinstance(summary, dict):
        roof = {k: v for k, v in summary.items() if k not in ("points",)}
        if "top_headroom" in roof:
            roof["top_headroom"] = _name_rows(roof["top_headroom"], names)
    return {
        "bottleneck": bottleneck,
        "roofline": rows,
        "roofline_summary": roof,
        "recommendations": recs if isinstance(recs, list) else [],
    }


def _name_rows(rows: Any, names: OpNames) -> Any:
    """Copies of ``rows`` (dicts with a string ``name``) with ``label`` and ``original_name``
    added where they lack them; kernel rows keep their own name as label. Anything but a
    list is returned as it is (a hand-edited file must not crash the report)."""
    if not isinstance(rows, list):
        return rows
    out: list[Any] = []
    for r in rows:
        if isinstance(r, dict) and isinstance(r.get("name"), str) and "label" not in r:
            node = r.get("level", "node") == "node"
            r = {
                **r,
                **(names.get(r["name"]) if node else OpName(r["name"], r["name"], None)).to_json(),
            }
        out.append(r)
    return out
