"""Read an NVIDIA Nsight Systems SQLite export (``nsys export --type sqlite``) into TraceTables.

Nsight Systems writes one table per data type (NVIDIA's "SQLite Schema Reference"); this reads
the CUDA and NVTX ones, by column name, into the shape the Kineto importer produces, so every
analysis runs on either unchanged:

* ``CUPTI_ACTIVITY_KIND_KERNEL`` -> KERNELS. ``name`` is ``demangledName`` (then
  ``mangledName``, ``shortName``) through ``StringIds``; ``shared_bytes`` =
  ``staticSharedMemory + dynamicSharedMemory``; ``process_id`` from ``globalPid``;
  ``thread_id`` is the launching call's (same process and ``correlationId``).
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``CUPTI_ACTIVITY_KIND_DRIVER`` where an export has it)
  -> API_CALLS. nsys keeps runtime and driver calls in one table and tells them apart by
  ``eventClass``; its CUDA backtrace records repeat a call (same correlation id) to carry a
  stack and are left out. The CUPTI version suffix (``cudaLaunchKernel_v7000``) is dropped,
  as Kineto names the calls.
* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> device-side API_CALLS rows, domain ``cuda_sync``,
  named as Kineto names them (``Event Sync``, ``Stream Wait Event``, ``Stream Sync``,
  ``Context Sync``), with ``device``, ``stream`` and the sync call's correlation id. An event
  sync's ``wait_stream`` / ``wait_correlation_id`` are the stream and correlation id of the
  ``cudaEventRecord`` it waited on (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``): by ``eventSyncId``
  where the export has it, else the latest record of the same event before the sync.
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` -> MEMCPY (direction from ``copyKind``).
* ``NVTX_EVENTS`` push/pop and start/end ranges -> ANNOTATIONS kind ``user``.

Enums (``copyKind``, ``syncType``, ``eventClass``, ``eventType``) are read from the ``ENUM_*``
tables the export carries, by their symbol names; the documented values are the fallback.
Timestamps are integer ns on the capture session's clock and stay so. ``globalPid`` /
``globalTid`` are serialized ids: pid = ``(id >> 24) & 0xFFFFFF``, tid = ``id & 0xFFFFFF``.

Rows are fetched in batches into Arrow columns (never all rows as Python objects), and only
the strings the rows reference are read from ``StringIds``. A value of the wrong type is null
and counted, a row without usable times or name is left out and counted (``meta``); a file
that is SQLite but not an nsys export is not this format; a corrupt one is an InputError.

A ``.nsys-rep`` / ``.qdrep`` report is exported with ``nsys export`` into a temporary folder
when ``nsys`` is on PATH; a report whose ``.sqlite`` export lies beside it is left to that
export (the tracer writes both), so a folder holding the pair is imported once.

Example::

    tables = NsysSqliteImporter().read(Path("profiler/nsys/report.sqlite"))
    tables.api_calls.filter(pc.equal(tables.api_calls["domain"], "cuda_sync"))
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.errors import InputError
from aaco.importers._csv import fill_table, map_values
from aaco.importers._lenient import collecting, note_dropped, note_null, to_int
from aaco.importers.base import Importer, TraceTables
from aaco.importers.kineto import api_kind
from aaco.session.schema import ANNOTATIONS, API_CALLS, KERNELS, MEMCPY

__all__ = ["REPORT_SUFFIXES", "SOURCE", "NsysSqliteImporter", "read_nsys"]

SOURCE = "nsys"
_MAGIC = b"SQLite format 3\x00"
_EXPECTED = "an Nsight Systems SQLite export (nsys export --type sqlite)"
#: the report files ``nsys profile`` writes (``.qdrep`` before 2021.4)
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
_I64 = pa.int64()
_STR = pa.string()
_NULL_I64 = pa.scalar(None, _I64)
#: rows fetched per batch: bounded memory whatever the file's size
_BATCH = 50_000
#: StringIds looked up per query (below SQLite's smallest host-parameter limit, 999)
_IDS_PER_QUERY = 500
#: CUPTI's "not applicable" value of a uint32 field (CUPTI_SYNCHRONIZATION_INVALID_VALUE)
_INVALID_U32 = 0xFFFFFFFF

_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
_SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_NVTX = "NVTX_EVENTS"

# Documented enum values, used where the export lacks its ENUM_* table. copyKind and syncType
# are CUPTI's CUpti_ActivityMemcpyKind and CUpti_ActivitySynchronizationType (the symbols
# ENUM_CUDA_MEMCPY_OPER / ENUM_CUPTI_SYNC_TYPE carry, prefix dropped); memKind is
# CUpti_ActivityMemoryKind as ENUM_CUDA_MEM_KIND labels it.
_COPY_KINDS = {0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD",
               7: "DTOA", 8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "UVM_HTOD", 12: "UVM_DTOH",
               13: "UVM_DTOD"}  # fmt: skip
_SYNC_TYPES = {0: "UNKNOWN", 1: "EVENT_SYNCHRONIZE", 2: "STREAM_WAIT_EVENT",
               3: "STREAM_SYNCHRONIZE", 4: "CONTEXT_SYNCHRONIZE"}  # fmt: skip
_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
              5: "Device Static", 6: "Managed Static", 7: "Unknown"}  # fmt: skip
# ENUM_NSYS_EVENT_CLASS / ENUM_NSYS_EVENT_TYPE as exports write them (nsys 2024.6)
_EVENT_CLASSES = {0: "TRACE_PROCESS_EVENT_CUDA_RUNTIME", 1: "TRACE_PROCESS_EVENT_CUDA_DRIVER",
                  67: "TRACE_PROCESS_EVENT_CUDABACKTRACE"}  # fmt: skip
_EVENT_TYPES = {34: "NvtxMark", 59: "NvtxPushPopRange", 60: "NvtxStartEndRange"}

# An array is device memory, a unified-memory migration moves between host and device: the
# schema's five directions cover every CUPTI kind.
_DIRECTION = {"HTOD": "HtoD", "DTOH": "DtoH", "HTOA": "HtoD", "ATOH": "DtoH", "ATOA": "DtoD",
              "ATOD": "DtoD", "DTOA": "DtoD", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP",
              "UVM_HTOD": "HtoD", "UVM_DTOH": "DtoH", "UVM_DTOD": "DtoD"}  # fmt: skip
# Kineto's names of the CUPTI sync types (libkineto syncTypeString)
_SYNC_NAMES = {
    "EVENT_SYNCHRONIZE": "Event Sync",
    "STREAM_WAIT_EVENT": "Stream Wait Event",
    "STREAM_SYNCHRONIZE": "Stream Sync",
    "CONTEXT_SYNCHRONIZE": "Context Sync",
}
_EVENT_SYNCS = frozenset({"Event Sync", "Stream Wait Event"})
_NVTX_RANGE = re.compile(r"Nvtx\w*(PushPop|StartEnd)Range")
_VERSION_SUFFIX = r"_v\d+$"
_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_", "META_DATA_", "ENUM_NSYS_", _NVTX)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160]


def _text(raw: bytes) -> str:
    # SQLite does not check that TEXT is UTF-8; an odd byte must not cost the file
    return raw.decode("utf-8", "replace")


def _connect(path: Path) -> sqlite3.Connection:
    # a URI keeps the file read-only; as_uri escapes '?' and '#' in the path
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    con.text_factory = _text
    return con


def _objects(con: sqlite3.Connection) -> set[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return {r[0] for r in rows if isinstance(r[0], str)}


def _is_nsys(objs: set[str]) -> bool:
    """nsys always writes ``StringIds``; with it, one of its own table families."""
    return "StringIds" in objs and any(o.startswith(_PREFIXES) for o in objs)


def _nsys_objects(path: Path) -> set[str] | None:
    """The tables of ``path`` when it is an nsys SQLite export, else None (never raises)."""
    try:
        with path.open("rb") as f:
            if f.read(16) != _MAGIC:
                return None
        con = _connect(path)
        try:
            objs = _objects(con)
        finally:
            con.close()
    except (OSError, ValueError, sqlite3.Error):
        return None
    return objs if _is_nsys(objs) else None


def _export_beside(path: Path) -> Path | None:
    """The ``.sqlite`` export ``nsys profile --export=sqlite`` wrote next to a report."""
    candidate = path.with_suffix(".sqlite")
    return candidate if candidate != path and _nsys_objects(candidate) is not None else None


# --------------------------------------------------------------------------- columns


def _ints(values: Sequence[Any], field: str | None) -> pa.Array:
    """An integer column; a value that is not an integer (SQLite is untyped) is null, counted
    as an odd value of ``field`` (not counted where ``field`` is None).

    Only ints take Arrow's fast path: it would silently truncate a float (1.5 -> 1).
    """
    types = set(map(type, values))
    if types <= {int, type(None)}:
        try:
            return pa.array(values, type=_I64)
        except (pa.ArrowInvalid, OverflowError):
            pass
    out = [None if isinstance(v, (bytes, bool)) else to_int(v) for v in values]
    if field is not None:
        bad = sum(1 for v, o in zip(values, out, strict=True) if o is None and v is not None)
        note_null(field, bad)
    return pa.array(out, type=_I64)


def _texts(values: Sequence[Any]) -> pa.Array:
    out = [
        v if v is None or isinstance(v, str) else _text(v) if isinstance(v, bytes) else str(v)
        for v in values
    ]
    return pa.array(out, type=_STR)


def _columns_of(con: sqlite3.Connection, table: str) -> dict[str, str]:
    """Column names of ``table``, lower-cased -> as declared (SQLite matches them so)."""
    rows = con.execute(f'PRAGMA table_info("{table}")').fetchall()
    return {str(r[1]).lower(): str(r[1]) for r in rows}


def _scan(
    con: sqlite3.Connection,
    table: str,
    ints: Iterable[str] = (),
    texts: Iterable[str] = (),
    where: str = "",
    params: Sequence[Any] = (),
) -> tuple[dict[str, pa.Array], int]:
    """The named columns of ``table`` as Arrow arrays (a column the table lacks is all null),
    and the row count. Rows are fetched in batches, so memory holds the columns only."""
    declared = _columns_of(con, table)
    kinds = {c: "int" for c in ints} | {c: "text" for c in texts}
    present = [c for c in kinds if c.lower() in declared]
    chunks: dict[str, list[pa.Array]] = {c: [] for c in present}
    n = 0
    if present:
        select = ", ".join(f'"{declared[c.lower()]}"' for c in present)
        cur = con.execute(f'SELECT {select} FROM "{table}" {where}', params)
        while rows := cur.fetchmany(_BATCH):
            n += len(rows)
            for name, values in zip(present, zip(*rows, strict=True), strict=True):
                if kinds[name] == "int":
                    # an unusable time drops its row, which is counted as such
                    field = None if name in ("start", "end") else f"{table}.{name}"
                    chunks[name].append(_ints(values, field))
                else:
                    chunks[name].append(_texts(values))
    out: dict[str, pa.Array] = {}
    for name, kind in kinds.items():
        typ = _I64 if kind == "int" else _STR
        parts = chunks.get(name)
        if parts is None:
            out[name] = pa.nulls(n, typ)
        elif not parts:
            out[name] = pa.array([], typ)
        else:
            out[name] = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
    return out, n


def _keep(cols: dict[str, pa.Array], mask: pa.Array, reason: str) -> dict[str, pa.Array]:
    """The rows where ``mask`` holds; the others are counted as dropped for ``reason``."""
    mask = pc.fill_null(mask, False)
    kept = int(pc.sum(mask).as_py() or 0)
    n = len(mask)
    if kept == n:
        return cols
    note_dropped(reason, n - kept)
    return {k: v.filter(mask) for k, v in cols.items()}


def _timed(cols: dict[str, pa.Array], table: str) -> dict[str, pa.Array]:
    """Rows with an integer start and end, end >= start (others dropped and counted)."""
    start, end = cols["start"], cols["end"]
    present = pc.and_(pc.is_valid(start), pc.is_valid(end))
    cols = _keep(cols, present, f"{table}: start/end missing or not a number")
    return _keep(cols, pc.greater_equal(cols["end"], cols["start"]), f"{table}: end before start")


def _pid(global_id: pa.Array) -> pa.Array:
    """OS process id of a serialized nsys ``globalPid`` / ``globalTid`` (bits 24-47)."""
    return pc.bit_wise_and(pc.shift_right(global_id, 24), 0xFFFFFF)


def _tid(global_tid: pa.Array) -> pa.Array:
    """OS thread id of a serialized nsys ``globalTid`` (bits 0-23)."""
    return pc.bit_wise_and(global_tid, 0xFFFFFF)


def _strings(con: sqlite3.Connection, ids: pa.Array, field: str) -> pa.Array:
    """``StringIds.value`` of each id (null where the id is null or names no string, counted).

    Only the distinct ids the rows use are read, a few hundred per query.
    """
    uniq = pc.unique(ids.drop_null())
    wanted = [int(v) for v in uniq.to_pylist()]
    found: dict[int, str | None] = {}
    for i in range(0, len(wanted), _IDS_PER_QUERY):
        part = wanted[i : i + _IDS_PER_QUERY]
        marks = ",".join("?" * len(part))
        for sid, value in con.execute(
            f"SELECT id, value FROM StringIds WHERE id IN ({marks})", part
        ):
            if type(sid) is int:
                found[sid] = value if isinstance(value, str) else None
    values = pa.array([found.get(s) for s in wanted], type=_STR)
    out = values.take(pc.index_in(ids, value_set=uniq))
    note_null(field, out.null_count - ids.null_count)
    return out


def _valid(arr: pa.Array) -> np.ndarray:
    """The validity mask of an Arrow array as a numpy bool array."""
    mask: np.ndarray = pc.is_valid(arr).to_numpy(zero_copy_only=False)
    return mask


def _as_numpy(arr: pa.Array, null: int = -1) -> np.ndarray:
    """An int64 Arrow array as numpy, nulls as ``null``."""
    filled: np.ndarray = pc.fill_null(arr, null).to_numpy(zero_copy_only=False)
    return filled.astype(np.int64, copy=False)


# --------------------------------------------------------------------------- enums


class _Enums:
    """The export's own enum tables (id -> symbol name, id -> label), documented fallbacks."""

    def __init__(self, con: sqlite3.Connection, objs: set[str]) -> None:
        self.copy_kinds = self._names(
            con, objs, "ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_"
        ) or dict(_COPY_KINDS)
        self.sync_types = self._names(
            con, objs, "ENUM_CUPTI_SYNC_TYPE", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_"
        ) or dict(_SYNC_TYPES)
        self.mem_kinds = self._names(con, objs, "ENUM_CUDA_MEM_KIND", "", "label") or dict(
            _MEM_KINDS
        )
        self.event_classes = self._names(con, objs, "ENUM_NSYS_EVENT_CLASS", "") or dict(
            _EVENT_CLASSES
        )
        self.event_types = self._names(con, objs, "ENUM_NSYS_EVENT_TYPE", "") or dict(_EVENT_TYPES)
        self.from_file = sorted(
            t
            for t in (
                "ENUM_CUDA_MEMCPY_OPER",
                "ENUM_CUPTI_SYNC_TYPE",
                "ENUM_CUDA_MEM_KIND",
                "ENUM_NSYS_EVENT_CLASS",
                "ENUM_NSYS_EVENT_TYPE",
            )
            if t in objs
        )

    @staticmethod
    def _names(
        con: sqlite3.Connection, objs: set[str], table: str, prefix: str, column: str = "name"
    ) -> dict[int, str]:
        if table not in objs or column not in _columns_of(con, table):
            return {}
        out: dict[int, str] = {}
        for key, value in con.execute(f'SELECT id, "{column}" FROM "{table}"'):
            if type(key) is int and isinstance(value, str):
                out[key] = value.removeprefix(prefix)
        return out

    @staticmethod
    def ids(table: Mapping[int, str], accept: Callable[[str], bool]) -> list[int]:
        return sorted(k for k, v in table.items() if accept(v))


