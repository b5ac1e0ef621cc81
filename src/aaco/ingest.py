"""Bring kernel traces into a session bundle: import, classify, attribute, measure, write.

The import stage of the pipeline (:mod:`aaco.pipeline`): ``aaco import`` (traces captured
elsewhere, into a new or an existing bundle: :func:`aaco.pipeline.import_new`,
:func:`aaco.pipeline.import_into`) and
``aaco run`` when it captures a trace itself (``--framework torch``, ``--profile kernels``).

The steps are the pipeline of this issue, each a pure analyzer over tables:
:func:`aaco.importers.registry.import_paths` -> :func:`aaco.analysis.kernels.classify_table`
-> :func:`aaco.analysis.attribution.attribute_kernels` / ``kernel_groups`` ->
:func:`aaco.analysis.timeline.derived_metrics`; then every table is written atomically.

Example::

    record = ingest_traces(bundle_dir, [Path("trace.json.gz")])
    record["rows"]["kernels"]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aaco.analysis.att import classify_instructions
from aaco.analysis.attribution import attribute_kernels, attribution_summary, kernel_groups
from aaco.analysis.kernels import classify_table
from aaco.analysis.timeline import derived_metrics
from aaco.importers._lenient import OddValues, summary_line
from aaco.importers.base import TABLE_FIELDS, TraceTables
from aaco.importers.ort_profile import SOURCE as ORT_PROFILE_SOURCE
from aaco.importers.registry import import_paths
from aaco.session.bundle import (
    atomic_write_json,
    utc_now_iso,
    write_table,
)
from aaco.session.paths import (
    ATTRIBUTION_SUMMARY_FILE,
    DERIVED_METRICS_FILE,
    IMPORT_META_FILE,
)
from aaco.session.schema import KERNEL_GROUPS, OP_KERNEL_MAP, TABLES

__all__ = [
    "TRACE_TABLES",
    "AnalyzedTrace",
    "analyze_trace",
    "ingest_profile_kernels",
    "ingest_traces",
]

#: tables an import writes (an existing bundle's ``ops`` is extended, the rest replaced)
TRACE_TABLES = ("kernels", "api_calls", "memcpy", "annotations", "kernel_counters")
#: tables an import writes only when it read rows of them, so that a bundle of another
#: import keeps the files (and ``import.json`` rows) it always had
OPTIONAL_TRACE_TABLES = ("att_instructions",)


@dataclass
class AnalyzedTrace:
    """An imported trace with its kernels classified, attributed and measured."""

    tables: TraceTables
    op_map: pa.Table = field(default_factory=OP_KERNEL_MAP.empty)
    groups: pa.Table = field(default_factory=KERNEL_GROUPS.empty)
    attribution: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


def analyze_trace(
    tables: TraceTables,
    *,
    graph_node_count: int | None = None,
    microkernel_threshold_ns: int = 10_000,
) -> AnalyzedTrace:
    """Classify kernels, attribute them to operators and compute the derived metrics."""
    tables.kernels = classify_table(tables.kernels)
    tables.att_instructions = classify_instructions(tables.att_instructions)
    op_map = attribute_kernels(tables.kernels, tables.ops, tables.api_calls, tables.annotations)
    groups = kernel_groups(op_map, tables.ops, tables.api_calls, kernels=tables.kernels)
    metrics = derived_metrics(
        tables.kernels,
        memcpy=tables.memcpy,
        api_calls=tables.api_calls,
        annotations=tables.annotations,
        graph_node_count=graph_node_count,
        microkernel_threshold_ns=microkernel_threshold_ns,
        float_timestamps=_float_timestamps(tables.meta),
    )
    return AnalyzedTrace(
        tables=tables,
        op_map=op_map,
        groups=groups,
        attribution=attribution_summary(op_map),
        metrics=metrics,
    )


def _float_timestamps(meta: dict[str, Any]) -> bool:
    """Whether any imported file wrote a ``ts`` as a JSON float (HTA then rounds to µs)."""
    sources = meta.get("sources")
    parts: list[Any] = sources if isinstance(sources, list) else [meta]
    return any(isinstance(m, dict) and bool((m.get("clock") or {}).get("float_ts")) for m in parts)


def _file_facts(paths: Sequence[Path]) -> list[dict[str, Any]]:
    # aaco.analysis.graph imports onnx (~0.2 s), which an import of traces does not need
    from aaco.analysis.graph import file_sha256

    out = []
    for p in paths:
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            out.append(
                {"path": str(f.resolve()), "bytes": f.stat().st_size, "sha256": file_sha256(f)}
            )
    return out


def _write_analyzed(bundle: Path, analyzed: AnalyzedTrace, existing_ops: pa.Table | None) -> None:
    t = analyzed.tables
    for name in TRACE_TABLES:
        table = getattr(t, name)
        write_table(bundle / TABLES[name].path, TABLES[name].conform(table))
    for name in OPTIONAL_TRACE_TABLES:
        table = getattr(t, name)
        if table.num_rows:
            write_table(bundle / TABLES[name].path, TABLES[name].conform(table))
        else:  # the rows of an import this one replaces
            (bundle / TABLES[name].path).unlink(missing_ok=True)
    if t.ops.num_rows:
        ops = t.ops
        if existing_ops is not None and existing_ops.num_rows:
            ops = pa.concat_tables([existing_ops, TABLES["ops"].conform(ops)])
        write_table(bundle / TABLES["ops"].path, TABLES["ops"].conform(ops))
    write_table(bundle / OP_KERNEL_MAP.path, analyzed.op_map)
    write_table(bundle / KERNEL_GROUPS.path, analyzed.groups)
    atomic_write_json(bundle / ATTRIBUTION_SUMMARY_FILE, analyzed.attribution)
    atomic_write_json(bundle / DERIVED_METRICS_FILE, analyzed.metrics)


def _import_record(
    paths: Sequence[Path], analyzed: AnalyzedTrace, seconds: float
) -> dict[str, Any]:
    t = analyzed.tables
    sources = t.meta.get("sources", [])
    odd = OddValues()
    warnings = []
    for meta in sources:
        odd.merge(meta)
        line = summary_line([meta])
        if line:
            warnings.append(f"{meta.get('path', '?')}: {line}")
    return {
        "imported_utc": utc_now_iso(),
        "files": _file_facts(paths),
        "importers": sorted({str(m.get("importer")) for m in sources}),
        "sources": sources,
        "skipped": t.meta.get("skipped", []),
        "rows": {
            name: getattr(t, name).num_rows
            for name in TABLE_FIELDS
            if name not in OPTIONAL_TRACE_TABLES or getattr(t, name).num_rows
        },
        "events": t.event_count,
        "seconds": round(seconds, 4),
        # odd values the importers read leniently (null) or left out, over all files
        **odd.meta(),
        "warning": summary_line(sources),
        "warnings": warnings,
    }


def ingest_traces(
    bundle_dir: Path,
    paths: Sequence[Path],
    *,
    graph_node_count: int | None = None,
    keep_ops_rows: int | None = None,
) -> dict[str, Any]:
    """Import ``paths`` into the bundle folder ``bundle_dir`` (staging or published).

    Writes the trace tables, attribution and derived metrics; returns the import record
    (also written to ``profiler/import.json``). Raises InputError on unreadable traces,
    before anything is written.
    """
    t0 = time.perf_counter()
    tables = import_paths(paths)
    existing = _existing_ops(bundle_dir)
    if existing is not None and keep_ops_rows is not None:
        existing = existing.slice(0, keep_ops_rows)  # drop the rows a replaced import added
    analyzed = analyze_trace(tables, graph_node_count=graph_node_count)
    _write_analyzed(bundle_dir, analyzed, existing)
    record = _import_record(paths, analyzed, time.perf_counter() - t0)
    atomic_write_json(bundle_dir / IMPORT_META_FILE, record)
    return record


def ingest_profile_kernels(
    bundle_dir: Path, kernels: pa.Table, memcpy: pa.Table, ops: pa.Table
) -> dict[str, Any]:
    """Write the GPU kernels and copies an ONNX Runtime profile recorded (``cat:"Kernel"``
    events of CUDA/ROCm EP builds) into the bundle ``aaco run`` is writing, attributed to
    the profile's nodes (``ops``, already written): the GPU time the roofline uses instead
    of the nodes' host-side launch times. Returns the attribution summary."""
    tables = TraceTables(
        kernels=kernels, memcpy=memcpy, ops=ops, meta={"importer": ORT_PROFILE_SOURCE}
    )
    analyzed = analyze_trace(tables)
    for name in ("kernels", "memcpy"):
        table = getattr(analyzed.tables, name)
        write_table(bundle_dir / TABLES[name].path, TABLES[name].conform(table))
    write_table(bundle_dir / OP_KERNEL_MAP.path, analyzed.op_map)
    write_table(bundle_dir / KERNEL_GROUPS.path, analyzed.groups)
    atomic_write_json(bundle_dir / ATTRIBUTION_SUMMARY_FILE, analyzed.attribution)
    atomic_write_json(bundle_dir / DERIVED_METRICS_FILE, analyzed.metrics)
    return analyzed.attribution


def _existing_ops(bundle_dir: Path) -> pa.Table | None:
    f = bundle_dir / TABLES["ops"].path
    if not f.is_file():
        return None
    return TABLES["ops"].conform(pq.read_table(f))
