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

The computation is vectorised over numpy arrays, so its cost is about linear in events:
names are codes into their distinct values, the longest paths come from scipy's compiled
Dijkstra on reduced costs over the DAG with its series nodes contracted
(:class:`_LongestPaths`), and the path's segments are kept as columns that become
:class:`PathSegment` objects when read.

Pure: Arrow tables in, dataclasses out.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

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
    #: in path order (a sequence that makes its PathSegment objects when read: a long
    #: trace's path holds millions)
    segments: Sequence[PathSegment]
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
        if isinstance(self.segments, _Segments):
            segs = [self.segments[i] for i in self.segments.longest(max_segments)]
        else:
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


# where a segment's time went: "thread T", "host", "device D stream S", "region"
_W_THREAD, _W_HOST, _W_STREAM, _W_REGION = range(4)


class _Segments(Sequence[PathSegment]):
    """The path's segments as columns, each made into a :class:`PathSegment` when read.

    A long trace's path holds millions of segments and most readers keep the longest few
    hundred (:meth:`longest`); reading one, iterating, ``len`` and ``==`` behave as on the
    tuple of the segments."""

    def __init__(
        self,
        start: np.ndarray,
        end: np.ndarray,
        kind: np.ndarray,
        name: np.ndarray,
        op: np.ndarray,
        where: np.ndarray,
        where_id: np.ndarray,
        unexplained: np.ndarray,
        strings: list[str],
        gpu: _Gpu,
    ) -> None:
        self.start, self.end, self.kind = start, end, kind
        #: codes into ``strings`` (-1: None)
        self.name, self.op = name, op
        #: _W_* and its thread id or GPU activity
        self.where, self.where_id = where, where_id
        self.unexplained = unexplained
        self.strings = strings
        self._device, self._stream = gpu.device, gpu.stream
        #: segment -> what the busiest other thread did meanwhile (see _meanwhile)
        self.meanwhile: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.start)

    @overload
    def __getitem__(self, i: int) -> PathSegment: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[PathSegment, ...]: ...

    def __getitem__(self, i: int | slice) -> PathSegment | tuple[PathSegment, ...]:
        if isinstance(i, slice):
            return tuple(self._make(j) for j in range(*i.indices(len(self))))
        j = operator.index(i)
        if j < 0:
            j += len(self)
        if not 0 <= j < len(self):
            raise IndexError("segment index out of range")
        return self._make(j)

    def __iter__(self) -> Iterator[PathSegment]:
        s = self.strings
        cols = zip(self.start.tolist(), self.end.tolist(), self.kind.tolist(),
                   self.name.tolist(), self.op.tolist(), self.where.tolist(),
                   self.where_id.tolist(), self.unexplained.tolist(), strict=True)  # fmt: skip
        places: dict[tuple[int, int], str] = {}
        for j, (a, b, k, nm, op, wt, wi, un) in enumerate(cols):
            kind = _EDGE_KINDS[k]
            place = places.get((wt, wi))
            if place is None:
                place = places[(wt, wi)] = self._place(wt, wi)
            yield PathSegment(kind, EDGE_CATEGORY[kind], a, b, s[nm] if nm >= 0 else None,
                              s[op] if op >= 0 else None, place, un,
                              self.meanwhile.get(j))  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple | _Segments):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(tuple(self))

    def _place(self, wt: int, wi: int) -> str:
        if wt == _W_THREAD:
            return f"thread {wi}"
        if wt == _W_HOST:
            return "host"
        if wt == _W_STREAM:
            return f"device {_fmt(self._device[wi])} stream {_fmt(self._stream[wi])}"
        return "region"

    def _make(self, j: int) -> PathSegment:
        kind = _EDGE_KINDS[int(self.kind[j])]
        nm, op = int(self.name[j]), int(self.op[j])
        return PathSegment(
            kind,
            EDGE_CATEGORY[kind],
            int(self.start[j]),
            int(self.end[j]),
            self.strings[nm] if nm >= 0 else None,
            self.strings[op] if op >= 0 else None,
            self._place(int(self.where[j]), int(self.where_id[j])),
            bool(self.unexplained[j]),
            self.meanwhile.get(j),
        )

    def longest(self, k: int) -> list[int]:
        """The segments that ``sorted(segments, key=-dur)[:k]`` keeps (ties: the earlier),
        in the order of their start: a selection, not a sort of all of them."""
        n = len(self)
        k = max(n + k, 0) if k < 0 else min(k, n)
        dur = self.end - self.start
        if k == n:
            pick = np.arange(n)
        elif k == 0:
            pick = np.zeros(0, dtype=np.int64)
        else:
            cut = np.partition(dur, n - k)[n - k]  # the k-th longest
            above = np.flatnonzero(dur > cut)
            pick = np.concatenate([above, np.flatnonzero(dur == cut)[: k - len(above)]])
        # the order sorted() gives them (longest first, ties by position), then by start
        pick = pick[np.lexsort((pick, -dur[pick]))]
        return pick[np.argsort(self.start[pick], kind="stable")].tolist()  # type: ignore[no-any-return]


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


@dataclass(frozen=True)
class _Strs:
    """A string column as codes into its distinct values (-1: null).

    Names repeat (thousands of distinct ones over millions of events): testing, matching and
    grouping each distinct value once keeps the analysis linear in events."""

    code: np.ndarray
    values: list[str]

    def __len__(self) -> int:
        return len(self.code)

    def __getitem__(self, i: int) -> str | None:
        c = int(self.code[i])
        return None if c < 0 else self.values[c]

    def test(self, fn: Callable[[str | None], object]) -> np.ndarray:
        """``bool(fn(value))`` of every row, computed once per distinct value."""
        per = np.array([bool(fn(None))] + [bool(fn(v)) for v in self.values], dtype=bool)
        return per[self.code + 1]  # type: ignore[no-any-return]


def _str_col(t: pa.Table | None, name: str, n: int) -> pa.ChunkedArray:
    """A string column (all null when the table lacks it)."""
    if t is None or name not in t.column_names:
        return pa.chunked_array([pa.nulls(n, pa.string())])
    c = t.column(name)
    return c if pa.types.is_string(c.type) else c.cast(pa.string())


def _encode(arr: pa.ChunkedArray) -> _Strs:
    parts = []
    for chunk in arr.chunks:
        enc = pc.dictionary_encode(chunk)
        code = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)
        parts.append(_Strs(np.asarray(code, dtype=np.int32), enc.dictionary.to_pylist()))
    return parts[0] if len(parts) == 1 else _concat(parts)


def _names(t: pa.Table | None, name: str, n: int) -> _Strs:
    return _encode(_str_col(t, name, n))


def _same(value: str | None, n: int) -> _Strs:
    if value is None:
        return _Strs(np.full(n, -1, dtype=np.int32), [])
    return _Strs(np.zeros(n, dtype=np.int32), [value])


def _concat(parts: Sequence[_Strs]) -> _Strs:
    index: dict[str, int] = {}
    codes = []
    for p in parts:
        remap = np.array([-1] + [index.setdefault(v, len(index)) for v in p.values], dtype=np.int32)
        codes.append(remap[p.code + 1])
    return _Strs(np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32), list(index))


@dataclass
class _Host:
    """Host events of the trace (framework ops and host runtime calls)."""

    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray  # _H_OP / _H_RUNTIME / _H_SYNC
    name: _Strs
    corr: np.ndarray
    ext: np.ndarray
    api_kind: _Strs


@dataclass
class _Gpu:
    """GPU activities: kernels with device timestamps, copies and memsets."""

    pid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    is_copy: np.ndarray
    name: _Strs
    corr: np.ndarray
    ext: np.ndarray
    kernel_row: np.ndarray  # row in the kernels table, -1 for copies
    #: kernel family (gemm, attention, ...; ``memcpy`` for copies): what-if patterns match it
    family: _Strs
    #: the name as the tool reported it (mangled, templates and all), when it differs
    full: _Strs


def _sync_blocks(name: str, kind: str | None) -> bool:
    """Whether a host runtime call blocks the thread until GPU work completes."""
    if kind == "sync":
        # a stream wait on an event or value is enqueued on the device; the host goes on
        return "Wait" not in name
    if kind == "memcpy":
        base = name.removesuffix("_ptsz").removesuffix("_spt")
        return ("Async" not in base and "Peer" not in base) or base in ("hipMemcpyPeer",)
    return False