# --------------------------------------------------------------------------- tables


def _api_calls(
    con: sqlite3.Connection, objs: set[str], enums: _Enums
) -> tuple[pa.Table, dict[str, int]]:
    """Host runtime/driver calls; also how many backtrace records were left out."""
    parts: list[pa.Table] = []
    skipped: dict[str, int] = {}
    classes = enums.event_classes
    backtrace = enums.ids(classes, lambda v: "BACKTRACE" in v)
    for table in (_RUNTIME, _DRIVER):
        if table not in objs:
            continue
        where, params = "", list(backtrace)
        if backtrace and "eventclass" in _columns_of(con, table):
            marks = ",".join("?" * len(params))
            skipped[table] = con.execute(
                f'SELECT COUNT(*) FROM "{table}" WHERE eventClass IN ({marks})', params
            ).fetchone()[0]
            where = f"WHERE eventClass IS NULL OR eventClass NOT IN ({marks})"
        else:
            params = []
        cols, _ = _scan(
            con,
            table,
            ints=("start", "end", "eventClass", "globalTid", "correlationId", "nameId"),
            where=where,
            params=params,
        )
        cols = _timed(cols, table)
        cols["name"] = _strings(con, cols["nameId"], f"{table}.nameId")
        cols = _keep(cols, pc.is_valid(cols["name"]), f"{table}: name missing")
        name = pc.replace_substring_regex(cols["name"], _VERSION_SUFFIX, "")
        n = len(name)
        domain = _domains(table, cols["eventClass"], name, classes)
        parts.append(
            fill_table(
                Path(table),
                API_CALLS,
                n,
                {
                    "source": SOURCE,
                    "domain": domain,
                    "name": name,
                    "kind": map_values(name, api_kind, _STR),
                    "process_id": _pid(cols["globalTid"]),
                    "thread_id": _tid(cols["globalTid"]),
                    "start_ns": cols["start"],
                    "end_ns": cols["end"],
                    "dur_ns": pc.subtract(cols["end"], cols["start"]),
                    "correlation_id": cols["correlationId"],
                },
            )
        )
    table = pa.concat_tables(parts) if parts else API_CALLS.empty()
    return table, {k: int(v) for k, v in skipped.items() if v}


