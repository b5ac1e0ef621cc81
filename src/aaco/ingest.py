"""Bring kernel traces into a session bundle: import, classify, attribute, measure, write.

The import stage of the pipeline (:mod:`aaco.pipeline`): ``aaco import`` (traces captured
elsewhere, into a new or an existing bundle: :func:`import_new`, :func:`import_into`, which
also run the analyses and render the reports, and need none of the runners: an import does
not load onnx or the model runners) and ``aaco run`` when it captures a trace itself
(``--framework torch``, ``--profile kernels``). :mod:`aaco.pipeline` re-exports them.

The steps are the pipeline of this issue, each a pure analyzer over tables:
:func:`aaco.importers.registry.import_paths` -> :func:`aaco.analysis.kernels.classify_table`
-> :func:`aaco.analysis.attribution.attribute_kernels` / ``kernel_groups`` ->
:func:`aaco.analysis.timeline.derived_metrics`; then every table is written atomically.

Example::

    record = ingest_traces(bundle_dir, [Path("trace.json.gz")])
    record["rows"]["kernels"]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aaco import __version__
from aaco.analysis.att import classify_instructions
from aaco.analysis.attribution import attribute_kernels, attribution_summary, kernel_groups
from aaco.analysis.kernels import classify_table
from aaco.analysis.timeline import derived_metrics
from aaco.diagnose import diagnose_bundle
from aaco.errors import InputError, UsageError
from aaco.importers._lenient import OddValues, summary_line
from aaco.importers.base import TABLE_FIELDS, TraceTables
from aaco.importers.ort_profile import SOURCE as ORT_PROFILE_SOURCE
from aaco.importers.registry import import_paths
from aaco.report.publish import write_reports
from aaco.session.bundle import (
    FORMAT_VERSION,
    STATUS_COMPLETED,
    STATUS_FAILED,
    BundleWriter,
    Session,
    atomic_write_json,
    bundle_lock,
    table_handoff,
    utc_now_iso,
    write_table,
)
from aaco.session.fingerprint import file_sha256
from aaco.session.paths import (
    ATTRIBUTION_SUMMARY_FILE,
    DERIVED_METRICS_FILE,
    IMPORT_META_FILE,
)
from aaco.session.records import add_failure, save_session
from aaco.session.schema import KERNEL_GROUPS, OP_KERNEL_MAP, TABLES
from aaco.stages import stage

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
    elif existing_ops is not None:
        # a trace without ops: the bundle keeps only its own (native) rows, never the ops
        # of an import this one replaces
        if existing_ops.num_rows:
            write_table(bundle / TABLES["ops"].path, existing_ops)
        else:
            (bundle / TABLES["ops"].path).unlink(missing_ok=True)
    write_table(bundle / OP_KERNEL_MAP.path, analyzed.op_map)
    write_table(bundle / KERNEL_GROUPS.path, analyzed.groups)
    atomic_write_json(bundle / ATTRIBUTION_SUMMARY_FILE, analyzed.attribution)
    atomic_write_json(bundle / DERIVED_METRICS_FILE, analyzed.metrics)


def _import_record(
    files: list[dict[str, Any]], analyzed: AnalyzedTrace, seconds: float
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
        "files": files,
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
        "repeated": t.meta.get("repeated", []),
        "warning": _warning_line(summary_line(sources), t.meta.get("repeated") or []),
        "warnings": warnings,
    }


def _warning_line(odd: str | None, repeated: list[str]) -> str | None:
    """The one line ``aaco import`` prints: odd values, and files named more than once."""
    parts = [odd] if odd else []
    if repeated:
        n = len(repeated)
        parts.append(f"{n} file{'s' if n > 1 else ''} named more than once, read once")
    return "; ".join(parts) or None


def ingest_traces(
    bundle_dir: Path,
    paths: Sequence[Path],
    *,
    graph_node_count: int | None = None,
    keep_ops_rows: int | None = None,
    require_events: bool = False,
) -> dict[str, Any]:
    """Import ``paths`` into the bundle folder ``bundle_dir`` (staging or published).

    Writes the trace tables, attribution and derived metrics; returns the import record
    (also written to ``profiler/import.json``). Raises InputError on unreadable traces, and
    with ``require_events`` (``aaco import``) on traces that hold no event at all, before
    anything is written.
    """
    t0 = time.perf_counter()
    with stage("read"):
        tables = import_paths(paths)
    if require_events and tables.event_count == 0:
        names = ", ".join(str(p) for p in paths)
        raise InputError(
            f"{names}: no events to import (no kernels, ops, API calls, copies or annotations)"
        )
    existing = _existing_ops(bundle_dir)
    if existing is not None and keep_ops_rows is not None:
        existing = existing.slice(0, keep_ops_rows)  # drop the rows a replaced import added
    # the files' SHA-256 in a thread while attribution and writing run (hashlib lets go of
    # the GIL): 0.7 s of a 700 MB trace's import otherwise spent after everything else
    with ThreadPoolExecutor(1, thread_name_prefix="aaco-sha256") as pool:
        facts = pool.submit(_file_facts, paths)
        with stage("attribution"):
            analyzed = analyze_trace(tables, graph_node_count=graph_node_count)
        with stage("write tables"):
            _write_analyzed(bundle_dir, analyzed, existing)
        with stage("file hashes"):
            files = facts.result()
    record = _import_record(files, analyzed, time.perf_counter() - t0)
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


# -- aaco import, aaco analyze: the same stages from import / from the analyses -------------


def _session_node_count(session: Session) -> int | None:
    meta = session.model_meta or {}
    count = meta.get("node_count")
    return int(count) if isinstance(count, int) else None


def import_into(session_dir: Path, paths: Sequence[Path], *, replace: bool = False) -> Session:
    """``aaco import --into``: add traces to an existing bundle (import → analyses →
    render); refuses to mix two imports unless ``replace``."""
    session = Session.load(session_dir)  # a clear error for a path that is no bundle
    # one rewrite of a bundle at a time; the tables just written go to the analyses
    with bundle_lock(session.path), table_handoff():
        return _import_into(session.path, paths, replace=replace)


def _import_into(session_dir: Path, paths: Sequence[Path], *, replace: bool) -> Session:
    session = Session.load(session_dir)
    if session.meta.get("imports") and not replace:
        raise UsageError(
            f"{session.path}: already holds an imported trace; pass --replace to replace it"
        )
    meta = dict(session.meta)
    if "native_ops_rows" not in meta:
        ops = session.ops()
        meta["native_ops_rows"] = 0 if ops is None else ops.num_rows
    with stage("ingest"):
        record = ingest_traces(
            session.path,
            paths,
            graph_node_count=_session_node_count(session),
            keep_ops_rows=int(meta["native_ops_rows"]),
            require_events=True,
        )
    if replace:
        meta["imports"] = []
    meta.setdefault("imports", []).append(
        {k: record[k] for k in ("imported_utc", "importers", "events", "rows")}
    )
    if meta.get("kind") == "import":  # a bundle of traces alone: it is named after them
        _describe_traces(meta, paths, record)
    save_session(session.path, meta)
    with stage("analyses"):
        analyze(session.path)
    with stage("reports"):
        return write_reports(session.path)


def import_new(
    paths: Sequence[Path], output: Path, *, tag: str | None = None, argv: list[str] | None = None
) -> Session:
    """``aaco import``: a new bundle under the sessions root ``output`` holding only the
    traces (import → analyses → publish → render)."""
    with table_handoff():  # the analyses and reports get the tables just written
        return _import_new(paths, output, tag=tag, argv=argv)


def _import_new(
    paths: Sequence[Path], output: Path, *, tag: str | None, argv: list[str] | None
) -> Session:
    if not paths:
        raise UsageError("give at least one trace file or directory to import")
    for p in paths:
        if not Path(p).exists():
            raise InputError(f"{p}: no such file or directory")
    writer = BundleWriter(output)
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "aaco_version": __version__,
        "session_id": writer.session_id,
        "kind": "import",
        "created_utc": utc_now_iso(),
        "finished_utc": None,
        "status": STATUS_FAILED,
        "error": None,
        "tag": tag,
        "command_line": list(argv if argv is not None else sys.argv),
        "model": {"name": None, "path": None, "source": "import"},
        "backend": {"name": None, "provider": None},
        "run": {"framework": None, "profile": "imported"},
        "failures": [],
    }
    try:
        with stage("ingest"):
            record = ingest_traces(writer.path, paths, require_events=True)
        meta["status"] = STATUS_COMPLETED
        meta["finished_utc"] = utc_now_iso()
        meta["imports"] = [{k: record[k] for k in ("imported_utc", "importers", "events", "rows")}]
        meta["native_ops_rows"] = 0  # every op row of this bundle came from the import
        _describe_traces(meta, paths, record)
        save_session(writer.path, meta)
        with stage("analyses"):
            analyze(writer.path)  # an analysis that fails is recorded, not raised
    except BaseException:
        # bad input, or Ctrl-C / SIGTERM before the bundle was published: the traces are
        # still where they were, so nothing half-made is kept (no hidden staging folder)
        writer.discard()
        raise
    final = writer.publish()
    with stage("reports"):
        return write_reports(final)


def _describe_traces(meta: dict[str, Any], paths: Sequence[Path], record: dict[str, Any]) -> None:
    """The model, backend and framework fields of an import bundle: the traces it holds."""
    meta.setdefault("run", {})["framework"] = _framework(record)
    names = [Path(p).name for p in paths]
    meta["model"] = {
        "name": ", ".join(names) if len(names) <= 3 else f"{names[0]} +{len(names) - 1}",
        "path": str(Path(paths[0]).resolve()),
        "source": "import",
    }
    meta["backend"] = {"name": ", ".join(record["importers"]) or None, "provider": None}


def _framework(record: dict[str, Any]) -> str | None:
    tools = {str(s.get("tool")) for s in record.get("sources", []) if s.get("tool")}
    return ", ".join(sorted(tools)) or None


def analyze(bundle: Path, auto_calibrate: bool | None = None) -> bool:
    """The analyses stage: every analysis of :func:`aaco.diagnose.default_analyses` over the
    bundle folder ``bundle`` (staging or published). A failure is recorded in
    ``session.json`` (stage ``diagnose``), never raised; returns whether they all ran."""
    try:
        diagnose_bundle(bundle, auto_calibrate=auto_calibrate)
    except Exception as exc:  # an analysis failed: record it, keep the bundle
        add_failure(bundle, "diagnose", f"{type(exc).__name__}: {exc}")
        return False
    return True


def analyze_session(
    path: Path, auto_calibrate: bool | None = None, what_if: Sequence[Any] = ()
) -> Session:
    """``aaco analyze``: run the analyses again over a published bundle (after a new
    calibration, or a newer AACO) and re-render its report copies. ``what_if``:
    :class:`aaco.analysis.critical_path.WhatIf` re-timings of the critical path."""
    session = Session.load(path)
    with bundle_lock(session.path), table_handoff():
        diagnose_bundle(session.path, auto_calibrate=auto_calibrate, what_if=what_if)
        return write_reports(session.path)