class _Rows:
    """Some rows of a table, its columns read as numpy arrays: filtering there copies only
    the columns read (Arrow's filter copies every one, strings and lists included)."""

    def __init__(self, t: pa.Table | None, keep: np.ndarray | None = None) -> None:
        self.t, self.keep = t, keep
        self.rows = t.num_rows if t is not None else 0
        self.n = int(keep.sum()) if keep is not None else self.rows

    def col(self, name: str) -> np.ndarray:
        x = _col(self.t, name, self.rows)
        return x[self.keep] if self.keep is not None else x

    def names(self, name: str) -> _Strs:
        x = _names(self.t, name, self.rows)
        return _Strs(x.code[self.keep], x.values) if self.keep is not None else x


def _mask(m: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(m.to_numpy(zero_copy_only=False), dtype=bool)


def _host_events(tables: Mapping[str, pa.Table | None]) -> _Host:
    ops = tables.get("ops")
    keep = None
    if ops is not None and ops.num_rows and "source" in ops.column_names:
        # ONNX Runtime's node times are on its profile's own clock, not the trace's
        keep = _mask(pc.not_equal(pc.fill_null(ops.column("source"), ""), "onnxruntime"))
    if ops is not None and ops.num_rows and "start_ns" in ops.column_names:
        valid = _mask(pc.is_valid(ops.column("start_ns")))
        keep = valid if keep is None else keep & valid
    o = _Rows(ops, keep)
    api = tables.get("api_calls")
    keep = None
    if api is not None and api.num_rows and "device" in api.column_names:
        keep = _mask(pc.is_null(api.column("device")))
    a = _Rows(api, keep)
    ann = tables.get("annotations")
    if ann is not None and ann.num_rows and "kind" in ann.column_names:
        # record_function ranges: host time inside them that no op covers is the user's code
        ann = ann.filter(
            pc.and_(pc.equal(ann.column("kind"), "user"), pc.is_valid(ann.column("thread_id")))
        )
    else:
        ann = None
    n_u = ann.num_rows if ann is not None else 0
    n_o = o.n
    o_start = o.col("start_ns")
    o_end = o_start + o.col("dur_ns")
    a_start = a.col("start_ns")
    a_end = a.col("end_ns")
    a_names = a.names("name")
    a_kinds = a.names("kind")
    blocks = (
        a_kinds.test(lambda k: k == "sync") & a_names.test(lambda s: _sync_blocks(s or "", "sync"))
    ) | (
        a_kinds.test(lambda k: k == "memcpy")
        & a_names.test(lambda s: _sync_blocks(s or "", "memcpy"))
    )
    a_cls = np.where(blocks, _H_SYNC, _H_RUNTIME).astype(np.int8)
    u_start = _col(ann, "start_ns", n_u)
    nul = np.full(n_u, _NULL, dtype=np.int64)
    return _Host(
        pid=np.concatenate(
            [o.col("process_id"), a.col("process_id"), _col(ann, "process_id", n_u)]
        ),
        tid=np.concatenate([o.col("thread_id"), a.col("thread_id"), _col(ann, "thread_id", n_u)]),
        start=np.concatenate([o_start, a_start, u_start]),
        end=np.concatenate([o_end, a_end, u_start + _col(ann, "dur_ns", n_u)]),
        cls=np.concatenate(
            [np.full(n_o, _H_OP, dtype=np.int8), a_cls, np.full(n_u, _H_USER, dtype=np.int8)]
        ),
        name=_concat([o.names("node_name"), a_names, _names(ann, "name", n_u)]),
        corr=np.concatenate([np.full(n_o, _NULL, dtype=np.int64), a.col("correlation_id"), nul]),
        ext=np.concatenate([o.col("external_id"), a.col("external_id"), nul]),
        api_kind=_concat([_same(None, n_o), a_kinds, _same(None, n_u)]),
    )


def _gpu_events(tables: Mapping[str, pa.Table | None]) -> _Gpu:
    k = tables.get("kernels")
    if k is not None:
        read = ("short_name", "name", "family", "start_ns", "end_ns", "device", "stream",
                "correlation_id", "external_id", "process_id", "time_is_gpu")  # fmt: skip
        k = k.select([c for c in read if c in k.column_names])
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
    short, full = _str_col(k, "short_name", n_k), _str_col(k, "name", n_k)
    # the short name, else the full one (an empty short name counts as none)
    k_names = pc.if_else(pc.fill_null(pc.not_equal(short, ""), False), short, full)
    m_kind = _str_col(m, "kind", n_m)
    m_kind = pc.if_else(pc.fill_null(pc.not_equal(m_kind, ""), False), m_kind, pa.scalar("copy"))
    m_name = _str_col(m, "name", n_m)
    m_names = pc.if_else(pc.is_null(m_name), m_kind, m_name)
    return _Gpu(
        pid=np.concatenate([_col(k, "process_id", n_k), np.full(n_m, _NULL, dtype=np.int64)]),
        device=np.concatenate([_col(k, "device", n_k), _col(m, "device", n_m)]),
        stream=np.concatenate([_col(k, "stream", n_k), _col(m, "stream", n_m)]),
        start=np.concatenate([_col(k, "start_ns", n_k), _col(m, "start_ns", n_m)]),
        end=np.concatenate([_col(k, "end_ns", n_k), _col(m, "end_ns", n_m)]),
        is_copy=np.concatenate([np.zeros(n_k, dtype=bool), np.ones(n_m, dtype=bool)]),
        name=_concat([_encode(k_names), _encode(m_names)]),
        corr=np.concatenate([_col(k, "correlation_id", n_k), _col(m, "correlation_id", n_m)]),
        ext=np.concatenate([_col(k, "external_id", n_k), _col(m, "external_id", n_m)]),
        kernel_row=np.concatenate([rows, np.full(n_m, -1, dtype=np.int64)]),
        family=_concat([_names(k, "family", n_k), _same("memcpy", n_m)]),
        full=_concat([_encode(full), _same(None, n_m)]),
    )


@dataclass(frozen=True)
class _Names:
    """Host and GPU names in one code space (equal strings, equal codes): path time is
    grouped by name whichever side it comes from."""

    values: list[str]
    #: host / GPU name code + 1 -> code here (-1: None)
    host: np.ndarray
    gpu: np.ndarray
    #: the code of "?", how the report names a null or empty name
    unknown: int
    blank: np.ndarray  # code + 1 -> null or empty

    def or_unknown(self, code: np.ndarray) -> np.ndarray:
        """``name or "?"``."""
        return np.where(self.blank[code + 1], self.unknown, code)

    def of_host(self, host: _Host, h: np.ndarray) -> np.ndarray:
        """Codes of the host events ``h`` (-1 for h < 0 and null names)."""
        return self.host[_take(host.name.code, h, -1) + 1]  # type: ignore[no-any-return]

    def of_gpu(self, gpu: _Gpu, a: np.ndarray) -> np.ndarray:
        return self.gpu[_take(gpu.name.code, a, -1) + 1]  # type: ignore[no-any-return]


def _name_space(host: _Host, gpu: _Gpu) -> _Names:
    index: dict[str, int] = {}
    h = np.array([-1] + [index.setdefault(v, len(index)) for v in host.name.values], np.int64)
    g = np.array([-1] + [index.setdefault(v, len(index)) for v in gpu.name.values], np.int64)
    unknown = index.setdefault("?", len(index))
    values = list(index)
    blank = np.array([True] + [v == "" for v in values], dtype=bool)
    return _Names(values, h, g, unknown, blank)


def _take(a: np.ndarray, i: np.ndarray, fill: int) -> np.ndarray:
    """``a[i]``, ``fill`` where ``i < 0``."""
    if not len(a):
        return np.full(len(i), fill, dtype=a.dtype)
    out: np.ndarray = a[np.maximum(i, 0)]
    out[i < 0] = fill
    return out


def _lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key first, ties in input order), as one stable argsort
    of a packed key when the keys' ranges fit in 63 bits (several times faster)."""
    n = len(keys[0])
    if not n:
        return np.zeros(0, dtype=np.int64)
    lows = [int(k.min()) for k in keys]
    spans = [int(k.max()) - lo + 1 for k, lo in zip(keys, lows, strict=True)]
    if math.prod(spans) >= 1 << 63:
        return np.lexsort(keys)
    packed = np.zeros(n, dtype=np.int64)
    mult = 1
    for k, lo, span in zip(keys, lows, spans, strict=True):
        packed += (k.astype(np.int64) - lo) * mult
        mult *= span
    return np.argsort(packed, kind="stable")


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


