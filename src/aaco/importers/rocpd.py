"""Read a rocpd SQLite database (rocprofv3's default output, schema 3) into the trace tables.

rocpd tables carry a uuid suffix (``rocpd_kernel_dispatch_<uuid>``), so this reads the
*views* the tool creates, by column name. rocprofiler-sdk's schema-3 views
(``data_views.sql``) spell some columns differently across releases; each is matched by the
first name the view has:

* ``kernels`` -> KERNELS. ``grid_x/y/z`` are work-items, so the schema's ``grid_*`` =
  ``ceil(grid_x / workgroup_x)`` (a view that also has ``grid_size_x/y/z`` counts workgroups
  there: those are used as they are) and ``block_*`` = ``workgroup_*``. ``device`` =
  ``agent_type_index`` for GPU agents (the GPU index), else ``agent_logical_index`` /
  ``agent_log_index``. The correlation id is ``correlation_id`` or ``corr_id``.
* ``memory_copies`` -> MEMCPY (``size`` -> bytes; direction from source/destination agent types).
* ``regions`` -> API_CALLS (category ``HIP_*``/``HSA_*``/``RCCL_*``...), and ANNOTATIONS kind
  ``marker`` when the category is a marker (roctx) one.
* ``kernel_pmc_events`` (``pmc_name``, ``pmc_value``), else ``counters_collection``
  (``counter_name``, ``value``: one value per dispatch and counter) -> KERNEL_COUNTERS.

Each view is read with one query of just the columns used, in batches of :data:`BATCH` rows
turned into Arrow columns as they come (memory stays bounded by the columns themselves); the
checks (names, times, agent types, counter values) are vector operations on those columns.
SQLite is not typed: a value that is not what its column should hold is null (counted in
``meta["odd_values"]``), and a kernel, region or counter row without a name, or a row without
usable times, is left out (counted in ``meta["dropped_rows"]``). Text that is not UTF-8 is
decoded with replacement characters.

A file is recognised by the SQLite magic ``SQLite format 3\\0`` and the presence of the
``kernels`` or ``regions`` view (or a ``rocpd_*`` table); a corrupt database is an InputError.
Which column a rocprofiler-SDK field fills is declared in :mod:`aaco.importers._rocprofiler_sdk`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.errors import InputError
from aaco.importers._csv import check_times, fill_table, map_values
from aaco.importers._lenient import collecting, note_dropped, note_null, to_int
from aaco.importers._rocprofiler_sdk import (
    AGENT_GPU,
    AGENT_HOST,
    AGENT_UNKNOWN,
    CLOCK,
    KERNEL_FIELDS,
    api_calls_and_markers,
    api_domain,
    ceil_div,
    copy_kinds,
)
from aaco.importers.base import Importer, TraceTables
from aaco.session.schema import KERNEL_COUNTERS, KERNELS, MEMCPY

__all__ = ["BATCH", "SOURCE", "RocpdImporter", "read_rocpd"]

SOURCE = "rocpd"
#: rows fetched from SQLite at a time (Python objects exist only for one batch)
BATCH = 65_536
_MAGIC = b"SQLite format 3\x00"
_EXPECTED = "a rocpd SQLite database (rocprofv3 output with kernels/regions views)"
_I64 = pa.int64()
_I32 = pa.int32()
_STR = pa.string()
_INT64_MIN = -(1 << 63)

# spellings of one field across the schema-3 releases of the views, preferred first
_CORR = ("correlation_id", "corr_id")
_LOGICAL = ("agent_logical_index", "agent_log_index")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160]


def _objects(con: sqlite3.Connection) -> set[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return {r[0] for r in rows}


def _text(raw: bytes) -> str:
    # SQLite does not check that TEXT is UTF-8; an odd byte must not cost the database
    return raw.decode("utf-8", "replace")


# --------------------------------------------------------------------------- fetching


@dataclass
class _Col:
    """A column read from a view: its values, the view column they came from, and where a
    value was there but unusable (became null)."""

    values: pa.ChunkedArray
    name: str
    odd: pa.ChunkedArray | None = None

    def odd_count(self) -> int:
        return 0 if self.odd is None else int(pc.sum(self.odd).as_py() or 0)


def _ints(vals: Sequence[Any]) -> tuple[pa.Array, pa.Array | None]:
    """int64 values; anything :func:`to_int` does not read as an integer is null (odd)."""
    try:
        arr = pa.array(vals)
        if pa.types.is_int64(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(_I64), None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = [to_int(v) for v in vals]
    odd = [o is None and v is not None for v, o in zip(vals, out, strict=True)]
    return pa.array(out, _I64), pa.array(odd, pa.bool_())


def _strs(vals: Sequence[Any]) -> tuple[pa.Array, pa.Array | None]:
    """Text values; a number or blob where text belongs is its ``str()``."""
    try:
        arr = pa.array(vals)
        if pa.types.is_string(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(_STR), None
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    return pa.array([v if v is None or isinstance(v, str) else str(v) for v in vals], _STR), None


def _floats(vals: Sequence[Any]) -> tuple[pa.Array, pa.Array | None]:
    """float64 values of int/float cells; text, blobs and non-finite values are null."""
    try:
        arr = pa.array(vals)
        if pa.types.is_int64(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(pa.float64(), safe=False), None
        if pa.types.is_floating(arr.type):
            return pc.if_else(pc.is_finite(arr), arr, None), None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = [float(v) if type(v) in (int, float) and np.isfinite(v) else None for v in vals]
    return pa.array(out, pa.float64()), None


_KINDS: dict[str, tuple[pa.DataType, Callable[[Sequence[Any]], tuple[pa.Array, Any]]]] = {
    "int": (_I64, _ints),
    "str": (_STR, _strs),
    "float": (pa.float64(), _floats),
}


def _columns(con: sqlite3.Connection, view: str) -> dict[str, str]:
    """The view's columns: lower-cased name -> name as the view spells it."""
    cur = con.execute(f"SELECT * FROM `{view}` LIMIT 0")
    out: dict[str, str] = {}
    for d in cur.description:
        out.setdefault(d[0].lower(), d[0])
    return out


