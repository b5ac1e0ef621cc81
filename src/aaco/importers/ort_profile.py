"""Read an ONNX Runtime profile (`enable_profiling`) into OPS, ORT_RUNS, KERNELS and MEMCPY.

The profile is a JSON array of Chrome-trace ``X`` events with ``ts``/``dur`` in microseconds
from the start of profiling. ``cat:"Session"`` events named ``model_run`` bracket each
``InferenceSession.run``; ``cat:"Node"`` events named ``<node>_kernel_time`` time one operator.
ORT writes ``model_run`` *after* the node events it encloses, so nodes are assigned to runs by
time, not by file order.

Speed: ORT writes one event per line in a fixed layout, so the events are read without
decoding their ``args`` (mostly ``thread_scheduling_stats`` and memory counters nobody reads
here). Blocks of 2 MiB of such lines are read all at once by vector operations over the
bytes (:func:`_scan`: the positions of the quotes give every string, the header is checked
byte for byte, the wanted keys of ``args`` are found among the strings followed by ``" :``,
and each field is an Arrow slice of the block); where two CPUs are free the next block is
scanned in a thread meanwhile (numpy and Arrow release the GIL). A block the scanner cannot
vouch for (a line in another layout, a backslash, a Kernel event, a key twice ...) is read
line by line, each line with a regular expression and a few ``str.find`` calls, exactly as
the scanner would have read it had it vouched; node columns are kept per block as Arrow
and numpy arrays, and the tables are built with vector operations too.
``cat:"Kernel"`` events come from builds with GPU profiling (CUDA EP built with
``--enable_cuda_profiling``: CUPTI; ROCm EP: roctracer). ORT's GPU profiler writes each one
right after the ``_kernel_time`` event of the node that launched it (matched by ORT's external
correlation id, which is that node's start time), copies the node's ``op_name`` into it and
rewrites its ``ts`` to the node's ``ts`` plus 1, 2, ... microseconds, so only ``dur`` is GPU
time. Kernel rows therefore get ``time_is_gpu`` false, ``start_ns`` = the start of their parent
node and ``thread_id`` = the node's thread: ``(iteration, thread_id, start_ns)`` names the
parent node in OPS, which is how :mod:`aaco.analysis.attribution` ties them (method
``parent_node``). The parent is the node named by ``parent_name`` when the event has that arg,
else the node event just before it in the file when its ``op_name`` agrees.
Copies (CUDA: ``MemcpyHostToDevice`` ...; ROCm: ``hipMemcpyAsync`` ... with ``src, dst, kind``)
go to MEMCPY. CUDA streams are CUPTI stream ids; ROCm streams are ``hipStream_t`` pointers
(``"0x..."``), kept as their integer value. ROCm grid sizes are null: ORT writes blocks for
``hipLaunchKernel`` but work-items for ``hipExtModuleLaunchKernel`` and the event does not say
which launch it was.

A line the line reader does not recognise is decoded as JSON, and a file not laid out one
event per line is decoded one event at a time from 1 MiB chunks, so memory stays bounded by
the columns kept (and at most three blocks), never by the size of the JSON text.

Example::

    prof = parse_ort_profile(Path("onnxruntime_profile.json"), skip_runs=1)
    prof.ops.group_by("op_type").aggregate([("dur_ns", "sum")])
    prof.kernels.num_rows  # GPU kernels (CUDA/ROCm EP builds with GPU profiling)
"""

from __future__ import annotations

import bisect
import gzip
import io
import json
import math
import os
import re
import zlib
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.errors import InputError
from aaco.importers._lenient import note_dropped, note_null
from aaco.session.schema import KERNELS, MEMCPY, OPS, ORT_RUNS

__all__ = ["SOURCE", "OrtProfile", "parse_ort_profile"]

SOURCE = "onnxruntime"

_KERNEL_SUFFIX = "_kernel_time"
_SESSION_EVENTS = ("model_loading_uri", "model_loading_array", "session_initialization")
_CHUNK_CHARS = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_EXPECTED = "expected an ONNX Runtime profile (a JSON array of {ph, ts, name, ...} events)"

# ORT's profiler writes every event as
#   {"cat" : "Node","pid" :1,"tid" :1,"dur" :430,"ts" :15185,"ph" : "X","name" :"n","args" : {..}}
# (profiler.cc), with the args it formats itself as `"key" : value` and the embedded
# thread-pool statistics as `"key": value`, so the spaced form only finds top-level args.
_HEAD = re.compile(
    r'\{"cat" : "([^"\\]*)","pid" :-?\d+,"tid" :(-?\d+),"dur" :([\d.eE+-]+),'
    r'"ts" :([\d.eE+-]+),"ph" : "([^"\\]*)","name" :"([^"\\]*)","args" : \{'
)
_SHAPE = re.compile(r"\[(?:\{[^{}]*\}(?:,\{[^{}]*\})*)?\]")
_STR_ARGS = (
    "op_name",
    "provider",
    "node_index",
    "activation_size",
    "parameter_size",
    "output_size",
)
_STR_KEYS = tuple((key, len(key)) for key in (f'"{k}" : "' for k in _STR_ARGS))
_OP_NAME_KEY = _STR_KEYS[0][0]
# Args of cat:"Kernel" events (gpu_profiler_common / cupti / roctracer managers), all text.
_KERNEL_ARGS = (
    "op_name",
    "parent_name",
    "stream",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "src",
    "dst",
    "kind",
    "size",
)
_K_OP, _K_PARENT, _K_STREAM = 0, 1, 2
_K_DIMS = slice(3, 9)
_K_SRC, _K_DST, _K_KIND, _K_SIZE = 9, 10, 11, 12
_KERNEL_KEYS = tuple((f'"{k}" : "', len(f'"{k}" : "')) for k in _KERNEL_ARGS)
# CUPTI copy kinds as ORT's CUDA profiler names the events (GetMemcpyKindString).
_CUDA_COPY_KINDS = {
    "MemcpyHostToDevice": "HtoD",
    "MemcpyDeviceToHost": "DtoH",
    "MemcpyHostToDeviceArray": "HtoD",
    "MemcpyDeviceArrayToHost": "DtoH",
    "MemcpyDeviceArrayToDeviceArray": "DtoD",
    "MemcpyDeviceArrayToDevice": "DtoD",
    "MemcpyDeviceToDeviceArray": "DtoD",
    "MemcpyDeviceToDevice": "DtoD",
    "MemcpyHostToHost": "HtoH",
}
# hipMemcpyKind as ORT's roctracer manager writes it in the `kind` arg.
_HIP_COPY_KINDS = {"H2D": "HtoD", "D2H": "DtoH", "D2D": "DtoD", "H2H": "HtoH"}
_IN_SHAPE_KEY = '"input_type_shape" : '
_OUT_SHAPE_KEY = '"output_type_shape" : '


@dataclass(frozen=True)
class OrtProfile:
    """What one ORT profile holds, as bundle tables.

    ``ops``: OPS rows for every node kernel inside a kept ``model_run``, sorted by iteration
    then start. ``runs``: ORT_RUNS rows, one per kept ``model_run``. ``session_events``:
    durations in ns of ``model_loading_uri`` and ``session_initialization`` when the profile
    has them. ``run_count_total``: ``model_run`` events in the file, skipped ones included.
    ``kernels`` / ``memcpy``: KERNELS / MEMCPY rows of the ``cat:"Kernel"`` events inside a
    kept run (empty for CPU-only builds); see the module docstring for their times.
    """

    ops: pa.Table
    runs: pa.Table
    session_events: dict[str, int] = field(default_factory=dict)
    run_count_total: int = 0
    kernels: pa.Table = field(default_factory=KERNELS.empty)
    memcpy: pa.Table = field(default_factory=MEMCPY.empty)


def parse_ort_profile(
    path: Path,
    skip_runs: int = 0,
    original_map: Mapping[str, list[str] | None] | None = None,
) -> OrtProfile:
    """Parse the ORT profile at ``path``.

    ``skip_runs`` drops the first runs (profiling warm-up); ``iteration`` counts from 0 after
    them. Node events outside every ``model_run`` (or in a skipped one) are dropped.
    ``original_map`` (optimized node name -> original node names, see
    :func:`aaco.analysis.graph.map_optimized_to_original`) fills ``original_nodes``; a node
    it does not name gets null.

    Raises :class:`InputError` when the file is missing, not JSON, not an ORT profile or
    truncated (ORT writes the closing ``]`` only in ``end_profiling``).
    """
    return _parse(Path(path), skip_runs, original_map)