#: node, edge and event indices in the graph (2**31 of them would not fit in memory)
_IDX = np.int32


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
        thread: int | np.ndarray = _NULL,
    ) -> None:
        m = len(u)
        if not m:
            return
        self.e["u"].append(np.asarray(u, dtype=_IDX))
        self.e["v"].append(np.asarray(v, dtype=_IDX))
        self.e["etype"].append(np.full(m, etype, dtype=np.int8))
        for key, val, dt in (
            ("ekind", ekind, np.int8),
            ("ref_host", ref_host, _IDX),
            ("ref_gpu", ref_gpu, _IDX),
            ("unexplained", unexplained, bool),
            ("thread", thread, np.int64),
        ):
            self.e[key].append(np.broadcast_to(np.asarray(val, dtype=dt), (m,)).copy())

    def count(self) -> int:
        """Edges so far."""
        return sum(len(x) for x in self.e["u"])

    def arrays(self) -> dict[str, np.ndarray]:
        """The nodes' and edges' columns (the builder lets go of its chunks)."""
        out = {}
        for k in list(self.e):
            v = self.e.pop(k)
            out[k] = np.concatenate(v) if v else np.zeros(0, dtype=np.int64)
        out["t"] = np.concatenate(self.t) if self.t else np.zeros(0, dtype=np.int64)
        out["rank"] = np.concatenate(self.rank) if self.rank else np.zeros(0, dtype=np.int8)
        self.t, self.rank = [], []
        return out


def _stab_max(lo: np.ndarray, hi: np.ndarray, val: np.ndarray, n: int) -> np.ndarray:
    """For every point p of ``[0, n)``: the largest ``val[j]`` over the intervals j with
    ``lo[j] <= p < hi[j]``, -1 where none covers it (``val >= 0``).

    A segment tree over the points: each interval raises the O(log n) nodes that tile it,
    then every node's value is pushed down to the leaves below it."""
    tree = np.full(2 * n, -1, dtype=val.dtype)
    keep = lo < hi
    left, right, x = lo[keep] + n, hi[keep] + n, val[keep]
    while len(left):
        odd = (left & 1) == 1
        np.maximum.at(tree, left[odd], x[odd])
        left = left + odd
        odd = (right & 1) == 1
        right = right - odd
        np.maximum.at(tree, right[odd], x[odd])
        left >>= 1
        right >>= 1
        keep = left < right
        left, right, x = left[keep], right[keep], x[keep]
    k = 1
    while k < n:  # level by level, parents first: node i's children are 2i and 2i + 1
        children = tree[2 * k : min(4 * k, 2 * n)].reshape(-1, 2)
        np.maximum(children, tree[k : k + len(children), None], out=children)
        k *= 2
    return tree[n:]