def _fetch(
    con: sqlite3.Connection, view: str, wanted: dict[str, tuple[Sequence[str], str]]
) -> tuple[dict[str, _Col], int]:
    """Read ``wanted`` (key -> (view column names, first present wins; kind)) from ``view``.

    One query of just those columns, :data:`BATCH` rows at a time, each batch's columns
    converted to Arrow at once. Keys whose columns the view lacks are absent from the result;
    each column keeps the name of the view column it came from. Returns (columns, rows).
    """
    have = _columns(con, view)
    keys: list[str] = []
    names: list[str] = []
    for key, (spellings, _) in wanted.items():
        found = next((have[s] for s in spellings if s in have), None)
        if found is not None:
            keys.append(key)
            names.append(found)
    if not keys:
        n = con.execute(f"SELECT COUNT(*) FROM `{view}`").fetchone()[0]
        return {}, int(n)
    sql = "SELECT " + ", ".join('"' + c.replace('"', '""') + '"' for c in names)
    sql += f" FROM `{view}`"
    try:
        chunks = _batches(con, sql, [wanted[k][1] for k in keys])
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
        # text that is not UTF-8 somewhere in this view: read it again with replacement
        con.text_factory = _text
        try:
            chunks = _batches(con, sql, [wanted[k][1] for k in keys])
        finally:
            con.text_factory = str
    out: dict[str, _Col] = {}
    n = 0
    for key, name, (arrays, odds) in zip(keys, names, chunks, strict=True):
        typ = _KINDS[wanted[key][1]][0]
        values = pa.chunked_array(arrays, typ)
        n = len(values)
        odd = None
        if any(o is not None for o in odds):
            odd = pa.chunked_array(
                [o if o is not None else pa.array(np.zeros(len(a), bool)) for a, o in
                 zip(arrays, odds, strict=True)], pa.bool_())  # fmt: skip
        out[key] = _Col(values, name, odd)
    return out, n


