"""Read rocprofv3 CSV output into KERNELS, API_CALLS, MEMCPY, ANNOTATIONS and KERNEL_COUNTERS.

``rocprofv3 --kernel-trace --hip-trace --memory-copy-trace --output-format csv -d OUT`` writes
``OUT/<host>/<pid>_<domain>.csv``. Each file is recognised by its header columns (matched by
name, case-insensitively, so the ``rocpd convert`` spelling with a leading ``Guid`` column,
``Lds_Block_Size`` and ``Vgpr_Count`` reads the same):

* kernel trace, all three column generations (without ``Stream_Id``; with it; with
  ``LDS_Block_Size/Scratch_Size/VGPR_Count/Accum_VGPR_Count/SGPR_Count`` instead of
  ``Group_Segment_Size/Private_Segment_Size``). ``Grid_Size_*`` counts work-items, so
  ``grid_* = ceil(Grid_Size_* / Workgroup_Size_*)`` (workgroups, as the schema says);
* API traces (``Domain,Function,...``): HIP/HSA/RCCL calls go to API_CALLS (domain ``hip``,
  ``hsa`` ...; kind from :func:`aaco.importers.kineto.api_kind`), roctx ranges (domain
  ``MARKER_*``) to ANNOTATIONS with kind ``marker``;
* memory copies (``Direction`` ``MEMORY_COPY_HOST_TO_DEVICE`` -> ``HtoD`` ...; bytes null:
  the CSV has no byte count);
* counter collection (long format, one row per dispatch x counter) to KERNEL_COUNTERS; when it
  carries timestamps its dispatches also become kernels (grid/block null: the file only gives
  total sizes), dropped in a directory import that also has a kernel trace;
* agent info (-> ``meta["devices"]``), memory allocation and scratch memory traces (counted in
  meta), ``*_stats.csv`` (-> ``meta["stats"]``).

Devices: ``Agent_Id`` is an integer (old) or a label such as ``Agent 2`` / ``GPU 0``. With the
run's ``agent_info.csv`` (same ``<pid>_`` prefix, or read together by
:func:`read_rocprofv3_dir`) agents map to GPU indices 0..n-1 in agent order, GPUs only (host
agents become null); without it the numeric agent id is kept and ``meta["device_ids"]`` says
so. ``process_id`` comes from the ``Process_Id`` column, else from the ``<pid>_`` file-name
prefix, else null. Timestamps are integer ns on the profiler's clock (since boot) and are
parsed straight to int64. Which column a rocprofiler-SDK field fills (shared with the JSON and
rocpd readers) is declared in :mod:`aaco.importers._rocprofiler_sdk`.

Example::

    tables = read_rocprofv3_dir(Path("rocprof_out"))
    tables.kernels.select(["name", "start_ns", "dur_ns", "grid_x", "block_x"])
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from aaco.errors import InputError
from aaco.importers._csv import (
    CsvHeader,
    check_times,
    fill_table,
    map_values,
    pid_from_name,
    read_columns,
    read_header,
)
from aaco.importers._lenient import collecting, note_dropped, note_null, to_int
from aaco.importers._rocprofiler_sdk import (
    CLOCK,
    KERNEL_FIELDS,
    api_calls_and_markers,
    api_domain,
    csv_keys,
    direction_kind,
    first_present,
)
from aaco.importers.base import Importer, TraceTables
from aaco.session.schema import KERNEL_COUNTERS, KERNELS, MEMCPY

__all__ = [
    "SOURCE",
    "AgentMap",
    "Rocprofv3CsvImporter",
    "Rocprofv3DirImporter",
    "api_domain",
    "classify",
    "read_rocprofv3_csv",
    "read_rocprofv3_dir",
]

SOURCE = "rocprofv3-csv"

_I64 = pa.int64()
_F64 = pa.float64()
_STR = pa.string()
# few distinct values in millions of rows: parsed into a dictionary, not one string per row
_DICT = pa.dictionary(pa.int32(), pa.string())

#: what each recognised domain is, for error messages
_EXPECTED = {
    "kernel_trace": "a rocprofv3 kernel trace CSV",
    "api_trace": "a rocprofv3 API trace CSV (Domain,Function,...)",
    "memory_copy": "a rocprofv3 memory copy trace CSV",
    "memory_allocation": "a rocprofv3 memory allocation trace CSV",
    "scratch_memory": "a rocprofv3 scratch memory trace CSV",
    "counter_collection": "a rocprofv3 counter collection CSV",
    "agent_info": "a rocprofv3 agent info CSV",
    "stats": "a rocprofv3 stats CSV",
}

# Header keys (see aaco.importers._csv.norm) that identify each domain. Kernel traces need
# agentid: the legacy v2 CSV has the same Kernel_Name/Start_Timestamp columns but GPU_ID.
_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("counter_collection", ("countername", "countervalue", "dispatchid", "kernelname")),
    (
        "kernel_trace",
        ("agentid", "dispatchid", "kernelname", "starttimestamp", "endtimestamp", "gridsizex"),
    ),
    ("api_trace", ("domain", "function", "starttimestamp", "endtimestamp")),
    (
        "memory_copy",
        ("direction", "sourceagentid", "destinationagentid", "starttimestamp", "endtimestamp"),
    ),
    ("memory_allocation", ("operation", "allocationsize", "starttimestamp", "endtimestamp")),
    ("scratch_memory", ("operation", "agentid", "allocflags", "starttimestamp")),
    ("agent_info", ("nodeid", "agenttype")),
    ("stats", ("name", "calls", "totaldurationns", "averagens", "percentage", "minns", "maxns")),
)

_TIMES = ("starttimestamp", "endtimestamp")
_KERNEL_REQUIRED = (
    "agentid",
    "kernelname",
    "starttimestamp",
    "endtimestamp",
)


def classify(header: CsvHeader) -> str | None:
    """The rocprofv3 CSV domain a header belongs to (``kernel_trace``, ``api_trace`` ...)."""
    for domain, keys in _SIGNATURES:
        if header.has(*keys):
            return domain
    return None


# --------------------------------------------------------------------------- agents


_AGENT_LABEL = re.compile(r"^\s*([A-Za-z]*)\s*(-?\d+)\s*$")


def _parse_agent(value: Any) -> tuple[str, int] | None:
    """``3`` / ``"Agent 3"`` -> ("agent", 3); ``"GPU 0"`` -> ("gpu", 0); else None."""
    if value is None:
        return None
    m = _AGENT_LABEL.match(str(value))
    if not m:
        return None
    prefix = m.group(1).lower()
    return (prefix if prefix in ("gpu", "cpu") else "agent"), int(m.group(2))


@dataclass
class AgentMap:
    """Agent id -> GPU index, from a run's ``agent_info.csv``.

    rocprofv3 writes ``Agent_Id`` as the agent's logical node id (``Agent N`` labels too);
    ``GPU N`` labels (``--agent-index type-relative``) already are GPU indices.
    """

    gpu_index: dict[int, int] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    source: str | None = None

    def device(self, value: Any) -> int | None:
        parsed = _parse_agent(value)
        if parsed is None:
            return None
        kind, n = parsed
        if kind == "gpu":
            return n
        if kind == "cpu":
            return None
        if self.source is None:
            return n  # no agent info: keep the agent id as reported
        return self.gpu_index.get(n)


_NO_AGENTS = AgentMap()


def _device_ids_note(agents: AgentMap) -> str:
    if agents.source is None:
        return "rocprofv3 agent id as reported (no agent_info.csv to map agents to GPU indices)"
    return f"GPU index 0..n-1 in agent order, from {agents.source}"


def _devices(col: pa.ChunkedArray | None, agents: AgentMap, path: Path) -> pa.Array | None:
    if col is None:
        return None

    def one(v: Any) -> int | None:
        d = agents.device(v)  # None for a value that is neither a number nor 'Agent N'
        return d if d is not None and 0 <= d < (1 << 31) else None

    odd = map_values(col, lambda v: v is not None and _parse_agent(v) is None, pa.bool_())
    note_null("Agent_Id", pc.sum(odd).as_py() or 0)
    return map_values(col, one, pa.int32())


def read_agent_info(header: CsvHeader) -> AgentMap:
    """GPU agents of an ``agent_info.csv``, numbered 0..n-1 in file (agent) order."""
    path = header.path
    types = {
        k: _STR
        for k in (
            "nodeid",
            "logicalnodeid",
            "agenttype",
            "name",
            "productname",
            "cucount",
            "simdpercu",
            "wavefrontsize",
            "maxwavespercu",
            "maxengineclkfcompute",
            "gfxtargetversion",
            "numxcc",
        )
    }
    cols, _ = read_columns(header, types, _EXPECTED["agent_info"], required=("nodeid", "agenttype"))
    rows = pa.table(cols).to_pylist()

    def num(v: Any) -> int | None:
        if v in (None, ""):
            return None
        out = to_int(v)
        if out is None:
            note_null("agent_info", 1)
        return out

    out = AgentMap(source=path.name)
    for r in rows:
        node = num(r.get("nodeid"))
        logical = num(r.get("logicalnodeid"))
        agent_id = logical if logical is not None else node
        if agent_id is None or str(r.get("agenttype", "")).upper() != "GPU":
            continue
        index = len(out.devices)
        out.gpu_index[agent_id] = index
        out.devices.append(
            {
                "index": index,
                "agent_id": agent_id,
                "node_id": node,
                "name": r.get("name") or None,
                "product": r.get("productname") or None,
                "gfx_target": r.get("name") or None,
                "gfx_target_version": num(r.get("gfxtargetversion")),
                "cu_count": num(r.get("cucount")),
                "simd_per_cu": num(r.get("simdpercu")),
                "wavefront_size": num(r.get("wavefrontsize")),
                "max_waves_per_cu": num(r.get("maxwavespercu")),
                "max_clock_mhz": num(r.get("maxengineclkfcompute")),
                "num_xcc": num(r.get("numxcc")),
            }
        )
    return out


# --------------------------------------------------------------------------- domains


def _ceil_div(num: pa.ChunkedArray | None, den: pa.ChunkedArray | None) -> pa.Array | None:
    """ceil(num / den) for work-items -> workgroups; null where den is null or 0."""
    if num is None or den is None:
        return None
    ok = pc.greater(den, 0)
    safe = pc.if_else(ok, den, 1)
    q = pc.divide(pc.subtract(pc.add(num, safe), 1), safe)
    return pc.if_else(ok, q, pa.scalar(None, _I64))


#: KERNELS column -> the CSV header keys that carry it (see KERNEL_FIELDS), preferred first
_KERNEL_KEYS: dict[str, tuple[str, ...]] = {c: csv_keys(f) for c, f in KERNEL_FIELDS.items()}
#: every one of those keys, read as integers
_KERNEL_FIELD_TYPES: dict[str, pa.DataType] = {k: _I64 for ks in _KERNEL_KEYS.values() for k in ks}

_KERNEL_TYPES: dict[str, pa.DataType] = {
    **_KERNEL_FIELD_TYPES,
    "agentid": _DICT,
    "kernelname": _DICT,
    "starttimestamp": _I64,
    "endtimestamp": _I64,
    **{f"{dim}size{a}": _I64 for dim in ("workgroup", "grid") for a in "xyz"},
}


def _kernel_fields(cols: dict[str, pa.ChunkedArray], path: Path) -> dict[str, Any]:
    """The KERNEL_FIELDS columns the file has (absent: None); the process id from the
    ``<pid>_`` file-name prefix when there is no process column."""
    out = {c: first_present(cols, keys) for c, keys in _KERNEL_KEYS.items()}
    if out["process_id"] is None:
        out["process_id"] = pid_from_name(path)
    return out


def read_kernel_trace(header: CsvHeader, agents: AgentMap = _NO_AGENTS) -> pa.Table:
    """KERNELS rows of a ``*_kernel_trace.csv`` (any of the three column generations)."""
    path = header.path
    expected = _EXPECTED["kernel_trace"]
    cols, n = read_columns(header, _KERNEL_TYPES, expected, required=_KERNEL_REQUIRED, times=_TIMES)
    start, end = cols["starttimestamp"], cols["endtimestamp"]
    dur = check_times(path, start, end, expected)
    wg = [cols.get(f"workgroupsize{a}") for a in "xyz"]
    return fill_table(
        path,
        KERNELS,
        n,
        {
            "source": SOURCE,
            "name": cols["kernelname"],
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "time_is_gpu": True,
            "device": _devices(cols.get("agentid"), agents, path),
            "grid_x": _ceil_div(cols.get("gridsizex"), wg[0]),
            "grid_y": _ceil_div(cols.get("gridsizey"), wg[1]),
            "grid_z": _ceil_div(cols.get("gridsizez"), wg[2]),
            "block_x": wg[0],
            "block_y": wg[1],
            "block_z": wg[2],
            **_kernel_fields(cols, path),
        },
    )


def read_api_trace(header: CsvHeader) -> tuple[pa.Table, pa.Table]:
    """(API_CALLS, ANNOTATIONS) of a ``*_api_trace.csv``; marker-domain rows are annotations."""
    path = header.path
    expected = _EXPECTED["api_trace"]
    types = {
        "domain": _STR,
        "function": _STR,
        "processid": _I64,
        "threadid": _I64,
        "correlationid": _I64,
        "starttimestamp": _I64,
        "endtimestamp": _I64,
    }
    cols, n = read_columns(
        header,
        types,
        expected,
        required=("domain", "function", "starttimestamp", "endtimestamp"),
        times=_TIMES,
    )
    start, end = cols["starttimestamp"], cols["endtimestamp"]
    dur = check_times(path, start, end, expected)
    pid = pid_from_name(path)

    def col(key: str, default: int | None = None) -> Any:
        if key in cols:
            return cols[key]
        return pa.nulls(n, _I64) if default is None else pa.repeat(pa.scalar(default, _I64), n)

    records = pa.table(
        {
            "domain": map_values(cols["domain"], api_domain, _STR),
            "name": cols["function"],
            "process_id": col("processid", pid),
            "thread_id": col("threadid"),
            "correlation_id": col("correlationid"),
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
        }
    )
    return api_calls_and_markers(path, SOURCE, records)


def read_memory_copy(header: CsvHeader, agents: AgentMap = _NO_AGENTS) -> pa.Table:
    """MEMCPY rows of a ``*_memory_copy_trace.csv`` (bytes null: the CSV has no size).

    ``device`` is the GPU end of the copy: the destination for HtoD, else the source.
    """
    path = header.path
    expected = _EXPECTED["memory_copy"]
    types = {
        "direction": _STR,
        "streamid": _I64,
        "sourceagentid": _STR,
        "destinationagentid": _STR,
        "correlationid": _I64,
        "starttimestamp": _I64,
        "endtimestamp": _I64,
    }
    cols, n = read_columns(
        header,
        types,
        expected,
        required=("direction", "sourceagentid", "destinationagentid", "starttimestamp"),
        times=_TIMES,
    )
    header.require(["endtimestamp"], expected)
    start, end = cols["starttimestamp"], cols["endtimestamp"]
    dur = check_times(path, start, end, expected)
    kind = map_values(cols["direction"], direction_kind, _STR)
    src = _devices(cols["sourceagentid"], agents, path)
    dst = _devices(cols["destinationagentid"], agents, path)
    device = pc.if_else(pc.equal(kind, "HtoD"), dst, src)  # copy_device, vectorised
    return fill_table(
        path,
        MEMCPY,
        n,
        {
            "source": SOURCE,
            "name": cols["direction"],
            "kind": kind,
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "device": device,
            "stream": cols.get("streamid"),
            "src_device": src,
            "dst_device": dst,
            "correlation_id": cols.get("correlationid"),
        },
    )


def read_counter_collection(
    header: CsvHeader, agents: AgentMap = _NO_AGENTS
) -> tuple[pa.Table, pa.Table]:
    """(KERNEL_COUNTERS, KERNELS) of a ``*_counter_collection.csv`` (long format).

    Kernels are built only when the file has timestamps (one per dispatch, first row wins).
    """
    path = header.path
    expected = _EXPECTED["counter_collection"]
    types = {
        **_KERNEL_FIELD_TYPES,
        "agentid": _STR,
        "kernelname": _STR,
        "countername": _STR,
        "countervalue": _F64,
        "starttimestamp": _I64,
        "endtimestamp": _I64,
    }
    cols, n = read_columns(
        header,
        types,
        expected,
        required=("dispatchid", "kernelname", "countername", "countervalue"),
        times=_TIMES,
    )
    if cols["countervalue"].null_count:
        # a counter row without a value says nothing: left out, counted
        valid = pc.is_valid(cols["countervalue"])
        note_dropped("Counter_Value: empty or not a number", cols["countervalue"].null_count)
        cols = {k: c.filter(valid) for k, c in cols.items()}
        n = len(cols["countervalue"])
    device = _devices(cols.get("agentid"), agents, path)
    counters = fill_table(
        path,
        KERNEL_COUNTERS,
        n,
        {
            "source": SOURCE,
            "correlation_id": cols.get("correlationid"),
            "dispatch_id": cols["dispatchid"],
            "device": device,
            "kernel_name": cols["kernelname"],
            "counter": cols["countername"],
            "value": cols["countervalue"],
        },
    )
    if "starttimestamp" not in cols or "endtimestamp" not in cols or n == 0:
        return counters, KERNELS.empty()
    dur = check_times(path, cols["starttimestamp"], cols["endtimestamp"], expected)
    # one kernel per dispatch: the first row of each dispatch id, in file order
    idx = pa.table({"d": cols["dispatchid"], "i": pa.array(range(n), _I64)})
    first = idx.group_by("d", use_threads=False).aggregate([("i", "min")])["i_min"]
    take = pc.sort_indices(first)
    rows = first.take(take)

    def t(col: Any) -> Any:
        # a column of the file: the rows of the first dispatches; a scalar (file pid) as is
        return col.take(rows) if isinstance(col, (pa.Array, pa.ChunkedArray)) else col

    kernels = fill_table(
        path,
        KERNELS,
        len(rows),
        {
            "source": SOURCE,
            "name": t(cols["kernelname"]),
            "start_ns": t(cols["starttimestamp"]),
            "end_ns": t(cols["endtimestamp"]),
            "dur_ns": t(dur),
            "time_is_gpu": True,
            "device": t(device),
            **{c: t(v) for c, v in _kernel_fields(cols, path).items()},
        },
    )
    return counters, kernels


def read_stats(header: CsvHeader) -> list[dict[str, Any]]:
    """Rows of a ``*_stats.csv``: name, calls, total/avg/min/max ns, percentage, stddev."""
    types = {
        "name": _STR,
        "calls": _I64,
        "totaldurationns": _I64,
        "averagens": _F64,
        "percentage": _F64,
        "minns": _I64,
        "maxns": _I64,
        "stddev": _F64,
    }
    cols, _ = read_columns(
        header, types, _EXPECTED["stats"], required=("name", "calls", "totaldurationns")
    )
    rename = {
        "totaldurationns": "total_ns",
        "averagens": "avg_ns",
        "minns": "min_ns",
        "maxns": "max_ns",
        "stddev": "stddev_ns",
    }
    rows: list[dict[str, Any]] = pa.table(
        {rename.get(k, k): v for k, v in cols.items()}
    ).to_pylist()
    return rows


def _count_rows(header: CsvHeader, domain: str) -> int:
    _, n = read_columns(header, {"starttimestamp": _I64}, _EXPECTED[domain])
    return n


# --------------------------------------------------------------------------- files, dirs


def _sibling_agent_info(path: Path) -> AgentMap:
    """The ``<pid>_agent_info.csv`` beside a file of the same run, when there is one."""
    pid = pid_from_name(path)
    if pid is None:
        return _NO_AGENTS
    for cand in (
        path.with_name(f"{pid}_agent_info.csv"),
        path.with_name(f"{pid}_agent_info.csv.gz"),
    ):
        if cand.is_file():
            header = read_header(cand)
            if header is not None and classify(header) == "agent_info":
                return read_agent_info(header)
    return _NO_AGENTS


def _read_one(header: CsvHeader, domain: str, agents: AgentMap) -> TraceTables:
    path = header.path
    out = TraceTables()
    meta: dict[str, Any] = {
        "tool": "rocprofv3",
        "format": SOURCE,
        "domain": domain,
        "files": [str(path)],
        "clock": dict(CLOCK),
    }
    if domain == "kernel_trace":
        out.kernels = read_kernel_trace(header, agents)
    elif domain == "api_trace":
        out.api_calls, out.annotations = read_api_trace(header)
    elif domain == "memory_copy":
        out.memcpy = read_memory_copy(header, agents)
    elif domain == "counter_collection":
        out.kernel_counters, out.kernels = read_counter_collection(header, agents)
    elif domain == "agent_info":
        agents = read_agent_info(header)
        meta["devices"] = agents.devices
    elif domain == "stats":
        label = re.sub(r"^\d+_", "", path.name).removesuffix(".gz").removesuffix(".csv")
        meta["stats"] = {label: read_stats(header)}
    elif domain in ("memory_allocation", "scratch_memory"):
        meta[f"{domain}_events"] = _count_rows(header, domain)
    if agents.devices:
        meta["devices"] = agents.devices
    if domain in ("kernel_trace", "memory_copy", "counter_collection"):
        meta["device_ids"] = _device_ids_note(agents)
    out.meta = meta
    return out


def read_rocprofv3_csv(path: Path, agents: AgentMap | None = None) -> TraceTables:
    """Read one rocprofv3 CSV file of any recognised domain.

    Without ``agents`` the run's ``<pid>_agent_info.csv`` beside the file is used when present.
    """
    header = read_header(path)
    if header is None:
        _raise_not_csv(path)
    assert header is not None
    domain = classify(header)
    if domain is None:
        raise InputError(
            f"{path}: not a rocprofv3 CSV: header {', '.join(header.names[:6])}... matches no "
            "known domain (kernel trace, API trace, memory copy, counter collection, agent "
            "info, stats)"
        )
    with collecting() as odd:
        if agents is None:
            agents = _sibling_agent_info(path) if domain != "agent_info" else _NO_AGENTS
        out = _read_one(header, domain, agents)
    out.meta.update(odd.meta())
    return out


def _raise_not_csv(path: Path) -> None:
    if path.is_file() and path.stat().st_size == 0:
        raise InputError(f"{path}: empty file, expected a rocprofv3 CSV with a header line")
    raise InputError(f"{path}: not a CSV file with a header line, expected a rocprofv3 CSV")


def _csv_files(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.name.startswith(".") and p.name.endswith((".csv", ".csv.gz")):
            yield p


def read_rocprofv3_dir(path: Path) -> TraceTables:
    """Read every rocprofv3 CSV under an output directory; see :func:`_read_dir`."""
    with collecting() as odd:
        out = _read_dir(path)
    out.meta.update(odd.meta())
    return out


def _read_dir(path: Path) -> TraceTables:
    """Read every rocprofv3 CSV under an output directory (``<dir>/<host>/<pid>_*.csv``).

    Files of one process (same folder and ``<pid>_`` prefix) share that process's agent
    info, so device indices agree across its kernel, copy and counter files. CSVs that are
    not rocprofv3 output are listed in ``meta["skipped"]``; a recognised file that is
    truncated or malformed is an error (nothing is half-imported).
    """
    if not path.is_dir():
        raise InputError(f"{path}: not a directory, expected a rocprofv3 output directory")
    found: list[tuple[CsvHeader, str]] = []
    skipped: list[str] = []
    for p in _csv_files(path):
        header = read_header(p)
        domain = classify(header) if header is not None else None
        if header is None or domain is None:
            skipped.append(str(p))
        else:
            found.append((header, domain))
    if not found:
        raise InputError(f"{path}: no rocprofv3 CSV files found in this directory")

    def run_key(h: CsvHeader) -> tuple[Path, int | None]:
        return h.path.parent, pid_from_name(h.path)

    agent_maps: dict[tuple[Path, int | None], AgentMap] = {}
    for header, domain in found:
        if domain == "agent_info":
            agent_maps[run_key(header)] = read_agent_info(header)
    with_kernel_trace = {run_key(h) for h, d in found if d == "kernel_trace"}

    parts: list[TraceTables] = []
    devices: list[dict[str, Any]] = []
    notes: set[str] = set()
    stats: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for header, domain in found:
        key = run_key(header)
        agents = agent_maps.get(key, _NO_AGENTS)
        if domain == "agent_info":
            for d in agents.devices:
                devices.append({**d, "process_id": key[1], "file": header.path.name})
            continue
        part = _read_one(header, domain, agents)
        if domain == "counter_collection" and key in with_kernel_trace:
            # the kernel trace of the same run already has these dispatches
            part.kernels = KERNELS.empty()
        if "device_ids" in part.meta:
            notes.add(part.meta["device_ids"])
        for label, rows in part.meta.get("stats", {}).items():
            stats[f"{key[1]}_{label}" if key[1] is not None else label] = rows
        for k, v in part.meta.items():
            if k.endswith("_events"):
                counts[k] = counts.get(k, 0) + v
        parts.append(part)
    merged = TraceTables.merge(parts)
    merged.meta = {
        "tool": "rocprofv3",
        "format": SOURCE,
        "files": [str(h.path) for h, _ in found],
        "domains": sorted({d for _, d in found}),
        "clock": dict(CLOCK),
        "devices": devices,
        "device_ids": sorted(notes),
        "stats": stats,
        **counts,
        "skipped": skipped,
    }
    return merged


class Rocprofv3CsvImporter(Importer):
    """One rocprofv3 CSV file (kernel/API/copy trace, counters, agent info, stats)."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = (
        "rocprofv3 CSV: kernel, HIP/HSA/marker API, memory copy traces, counter collection, "
        "agent info, stats"
    )

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        header = read_header(path, head)
        return header is not None and classify(header) is not None

    def read(self, path: Path) -> TraceTables:
        return read_rocprofv3_csv(path)


class Rocprofv3DirImporter(Importer):
    """A rocprofv3 ``--output-format csv`` output directory, read as one run."""

    name: ClassVar[str] = "rocprofv3-dir"
    description: ClassVar[str] = "rocprofv3 CSV output directory (<dir>/<host>/<pid>_*.csv)"
    reads_directories: ClassVar[bool] = True

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        """A directory whose CSVs are all rocprofv3 output and that holds no other trace.

        A folder that mixes formats (e.g. a legacy ``results.csv`` or a Kineto ``.json``
        beside rocprofv3 files) is left to the per-file importers, so nothing in it is
        silently ignored.
        """
        if not path.is_dir():
            return False
        found = False
        try:
            for p in sorted(path.rglob("*")):
                if not p.is_file() or p.name.startswith("."):
                    continue
                if p.name.endswith((".json", ".json.gz", ".db", ".sqlite")):
                    return False
                if p.name.endswith((".csv", ".csv.gz")):
                    header = read_header(p)
                    if header is None or classify(header) is None:
                        return False
                    found = True
        except OSError:
            return False
        return found

    def read(self, path: Path) -> TraceTables:
        return read_rocprofv3_dir(path)