def _host_chains(
    b: _Builder, host: _Host, idx: np.ndarray, stats: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[int, int, int]]]:
    """Per-thread chains of the host events ``idx``.

    Returns every chain's first and last node (threads in order); for each host event its
    start and end node (arrays over all host events, -1 elsewhere); and for single-segment
    sync calls the chain edge that is its whole time: host event -> (edge index into the
    edge list appended here, start node, end node).

    The category of a segment ``[t_i, t_i+1)`` is its innermost open event: the open one
    that a stack sweep over the events sorted by (start, longest first) pushed last, that is
    the one latest in that order among those with ``start <= t_i < end``; an event pushed
    onto an open one that ends before it is improperly nested (``repaired``).
    """
    start_node = np.full(len(host.start), -1, dtype=np.int64)
    end_node = np.full(len(host.start), -1, dtype=np.int64)
    whole_sync: dict[int, tuple[int, int, int]] = {}
    none = np.zeros(0, dtype=np.int64)
    if not len(idx):
        return none, none, start_node, end_node, whole_sync
    tids = host.tid[idx]
    order = _lexsort((host.start[idx], tids))
    idx = idx[order].astype(_IDX)
    tids = tids[order]
    del order
    n = len(idx)
    thr = np.zeros(n, dtype=_IDX)  # thread ordinal
    thr[1:] = np.cumsum(tids[1:] != tids[:-1])
    thread_tid = tids[np.flatnonzero(np.concatenate([[True], thr[1:] != thr[:-1]]))]
    del tids
    s = host.start[idx]
    e = np.maximum(host.end[idx], s)
    # the instants of each thread: its distinct start and end times, in order (node ids are
    # consecutive: instant i is node node0 + i)
    key_t, key_g = np.concatenate([s, e]), np.concatenate([thr, thr])
    del s, thr
    o = _lexsort((key_t, key_g))
    ts = key_t[o]
    del key_t
    gs = key_g[o]
    del key_g
    new = np.ones(2 * n, dtype=bool)
    new[1:] = (ts[1:] != ts[:-1]) | (gs[1:] != gs[:-1])
    point = np.empty(2 * n, dtype=_IDX)
    point[o] = np.cumsum(new) - 1
    del o
    a, z = point[:n], point[n:]  # each event's instants
    times = ts[new]
    del ts
    p_thr = gs[new]
    del gs, new
    node0 = b.n
    b.nodes(times, _R_HOST)
    start_node[idx] = node0 + a
    end_node[idx] = node0 + z
    p = len(times)
    first = np.ones(p, dtype=bool)
    first[1:] = p_thr[1:] != p_thr[:-1]
    seg = np.flatnonzero(~first[1:]).astype(_IDX)  # instants i, i + 1 of a thread: a segment

    # the sweep's order: thread, start, longest first, position; idx is in (thread, start,
    # position) order already, so only runs of equal starts need sorting
    rank_order = np.arange(n, dtype=_IDX)
    tie = a[1:] == a[:-1]
    if tie.any():
        in_tie = np.zeros(n, dtype=bool)
        in_tie[1:] |= tie
        in_tie[:-1] |= tie
        sub = np.flatnonzero(in_tie)
        rank_order[sub] = sub[np.lexsort((-e[sub], a[sub]))]
        del in_tie, sub
    del tie
    rank = np.empty(n, dtype=_IDX)
    rank[rank_order] = np.arange(n, dtype=_IDX)
    top = _stab_max(a, z, rank, p)[seg]
    lab = np.where(top >= 0, idx[rank_order[np.maximum(top, 0)]], -1).astype(_IDX)
    del top

    # improper nesting: an event j pushed (it lasts) onto the open event latest in sweep
    # order before it, which ends before j. When the event just before j in that order
    # starts at j's instant it is that one (and ends no earlier); else it is the latest
    # event that started before j's instant and ends after it, open across both instants
    # j-1 and j: the latest interval [a, z - 1) covering instant j-1
    same_start = np.zeros(n, dtype=bool)
    same_start[rank_order[1:]] = a[rank_order[1:]] == a[rank_order[:-1]]
    ask = np.flatnonzero((z > a) & ~same_start & ~first[a])
    del same_start
    repaired = 0
    if len(ask):
        below = _stab_max(a, z - 1, rank, p)[a[ask] - 1]
        has = below >= 0
        under = rank_order[below[has]]
        repaired = int((e[under] < e[ask[has]]).sum())
        del below, has, under
    del rank, rank_order, ask, point, a, z, e, idx

    lab_cls = np.where(lab >= 0, host.cls[np.maximum(lab, 0)], -1)
    kinds = np.select(
        [lab_cls == _H_OP, lab_cls == _H_RUNTIME, lab_cls == _H_SYNC, lab_cls == _H_USER],
        [_EK["cpu_op"], _EK["runtime"], _EK["sync_wait"], _EK["user_range"]],
        _EK["idle_gap"],
    ).astype(np.int8)
    base = b.count()
    b.edges(
        node0 + seg, node0 + seg + 1, _E_CHAIN, kinds, ref_host=lab,
        unexplained=lab_cls == _H_SYNC, thread=thread_tid[p_thr[seg]],
    )  # fmt: skip
    del kinds, p_thr
    # sync calls that are exactly one segment: their weight can be cut to the return
    sync_seg = np.flatnonzero(lab_cls == _H_SYNC)
    h = lab[sync_seg]
    at = node0 + seg[sync_seg].astype(np.int64)
    whole = (start_node[h] == at) & (end_node[h] == at + 1)
    for i, hh, x in zip(sync_seg[whole].tolist(), h[whole].tolist(), at[whole].tolist(),
                        strict=True):  # fmt: skip
        whole_sync[hh] = (base + i, x, x + 1)
    stats["repaired_nesting"] = stats.get("repaired_nesting", 0) + repaired
    last = np.concatenate([first[1:], [True]])
    return (
        node0 + np.flatnonzero(first),
        node0 + np.flatnonzero(last),
        start_node,
        end_node,
        whole_sync,
    )


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
    firsts_h, lasts_h, h_start, h_end, whole_sync = _host_chains(b, host, hidx, stats)

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
    sorder = _lexsort((gpu.end[gidx], gs, str_k, dev_k))
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
        # streams in (device, stream) order, each one's activities by end
        o = _lexsort((str_k, dev_k))
        new = np.concatenate([[True], (np.diff(dev_k[o]) != 0) | (np.diff(str_k[o]) != 0)])
        group = np.empty(len(gidx), dtype=np.int64)
        group[o] = np.cumsum(new) - 1
        o = _lexsort((gpu.end[gidx], group))
        bounds = np.flatnonzero(np.concatenate([[True], np.diff(group[o]) != 0, [True]]))
        for i, j in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            members = gidx[o[i:j]]
            stream_key[(int(dev_k[o[i]]), int(str_k[o[i]]))] = (members, gpu.end[members])
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

    def host_of(c: int) -> int:
        """The host call with correlation id ``c`` (the first), -1."""
        p = int(np.searchsorted(hc_vals, c))
        return int(hc_idx[p]) if p < len(hc_vals) and hc_vals[p] == c else -1

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
                    rec = host_of(wc) if wc != _NULL else -1
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
    sync_base = b.count()
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
        rec = host_of(wc)
        waiter_call = host_of(int(dev.corr[d]))
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
    b.edges(np.full(len(firsts_h), s_node), firsts_h, _E_REGION, _EK["idle_gap"])
    t_node = int(b.nodes(np.array([r1]), _R_T)[0])
    # GPU activities no edge explains start from S; every last instant ends at T
    b.edges(np.full(len(firsts), s_node), g_start[firsts], _E_REGION,
            _EK["unexplained_gpu_wait"], ref_gpu=firsts, unexplained=True)  # fmt: skip
    b.edges(lasts_h, np.full(len(lasts_h), t_node), _E_REGION, _EK["idle_gap"])
    b.edges(g_end[lasts], np.full(len(lasts), t_node), _E_REGION, _EK["idle_gap"])
    arr = b.arrays()

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
    del fifo_e
    t = arr.pop("t")
    rank = arr.pop("rank")
    u, v = arr.pop("u"), arr.pop("v")
    etype, ekind = arr.pop("etype").astype(np.int8), arr.pop("ekind").astype(np.int8)
    ref_host, ref_gpu = arr.pop("ref_host"), arr.pop("ref_gpu")
    unexplained = arr.pop("unexplained").astype(bool)
    thread = arr.pop("thread")

    # topological order: time, then rank at one instant; drop what still points backwards
    order = _lexsort((rank, t))
    pos = np.empty(len(t), dtype=np.int64)
    pos[order] = np.arange(len(t))
    fwd = pos[u] < pos[v]
    del pos
    stats["backward_dropped"] = int((~fwd).sum())
    # chain edges whose model weight is the sync call's return latency only: the call's own
    # segment shrinks to its return latency only if the edge from the GPU work it waited for
    # is kept
    cut = [
        (chain_e, lat)
        for chain_e, (lat, k) in w_override.items()
        if fwd[sync_base + k] and fwd[chain_e]
    ]
    cut_e = np.array([c for c, _ in cut], dtype=np.int64)
    cut_w = np.array([x for _, x in cut], dtype=np.int64)
    if not fwd.all():
        cut_e = (np.cumsum(fwd) - 1)[cut_e]
        keep = np.flatnonzero(fwd)
        u, v, etype, ekind = u[keep], v[keep], etype[keep], ekind[keep]
        thread, ref_host, ref_gpu = thread[keep], ref_host[keep], ref_gpu[keep]
        unexplained = unexplained[keep]
        del keep
    del fwd

    # GPU starts with no incoming edge left: from S, unexplained
    is_gstart = np.zeros(len(t), dtype=bool)
    is_gstart[g_start[gidx]] = True
    has_in = np.zeros(len(t), dtype=bool)
    has_in[v] = True
    orphan = np.flatnonzero(~has_in & is_gstart)
    if len(orphan):
        u = np.concatenate([u, np.full(len(orphan), s_node, dtype=_IDX)])
        v = np.concatenate([v, orphan.astype(_IDX)])
        etype = np.concatenate([etype, np.full(len(orphan), _E_REGION, dtype=np.int8)])
        ekind = np.concatenate(
            [ekind, np.full(len(orphan), _EK["unexplained_gpu_wait"], dtype=np.int8)]
        )
        ref_host = np.concatenate([ref_host, np.full(len(orphan), -1, dtype=_IDX)])
        thread = np.concatenate([thread, np.full(len(orphan), _NULL)])
        gpu_of_node = np.full(len(t), -1, dtype=np.int64)
        gpu_of_node[g_start[gidx]] = gidx
        ref_gpu = np.concatenate([ref_gpu, gpu_of_node[orphan].astype(_IDX)])
        unexplained = np.concatenate([unexplained, np.ones(len(orphan), dtype=bool)])
    stats["orphan_gpu_starts"] = len(orphan)

    # model weights: observed time for chain/exec/region/sync edges (cut sync chains), and
    # for edges into a GPU start, the observed latency of the binding one (the latest to
    # arrive), 0 for the others
    obs = t[v] - t[u]
    w = obs.copy()
    w[cut_e] = cut_w
    # the region ends when the last thing does: edges into T take no time of their own, so
    # a what-if that shortens the last activity moves the end
    w[v == t_node] = 0
    into_gpu = is_gstart[v] & (etype != _E_EXEC)
    gi = np.flatnonzero(into_gpu)
    if len(gi):
        o = np.lexsort((_PRIORITY[etype[gi]], t[u[gi]], v[gi]))
        gi_sorted = gi[o]
        vv = v[gi_sorted]
        last = np.concatenate([vv[1:] != vv[:-1], [True]])
        binding = np.zeros(len(u), dtype=bool)
        binding[gi_sorted[last]] = True
        w[into_gpu & ~binding] = 0
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
    g = _Graph(t, rank, u, v, etype, ekind, w, ref_host, ref_gpu, unexplained, thread, s_node,
               t_node, stats)  # fmt: skip
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
    waits = hidx[host.name.test(lambda s: "StreamWait" in (s or ""))[hidx]]
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
    act_of_end = np.full(len(arr["t"]), -1, dtype=np.int64)
    act_of_end[arr["v"][exec_e]] = arr["ref_gpu"][exec_e]
    prev = act_of_end[arr["u"][fifo_e]]
    lp = np.where(prev >= 0, launch_of[np.maximum(prev, 0)], -1)
    ln = launch_of[nxt]
    ok = (lp >= 0) & (ln >= 0)
    lo = np.searchsorted(w_start, host.start[np.maximum(lp, 0)], side="right")
    hi = np.searchsorted(w_start, host.start[np.maximum(ln, 0)], side="left")
    hit = np.flatnonzero(ok & (hi > lo))
    # a wait between the launches on the next one's stream, or on a stream no record names
    st = gpu.stream[nxt[hit]]
    lo, hi = lo[hit], hi[hit]
    mark = np.zeros(len(hit), dtype=bool)
    for x in np.unique(np.concatenate([st, [_NULL]])).tolist():
        count = np.concatenate([[0], np.cumsum(w_stream == x)])
        on = (st == x) if x != _NULL else np.ones(len(hit), dtype=bool)
        mark[on] |= count[hi[on]] > count[lo[on]]
    e = fifo_e[hit[mark]]
    arr["ekind"][e] = _EK["event_wait"]
    arr["unexplained"][e] = True
    stats["stream_waits_unlinked"] = len(e)


# -- longest paths ---------------------------------------------------------------------------

#: path edges handled at a time where each needs several temporary columns
_CHUNK = 1 << 20
#: float64 holds every integer below this exactly
_EXACT = 1 << 53
#: contracted graphs up to this many edges are solved in Python (cheaper than importing scipy)
_LOOP_MAX_RUNS = 100_000


def _forward_loop(g: _Graph, w: np.ndarray) -> np.ndarray:
    """Earliest time of every node: longest path from S with weights ``w`` (the plain
    dynamic programme over the edges in topological order; :class:`_LongestPaths` falls back
    to it)."""
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
    return np.asarray(est, dtype=np.int64)


def _backward_loop(g: _Graph, w: np.ndarray, end_time: int) -> np.ndarray:
    """Latest time of every node that keeps T at ``end_time`` (the plain programme)."""
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