def _batches(
    con: sqlite3.Connection, sql: str, kinds: list[str]
) -> list[tuple[list[pa.Array], list[pa.Array | None]]]:
    cur = con.execute(sql)
    convs = [_KINDS[k][1] for k in kinds]
    out: list[tuple[list[pa.Array], list[pa.Array | None]]] = [([], []) for _ in kinds]
    while True:
        rows = cur.fetchmany(BATCH)
        if not rows:
            break
        for j, vals in enumerate(zip(*rows, strict=True)):
            arr, odd = convs[j](vals)
            out[j][0].append(arr)
            out[j][1].append(odd)
    return out


# --------------------------------------------------------------------------- checks


def _drop_unnamed(cols: dict[str, _Col], n: int, view: str, *keys: str) -> pa.Array | None:
    """Rows whose ``keys`` columns are not NULL (checked in order, each counted): a kernel, API
    call, marker or counter without a name cannot be reported. None: every row is kept."""
    keep: pa.Array | None = None
    for key in keys:
        if key not in cols:
            continue
        valid = pc.is_valid(cols[key].values)
        before = n if keep is None else int(pc.sum(keep).as_py() or 0)
        keep = valid if keep is None else pc.and_(keep, valid)
        note_dropped(f"{view}: {key} missing", before - int(pc.sum(keep).as_py() or 0))
    return keep


def _timed(
    path: Path, cols: dict[str, _Col], n: int, view: str, keep: pa.Array | None
) -> tuple[pa.Array | None, int]:
    """Rows (of those kept so far) with an integer start and end, end >= start; the others
    are counted as dropped. Returns the new keep mask (None: all rows) and its row count."""
    if "start" not in cols or "end" not in cols:
        raise InputError(f"{path}: view {view} lacks start/end columns, expected {_EXPECTED}")
    start, end = cols["start"].values, cols["end"].values
    # to_int reads no int64 minimum (it is a sentinel, not a time)
    start = pc.if_else(pc.equal(start, _INT64_MIN), None, start)
    end = pc.if_else(pc.equal(end, _INT64_MIN), None, end)
    cols["start"].values, cols["end"].values = start, end
    base = pa.chunked_array([pa.array(np.ones(n, bool))]) if keep is None else keep
    present = pc.and_(pc.is_valid(start), pc.is_valid(end))
    ordered = pc.fill_null(pc.greater_equal(end, start), False)
    before = int(pc.sum(base).as_py() or 0)
    with_times = pc.and_(base, present)
    kept = pc.and_(with_times, ordered)
    m, k = int(pc.sum(with_times).as_py() or 0), int(pc.sum(kept).as_py() or 0)
    note_dropped(f"{view}: start/end missing or not a number", before - m)
    note_dropped(f"{view}: end before start", m - k)
    return (None if k == n else kept), k


def _kept(cols: dict[str, _Col], keep: pa.Array | None) -> dict[str, _Col]:
    """The columns restricted to the kept rows (odd masks too)."""
    if keep is None:
        return cols
    return {
        key: _Col(c.values.filter(keep), c.name, None if c.odd is None else c.odd.filter(keep))
        for key, c in cols.items()
    }


def _int_col(cols: dict[str, _Col], key: str, what: str | None = None) -> pa.ChunkedArray | None:
    """A fetched integer column, its odd values counted as ``what`` (default: view.column)."""
    c = cols.get(key)
    if c is None:
        return None
    note_null(what if what is not None else c.name, c.odd_count())
    return c.values


def _is(agent_type: pa.ChunkedArray, what: str) -> pa.ChunkedArray:
    """Rows whose agent type is ``what`` (GPU/CPU, any case); NULL is neither."""
    return pc.fill_null(pc.equal(pc.utf8_upper(agent_type), what), False)


