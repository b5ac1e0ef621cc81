"""The critical path of a traced program over CPU threads and GPU streams, from a causal DAG.

The model (docs/metrics.md, "Critical path"):

* **Nodes** are instants: every boundary of the host events of a thread (framework ops and
  runtime calls, one chain per thread, sorted), the start and end of every GPU activity
  (kernel, copy, memset), a region start ``S`` and end ``T``.
* **Edges** say what had to happen before what, and carry a *model weight*, the time the
  edge itself takes:
  - ``chain``: consecutive boundaries of a thread (program order). The segment's category is
    the innermost event open in it: a framework op (``cpu_op``), a runtime call
    (``runtime``), a blocking synchronisation (``sync_wait``) or nothing (``idle_gap``:
    untraced host time). Out-of-order or overlapping call stacks cannot make a cycle: a
    chain is a sorted list of instants, and improper nesting is counted (``repaired``).
  - ``exec``: a GPU activity's start to its end (``gpu_compute`` or ``copy``).
  - ``launch``: the launching call (by correlation id) to the activity's start; a graph launch
    links each of its kernels. Weight: the observed launch delay when the launch was what
    the activity waited for (the stream was empty), else 0.
  - ``fifo``: the previous activity on the same stream to the next; weight: the observed
    gap when the stream order was what it waited for, else 0.
  - ``sync``: the GPU activity a blocking call waited for, to the call's return: device or
    context syncs link to the process's last activity that ended before the call returned;
    stream syncs to the last on that stream (Kineto ``cuda_sync``/nsys records name it, else
    the device's); event syncs to the last activity launched on the recording stream before
    the ``cudaEventRecord`` (when the trace links the record); blocking copies to their own
    copy. The call's own chain segment then weighs only its return latency.
  - ``event``: a ``cudaStreamWaitEvent`` / ``Stream Wait Event``: the recorded work on the
    other stream to the first activity enqueued on the waiting stream after the wait.
  - ``region``: ``S`` to every chain's first instant and every chain's last instant to ``T``,
    so the path spans the region.
* Every edge goes forward in time. An edge that would go backwards (clock skew between host
  and device timestamps) is dropped and counted; a kernel that started while its graph
  launch call was still running is linked from the call's start. A GPU activity left with no
  incoming edge at all is linked from ``S`` and its wait is *unexplained*.

With these weights, the longest path from ``S`` (dynamic programming in topological order)
reproduces every observed time, so the critical path's length equals the region's wall time
exactly; the path itself follows, at every instant, the dependency that arrived last (the
binding one). Re-timing the DAG with some weights scaled (:class:`WhatIf`) answers what
speeding up a category or a name buys, overlap included. Slack of an activity: how much its
start could slip without moving ``T`` (latest minus earliest start, backward pass).

Pure: Arrow tables in, dataclasses out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CATEGORIES",
    "EDGE_CATEGORY",
    "CriticalPath",
    "PathSegment",
    "WhatIf",
    "WhatIfResult",
    "auto_what_ifs",
    "critical_path_recommendations",
    "critical_path_summary",
    "critical_paths",
    "parse_what_if",
    "step_window",
]

#: the path's categories, in report order
CATEGORIES: tuple[str, ...] = (
    "cpu_op",
    "runtime",
    "gpu_compute",
    "copy",
    "sync_wait",
    "idle_gap",
)
#: finer edge kinds on the path and the category each counts under
EDGE_CATEGORY: dict[str, str] = {
    "cpu_op": "cpu_op",
    "user_range": "cpu_op",
    "runtime": "runtime",
    "launch_delay": "runtime",
    "gpu_compute": "gpu_compute",
    "copy": "copy",
    "sync_wait": "sync_wait",
    "sync_return": "sync_wait",
    "event_wait": "sync_wait",
    "kernel_gap": "idle_gap",
    "idle_gap": "idle_gap",
    "unexplained_gpu_wait": "idle_gap",
}
_EDGE_KINDS = tuple(EDGE_CATEGORY)
_EK = {k: i for i, k in enumerate(_EDGE_KINDS)}

# edge types (graph structure)
_E_CHAIN, _E_EXEC, _E_LAUNCH, _E_FIFO, _E_SYNC, _E_EVENT, _E_REGION = range(7)
_EDGE_TYPE_NAMES = ("chain", "exec", "launch", "fifo", "sync", "event", "region")
# tie-break among equally binding predecessors: a causal edge explains more than program
# order, which explains more than the region's own edges
_PRIORITY = np.array([1, 1, 3, 2, 3, 3, 0], dtype=np.int64)

# node ranks at one instant: GPU ends, then host instants, then GPU starts (so launch,
# sync, event and fifo edges between simultaneous nodes go forward)
_R_S, _R_GPU_END, _R_HOST, _R_GPU_START, _R_T = -1, 0, 1, 2, 3

# host event classes
_H_OP, _H_RUNTIME, _H_SYNC, _H_USER = 0, 1, 2, 3

_NULL = np.iinfo(np.int64).min
#: what-if targets whose pattern matches the operator an edge counts for, not its own name
_BY_OPERATOR = frozenset({"op", "operator"})

#: a queued GPU activity that starts more than this after the previous one on its stream
#: ended, with nothing recorded to explain it, is an unexplained wait rather than the
#: stream's dispatch gap (GPU front ends start queued work within a few microseconds)
STREAM_GAP_UNEXPLAINED_NS = 50_000

#: names a what-if target may use for categories
_TARGETS: dict[str, tuple[str, ...]] = {
    "kernel": ("gpu_compute",),
    "gpu_compute": ("gpu_compute",),
    "gpu": ("gpu_compute", "copy"),
    "copy": ("copy",),
    "memcpy": ("copy",),
    "cpu_op": ("cpu_op",),
    "cpu": ("cpu_op", "user_range"),
    # an operator whole, children included: the host time inside it (its child ops and their
    # runtime calls) and the kernels and copies launched from inside it
    "op": ("cpu_op", "runtime", "gpu_compute", "copy"),
    "operator": ("cpu_op", "runtime", "gpu_compute", "copy"),
    "runtime": ("runtime",),
    "launch": ("runtime", "launch_delay"),
    "sync": ("sync_wait", "sync_return"),
    "idle": ("idle_gap", "kernel_gap"),
}


#: the largest what-if factor (a 1000x slower kernel already answers "what if it were slow")
MAX_WHAT_IF_FACTOR = 1000.0


@dataclass(frozen=True)
class WhatIf:
    """Scale the time of every path element of ``target`` whose name matches ``pattern``.

    ``kernel~gemm:0.5``: kernels whose name, full name or family contains a match of the
    regular expression ``gemm`` (case-insensitive) take half their time. Targets: kernel
    (gpu_compute), copy, gpu (both), cpu_op / cpu (host op time; cpu adds record_function
    ranges), op / operator (an operator whole: its children's host time and the GPU work
    launched inside it), runtime, launch (runtime calls and launch delays), sync, idle. A
    factor of 0 removes the time.
    """

    target: str
    pattern: str | None
    factor: float
    text: str
    #: how a report names it (the spec itself when None)
    label: str | None = None

    def edge_kinds(self) -> tuple[str, ...]:
        return _TARGETS[self.target]


def parse_what_if(text: str) -> WhatIf:
    """``TARGET[~REGEX]:FACTOR`` → :class:`WhatIf`; ValueError with a one-line reason.

    >>> parse_what_if("kernel~gemm:0.5").factor
    0.5
    """
    head, sep, tail = text.rpartition(":")
    if not sep or not head:
        raise ValueError(
            f"--what-if {text!r}: expected TARGET[~REGEX]:FACTOR, e.g. kernel~gemm:0.5"
        )
    try:
        factor = float(tail)
    except ValueError:
        raise ValueError(f"--what-if {text!r}: factor {tail!r} is not a number") from None
    if not (0.0 <= factor <= MAX_WHAT_IF_FACTOR):
        raise ValueError(
            f"--what-if {text!r}: factor must be a number from 0 to {MAX_WHAT_IF_FACTOR:g}"
        )
    target, tilde, pattern = head.partition("~")
    target = target.strip().lower()
    if target not in _TARGETS:
        raise ValueError(
            f"--what-if {text!r}: unknown target {target!r}; one of {', '.join(sorted(_TARGETS))}"
        )
    if tilde:
        try:
            re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"--what-if {text!r}: bad regular expression: {exc}") from None
    return WhatIf(target, pattern if tilde else None, factor, text)


@dataclass(frozen=True)
class WhatIfResult:
    """The re-timed DAG's end-to-end time for one :class:`WhatIf`."""

    spec: str
    label: str
    matched: int
    matched_ns: int
    length_ns: int
    new_length_ns: int
    #: what Amdahl's law on summed time would predict: the matched time times (1 - factor)
    amdahl_saved_ns: int

    @property
    def saved_ns(self) -> int:
        return self.length_ns - self.new_length_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "label": self.label,
            "matched": self.matched,
            "matched_ns": self.matched_ns,
            "length_ns": self.length_ns,
            "new_length_ns": self.new_length_ns,
            "saved_ns": self.saved_ns,
            "saved_pct": _pct(self.saved_ns, self.length_ns),
            "amdahl_saved_ns": self.amdahl_saved_ns,
        }


@dataclass(frozen=True)
class PathSegment:
    """A stretch of the critical path: consecutive path edges of one kind and one event."""

    kind: str
    category: str
    start_ns: int
    end_ns: int
    name: str | None
    operator: str | None
    where: str
    unexplained: bool
    #: for a host thread's idle stretch: the other thread of the process busiest meanwhile,
    #: as evidence of what it may have waited for (never an edge): "thread T busy P%: name"
    meanwhile: str | None = None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "category": self.category,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "dur_ns": self.dur_ns,
            "name": self.name,
            "operator": self.operator,
            "where": self.where,
            "unexplained": self.unexplained,
            "meanwhile": self.meanwhile,
        }