class _LongestPaths:
    """Longest paths through the DAG, exact, in compiled code where the graph is large.

    * Series nodes (one edge in, one out: most host boundaries) are contracted: each run of
      edges through them becomes one edge carrying the run's summed weight, and a node inside
      a run gets its run's start plus the weights before it (its end minus those after it,
      backwards).
    * On the contracted graph, a small one (up to ``_LOOP_MAX_RUNS`` runs) is solved by the
      plain programme over its edges in topological order, in Python integers. A large one
      by scipy's Dijkstra: every model weight is at most the observed time of its edge and a
      what-if scales some by its factor, so with a whole number ``f`` at least the factor,
      the potential ``f * t`` makes every reduced cost ``f * (t[v] - t[u]) - w`` >= 0, and a
      path's summed reduced cost is ``f * (t[end] - t[start])`` minus its weight: the
      longest path is the shortest in reduced costs. Those are whole numbers of ns below
      2**53, exact in float64; where that does not hold (a weight out of range, a region
      longer than 2**53 / f ns), the plain programme runs instead.
    * A node that S does not reach, or that does not reach T, leaves it all to the plain
      programme over the whole graph (``_forward_loop``), whose values they keep.
    """

    def __init__(self, g: _Graph, loop_max_runs: int = _LOOP_MAX_RUNS) -> None:
        self.g = g
        self.loop_max_runs = loop_max_runs
        n, m = len(g.t), len(g.u)
        u, v = g.u, g.v
        self.one_in = np.bincount(v, minlength=n) == 1
        series = self.one_in & (np.bincount(u, minlength=n) == 1)
        series[[g.s, g.end_node]] = False
        ein = np.full(n, -1, dtype=np.int64)
        ein[v] = np.arange(m)  # the edge into a node with one
        prev = np.where(series[u], ein[u], -1)  # the edge before in its run
        del ein
        # each edge's run and place in it. A thread's chain edges are consecutive, so most of
        # a run is pieces of consecutive edges: pointer jumping (log2(pieces in a run)
        # rounds) links the pieces
        cont = np.zeros(m, dtype=bool)
        cont[1:] = prev[1:] == np.arange(m - 1)
        piece_at = np.flatnonzero(~cont)  # first edge of each piece
        piece = np.cumsum(~cont) - 1  # edge -> piece
        del cont
        before = prev[piece_at]  # the edge before a piece: the last of another piece
        root = np.where(before >= 0, piece[np.maximum(before, 0)], np.arange(len(piece_at)))
        size = np.diff(np.append(piece_at, m))
        offset = np.where(before >= 0, size[root], 0)  # edges of the run before the piece
        act = np.flatnonzero(before >= 0)
        while len(act):
            r = root[act]
            offset[act] += offset[r]
            root[act] = root[r]
            act = act[before[root[act]] >= 0]
        heads = piece_at[before < 0]
        run_of = np.full(len(piece_at), -1, dtype=np.int64)
        run_of[before < 0] = np.arange(len(heads))
        self.run = run_of[root][piece].astype(_IDX)  # edge -> run
        depth = offset[piece] + np.arange(m) - piece_at[piece]
        del prev, piece, before, offset, act
        self.run_len = np.bincount(self.run, minlength=len(heads))
        self.start = np.zeros(len(heads) + 1, dtype=np.int64)
        np.cumsum(self.run_len, out=self.start[1:])
        self.seq = np.empty(m, dtype=_IDX)  # the edges run by run, in order
        self.seq[self.start[self.run] + depth] = np.arange(m)
        del root, depth, run_of, piece_at
        self.head_u = u[heads]  # where each run starts and ends (kept nodes)
        self.tail_v = v[self.seq[self.start[1:] - 1]]
        self.kept = np.flatnonzero(~series)
        self.kid = np.full(n, -1, dtype=np.int64)
        self.kid[self.kept] = np.arange(len(self.kept))
        t = g.t
        self.span = int(t[g.end_node]) - int(t[g.s])
        self.in_region = (
            bool(m) and int(t.min()) >= int(t[g.s]) and int(t.max()) <= int(t[g.end_node])
        )
        self._csr: dict[bool, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._lists: dict[bool, tuple[np.ndarray, list[int], list[int]]] = {}

    def _longest(self, w: np.ndarray, f: int, forward: bool) -> np.ndarray | None:
        """The longest path from S to every kept node (forward), or from every kept node to
        T, with weights ``w`` (at most ``f`` times the observed times); None when a kept node
        is not reached."""
        if not len(self.g.u):
            return None
        ws = w[self.seq]
        total = np.add.reduceat(ws, self.start[:-1])
        if len(total) > self.loop_max_runs:
            best = self._dijkstra(total, f, forward)
            if best is not None:
                return best
        return self._loop(total, forward)

    def _loop(self, total: np.ndarray, forward: bool) -> np.ndarray | None:
        """The plain programme on the contracted graph, runs in topological order."""
        if forward not in self._lists:
            pos = np.empty(len(self.g.t), dtype=np.int64)
            pos[self.g.stats["_order"]] = np.arange(len(self.g.t))
            if forward:
                order = np.argsort(pos[self.tail_v], kind="stable")
                ends = (self.head_u[order], self.tail_v[order])
            else:
                order = np.argsort(-pos[self.head_u], kind="stable")
                ends = (self.tail_v[order], self.head_u[order])
            self._lists[forward] = (order, self.kid[ends[0]].tolist(), self.kid[ends[1]].tolist())
        order, src, dst = self._lists[forward]
        best: list[float] = [-math.inf] * len(self.kept)
        best[int(self.kid[self.g.s if forward else self.g.end_node])] = 0
        for i, j, x in zip(src, dst, total[order].tolist(), strict=True):
            y = best[i] + x
            if y > best[j]:
                best[j] = y
        if -math.inf in best:
            return None
        return np.array(best, dtype=np.int64)

    def _dijkstra(self, total: np.ndarray, f: int, forward: bool) -> np.ndarray | None:
        """Dijkstra on reduced costs (see the class); None where it would not be exact."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra

        g = self.g
        if not self.in_region or f * self.span >= _EXACT or (total < 0).any():
            return None
        t0 = g.t[g.s]
        cost = f * ((g.t[self.tail_v] - t0) - (g.t[self.head_u] - t0)) - total
        if (cost < 0).any():
            return None
        k = len(self.kept)
        if forward not in self._csr:
            # parallel runs between two nodes: one edge, the cheapest
            a, b = self.kid[self.head_u], self.kid[self.tail_v]
            if not forward:
                a, b = b, a
            pairs, pair = np.unique(a * k + b, return_inverse=True)
            indptr = np.searchsorted(pairs // k, np.arange(k + 1))
            self._csr[forward] = (pair.reshape(-1), indptr, pairs % k)
        pair, indptr, indices = self._csr[forward]
        data = np.full(len(indices), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(data, pair, cost)
        graph = csr_matrix((data.astype(np.float64), indices, indptr), shape=(k, k))
        d = dijkstra(graph, directed=True, indices=int(self.kid[g.s if forward else g.end_node]))
        if not np.isfinite(d).all():
            return None
        to_end = (g.t[self.kept] - t0) if forward else (g.t[g.end_node] - g.t[self.kept])
        return f * to_end - np.asarray(d, dtype=np.int64)  # type: ignore[no-any-return]

    def length(self, w: np.ndarray, f: int = 1) -> int:
        """The longest path from S to T with weights ``w`` (each at most ``f`` times the
        observed time of its edge)."""
        g = self.g
        best = self._longest(w, f, forward=True)
        if best is None:
            est = _forward_loop(g, w)
            return int(est[g.end_node] - est[g.s])
        return int(best[self.kid[g.end_node]])

    def forward(self, w: np.ndarray) -> np.ndarray:
        """Earliest time of every node: the longest path from S, from S's time."""
        g = self.g
        # the model's own weights reproduce the observed times when no edge takes longer than
        # observed and every node but S has an edge in that takes exactly its time (then, in
        # topological order, each node's earliest time is its time)
        arrive = g.t[g.u] + w
        if (arrive <= g.t[g.v]).all():
            tight = np.zeros(len(g.t), dtype=bool)
            tight[g.v[arrive == g.t[g.v]]] = True
            tight[g.s] = True
            if tight.all():
                return g.t
        del arrive
        best = self._longest(w, 1, forward=True)
        if best is None:
            return _forward_loop(g, w)
        est = np.empty(len(g.t), dtype=np.int64)
        est[self.kept] = g.t[g.s] + best
        # inside a run: the run's start plus the weights so far
        total = np.add.reduceat(w[self.seq], self.start[:-1])
        base = est[self.head_u] - (np.cumsum(total) - total)
        for sq, r, acc, _, at in self._runs(w):
            inside = at != self.start[r + 1] - 1
            est[g.v[sq[inside]]] = base[r[inside]] + acc[inside]
        return est

    def backward(self, w: np.ndarray, end_time: int) -> np.ndarray:
        """Latest time of every node that keeps T at ``end_time``."""
        g = self.g
        best = self._longest(w, 1, forward=False)
        if best is None:
            return _backward_loop(g, w, end_time)
        lst = np.empty(len(g.t), dtype=np.int64)
        lst[self.kept] = end_time - best
        # inside a run: the run's end minus the weights still to come
        total = np.add.reduceat(w[self.seq], self.start[:-1])
        base = lst[self.tail_v] - np.cumsum(total)
        for sq, r, acc, ws, at in self._runs(w):
            inside = at != self.start[r]
            lst[g.u[sq[inside]]] = base[r[inside]] + acc[inside] - ws[inside]
        return lst

    def _runs(
        self, w: np.ndarray | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """The edges run by run, a chunk at a time: (edges, their runs, weights summed from
        the first run on, their weights, their places in ``seq``)."""
        carry = 0
        for c0 in range(0, len(self.seq), _CHUNK):
            sq = self.seq[c0 : c0 + _CHUNK]
            ws = w[sq] if w is not None else np.zeros(0, dtype=np.int64)
            acc = np.cumsum(ws)
            acc += carry
            carry = int(acc[-1]) if len(acc) else carry
            yield sq, self.run[sq], acc, ws, np.arange(c0, c0 + len(sq))

    def path(self, pred: np.ndarray) -> np.ndarray:
        """The edges of the path that ``pred`` (each node's binding edge) leads back from T,
        in path order: walked run by run (inside a run a node has one edge in)."""
        g = self.g
        for sq, r, _, _, at in self._runs():
            inner = sq[at != self.start[r + 1] - 1]
            if not np.array_equal(pred[g.v[inner]], inner):
                return _walk(g, pred)
        into = pred[self.kept]
        up = np.where(into >= 0, self.head_u[self.run[np.maximum(into, 0)]], self.kept)
        chain = _ancestors(self.kid[up], int(self.kid[g.end_node]))
        chain = chain[: _stop_at(self.kept[chain], g.s)]
        runs = self.run[pred[self.kept[chain[:-1]]]][::-1]
        length = self.run_len[runs]
        at = np.repeat(self.start[runs] - np.concatenate([[0], np.cumsum(length)[:-1]]), length)
        return self.seq[at + np.arange(int(length.sum()))]  # type: ignore[no-any-return]


def _stop_at(nodes: np.ndarray, s: int) -> int:
    """How many of ``nodes`` the walk back from T takes: up to S, included."""
    hit = np.flatnonzero(nodes == s)
    return int(hit[0]) + 1 if len(hit) else len(nodes)


def _ancestors(parent: np.ndarray, start: int) -> np.ndarray:
    """``start``, its parent, the parent's parent ... up to the first root (a node that is
    its own parent), by doubling: log2(length) rounds over the whole array."""
    seq = np.array([start], dtype=np.int64)
    jump = parent
    while parent[seq[-1]] != seq[-1]:
        seq = np.concatenate([seq, jump[seq]])
        jump = jump[jump]
    return seq[: int(np.argmax(parent[seq] == seq)) + 1]


def _walk(g: _Graph, pred: np.ndarray) -> np.ndarray:
    """The path's edges by walking ``pred`` back from T one node at a time."""
    path_edges: list[int] = []
    node = g.end_node
    pred_l = pred.tolist()
    guard = len(g.t) + 1
    while node != g.s and guard:
        e = pred_l[node]
        if e < 0:
            break
        path_edges.append(e)
        node = int(g.u[e])
        guard -= 1
    path_edges.reverse()
    return np.asarray(path_edges, dtype=np.int64)


def _binding_pred(g: _Graph, est: np.ndarray, one_in: np.ndarray) -> np.ndarray:
    """For every node, the incoming edge that set its earliest time (ties: latest source,
    then the more causal edge type); -1 for S."""
    val = est[g.u] + g.w
    tight = val == est[g.v]
    pred = np.full(len(g.t), -1, dtype=np.int64)
    one = one_in[g.v]
    e1 = np.flatnonzero(tight & one)
    pred[g.v[e1]] = e1
    e = np.flatnonzero(tight & ~one)
    o = np.lexsort((_PRIORITY[g.etype[e]], g.t[g.u[e]], g.v[e]))
    es = e[o]
    vv = g.v[es]
    last = np.concatenate([vv[1:] != vv[:-1], [True]]) if len(vv) else np.zeros(0, dtype=bool)
    pred[vv[last]] = es[last]
    return pred


# -- public ----------------------------------------------------------------------------------


def _processes(host: _Host, gpu: _Gpu) -> list[int]:
    pids = set(_distinct(host.pid).tolist()) | set(_distinct(gpu.pid).tolist())
    pids.discard(_NULL)
    return sorted(int(p) for p in pids)


def _distinct(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x``, sorted (np.unique, by a plain sort)."""
    x = np.sort(x)
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x


def _assign_gpu_pids(host: _Host, gpu: _Gpu) -> None:
    """A GPU activity belongs to the process of the call that launched it."""
    has = host.corr != _NULL
    if not has.any() or not len(gpu.corr):
        return
    # only where the trace does not say (copies carry no process id): correlation ids repeat
    # across the processes of a merged multi-rank trace, so a candidate process must also
    # run GPU work on the activity's device, and an ambiguous one stays unknown
    known = gpu.pid != _NULL
    ask = np.flatnonzero(~known & (gpu.corr != _NULL))
    if not len(ask):
        return
    corr, pid = host.corr[has], host.pid[has]
    o = _lexsort((pid, corr))
    corr, pid = corr[o], pid[o]
    distinct = np.ones(len(corr), dtype=bool)
    distinct[1:] = (corr[1:] != corr[:-1]) | (pid[1:] != pid[:-1])
    corr, pid = corr[distinct], pid[distinct]  # the processes of each correlation id
    lo = np.searchsorted(corr, gpu.corr[ask], side="left")
    hi = np.searchsorted(corr, gpu.corr[ask], side="right")
    many = np.flatnonzero(hi - lo > 1)
    runs_on = set(zip(gpu.pid[known].tolist(), gpu.device[known].tolist(), strict=True))
    one = hi - lo == 1
    gpu.pid[ask[one]] = pid[lo[one]]
    for j in many.tolist():
        dev = int(gpu.device[ask[j]])
        cands = [p for p in pid[lo[j] : hi[j]].tolist() if (p, dev) in runs_on]
        if len(cands) == 1:
            gpu.pid[ask[j]] = cands[0]


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
    return _critical_paths(
        _host_events(tables), _gpu_events(tables), _dev_syncs(tables), what_if, process_id,
        window, top_operators, top_kernels,
    )  # fmt: skip


def _critical_paths(
    host: _Host,
    gpu: _Gpu,
    dev: _DevSync,
    what_if: Sequence[WhatIf],
    process_id: int | None,
    window: tuple[int, int] | None,
    top_operators: int,
    top_kernels: int,
) -> list[CriticalPath]:
    _assign_gpu_pids(host, gpu)
    pids = _processes(host, gpu)
    if len(pids) == 0 and len(gpu.start):
        pids = [-1]
    names = _name_space(host, gpu)
    op_of_ext: tuple[np.ndarray, np.ndarray] | None = None
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
        if op_of_ext is None:
            op_of_ext = _operator_names(host, names)
        cp = _analyse(g, host, gpu, names, op_of_ext, hidx, gidx, pid, region, what_if,
                      top_operators, top_kernels)  # fmt: skip
        out.append(cp)
    return out


def _inclusive_operator(g: _Graph, host: _Host, rx: re.Pattern[str]) -> np.ndarray:
    """Edges inside the operators whose name matches ``rx``, children included: host
    stretches of the same thread within a matching op's time span, and the GPU work whose
    launch call lies within one (``aten::linear`` takes its ``aten::addmm`` and the GEMM)."""
    out = np.zeros(len(g.u), dtype=bool)
    match = host.name.test(lambda s: bool(s) and rx.search(s or "") is not None)
    ops = np.flatnonzero((host.cls == _H_OP) & match)
    if not len(ops):
        return out
    # the matching ops' spans per thread, overlapping or touching ones merged
    o = np.lexsort((host.end[ops], host.start[ops], host.tid[ops]))
    tid, a, b = host.tid[ops][o], host.start[ops][o], host.end[ops][o]
    cut = np.flatnonzero(np.concatenate([[True], tid[1:] != tid[:-1], [True]]))
    merged: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, j in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
        merged[int(tid[i])] = _merge_spans(a[i:j], b[i:j])

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


def _merge_spans(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans sorted by (start, end) with the overlapping or touching ones merged."""
    if (b >= a).all():
        # a span starts a new group when it starts after every earlier end
        reach = np.maximum.accumulate(b)
        new = np.concatenate([[True], a[1:] > reach[:-1]])
        last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(a) - 1]])
        return a[new], reach[last]
    st: list[int] = []
    en: list[int] = []
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        if st and x <= en[-1]:
            en[-1] = max(en[-1], y)
        else:
            st.append(x)
            en.append(y)
    return np.asarray(st, dtype=np.int64), np.asarray(en, dtype=np.int64)