def _parse(
    path: Path,
    skip_runs: int = 0,
    original_map: Mapping[str, list[str] | None] | None = None,
    *,
    scan: bool = True,
    block_bytes: int = 0,
    workers: int = 0,
) -> OrtProfile:
    """:func:`parse_ort_profile`, with the reader's knobs: ``scan`` False reads every line
    one at a time (the reference the block scanner is tested against), ``block_bytes``
    and ``workers`` (0: the defaults) size the blocks and the scanning threads."""
    if skip_runs < 0:
        raise ValueError(f"skip_runs must be >= 0, got {skip_runs}")
    cols = _read(path, scan, block_bytes or _BLOCK_BYTES, workers or _scan_workers())
    if cols.dropped and not (
        cols.node_count or cols.k_names or cols.run_spans or cols.session_events
    ):
        raise InputError(f"{path}: no usable event ({cols.dropped} unusable), {_EXPECTED}")
    return cols.build(skip_runs, original_map or {})


@dataclass(frozen=True)
class _Piece:
    """The columns of consecutive node events (``_kernel_time``), in file order."""

    names: pa.Array  # node names, the ORT suffix taken off
    starts: np.ndarray  # int64 ns
    durs: np.ndarray  # int64 ns
    tids: pa.Array  # int64, null when the event had none
    # op_name, provider, node_index, activation_size, parameter_size, output_size, as text
    str_args: tuple[pa.Array, ...]
    in_shapes: pa.Array
    out_shapes: pa.Array

    def __len__(self) -> int:
        return len(self.starts)


