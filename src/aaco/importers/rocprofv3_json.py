"""Read rocprofv3 JSON output (``--output-format json``) into KERNELS and MEMCPY.

The file is ``{"rocprofiler-sdk-tool": [ {per process: metadata, agents, kernel_symbols,
buffer_records{kernel_dispatch, memory_copy, ...}} ]}``. Kernel names come from
``kernel_symbols`` by ``kernel_id``; ``dispatch_info.grid_size`` counts work-items, so
``grid_* = ceil(grid_size / workgroup_size)``. ``dispatch_info.agent_id.handle`` is mapped to
a GPU index 0..n-1 in ``agents`` order (GPU agents, ``type`` 2). Memory copies get their
direction from the source/destination agent types and ``bytes`` when the record has it.
Records are decoded with msgspec into typed structs (only the fields used are kept).
API records (``hip_api`` ...) are counted in ``meta`` but not tabled: their names need the
tool's operation-name tables, which this reader does not decode yet.

Odd values: when the typed decode of the file fails on a value of an unexpected type, the
file is decoded again untyped and each record converted on its own; a field that does not
convert is null (counted in ``meta["odd_values"]``, by its path), and a record that cannot be
used at all (not an object, no usable start/end, a kernel id without a symbol) is left out
(counted in ``meta["dropped_rows"]``). Which column a rocprofiler-SDK field fills is declared in
:mod:`aaco.importers._rocprofiler_sdk`.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec
import pyarrow as pa

from aaco.errors import InputError
from aaco.importers._chrome_json import repair_json
from aaco.importers._csv import check_times, fill_table, lenient_array
from aaco.importers._lenient import collecting, note_dropped, note_null
from aaco.importers._rocprofiler_sdk import (
    CLOCK,
    KERNEL_FIELDS,
    copy_device,
    copy_kind,
)
from aaco.importers.base import Importer, TraceTables, open_binary
from aaco.session.schema import KERNELS, MEMCPY

__all__ = ["SOURCE", "Rocprofv3JsonImporter", "read_rocprofv3_json"]

SOURCE = "rocprofv3-json"
_KEY = b'"rocprofiler-sdk-tool"'
_EXPECTED = 'a rocprofv3 JSON file ({"rocprofiler-sdk-tool": [...]})'
_I64 = pa.int64()
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class _Handle(msgspec.Struct):
    handle: int | None = None


class _XYZ(msgspec.Struct):
    x: int | None = None
    y: int | None = None
    z: int | None = None


class _Corr(msgspec.Struct):
    internal: int | None = None


class _DispatchInfo(msgspec.Struct):
    agent_id: _Handle = msgspec.field(default_factory=_Handle)
    queue_id: _Handle = msgspec.field(default_factory=_Handle)
    kernel_id: int | None = None
    dispatch_id: int | None = None
    private_segment_size: int | None = None
    group_segment_size: int | None = None
    workgroup_size: _XYZ = msgspec.field(default_factory=_XYZ)
    grid_size: _XYZ = msgspec.field(default_factory=_XYZ)


class _Dispatch(msgspec.Struct):
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    dispatch_info: _DispatchInfo = msgspec.field(default_factory=_DispatchInfo)
    thread_id: int | None = None
    correlation_id: _Corr = msgspec.field(default_factory=_Corr)
    stream_id: _Handle | None = None


class _Copy(msgspec.Struct):
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    src_agent_id: _Handle = msgspec.field(default_factory=_Handle)
    dst_agent_id: _Handle = msgspec.field(default_factory=_Handle)
    correlation_id: _Corr = msgspec.field(default_factory=_Corr)
    bytes: int | None = None
    thread_id: int | None = None


class _Symbol(msgspec.Struct):
    kernel_id: int | None = None
    kernel_name: str | None = None
    formatted_kernel_name: str | None = None
    arch_vgpr_count: int | None = None
    accum_vgpr_count: int | None = None
    sgpr_count: int | None = None


class _Agent(msgspec.Struct):
    id: _Handle = msgspec.field(default_factory=_Handle)
    type: int | str | None = None
    name: str | None = None
    product_name: str | None = None
    cu_count: int | None = None
    wave_front_size: int | None = None
    logical_node_id: int | None = None


class _Buffers(msgspec.Struct):
    kernel_dispatch: list[_Dispatch] = []
    memory_copy: list[_Copy] = []
    hip_api: list[Any] = []
    hsa_api: list[Any] = []
    marker_api: list[Any] = []


class _Meta(msgspec.Struct):
    pid: int | None = None


class _Process(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    agents: list[_Agent] = []
    kernel_symbols: list[_Symbol] = []
    buffer_records: _Buffers = msgspec.field(default_factory=_Buffers)


class _Root(msgspec.Struct):
    tool: list[_Process] = msgspec.field(name="rocprofiler-sdk-tool")


#: the SDK fields of a dispatch record, its dispatch_info and its kernel symbol (and the pid)
_RECORD_FIELDS = {
    "process_id",
    *_Dispatch.__struct_fields__,
    *_DispatchInfo.__struct_fields__,
    *_Symbol.__struct_fields__,
}
#: (KERNELS column, the record field that fills it) per KERNEL_FIELDS, resolved once
_KERNEL_COLUMNS = tuple(
    (column, next(f for f in names if f in _RECORD_FIELDS))
    for column, names in KERNEL_FIELDS.items()
)

S = TypeVar("S", bound=msgspec.Struct)
_AT = re.compile(r" - at `\$(.*)`$")
_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]")
# conversions tried per record before it is given up as unreadable
_MAX_FIXES = 32


def _convert(obj: Any, typ: type[S], where: str) -> S | None:
    """``obj`` (untyped JSON) as ``typ``; each field that does not fit is removed (its default,
    null, applies) and counted as ``where.<path>``. None when ``obj`` cannot be one at all."""
    for _ in range(_MAX_FIXES):
        try:
            return msgspec.convert(obj, type=typ)
        except msgspec.ValidationError as exc:
            m = _AT.search(str(exc))
            steps = _STEP.findall(m.group(1)) if m else []
            if (
                not m
                or not steps
                or "".join(f".{k}" if k else f"[{i}]" for k, i in steps) != m.group(1)
            ):
                return None  # the record itself is not an object, or an unreadable path
            parent = obj
            for key, index in steps[:-1]:
                parent = parent[key] if key else parent[int(index)]
            key, index = steps[-1]
            if key and isinstance(parent, dict):
                del parent[key]
            elif not key and isinstance(parent, list):
                parent[int(index)] = None
            else:
                return None
            note_null(where + m.group(1))
    return None


def _records(values: Any, typ: type[S], where: str) -> list[S]:
    """The elements of an untyped list that convert to ``typ``; the others dropped, counted."""
    if not isinstance(values, list):
        if values is not None:
            note_null(where)
        return []
    out = []
    for v in values:
        rec = _convert(v, typ, where)
        if rec is None:
            note_dropped(f"{where}: record not readable")
        else:
            out.append(rec)
    return out


def _lenient_root(data: bytes) -> _Root:
    """The file decoded untyped, then converted record by record (see the module docstring)."""
    doc = msgspec.json.decode(data)
    tool = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(tool, list):
        raise msgspec.ValidationError("rocprofiler-sdk-tool is not a list")
    procs = []
    for p in tool:
        if not isinstance(p, dict):
            note_dropped("rocprofiler-sdk-tool: process not an object")
            continue
        buffers = p.get("buffer_records")
        if not isinstance(buffers, dict):
            if buffers is not None:
                note_null("buffer_records")
            buffers = {}
        proc = _Process(
            metadata=_convert(p.get("metadata") or {}, _Meta, "metadata") or _Meta(),
            agents=_records(p.get("agents"), _Agent, "agents"),
            kernel_symbols=_records(p.get("kernel_symbols"), _Symbol, "kernel_symbols"),
            buffer_records=_Buffers(
                kernel_dispatch=_records(buffers.get("kernel_dispatch"), _Dispatch,
                                         "kernel_dispatch"),
                memory_copy=_records(buffers.get("memory_copy"), _Copy, "memory_copy"),
                hip_api=_list(buffers.get("hip_api")),
                hsa_api=_list(buffers.get("hsa_api")),
                marker_api=_list(buffers.get("marker_api")),
            ),
        )  # fmt: skip
        procs.append(proc)
    return _Root(tool=procs)


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _timed(start: int | None, end: int | None, where: str) -> bool:
    if start is None or end is None:
        note_dropped(f"{where}: start/end missing or not a number")
        return False
    if end < start:
        note_dropped(f"{where}: end before start")
        return False
    if not (_INT64_MIN <= start <= _INT64_MAX and _INT64_MIN <= end <= _INT64_MAX):
        note_dropped(f"{where}: start/end beyond int64")
        return False
    return True


def _is_gpu(a: _Agent) -> bool:
    return a.type == 2 or str(a.type).upper() == "GPU"


def _ceil(g: int | None, w: int | None) -> int | None:
    if g is None or not w:
        return None
    return -(-g // w)


def read_rocprofv3_json(path: Path) -> TraceTables:
    """Read a rocprofv3 JSON output file."""
    with collecting() as odd:
        out = _read(path)
    out.meta.update(odd.meta())
    return out


def _read(path: Path) -> TraceTables:
    with open_binary(path) as f:
        try:
            data = f.read()
        except (OSError, EOFError, zlib.error) as exc:
            # gzip.BadGzipFile is an OSError; a corrupt deflate stream raises zlib.error
            raise InputError(f"{path}: unreadable ({exc}), expected {_EXPECTED}") from None
    if not data.strip():
        raise InputError(f"{path}: empty file, expected {_EXPECTED}")
    try:
        try:
            root = msgspec.json.decode(data, type=_Root)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            # NaN, numbers beyond a double, bad UTF-8: repaired (and counted) when that is all
            found: dict[str, int] = {}
            fixed = repair_json(data, found)
            if fixed is None and not isinstance(exc, msgspec.ValidationError):
                raise
            data = fixed if fixed is not None else data
            for field, count in found.items():
                note_null(field, count)
            try:
                root = msgspec.json.decode(data, type=_Root)
            except msgspec.ValidationError:
                # a value of an unexpected type somewhere: convert record by record
                root = _lenient_root(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        msg = " ".join(str(exc).split())[:160]
        raise InputError(
            f"{path}: truncated or malformed JSON, expected {_EXPECTED}: {msg}"
        ) from None
    del data
    k: dict[str, list[Any]] = {c: [] for c in KERNELS.column_names}
    m: dict[str, list[Any]] = {c: [] for c in MEMCPY.column_names}
    devices: list[dict[str, Any]] = []
    api_records = 0
    for proc in root.tool:
        gpu: dict[int | None, int] = {}
        is_gpu: dict[int | None, bool] = {}
        for a in proc.agents:
            is_gpu[a.id.handle] = _is_gpu(a)
            if _is_gpu(a):
                gpu[a.id.handle] = len(gpu)
                devices.append(
                    {
                        "index": gpu[a.id.handle],
                        "name": a.name,
                        "product": a.product_name,
                        "cu_count": a.cu_count,
                        "wavefront_size": a.wave_front_size,
                        "process_id": proc.metadata.pid,
                    }
                )
        syms = {s.kernel_id: s for s in proc.kernel_symbols}
        for d in proc.buffer_records.kernel_dispatch:
            if not _timed(d.start_timestamp, d.end_timestamp, "kernel_dispatch"):
                continue
            info = d.dispatch_info
            sym = syms.get(info.kernel_id) if info.kernel_id is not None else None
            name = sym and (sym.formatted_kernel_name or sym.kernel_name)
            if not name:
                # KERNELS.name is required: a dispatch nobody can name is left out
                note_dropped("kernel_dispatch: kernel_id without a kernel_symbols name")
                continue
            wg, gr = info.workgroup_size, info.grid_size
            # the record's fields by their SDK names; KERNEL_FIELDS maps them to columns
            fields = {
                "stream_id": d.stream_id.handle if d.stream_id else None,
                "queue_id": info.queue_id.handle,
                "correlation_id": d.correlation_id.internal,
                "dispatch_id": info.dispatch_id,
                "process_id": proc.metadata.pid,
                "thread_id": d.thread_id,
                "arch_vgpr_count": sym.arch_vgpr_count if sym else None,
                "accum_vgpr_count": sym.accum_vgpr_count if sym else None,
                "sgpr_count": sym.sgpr_count if sym else None,
                "group_segment_size": info.group_segment_size,
                "private_segment_size": info.private_segment_size,
            }
            row = {
                "name": name,
                "start_ns": d.start_timestamp,
                "end_ns": d.end_timestamp,
                "device": gpu.get(info.agent_id.handle),
                "grid_x": _ceil(gr.x, wg.x),
                "grid_y": _ceil(gr.y, wg.y),
                "grid_z": _ceil(gr.z, wg.z),
                "block_x": wg.x,
                "block_y": wg.y,
                "block_z": wg.z,
                **{column: fields[f] for column, f in _KERNEL_COLUMNS},
            }
            for c in KERNELS.column_names:
                k[c].append(row.get(c))
        for cp in proc.buffer_records.memory_copy:
            if not _timed(cp.start_timestamp, cp.end_timestamp, "memory_copy"):
                continue
            kind = copy_kind(is_gpu.get(cp.src_agent_id.handle), is_gpu.get(cp.dst_agent_id.handle))
            src, dst = gpu.get(cp.src_agent_id.handle), gpu.get(cp.dst_agent_id.handle)
            row = {
                "name": f"MEMORY_COPY_{kind}",
                "kind": kind,
                "bytes": cp.bytes,
                "start_ns": cp.start_timestamp,
                "end_ns": cp.end_timestamp,
                "device": copy_device(kind, src, dst),
                "src_device": src,
                "dst_device": dst,
                "correlation_id": cp.correlation_id.internal,
            }
            for col in MEMCPY.column_names:
                m[col].append(row.get(col))
        b = proc.buffer_records
        api_records += len(b.hip_api) + len(b.hsa_api) + len(b.marker_api)
    out = TraceTables()
    for spec, cols, attr in ((KERNELS, k, "kernels"), (MEMCPY, m, "memcpy")):
        n = len(cols["start_ns"])
        start = pa.chunked_array([pa.array(cols["start_ns"], _I64)])
        end = pa.chunked_array([pa.array(cols["end_ns"], _I64)])
        dur = check_times(path, start, end, _EXPECTED)
        given = {
            c: lenient_array(v, spec.schema.field(c).type, f"{attr}.{c}")
            for c, v in cols.items()
            if c
            in (set(spec.column_names) - {"source", "time_is_gpu", "dur_ns", "start_ns", "end_ns"})
        }
        given.update(source=SOURCE, start_ns=start, end_ns=end, dur_ns=dur)
        if attr == "kernels":
            given["time_is_gpu"] = True
        setattr(out, attr, fill_table(path, spec, n, given))
    out.meta = {
        "tool": "rocprofv3",
        "format": SOURCE,
        "files": [str(path)],
        "clock": dict(CLOCK),
        "devices": devices,
        "device_ids": "GPU index 0..n-1 in agents order",
        "api_records_not_tabled": api_records,
    }
    return out


class Rocprofv3JsonImporter(Importer):
    """rocprofv3 JSON output (``rocprofiler-sdk-tool``)."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = 'rocprofv3 JSON output ({"rocprofiler-sdk-tool": [...]})'

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        return head.lstrip()[:1] == b"{" and _KEY in head[:4096]

    def read(self, path: Path) -> TraceTables:
        return read_rocprofv3_json(path)