def _operator_names(host: _Host, names: _Names) -> tuple[np.ndarray, np.ndarray]:
    """External id -> the framework op that carries it (the innermost, shortest one; the
    first of equals): the ids, sorted, and the ops' name codes (null or empty: "?")."""
    ops = np.flatnonzero((host.cls == _H_OP) & (host.ext != _NULL))
    x = host.ext[ops]
    d = host.end[ops] - host.start[ops]
    o = _lexsort((d, x))
    x, ops = x[o], ops[o]
    first = np.concatenate([[True], x[1:] != x[:-1]]) if len(x) else np.zeros(0, dtype=bool)
    return x[first], names.or_unknown(names.of_host(host, ops[first]))


def _operator_codes(
    g: _Graph,
    host: _Host,
    gpu: _Gpu,
    names: _Names,
    op_of_ext: tuple[np.ndarray, np.ndarray],
    e: np.ndarray,
) -> np.ndarray:
    """The operator each edge's time counts for, as a name code: a host stretch's op (a
    runtime call's op by its external id), a GPU activity's launching op (else its own name);
    -1 for a wait with no recorded cause."""
    ext_ids, ext_names = op_of_ext

    def by_ext(x: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        p = np.minimum(np.searchsorted(ext_ids, x), max(len(ext_ids) - 1, 0))
        found = (x != _NULL) & (ext_ids[p] == x) if len(ext_ids) else np.zeros(len(x), bool)
        return np.where(found, _take(ext_names, np.where(found, p, -1), -1), fallback)

    out = np.full(len(e), -1, dtype=np.int64)
    h, gg = g.ref_host[e], g.ref_gpu[e]
    cause = ~((g.etype[e] == _E_REGION) & g.unexplained[e])
    hm = np.flatnonzero(cause & (h >= 0))
    out[hm] = names.of_host(host, h[hm])
    hm = hm[host.cls[h[hm]] != _H_OP]  # a call or a range counts for its op, by external id
    out[hm] = by_ext(host.ext[h[hm]], out[hm])
    gm = np.flatnonzero(cause & (h < 0) & (gg >= 0))
    ga = gg[gm]
    out[gm] = by_ext(gpu.ext[ga], names.of_gpu(gpu, ga))
    return out


class _Tally:
    """Amounts summed by code, in the order the codes are first seen: what a dict filled in
    order and sorted by ``-value`` gives (:meth:`ranked`), fed in chunks."""

    def __init__(self, size: int) -> None:
        self.total = np.zeros(size, dtype=np.int64)
        self.first = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)

    def add(self, codes: np.ndarray, amount: np.ndarray, at: np.ndarray) -> None:
        """``amount[i]`` for ``codes[i]``, seen at position ``at[i]``."""
        np.add.at(self.total, codes, amount)
        np.minimum.at(self.first, codes, at)

    def ranked(self) -> list[tuple[int, int]]:
        """(code, total) of every code seen, the most first (ties: the first seen)."""
        seen = np.flatnonzero(self.first < np.iinfo(np.int64).max)
        order = seen[np.lexsort((self.first[seen], -self.total[seen]))]
        return list(zip(order.tolist(), self.total[order].tolist(), strict=True))


