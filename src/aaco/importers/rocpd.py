"""Read a rocpd SQLite database (rocprofv3's default output, schema 3) into the trace tables.

rocpd tables carry a uuid suffix (``rocpd_kernel_dispatch_<uuid>``), so this reads the
*views* the tool creates, by column name:

* ``kernels`` -> KERNELS. In this view ``grid_x/y/z`` are work-items and ``grid_size_x/y/z``
  are workgroups (``grid_x / workgroup_x``), so the schema's ``grid_*`` = ``grid_size_*``
  and ``block_*`` = ``workgroup_*``. ``device`` = ``agent_type_index`` for GPU agents (the
  GPU index), else ``agent_logical_index``.
* ``memory_copies`` -> MEMCPY (``size`` -> bytes; direction from source/destination agent types).
* ``regions`` -> API_CALLS (category ``HIP_*``/``HSA_*``/``RCCL_*``...), and ANNOTATIONS kind
  ``marker`` when the category is a marker (roctx) one.
* ``kernel_pmc_events`` -> KERNEL_COUNTERS (``pmc_name``, ``pmc_value``).

A file is recognised by the SQLite magic ``SQLite format 3\\0`` and the presence of the
``kernels`` or ``regions`` view (or a ``rocpd_*`` table); a corrupt database is an InputError.
A kernel, region or counter row without a name is left out (counted in ``meta["dropped_rows"]``).
Which column a rocprofiler-SDK field fills is declared in :mod:`aaco.importers._rocprofiler_sdk`.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from aaco.errors import InputError
from aaco.importers._csv import check_times, fill_table, map_values
from aaco.importers._lenient import collecting, note_dropped, note_null, to_int
from aaco.importers._rocprofiler_sdk import (
    CLOCK,
    KERNEL_FIELDS,
    api_calls_and_markers,
    api_domain,
    copy_device,
    copy_kind,
)
from aaco.importers.base import Importer, TraceTables
from aaco.session.schema import KERNEL_COUNTERS, KERNELS, MEMCPY

__all__ = ["SOURCE", "RocpdImporter", "read_rocpd"]

SOURCE = "rocpd"
_MAGIC = b"SQLite format 3\x00"
_EXPECTED = "a rocpd SQLite database (rocprofv3 output with kernels/regions views)"
_I64 = pa.int64()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160]


def _objects(con: sqlite3.Connection) -> set[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return {r[0] for r in rows}


def _query(con: sqlite3.Connection, view: str) -> dict[str, list[Any]]:
    cur = con.execute(f"SELECT * FROM `{view}`")
    names = [d[0].lower() for d in cur.description]
    rows = cur.fetchall()
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


def _text(raw: bytes) -> str:
    # SQLite does not check that TEXT is UTF-8; an odd byte must not cost the database
    return raw.decode("utf-8", "replace")


def _keep_timed(data: dict[str, list[Any]], view: str) -> tuple[dict[str, list[Any]], int]:
    """The rows of ``data`` with an integer start and end, end >= start (others counted)."""
    n = len(next(iter(data.values()), []))
    start = [to_int(v) for v in data["start"]]
    end = [to_int(v) for v in data["end"]]
    keep = [i for i, (s, e) in enumerate(zip(start, end, strict=True))
            if s is not None and e is not None and e >= s]  # fmt: skip
    if len(keep) == n:
        return data, n
    missing = sum(1 for i in range(n) if start[i] is None or end[i] is None)
    note_dropped(f"{view}: start/end missing or not a number", missing)
    note_dropped(f"{view}: end before start", n - len(keep) - missing)
    return {k: [v[i] for i in keep] for k, v in data.items()}, len(keep)


def _ints(path: Path, values: list[Any] | None, what: str) -> pa.Array | None:
    """An integer column; a value that is not an integer (SQLite is not typed) is null."""
    if values is None:
        return None
    try:
        return pa.array(values, type=_I64)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = [to_int(v) if not isinstance(v, bytes) else None for v in values]
    note_null(what, sum(1 for v, o in zip(values, out, strict=True) if o is None and v is not None))
    return pa.array(out, type=_I64)


def _strs(values: list[Any]) -> pa.Array:
    return pa.array([v if v is None or isinstance(v, str) else str(v) for v in values],
                    pa.string())  # fmt: skip


def _named(data: dict[str, list[Any]], view: str, *columns: str) -> dict[str, list[Any]]:
    """The rows of ``data`` whose ``columns`` are not NULL: a kernel, API call, marker or
    counter without a name cannot be reported (the tables require one), so it is left out
    and counted. A column the view lacks is not checked."""
    n = len(next(iter(data.values()), []))
    keep: list[int] | range = range(n)
    for col in columns:
        if col in data:
            kept = [i for i in keep if data[col][i] is not None]
            note_dropped(f"{view}: {col} missing", len(keep) - len(kept))
            keep = kept
    if len(keep) == n:
        return data
    return {k: [v[i] for i in keep] for k, v in data.items()}


def _times(
    path: Path, data: dict[str, list[Any]], view: str
) -> tuple[dict[str, list[Any]], int, pa.Array, pa.Array, Any]:
    """(rows kept, their count, start, end, dur); rows without usable times are dropped."""
    if "start" not in data or "end" not in data:
        raise InputError(f"{path}: view {view} lacks start/end columns, expected {_EXPECTED}")
    data, n = _keep_timed(data, view)
    start = _ints(path, data["start"], f"{view}.start")
    end = _ints(path, data["end"], f"{view}.end")
    assert start is not None and end is not None
    dur = check_times(path, pa.chunked_array([start]), pa.chunked_array([end]), _EXPECTED)
    return data, n, start, end, dur


def _gpu_device(data: dict[str, list[Any]], prefix: str = "") -> list[int | None] | None:
    typ = data.get(f"{prefix}agent_type")
    type_index = data.get(f"{prefix}agent_type_index")
    logical = data.get(f"{prefix}agent_logical_index")
    if type_index is None and logical is None:
        return None
    n = len(type_index if type_index is not None else logical or [])
    out: list[int | None] = []
    for i in range(n):
        is_gpu = typ is not None and str(typ[i]).upper() == "GPU"
        if is_gpu and type_index is not None:
            out.append(type_index[i])
        elif typ is not None and not is_gpu:
            out.append(None)  # host agent: not a device
        else:
            out.append(logical[i] if logical is not None else None)
    # an index that is not a small integer names no device
    dev = [to_int(d) if not isinstance(d, bytes) else None for d in out]
    ok = [d if d is not None and 0 <= d < (1 << 31) else None for d in dev]
    note_null(f"{prefix}agent index", sum(1 for d, o in zip(out, ok, strict=True)
                                          if d is not None and o is None))  # fmt: skip
    return ok


def _kernels(path: Path, con: sqlite3.Connection) -> pa.Table:
    data, n, start, end, dur = _times(
        path, _named(_query(con, "kernels"), "kernels", "name"), "kernels"
    )
    if "name" not in data:
        raise InputError(f"{path}: view kernels lacks a name column, expected {_EXPECTED}")

    def i(*names: str) -> pa.Array | None:
        found = next((name for name in names if name in data), None)
        return None if found is None else _ints(path, data[found], f"kernels.{found}")

    return fill_table(
        path,
        KERNELS,
        n,
        {
            "source": SOURCE,
            "name": _strs(data["name"]),
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "time_is_gpu": True,
            "device": pa.array(_gpu_device(data), pa.int32()) if _gpu_device(data) else None,
            **{column: i(*names) for column, names in KERNEL_FIELDS.items()},
            # in this view grid_size_* already counts workgroups (grid_* counts work-items)
            "grid_x": i("grid_size_x"),
            "grid_y": i("grid_size_y"),
            "grid_z": i("grid_size_z"),
            "block_x": i("workgroup_x", "block_size_x"),
            "block_y": i("workgroup_y", "block_size_y"),
            "block_z": i("workgroup_z", "block_size_z"),
        },
    )


def _is_gpu(agent_type: Any) -> bool | None:
    """An agent type of the view: GPU True, CPU False, anything else unknown (None)."""
    return {"GPU": True, "CPU": False}.get(str(agent_type or "").upper())


def _memcpy(path: Path, con: sqlite3.Connection) -> pa.Table:
    data, n, start, end, dur = _times(path, _query(con, "memory_copies"), "memory_copies")
    src_t, dst_t = data.get("src_agent_type"), data.get("dst_agent_type")
    kinds = [
        copy_kind(_is_gpu(src_t[k] if src_t else None), _is_gpu(dst_t[k] if dst_t else None))
        for k in range(n)
    ]
    src = _gpu_device(data, "src_")
    dst = _gpu_device(data, "dst_")
    device = [copy_device(kinds[k], src[k], dst[k]) if src and dst else None for k in range(n)]
    names = data.get("name") or kinds
    return fill_table(
        path,
        MEMCPY,
        n,
        {
            "source": SOURCE,
            "name": pa.array([str(x) for x in names], pa.string()),
            "kind": pa.array(kinds, pa.string()),
            "bytes": _ints(path, data.get("size"), "memory_copies.size"),
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "device": pa.array(device, pa.int32()),
            "stream": _ints(path, data.get("stream_id"), "memory_copies.stream_id"),
            "src_device": pa.array(src, pa.int32()) if src else None,
            "dst_device": pa.array(dst, pa.int32()) if dst else None,
            "correlation_id": _ints(path, data.get("correlation_id"), "correlation_id"),
        },
    )


def _regions(path: Path, con: sqlite3.Connection) -> tuple[pa.Table, pa.Table]:
    data, n, start, end, dur = _times(
        path, _named(_query(con, "regions"), "regions", "name"), "regions"
    )
    category = pa.array([str(c or "") for c in data.get("category", [""] * n)], pa.string())
    records = pa.table(
        {
            "domain": map_values(category, api_domain, pa.string()),
            "name": _strs(data.get("name", [""] * n)),
            "process_id": _ints(path, data.get("pid", [None] * n), "regions.pid"),
            "thread_id": _ints(path, data.get("tid", [None] * n), "regions.tid"),
            "correlation_id": _ints(path, data.get("correlation_id", [None] * n), "correlation_id"),
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
        }
    )
    return api_calls_and_markers(path, SOURCE, records)


def _counters(path: Path, con: sqlite3.Connection) -> pa.Table:
    data = _query(con, "kernel_pmc_events")
    for need in ("pmc_name", "pmc_value", "name"):
        if need not in data:
            raise InputError(f"{path}: view kernel_pmc_events lacks {need}, expected {_EXPECTED}")
    data = _named(data, "kernel_pmc_events", "name", "pmc_name")
    n = len(data["name"])
    values = [
        v if type(v) in (int, float) and math.isfinite(v) else None for v in data["pmc_value"]
    ]
    if None in values:
        # a counter event without a numeric value says nothing: left out, counted
        keep = [i for i, v in enumerate(values) if v is not None]
        note_dropped("kernel_pmc_events: pmc_value missing or not a number", n - len(keep))
        data = {k: [v[i] for i in keep] for k, v in data.items()}
        values = [values[i] for i in keep]
        n = len(keep)
    dev = _gpu_device(data)
    return fill_table(
        path,
        KERNEL_COUNTERS,
        n,
        {
            "source": SOURCE,
            "correlation_id": _ints(path, data.get("correlation_id"), "correlation_id"),
            "dispatch_id": _ints(path, data.get("dispatch_id"), "dispatch_id"),
            "device": pa.array(dev, pa.int32()) if dev else None,
            "kernel_name": _strs(data["name"]),
            "counter": _strs(data["pmc_name"]),
            "value": pa.array(values, pa.float64()),
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
            if "kernels" not in objs and "regions" not in objs:
                raise InputError(f"{path}: no kernels/regions views, expected {_EXPECTED}")
            if "kernels" in objs:
                out.kernels = _kernels(path, con)
            if "memory_copies" in objs:
                out.memcpy = _memcpy(path, con)
            if "regions" in objs:
                out.api_calls, out.annotations = _regions(path, con)
            if "kernel_pmc_events" in objs:
                out.kernel_counters = _counters(path, con)
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