class _Columns:
    """Node columns in pieces; session and kernel events in lists.

    Blocks of lines in ORT's own layout arrive as whole pieces (:func:`_scan`); events read
    one at a time (any other line, any other layout) are appended to the lists below and
    moved into a piece before the next block's. Ints of args stay text until one vector
    cast.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pieces: list[_Piece] = []
        self._piece_rows = 0
        # node events read one at a time since the last piece
        self.names: list[str] = []
        self.starts: list[int] = []
        self.durs: list[int] = []
        self.tids: list[int | None] = []
        # op_name, provider, node_index, activation_size, parameter_size, output_size
        self.str_args: tuple[list[str | None], ...] = tuple([] for _ in _STR_ARGS)
        self._fast_keys = tuple(
            (key, n, col) for (key, n), col in zip(_STR_KEYS, self.str_args, strict=True)
        )
        self.in_shapes: list[str | None] = []
        self.out_shapes: list[str | None] = []
        self.run_spans: list[tuple[int, int]] = []
        self.session_events: dict[str, int] = {}
        # cat:"Kernel" events: name, ORT ts/dur (ns), parent node (index among all node
        # events, -1 when unknown) and the text args of _KERNEL_ARGS.
        self.k_names: list[str] = []
        self.k_starts: list[int] = []
        self.k_durs: list[int] = []
        self.k_parent: list[int] = []
        self.k_args: tuple[list[str | None], ...] = tuple([] for _ in _KERNEL_ARGS)
        # node name -> index of its latest event, filled on demand (only Kernel events ask)
        self._node_by_name: dict[str, int] = {}
        self._named = 0
        # shape texts already checked against _SHAPE
        self.good_shapes: set[str] = set()
        # events left out as unusable; a file of nothing else is not an ORT profile
        self.dropped = 0

    @property
    def node_count(self) -> int:
        return self._piece_rows + len(self.starts)

    def line(self, line: str) -> bool:
        """Take one event line in ORT's own layout; False when the line is not in it."""
        m = _HEAD.match(line)
        if m is None:
            return False
        cat, tid, dur, ts, _ph, name = m.groups()
        if cat == "Node":
            if not name.endswith(_KERNEL_SUFFIX):
                return True  # _fence_before / _fence_after carry no kernel time
            # Hot loop (once per kernel event): inlined on purpose.
            start = m.end()
            find = line.find
            # Every kernel event has op_name; without it the args are not laid out as
            # expected and the line is left to the JSON decoder.
            if find(_OP_NAME_KEY, start) < 0:
                return False
            try:
                start_ns = int(ts) * 1000 if ts.isdigit() else _text_us_to_ns(ts)
                dur_ns = int(dur) * 1000 if dur.isdigit() else _text_us_to_ns(dur)
            except (ValueError, OverflowError):
                return False  # e.g. "1e999": the JSON path drops and counts it
            thread = int(tid)
            if not (_in_int64(start_ns) and _in_int64(dur_ns) and _in_int64(thread)):
                return False  # beyond int64: the JSON path drops (or nulls) and counts it
            self._node_seen(name[: -len(_KERNEL_SUFFIX)])
            self.starts.append(start_ns)
            self.durs.append(dur_ns)
            self.tids.append(thread)
            for key, n, col in self._fast_keys:
                i = find(key, start)
                col.append(line[i + n : find('"', i + n)] if i >= 0 else None)
            i = find(_IN_SHAPE_KEY, start)
            sm = _SHAPE.match(line, i + len(_IN_SHAPE_KEY)) if i >= 0 else None
            self.in_shapes.append(sm.group() if sm else _find_shape(line, _IN_SHAPE_KEY, start))
            i = find(_OUT_SHAPE_KEY, start)
            sm = _SHAPE.match(line, i + len(_OUT_SHAPE_KEY)) if i >= 0 else None
            self.out_shapes.append(sm.group() if sm else _find_shape(line, _OUT_SHAPE_KEY, start))
        elif cat == "Session":
            try:
                self._session(name, _text_us_to_ns(ts), _text_us_to_ns(dur))
            except (ValueError, OverflowError):
                return False
        elif cat == "Kernel":
            try:
                k_ts, k_dur = _text_us_to_ns(ts), _text_us_to_ns(dur)
            except (ValueError, OverflowError):
                return False
            if not (_in_int64(k_ts) and _in_int64(k_dur)):
                return False
            start = m.end()
            find = line.find
            values: list[str | None] = []
            for key, n in _KERNEL_KEYS:
                i = find(key, start)
                values.append(line[i + n : find('"', i + n)] if i >= 0 else None)
            self._kernel(name, k_ts, k_dur, values)
        return True

    def event(self, ev: Any, number: int) -> None:
        """Take one decoded event."""
        if not isinstance(ev, dict) or "ph" not in ev or "ts" not in ev or "name" not in ev:
            note_dropped("event: not an object with ph, ts and name")
            self.dropped += 1
            return
        cat = ev.get("cat")
        name = ev["name"]
        if not isinstance(name, str) or cat not in ("Node", "Session", "Kernel"):
            return
        if cat == "Node" and not name.endswith(_KERNEL_SUFFIX):
            return
        ts = self._us_to_ns(ev["ts"])
        dur = self._us_to_ns(ev.get("dur", 0))
        if ts is None or dur is None or dur < 0:
            # an event that cannot be placed in time is left out, and counted
            note_dropped(f"{cat} event: ts/dur missing, negative or not a number")
            self.dropped += 1
            return
        if cat == "Node":
            args = ev.get("args")
            if not isinstance(args, dict):
                args = {}
            self._node_seen(name[: -len(_KERNEL_SUFFIX)])
            self.starts.append(ts)
            self.durs.append(dur)
            tid = ev.get("tid")
            if isinstance(tid, int) and not isinstance(tid, bool) and not _in_int64(tid):
                note_null("tid")
                tid = None
            self.tids.append(tid if isinstance(tid, int) and not isinstance(tid, bool) else None)
            for key, col in zip(_STR_ARGS, self.str_args, strict=True):
                value = args.get(key)
                col.append(None if value is None else str(value))
            self.in_shapes.append(_shape_text(args.get("input_type_shape")))
            self.out_shapes.append(_shape_text(args.get("output_type_shape")))
        elif cat == "Session":
            self._session(name, ts, dur)
        else:
            args = ev.get("args")
            if not isinstance(args, dict):
                args = {}
            values = [_arg_text(args.get(key)) for key in _KERNEL_ARGS]
            self._kernel(name, ts, dur, values)
        # anything else (fences, other builds' categories): not read

    def fast(self, block: _Block) -> None:
        """Take the events of a block read by :func:`_scan`."""
        if len(block.piece):
            self._flush()
            self.pieces.append(block.piece)
            self._piece_rows += len(block.piece)
        self.run_spans.extend(zip(block.run_starts.tolist(), block.run_durs.tolist(), strict=True))
        for name, dur in block.sessions:
            self._session(name, 0, dur)

    def _flush(self) -> None:
        """Move the node events read one at a time into a piece."""
        if not self.starts:
            return
        piece = _Piece(
            names=pa.array(self.names, type=pa.string()),
            starts=np.array(self.starts, dtype=np.int64),
            durs=np.array(self.durs, dtype=np.int64),
            tids=pa.array(self.tids, type=pa.int64()),
            str_args=tuple(pa.array(c, type=pa.string()) for c in self.str_args),
            in_shapes=pa.array(self.in_shapes, type=pa.string()),
            out_shapes=pa.array(self.out_shapes, type=pa.string()),
        )
        self.pieces.append(piece)
        self._piece_rows += len(piece)
        self.names.clear()
        self.starts.clear()
        self.durs.clear()
        self.tids.clear()
        self.in_shapes.clear()
        self.out_shapes.clear()
        for col in self.str_args:
            col.clear()

    def _node_seen(self, name: str) -> None:
        """Record a node's name (its index: the node count before it)."""
        self.names.append(name)

    def _last_op_name(self) -> str | None:
        """op_name of the latest node event (None when there is none or it had none)."""
        if self.starts:
            return self.str_args[0][-1]
        if self.pieces:
            value: str | None = self.pieces[-1].str_args[0][-1].as_py()
            return value
        return None

    def _name_index(self) -> dict[str, int]:
        """Node name -> index of its latest event so far."""
        total = self.node_count
        if self._named < total:
            base = 0
            for piece in self.pieces:
                end = base + len(piece)
                if end > self._named:
                    names = piece.names.slice(self._named - base).to_pylist()
                    self._node_by_name.update(zip(names, range(self._named, end), strict=True))
                    self._named = end
                base = end
            start = self._named - self._piece_rows
            self._node_by_name.update(
                zip(self.names[start:], range(self._named, total), strict=True)
            )
            self._named = total
        return self._node_by_name

    def _kernel(self, name: str, ts: int, dur: int, values: list[str | None]) -> None:
        """Take one cat:"Kernel" event and resolve its parent node."""
        op_name = values[_K_OP]
        parent_name = values[_K_PARENT]
        parent = -1
        if parent_name:
            if parent_name.endswith(_KERNEL_SUFFIX):
                parent_name = parent_name[: -len(_KERNEL_SUFFIX)]
            parent = self._name_index().get(parent_name, -1)
        elif op_name and self.node_count and self._last_op_name() == op_name:
            # ORT writes a kernel right after its node's event and copies the node's op_name
            # into it; an empty op_name means ORT found no node for it.
            parent = self.node_count - 1
        self.k_names.append(name)
        self.k_starts.append(ts)
        self.k_durs.append(dur)
        self.k_parent.append(parent)
        for col, value in zip(self.k_args, values, strict=True):
            col.append(value)

    def _session(self, name: str, ts: int, dur: int) -> None:
        if name == "model_run":
            self.run_spans.append((ts, dur))
        elif name in _SESSION_EVENTS and name not in self.session_events:
            self.session_events[name] = dur

    def _us_to_ns(self, value: Any) -> int | None:
        """Microseconds (int, float or numeric text) to integer ns, rounded to nearest; None
        when the value is not a number or beyond int64 ns."""
        out: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            out = value * 1000
        elif isinstance(value, float) and math.isfinite(value) and abs(value) < 9.2e15:
            out = round(value * 1000.0)  # (1e306 us would overflow to inf: found by fuzzing)
        elif isinstance(value, str):
            try:
                out = _text_us_to_ns(value)
            except (ValueError, OverflowError):
                return None
        return out if out is not None and abs(out) < (1 << 63) else None

    def _nodes(self) -> _Piece:
        """Every node event as one piece of chunked columns."""
        self._flush()
        pieces = self.pieces

        def chunked(get: Any, typ: pa.DataType) -> pa.ChunkedArray:
            return pa.chunked_array([get(p) for p in pieces], type=typ)

        return _Piece(
            names=chunked(lambda p: p.names, pa.string()),
            starts=_concat([p.starts for p in pieces]),
            durs=_concat([p.durs for p in pieces]),
            tids=chunked(lambda p: p.tids, pa.int64()),
            str_args=tuple(
                chunked(lambda p, i=i: p.str_args[i], pa.string()) for i in range(len(_STR_ARGS))
            ),
            in_shapes=chunked(lambda p: p.in_shapes, pa.string()),
            out_shapes=chunked(lambda p: p.out_shapes, pa.string()),
        )

    def build(self, skip_runs: int, omap: Mapping[str, list[str] | None]) -> OrtProfile:
        run_spans = sorted(self.run_spans)
        run_starts = [s for s, _ in run_spans]
        run_ends = [s + d for s, d in run_spans]
        # Running maximum of run ends: rejects a node outside every run in O(log n) even when
        # runs overlap (concurrent Run calls on one session).
        max_end: list[int] = []
        running = -1
        for end in run_ends:
            running = max(running, end)
            max_end.append(running)

        nodes = self._nodes()
        starts, all_durs = nodes.starts, nodes.durs
        tid_null = pc.is_null(nodes.tids).to_numpy(zero_copy_only=False)
        tid_vals = pc.fill_null(nodes.tids, 0).to_numpy()
        # an If/Loop/Scan node's time holds its body's nodes, which have events of their own:
        # each node keeps its own time, the nested time is recorded apart
        nested = _nested_ns(starts, all_durs, tid_vals, tid_null)
        durs = all_durs - nested
        runs_of = _enclosing_runs(starts, run_starts, run_ends, max_end)
        keep = np.flatnonzero(runs_of >= skip_runs)  # also drops -1: outside every run
        kept_runs_of = runs_of[keep]
        run_node_ns = np.zeros(len(run_spans), dtype=np.int64)
        np.add.at(run_node_ns, kept_runs_of, durs[keep])
        run_node_count = np.bincount(kept_runs_of, minlength=len(run_spans))

        # the rows in table order: by iteration, then start (a stable sort)
        order = _stable_order(kept_runs_of, starts[keep])
        rows = keep if order is None else keep[order]
        iterations = runs_of[rows] - skip_runs
        n = len(rows)
        take = None if n == len(starts) and order is None else pa.array(rows, type=pa.int64())

        def col(values: pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
            # one array first: Arrow takes from it at about twice the speed of from chunks
            return values if take is None else values.combine_chunks().take(take)

        names = col(nodes.names)
        op_name, provider, node_index, act, param, out = (col(c) for c in nodes.str_args)
        ops = OPS.from_columns(
            {
                "source": _const(SOURCE, n),
                "iteration": pa.array(iterations, type=pa.int32()),
                "node_name": names,
                "op_type": op_name,
                "provider": provider,
                "node_index": _int_column(node_index, pa.int32(), "args.node_index"),
                "start_ns": pa.array(starts[rows], type=pa.int64()),
                "dur_ns": pa.array(durs[rows], type=pa.int64()),
                "nested_ns": pa.array(nested[rows], type=pa.int64()),
                "thread_id": col(nodes.tids),
                "input_shapes": col(nodes.in_shapes),
                "output_shapes": col(nodes.out_shapes),
                "activation_bytes": _int_column(act, pa.int64(), "args.activation_size"),
                "parameter_bytes": _int_column(param, pa.int64(), "args.parameter_size"),
                "output_bytes": _int_column(out, pa.int64(), "args.output_size"),
                "original_nodes": _original_nodes(names, omap),
                "process_id": pa.nulls(n, pa.int64()),
                "external_id": pa.nulls(n, pa.int64()),
            }
        )

        kept_runs = range(skip_runs, len(run_spans))
        runs = ORT_RUNS.from_columns(
            {
                "iteration": [r - skip_runs for r in kept_runs],
                "start_ns": [run_spans[r][0] for r in kept_runs],
                "dur_ns": [run_spans[r][1] for r in kept_runs],
                "node_ns": run_node_ns[skip_runs:],
                "node_count": run_node_count[skip_runs:].astype(np.int32),
                "wall_ns": [None] * len(kept_runs),
            }
        )
        kernels, memcpy = self._gpu_tables(
            nodes, keep, runs_of[keep] - skip_runs, run_spans, max_end, skip_runs
        )
        return OrtProfile(
            ops=ops,
            runs=runs,
            session_events=dict(self.session_events),
            run_count_total=len(run_spans),
            kernels=kernels,
            memcpy=memcpy,
        )

    def _gpu_tables(
        self,
        nodes: _Piece,
        keep: np.ndarray,
        iterations: np.ndarray,
        run_spans: list[tuple[int, int]],
        max_end: list[int],
        skip_runs: int,
    ) -> tuple[pa.Table, pa.Table]:
        """KERNELS and MEMCPY rows of the Kernel events whose node (or time) is in a kept run."""
        if not self.k_names:
            return KERNELS.empty(), MEMCPY.empty()
        run_starts = [s for s, _ in run_spans]
        run_ends = [s + d for s, d in run_spans]
        node_iter_arr = np.full(len(nodes.starts), -1, dtype=np.int64)
        node_iter_arr[keep] = iterations
        node_iter: list[int] = node_iter_arr.tolist()
        node_starts: list[int] = nodes.starts.tolist()
        node_tids: list[int | None] = nodes.tids.to_pylist()
        kern: dict[str, list[Any]] = {k: [] for k in _KERNEL_LISTS}
        dims: tuple[list[str | None], ...] = tuple([] for _ in range(6))
        copy: dict[str, list[Any]] = {k: [] for k in _COPY_LISTS}
        args = self.k_args
        for j, name in enumerate(self.k_names):
            parent = self.k_parent[j]
            tid: int | None = None
            if parent >= 0:
                iteration = node_iter[parent]
                start = node_starts[parent]
                tid = node_tids[parent]
            else:
                run = _enclosing_run(self.k_starts[j], run_starts, run_ends, max_end)
                iteration = run - skip_runs if run >= skip_runs else -1
                start = self.k_starts[j]
            if iteration < 0:
                continue  # outside every kept run: session-init copies, skipped runs
            stream_text = args[_K_STREAM][j]
            kind = _copy_kind(name, args[_K_KIND][j], args[_K_SRC][j], args[_K_DST][j])
            if kind is not None:
                for key, value in zip(
                    _COPY_LISTS,
                    (
                        name,
                        kind,
                        args[_K_SIZE][j],
                        start,
                        self.k_durs[j],
                        _stream_id(stream_text),
                        iteration,
                    ),
                    strict=True,
                ):
                    copy[key].append(value)
                continue
            rocm = stream_text is not None and stream_text[:2] in ("0x", "0X")
            for key, value in zip(
                _KERNEL_LISTS,
                (name, start, self.k_durs[j], iteration, tid, _stream_id(stream_text), rocm),
                strict=True,
            ):
                kern[key].append(value)
            for col, values in zip(dims, args[_K_DIMS], strict=True):
                col.append(values[j])
        return _kernels_table(kern, dims), _memcpy_table(copy)


def _in_int64(value: int) -> bool:
    return -(1 << 63) <= value < (1 << 63)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _const(text: str, n: int) -> pa.Array:
    """A string column holding ``text`` n times, built without a Python list."""
    data = text.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n)).cast(
        pa.string()
    )