def _gpu_device(cols: dict[str, _Col], n: int, prefix: str = "") -> pa.ChunkedArray | None:
    """The GPU index of each row's agent: ``agent_type_index`` of a GPU agent, nothing for a
    host agent, the logical index when the type is unknown; an index that is not a small
    integer names no device (counted)."""
    typ = cols.get(f"{prefix}agent_type")
    type_index = cols.get(f"{prefix}agent_type_index")
    logical = cols.get(f"{prefix}agent_logical_index")
    if type_index is None and logical is None:
        return None
    nulls = pa.chunked_array([pa.nulls(n, _I64)])
    no = pa.chunked_array([pa.array(np.zeros(n, bool))])
    log_v = logical.values if logical is not None else nulls
    log_o = logical.odd if logical is not None and logical.odd is not None else no
    if typ is None:
        dev, odd = log_v, log_o
    else:
        gpu = _is(typ.values, "GPU")
        if type_index is not None:
            ti_o = type_index.odd if type_index.odd is not None else no
            dev = pc.if_else(gpu, type_index.values, nulls)
            odd = pc.and_(gpu, ti_o)
        else:
            dev = pc.if_else(gpu, log_v, nulls)
            odd = pc.and_(gpu, log_o)
    ok = pc.and_(pc.greater_equal(dev, 0), pc.less(dev, 1 << 31))
    out_of_range = int(pc.sum(pc.invert(pc.fill_null(ok, True))).as_py() or 0)
    note_null(f"{prefix}agent index", out_of_range + int(pc.sum(odd).as_py() or 0))
    return pc.if_else(pc.fill_null(ok, False), dev, None).cast(_I32)


# --------------------------------------------------------------------------- views

_GRID = {f"grid_size_{a}": ((f"grid_size_{a}",), "int") for a in "xyz"}
_WORK_ITEMS = {f"grid_{a}": ((f"grid_{a}",), "int") for a in "xyz"}
_BLOCK = {f"block_{a}": ((f"workgroup_{a}", f"block_size_{a}"), "int") for a in "xyz"}
_AGENT = {
    "agent_type": (("agent_type",), "str"),
    "agent_type_index": (("agent_type_index",), "int"),
    "agent_logical_index": (_LOGICAL, "int"),
}


def _kernels(path: Path, con: sqlite3.Connection) -> pa.Table:
    fields = {c: (names, "int") for c, names in KERNEL_FIELDS.items()}
    cols, n = _fetch(con, "kernels", {
        "name": (("name",), "str"), "start": (("start",), "int"), "end": (("end",), "int"),
        **_AGENT, **fields, **_GRID, **_WORK_ITEMS, **_BLOCK,
    })  # fmt: skip
    keep = _drop_unnamed(cols, n, "kernels", "name")
    keep, n = _timed(path, cols, n, "kernels", keep)
    if "name" not in cols:
        raise InputError(f"{path}: view kernels lacks a name column, expected {_EXPECTED}")
    cols = _kept(cols, keep)
    start, end = cols["start"].values, cols["end"].values
    dur = check_times(path, start, end, _EXPECTED)

    def i(key: str) -> pa.ChunkedArray | None:
        c = cols.get(key)
        return None if c is None else _int_col(cols, key, f"kernels.{c.name}")

    grid: dict[str, Any] = {}
    for a in "xyz":
        if f"grid_size_{a}" in cols:  # a view whose grid_size_* already counts workgroups
            grid[f"grid_{a}"] = i(f"grid_size_{a}")
        elif f"grid_{a}" in cols and f"block_{a}" in cols:  # work-items / workgroup size
            grid[f"grid_{a}"] = ceil_div(cols[f"grid_{a}"].values, cols[f"block_{a}"].values)
            i(f"grid_{a}")  # its odd values counted
    return fill_table(
        path,
        KERNELS,
        n,
        {
            "source": SOURCE,
            "name": cols["name"].values,
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "time_is_gpu": True,
            "device": _gpu_device(cols, n),
            **{column: i(column) for column in KERNEL_FIELDS},
            **grid,
            **{f"block_{a}": i(f"block_{a}") for a in "xyz"},
        },
    )