def _domains(table: str, event_class: pa.Array, name: pa.Array, classes: Mapping[int, str]) -> Any:
    """``cuda_driver`` for driver calls (by ``eventClass``, else by a ``cu`` name), else
    ``cuda_runtime``."""
    if table == _DRIVER:
        return "cuda_driver"
    by_class = [classes.get(c) for c in pc.unique(event_class.drop_null()).to_pylist()]
    if by_class and all(c is not None and c.endswith(("CUDA_RUNTIME", "CUDA_DRIVER"))
                        for c in by_class):  # fmt: skip
        driver = [k for k, v in classes.items() if v.endswith("CUDA_DRIVER")]
        is_driver = pc.is_in(event_class, value_set=pa.array(driver, _I64))
        return pc.if_else(pc.fill_null(is_driver, False), "cuda_driver", "cuda_runtime")
    return map_values(
        name,
        lambda s: (
            "cuda_driver" if s.startswith("cu") and not s.startswith("cuda") else "cuda_runtime"
        ),
        _STR,
    )


def _event_links(
    con: sqlite3.Connection, objs: set[str], syncs: dict[str, pa.Array], event_sync: np.ndarray
) -> tuple[pa.Array, pa.Array]:
    """(stream, correlation id) of the event record each event sync waited on, null where
    unknown: the record with the sync's ``eventSyncId`` (same process) where both tables
    carry one, else the latest record of the same ``eventId`` in the same process before the
    sync (correlation ids grow with every API call of a process)."""
    n = len(event_sync)
    wait_stream = np.full(n, -1, dtype=np.int64)
    wait_corr = np.full(n, -1, dtype=np.int64)
    found = np.zeros(n, dtype=bool)
    if _EVENT not in objs or not event_sync.any():
        return pa.nulls(n, _I64), pa.nulls(n, _I64)
    rec, _ = _scan(
        con,
        _EVENT,
        ints=("streamId", "correlationId", "globalPid", "eventId", "eventSyncId"),
    )
    r_pid = _as_numpy(_pid(rec["globalPid"]))
    r_stream, r_corr = _as_numpy(rec["streamId"]), _as_numpy(rec["correlationId"])
    s_pid = _as_numpy(_pid(syncs["globalPid"]))
    s_corr = _as_numpy(syncs["correlationId"])

    def link(r_key: np.ndarray, r_ok: np.ndarray, s_key: np.ndarray, s_ok: np.ndarray,
             before: bool) -> None:  # fmt: skip
        # records sorted by (pid, key, corr); a sync finds its match by binary search
        dtype = [("pid", "i8"), ("key", "i8"), ("corr", "i8")]
        rows = np.flatnonzero(r_ok)
        recs = np.empty(rows.size, dtype=dtype)
        recs["pid"], recs["key"], recs["corr"] = r_pid[rows], r_key[rows], r_corr[rows]
        order = np.argsort(recs, order=("pid", "key", "corr"), kind="stable")
        recs, rows = recs[order], rows[order]
        want = np.flatnonzero(s_ok & event_sync & ~found)
        if not rows.size or not want.size:
            return
        query = np.empty(want.size, dtype=dtype)
        query["pid"], query["key"] = s_pid[want], s_key[want]
        # the latest record before the sync, or (by eventSyncId) the last one with that id
        query["corr"] = s_corr[want] if before else np.iinfo(np.int64).max
        pos = np.searchsorted(recs, query, side="left") - 1
        hit = pos >= 0
        pos = np.where(hit, pos, 0)
        hit &= (recs["pid"][pos] == query["pid"]) & (recs["key"][pos] == query["key"])
        idx, src = want[hit], rows[pos[hit]]
        wait_stream[idx], wait_corr[idx] = r_stream[src], r_corr[src]
        found[idx] = True

    r_esid, s_esid = rec["eventSyncId"], syncs["eventSyncId"]
    if r_esid.null_count < len(r_esid) and s_esid.null_count < len(s_esid):
        link(_as_numpy(r_esid), _valid(r_esid), _as_numpy(s_esid), _valid(s_esid), before=False)
    r_event, s_event = _as_numpy(rec["eventId"]), _as_numpy(syncs["eventId"])
    r_ok = (r_event >= 0) & (r_event != _INVALID_U32) & (r_corr >= 0)
    s_ok = (s_event >= 0) & (s_event != _INVALID_U32) & (s_corr >= 0)
    link(r_event, r_ok, s_event, s_ok, before=True)
    # a record whose stream or correlation is unknown (or CUPTI's invalid value) names none
    stream_ok = found & (wait_stream >= 0) & (wait_stream != _INVALID_U32)
    corr_ok = found & (wait_corr >= 0)
    return (
        pa.array(wait_stream, _I64, mask=~stream_ok),
        pa.array(wait_corr, _I64, mask=~corr_ok),
    )