def _original_nodes(
    names: pa.Array | pa.ChunkedArray, omap: Mapping[str, list[str] | None]
) -> pa.Array:
    """``omap`` looked up once per distinct node name."""
    typ = pa.list_(pa.string())
    if not omap or not len(names):
        return pa.nulls(len(names), typ)
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    encoded = pc.dictionary_encode(names)
    mapped = pa.array([omap.get(n) for n in encoded.dictionary.to_pylist()], type=typ)
    return mapped.take(encoded.indices)


# ------------------------------------------------------------------ ORT's layout, in blocks

#: bytes of lines read and scanned at once: small enough to stay in the CPU caches while
#: the block's vector passes run over it, large enough to amortise their overhead
_BLOCK_BYTES = 2 << 20
#: a first line longer than this is not ORT's "[" line
_FIRST_LINE_MAX = 1 << 16
#: zeros after a block, so that reading 8 bytes from any offset in it stays in bounds
_PAD = bytes(32)
_U64 = np.uint64
_MASKS = [_U64((1 << (8 * k)) - 1) for k in range(9)]
_ONES = _U64(0xFFFF_FFFF_FFFF_FFFF)


def _word(text: bytes) -> np.uint64:
    """``text`` (up to 8 bytes) as the little-endian word a block holds where it is written."""
    word: np.uint64 = _U64(int.from_bytes(text, "little"))
    return word


_LINE_START = _word(b'{"cat" :')
_PID_KEY, _TID_KEY, _DUR_KEY = _word(b',"pid" :'), _word(b',"tid" :'), _word(b',"dur" :')
_TS_KEY = _word(b',"ts" :')
_PH_KEY, _NAME_KEY, _ARGS_KEY = _word(b',"ph" : '), _word(b',"name" '), _word(b',"args" ')
_SUFFIX_HEAD, _SUFFIX_TAIL = _word(b"_kernel_"), _word(b"time")
_NODE_CAT, _SESSION_CAT, _KERNEL_CAT = _word(b"Node"), _word(b"Session"), _word(b"Kernel")
# the header's strings that are keys: cat, pid, tid, dur, ts, ph, name, args
_HEAD_KEYS = (0, 2, 3, 4, 5, 6, 8, 10)
# The args read, by number: the six text args of _STR_ARGS, then the two shapes. A key is
# looked up by (length, first byte) and then checked whole: its first 8 bytes, its last 8
# (with the opening quote for shorter keys) and, past 16 bytes, the one byte between.
_WANTED = (*(k.encode() for k in _STR_ARGS), b"input_type_shape", b"output_type_shape")
_N_TEXT = len(_STR_ARGS)
_KEY_ID = np.full(32 * 128, -1, dtype=np.int8)  # (length, first byte) -> number
_KEY_ID[[len(k) * 128 + k[0] for k in _WANTED]] = np.arange(len(_WANTED))
_KEY_HEAD = np.array([int.from_bytes(k[:8], "little") for k in _WANTED], dtype=np.uint64)
_KEY_HEAD_MASK = np.array([_MASKS[min(len(k), 8)] for k in _WANTED], dtype=np.uint64)
_KEY_TAIL = np.array([int.from_bytes((b'"' + k)[-8:], "little") for k in _WANTED], dtype=np.uint64)
_KEY_MID = np.array([8 if len(k) > 16 else 0 for k in _WANTED])
_KEY_MID_BYTE = np.array([k[m] for k, m in zip(_WANTED, _KEY_MID, strict=True)], dtype=np.uint8)
_EVEN = np.arange(0, 1 << 20, 2, dtype=np.int32)
# SWAR constants: eight ASCII digits in one word, checked and read at once
_ZEROS = _U64(0x3030_3030_3030_3030)
_HIGH = _U64(0xF0F0_F0F0_F0F0_F0F0)
_SIXES = _U64(0x0606_0606_0606_0606)
_BYTE_0_4 = _U64(0x0000_00FF_0000_00FF)
_MUL1 = _U64(100 + (1_000_000 << 32))
_MUL2 = _U64(1 + (10_000 << 32))
_LOW32 = _U64(0xFFFF_FFFF)


@dataclass(frozen=True)
class _Block:
    """What :func:`_scan` read from a block of event lines."""

    piece: _Piece
    run_starts: np.ndarray  # model_run ts, ns
    run_durs: np.ndarray
    sessions: list[tuple[str, int]]  # the other session events read, in file order
    used: int  # bytes of the block read (whole lines)


