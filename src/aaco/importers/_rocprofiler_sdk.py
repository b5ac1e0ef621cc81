"""What rocprofiler-SDK's records mean, declared once for the three readers of its output.

rocprofv3 writes the same records as CSV (:mod:`aaco.importers.rocprofv3`), as JSON
(:mod:`aaco.importers.rocprofv3_json`) and as a rocpd SQLite database
(:mod:`aaco.importers.rocpd`). How a reader gets at a field is its own business; which table
column a field fills, and what its values are called, is declared here:

* :data:`CLOCK`: the clock of every timestamp.
* :data:`KERNEL_FIELDS`: KERNELS column <- the dispatch and kernel-symbol fields that carry
  it, preferred first, spelled as the SDK spells them (the JSON keys and rocpd view columns);
  a CSV header is matched by its key (``VGPR_Count`` -> ``vgprcount``, :func:`csv_keys`).
  Grid and block are not in it: each output counts them differently (see the readers).
* :data:`KERNEL_TRACE_COLUMNS`: the kernel-trace CSV header of each SDK generation.
* :func:`api_domain` and :func:`api_calls_and_markers`: an API record's domain, and the one
  mapping of API records onto API_CALLS and of marker (roctx) records onto ANNOTATIONS.
* :func:`direction_kind`, :func:`copy_kind`, :func:`copy_device`: memory-copy directions;
  :func:`copy_kinds`, the same over whole columns of agent states.
* :func:`ceil_div`: workgroups from work-items over a whole column.

Example::

    registers = first_present(cols, csv_keys(KERNEL_FIELDS["registers"]))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.importers._csv import fill_table, map_values, norm
from aaco.importers.kineto import api_kind
from aaco.session.schema import ANNOTATIONS, API_CALLS

__all__ = [
    "CLOCK",
    "COPY_DIRECTIONS",
    "KERNEL_FIELDS",
    "KERNEL_TRACE_COLUMNS",
    "api_calls_and_markers",
    "api_domain",
    "ceil_div",
    "copy_device",
    "copy_kind",
    "copy_kinds",
    "csv_keys",
    "direction_kind",
    "first_present",
]

V = TypeVar("V")

#: the clock of every rocprofiler-SDK timestamp (integer ns)
CLOCK: dict[str, str] = {"unit": "ns", "origin": "rocprofiler timestamp clock (ns since boot)"}

#: KERNELS column <- the rocprofiler-SDK fields that carry it, preferred first. The SDK renamed
#: some between generations (``Group_Segment_Size`` -> ``LDS_Block_Size``, ``VGPR_Count`` /
#: ``arch_vgpr_count``); rocpd's ``kernels`` view spells the process and thread ``pid`` /
#: ``tid``, LDS ``lds_size`` and (schema 3.0) the correlation id ``corr_id``.
KERNEL_FIELDS: dict[str, tuple[str, ...]] = {
    "stream": ("stream_id",),
    "queue": ("queue_id",),
    "correlation_id": ("correlation_id", "corr_id"),
    "dispatch_id": ("dispatch_id",),
    "process_id": ("process_id", "pid"),
    "thread_id": ("thread_id", "tid"),
    "registers": ("vgpr_count", "arch_vgpr_count"),
    "accum_vgpr": ("accum_vgpr_count",),
    "sgpr": ("sgpr_count",),
    "shared_bytes": ("lds_block_size", "group_segment_size", "lds_size"),
    "scratch_bytes": ("scratch_size", "private_segment_size"),
}

#: rocprofv3's ``*_kernel_trace.csv`` header, per SDK generation (``rocpd convert`` adds a
#: leading ``Guid`` and may capitalise differently: headers are matched by key)
KERNEL_TRACE_COLUMNS: dict[str, tuple[str, ...]] = {
    "oldest": (
        "Kind", "Agent_Id", "Queue_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
        "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size",
        "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
        "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
    ),
    "with_stream": (
        "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
        "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp",
        "Private_Segment_Size", "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y",
        "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
    ),
    "current": (
        "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
        "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
        "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
        "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
    ),
}  # fmt: skip


def csv_keys(fields: Iterable[str]) -> tuple[str, ...]:
    """The CSV header keys of SDK field names: ``["arch_vgpr_count"]`` -> ``("archvgprcount",)``"""
    return tuple(norm(f) for f in fields)


def first_present(values: Mapping[str, V], names: Iterable[str]) -> V | None:
    """The value of the first of ``names`` that ``values`` has (a column the file carries),
    else None."""
    for name in names:
        if name in values:
            return values[name]
    return None


# --------------------------------------------------------------------------- API records


def api_domain(raw: str | None) -> str:
    """rocprofv3 Domain -> API domain: ``HIP_RUNTIME_API`` -> ``hip``, ``MARKER_*`` -> ``marker``"""
    s = (raw or "").strip().upper()
    for prefix, name in (("HIP", "hip"), ("HSA", "hsa"), ("MARKER", "marker"), ("ROCTX", "marker")):
        if s.startswith(prefix):
            return name
    return s.split("_", 1)[0].lower() or "unknown"


def api_calls_and_markers(path: Path, source: str, records: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(API_CALLS, ANNOTATIONS) of API records: marker-domain (roctx) records are annotations.

    ``records`` has the columns ``domain`` (as :func:`api_domain` gives it), ``name``,
    ``process_id``, ``thread_id``, ``correlation_id``, ``start_ns``, ``end_ns``, ``dur_ns``.
    """
    is_marker = pc.equal(records["domain"], "marker")
    api = records.filter(pc.invert(is_marker))
    marks = records.filter(is_marker)
    api_calls = fill_table(
        path,
        API_CALLS,
        api.num_rows,
        {
            "source": source,
            "domain": api["domain"],
            "name": api["name"],
            "kind": map_values(api["name"], api_kind, pa.string()),
            "process_id": api["process_id"],
            "thread_id": api["thread_id"],
            "start_ns": api["start_ns"],
            "end_ns": api["end_ns"],
            "dur_ns": api["dur_ns"],
            "correlation_id": api["correlation_id"],
        },
    )
    annotations = fill_table(
        path,
        ANNOTATIONS,
        marks.num_rows,
        {
            "source": source,
            "kind": "marker",
            "name": marks["name"],
            "process_id": marks["process_id"],
            "thread_id": marks["thread_id"],
            "start_ns": marks["start_ns"],
            "dur_ns": marks["dur_ns"],
        },
    )
    return api_calls, annotations