def _ranked(codes: np.ndarray, amount: np.ndarray, size: int) -> list[tuple[int, int]]:
    """(code, summed amount) of every code present, the most first (ties: the first seen),
    as ``sorted(dict.items(), key=-value)`` over a dict filled in order."""
    tally = _Tally(size)
    tally.add(codes, amount, np.arange(len(codes)))
    return tally.ranked()


def _analyse(
    g: _Graph,
    host: _Host,
    gpu: _Gpu,
    names: _Names,
    op_of_ext: tuple[np.ndarray, np.ndarray],
    hidx: np.ndarray,
    gidx: np.ndarray,
    pid: int,
    region: tuple[int, int],
    what_if: Sequence[WhatIf],
    top_operators: int,
    top_kernels: int,
) -> CriticalPath:
    paths = _LongestPaths(g)
    est = paths.forward(g.w)
    length = int(est[g.end_node] - est[g.s])
    g.stats["model_reproduces_times"] = bool(np.array_equal(est, g.t))
    pred = _binding_pred(g, est, paths.one_in)
    pe = paths.path(pred)
    del pred
    dur = (est[g.v[pe]] - est[g.u[pe]]) if len(pe) else np.zeros(0, dtype=np.int64)
    edge_ns = np.zeros(len(_EDGE_KINDS), dtype=np.int64)
    np.add.at(edge_ns, g.ekind[pe], dur)
    by_edge = dict(zip(_EDGE_KINDS, edge_ns.tolist(), strict=True))
    by_cat = {c: 0 for c in CATEGORIES}
    for k, d in by_edge.items():
        by_cat[EDGE_CATEGORY[k]] += d
    unexplained = int(dur[g.unexplained[pe]].sum()) if len(pe) else 0

    # slack of every GPU activity's start
    lst = paths.backward(g.w, int(est[g.end_node]))
    kernels = _kernel_table(g, gpu, names, gidx, est, lst, pe, dur, top_kernels)
    del lst
    results = [_what_if(g, paths, host, gpu, wi, length) for wi in what_if]
    del paths

    segments, by_op, by_call = _segments(g, host, gpu, names, op_of_ext, pe, dur, est)
    _meanwhile(segments, host, names, hidx)
    stats = {k: v for k, v in g.stats.items() if not k.startswith("_")}
    stats["path_edges"] = len(pe)
    return CriticalPath(
        process_id=None if pid == -1 else pid,
        region_start_ns=region[0],
        region_end_ns=region[1],
        length_ns=length,
        by_category=by_cat,
        by_edge={k: v for k, v in by_edge.items() if v},
        by_operator=[(names.values[c], v) for c, v in by_op[:top_operators]],
        unexplained_wait_ns=unexplained,
        segments=segments,
        kernels=kernels,
        what_if=tuple(results),
        stats=stats,
        runtime_calls=[(names.values[c], v) for c, v in by_call[:8]],
    )


def _segments(
    g: _Graph,
    host: _Host,
    gpu: _Gpu,
    names: _Names,
    op_of_ext: tuple[np.ndarray, np.ndarray],
    pe: np.ndarray,
    dur: np.ndarray,
    est: np.ndarray,
) -> tuple[_Segments, list[tuple[int, int]], list[tuple[int, int]]]:
    """The path's segments (consecutive path edges of one kind and one event, zero-length
    ones left out), and path time by operator and by runtime call name (codes, the most
    first)."""
    e = pe[dur != 0]
    d = dur[dur != 0]
    kind, h, gg = g.ekind[e], g.ref_host[e], g.ref_gpu[e]
    n = len(e)
    s0 = est[g.u[e]]
    # a segment starts where the kind or the event changes (or, never on a path, at a gap)
    new = np.ones(n, dtype=bool)
    new[1:] = (
        (kind[1:] != kind[:-1])
        | (h[1:] != h[:-1])
        | (gg[1:] != gg[:-1])
        | (s0[1:] != s0[:-1] + d[:-1])
    )
    first = np.flatnonzero(new)
    del new
    last = np.concatenate([first[1:] - 1, [n - 1]]) if n else first
    start, end = s0[first], s0[last] + d[last]
    del s0, last
    size = len(names.values)
    by_op = _Tally(size)
    m = len(first)
    name, op = np.empty(m, dtype=np.int32), np.empty(m, dtype=np.int32)
    where, where_id = np.empty(m, dtype=np.int8), np.empty(m, dtype=np.int64)
    for c0 in range(0, n, _CHUNK):  # the edges a chunk at a time: millions on a long path
        c1 = min(c0 + _CHUNK, n)
        code = _operator_codes(g, host, gpu, names, op_of_ext, e[c0:c1])
        at = np.flatnonzero(code >= 0)
        by_op.add(code[at], d[c0:c1][at], at + c0)
        f0, f1 = np.searchsorted(first, [c0, c1]).tolist()
        fi = first[f0:f1]
        op[f0:f1] = code[fi - c0]
        hf, gf, thread = h[fi], gg[fi], g.thread[e[fi]]
        name[f0:f1] = np.where(hf >= 0, names.of_host(host, hf), names.of_gpu(gpu, gf))
        tid = _take(host.tid, hf, _NULL)
        places = [(hf >= 0) & (tid != _NULL), hf >= 0, gf >= 0, thread != _NULL]
        where[f0:f1] = np.select(places, [_W_THREAD, _W_HOST, _W_STREAM, _W_THREAD], _W_REGION)
        where_id[f0:f1] = np.select(places, [tid, 0, gf, thread], 0)
    call = np.flatnonzero((kind == _EK["runtime"]) & (h >= 0))
    by_call = _ranked(names.or_unknown(names.of_host(host, h[call])), d[call], size)
    segments = _Segments(
        start=start, end=end, kind=kind[first], name=name, op=op, where=where,
        where_id=where_id, unexplained=g.unexplained[e[first]], strings=names.values, gpu=gpu,
    )  # fmt: skip
    return segments, by_op.ranked(), by_call