def _read(path: Path, scan: bool, block_bytes: int, workers: int) -> _Columns:
    """Fill columns from ``path``: by blocks of lines when ORT's layout allows, else by decoding."""
    try:
        raw: IO[bytes] = path.open("rb")
        if raw.read(2) == b"\x1f\x8b":
            raw.close()
            # A gzipped profile (as `aaco import` accepts traces): decompressed as it is read.
            raw = cast(IO[bytes], gzip.GzipFile(filename=path, mode="rb"))
        else:
            raw.seek(0)
    except FileNotFoundError:
        raise InputError(f"{path}: no such ONNX Runtime profile") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, {_EXPECTED}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        with raw:
            cols = _read_lines(path, raw, scan, block_bytes, workers)
            if cols is not None:
                return cols
            raw.seek(0)
            f = io.TextIOWrapper(raw, encoding="utf-8")
            cols = _Columns(path)
            for number, ev in enumerate(_iter_events(path, f)):
                cols.event(ev, number)
            f.detach()
            return cols
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text, {_EXPECTED}") from None
    except EOFError:
        raise _truncated(path) from None
    except (gzip.BadGzipFile, zlib.error):
        raise InputError(f"{path}: corrupt gzip data, {_EXPECTED}") from None


class _Lines:
    """Reads lines one at a time, the way ORT's layout is checked line by line."""

    def __init__(self, path: Path, cols: _Columns) -> None:
        self.path = path
        self.cols = cols
        self.number = 0
        self.closed = False
        # a line that is not an event: an error only if it is not the last
        self.pending: str | None = None

    def take(self, text: str) -> bool:
        """Read the lines of ``text``; False when the file is not laid out one event per line
        (the caller then decodes it as JSON). After the closing ``]``, only whitespace."""
        cols = self.cols
        # universal newlines, as a text file reads them
        for raw in io.StringIO(text, newline=None):
            line = raw.strip()
            if self.closed:
                if line:
                    raise InputError(f"{self.path}: data after the closing ']', {_EXPECTED}")
                continue
            if not line:
                continue
            if self.pending is not None:
                return False  # e.g. pretty-printed JSON: let the decoder deal with it
            if line == "]":
                self.closed = True
                continue
            if not (line.endswith("},") or line.endswith("}")) or not cols.line(line):
                try:
                    ev = json.loads(line[:-1] if line.endswith(",") else line)
                except ValueError:
                    self.pending = line
                    continue
                cols.event(ev, self.number)
            self.number += 1
        return True


def _read_lines(
    path: Path, raw: IO[bytes], scan: bool, block_bytes: int, workers: int
) -> _Columns | None:
    """Read ORT's one-event-per-line layout; None when the file is laid out otherwise.

    Blocks of whole lines go to :func:`_scan`, which reads the event lines a block starts
    with in vector operations; whatever it leaves (the closing ``]``, a line in another
    layout, a block it does not vouch for) is read line by line, in file order. Where two
    CPUs are free, the next block is scanned in a thread while this one is taken (numpy
    and Arrow release the GIL in their loops); at most ``workers + 1`` blocks are held.
    """
    first = raw.readline(_FIRST_LINE_MAX)
    if len(first) == _FIRST_LINE_MAX and not first.endswith(b"\n"):
        return None
    if first.decode("utf-8").strip() != "[":
        return None
    cols = _Columns(path)
    lines = _Lines(path, cols)

    def take(data: bytes, fast: _Block | None) -> bool:
        size = len(data) - len(_PAD)
        used = 0
        if fast is not None and not lines.closed and lines.pending is None:
            cols.fast(fast)
            used = fast.used
        return used >= size or lines.take(data[used:size].decode("utf-8"))

    if not scan or workers < 2:
        for data in _blocks(raw, block_bytes):
            size = len(data) - len(_PAD)
            if not take(data, _scan_block(data, size, cols.good_shapes) if scan else None):
                return None
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="aaco-ort") as pool:
            window: deque[tuple[bytes, Future[_Block | None]]] = deque()
            for data in _blocks(raw, block_bytes):
                size = len(data) - len(_PAD)
                window.append((data, pool.submit(_scan_block, data, size, cols.good_shapes)))
                if len(window) > workers and not take(*_done(window.popleft())):
                    return None
            while window:
                if not take(*_done(window.popleft())):
                    return None
    if lines.pending is not None or not lines.closed:
        raise _truncated(path)
    return cols


def _done(item: tuple[bytes, Future[_Block | None]]) -> tuple[bytes, _Block | None]:
    data, future = item
    return data, future.result()


def _scan_workers() -> int:
    """Threads that scan blocks: 2 where two CPUs are ours, else 1 (none)."""
    try:
        return 2 if len(os.sched_getaffinity(0)) >= 2 else 1
    except AttributeError:  # no sched_getaffinity (macOS, Windows)
        return 2 if (os.cpu_count() or 1) >= 2 else 1


def _blocks(raw: IO[bytes], block_bytes: int) -> Iterator[bytes]:
    """The rest of ``raw`` in blocks of whole lines (the last may end without a newline),
    each followed by ``_PAD``."""
    parts: list[bytes] = []
    while True:
        chunk = raw.read(block_bytes)
        if not chunk:
            if any(parts):
                yield b"".join([*parts, _PAD])
            return
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            parts.append(chunk)  # a line longer than a block: read on
            continue
        yield b"".join([*parts, chunk[:cut], _PAD])
        parts = [chunk[cut:]]


def _scan_block(data: bytes, size: int, good_shapes: set[str]) -> _Block | None:
    """:func:`_scan`, or None (the line reader) where the block trips it up: the scanner
    only ever vouches for lines it understood, it never decides how odd ones read."""
    try:
        return _scan(data, size, good_shapes)
    except UnicodeDecodeError:
        raise  # the file is not UTF-8: reported as the line reader reports it
    except (IndexError, ValueError, OverflowError):
        return None


