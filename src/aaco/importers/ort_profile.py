"""Read an ONNX Runtime profile (`enable_profiling`) into OPS, ORT_RUNS, KERNELS and MEMCPY.

The profile is a JSON array of Chrome-trace ``X`` events with ``ts``/``dur`` in microseconds
from the start of profiling. ``cat:"Session"`` events named ``model_run`` bracket each
``InferenceSession.run``; ``cat:"Node"`` events named ``<node>_kernel_time`` time one operator.
ORT writes ``model_run`` *after* the node events it encloses, so nodes are assigned to runs by
time, not by file order.

ORT writes one event per line in a fixed layout; those lines are read with a regular
expression and a few ``str.find`` calls, which is several times faster than decoding each
event's ``args`` (mostly ``thread_scheduling_stats`` and memory counters nobody reads here).
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

A line the fast reader does not recognise is decoded as JSON, and a file not laid out one
event per line is decoded one event at a time from 1 MiB chunks, so memory stays bounded by
the columns kept, never by the size of the JSON text.

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
import re
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

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
    if skip_runs < 0:
        raise ValueError(f"skip_runs must be >= 0, got {skip_runs}")
    path = Path(path)
    cols = _read(path)
    if cols.dropped and not (cols.names or cols.k_names or cols.run_spans or cols.session_events):
        raise InputError(f"{path}: no usable event ({cols.dropped} unusable), {_EXPECTED}")
    return cols.build(skip_runs, original_map or {})


class _Columns:
    """Column lists filled event by event; ints of args stay text until one vector cast."""

    def __init__(self, path: Path) -> None:
        self.path = path
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
        # cat:"Kernel" events: name, ORT ts/dur (ns), parent node (index into the node
        # lists above, -1 when unknown) and the text args of _KERNEL_ARGS.
        self.k_names: list[str] = []
        self.k_starts: list[int] = []
        self.k_durs: list[int] = []
        self.k_parent: list[int] = []
        self.k_args: tuple[list[str | None], ...] = tuple([] for _ in _KERNEL_ARGS)
        self._last_node = -1
        self._node_by_name: dict[str, int] = {}
        # events left out as unusable; a file of nothing else is not an ORT profile
        self.dropped = 0

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
            self._node_seen(name[: -len(_KERNEL_SUFFIX)])
            self.starts.append(start_ns)
            self.durs.append(dur_ns)
            self.tids.append(int(tid))
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

    def _node_seen(self, name: str) -> None:
        """Record a node's name and remember it as the parent candidate of later kernels."""
        index = len(self.names)
        self.names.append(name)
        self._last_node = index
        self._node_by_name[name] = index

    def _kernel(self, name: str, ts: int, dur: int, values: list[str | None]) -> None:
        """Take one cat:"Kernel" event and resolve its parent node."""
        op_name = values[_K_OP]
        parent_name = values[_K_PARENT]
        parent = -1
        if parent_name:
            if parent_name.endswith(_KERNEL_SUFFIX):
                parent_name = parent_name[: -len(_KERNEL_SUFFIX)]
            parent = self._node_by_name.get(parent_name, -1)
        elif op_name and self._last_node >= 0 and self.str_args[0][self._last_node] == op_name:
            # ORT writes a kernel right after its node's event and copies the node's op_name
            # into it; an empty op_name means ORT found no node for it.
            parent = self._last_node
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

        run_node_ns = [0] * len(run_spans)
        run_node_count = [0] * len(run_spans)
        keep: list[int] = []
        iterations: list[int] = []
        # an If/Loop/Scan node's time holds its body's nodes, which have events of their own:
        # each node keeps its own time, the nested time is recorded apart
        nested = _nested_ns(self.starts, self.durs, self.tids)
        durs = [d - n for d, n in zip(self.durs, nested, strict=True)]
        for i, ts in enumerate(self.starts):
            run = _enclosing_run(ts, run_starts, run_ends, max_end)
            if run < skip_runs:  # also catches -1: outside every run
                continue
            keep.append(i)
            iterations.append(run - skip_runs)
            run_node_ns[run] += durs[i]
            run_node_count[run] += 1

        def pick(values: list[Any]) -> list[Any]:
            return [values[i] for i in keep]

        names = pick(self.names)
        op_name, provider, node_index, act, param, out = (pick(c) for c in self.str_args)
        ops = OPS.from_columns(
            {
                "source": [SOURCE] * len(keep),
                "iteration": iterations,
                "node_name": names,
                "op_type": op_name,
                "provider": provider,
                "node_index": _int_column(node_index, pa.int32(), "args.node_index"),
                "start_ns": pick(self.starts),
                "dur_ns": pick(durs),
                "nested_ns": pick(nested),
                "thread_id": pick(self.tids),
                "input_shapes": pick(self.in_shapes),
                "output_shapes": pick(self.out_shapes),
                "activation_bytes": _int_column(act, pa.int64(), "args.activation_size"),
                "parameter_bytes": _int_column(param, pa.int64(), "args.parameter_size"),
                "output_bytes": _int_column(out, pa.int64(), "args.output_size"),
                "original_nodes": [omap.get(n) for n in names],
                "process_id": [None] * len(keep),
                "external_id": [None] * len(keep),
            }
        )
        if ops.num_rows:
            order = pc.sort_indices(ops, [("iteration", "ascending"), ("start_ns", "ascending")])
            ops = ops.take(order)

        kept_runs = range(skip_runs, len(run_spans))
        runs = ORT_RUNS.from_columns(
            {
                "iteration": [r - skip_runs for r in kept_runs],
                "start_ns": [run_spans[r][0] for r in kept_runs],
                "dur_ns": [run_spans[r][1] for r in kept_runs],
                "node_ns": [run_node_ns[r] for r in kept_runs],
                "node_count": [run_node_count[r] for r in kept_runs],
                "wall_ns": [None] * len(kept_runs),
            }
        )
        kernels, memcpy = self._gpu_tables(keep, iterations, run_spans, max_end, skip_runs)
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
        keep: list[int],
        iterations: list[int],
        run_spans: list[tuple[int, int]],
        max_end: list[int],
        skip_runs: int,
    ) -> tuple[pa.Table, pa.Table]:
        """KERNELS and MEMCPY rows of the Kernel events whose node (or time) is in a kept run."""
        if not self.k_names:
            return KERNELS.empty(), MEMCPY.empty()
        run_starts = [s for s, _ in run_spans]
        run_ends = [s + d for s, d in run_spans]
        node_iter = [-1] * len(self.names)
        for i, it in zip(keep, iterations, strict=True):
            node_iter[i] = it
        kern: dict[str, list[Any]] = {k: [] for k in _KERNEL_LISTS}
        dims: tuple[list[str | None], ...] = tuple([] for _ in range(6))
        copy: dict[str, list[Any]] = {k: [] for k in _COPY_LISTS}
        args = self.k_args
        for j, name in enumerate(self.k_names):
            parent = self.k_parent[j]
            tid: int | None = None
            if parent >= 0:
                iteration = node_iter[parent]
                start = self.starts[parent]
                tid = self.tids[parent]
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