#: host idle stretches on the path at least this long get the busiest other thread as evidence
MEANWHILE_MIN_NS = 50_000
_MEANWHILE_MAX = 50


def _meanwhile(segments: _Segments, host: _Host, names: _Names, hidx: np.ndarray) -> None:
    """Name, for the longest idle stretches of a host thread on the path, the other thread of
    the process that was busiest meanwhile (a training step's main thread idles while the
    autograd thread works): evidence for the reader, not a dependency of the model."""
    dur = segments.end - segments.start
    idle = np.flatnonzero(
        (segments.kind == _EK["idle_gap"]) & (segments.where == _W_THREAD)
        & (dur >= MEANWHILE_MIN_NS)
    )  # fmt: skip
    if not len(idle) or not len(hidx):
        return
    idle = idle[np.argsort(-dur[idle], kind="stable")][:_MEANWHILE_MAX]
    tids = host.tid[hidx]
    starts, ends = host.start[hidx], np.maximum(host.end[hidx], host.start[hidx])
    # by start, with the latest end so far: the events that overlap [s, e) lie between the
    # first whose end-so-far passes s and the first that starts at e
    by_start = np.argsort(starts, kind="stable")
    first_start = starts[by_start]
    reach = np.maximum.accumulate(ends[by_start])
    for i in idle.tolist():
        s, e, me = int(segments.start[i]), int(segments.end[i]), int(segments.where_id[i])
        lo = int(np.searchsorted(reach, s, side="right"))
        hi = int(np.searchsorted(first_start, e, side="left"))
        near = np.sort(by_start[lo:hi])
        c_start, c_end, c_tid = starts[near], ends[near], tids[near]
        over = (c_start < e) & (c_end > s) & (c_tid != me)
        if not over.any():
            continue
        best: tuple[int, int, str] | None = None
        for tid in np.unique(c_tid[over]).tolist():
            sel = np.flatnonzero(over & (c_tid == tid))
            a = np.maximum(c_start[sel], s)
            b = np.minimum(c_end[sel], e)
            o = np.argsort(a, kind="stable")
            busy, reach_t = 0, s
            for x, y in zip(a[o].tolist(), b[o].tolist(), strict=True):
                if y > reach_t:
                    busy += y - max(x, reach_t)
                    reach_t = y
            longest = near[sel[int(np.argmax(b - a))]]
            if best is None or busy > best[0]:
                best = (busy, int(tid), host.name[int(hidx[longest])] or "?")
        if best is not None and best[0] > 0:
            pct = 100.0 * best[0] / (e - s)
            segments.meanwhile[i] = f"thread {best[1]} busy {pct:.0f}%: {best[2]}"


def _fmt(x: Any) -> str:
    return "?" if int(x) == _NULL else str(int(x))


def _kernel_table(
    g: _Graph,
    gpu: _Gpu,
    names: _Names,
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
    size = len(names.values)
    code = names.or_unknown(names.of_gpu(gpu, gidx))
    count = np.bincount(code, minlength=size)
    total = np.zeros(size, dtype=np.int64)
    np.add.at(total, code, gpu.end[gidx] - gpu.start[gidx])
    appear = np.full(size, len(gidx), dtype=np.int64)  # names in the order they appear
    np.minimum.at(appear, code, np.arange(len(gidx)))
    is_exec = g.etype[pe] == _E_EXEC
    on_path = np.zeros(size, dtype=np.int64)
    np.add.at(on_path, names.or_unknown(names.of_gpu(gpu, g.ref_gpu[pe[is_exec]])), dur[is_exec])
    named = np.flatnonzero(appear < len(gidx))
    order = named[np.lexsort((appear[named], -total[named], -on_path[named]))][:top]
    has = nodes[gidx] >= 0
    slack_code = code[has]
    slack = lst[nodes[gidx][has]] - est[nodes[gidx][has]]
    rows = []
    for c in order.tolist():
        sl = slack[slack_code == c]
        rows.append(
            {
                "name": names.values[c],
                "count": int(count[c]),
                "total_ns": int(total[c]),
                "on_path_ns": int(on_path[c]),
                "min_slack_ns": int(sl.min()) if len(sl) else None,
                "median_slack_ns": int(np.median(sl)) if len(sl) else None,
            }
        )
    return rows


def _what_if(
    g: _Graph, paths: _LongestPaths, host: _Host, gpu: _Gpu, wi: WhatIf, length: int
) -> WhatIfResult:
    of_kind = np.zeros(len(_EDGE_KINDS), dtype=bool)
    of_kind[[_EK[k] for k in wi.edge_kinds()]] = True
    sel = of_kind[g.ekind]
    if wi.pattern is not None:
        rx = re.compile(wi.pattern, re.IGNORECASE)
        if wi.target in _BY_OPERATOR:
            sel = _inclusive_operator(g, host, rx) & sel
        else:

            def hit(x: str | None) -> bool:
                return x is not None and rx.search(x) is not None

            # a host stretch matches by its event's name; a kernel by its name, full name or
            # family (gemm, ...)
            host_hit = host.name.test(hit)
            gpu_hit = gpu.name.test(hit) | gpu.full.test(hit) | gpu.family.test(hit)
            h, gg = g.ref_host, g.ref_gpu
            match = np.zeros(len(g.u), dtype=bool)
            on_host = np.flatnonzero(sel & (h >= 0))
            match[on_host] = host_hit[h[on_host]]
            on_gpu = np.flatnonzero(sel & (h < 0) & (gg >= 0))
            match[on_gpu] = gpu_hit[gg[on_gpu]]
            sel = match
    w2 = g.w.copy()
    w2[sel] = np.round(g.w[sel] * wi.factor).astype(np.int64)
    # the same weights: the same length, no need to re-time
    new_len = length if np.array_equal(w2, g.w) else paths.length(w2, max(1, math.ceil(wi.factor)))
    matched_ns = int(g.w[sel].sum())
    # events matched: distinct GPU activities, distinct host events, and edges with neither
    hits = np.zeros(len(host.start) + len(gpu.start) + 1, dtype=bool)
    gg, h = g.ref_gpu[sel], g.ref_host[sel]
    hits[np.where(gg >= 0, gg, np.where(h >= 0, len(gpu.start) + h, len(hits) - 1))] = True
    n_match = int(hits.sum())
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
    return _auto_what_ifs(_gpu_events(tables), top)


def _auto_what_ifs(gpu: _Gpu, top: int) -> list[WhatIf]:
    out = [parse_what_if(t) for t in DEFAULT_WHAT_IFS]
    if len(gpu.start):
        code, values = gpu.name.code, gpu.name.values
        named = np.flatnonzero(gpu.name.test(bool))  # not null, not empty
        ranked = _ranked(code[named], (gpu.end - gpu.start)[named], len(values))
        copies = np.zeros(len(values) + 1, dtype=bool)
        copies[code[gpu.is_copy] + 1] = True
        for c, _ in ranked[:top]:
            nm = values[c]
            target = "copy" if copies[c + 1] else "kernel"
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
    is_step = _names(ann, "kind", n).test(lambda k: k == "step")
    num = _col(ann, "step", n)
    start = _col(ann, "start_ns", n)
    end = start + _col(ann, "dur_ns", n)
    pid = _col(ann, "process_id", n)
    # a step overlapping the region counts (the region starts at the step's first event,
    # after the step's own start); one count per step number
    hit = is_step & (start < cp.region_end_ns) & (end > cp.region_start_ns)
    if cp.process_id is not None:
        hit &= (pid == _NULL) | (pid == cp.process_id)
    k = len(np.unique(np.where(num[hit] != _NULL, num[hit], start[hit])))
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
    gpu = _gpu_events(tables)
    wis = list(what_if) + (_auto_what_ifs(gpu, 3) if auto else [])
    window = step_window(tables, step) if step is not None else None
    paths = _critical_paths(_host_events(tables), gpu, _dev_syncs(tables), wis, None, window,
                            15, 30)  # fmt: skip
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
