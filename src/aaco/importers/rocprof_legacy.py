"""Read legacy rocprof output (v1 ``results.csv`` + stats, v2 CSV) into KERNELS, KERNEL_COUNTERS.

* v1 ``results.csv``: ``"Index","KernelName","gpu-id","queue-id",...,"BeginNs","EndNs",...``
  plus one column per requested counter (-> KERNEL_COUNTERS, long format). Kernel names end
  in `` [clone .kd]``; ``name`` is the name as reported *minus* that suffix. ``grd`` and
  ``wgr`` are total work-items and total workgroup size (not per axis), so ``grid_*`` and
  ``block_*`` stay null rather than pretending the launch was 1-D. ``Index`` is the dispatch
  id; v1 has no correlation id. A counters-only run without ``BeginNs/EndNs`` gives counters
  and no kernels. ``device`` is ``gpu-id`` as reported.
* ``results.stats.csv`` (``Name,Calls,TotalDurationNs,AverageNs,Percentage``) -> ``meta``.
* v2 CSV: ``Dispatch_ID,GPU_ID,...,Kernel_Name,Start_Timestamp,End_Timestamp,Correlation_ID``;
  ``Grid_Size``/``Workgroup_Size`` are totals too (grid/block null).

Timestamps are integer ns, parsed straight to int64.

Example::

    tables = RocprofV1Importer().read(Path("results.csv"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from aaco.errors import InputError
from aaco.importers._csv import CsvHeader, check_times, fill_table, read_columns, read_header
from aaco.importers._lenient import collecting, note_dropped
from aaco.importers.base import Importer, TraceTables
from aaco.session.schema import KERNEL_COUNTERS, KERNELS

__all__ = [
    "SOURCE_V1",
    "SOURCE_V2",
    "RocprofV1Importer",
    "RocprofV2Importer",
    "read_rocprof_v1",
    "read_rocprof_v2",
]

SOURCE_V1 = "rocprof-v1"
SOURCE_V2 = "rocprof-v2"

_I64 = pa.int64()
_F64 = pa.float64()
_DICT = pa.dictionary(pa.int32(), pa.string())
_CLOCK = {"unit": "ns", "origin": "ROCm profiler clock (ns since boot)"}

_V1 = "a rocprof v1 results.csv (Index, KernelName, gpu-id, ..., BeginNs, EndNs)"
_V1_STATS = "a rocprof v1 results.stats.csv (Name, Calls, TotalDurationNs, AverageNs, Percentage)"
_V2 = "a rocprof v2 kernel CSV (Dispatch_ID, GPU_ID, ..., Start_Timestamp, End_Timestamp)"

# every non-counter column of v1 results.csv, as keys
_V1_FIXED = frozenset(
    {
        "index",
        "kernelname",
        "gpuid",
        "queueid",
        "queueindex",
        "pid",
        "tid",
        "grd",
        "wgr",
        "lds",
        "scr",
        "archvgpr",
        "accumvgpr",
        "vgpr",
        "sgpr",
        "wavesize",
        "sig",
        "obj",
        "dispatchns",
        "beginns",
        "endns",
        "completens",
        "durationns",
    }
)


def _without_clone(names: pa.ChunkedArray) -> pa.ChunkedArray:
    """Kernel names less their `` [clone .kd]`` suffix, edited once per distinct name (the
    column is dictionary-encoded) and given back as text."""
    chunks = [
        pa.DictionaryArray.from_arrays(
            c.indices,
            pc.replace_substring_regex(c.dictionary, pattern=r" \[clone \.kd\]$", replacement=""),
        ).cast(pa.string())
        for c in names.chunks
    ]
    return pa.chunked_array(chunks, pa.string())


def _is_v1(h: CsvHeader) -> bool:
    return h.has("kernelname", "gpuid", "queueid") and (h.has("index") or h.has("beginns"))


def _is_v1_stats(h: CsvHeader) -> bool:
    return h.has("name", "calls", "totaldurationns", "averagens", "percentage") and not h.has(
        "minns"
    )


def _is_v2(h: CsvHeader) -> bool:
    return h.has("dispatchid", "gpuid", "kernelname", "starttimestamp", "endtimestamp")


def _meta(path: Path, source: str, **extra: Any) -> dict[str, Any]:
    return {
        "tool": "rocprof",
        "format": source,
        "files": [str(path)],
        "clock": dict(_CLOCK),
        "device_ids": "gpu-id as reported by rocprof",
        **extra,
    }


def read_rocprof_v1(path: Path) -> TraceTables:
    """Read a v1 ``results.csv`` (kernels + counters) or ``results.stats.csv`` (meta only)."""
    header = read_header(path)
    if header is None:
        if path.is_file() and path.stat().st_size == 0:
            raise InputError(f"{path}: empty file, expected {_V1}")
        raise InputError(f"{path}: not a CSV file, expected {_V1}")
    if _is_v1_stats(header):
        stat_types = {
            "name": pa.string(),
            "calls": _I64,
            "totaldurationns": _I64,
            "averagens": _F64,
            "percentage": _F64,
        }
        cols, _ = read_columns(header, stat_types, _V1_STATS, required=tuple(stat_types))
        rename = {"totaldurationns": "total_ns", "averagens": "avg_ns"}
        rows = pa.table({rename.get(k, k): v for k, v in cols.items()}).to_pylist()
        return TraceTables(meta=_meta(path, SOURCE_V1, stats={"results.stats": rows}))
    if not _is_v1(header):
        raise InputError(f"{path}: not {_V1}")
    keys = header.keys
    counters = [k for k in keys if k not in _V1_FIXED]
    types: dict[str, pa.DataType] = {
        "index": _I64,
        "kernelname": _DICT,
        "gpuid": _I64,
        "queueid": _I64,
        "pid": _I64,
        "tid": _I64,
        "lds": _I64,
        "scr": _I64,
        "archvgpr": _I64,
        "vgpr": _I64,
        "accumvgpr": _I64,
        "sgpr": _I64,
        "beginns": _I64,
        "endns": _I64,
    }
    types.update({k: _F64 for k in counters})
    cols, n = read_columns(header, types, _V1, required=("kernelname",), times=("beginns", "endns"))
    name = _without_clone(cols["kernelname"])
    out = TraceTables()
    if "beginns" in cols and "endns" in cols:
        dur = check_times(path, cols["beginns"], cols["endns"], _V1)
        out.kernels = fill_table(
            path,
            KERNELS,
            n,
            {
                "source": SOURCE_V1,
                "name": name,
                "start_ns": cols["beginns"],
                "end_ns": cols["endns"],
                "dur_ns": dur,
                "time_is_gpu": True,
                "device": cols.get("gpuid"),
                "queue": cols.get("queueid"),
                "dispatch_id": cols.get("index"),
                "process_id": cols.get("pid"),
                "thread_id": cols.get("tid"),
                "registers": cols.get("archvgpr", cols.get("vgpr")),
                "accum_vgpr": cols.get("accumvgpr"),
                "sgpr": cols.get("sgpr"),
                "shared_bytes": cols.get("lds"),
                "scratch_bytes": cols.get("scr"),
            },
        )
    if counters:
        parts = []
        for k in counters:
            c = {"dispatch_id": cols.get("index"), "device": cols.get("gpuid"),
                 "kernel_name": name, "value": cols[k]}  # fmt: skip
            rows = n
            if cols[k].null_count:
                # a dispatch without a value for this counter: that row is left out, counted
                note_dropped(f"counter {keys[k]}: empty or not a number", cols[k].null_count)
                valid = pc.is_valid(cols[k])
                c = {key: v.filter(valid) if v is not None else None for key, v in c.items()}
                rows = n - cols[k].null_count
            parts.append(
                fill_table(
                    path,
                    KERNEL_COUNTERS,
                    rows,
                    {"source": SOURCE_V1, "counter": keys[k], **c},
                )
            )
        out.kernel_counters = pa.concat_tables(parts)
    out.meta = _meta(path, SOURCE_V1, counters=[keys[k] for k in counters])
    if "beginns" not in cols:
        out.meta["note"] = "no BeginNs/EndNs columns (run without --timestamp on): no kernels"
    return out


def read_rocprof_v2(path: Path) -> TraceTables:
    """Read a rocprof v2 kernel-trace CSV."""
    header = read_header(path)
    if header is None:
        if path.is_file() and path.stat().st_size == 0:
            raise InputError(f"{path}: empty file, expected {_V2}")
        raise InputError(f"{path}: not a CSV file, expected {_V2}")
    if not _is_v2(header):
        raise InputError(f"{path}: not {_V2}")
    types = {
        "dispatchid": _I64,
        "gpuid": _I64,
        "queueid": _I64,
        "pid": _I64,
        "tid": _I64,
        "ldsperworkgroup": _I64,
        "scratchperworkitem": _I64,
        "archvgpr": _I64,
        "accumvgpr": _I64,
        "sgpr": _I64,
        "kernelname": _DICT,
        "starttimestamp": _I64,
        "endtimestamp": _I64,
        "correlationid": _I64,
    }
    cols, n = read_columns(
        header,
        types,
        _V2,
        required=("kernelname", "starttimestamp", "endtimestamp"),
        times=("starttimestamp", "endtimestamp"),
    )
    dur = check_times(path, cols["starttimestamp"], cols["endtimestamp"], _V2)
    kernels = fill_table(
        path,
        KERNELS,
        n,
        {
            "source": SOURCE_V2,
            "name": cols["kernelname"],
            "start_ns": cols["starttimestamp"],
            "end_ns": cols["endtimestamp"],
            "dur_ns": dur,
            "time_is_gpu": True,
            "device": cols.get("gpuid"),
            "queue": cols.get("queueid"),
            "correlation_id": cols.get("correlationid"),
            "dispatch_id": cols.get("dispatchid"),
            "process_id": cols.get("pid"),
            "thread_id": cols.get("tid"),
            "registers": cols.get("archvgpr"),
            "accum_vgpr": cols.get("accumvgpr"),
            "sgpr": cols.get("sgpr"),
            "shared_bytes": cols.get("ldsperworkgroup"),
            "scratch_bytes": cols.get("scratchperworkitem"),
        },
    )
    return TraceTables(kernels=kernels, meta=_meta(path, SOURCE_V2))


class RocprofV1Importer(Importer):
    """Legacy rocprof v1 ``results.csv`` and ``results.stats.csv``."""

    name: ClassVar[str] = SOURCE_V1
    description: ClassVar[str] = "legacy rocprof v1 results.csv / results.stats.csv"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        h = read_header(path, head)
        return h is not None and (_is_v1(h) or _is_v1_stats(h))

    def read(self, path: Path) -> TraceTables:
        with collecting() as odd:
            out = read_rocprof_v1(path)
        out.meta.update(odd.meta())
        return out


class RocprofV2Importer(Importer):
    """Legacy rocprof v2 kernel-trace CSV."""

    name: ClassVar[str] = SOURCE_V2
    description: ClassVar[str] = "legacy rocprof v2 kernel CSV (Dispatch_ID, GPU_ID, ...)"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        h = read_header(path, head)
        return h is not None and _is_v2(h)

    def read(self, path: Path) -> TraceTables:
        with collecting() as odd:
            out = read_rocprof_v2(path)
        out.meta.update(odd.meta())
        return out