def _syncs(con: sqlite3.Connection, objs: set[str], enums: _Enums) -> pa.Table:
    """Device-side synchronization records as Kineto's ``cuda_sync`` API_CALLS rows."""
    if _SYNC not in objs:
        return API_CALLS.empty()
    cols, _ = _scan(
        con,
        _SYNC,
        ints=("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType",
              "eventId", "eventSyncId"),
    )  # fmt: skip
    cols = _timed(cols, _SYNC)
    n = len(cols["start"])
    names = map_values(
        cols["syncType"],
        lambda t: _SYNC_NAMES.get(enums.sync_types.get(t, "") if t is not None else "",
                                  "Unknown Sync"),
        _STR,
    )  # fmt: skip
    event_sync: np.ndarray = pc.is_in(names, value_set=pa.array(sorted(_EVENT_SYNCS))).to_numpy(
        zero_copy_only=False
    )
    wait_stream, wait_corr = _event_links(con, objs, cols, event_sync)
    # CUPTI's "no stream" (context and event syncs) as -1, as Kineto writes it: the row stays
    # a device-side one (host calls are the rows without a stream)
    stream = cols["streamId"]
    stream = pc.if_else(pc.equal(stream, _INVALID_U32), -1, stream)
    stream = pc.fill_null(stream, -1)
    return fill_table(
        Path(_SYNC),
        API_CALLS,
        n,
        {
            "source": SOURCE,
            "domain": "cuda_sync",
            "name": names,
            "kind": "sync",
            "process_id": _pid(cols["globalPid"]),
            "start_ns": cols["start"],
            "end_ns": cols["end"],
            "dur_ns": pc.subtract(cols["end"], cols["start"]),
            "correlation_id": cols["correlationId"],
            "device": cols["deviceId"],
            "stream": stream,
            "wait_stream": wait_stream,
            "wait_correlation_id": wait_corr,
        },
    )


