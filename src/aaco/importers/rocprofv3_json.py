"""Read rocprofv3 JSON output (``--output-format json``) into KERNELS and MEMCPY.

The file is ``{"rocprofiler-sdk-tool": [ {per process: metadata, agents, kernel_symbols,
buffer_records{kernel_dispatch, memory_copy, ...}} ]}``. Kernel names come from
``kernel_symbols`` by ``kernel_id``; ``dispatch_info.grid_size`` counts work-items, so
``grid_* = ceil(grid_size / workgroup_size)``. ``dispatch_info.agent_id.handle`` is mapped to
a GPU index 0..n-1 in ``agents`` order (GPU agents, ``type`` 2). Memory copies get their
direction from the source/destination agent types and ``bytes`` when the record has it.
Records are decoded with msgspec into typed structs (only the fields used are kept), and each
table column is then built from all the records at once (names dictionary-encoded by kernel
symbol). API records (``hip_api`` ...) are counted in ``meta`` but not tabled (nor decoded):
their names need the tool's operation-name tables, which this reader does not decode yet.

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
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.errors import InputError
from aaco.importers._chrome_json import repair_json
from aaco.importers._csv import check_times, fill_table, lenient_array
from aaco.importers._lenient import collecting, note_dropped, note_null
from aaco.importers._rocprofiler_sdk import (
    AGENT_GPU,
    AGENT_HOST,
    AGENT_UNKNOWN,
    CLOCK,
    KERNEL_FIELDS,
    ceil_div,
    copy_kinds,
)
from aaco.importers.base import Importer, TraceTables, open_binary
from aaco.session.schema import KERNELS, MEMCPY, TableSpec

__all__ = ["SOURCE", "Rocprofv3JsonImporter", "read_rocprofv3_json"]

SOURCE = "rocprofv3-json"
_KEY = b'"rocprofiler-sdk-tool"'
_EXPECTED = 'a rocprofv3 JSON file ({"rocprofiler-sdk-tool": [...]})'
_I64 = pa.int64()
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class _Handle(msgspec.Struct, gc=False):
    handle: int | None = None


class _XYZ(msgspec.Struct, gc=False):
    x: int | None = None
    y: int | None = None
    z: int | None = None


class _Corr(msgspec.Struct, gc=False):
    internal: int | None = None


class _DispatchInfo(msgspec.Struct, gc=False):
    agent_id: _Handle = msgspec.field(default_factory=_Handle)
    queue_id: _Handle = msgspec.field(default_factory=_Handle)
    kernel_id: int | None = None
    dispatch_id: int | None = None
    private_segment_size: int | None = None
    group_segment_size: int | None = None
    workgroup_size: _XYZ = msgspec.field(default_factory=_XYZ)
    grid_size: _XYZ = msgspec.field(default_factory=_XYZ)


class _Dispatch(msgspec.Struct, gc=False):
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    dispatch_info: _DispatchInfo = msgspec.field(default_factory=_DispatchInfo)
    thread_id: int | None = None
    correlation_id: _Corr = msgspec.field(default_factory=_Corr)
    stream_id: _Handle | None = None


class _Copy(msgspec.Struct, gc=False):
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    src_agent_id: _Handle = msgspec.field(default_factory=_Handle)
    dst_agent_id: _Handle = msgspec.field(default_factory=_Handle)
    correlation_id: _Corr = msgspec.field(default_factory=_Corr)
    bytes: int | None = None
    thread_id: int | None = None


class _Symbol(msgspec.Struct, gc=False):
    kernel_id: int | None = None
    kernel_name: str | None = None
    formatted_kernel_name: str | None = None
    arch_vgpr_count: int | None = None
    accum_vgpr_count: int | None = None
    sgpr_count: int | None = None


class _Agent(msgspec.Struct, gc=False):
    id: _Handle = msgspec.field(default_factory=_Handle)
    type: int | str | None = None
    name: str | None = None
    product_name: str | None = None
    cu_count: int | None = None
    wave_front_size: int | None = None
    logical_node_id: int | None = None


class _Buffers(msgspec.Struct, gc=False):
    kernel_dispatch: list[_Dispatch] = []
    memory_copy: list[_Copy] = []
    # counted, not decoded: msgspec keeps each record's bytes only
    hip_api: list[msgspec.Raw] = []
    hsa_api: list[msgspec.Raw] = []
    marker_api: list[msgspec.Raw] = []


class _Meta(msgspec.Struct, gc=False):
    pid: int | None = None


class _Process(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    agents: list[_Agent] = []
    kernel_symbols: list[_Symbol] = []
    buffer_records: _Buffers = msgspec.field(default_factory=_Buffers)


class _Root(msgspec.Struct, gc=False):
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

_START, _END = attrgetter("start_timestamp"), attrgetter("end_timestamp")

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
    kernels: list[pa.Table] = []
    copies: list[pa.Table] = []
    devices: list[dict[str, Any]] = []
    api_records = 0
    for proc in root.tool:
        gpu: dict[int | None, int] = {}
        state: dict[int | None, int] = {}
        for a in proc.agents:
            state[a.id.handle] = AGENT_GPU if _is_gpu(a) else AGENT_HOST
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
        b = proc.buffer_records
        kernels.append(_kernels(path, proc, gpu))
        copies.append(_copies(path, b.memory_copy, gpu, state))
        api_records += len(b.hip_api) + len(b.hsa_api) + len(b.marker_api)
    out = TraceTables()
    if kernels:
        out.kernels = pa.concat_tables(kernels)
    if copies:
        out.memcpy = pa.concat_tables(copies)
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


def _keep_timed(
    start: list[int | None], end: list[int | None], where: str
) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """(start, end, rows kept or None for all) of records with a usable start and end; the
    others are counted as dropped, as :func:`_timed` says."""
    try:
        s, e = pa.array(start, _I64), pa.array(end, _I64)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        # a time beyond int64: record by record
        keep = [_timed(a, b, where) for a, b in zip(start, end, strict=True)]
        s = pa.array([a if k else None for a, k in zip(start, keep, strict=True)], _I64)
        e = pa.array([b if k else None for b, k in zip(end, keep, strict=True)], _I64)
        return s, e, None if all(keep) else pa.array(keep)
    present = pc.and_(pc.is_valid(s), pc.is_valid(e))
    ordered = pc.fill_null(pc.greater_equal(e, s), False)
    kept = pc.and_(present, ordered)
    n, m, k = len(s), int(pc.sum(present).as_py() or 0), int(pc.sum(kept).as_py() or 0)
    note_dropped(f"{where}: start/end missing or not a number", n - m)
    note_dropped(f"{where}: end before start", m - k)
    return s, e, None if k == n else kept


def _table(
    path: Path, spec: TableSpec, n: int, start: pa.Array, end: pa.Array, given: dict[str, Any]
) -> pa.Table:
    """The table of ``spec``: Python lists through :func:`lenient_array` (a value that does
    not fit is null, counted), arrays as they are."""
    cols: dict[str, Any] = {
        c: lenient_array(v, spec.schema.field(c).type, f"{spec.name}.{c}")
        if isinstance(v, list) else v
        for c, v in given.items()
    }  # fmt: skip
    dur = check_times(path, pa.chunked_array([start]), pa.chunked_array([end]), _EXPECTED)
    cols.update(source=SOURCE, start_ns=start, end_ns=end, dur_ns=dur)
    return fill_table(path, spec, n, cols)


def _kernels(path: Path, proc: _Process, gpu: dict[int | None, int]) -> pa.Table:
    """KERNELS of one process: every column built from the records at once."""
    ds = proc.buffer_records.kernel_dispatch
    start, end, keep = _keep_timed(list(map(_START, ds)), list(map(_END, ds)), "kernel_dispatch")
    # a dispatch's name is its symbol's (the last symbol of a kernel id wins)
    syms = {s.kernel_id: s for s in proc.kernel_symbols if s.kernel_id is not None}
    symbols = list(syms.values())
    position = {kid: i for i, kid in enumerate(syms)}
    names = [s.formatted_kernel_name or s.kernel_name or None for s in symbols]
    kernel_ids = map(attrgetter("dispatch_info.kernel_id"), ds)
    index = pa.array([position.get(k, -1) for k in kernel_ids], pa.int32())
    named_sym = pa.array([nm is not None for nm in names] + [False], pa.bool_())
    named = pc.take(named_sym, pc.if_else(pc.less(index, 0), len(names), index))
    timed = keep if keep is not None else pa.array(np.ones(len(ds), bool))
    keep_all = pc.and_(timed, named)
    # KERNELS.name is required: a dispatch nobody can name is left out
    note_dropped(
        "kernel_dispatch: kernel_id without a kernel_symbols name",
        int(pc.sum(timed).as_py() or 0) - int(pc.sum(keep_all).as_py() or 0),
    )
    if int(pc.sum(keep_all).as_py() or 0) != len(ds):
        mask = keep_all.to_numpy(zero_copy_only=False)
        ds = [d for d, k in zip(ds, mask, strict=True) if k]
        start, end, index = start.filter(keep_all), end.filter(keep_all), index.filter(keep_all)
    n = len(ds)

    def each(field: str) -> list[Any]:
        return list(map(attrgetter(field), ds))

    def per_symbol(values: list[Any]) -> pa.Array:
        return pc.take(lenient_array(values, _I64, "kernel_symbols"), index)

    # the record's fields by their SDK names; KERNEL_FIELDS maps them to columns
    fields: dict[str, Any] = {
        "stream_id": [d.stream_id.handle if d.stream_id else None for d in ds],
        "queue_id": each("dispatch_info.queue_id.handle"),
        "correlation_id": each("correlation_id.internal"),
        "dispatch_id": each("dispatch_info.dispatch_id"),
        "process_id": proc.metadata.pid,
        "thread_id": each("thread_id"),
        "arch_vgpr_count": per_symbol([s.arch_vgpr_count for s in symbols]),
        "accum_vgpr_count": per_symbol([s.accum_vgpr_count for s in symbols]),
        "sgpr_count": per_symbol([s.sgpr_count for s in symbols]),
        "group_segment_size": each("dispatch_info.group_segment_size"),
        "private_segment_size": each("dispatch_info.private_segment_size"),
    }
    given: dict[str, Any] = {
        "name": pa.DictionaryArray.from_arrays(index, pa.array(names, pa.string())),
        "time_is_gpu": True,
        "device": list(map(gpu.get, each("dispatch_info.agent_id.handle"))),
        **{f"block_{a}": each(f"dispatch_info.workgroup_size.{a}") for a in "xyz"},
        **{column: fields[f] for column, f in _KERNEL_COLUMNS},
    }
    for a in "xyz":
        g = each(f"dispatch_info.grid_size.{a}")
        try:
            given[f"grid_{a}"] = ceil_div(pa.array(g, _I64), pa.array(given[f"block_{a}"], _I64))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            # a size beyond int64: value by value (and null, counted, where it does not fit)
            given[f"grid_{a}"] = [_ceil(x, y) for x, y in zip(g, given[f"block_{a}"], strict=True)]
    return _table(path, KERNELS, n, start, end, given)


def _copies(
    path: Path, cps: list[_Copy], gpu: dict[int | None, int], state: dict[int | None, int]
) -> pa.Table:
    """MEMCPY of one process: direction from the two agents' types."""
    start, end, keep = _keep_timed(list(map(_START, cps)), list(map(_END, cps)), "memory_copy")
    if keep is not None:
        mask = keep.to_numpy(zero_copy_only=False)
        cps = [c for c, k in zip(cps, mask, strict=True) if k]
        start, end = start.filter(keep), end.filter(keep)
    src_h = list(map(attrgetter("src_agent_id.handle"), cps))
    dst_h = list(map(attrgetter("dst_agent_id.handle"), cps))
    kinds, device_is_dst = copy_kinds(
        np.array([state.get(h, AGENT_UNKNOWN) for h in src_h], np.int8),
        np.array([state.get(h, AGENT_UNKNOWN) for h in dst_h], np.int8),
    )
    src = pa.array(list(map(gpu.get, src_h)), pa.int32())
    dst = pa.array(list(map(gpu.get, dst_h)), pa.int32())
    names = pa.DictionaryArray.from_arrays(
        kinds.indices, pc.binary_join_element_wise("MEMORY_COPY_", kinds.dictionary, "")
    )
    return _table(path, MEMCPY, len(cps), start, end, {
        "name": names,
        "kind": kinds,
        "bytes": list(map(attrgetter("bytes"), cps)),
        "device": pc.if_else(pa.array(device_is_dst), dst, src),
        "src_device": src,
        "dst_device": dst,
        "correlation_id": list(map(attrgetter("correlation_id.internal"), cps)),
    })  # fmt: skip


class Rocprofv3JsonImporter(Importer):
    """rocprofv3 JSON output (``rocprofiler-sdk-tool``)."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = 'rocprofv3 JSON output ({"rocprofiler-sdk-tool": [...]})'

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        return head.lstrip()[:1] == b"{" and _KEY in head[:4096]

    def read(self, path: Path) -> TraceTables:
        return read_rocprofv3_json(path)