def _scan(data: bytes, size: int, good_shapes: set[str]) -> _Block | None:
    """Read the event lines that ``data[:size]`` starts with, all at once (``data`` ends with
    ``_PAD``); None when it cannot vouch that they read exactly as :meth:`_Columns.line`
    reads them (the caller then reads the block line by line).

    The lines must be in ORT's layout (``_HEAD``, then ``"key" : value`` args) with no
    backslash and an even number of quotes each: the quotes then pair up into the strings,
    the strings followed by `` :`` are the keys, and every field is a slice between known
    quotes. No Kernel events (their parent depends on the events before them).
    """
    if data.find(b"\\", 0, size) >= 0:
        return None
    if data.find(b"\r", 0, size) >= 0 and data.count(b"\r", 0, size) != data.count(
        b"\r\n", 0, size
    ):
        return None  # a lone CR ends a line in a text file
    a = np.frombuffer(data, dtype=np.uint8)
    if not data.isascii():
        data[:size].decode("utf-8")  # invalid UTF-8 is reported as the line reader does
    # the 8 bytes from every offset, as one little-endian word
    w = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    nl = np.flatnonzero(a[:size] == 10)
    if not len(nl):
        return None
    ls = np.empty(len(nl), dtype=np.int64)
    ls[0] = 0
    ls[1:] = nl[:-1] + 1
    # the event lines the block starts with: {"cat" : "
    starts_ok = (w[ls] == _LINE_START) & (a[ls + 8] == 32) & (a[ls + 9] == 34)
    if not starts_ok.all():
        k = int(np.argmin(starts_ok))
        if k == 0:
            return None
        nl, ls = nl[:k], ls[:k]
    used = int(nl[-1]) + 1
    le = nl - (a[nl - 1] == 13)  # content end: before "\r\n" or "\n"
    ce = le - (a[le - 1] == 44)  # ... and before the comma between events
    if not (a[ce - 1] == 125).all():
        return None
    q = np.flatnonzero(a[:used] == 34)
    q_end = np.searchsorted(q, nl)  # quotes before each line's end
    count = np.diff(q_end, prepend=0)
    if ((count & 1) != 0).any() or (count < 22).any():
        return None
    op, cl = q[0::2], q[1::2]  # opening and closing quote of each string
    p0 = (q_end - count) // 2  # each line's first string: "cat"
    h = [op[p0 + j] for j in range(11)], [cl[p0 + j] for j in range(11)]
    o, c = h
    # _HEAD: {"cat" : "C","pid" :P,"tid" :T,"dur" :D,"ts" :S,"ph" : "X","name" :"N","args" : {
    ok = (o[2] == c[1] + 2) & (w[o[2] - 1] == _PID_KEY) & (w[o[3] - 1] == _TID_KEY)
    ok &= (w[o[4] - 1] == _DUR_KEY) & ((w[o[5] - 1] & _MASKS[7]) == _TS_KEY)
    ok &= (w[o[6] - 1] == _PH_KEY) & (o[7] == c[6] + 4)
    ok &= (o[8] == c[7] + 2) & (w[o[8] - 1] == _NAME_KEY) & (a[c[8] + 2] == 58)
    ok &= (o[9] == c[8] + 3) & (o[10] == c[9] + 2) & (w[o[10] - 1] == _ARGS_KEY)
    ok &= (a[c[10] + 2] == 58) & (a[c[10] + 3] == 32) & (a[c[10] + 4] == 123)
    if not ok.all():
        return None
    # pid is only checked (_HEAD's -?\d+), tid kept, dur and ts scaled to ns (at most 15
    # digits: within int64 once in ns)
    m = len(ls)
    num_s = np.concatenate((c[2], c[3], c[4], c[5])) + 3
    num_e = np.concatenate((o[3], o[4], o[5], o[6])) - 1
    got = _ints(a, w, num_s, num_e)
    if got is None:
        return None
    numbers, neg = got
    if neg[2 * m :].any() or (num_e[2 * m :] - num_s[2 * m :] > 15).any():
        return None
    tid, dur, ts = numbers[m : 2 * m], numbers[2 * m : 3 * m], numbers[3 * m :]
    cat_len = c[1] - ls - 10
    cat_word = w[ls + 10]
    if ((cat_len == 6) & ((cat_word & _MASKS[6]) == _KERNEL_CAT)).any():
        return None
    name_s, name_e = o[9] + 1, c[9]
    kern = (cat_len == 4) & ((cat_word & _MASKS[4]) == _NODE_CAT)
    kern &= (name_e - name_s >= len(_KERNEL_SUFFIX)) & (w[name_e - 12] == _SUFFIX_HEAD)
    kern &= (w[name_e - 4] & _MASKS[4]) == _SUFFIX_TAIL
    lines = np.flatnonzero(kern)
    n = len(lines)

    # The keys of args: strings followed by " :" after the header's (thread_scheduling_stats,
    # an object, writes its own keys as "key": value).
    is_key = a[cl + 2] == 58
    for j in _HEAD_KEYS:
        is_key[p0 + j] = False
    keys = np.flatnonzero(is_key)
    k_o = op[keys]
    k_len = cl[keys] - k_o - 1
    kid = _KEY_ID[np.minimum(k_len, 31) * 128 + (a[k_o + 1] & 127)]
    cand = np.flatnonzero(kid >= 0)
    pair, kid = keys[cand], kid[cand].astype(np.int64)
    k_o, k_c = op[pair], cl[pair]
    ok = (w[k_o + 1] & _KEY_HEAD_MASK[kid]) == _KEY_HEAD[kid]
    ok &= (w[k_c - 8] == _KEY_TAIL[kid]) & (a[k_o + 1 + _KEY_MID[kid]] == _KEY_MID_BYTE[kid])
    ok &= (a[k_c + 1] == 32) & (a[k_c + 3] == 32)  # "key" : value
    line = np.searchsorted(p0, pair, side="right") - 1
    ok &= kern[line]
    cand = np.flatnonzero(ok)
    pair, kid, line, cand = pair[cand], kid[cand], line[cand], cand
    text = kid < _N_TEXT
    value = pair[text] + 1  # the string after a text key: its value, in the same line
    if (value >= q_end[line[text]] // 2).any():
        return None  # a value that is not a string: the JSON decoder reads those
    if (op[value] != cl[pair[text]] + 4).any():
        return None
    vs = np.empty(len(pair), dtype=np.int64)
    ve = np.empty(len(pair), dtype=np.int64)
    vs[text], ve[text] = op[value] + 1, cl[value]
    shape = np.flatnonzero(~text)
    if len(shape):
        sp, sl = pair[shape], line[shape]
        start = cl[sp] + 4
        # the value ends before the next key of args, or before the `}` closing args
        nxt_at = np.searchsorted(keys, sp, side="right")
        nxt = keys[np.minimum(nxt_at, len(keys) - 1)]
        last = (nxt_at >= len(keys)) | (nxt >= (q_end[sl] // 2))
        end = np.where(last, ce[sl] - 2, op[nxt] - 1)
        close = np.where(last, a[end] == 125, a[end] == 44)
        if not ((a[start] == 91) & (a[end - 1] == 93) & close).all():
            return None
        vs[shape], ve[shape] = start, end
    # The values are in file order (so are their keys): one array of them and the gaps
    # between them, and one take of each wanted key's value in each kernel line.
    at = np.full(len(_WANTED) * m, -1, dtype=np.int32)
    at[kid * m + line] = np.arange(0, 2 * len(pair), 2, dtype=np.int32)
    if np.count_nonzero(at >= 0) != len(pair):
        return None  # a key twice in one event: the line reader takes the first
    n = len(lines)
    if n != m:
        at = at.reshape(len(_WANTED), m)[:, lines].ravel()
    present = at >= 0
    if not present[:n].all():
        return None  # a kernel event without op_name goes to the JSON decoder
    pbuf = pa.py_buffer(data)
    index = pa.array(at) if present.all() else pa.array(at, mask=~present)
    values = _slices(pbuf, vs, ve).take(index)
    cols = [values.slice(i * n, n) for i in range(len(_WANTED))]
    for col in cols[_N_TEXT:]:
        for value in pc.unique(col).to_pylist():
            if value is not None and value not in good_shapes:
                if _SHAPE.fullmatch(value) is None:
                    return None  # e.g. a shape as text (older builds): the line reader
                good_shapes.add(value)

    piece = _Piece(
        names=_texts(pbuf, name_s[lines], name_e[lines] - len(_KERNEL_SUFFIX)),
        starts=ts[lines] * 1000,
        durs=dur[lines] * 1000,
        tids=pa.array(tid[lines], type=pa.int64()),
        str_args=tuple(cols[:_N_TEXT]),
        in_shapes=cols[_N_TEXT],
        out_shapes=cols[_N_TEXT + 1],
    )
    sess = np.flatnonzero((cat_len == 7) & ((cat_word & _MASKS[7]) == _SESSION_CAT))
    runs: np.ndarray = sess
    firsts: list[tuple[int, str]] = []
    if len(sess):
        s_s, s_len = name_s[sess], name_e[sess] - name_s[sess]
        runs = sess[_matches(w, s_s, s_len, b"model_run")]
        for name in _SESSION_EVENTS:
            hit = np.flatnonzero(_matches(w, s_s, s_len, name.encode()))
            if len(hit):
                firsts.append((int(sess[hit[0]]), name))
    return _Block(
        piece=piece,
        run_starts=ts[runs] * 1000,
        run_durs=dur[runs] * 1000,
        sessions=[(name, int(dur[i]) * 1000) for i, name in sorted(firsts)],
        used=used,
    )


def _matches(w: np.ndarray, s: np.ndarray, length: np.ndarray, text: bytes) -> np.ndarray:
    """Whether each slice (start ``s``, ``length``) of the block holds exactly ``text``."""
    idx = np.flatnonzero(length == len(text))
    for off in range(0, len(text), 8):
        part = text[off : off + 8]
        words = w[s[idx] + off]
        if len(part) < 8:
            words = words & _MASKS[len(part)]
        idx = idx[words == _word(part)]
    out = np.zeros(len(s), dtype=bool)
    out[idx] = True
    return out


def _ints(
    a: np.ndarray, w: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The decimal integers written in the slices [s, e), an optional ``-`` first, and where
    that sign was; None when a slice is not 1 to 16 ASCII digits after it.

    The last eight digits and those before them are read as one word each: masked to the
    slice (what lies before it reads as "0"), checked to be digits and converted eight at
    a time (SWAR), all in vector operations.
    """
    neg = a[s] == 45
    s = s + neg
    length = e - s
    if not ((length >= 1) & (length <= 16)).all():
        return None
    n = length.astype(np.uint64)
    parts = [(w[e - 8], np.minimum(n, _U64(8)), 1)]
    if (length > 8).any():  # digits before the last eight
        parts.append((w[np.maximum(e - 16, 0)], n - parts[0][1], 10**8))
    values = np.zeros(len(s), dtype=np.uint64)
    for word, count, scale in parts:
        # the word's first (8 - count) bytes lie before the slice: read as "0"
        mask = (
            _ONES << ((_U64(8) - count) * _U64(8))
            if scale == 1
            else np.where(
                count > 0, _ONES << ((_U64(8) - np.maximum(count, _U64(1))) * _U64(8)), _U64(0)
            )
        )
        x = (word & mask) | (_ZEROS & ~mask)
        digit = ((x & _HIGH) == (_ZEROS & _HIGH)) & (((x + _SIXES) & _HIGH) == (_ZEROS & _HIGH))
        if not digit.all():
            return None
        x = x - _ZEROS
        x = x * _U64(10) + (x >> _U64(8))
        x = (((x & _BYTE_0_4) * _MUL1) + (((x >> _U64(16)) & _BYTE_0_4) * _MUL2)) >> _U64(32)
        values += (x & _LOW32) * _U64(scale)
    out = values.astype(np.int64)
    return np.where(neg, -out, out), neg


def _slices(buf: pa.Buffer, s: np.ndarray, e: np.ndarray) -> pa.Array:
    """The slices ``buf[s:e]`` (in increasing order, not overlapping) and the gaps between
    them as one string array over ``buf``, without a copy: slice i is value 2 i."""
    offsets = np.empty(2 * len(s), dtype=np.int32)
    offsets[0::2] = s
    offsets[1::2] = e
    return pa.StringArray.from_buffers(max(2 * len(s) - 1, 0), pa.py_buffer(offsets), buf)


def _texts(buf: pa.Buffer, s: np.ndarray, e: np.ndarray) -> pa.Array:
    """The slices ``buf[s:e]`` (in increasing order, not overlapping) as a string array."""
    if not len(s):
        return pa.array([], type=pa.string())
    m = len(s)
    even = _EVEN[:m] if m <= len(_EVEN) else np.arange(0, 2 * m, 2, dtype=np.int32)
    return _slices(buf, s, e).take(pa.array(even))


def _iter_events(path: Path, f: IO[str]) -> Iterator[Any]:
    """Yield the elements of the top-level JSON array in ``f``, one at a time.

    Decodes incrementally so a large profile never exists as one Python list, and tells a
    truncated profile (no closing ``]``) from a complete one.
    """
    decoder = json.JSONDecoder()
    buf = ""
    pos = 0
    eof = False

    def more() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        chunk = f.read(_CHUNK_CHARS)
        if not chunk:
            eof = True
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    def skip_ws() -> bool:
        """Advance past whitespace; False when the file ended first."""
        nonlocal pos
        while True:
            m = _WS.match(buf, pos)
            pos = m.end() if m else pos
            if pos < len(buf):
                return True
            if not more():
                return False

    if not skip_ws():
        raise InputError(f"{path}: empty file, {_EXPECTED}")
    if buf[pos] != "[":
        kind = "a JSON object" if buf[pos] == "{" else "not a JSON array"
        raise InputError(f"{path}: {kind}, {_EXPECTED}")
    pos += 1
    first = True
    while True:
        if not skip_ws():
            raise _truncated(path)
        if buf[pos] == "]":
            pos += 1
            break
        if not first:
            if buf[pos] != ",":
                raise InputError(f"{path}: invalid JSON (expected ',' or ']'), {_EXPECTED}")
            pos += 1
            if not skip_ws():
                raise _truncated(path)
        first = False
        while True:
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if more():
                    continue
                if _ran_out(exc, buf):
                    raise _truncated(path) from None
                raise InputError(f"{path}: invalid JSON ({exc.msg}), {_EXPECTED}") from None
            # A bare number at the very end of the buffer may be cut short: re-read with more.
            if end == len(buf) and not isinstance(obj, (dict, list, str)) and more():
                continue
            break
        pos = end
        yield obj
    if skip_ws():
        raise InputError(f"{path}: data after the closing ']', {_EXPECTED}")


def _ran_out(exc: json.JSONDecodeError, text: str) -> bool:
    """Whether a decode error at end of file means the text stopped, not that it is wrong."""
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip())


def _truncated(path: Path) -> InputError:
    return InputError(
        f"{path}: truncated ONNX Runtime profile (no closing ']'; ORT writes it in "
        "end_profiling, so the profiled process probably died or never called it)"
    )


#: ORT writes microseconds: a body node may end up to 1 µs after its parent's recorded end
_NEST_SLACK_NS = 1_000
_INT64_MAX = np.iinfo(np.int64).max


def _ends(starts: np.ndarray, durs: np.ndarray) -> np.ndarray:
    """starts + durs, saturating at the int64 maximum instead of wrapping around."""
    ends: np.ndarray = starts + durs
    over = (durs > 0) & (ends < starts)
    if over.any():
        ends[over] = _INT64_MAX
    return ends


def _nested_ns(
    starts: np.ndarray, durs: np.ndarray, tids: np.ndarray, tid_null: np.ndarray
) -> np.ndarray:
    """For each node event, the summed time of the node events directly inside it on the same
    thread (the nodes of an If/Loop/Scan body), at most its own duration; 0 for most.

    In the order (thread, start, longest first), a node's parent candidate is the latest
    earlier node still running when it starts (what is left on top of a stack that pushes
    every node and pops those that ended); it is nested when it also ends by the
    candidate's end (plus ORT's 1 µs rounding). The candidates are found for all nodes at
    once by pointer jumping; only nodes that start while an earlier one runs have one.
    """
    n = len(starts)
    nested = np.zeros(n, dtype=np.int64)
    if n < 2:
        return nested
    order = _thread_order(starts, durs, tids, tid_null)
    s, d = starts[order], durs[order]
    e = _ends(s, d)
    t, t_null = tids[order], tid_null[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (t[1:] != t[:-1]) | (t_null[1:] != t_null[:-1])
    bounds = np.append(np.flatnonzero(new), n)
    out = np.zeros(n, dtype=np.int64)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if hi - lo < 2:
            continue
        gs, ge, gd = s[lo:hi], e[lo:hi], d[lo:hi]
        running = np.maximum.accumulate(ge)
        # nodes that start before every earlier node has ended
        inside = np.flatnonzero(gs[1:] < running[:-1]) + 1
        if not len(inside):
            continue
        # cand[i]: a candidate parent such that every node between it and i ended by i's
        # start; it moves to its own candidate's candidate until it is still running
        cand = np.full(hi - lo, -1, dtype=np.int64)
        cand[inside] = inside - 1
        todo = inside
        while len(todo):
            todo = todo[ge[cand[todo]] <= gs[todo]]
            if not len(todo):
                break
            cand[todo] = cand[cand[todo]]
            todo = todo[cand[todo] >= 0]
        parent = cand[inside]
        nest = (parent >= 0) & (
            ge[inside] <= np.minimum(ge[parent], _INT64_MAX - _NEST_SLACK_NS) + _NEST_SLACK_NS
        )
        np.add.at(out, lo + parent[nest], gd[inside[nest]])
    nested[order] = out
    result: np.ndarray = np.minimum(nested, durs)
    return result


def _stable_order(major: np.ndarray, minor: np.ndarray) -> np.ndarray | None:
    """The stable sort of rows by (major, minor); None when they are in that order already.

    Two stable passes (minor, then major) over rows that are nearly in order, as node
    events are in the file, cost far less than a lexsort."""
    if len(major) < 2:
        return None
    d_major = np.diff(major)
    if ((d_major > 0) | ((d_major == 0) & (np.diff(minor) >= 0))).all():
        return None
    by_minor = np.argsort(minor, kind="stable")
    out: np.ndarray = by_minor[np.argsort(major[by_minor], kind="stable")]
    return out


def _thread_order(
    starts: np.ndarray, durs: np.ndarray, tids: np.ndarray, tid_null: np.ndarray
) -> np.ndarray:
    """Node events by (thread, start, longest first), ties in file order."""
    group = tids if not tid_null.any() else np.where(tid_null, tids.min() - 1, tids)
    one_group = tid_null.all() or (not tid_null.any() and (tids == tids[0]).all())
    by_start = np.argsort(starts, kind="stable")
    order: np.ndarray = (
        by_start if one_group else by_start[np.argsort(group[by_start], kind="stable")]
    )
    s = starts[order]
    same = np.diff(s) == 0
    if not one_group:
        same &= np.diff(group[order]) == 0
    if same.any():
        # starts shared on one thread: longest first, which only a full sort gives
        order = np.lexsort((-durs, starts, tids, tid_null))
    return order


def _enclosing_runs(
    starts: np.ndarray, run_starts: list[int], run_ends: list[int], max_end: list[int]
) -> np.ndarray:
    """Index of the run whose [start, end] holds each ts; -1 when none does."""
    out = np.full(len(starts), -1, dtype=np.int64)
    if not run_starts or not len(starts):
        return out
    rs = np.array(run_starts, dtype=np.int64)
    cap = _INT64_MAX
    re = np.array([min(x, cap) for x in run_ends], dtype=np.int64)
    me = np.array([min(x, cap) for x in max_end], dtype=np.int64)
    i = np.searchsorted(rs, starts, side="right") - 1
    ic = np.maximum(i, 0)
    inside = (i >= 0) & (me[ic] >= starts)
    out[inside] = i[inside]
    # Overlapping runs: the latest-starting run has ended, an earlier one has not.
    for j in np.flatnonzero(inside & (re[ic] < starts)).tolist():
        out[j] = _enclosing_run(int(starts[j]), run_starts, run_ends, max_end)
    return out


def _enclosing_run(ts: int, starts: list[int], ends: list[int], max_end: list[int]) -> int:
    """Index of the run whose [start, end] holds ``ts``; -1 when none does."""
    i = bisect.bisect_right(starts, ts) - 1
    if i < 0 or max_end[i] < ts:
        return -1
    if ends[i] >= ts:
        return i
    # Overlapping runs: the latest-starting run has ended, an earlier one has not.
    j = i - 1
    while j >= 0 and max_end[j] >= ts:
        if ends[j] >= ts:
            return j
        j -= 1
    return -1


def _text_us_to_ns(text: str) -> int:
    """Microseconds written as JSON number text to integer ns, rounded to nearest."""
    if text.isdigit():
        return int(text) * 1000
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return round(value * 1000.0)


def _find_shape(line: str, key: str, start: int) -> str | None:
    i = line.find(key, start)
    if i < 0:
        return None
    m = _SHAPE.match(line, i + len(key))
    if m is not None:
        return m.group()
    # Older builds write the shape list as a JSON string: decode just that value.
    try:
        value, _ = json.JSONDecoder().raw_decode(line, i + len(key))
    except ValueError:
        return None
    return _shape_text(value)


def _shape_text(value: Any) -> str | None:
    """Compact JSON text of an ORT type/shape arg, a list in new builds, text in old ones."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            return text  # not JSON: keep ORT's text rather than lose it
    return json.dumps(value, separators=(",", ":"))


def _int_column(
    values: list[str | None] | pa.Array | pa.ChunkedArray, typ: pa.DataType, field: str
) -> pa.Array | pa.ChunkedArray:
    """Integer args ORT writes as text ("896"), cast in one go; odd values null, counted."""
    text = (
        values
        if isinstance(values, (pa.Array, pa.ChunkedArray))
        else pa.array(values, type=pa.string())
    )
    try:
        return pc.cast(text, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bits = typ.bit_width - 1
        values = text.to_pylist()
        out = [_opt_int(v, bits) for v in values]
        note_null(field, sum(1 for v, o in zip(values, out, strict=True) if v and o is None))
        return pa.array(out, type=typ)


def _opt_int(value: str | None, bits: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if -(1 << bits) <= number < (1 << bits) else None


_KERNEL_LISTS = ("name", "start", "dur", "iteration", "thread", "stream", "rocm")
_COPY_LISTS = ("name", "kind", "bytes", "start", "dur", "stream", "iteration")


def _kernels_table(k: dict[str, list[Any]], dims: tuple[list[str | None], ...]) -> pa.Table:
    n = len(k["name"])
    starts = pa.array(k["start"], type=pa.int64())
    durs = pa.array(k["dur"], type=pa.int64())
    dim_cols = [
        _dim_column(values, f"args.{key}")
        for values, key in zip(dims, _KERNEL_ARGS[_K_DIMS], strict=True)
    ]
    # ROCm grid values are blocks (hipLaunchKernel) or work-items (hipExtModuleLaunchKernel)
    # and the event does not say which: unknown.
    rocm = pa.array(k["rocm"], type=pa.bool_())
    grid = [pc.if_else(rocm, pa.scalar(None, pa.int64()), c) for c in dim_cols[:3]]
    i64 = pa.nulls(n, pa.int64())
    i32 = pa.nulls(n, pa.int32())
    text = pa.nulls(n, pa.string())
    return KERNELS.from_columns(
        {
            "source": [SOURCE] * n,
            "name": k["name"],
            "short_name": text,
            "family": text,
            "library": text,
            "dtype": text,
            "start_ns": starts,
            "end_ns": pc.add(starts, durs),
            "dur_ns": durs,
            "time_is_gpu": [False] * n,
            "device": i32,
            "stream": k["stream"],
            "queue": i64,
            "correlation_id": i64,
            "external_id": i64,
            "dispatch_id": i64,
            "process_id": i64,
            "thread_id": k["thread"],
            "grid_x": grid[0],
            "grid_y": grid[1],
            "grid_z": grid[2],
            "block_x": dim_cols[3],
            "block_y": dim_cols[4],
            "block_z": dim_cols[5],
            "registers": i32,
            "accum_vgpr": i32,
            "sgpr": i32,
            "shared_bytes": i64,
            "scratch_bytes": i64,
            "iteration": k["iteration"],
        }
    )


def _memcpy_table(c: dict[str, list[Any]]) -> pa.Table:
    n = len(c["name"])
    starts = pa.array(c["start"], type=pa.int64())
    durs = pa.array(c["dur"], type=pa.int64())
    i64 = pa.nulls(n, pa.int64())
    i32 = pa.nulls(n, pa.int32())
    return MEMCPY.from_columns(
        {
            "source": [SOURCE] * n,
            "name": c["name"],
            "kind": c["kind"],
            "bytes": _int_column(c["bytes"], pa.int64(), "args.size"),
            "start_ns": starts,
            "end_ns": pc.add(starts, durs),
            "dur_ns": durs,
            "device": i32,
            "stream": c["stream"],
            # ORT's src/dst args are pointers, not devices
            "src_device": i32,
            "dst_device": i32,
            "correlation_id": i64,
            "external_id": i64,
            "iteration": c["iteration"],
        }
    )


def _arg_text(value: Any) -> str | None:
    """A Kernel event arg as the text ORT wrote (it writes every one as a string)."""
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _stream_id(text: str | None) -> int | None:
    """CUDA stream id ("7") or ROCm hipStream_t pointer ("0x5581c2a0") as an integer."""
    if not text:
        return None
    try:
        value = int(text, 16) if text[:2] in ("0x", "0X") else int(text)
    except ValueError:
        return None
    return value if -(1 << 63) <= value < (1 << 63) else None


def _copy_kind(name: str, kind: str | None, src: str | None, dst: str | None) -> str | None:
    """MEMCPY kind of a Kernel event that is a copy or memset; None for a real kernel."""
    cuda = _CUDA_COPY_KINDS.get(name)
    if cuda is not None:
        return cuda
    if name.startswith("hipMemset"):
        return "memset"
    if name.startswith("hipMemcpy") or kind is not None or src is not None or dst is not None:
        return _HIP_COPY_KINDS.get(kind or "", "unknown")
    if name == "<unknown>":  # a CUPTI copy kind ORT's profiler has no name for
        return "unknown"
    return None


def _dim_column(values: list[str | None], field: str) -> pa.Array:
    """Grid/block sizes as int64; ORT writes -1 there for copies: null, not a size."""
    col = _int_column(values, pa.int64(), field)
    return pc.if_else(pc.less(col, 0), pa.scalar(None, pa.int64()), col)