def _read(path: Path) -> _Columns:
    """Fill columns from ``path``: line by line when ORT's layout allows, else by decoding."""
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
    f = io.TextIOWrapper(raw, encoding="utf-8")
    try:
        with f:
            cols = _read_lines(path, f)
            if cols is not None:
                return cols
            f.seek(0)
            cols = _Columns(path)
            for number, ev in enumerate(_iter_events(path, f)):
                cols.event(ev, number)
            return cols
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text, {_EXPECTED}") from None
    except EOFError:
        raise _truncated(path) from None
    except (gzip.BadGzipFile, zlib.error):
        raise InputError(f"{path}: corrupt gzip data, {_EXPECTED}") from None


def _read_lines(path: Path, f: IO[str]) -> _Columns | None:
    """Read ORT's one-event-per-line layout; None when the file is laid out otherwise."""
    first = f.readline()
    if first.strip() != "[":
        return None
    cols = _Columns(path)
    number = 0
    closed = False
    pending: str | None = None  # a line that is not an event: an error only if not the last
    for raw in f:
        line = raw.strip()
        if not line:
            continue
        if pending is not None:
            return None  # e.g. pretty-printed JSON: let the decoder deal with it
        if line == "]":
            closed = True
            break
        if not (line.endswith("},") or line.endswith("}")) or not cols.line(line):
            try:
                ev = json.loads(line[:-1] if line.endswith(",") else line)
            except ValueError:
                pending = line
                continue
            cols.event(ev, number)
        number += 1
    if pending is not None or not closed:
        raise _truncated(path)
    if any(rest.strip() for rest in f):
        raise InputError(f"{path}: data after the closing ']', {_EXPECTED}")
    return cols


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


def _nested_ns(starts: list[int], durs: list[int], tids: list[Any]) -> list[int]:
    """For each node event, the summed time of the node events directly inside it on the same
    thread (the nodes of an If/Loop/Scan body), at most its own duration; 0 for most."""
    nested = [0] * len(starts)
    order = sorted(range(len(starts)), key=lambda i: (str(tids[i]), starts[i], -durs[i]))
    stack: list[int] = []
    tid: Any = object()
    for i in order:
        if tids[i] != tid:
            stack.clear()
            tid = tids[i]
        end = starts[i] + durs[i]
        while stack and starts[i] >= starts[stack[-1]] + durs[stack[-1]]:
            stack.pop()
        if stack and end <= starts[stack[-1]] + durs[stack[-1]] + _NEST_SLACK_NS:
            nested[stack[-1]] += durs[i]
        stack.append(i)
    return [min(n, d) for n, d in zip(nested, durs, strict=True)]


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


def _int_column(values: list[str | None], typ: pa.DataType, field: str) -> pa.Array:
    """Integer args ORT writes as text ("896"), cast in one go; odd values null, counted."""
    text = pa.array(values, type=pa.string())
    try:
        return pc.cast(text, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bits = typ.bit_width - 1
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