def _launch_threads(api: pa.Table, pid: pa.Array, corr: pa.Array) -> pa.Array:
    """Thread id of the launch call with the same process and correlation id, else null."""
    n = len(corr)
    launches = api.filter(pc.equal(api["kind"], "launch"))
    if not n or not launches.num_rows:
        return pa.nulls(n, _I64)
    a_key = _as_numpy(launches["process_id"].combine_chunks()) * (1 << 32) + _as_numpy(
        launches["correlation_id"].combine_chunks()
    )
    a_tid = _as_numpy(launches["thread_id"].combine_chunks())
    a_corr = _as_numpy(launches["correlation_id"].combine_chunks())
    # CUPTI correlation ids are uint32: the key packs the pid above them
    a_ok = _valid(launches["process_id"].combine_chunks()) & (a_corr >= 0) & (a_corr < 1 << 32)
    keys, tids = a_key[a_ok], a_tid[a_ok]
    order = np.argsort(keys, kind="stable")
    keys, tids = keys[order], tids[order]
    k_key = _as_numpy(pid) * (1 << 32) + _as_numpy(corr)
    k_corr = _as_numpy(corr)
    k_ok = _valid(pid) & (k_corr >= 0) & (k_corr < 1 << 32)
    pos = np.minimum(np.searchsorted(keys, k_key), max(keys.size - 1, 0))
    hit = k_ok & (keys.size > 0)
    if keys.size:
        hit &= keys[pos] == k_key
    out = np.where(hit, tids[pos] if keys.size else -1, -1)
    return pa.array(out, _I64, mask=~(hit & (out >= 0)))