def _memcpy(path: Path, con: sqlite3.Connection) -> pa.Table:
    agents = {f"{e}_{k}": (tuple(f"{e}_{s}" for s in spell), kind)
              for e in ("src", "dst") for k, (spell, kind) in _AGENT.items()}  # fmt: skip
    cols, n = _fetch(con, "memory_copies", {
        "start": (("start",), "int"), "end": (("end",), "int"), "name": (("name",), "str"),
        "size": (("size",), "int"), "stream_id": (("stream_id",), "int"),
        "correlation_id": (_CORR, "int"),
        **agents,
    })  # fmt: skip
    keep, n = _timed(path, cols, n, "memory_copies", None)
    cols = _kept(cols, keep)
    start, end = cols["start"].values, cols["end"].values
    dur = check_times(path, start, end, _EXPECTED)
    # direction from the two agent types: unknown unless both are CPU or GPU
    state: dict[str, np.ndarray] = {}
    for e in ("src", "dst"):
        t = cols.get(f"{e}_agent_type")
        if t is None:
            state[e] = np.zeros(n, np.int8)
        else:
            gpu = _is(t.values, "GPU").to_numpy(zero_copy_only=False)
            cpu = _is(t.values, "CPU").to_numpy(zero_copy_only=False)
            state[e] = np.where(gpu, AGENT_GPU, np.where(cpu, AGENT_HOST, AGENT_UNKNOWN))
    codes, device_is_dst = copy_kinds(state["src"], state["dst"])
    kinds = codes.cast(_STR)
    src = _gpu_device(cols, n, "src_")
    dst = _gpu_device(cols, n, "dst_")
    device = None
    if src is not None and dst is not None:
        device = pc.if_else(pa.array(device_is_dst), dst, src)
    # a copy's name as the view has it (a NULL one reads "None"), else its kind
    names = pc.fill_null(cols["name"].values, "None") if "name" in cols else kinds
    return fill_table(
        path,
        MEMCPY,
        n,
        {
            "source": SOURCE,
            "name": names,
            "kind": kinds,
            "bytes": _int_col(cols, "size", "memory_copies.size"),
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "device": device,
            "stream": _int_col(cols, "stream_id", "memory_copies.stream_id"),
            "src_device": src,
            "dst_device": dst,
            "correlation_id": _int_col(cols, "correlation_id", "correlation_id"),
        },
    )


def _regions(path: Path, con: sqlite3.Connection) -> tuple[pa.Table, pa.Table]:
    cols, n = _fetch(con, "regions", {
        "name": (("name",), "str"), "start": (("start",), "int"), "end": (("end",), "int"),
        "category": (("category",), "str"), "pid": (("pid",), "int"), "tid": (("tid",), "int"),
        "correlation_id": (_CORR, "int"),
    })  # fmt: skip
    keep = _drop_unnamed(cols, n, "regions", "name")
    keep, n = _timed(path, cols, n, "regions", keep)
    cols = _kept(cols, keep)
    start, end = cols["start"].values, cols["end"].values
    dur = check_times(path, start, end, _EXPECTED)
    nulls = pa.nulls(n, _I64)
    if "category" in cols:
        # a NULL category is no category
        category = pc.fill_null(cols["category"].values, "")
    else:
        category = pa.array([""] * n, _STR)
    pid, tid, corr = (_int_col(cols, k, w) for k, w in
                      (("pid", "regions.pid"), ("tid", "regions.tid"),
                       ("correlation_id", "correlation_id")))  # fmt: skip
    records = pa.table(
        {
            "domain": map_values(category, api_domain, _STR),
            "name": cols["name"].values if "name" in cols else pa.array([""] * n, _STR),
            "process_id": pid if pid is not None else nulls,
            "thread_id": tid if tid is not None else nulls,
            "correlation_id": corr if corr is not None else nulls,
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
        }
    )
    return api_calls_and_markers(path, SOURCE, records)


#: counter views, preferred first: (view, its kernel name, counter name, value columns)
_COUNTER_VIEWS = (
    ("kernel_pmc_events", "name", "pmc_name", "pmc_value"),
    ("counters_collection", "kernel_name", "counter_name", "value"),
)