@dataclass(frozen=True)
class CriticalPath:
    """The critical path of one process (rank) over one region."""

    process_id: int | None
    region_start_ns: int
    region_end_ns: int
    length_ns: int
    by_category: dict[str, int]
    by_edge: dict[str, int]
    by_operator: list[tuple[str, int]]
    unexplained_wait_ns: int
    segments: tuple[PathSegment, ...]
    #: per kernel name: count, total time, time on the path, minimum and median slack
    kernels: list[dict[str, Any]]
    what_if: tuple[WhatIfResult, ...]
    stats: dict[str, Any] = field(default_factory=dict)
    #: path time of host runtime calls by call name (launches, syncs that did not wait,
    #: allocations, context set-up ...), the most first
    runtime_calls: list[tuple[str, int]] = field(default_factory=list)

    @property
    def wall_ns(self) -> int:
        return self.region_end_ns - self.region_start_ns

    def to_dict(self, max_segments: int = 200) -> dict[str, Any]:
        segs = sorted(self.segments, key=lambda s: -s.dur_ns)[:max_segments]
        segs.sort(key=lambda s: s.start_ns)
        return {
            "process_id": self.process_id,
            "region_start_ns": self.region_start_ns,
            "region_end_ns": self.region_end_ns,
            "wall_ns": self.wall_ns,
            "length_ns": self.length_ns,
            "by_category": {
                k: {"ns": v, "pct": _pct(v, self.length_ns)} for k, v in self.by_category.items()
            },
            "by_edge": {
                k: {"ns": v, "pct": _pct(v, self.length_ns)} for k, v in self.by_edge.items()
            },
            "by_operator": [
                {"operator": n, "ns": v, "pct": _pct(v, self.length_ns)}
                for n, v in self.by_operator
            ],
            "unexplained_wait_ns": self.unexplained_wait_ns,
            "unexplained_wait_pct": _pct(self.unexplained_wait_ns, self.length_ns),
            "runtime_calls": [
                {"name": n, "ns": v, "pct": _pct(v, self.length_ns)} for n, v in self.runtime_calls
            ],
            "segments_total": len(self.segments),
            "segments": [s.to_dict() for s in segs],
            "kernels": self.kernels,
            "what_if": [w.to_dict() for w in self.what_if],
            "stats": self.stats,
        }


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 3) if whole > 0 else None


# -- input -----------------------------------------------------------------------------------


def _col(t: pa.Table | None, name: str, n: int) -> np.ndarray:
    """An int64 column with nulls as _NULL (all _NULL when the table lacks it)."""
    if t is None or name not in t.column_names:
        return np.full(n, _NULL, dtype=np.int64)
    c = t.column(name)
    if c.null_count:
        c = pc.fill_null(c.cast(pa.int64()), _NULL)
    return np.asarray(c.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _strs(t: pa.Table | None, name: str, n: int) -> list[str | None]:
    if t is None or name not in t.column_names:
        return [None] * n
    return t.column(name).to_pylist()  # type: ignore[no-any-return]


@dataclass
class _Host:
    """Host events of the trace (framework ops and host runtime calls)."""

    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray  # _H_OP / _H_RUNTIME / _H_SYNC
    name: list[str | None]
    corr: np.ndarray
    ext: np.ndarray
    api_kind: list[str | None]


@dataclass
class _Gpu:
    """GPU activities: kernels with device timestamps, copies and memsets."""

    pid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    is_copy: np.ndarray
    name: list[str | None]
    corr: np.ndarray
    ext: np.ndarray
    kernel_row: np.ndarray  # row in the kernels table, -1 for copies
    #: kernel family (gemm, attention, ...; ``memcpy`` for copies): what-if patterns match it
    family: list[str | None] = field(default_factory=list)
    #: the name as the tool reported it (mangled, templates and all), when it differs
    full: list[str | None] = field(default_factory=list)


def _sync_blocks(name: str, kind: str | None) -> bool:
    """Whether a host runtime call blocks the thread until GPU work completes."""
    if kind == "sync":
        # a stream wait on an event or value is enqueued on the device; the host goes on
        return "Wait" not in name
    if kind == "memcpy":
        base = name.removesuffix("_ptsz").removesuffix("_spt")
        return ("Async" not in base and "Peer" not in base) or base in ("hipMemcpyPeer",)
    return False


def _host_events(tables: Mapping[str, pa.Table | None]) -> _Host:
    ops = tables.get("ops")
    if ops is not None and ops.num_rows and "source" in ops.column_names:
        # ONNX Runtime's node times are on its profile's own clock, not the trace's
        ops = ops.filter(pc.not_equal(pc.fill_null(ops.column("source"), ""), "onnxruntime"))
    if ops is not None and ops.num_rows and "start_ns" in ops.column_names:
        ops = ops.filter(pc.is_valid(ops.column("start_ns")))
    api = tables.get("api_calls")
    if api is not None and api.num_rows and "device" in api.column_names:
        api = api.filter(pc.is_null(api.column("device")))
    ann = tables.get("annotations")
    if ann is not None and ann.num_rows and "kind" in ann.column_names:
        # record_function ranges: host time inside them that no op covers is the user's code
        ann = ann.filter(
            pc.and_(pc.equal(ann.column("kind"), "user"), pc.is_valid(ann.column("thread_id")))
        )
    else:
        ann = None
    n_u = ann.num_rows if ann is not None else 0
    n_o = ops.num_rows if ops is not None else 0
    n_a = api.num_rows if api is not None else 0
    o_start = _col(ops, "start_ns", n_o)
    o_end = o_start + _col(ops, "dur_ns", n_o)
    a_start = _col(api, "start_ns", n_a)
    a_end = _col(api, "end_ns", n_a)
    a_names = _strs(api, "name", n_a)
    a_kinds = _strs(api, "kind", n_a)
    a_cls = np.array(
        [
            _H_SYNC if _sync_blocks(n or "", k) else _H_RUNTIME
            for n, k in zip(a_names, a_kinds, strict=True)
        ],
        dtype=np.int8,
    )
    u_start = _col(ann, "start_ns", n_u)
    nul = np.full(n_u, _NULL, dtype=np.int64)
    return _Host(
        pid=np.concatenate(
            [
                _col(ops, "process_id", n_o),
                _col(api, "process_id", n_a),
                _col(ann, "process_id", n_u),
            ]
        ),
        tid=np.concatenate(
            [_col(ops, "thread_id", n_o), _col(api, "thread_id", n_a), _col(ann, "thread_id", n_u)]
        ),
        start=np.concatenate([o_start, a_start, u_start]),
        end=np.concatenate([o_end, a_end, u_start + _col(ann, "dur_ns", n_u)]),
        cls=np.concatenate(
            [np.full(n_o, _H_OP, dtype=np.int8), a_cls, np.full(n_u, _H_USER, dtype=np.int8)]
        ),
        name=_strs(ops, "node_name", n_o) + a_names + _strs(ann, "name", n_u),
        corr=np.concatenate(
            [np.full(n_o, _NULL, dtype=np.int64), _col(api, "correlation_id", n_a), nul]
        ),
        ext=np.concatenate([_col(ops, "external_id", n_o), _col(api, "external_id", n_a), nul]),
        api_kind=[None] * n_o + a_kinds + [None] * n_u,
    )


def _gpu_events(tables: Mapping[str, pa.Table | None]) -> _Gpu:
    k = tables.get("kernels")
    rows = np.zeros(0, dtype=np.int64)
    if k is not None and k.num_rows:
        rows = np.arange(k.num_rows, dtype=np.int64)
        if "time_is_gpu" in k.column_names:
            keep = pc.fill_null(k.column("time_is_gpu"), False)
            rows = rows[np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)]
            k = k.filter(keep)
    m = tables.get("memcpy")
    n_k = k.num_rows if k is not None else 0
    n_m = m.num_rows if m is not None else 0
    k_names = _strs(k, "short_name", n_k)
    full = _strs(k, "name", n_k)
    k_names = [s or f for s, f in zip(k_names, full, strict=True)]
    m_names: list[str | None] = [
        f"{kind or 'copy'}" if (nm is None) else nm
        for nm, kind in zip(_strs(m, "name", n_m), _strs(m, "kind", n_m), strict=True)
    ]
    return _Gpu(
        pid=np.concatenate([_col(k, "process_id", n_k), np.full(n_m, _NULL, dtype=np.int64)]),
        device=np.concatenate([_col(k, "device", n_k), _col(m, "device", n_m)]),
        stream=np.concatenate([_col(k, "stream", n_k), _col(m, "stream", n_m)]),
        start=np.concatenate([_col(k, "start_ns", n_k), _col(m, "start_ns", n_m)]),
        end=np.concatenate([_col(k, "end_ns", n_k), _col(m, "end_ns", n_m)]),
        is_copy=np.concatenate([np.zeros(n_k, dtype=bool), np.ones(n_m, dtype=bool)]),
        name=k_names + m_names,
        corr=np.concatenate([_col(k, "correlation_id", n_k), _col(m, "correlation_id", n_m)]),
        ext=np.concatenate([_col(k, "external_id", n_k), _col(m, "external_id", n_m)]),
        kernel_row=np.concatenate([rows, np.full(n_m, -1, dtype=np.int64)]),
        family=_strs(k, "family", n_k) + ["memcpy"] * n_m,
        full=full + [None] * n_m,
    )