def _kernels(con: sqlite3.Connection, api: pa.Table) -> pa.Table:
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    cols, _ = _scan(
        con,
        _KERNEL,
        ints=("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
              "demangledName", "shortName", "mangledName", "registersPerThread",
              "staticSharedMemory", "dynamicSharedMemory", *dims),
    )  # fmt: skip
    cols = _timed(cols, _KERNEL)
    name = pc.coalesce(
        *(_strings(con, cols[c], f"{_KERNEL}.{c}")
          for c in ("demangledName", "mangledName", "shortName"))
    )  # fmt: skip
    cols["name"] = name
    cols = _keep(cols, pc.is_valid(name), f"{_KERNEL}: name missing")
    n = len(cols["name"])
    pid = _pid(cols["globalPid"])
    return fill_table(
        Path(_KERNEL),
        KERNELS,
        n,
        {
            "source": SOURCE,
            "name": cols["name"],
            "start_ns": cols["start"],
            "end_ns": cols["end"],
            "dur_ns": pc.subtract(cols["end"], cols["start"]),
            "time_is_gpu": True,
            "device": cols["deviceId"],
            "stream": cols["streamId"],
            "correlation_id": cols["correlationId"],
            "process_id": pid,
            "thread_id": _launch_threads(api, pid, cols["correlationId"]),
            "grid_x": cols["gridX"],
            "grid_y": cols["gridY"],
            "grid_z": cols["gridZ"],
            "block_x": cols["blockX"],
            "block_y": cols["blockY"],
            "block_z": cols["blockZ"],
            "registers": cols["registersPerThread"],
            "shared_bytes": pc.add(cols["staticSharedMemory"], cols["dynamicSharedMemory"]),
        },
    )


def _copy_names(
    enums: _Enums, kind: pa.Array, src: pa.Array, dst: pa.Array
) -> tuple[pa.Array, pa.Array]:
    """(name, direction) of each copy: Kineto's spelling, ``Memcpy HtoD (Pageable -> Device)``."""
    k, s, d = _as_numpy(kind), _as_numpy(src), _as_numpy(dst)
    # ids beyond any enum map to "unknown"; folding three small ids into one key
    k, s, d = (np.where((a >= 0) & (a < 1 << 20), a, -1) + 1 for a in (k, s, d))
    combo = (k << 42) | (s << 21) | d
    uniq, inverse = np.unique(combo, return_inverse=True)
    names: list[str] = []
    kinds: list[str] = []
    for key in uniq.tolist():
        ck, sk, dk = (
            (key >> 42) - 1,
            ((key >> 21) & ((1 << 21) - 1)) - 1,
            (key & ((1 << 21) - 1)) - 1,
        )
        sym = enums.copy_kinds.get(ck, "") if ck >= 0 else ""
        direction = _DIRECTION.get(sym, "unknown")
        short = sym.removeprefix("UVM_")
        short = f"{short[0]}to{short[-1]}" if len(short) == 4 and short[1:3] == "TO" else "Unknown"
        name = f"Memcpy {short}"
        mem = [enums.mem_kinds.get(x) for x in (sk, dk)]
        if mem[0] and mem[1]:
            name += f" ({mem[0]} -> {mem[1]})"
        names.append(name)
        kinds.append(direction)
    idx = pa.array(inverse.reshape(-1).astype(np.int64))
    return pa.array(names, _STR).take(idx), pa.array(kinds, _STR).take(idx)