# --------------------------------------------------------------------------- memory copies

#: rocprofv3 copy direction (``MEMORY_COPY_`` prefix removed) -> MEMCPY kind
COPY_DIRECTIONS: dict[str, str] = {
    "HOST_TO_HOST": "HtoH",
    "HOST_TO_DEVICE": "HtoD",
    "DEVICE_TO_HOST": "DtoH",
    "DEVICE_TO_DEVICE": "DtoD",
}


def direction_kind(direction: str | None) -> str:
    """``MEMORY_COPY_HOST_TO_DEVICE`` -> ``HtoD``; ``unknown`` for anything else."""
    s = (direction or "").upper().removeprefix("MEMORY_COPY_")
    return COPY_DIRECTIONS.get(s, "unknown")


def copy_kind(src_is_gpu: bool | None, dst_is_gpu: bool | None) -> str:
    """The MEMCPY kind of a copy between two agents (None: agent type unknown)."""
    if src_is_gpu is None or dst_is_gpu is None:
        return "unknown"
    return f"{'D' if src_is_gpu else 'H'}to{'D' if dst_is_gpu else 'H'}"


def copy_device(kind: str, src: Any, dst: Any) -> Any:
    """A copy's ``device``: its GPU end, the destination for HtoD, else the source."""
    return dst if kind == "HtoD" else src


#: agent states of :func:`copy_kinds`
AGENT_UNKNOWN, AGENT_HOST, AGENT_GPU = 0, 1, 2
_STATES: tuple[bool | None, ...] = (None, False, True)
_KIND_OF = pa.array([copy_kind(s, d) for s in _STATES for d in _STATES], pa.string())
_DEVICE_IS_DST = np.array(
    [copy_device(copy_kind(s, d), "src", "dst") == "dst" for s in _STATES for d in _STATES]
)


def copy_kinds(src: np.ndarray, dst: np.ndarray) -> tuple[pa.DictionaryArray, np.ndarray]:
    """:func:`copy_kind` and :func:`copy_device` over columns of agent states
    (:data:`AGENT_UNKNOWN` / ``AGENT_HOST`` / ``AGENT_GPU``): the kinds (dictionary-encoded)
    and where the copy's device is its destination."""
    code = src.astype(np.int8) * 3 + dst.astype(np.int8)
    return pa.DictionaryArray.from_arrays(pa.array(code, pa.int8()), _KIND_OF), _DEVICE_IS_DST[code]


_INT64_MIN = -(1 << 63)


def ceil_div(g: pa.Array | pa.ChunkedArray, w: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``ceil(g / w)`` of two int64 columns where both are known and ``w`` is not 0, else null
    (Python's integer semantics: ``-(-g // w)``)."""
    gi = pc.fill_null(g, 0).to_numpy()
    wi = pc.fill_null(w, 0).to_numpy()
    known = pc.and_(pc.is_valid(g), pc.is_valid(w)).to_numpy(zero_copy_only=False)
    known &= (wi != 0) & (gi != _INT64_MIN)  # -INT64_MIN does not fit
    return pa.array(-((-np.where(known, gi, 0)) // np.where(known, wi, 1)), pa.int64(),
                    mask=~known)  # fmt: skip