@dataclass
class _DevSync:
    """Device-side sync records (Kineto ``cuda_sync``, nsys synchronization), by correlation."""

    corr: np.ndarray
    name: list[str | None]
    device: np.ndarray
    stream: np.ndarray
    wait_stream: np.ndarray
    wait_corr: np.ndarray


def _dev_syncs(tables: Mapping[str, pa.Table | None]) -> _DevSync:
    api = tables.get("api_calls")
    if api is not None and api.num_rows and "device" in api.column_names:
        api = api.filter(pc.is_valid(api.column("device")))
    else:
        api = None
    n = api.num_rows if api is not None else 0
    stream = _col(api, "stream", n)
    stream = np.where((stream == -1) | (stream == 4294967295), _NULL, stream)
    return _DevSync(
        corr=_col(api, "correlation_id", n),
        name=_strs(api, "name", n),
        device=_col(api, "device", n),
        stream=stream,
        wait_stream=_col(api, "wait_stream", n),
        wait_corr=_col(api, "wait_correlation_id", n),
    )


# -- graph -----------------------------------------------------------------------------------


@dataclass
class _Graph:
    t: np.ndarray  # node times
    rank: np.ndarray
    u: np.ndarray
    v: np.ndarray
    etype: np.ndarray
    ekind: np.ndarray  # index into _EDGE_KINDS
    w: np.ndarray  # model weight
    ref_host: np.ndarray  # host event index the edge's time belongs to, -1
    ref_gpu: np.ndarray  # GPU activity index, -1
    unexplained: np.ndarray
    thread: np.ndarray  # host thread of a chain edge, _NULL elsewhere
    s: int
    end_node: int
    stats: dict[str, Any]


class _Builder:
    """Accumulates nodes and edges as numpy chunks."""

    def __init__(self) -> None:
        self.t: list[np.ndarray] = []
        self.rank: list[np.ndarray] = []
        self.n = 0
        self.e: dict[str, list[np.ndarray]] = {
            k: []
            for k in ("u", "v", "etype", "ekind", "ref_host", "ref_gpu", "unexplained", "thread")
        }

    def nodes(self, t: np.ndarray, rank: int | np.ndarray) -> np.ndarray:
        ids = np.arange(self.n, self.n + len(t), dtype=np.int64)
        self.t.append(np.asarray(t, dtype=np.int64))
        self.rank.append(np.broadcast_to(np.asarray(rank, dtype=np.int8), (len(t),)).copy())
        self.n += len(t)
        return ids

    def edges(
        self,
        u: np.ndarray,
        v: np.ndarray,
        etype: int,
        ekind: int | np.ndarray,
        ref_host: int | np.ndarray = -1,
        ref_gpu: int | np.ndarray = -1,
        unexplained: bool | np.ndarray = False,
        thread: int = _NULL,
    ) -> None:
        m = len(u)
        if not m:
            return
        self.e["u"].append(np.asarray(u, dtype=np.int64))
        self.e["v"].append(np.asarray(v, dtype=np.int64))
        self.e["etype"].append(np.full(m, etype, dtype=np.int8))
        for key, val, dt in (
            ("ekind", ekind, np.int8),
            ("ref_host", ref_host, np.int64),
            ("ref_gpu", ref_gpu, np.int64),
            ("unexplained", unexplained, bool),
            ("thread", thread, np.int64),
        ):
            self.e[key].append(np.broadcast_to(np.asarray(val, dtype=dt), (m,)).copy())

    def arrays(self) -> dict[str, np.ndarray]:
        out = {
            k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in self.e.items()
        }
        out["t"] = np.concatenate(self.t) if self.t else np.zeros(0, dtype=np.int64)
        out["rank"] = np.concatenate(self.rank) if self.rank else np.zeros(0, dtype=np.int8)
        return out


def _host_chains(
    b: _Builder, host: _Host, idx: np.ndarray, stats: dict[str, Any]
) -> tuple[
    list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray, dict[int, tuple[int, int, int]]
]:
    """Per-thread chains of the host events ``idx``.

    Returns per thread (nodes, times); for each host event its start and end node
    (arrays over all host events, -1 elsewhere); and for single-segment sync calls the
    chain edge that is its whole time: host event -> (edge index into the chain edge list
    appended here, start node, end node).
    """
    start_node = np.full(len(host.start), -1, dtype=np.int64)
    end_node = np.full(len(host.start), -1, dtype=np.int64)
    chains: list[tuple[np.ndarray, np.ndarray]] = []
    whole_sync: dict[int, tuple[int, int, int]] = {}
    repaired = 0
    if not len(idx):
        return chains, start_node, end_node, whole_sync
    tids = host.tid[idx]
    order = np.lexsort((host.start[idx], tids))
    idx = idx[order]
    tids = tids[order]
    cuts = np.flatnonzero(np.diff(tids)) + 1
    cls_all = host.cls
    for part in np.split(idx, cuts):
        s = host.start[part]
        e = np.maximum(host.end[part], s)
        times = np.unique(np.concatenate([s, e]))
        nodes = b.nodes(times, _R_HOST)
        start_node[part] = nodes[np.searchsorted(times, s)]
        end_node[part] = nodes[np.searchsorted(times, e)]
        chains.append((nodes, times))
        if len(times) < 2:
            continue
        # innermost open event of every segment [times[i], times[i+1]): a sweep with a stack
        ev = np.lexsort((-e, s))
        s_l = s[ev].tolist()
        e_l = e[ev].tolist()
        ev_l = part[ev].tolist()
        t_l = times.tolist()
        labels = [-1] * (len(t_l) - 1)
        stack: list[int] = []  # positions into ev lists
        j = 0
        n_ev = len(s_l)
        for i in range(len(t_l) - 1):
            t = t_l[i]
            while stack and e_l[stack[-1]] <= t:
                stack.pop()
            while j < n_ev and s_l[j] <= t:
                if e_l[j] > t:
                    if stack and e_l[stack[-1]] < e_l[j]:
                        repaired += 1
                    stack.append(j)
                j += 1
            while stack and e_l[stack[-1]] <= t:
                stack.pop()
            if stack:
                labels[i] = ev_l[stack[-1]]
        lab = np.asarray(labels, dtype=np.int64)
        cls = np.where(lab >= 0, cls_all[np.maximum(lab, 0)], -1)
        kinds = np.select(
            [cls == _H_OP, cls == _H_RUNTIME, cls == _H_SYNC, cls == _H_USER],
            [_EK["cpu_op"], _EK["runtime"], _EK["sync_wait"], _EK["user_range"]],
            _EK["idle_gap"],
        )
        base = sum(len(x) for x in b.e["u"])
        b.edges(
            nodes[:-1], nodes[1:], _E_CHAIN, kinds, ref_host=lab, unexplained=cls == _H_SYNC,
            thread=int(host.tid[part[0]]),
        )  # fmt: skip
        # sync calls that are exactly one segment: their weight can be cut to the return
        sync_seg = np.flatnonzero(cls == _H_SYNC)
        for i in sync_seg.tolist():
            h = int(lab[i])
            if start_node[h] == nodes[i] and end_node[h] == nodes[i + 1]:
                whole_sync[h] = (base + i, int(nodes[i]), int(nodes[i + 1]))
    stats["repaired_nesting"] = stats.get("repaired_nesting", 0) + repaired
    return chains, start_node, end_node, whole_sync