def _copies(con: sqlite3.Connection, objs: set[str], enums: _Enums) -> pa.Table:
    parts: list[pa.Table] = []
    common = ("start", "end", "deviceId", "streamId", "correlationId", "bytes")
    if _MEMCPY in objs:
        cols, _ = _scan(
            con, _MEMCPY, ints=(*common, "copyKind", "srcKind", "dstKind", "srcDeviceId",
                                "dstDeviceId")
        )  # fmt: skip
        cols = _timed(cols, _MEMCPY)
        n = len(cols["start"])
        names, kinds = _copy_names(enums, cols["copyKind"], cols["srcKind"], cols["dstKind"])
        peer = pc.equal(kinds, "PtoP")
        parts.append(
            fill_table(
                Path(_MEMCPY),
                MEMCPY,
                n,
                {
                    "source": SOURCE,
                    "name": names,
                    "kind": kinds,
                    "bytes": cols["bytes"],
                    "start_ns": cols["start"],
                    "end_ns": cols["end"],
                    "dur_ns": pc.subtract(cols["end"], cols["start"]),
                    "device": cols["deviceId"],
                    "stream": cols["streamId"],
                    # CUPTI fills the source/destination devices of peer copies only
                    "src_device": pc.if_else(peer, cols["srcDeviceId"], _NULL_I64),
                    "dst_device": pc.if_else(peer, cols["dstDeviceId"], _NULL_I64),
                    "correlation_id": cols["correlationId"],
                },
            )
        )
    if _MEMSET in objs:
        cols, _ = _scan(con, _MEMSET, ints=(*common, "memKind"))
        cols = _timed(cols, _MEMSET)
        n = len(cols["start"])
        names = map_values(
            cols["memKind"],
            lambda m: f"Memset ({enums.mem_kinds[m]})" if m in enums.mem_kinds else "Memset",
            _STR,
        )
        parts.append(
            fill_table(
                Path(_MEMSET),
                MEMCPY,
                n,
                {
                    "source": SOURCE,
                    "name": names,
                    "kind": "memset",
                    "bytes": cols["bytes"],
                    "start_ns": cols["start"],
                    "end_ns": cols["end"],
                    "dur_ns": pc.subtract(cols["end"], cols["start"]),
                    "device": cols["deviceId"],
                    "stream": cols["streamId"],
                    "correlation_id": cols["correlationId"],
                },
            )
        )
    return pa.concat_tables(parts) if parts else MEMCPY.empty()


def _annotations(con: sqlite3.Connection, objs: set[str], enums: _Enums) -> pa.Table:
    """NVTX push/pop and start/end ranges (marks and domain records are not ranges)."""
    if _NVTX not in objs:
        return ANNOTATIONS.empty()
    ranges = enums.ids(enums.event_types, lambda v: _NVTX_RANGE.fullmatch(v) is not None)
    if not ranges:
        return ANNOTATIONS.empty()
    cols, _ = _scan(
        con,
        _NVTX,
        ints=("start", "end", "globalTid", "textId"),
        texts=("text",),
        where=f"WHERE eventType IN ({','.join('?' * len(ranges))})",
        params=ranges,
    )
    cols = _keep(cols, pc.is_valid(cols["end"]), f"{_NVTX}: range without an end")
    cols = _timed(cols, _NVTX)
    name = pc.coalesce(cols["text"], _strings(con, cols["textId"], f"{_NVTX}.textId"))
    cols["name"] = name
    cols = _keep(cols, pc.is_valid(name), f"{_NVTX}: range without text")
    n = len(cols["name"])
    return fill_table(
        Path(_NVTX),
        ANNOTATIONS,
        n,
        {
            "source": SOURCE,
            "kind": "user",
            "name": cols["name"],
            "process_id": _pid(cols["globalTid"]),
            "thread_id": _tid(cols["globalTid"]),
            "start_ns": cols["start"],
            "dur_ns": pc.subtract(cols["end"], cols["start"]),
        },
    )


def _key_values(con: sqlite3.Connection, objs: set[str], table: str) -> dict[str, str]:
    if table not in objs or not {"name", "value"} <= set(_columns_of(con, table)):
        return {}
    return {
        str(k): str(v)
        for k, v in con.execute(f'SELECT name, value FROM "{table}"')
        if isinstance(k, str) and v is not None
    }


def _devices(con: sqlite3.Connection, objs: set[str]) -> list[dict[str, Any]]:
    """TARGET_INFO_GPU in the shape of Kineto's ``deviceProperties`` (read by
    :func:`aaco.session.devices.trace_gpus`)."""
    table = "TARGET_INFO_GPU"
    if table not in objs:
        return []
    have = _columns_of(con, table)
    fields = {"id": "id", "name": "name", "computeMajor": "computeMajor",
              "computeMinor": "computeMinor", "numSms": "smCount",
              "totalGlobalMem": "totalMemory", "uuid": "uuid", "busLocation": "busLocation",
              "cuDevice": "cuDevice"}  # fmt: skip
    keep = {k: v for k, v in fields.items() if v.lower() in have}
    if not keep:
        return []
    select = ", ".join(f'"{have[v.lower()]}"' for v in keep.values())
    out: list[dict[str, Any]] = []
    for row in con.execute(f'SELECT {select} FROM "{table}"').fetchmany(1024):
        d = {k: v for k, v in zip(keep, row, strict=True) if type(v) in (int, str) or v is None}
        out.append(d)
    return out