def _counters(path: Path, con: sqlite3.Connection, view: str) -> pa.Table:
    _, kname, cname, vname = next(v for v in _COUNTER_VIEWS if v[0] == view)
    have = _columns(con, view)
    for need in (kname, cname, vname):
        if need not in have:
            raise InputError(f"{path}: view {view} lacks {need}, expected {_EXPECTED}")
    cols, n = _fetch(con, view, {
        "name": ((kname,), "str"), "pmc_name": ((cname,), "str"),
        "pmc_value": ((vname,), "float"), "correlation_id": (_CORR, "int"),
        "dispatch_id": (("dispatch_id",), "int"), **_AGENT,
    })  # fmt: skip
    keep = _drop_unnamed(cols, n, view, "name", "pmc_name")
    cols = _kept(cols, keep)
    n = len(cols["name"].values)
    value = cols["pmc_value"].values
    if value.null_count:
        # a counter event without a numeric value says nothing: left out, counted
        note_dropped(f"{view}: pmc_value missing or not a number", value.null_count)
        cols = _kept(cols, pc.is_valid(value))
        n -= value.null_count
    return fill_table(
        path,
        KERNEL_COUNTERS,
        n,
        {
            "source": SOURCE,
            "correlation_id": _int_col(cols, "correlation_id", "correlation_id"),
            "dispatch_id": _int_col(cols, "dispatch_id", "dispatch_id"),
            "device": _gpu_device(cols, n),
            "kernel_name": cols["name"].values,
            "counter": cols["pmc_name"].values,
            "value": cols["pmc_value"].values,
        },
    )


def read_rocpd(path: Path) -> TraceTables:
    """Read the kernels, memory copies, regions and PMC events of a rocpd database."""
    try:
        with path.open("rb") as f:
            magic = f.read(16)
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc.strerror}), expected {_EXPECTED}") from None
    if magic != _MAGIC:
        raise InputError(f"{path}: not an SQLite database, expected {_EXPECTED}")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InputError(f"{path}: cannot open ({exc}), expected {_EXPECTED}") from None
    con.text_factory = _text
    out = TraceTables()
    try:
        with collecting() as odd:
            objs = _objects(con)
            # rows are read with the C text decoder; a view with bad UTF-8 is read again
            con.text_factory = str
            if "kernels" not in objs and "regions" not in objs:
                raise InputError(f"{path}: no kernels/regions views, expected {_EXPECTED}")
            if "kernels" in objs:
                out.kernels = _kernels(path, con)
            if "memory_copies" in objs:
                out.memcpy = _memcpy(path, con)
            if "regions" in objs:
                out.api_calls, out.annotations = _regions(path, con)
            counters = next((v[0] for v in _COUNTER_VIEWS if v[0] in objs), None)
            if counters is not None:
                out.kernel_counters = _counters(path, con, counters)
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        # a corrupt page can also garble a name sqlite3 decodes (a column, a view)
        raise InputError(
            f"{path}: corrupt or unreadable database ({_one_line(exc)}), expected {_EXPECTED}"
        ) from None
    finally:
        con.close()
    out.meta = {
        "tool": "rocprofv3",
        "format": SOURCE,
        "files": [str(path)],
        "clock": dict(CLOCK),
        "device_ids": "GPU index (agent_type_index) for GPU agents",
        **odd.meta(),
    }
    return out


class RocpdImporter(Importer):
    """rocprofv3's rocpd SQLite database (``<pid>_results.db``)."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = "rocpd SQLite database (rocprofv3 default output)"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        if not head.startswith(_MAGIC):
            return False
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                objs = _objects(con)
            finally:
                con.close()
        except (sqlite3.Error, UnicodeDecodeError):
            return False
        return "kernels" in objs or "regions" in objs or any(o.startswith("rocpd_") for o in objs)

    def read(self, path: Path) -> TraceTables:
        return read_rocpd(path)