def _build(
    host: _Host,
    hidx: np.ndarray,
    gpu: _Gpu,
    gidx: np.ndarray,
    dev: _DevSync,
    region: tuple[int, int],
) -> _Graph:
    stats: dict[str, Any] = {"host_events": len(hidx), "gpu_activities": len(gidx)}
    b = _Builder()
    r0, r1 = region
    s_node = int(b.nodes(np.array([r0]), _R_S)[0])
    chains, h_start, h_end, whole_sync = _host_chains(b, host, hidx, stats)

    # GPU nodes, streams in FIFO order
    gs, ge = gpu.start[gidx], np.maximum(gpu.end[gidx], gpu.start[gidx])
    g_start = np.full(len(gpu.start), -1, dtype=np.int64)
    g_end = np.full(len(gpu.start), -1, dtype=np.int64)
    zero = ge == gs
    # a zero-length activity is one node, ranked with the GPU ends at its instant: a blocking
    # call can return at that instant (sync edge out), while a launch that ends exactly when
    # it starts would have to be dropped (rarer)
    sn = b.nodes(gs, np.where(zero, _R_GPU_END, _R_GPU_START))
    g_start[gidx] = sn
    g_end[gidx] = sn
    nz = np.flatnonzero(~zero)
    en = b.nodes(ge[nz], _R_GPU_END)
    g_end[gidx[nz]] = en
    kinds = np.where(gpu.is_copy[gidx[nz]], _EK["copy"], _EK["gpu_compute"])
    b.edges(sn[nz], en, _E_EXEC, kinds, ref_gpu=gidx[nz])

    # streams: (device, stream) groups ordered by start
    dev_k = gpu.device[gidx]
    str_k = gpu.stream[gidx]
    sorder = np.lexsort((gpu.end[gidx], gs, str_k, dev_k))
    so = gidx[sorder]
    same = (np.diff(dev_k[sorder]) == 0) & (np.diff(str_k[sorder]) == 0)
    prev, nxt = so[:-1][same], so[1:][same]
    firsts = so[np.concatenate([[True], ~same])] if len(so) else so

    # launch edges by correlation id
    ok = gpu.corr[gidx] != _NULL
    hcorr = host.corr[hidx]
    has = hcorr != _NULL
    hc_sorted = np.argsort(hcorr[has], kind="stable")
    hc_idx = hidx[has][hc_sorted]
    hc_vals = hcorr[has][hc_sorted]
    launch_of = np.full(len(gpu.start), -1, dtype=np.int64)
    if len(hc_vals) and ok.any():
        q = gpu.corr[gidx[ok]]
        pos = np.searchsorted(hc_vals, q)
        pos_c = np.minimum(pos, len(hc_vals) - 1)
        hit = hc_vals[pos_c] == q
        launch_of[gidx[ok][hit]] = hc_idx[pos_c[hit]]
    lk = gidx[launch_of[gidx] >= 0]
    lh = launch_of[lk]
    # a kernel that started while its (graph) launch call still ran hangs off the call's start
    from_end = host.end[lh] <= gpu.start[lk]
    src = np.where(from_end, h_end[lh], h_start[lh])
    src_t = np.where(from_end, host.end[lh], host.start[lh])
    skew = src_t > gpu.start[lk]
    stats["launch_links"] = int((~skew).sum())
    stats["launch_links_from_call_start"] = int((~from_end & ~skew).sum())
    stats["clock_skew_dropped"] = int(skew.sum())
    b.edges(src[~skew], g_start[lk[~skew]], _E_LAUNCH, _EK["launch_delay"], ref_gpu=lk[~skew])

    # fifo edges (an overlap on one stream cannot order them: the later one keeps its others)
    fifo_ok = gpu.end[prev] <= gpu.start[nxt]
    stats["stream_overlaps"] = int((~fifo_ok).sum())
    # every activity that no later one on its stream follows ends at the region end's door
    # (an overlap on a stream can leave the one ending last without a successor)
    followed = np.zeros(len(gpu.start), dtype=bool)
    followed[prev[fifo_ok]] = True
    lasts = gidx[~followed[gidx]]
    b.edges(
        g_end[prev[fifo_ok]],
        g_start[nxt[fifo_ok]],
        _E_FIFO,
        _EK["kernel_gap"],
        ref_gpu=nxt[fifo_ok],
    )

    # per-process ordering of GPU activity ends, for device-wide syncs
    by_end = gidx[np.argsort(gpu.end[gidx], kind="stable")]
    end_sorted = gpu.end[by_end]
    # per stream, by end
    stream_key: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if len(gidx):
        keys = np.stack([dev_k, str_k], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        for i in range(len(uniq)):
            members = gidx[inv == i]
            members = members[np.argsort(gpu.end[members], kind="stable")]
            stream_key[(int(uniq[i][0]), int(uniq[i][1]))] = (members, gpu.end[members])
    if len(host.start):
        launch_start = np.where(launch_of >= 0, host.start[np.maximum(launch_of, 0)], _NULL)
    else:  # a kernel trace without host events: nothing launched anything we can see
        launch_start = np.full(len(gpu.start), _NULL, dtype=np.int64)
    # per stream, by launch time (for event record -> wait)
    stream_launch: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for skey, (members, _) in stream_key.items():
        ls = launch_start[members]
        have = ls != _NULL
        m = members[have]
        o = np.argsort(ls[have], kind="stable")
        stream_launch[skey] = (m[o], ls[have][o])

    def last_ending(members: np.ndarray, ends: np.ndarray, by: int) -> int:
        p = int(np.searchsorted(ends, by, side="right")) - 1
        return int(members[p]) if p >= 0 else -1

    def stream_of_any_device(stream: int) -> tuple[int, int] | None:
        for key in stream_key:
            if key[1] == stream:
                return key
        return None

    # device-side sync records by correlation id
    # correlation ids repeat across the processes of a merged trace: only the records on
    # this process's devices
    my_devices = set(gpu.device[gidx].tolist())
    dev_by_corr: dict[int, int] = {}
    for i, (c, dv) in enumerate(zip(dev.corr.tolist(), dev.device.tolist(), strict=True)):
        if c != _NULL and (dv in my_devices or dv == _NULL):
            dev_by_corr.setdefault(c, i)
    corr_to_host: dict[int, int] = {}
    for i, c in zip(hc_idx.tolist(), hc_vals.tolist(), strict=True):
        corr_to_host.setdefault(c, i)

    sync_u: list[int] = []
    sync_v: list[int] = []
    sync_ref: list[int] = []
    sync_unlinked = 0
    no_wait: list[int] = []
    # chain edge -> (model weight: the return latency, ordinal of its sync edge)
    w_override: dict[int, tuple[int, int]] = {}
    sync_idx = hidx[host.cls[hidx] == _H_SYNC]
    copy_of_corr: dict[int, int] = {}
    if len(gidx):
        for g in gidx[gpu.is_copy[gidx] & (gpu.corr[gidx] != _NULL)].tolist():
            copy_of_corr.setdefault(int(gpu.corr[g]), g)
    for h in sync_idx.tolist():
        s_t, e_t = int(host.start[h]), int(host.end[h])
        c = int(host.corr[h])
        target = -1
        kind = host.api_kind[h]
        if kind == "memcpy" and c in copy_of_corr:
            target = copy_of_corr[c]
            if gpu.end[target] > e_t:
                target = -1
        else:
            d = dev_by_corr.get(c, -1) if c != _NULL else -1
            key = None
            rec = -1
            if d >= 0:
                ws = int(dev.wait_stream[d])
                st = int(dev.stream[d])
                dv = int(dev.device[d])
                wc = int(dev.wait_corr[d])
                if ws != _NULL:
                    key = (dv, ws) if (dv, ws) in stream_key else stream_of_any_device(ws)
                    rec = corr_to_host.get(wc, -1) if wc != _NULL else -1
                elif st != _NULL and (dev.name[d] or "").startswith("Stream"):
                    key = (dv, st) if (dv, st) in stream_key else stream_of_any_device(st)
            if key is not None and rec >= 0 and key in stream_launch:
                members, ls = stream_launch[key]
                p = int(np.searchsorted(ls, host.start[rec], side="left")) - 1
                target = int(members[p]) if p >= 0 else -1
                if target >= 0 and gpu.end[target] > e_t:
                    target = -1
            elif key is not None:
                members, ends = stream_key[key]
                target = last_ending(members, ends, e_t)
            elif len(by_end):
                # a device or context sync, or a sync whose stream the trace does not say:
                # the process's last activity that ended before the call returned
                target = last_ending(by_end, end_sorted, e_t)
        if target >= 0 and gpu.end[target] > s_t:
            sync_u.append(int(g_end[target]))
            sync_v.append(int(h_end[h]))
            sync_ref.append(target)
            if h in whole_sync:
                w_override[whole_sync[h][0]] = (e_t - int(gpu.end[target]), len(sync_u) - 1)
        elif target >= 0 and h in whole_sync:
            # the GPU work it could wait for was done before the call: no wait, a plain call
            no_wait.append(whole_sync[h][0])
        else:
            sync_unlinked += 1
    stats["sync_calls"] = len(sync_idx)
    stats["sync_links"] = len(sync_u)
    stats["sync_no_wait"] = len(no_wait)
    stats["sync_unlinked"] = sync_unlinked
    sync_base = sum(len(x) for x in b.e["u"])
    b.edges(
        np.array(sync_u), np.array(sync_v), _E_SYNC, _EK["sync_return"], ref_gpu=np.array(sync_ref)
    )

    # event record -> stream wait
    ev_u: list[int] = []
    ev_v: list[int] = []
    ev_ref: list[int] = []
    for d in range(len(dev.corr)):
        nm = dev.name[d] or ""
        if "Wait" not in nm:
            continue
        ws, wc, st, dv = (int(dev.wait_stream[d]), int(dev.wait_corr[d]),
                          int(dev.stream[d]), int(dev.device[d]))  # fmt: skip
        if ws == _NULL or wc == _NULL or st == _NULL:
            continue
        rec = corr_to_host.get(wc, -1)
        waiter_call = corr_to_host.get(int(dev.corr[d]), -1)
        src_key = (dv, ws) if (dv, ws) in stream_launch else stream_of_any_device(ws)
        dst_key = (dv, st) if (dv, st) in stream_launch else stream_of_any_device(st)
        if rec < 0 or waiter_call < 0 or src_key is None or dst_key is None:
            continue
        members, ls = stream_launch[src_key]
        p = int(np.searchsorted(ls, host.start[rec], side="left")) - 1
        if p < 0:
            continue
        source = int(members[p])
        wm, wls = stream_launch[dst_key]
        q = int(np.searchsorted(wls, host.start[waiter_call], side="left"))
        if q >= len(wm):
            continue
        waiter = int(wm[q])
        if gpu.end[source] <= gpu.start[waiter]:
            ev_u.append(int(g_end[source]))
            ev_v.append(int(g_start[waiter]))
            ev_ref.append(waiter)
    stats["event_links"] = len(ev_u)
    b.edges(np.array(ev_u), np.array(ev_v), _E_EVENT, _EK["event_wait"], ref_gpu=np.array(ev_ref))

    # region edges: S -> each chain's first instant, each chain's last instant -> T
    firsts_h = np.array([c[0][0] for c in chains], dtype=np.int64)
    lasts_h = np.array([c[0][-1] for c in chains], dtype=np.int64)
    b.edges(np.full(len(firsts_h), s_node), firsts_h, _E_REGION, _EK["idle_gap"])
    t_node = int(b.nodes(np.array([r1]), _R_T)[0])
    arr = b.arrays()
    extra_u = [np.full(len(firsts), s_node), lasts_h, g_end[lasts]]
    extra_v = [g_start[firsts], np.full(len(lasts_h), t_node), np.full(len(lasts), t_node)]
    un = [np.ones(len(firsts), dtype=bool), np.zeros(len(lasts_h), dtype=bool),
          np.zeros(len(lasts), dtype=bool)]  # fmt: skip
    ek = [np.full(len(firsts), _EK["unexplained_gpu_wait"]), np.full(len(lasts_h), _EK["idle_gap"]),
          np.full(len(lasts), _EK["idle_gap"])]  # fmt: skip
    refg = [firsts, np.full(len(lasts_h), -1), np.full(len(lasts), -1)]
    for col, vals in (("u", extra_u), ("v", extra_v), ("unexplained", un), ("ekind", ek),
                      ("ref_gpu", refg)):  # fmt: skip
        arr[col] = np.concatenate([arr[col], *[np.asarray(x) for x in vals]])
    n_extra = sum(len(x) for x in extra_u)
    arr["etype"] = np.concatenate([arr["etype"], np.full(n_extra, _E_REGION, dtype=np.int8)])
    arr["ref_host"] = np.concatenate([arr["ref_host"], np.full(n_extra, -1, dtype=np.int64)])
    arr["thread"] = np.concatenate([arr["thread"], np.full(n_extra, _NULL, dtype=np.int64)])

    if no_wait:
        nw = np.asarray(no_wait, dtype=np.int64)
        arr["ekind"][nw] = _EK["runtime"]
        arr["unexplained"][nw] = False
    fifo_e = np.flatnonzero(arr["etype"] == _E_FIFO)
    if len(fifo_e) and ev_ref:
        # a wait the trace links (an event edge into the same activity) is explained
        fifo_e = fifo_e[~np.isin(arr["ref_gpu"][fifo_e], np.asarray(ev_ref, dtype=np.int64))]
    if len(fifo_e):
        _label_stream_waits(arr, fifo_e, host, hidx, gpu, launch_of, dev, stats)
    t = arr["t"]
    rank = arr["rank"]
    u, v = arr["u"].astype(np.int64), arr["v"].astype(np.int64)
    etype, ekind = arr["etype"].astype(np.int8), arr["ekind"].astype(np.int8)
    ref_host, ref_gpu = arr["ref_host"].astype(np.int64), arr["ref_gpu"].astype(np.int64)
    unexplained = arr["unexplained"].astype(bool)

    # topological order: time, then rank at one instant; drop what still points backwards
    order = np.lexsort((np.arange(len(t)), rank, t))
    pos = np.empty(len(t), dtype=np.int64)
    pos[order] = np.arange(len(t))
    fwd = pos[u] < pos[v]
    stats["backward_dropped"] = int((~fwd).sum())
    keep = np.flatnonzero(fwd)
    # chain edges whose model weight is the sync call's return latency only
    w_cut = np.full(len(u), _NULL, dtype=np.int64)
    for chain_e, (lat, k) in w_override.items():
        # the call's own segment shrinks to its return latency only if the edge from the
        # GPU work it waited for is kept
        if fwd[sync_base + k]:
            w_cut[chain_e] = lat
    u, v, etype, ekind = u[keep], v[keep], etype[keep], ekind[keep]
    thread = arr["thread"].astype(np.int64)[keep]
    ref_host, ref_gpu, unexplained, w_cut = (
        ref_host[keep],
        ref_gpu[keep],
        unexplained[keep],
        w_cut[keep],
    )

    # GPU starts with no incoming edge left: from S, unexplained
    is_gstart = np.zeros(len(t), dtype=bool)
    is_gstart[g_start[gidx]] = True
    has_in = np.zeros(len(t), dtype=bool)
    has_in[v] = True
    orphan = np.flatnonzero(~has_in & is_gstart)
    if len(orphan):
        u = np.concatenate([u, np.full(len(orphan), s_node)])
        v = np.concatenate([v, orphan])
        etype = np.concatenate([etype, np.full(len(orphan), _E_REGION, dtype=np.int8)])
        ekind = np.concatenate(
            [ekind, np.full(len(orphan), _EK["unexplained_gpu_wait"], dtype=np.int8)]
        )
        ref_host = np.concatenate([ref_host, np.full(len(orphan), -1)])
        thread = np.concatenate([thread, np.full(len(orphan), _NULL)])
        gpu_of_node = np.full(len(t), -1, dtype=np.int64)
        gpu_of_node[g_start[gidx]] = gidx
        ref_gpu = np.concatenate([ref_gpu, gpu_of_node[orphan]])
        unexplained = np.concatenate([unexplained, np.ones(len(orphan), dtype=bool)])
        w_cut = np.concatenate([w_cut, np.full(len(orphan), _NULL)])
    stats["orphan_gpu_starts"] = len(orphan)

    # model weights: observed time for chain/exec/region/sync edges (cut sync chains), and
    # for edges into a GPU start, the observed latency of the binding one (the latest to
    # arrive), 0 for the others
    obs = t[v] - t[u]
    w = np.where(w_cut != _NULL, w_cut, obs)
    # the region ends when the last thing does: edges into T take no time of their own, so
    # a what-if that shortens the last activity moves the end
    w = np.where(v == t_node, 0, w)
    into_gpu = is_gstart[v] & (etype != _E_EXEC)
    gi = np.flatnonzero(into_gpu)
    if len(gi):
        o = np.lexsort((_PRIORITY[etype[gi]], t[u[gi]], v[gi]))
        gi_sorted = gi[o]
        vv = v[gi_sorted]
        last = np.concatenate([vv[1:] != vv[:-1], [True]])
        binding = np.zeros(len(u), dtype=bool)
        binding[gi_sorted[last]] = True
        w = np.where(into_gpu & ~binding, 0, w)
        # a queued activity that waited far longer than a GPU takes to start queued work, with
        # no recorded dependency to say why, waited on something the trace does not hold
        long_gap = (
            binding & (etype == _E_FIFO) & (obs > STREAM_GAP_UNEXPLAINED_NS)
            & (ekind == _EK["kernel_gap"])
        )  # fmt: skip
        ekind = np.where(long_gap, _EK["unexplained_gpu_wait"], ekind).astype(np.int8)
        unexplained = unexplained | long_gap
        stats["long_stream_gaps"] = int(long_gap.sum())
        # a non-binding launch/fifo/event edge is not where the time went
        unexplained = np.where(into_gpu & ~binding, False, unexplained)
    stats["nodes"] = len(t)
    stats["edges"] = len(u)
    stats["edges_by_type"] = {
        _EDGE_TYPE_NAMES[i]: int(c) for i, c in enumerate(np.bincount(etype, minlength=7).tolist())
    }
    g = _Graph(t, rank, u, v, etype, ekind, w.astype(np.int64), ref_host, ref_gpu, unexplained,
               thread, s_node, t_node, stats)  # fmt: skip
    g.stats["_order"] = order
    g.stats["_launch_of"] = launch_of
    return g


def _label_stream_waits(
    arr: dict[str, np.ndarray],
    fifo_e: np.ndarray,
    host: _Host,
    hidx: np.ndarray,
    gpu: _Gpu,
    launch_of: np.ndarray,
    dev: _DevSync,
    stats: dict[str, Any],
) -> None:
    """A stream's gap is not stream order when the program asked that stream to wait on an
    event between the two launches (``cudaStreamWaitEvent``/``hipStreamWaitEvent``): the wait
    is then on work the trace does not link (no record correlation), an unexplained wait."""
    names = host.name
    waits = (
        hidx[
            np.fromiter(
                (("StreamWait" in (names[i] or "")) for i in hidx.tolist()),
                dtype=bool,
                count=len(hidx),
            )
        ]
        if len(hidx)
        else hidx
    )
    stats["stream_wait_calls"] = len(waits)
    if not len(waits):
        return
    # the waiting stream, when a device-side record names it
    pairs = zip(dev.corr.tolist(), dev.stream.tolist(), strict=True)
    dev_stream = {int(c): int(s) for c, s in pairs if c != _NULL and s != _NULL}
    w_stream = np.array([dev_stream.get(int(host.corr[i]), _NULL) for i in waits.tolist()],
                        dtype=np.int64)  # fmt: skip
    w_start = host.start[waits]
    o = np.argsort(w_start, kind="stable")
    w_start, w_stream = w_start[o], w_stream[o]
    nxt = arr["ref_gpu"][fifo_e]
    # the previous activity on the stream: the fifo edge's source is its end node
    exec_e = np.flatnonzero(arr["etype"] == _E_EXEC)
    end_to_act = dict(zip(arr["v"][exec_e].tolist(), arr["ref_gpu"][exec_e].tolist(), strict=True))
    prev = np.array([end_to_act.get(int(x), -1) for x in arr["u"][fifo_e].tolist()], dtype=np.int64)
    lp = np.where(prev >= 0, launch_of[np.maximum(prev, 0)], -1)
    ln = launch_of[nxt]
    ok = (lp >= 0) & (ln >= 0)
    lo = np.searchsorted(w_start, host.start[np.maximum(lp, 0)], side="right")
    hi = np.searchsorted(w_start, host.start[np.maximum(ln, 0)], side="left")
    hit = ok & (hi > lo)
    marked = 0
    for j in np.flatnonzero(hit).tolist():
        st = int(gpu.stream[int(nxt[j])])
        cand = w_stream[lo[j] : hi[j]]
        if (cand == _NULL).any() or (cand == st).any():
            e = int(fifo_e[j])
            arr["ekind"][e] = _EK["event_wait"]
            arr["unexplained"][e] = True
            marked += 1
    stats["stream_waits_unlinked"] = marked


# -- dynamic programming ---------------------------------------------------------------------


def _forward(g: _Graph, w: np.ndarray) -> np.ndarray:
    """Earliest time of every node: longest path from S with weights ``w``."""
    order: np.ndarray = g.stats["_order"]
    pos = np.empty(len(g.t), dtype=np.int64)
    pos[order] = np.arange(len(g.t))
    o = np.argsort(pos[g.v], kind="stable")
    v_l = g.v[o].tolist()
    u_l = g.u[o].tolist()
    w_l = w[o].tolist()
    neg = -(1 << 62)
    est = [neg] * len(g.t)
    est[g.s] = int(g.t[g.s])
    # edges sorted by their target's position: every source is final before it is read
    for vv, uu, ww in zip(v_l, u_l, w_l, strict=True):
        x = est[uu] + ww
        if x > est[vv]:
            est[vv] = x
    out = np.asarray(est, dtype=np.int64)
    return out


def _backward(g: _Graph, w: np.ndarray, end_time: int) -> np.ndarray:
    """Latest time of every node that keeps T at ``end_time``."""
    order: np.ndarray = g.stats["_order"]
    pos = np.empty(len(g.t), dtype=np.int64)
    pos[order] = np.arange(len(g.t))
    o = np.argsort(-pos[g.u], kind="stable")
    v_l = g.v[o].tolist()
    u_l = g.u[o].tolist()
    w_l = w[o].tolist()
    big = 1 << 62
    lst = [big] * len(g.t)
    lst[g.end_node] = end_time
    for vv, uu, ww in zip(v_l, u_l, w_l, strict=True):
        x = lst[vv] - ww
        if x < lst[uu]:
            lst[uu] = x
    return np.asarray(lst, dtype=np.int64)


def _binding_pred(g: _Graph, est: np.ndarray) -> np.ndarray:
    """For every node, the incoming edge that set its earliest time (ties: latest source,
    then the more causal edge type); -1 for S."""
    val = est[g.u] + g.w
    tight = val == est[g.v]
    e = np.flatnonzero(tight)
    o = np.lexsort((_PRIORITY[g.etype[e]], g.t[g.u[e]], g.v[e]))
    es = e[o]
    vv = g.v[es]
    last = np.concatenate([vv[1:] != vv[:-1], [True]]) if len(vv) else np.zeros(0, dtype=bool)
    pred = np.full(len(g.t), -1, dtype=np.int64)
    pred[vv[last]] = es[last]
    return pred


# -- public ----------------------------------------------------------------------------------


def _processes(host: _Host, gpu: _Gpu) -> list[int]:
    pids = set(np.unique(host.pid).tolist()) | set(np.unique(gpu.pid).tolist())
    pids.discard(_NULL)
    return sorted(int(p) for p in pids)


def _assign_gpu_pids(host: _Host, gpu: _Gpu) -> None:
    """A GPU activity belongs to the process of the call that launched it."""
    has = host.corr != _NULL
    if not has.any() or not len(gpu.corr):
        return
    # only where the trace does not say (copies carry no process id): correlation ids repeat
    # across the processes of a merged multi-rank trace, so a candidate process must also
    # run GPU work on the activity's device, and an ambiguous one stays unknown
    pids_of: dict[int, set[int]] = {}
    for c, p in zip(host.corr[has].tolist(), host.pid[has].tolist(), strict=True):
        pids_of.setdefault(c, set()).add(p)
    devices_of: dict[int, set[int]] = {}
    known = gpu.pid != _NULL
    for p, d in zip(gpu.pid[known].tolist(), gpu.device[known].tolist(), strict=True):
        devices_of.setdefault(p, set()).add(d)
    for i in np.flatnonzero(~known & (gpu.corr != _NULL)).tolist():
        cands = pids_of.get(int(gpu.corr[i]))
        if not cands:
            continue
        if len(cands) > 1:
            dev = int(gpu.device[i])
            cands = {p for p in cands if dev in devices_of.get(p, set())}
        if len(cands) == 1:
            gpu.pid[i] = next(iter(cands))


def critical_paths(
    tables: Mapping[str, pa.Table | None],
    *,
    what_if: Sequence[WhatIf] = (),
    process_id: int | None = None,
    window: tuple[int, int] | None = None,
    top_operators: int = 15,
    top_kernels: int = 30,
) -> list[CriticalPath]:
    """The critical path of every process (rank) of a trace, with what-if re-timings.

    ``tables``: ``kernels``, ``api_calls``, ``memcpy`` and ``ops`` of a bundle (any may be
    missing). ``window``: only host events that start in ``[start, end)`` and the GPU work
    they launched. Processes with no GPU activity are skipped (there is no kernel trace to
    order against).
    """
    host = _host_events(tables)
    gpu = _gpu_events(tables)
    dev = _dev_syncs(tables)
    _assign_gpu_pids(host, gpu)
    pids = _processes(host, gpu)
    if len(pids) == 0 and len(gpu.start):
        pids = [-1]
    out: list[CriticalPath] = []
    for pid in pids:
        if process_id is not None and pid != process_id:
            continue
        if pid == -1:
            hidx = np.arange(len(host.start))
            gidx = np.arange(len(gpu.start))
        else:
            hidx = np.flatnonzero(host.pid == pid)
            gidx = np.flatnonzero((gpu.pid == pid) | ((gpu.pid == _NULL) & (len(pids) == 1)))
        if not len(gidx):
            continue
        if window is not None:
            w0, w1 = window
            hidx = hidx[(host.start[hidx] >= w0) & (host.start[hidx] < w1)]
            # GPU work launched by a kept call; unlinked work that starts inside the window
            kept = host.corr[hidx]
            kept = kept[kept != _NULL]
            launched = np.isin(gpu.corr[gidx], kept)
            unlinked = ~np.isin(gpu.corr[gidx], host.corr[host.corr != _NULL])
            inside = (gpu.start[gidx] >= w0) & (gpu.start[gidx] < w1)
            gidx = gidx[launched | (unlinked & inside)]
            if not len(gidx):
                continue
        starts = [gpu.start[gidx].min()] if len(gidx) else []
        ends = [gpu.end[gidx].max()] if len(gidx) else []
        if len(hidx):
            starts.append(host.start[hidx].min())
            ends.append(np.maximum(host.end[hidx], host.start[hidx]).max())
        region = (int(min(starts)), int(max(ends)))
        g = _build(host, hidx, gpu, gidx, dev, region)
        out.append(
            _analyse(g, host, gpu, hidx, gidx, pid, region, what_if, top_operators, top_kernels)
        )
    return out


def _inclusive_operator(g: _Graph, host: _Host, rx: re.Pattern[str]) -> np.ndarray:
    """Edges inside the operators whose name matches ``rx``, children included: host
    stretches of the same thread within a matching op's time span, and the GPU work whose
    launch call lies within one (``aten::linear`` takes its ``aten::addmm`` and the GEMM)."""
    out = np.zeros(len(g.u), dtype=bool)
    ops = [i for i in range(len(host.start)) if host.cls[i] == _H_OP and host.name[i]
           and rx.search(host.name[i] or "")]  # fmt: skip
    if not ops:
        return out
    spans: dict[int, list[tuple[int, int]]] = {}
    for i in ops:
        spans.setdefault(int(host.tid[i]), []).append((int(host.start[i]), int(host.end[i])))
    merged: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for tid, iv in spans.items():
        iv.sort()
        st: list[int] = []
        en: list[int] = []
        for a, b in iv:
            if st and a <= en[-1]:
                en[-1] = max(en[-1], b)
            else:
                st.append(a)
                en.append(b)
        merged[tid] = (np.asarray(st, dtype=np.int64), np.asarray(en, dtype=np.int64))

    def inside(tid: int, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
        if tid not in merged:
            return np.zeros(len(t0), dtype=bool)
        st, en = merged[tid]
        k = np.searchsorted(st, t0, side="right") - 1
        return (k >= 0) & (t1 <= en[np.maximum(k, 0)])

    chain = np.flatnonzero(g.etype == _E_CHAIN)
    threads = g.thread[chain]
    for tid in np.unique(threads).tolist():
        e = chain[threads == tid]
        out[e] = inside(int(tid), g.t[g.u[e]], g.t[g.v[e]])
    launch_of: np.ndarray = g.stats["_launch_of"]
    gpu_e = np.flatnonzero(g.ref_gpu >= 0)
    la = launch_of[g.ref_gpu[gpu_e]]
    has = la >= 0
    e, h = gpu_e[has], la[has]
    for tid in np.unique(host.tid[h]).tolist():
        pick = host.tid[h] == tid
        out[e[pick]] = inside(int(tid), host.start[h[pick]], host.end[h[pick]])
    return out


def _operator_of(
    g: _Graph, host: _Host, gpu: _Gpu, op_of_ext: dict[int, str], e: int
) -> str | None:
    """The operator an edge's time counts for: a host stretch's op (a runtime call's op by
    its external id), a GPU activity's launching op; None for a wait with no recorded cause."""
    if g.etype[e] == _E_REGION and g.unexplained[e]:
        return None
    h, gg = int(g.ref_host[e]), int(g.ref_gpu[e])
    if h >= 0:
        if host.cls[h] == _H_OP:
            return host.name[h]
        x = int(host.ext[h])
        return op_of_ext.get(x, host.name[h]) if x != _NULL else host.name[h]
    if gg >= 0:
        x = int(gpu.ext[gg])
        if x != _NULL and x in op_of_ext:
            return op_of_ext[x]
        return gpu.name[gg]
    return None


def _operator_names(host: _Host) -> dict[int, str]:
    """External id -> the framework op that carries it (the innermost, shortest one)."""
    ops = np.flatnonzero((host.cls == _H_OP) & (host.ext != _NULL))
    best: dict[int, tuple[int, str]] = {}
    for i in ops.tolist():
        x = int(host.ext[i])
        d = int(host.end[i] - host.start[i])
        nm = host.name[i] or "?"
        cur = best.get(x)
        if cur is None or d < cur[0]:
            best[x] = (d, nm)
    return {k: v[1] for k, v in best.items()}


def _analyse(
    g: _Graph,
    host: _Host,
    gpu: _Gpu,
    hidx: np.ndarray,
    gidx: np.ndarray,
    pid: int,
    region: tuple[int, int],
    what_if: Sequence[WhatIf],
    top_operators: int,
    top_kernels: int,
) -> CriticalPath:
    est = _forward(g, g.w)
    length = int(est[g.end_node] - est[g.s])
    g.stats["model_reproduces_times"] = bool(np.array_equal(est, g.t))
    pred = _binding_pred(g, est)
    # walk back from T
    path_edges: list[int] = []
    node = g.end_node
    pred_l = pred.tolist()
    u_l = g.u
    guard = len(g.t) + 1
    while node != g.s and guard:
        e = pred_l[node]
        if e < 0:
            break
        path_edges.append(e)
        node = int(u_l[e])
        guard -= 1
    path_edges.reverse()
    pe = np.asarray(path_edges, dtype=np.int64)
    dur = (est[g.v[pe]] - est[g.u[pe]]) if len(pe) else np.zeros(0, dtype=np.int64)
    ek = g.ekind[pe]
    by_edge = {k: 0 for k in _EDGE_KINDS}
    for k, d in zip(ek.tolist(), dur.tolist(), strict=True):
        by_edge[_EDGE_KINDS[k]] += int(d)
    by_cat = {c: 0 for c in CATEGORIES}
    for k, d in by_edge.items():
        by_cat[EDGE_CATEGORY[k]] += d
    unexplained = int(dur[g.unexplained[pe]].sum()) if len(pe) else 0

    op_of_ext = _operator_names(host)

    def operator_of(e: int) -> str | None:
        return _operator_of(g, host, gpu, op_of_ext, e)

    segments: list[PathSegment] = []
    by_op: dict[str, int] = {}
    by_call: dict[str, int] = {}
    cur: list[Any] | None = None
    for e, d in zip(pe.tolist(), dur.tolist(), strict=True):
        if d == 0:
            continue
        kind = _EDGE_KINDS[int(g.ekind[e])]
        h, gg = int(g.ref_host[e]), int(g.ref_gpu[e])
        name = host.name[h] if h >= 0 else (gpu.name[gg] if gg >= 0 else None)
        opn = operator_of(e)
        if opn is not None:
            by_op[opn] = by_op.get(opn, 0) + d
        if kind == "runtime" and h >= 0:
            call = host.name[h] or "?"
            by_call[call] = by_call.get(call, 0) + d
        if h >= 0:
            where = f"thread {int(host.tid[h])}" if host.tid[h] != _NULL else "host"
        elif gg >= 0:
            where = f"device {_fmt(gpu.device[gg])} stream {_fmt(gpu.stream[gg])}"
        elif g.thread[e] != _NULL:
            where = f"thread {int(g.thread[e])}"
        else:
            where = "region"
        s0 = int(est[g.u[e]])
        key = (kind, h, gg)
        if cur is not None and cur[0] == key and cur[2] == s0:
            cur[2] = s0 + d
            continue
        if cur is not None:
            segments.append(cur[1](cur[2]))
        unexpl = bool(g.unexplained[e])

        def make(
            end: int, kind: str = kind, s0: int = s0, name: str | None = name,
            opn: str | None = opn, where: str = where, unexpl: bool = unexpl,
        ) -> PathSegment:  # fmt: skip
            return PathSegment(kind, EDGE_CATEGORY[kind], s0, end, name, opn, where, unexpl)

        cur = [key, make, s0 + d]
    if cur is not None:
        segments.append(cur[1](cur[2]))
    segments = _meanwhile(segments, host, hidx)

    # slack of every GPU activity's start
    lst = _backward(g, g.w, int(est[g.end_node]))
    kernels = _kernel_table(g, gpu, gidx, est, lst, pe, dur, top_kernels)

    results = [_what_if(g, host, gpu, wi, length) for wi in what_if]
    stats = {k: v for k, v in g.stats.items() if not k.startswith("_")}
    stats["path_edges"] = len(pe)
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:top_operators]
    return CriticalPath(
        process_id=None if pid == -1 else pid,
        region_start_ns=region[0],
        region_end_ns=region[1],
        length_ns=length,
        by_category=by_cat,
        by_edge={k: v for k, v in by_edge.items() if v},
        by_operator=top,
        unexplained_wait_ns=unexplained,
        segments=tuple(segments),
        kernels=kernels,
        what_if=tuple(results),
        stats=stats,
        runtime_calls=sorted(by_call.items(), key=lambda kv: -kv[1])[:8],
    )


#: host idle stretches on the path at least this long get the busiest other thread as evidence
MEANWHILE_MIN_NS = 50_000
_MEANWHILE_MAX = 50


def _meanwhile(segments: list[PathSegment], host: _Host, hidx: np.ndarray) -> list[PathSegment]:
    """Name, for the longest idle stretches of a host thread on the path, the other thread of
    the process that was busiest meanwhile (a training step's main thread idles while the
    autograd thread works): evidence for the reader, not a dependency of the model."""
    idle = [
        i
        for i, sg in enumerate(segments)
        if sg.kind == "idle_gap" and sg.where.startswith("thread ")
        and sg.dur_ns >= MEANWHILE_MIN_NS
    ]  # fmt: skip
    if not idle or not len(hidx):
        return segments
    idle = sorted(idle, key=lambda i: -segments[i].dur_ns)[:_MEANWHILE_MAX]
    tids = host.tid[hidx]
    starts, ends = host.start[hidx], np.maximum(host.end[hidx], host.start[hidx])
    for i in idle:
        sg = segments[i]
        me = int(sg.where.split()[1])
        over = (starts < sg.end_ns) & (ends > sg.start_ns) & (tids != me)
        if not over.any():
            continue
        best: tuple[int, int, str] | None = None
        for tid in np.unique(tids[over]).tolist():
            sel = np.flatnonzero(over & (tids == tid))
            a = np.maximum(starts[sel], sg.start_ns)
            b = np.minimum(ends[sel], sg.end_ns)
            o = np.argsort(a, kind="stable")
            busy, reach = 0, sg.start_ns
            for x, y in zip(a[o].tolist(), b[o].tolist(), strict=True):
                if y > reach:
                    busy += y - max(x, reach)
                    reach = y
            longest = sel[int(np.argmax(b - a))]
            if best is None or busy > best[0]:
                best = (busy, int(tid), host.name[int(hidx[longest])] or "?")
        if best is not None and best[0] > 0:
            pct = 100.0 * best[0] / sg.dur_ns
            text = f"thread {best[1]} busy {pct:.0f}%: {best[2]}"
            segments[i] = PathSegment(sg.kind, sg.category, sg.start_ns, sg.end_ns, sg.name,
                                      sg.operator, sg.where, sg.unexplained, text)  # fmt: skip
    return segments


def _fmt(x: Any) -> str:
    return "?" if int(x) == _NULL else str(int(x))


def _kernel_table(
    g: _Graph,
    gpu: _Gpu,
    gidx: np.ndarray,
    est: np.ndarray,
    lst: np.ndarray,
    pe: np.ndarray,
    dur: np.ndarray,
    top: int,
) -> list[dict[str, Any]]:
    """Per activity name: count, total time, time on the path, slack (min, median)."""
    if not len(gidx):
        return []
    nodes = np.full(len(gpu.start), -1, dtype=np.int64)
    exec_e = np.flatnonzero(g.etype == _E_EXEC)
    nodes[g.ref_gpu[exec_e]] = g.u[exec_e]
    # zero-length activities have no exec edge: their start node is their only node
    slack: dict[str, list[int]] = {}
    total: dict[str, int] = {}
    on_path: dict[str, int] = {}
    count: dict[str, int] = {}
    for a in gidx.tolist():
        nm = gpu.name[a] or "?"
        count[nm] = count.get(nm, 0) + 1
        total[nm] = total.get(nm, 0) + int(gpu.end[a] - gpu.start[a])
        n = int(nodes[a])
        if n >= 0:
            slack.setdefault(nm, []).append(int(lst[n] - est[n]))
    is_exec = g.etype[pe] == _E_EXEC
    for e, d in zip(pe[is_exec].tolist(), dur[is_exec].tolist(), strict=True):
        nm = gpu.name[int(g.ref_gpu[e])] or "?"
        on_path[nm] = on_path.get(nm, 0) + int(d)
    rows = []
    for nm in sorted(total, key=lambda k: (-on_path.get(k, 0), -total[k]))[:top]:
        sl = slack.get(nm, [])
        rows.append(
            {
                "name": nm,
                "count": count[nm],
                "total_ns": total[nm],
                "on_path_ns": on_path.get(nm, 0),
                "min_slack_ns": min(sl) if sl else None,
                "median_slack_ns": int(np.median(sl)) if sl else None,
            }
        )
    return rows


def _what_if(g: _Graph, host: _Host, gpu: _Gpu, wi: WhatIf, length: int) -> WhatIfResult:
    kinds = {_EK[k] for k in wi.edge_kinds()}
    sel = np.isin(g.ekind, np.array(sorted(kinds), dtype=np.int8))
    if wi.pattern is not None:
        rx = re.compile(wi.pattern, re.IGNORECASE)
        cand = np.flatnonzero(sel)
        match = np.zeros(len(g.u), dtype=bool)
        cache: dict[tuple[str | None, ...], bool] = {}
        if wi.target in _BY_OPERATOR:
            match = _inclusive_operator(g, host, rx) & sel
            cand = np.zeros(0, dtype=np.int64)
        op_of_ext: dict[int, str] = {}
        for e in cand.tolist():
            h, gg = int(g.ref_host[e]), int(g.ref_gpu[e])
            if wi.target in _BY_OPERATOR:
                key: tuple[str | None, ...] = (_operator_of(g, host, gpu, op_of_ext, e),)
            elif h >= 0:
                key = (host.name[h],)
            elif gg >= 0:  # a kernel matches by its name, full name or family (gemm, ...)
                key = (
                    gpu.name[gg],
                    gpu.full[gg] if gpu.full else None,
                    gpu.family[gg] if gpu.family else None,
                )
            else:
                key = (None,)
            hit = cache.get(key)
            if hit is None:
                hit = cache[key] = any(x is not None and rx.search(x) for x in key)
            match[e] = hit
        sel = match
    w2 = g.w.copy()
    w2[sel] = np.round(g.w[sel] * wi.factor).astype(np.int64)
    est = _forward(g, w2)
    new_len = int(est[g.end_node] - est[g.s])
    matched_ns = int(g.w[sel].sum())
    n_match = len(np.unique(np.where(g.ref_gpu[sel] >= 0, g.ref_gpu[sel], -2 - g.ref_host[sel])))
    return WhatIfResult(
        spec=wi.text,
        label=wi.label or wi.text,
        matched=n_match if sel.any() else 0,
        matched_ns=matched_ns,
        length_ns=length,
        new_length_ns=new_len,
        # summed over threads and streams, matched time can exceed the wall time: Amdahl's
        # promise is capped at the whole length
        amdahl_saved_ns=min(round(matched_ns * (1.0 - wi.factor)), length),
    )


# -- summary and recommendations -------------------------------------------------------------

#: the what-ifs every critical-path analysis answers: halving each category, and halving
#: each of the kernels that hold the most path time (added by :func:`auto_what_ifs`)
DEFAULT_WHAT_IFS: tuple[str, ...] = ("gpu:0.5", "cpu:0.5", "runtime:0.5", "sync:0")


def auto_what_ifs(tables: Mapping[str, pa.Table | None], top: int = 3) -> list[WhatIf]:
    """The default what-ifs plus one per kernel name among the ``top`` by total GPU time
    (halved): cheap to answer, and what a user asks first."""
    out = [parse_what_if(t) for t in DEFAULT_WHAT_IFS]
    gpu = _gpu_events(tables)
    if len(gpu.start):
        total: dict[str, int] = {}
        for nm, d in zip(gpu.name, (gpu.end - gpu.start).tolist(), strict=True):
            if nm:
                total[nm] = total.get(nm, 0) + int(d)
        copies = {n for n, c in zip(gpu.name, gpu.is_copy.tolist(), strict=True) if c}
        for nm in sorted(total, key=lambda k: -total[k])[:top]:
            target = "copy" if nm in copies else "kernel"
            wi = parse_what_if(f"{target}~^{re.escape(nm)}$:0.5")
            short = nm if len(nm) <= 60 else nm[:57] + "..."
            out.append(WhatIf(wi.target, wi.pattern, wi.factor, wi.text, f"{target} {short} x0.5"))
    return out


def step_window(tables: Mapping[str, pa.Table | None], step: int) -> tuple[int, int]:
    """The host time range of ``ProfilerStep#step`` (annotations of kind ``step``; the
    earliest start and latest end when several processes have it)."""
    ann = tables.get("annotations")
    n = ann.num_rows if ann is not None else 0
    kind, num = _strs(ann, "kind", n), _col(ann, "step", n)
    start, dur = _col(ann, "start_ns", n), _col(ann, "dur_ns", n)
    hit = [i for i in range(n) if kind[i] == "step" and num[i] == step]
    if not hit:
        have = sorted({int(num[i]) for i in range(n) if kind[i] == "step" and num[i] != _NULL})
        listed = ", ".join(map(str, have[:20])) if have else "none"
        raise ValueError(f"no ProfilerStep#{step} in this trace (steps: {listed})")
    return min(int(start[i]) for i in hit), max(int(start[i] + dur[i]) for i in hit) + 1


def _steps(tables: Mapping[str, pa.Table | None], cp: CriticalPath) -> int | None:
    """ProfilerStep ranges of the process inside the region (per-step gains), else None."""
    ann = tables.get("annotations")
    if ann is None or not ann.num_rows or "kind" not in ann.column_names:
        return None
    n = len(ann)
    kind = _strs(ann, "kind", n)
    num = _col(ann, "step", n)
    start = _col(ann, "start_ns", n)
    end = start + _col(ann, "dur_ns", n)
    pid = _col(ann, "process_id", n)
    # a step overlapping the region counts (the region starts at the step's first event,
    # after the step's own start); one count per step number
    k = len(
        {
            int(num[i]) if num[i] != _NULL else int(start[i])
            for i in range(n)
            if kind[i] == "step"
            and start[i] < cp.region_end_ns
            and end[i] > cp.region_start_ns
            and (cp.process_id is None or pid[i] in (_NULL, cp.process_id))
        }
    )
    return k or None


def critical_path_summary(
    tables: Mapping[str, pa.Table | None],
    what_if: Sequence[WhatIf] = (),
    *,
    auto: bool = True,
    max_segments: int = 200,
    step: int | None = None,
) -> dict[str, Any] | None:
    """``metrics/critical_path.json``: the path of every process (rank) with a GPU trace and
    what-ifs, the first process (most GPU activities) as ``primary``; None without a
    GPU trace. ``step``: only ``ProfilerStep#step`` (host events that start in it and the
    GPU work they launched); a ValueError when the trace has no such step."""
    wis = list(what_if) + (auto_what_ifs(tables) if auto else [])
    window = step_window(tables, step) if step is not None else None
    paths = critical_paths(tables, what_if=wis, window=window)
    if not paths:
        return None
    primary = max(paths, key=lambda c: c.stats.get("gpu_activities", 0))
    ranks = []
    for cp in paths:
        d = cp.to_dict(max_segments=max_segments)
        d["steps"] = _steps(tables, cp)
        ranks.append(d)
    return {
        "model": "causal DAG (docs/metrics.md#critical-path)",
        "primary_process_id": primary.process_id,
        "primary": ranks[paths.index(primary)],
        "processes": ranks,
        "user_what_if": [w.text for w in what_if],
        "step": step,
    }


def critical_path_recommendations(
    summary: dict[str, Any] | None, min_pct: float = 5.0
) -> list[dict[str, Any]]:
    """Recommendations from the what-ifs of the primary process: each that would shorten
    the critical path by at least ``min_pct`` %, with the saving the re-timed DAG predicts
    (overlap included) beside what Amdahl's law on summed time would say."""
    if not summary:
        return []
    p = summary["primary"]
    steps = p.get("steps") or None
    out: list[dict[str, Any]] = []
    for w in p.get("what_if", []):
        pct = w.get("saved_pct")
        if pct is None or pct < min_pct:
            continue
        per = steps or 1
        spec = w["spec"]
        action = _what_if_action(spec, w.get("label"))
        if parse_what_if(spec).target in ("runtime", "launch"):
            action = _runtime_action(p.get("runtime_calls") or [], action)
        out.append(
            {
                "class": "critical-path",
                "action": action,
                "target": [spec],
                "target_nodes": [],
                "gain_ms": round(w["saved_ns"] / per / 1e6, 6),
                "gain_pct": round(pct, 3),
                        "gain_kind": "critical-path what-if, "
                + (f"per step ({steps} steps)" if steps else "over the traced region"),
                "confidence": None,
                "evidence": [
                    {"signal": "critical_path_length_ns", "value": w["length_ns"], "unit": "ns",
                     "source": "metrics/critical_path.json"},
                    {"signal": "what_if_length_ns", "value": w["new_length_ns"], "unit": "ns",
                     "source": "metrics/critical_path.json"},
                    {"signal": "amdahl_saved_ns", "value": w["amdahl_saved_ns"], "unit": "ns",
                     "source": "metrics/critical_path.json"},
                ],
            }
        )  # fmt: skip
    return out


#: runtime calls that launch work (their cost is cut by graphs, fusion, fewer launches)
_LAUNCH_HINTS = ("Launch", "Memcpy", "Memset")


def _runtime_action(calls: list[dict[str, Any]], default: str) -> str:
    """Name the runtime calls that hold the path's runtime time, and the fix that fits them:
    launches (graphs, fusion) or set-up and allocation (out of the measured region, reuse)."""
    if not calls:
        return default
    total = sum(c.get("ns") or 0 for c in calls) or 1
    launch = sum(
        c.get("ns") or 0 for c in calls if any(h in str(c.get("name")) for h in _LAUNCH_HINTS)
    )
    top = ", ".join(f"{c.get('name')} {100.0 * (c.get('ns') or 0) / total:.0f}%" for c in calls[:3])
    if launch / total >= 0.5:
        fix = "fewer, larger launches: CUDA/HIP graphs, fused kernels, torch.compile"
    else:
        fix = (
            "not launches: keep context set-up, allocations and frees out of the measured "
            "region (warm up first, reuse memory: a caching allocator)"
        )
    return f"cut the runtime calls on the critical path ({top}): {fix}"


def _what_if_action(spec: str, label: str | None = None) -> str:
    wi = parse_what_if(spec)
    if label and label != spec and wi.target in ("kernel", "copy"):
        return f"speed up {label.removesuffix(' x0.5')} (what-if: x{wi.factor:g} time)"
    what = {
        "gpu": "GPU kernels and copies", "kernel": "the kernels", "cpu": "host-side operator time",
        "runtime": "runtime and launch overhead (CUDA/HIP graphs, fewer launches)",
        "sync": "blocking synchronisations", "copy": "memory copies",
    }.get(wi.target, wi.target)  # fmt: skip
    if wi.pattern is not None:
        what = f"{what} matching {wi.pattern.strip('^$')!r}".replace("\\", "")
    return f"speed up {what} (what-if: x{wi.factor:g} time)"