def _session_start(con: sqlite3.Connection, objs: set[str]) -> int | None:
    table = "TARGET_INFO_SESSION_START_TIME"
    if table not in objs or "utcepochns" not in _columns_of(con, table):
        return None
    row = con.execute(f'SELECT utcEpochNs FROM "{table}"').fetchone()
    return row[0] if row is not None and type(row[0]) is int else None


def read_nsys(path: Path, label: Path | None = None) -> TraceTables:
    """Read an nsys SQLite export (or, through ``nsys export``, a ``.nsys-rep`` report).

    ``label`` is the file named in messages (the report an export was made from).
    """
    path = Path(path)
    shown = label or path
    try:
        with path.open("rb") as f:
            magic = f.read(16)
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{shown}: is a directory, expected {_EXPECTED}") from None
    except OSError as exc:
        raise InputError(f"{shown}: unreadable ({exc.strerror}), expected {_EXPECTED}") from None
    if magic != _MAGIC:
        if label is None and path.suffix.lower() in REPORT_SUFFIXES:
            return _read_report(path)
        raise InputError(f"{shown}: not an SQLite database, expected {_EXPECTED}")
    try:
        con = _connect(path)
    except sqlite3.Error as exc:
        raise InputError(f"{shown}: cannot open ({_one_line(exc)}), expected {_EXPECTED}") from None
    out = TraceTables()
    try:
        with collecting() as odd:
            objs = _objects(con)
            if not _is_nsys(objs):
                raise InputError(f"{shown}: no Nsight Systems tables, expected {_EXPECTED}")
            enums = _Enums(con, objs)
            api, backtraces = _api_calls(con, objs, enums)
            syncs = _syncs(con, objs, enums)
            if _KERNEL in objs:
                out.kernels = _kernels(con, api)
            out.api_calls = pa.concat_tables([api, syncs]) if syncs.num_rows else api
            out.memcpy = _copies(con, objs, enums)
            out.annotations = _annotations(con, objs, enums)
            export = _key_values(con, objs, "META_DATA_EXPORT")
            devices = _devices(con, objs)
            epoch = _session_start(con, objs)
    except (sqlite3.Error, UnicodeDecodeError, OverflowError) as exc:
        # a corrupt page surfaces on whichever query first reads it
        raise InputError(
            f"{shown}: corrupt or unreadable database ({_one_line(exc)}), expected {_EXPECTED}"
        ) from None
    except MemoryError:
        raise InputError(f"{shown}: trace too large for memory") from None
    finally:
        con.close()
    out.meta = {
        "tool": "nsys",
        "format": "nsys-sqlite",
        "files": [str(shown)],
        "product_version": export.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": export.get("EXPORT_SCHEMA_VERSION"),
        "clock": {
            "unit": "ns",
            "origin": "nsys capture session (ns since its start)",
            # TARGET_INFO_SESSION_START_TIME.utcEpochNs: the session's start in UTC
            "session_start_utc_ns": epoch,
        },
        "devices": devices,
        "enums_from_file": enums.from_file,
        "backtrace_records_skipped": backtraces,
        "tables": sorted(o for o in objs if o.startswith(_PREFIXES[:1]) or o == _NVTX),
        **odd.meta(),
    }
    return out


def _read_report(path: Path) -> TraceTables:
    """Export a ``.nsys-rep`` / ``.qdrep`` report with ``nsys export`` and read the export."""
    exe = shutil.which("nsys")
    if exe is None:
        raise InputError(
            f"{path}: an Nsight Systems report and nsys is not on PATH here; export it with "
            f"`nsys export --type sqlite {path}` and import the .sqlite"
        )
    with tempfile.TemporaryDirectory(prefix="aaco-nsys-") as tmp:
        out = Path(tmp) / (path.stem + ".sqlite")
        argv = [exe, "export", "--type=sqlite", "--force-overwrite=true", f"--output={out}",
                str(path)]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace")
        except OSError as exc:
            raise InputError(f"{path}: cannot run nsys export ({exc.strerror})") from None
        if proc.returncode != 0 or not out.is_file():
            lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            why = lines[-1][:160] if lines else f"exit status {proc.returncode}"
            raise InputError(
                f"{path}: nsys export failed ({why}), expected an Nsight Systems report"
            )
        tables = read_nsys(out, label=path)
    tables.meta["exported_with"] = [exe, *argv[1:-2], "--output=<temporary>.sqlite", str(path)]
    return tables


class NsysSqliteImporter(Importer):
    """NVIDIA Nsight Systems SQLite export; a ``.nsys-rep`` report through ``nsys export``."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = (
        "Nsight Systems SQLite export (nsys export --type sqlite), or a .nsys-rep report "
        "when nsys is on PATH"
    )

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        if head.startswith(_MAGIC):
            return _nsys_objects(path) is not None
        # The report's container format is not documented; its suffix is the only mark it
        # has. A report with its export beside it is read through that export.
        if head and path.suffix.lower() in REPORT_SUFFIXES:
            return _export_beside(path) is None
        return False

    def read(self, path: Path) -> TraceTables:
        return read_nsys(Path(path))
