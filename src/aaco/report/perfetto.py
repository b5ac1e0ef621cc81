"""Export a session bundle as one Chrome JSON trace that opens in ui.perfetto.dev.

The trace shows, on one time axis: the iterations (the measured loop of ``aaco run`` and the
profiled iterations: ORT runs, Kineto ``ProfilerStep``s), ONNX nodes / framework ops and
runtime API calls on CPU thread tracks, kernels and copies per GPU device and stream,
telemetry samples as counter tracks, and one flow arrow per attributed kernel, from its op
to the kernel. A serving benchmark (``kind: "serving"``) adds one track per request (queued,
prefill, decode; an instant per chunk) and counters of the requests in flight and of the
server's ``/metrics``.

Rules of the format this module keeps (Chrome Trace Event Format, as Perfetto's JSON importer
reads it; see docs/perfetto.md):

* ``ts``/``dur`` are microseconds; they are written as exact decimals with three places so
  nanoseconds survive.
* ``X`` slices on one (pid, tid) must nest: a slice that partially overlaps an open one is
  moved to an overflow thread (``stream 7 (overlap)``) instead of being written as broken
  nesting. GPU stream tracks do not nest at all (a stream runs one thing at a time), so any
  overlap there goes to an overflow thread.
* Flow ``s``/``f`` events pair on (id, cat, name); ``s`` sits strictly inside the op, at a
  time not covered by the op's children, so it binds to the op; ``f`` has ``"bp":"e"`` and
  sits at the kernel's start, written after the kernel's ``X`` so it binds to it.
* pids and tids are small synthetic integers, unique across the whole trace (a real OS
  thread id can appear in two unaligned clock domains); ``M`` events name every one, and
  the names carry the real ids.

Clock domains are never silently merged: each has its own processes, named with the clock,
and ``otherData.clock_domains`` states the offset applied to each.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import pyarrow as pa

from aaco.report.base import Renderer
from aaco.report.machine import (
    column_series,
    counter_rate_series,
    energy_series,
    gpu_devices,
    thread_wait_rates,
    throttle_periods,
)
from aaco.report.model import session_op_names
from aaco.report.serving import (
    in_flight,
    is_serving,
    point_labels,
    request_spans,
    server_series,
)
from aaco.session.bundle import Session

FLOW_CAT = "op_to_kernel"
FLOW_NAME = "launch"

HOST = "host"
ORT = "onnxruntime"

_encode = msgspec.json.Encoder().encode

# Telemetry columns drawn as counters: (column, counter name, series key, scale).
_COUNTERS: tuple[tuple[str, str, str, float], ...] = (
    ("proc_cpu_pct", "worker CPU", "%", 1.0),
    ("proc_rss_bytes", "worker RSS", "MiB", 1.0 / (1 << 20)),
    ("sys_cpu_pct", "system CPU", "%", 1.0),
    ("cpu_freq_mhz", "CPU frequency", "MHz", 1.0),
    ("load_1m", "load average", "1m", 1.0),
)


def us(ns: int) -> str:
    """Nanoseconds as an exact decimal number of microseconds (``1234567`` -> ``1234.567``)."""
    if ns >= 0:
        return f"{ns // 1000}.{ns % 1000:03d}"
    return "-" + us(-ns)


def _js(s: str) -> str:
    return _encode(s).decode()


@dataclass
class ClockDomain:
    """Timestamps that share one clock; ``offset_ns`` is added to place them on the trace."""

    key: str
    label: str
    aligned_to_host: bool = False
    offset_ns: int = 0
    note: str = ""
    min_ns: int | None = None

    def see(self, ns: int) -> None:
        if self.min_ns is None or ns < self.min_ns:
            self.min_ns = ns


# One slice waiting for layout: (start_ns, -dur_ns, seq, name_json, cat_json, args_json, ref).
# ``ref`` is the ops/kernels row for flow endpoints, -1 otherwise; seq keeps sorting stable
# and away from the strings.
_Rec = tuple[int, int, int, str, str, str, int]


@dataclass
class _Track:
    pid: int
    tid: int
    name: str
    sort: int
    mode: Literal["nest", "seq"]
    ref_kind: Literal["op", "kernel", ""]
    recs: list[_Rec] = field(default_factory=list)
    #: thread-scoped instant events: (ts ns, name json, cat json, args json)
    instants: list[tuple[int, str, str, str]] = field(default_factory=list)
    written: bool = False


@dataclass
class _Process:
    pid: int
    domain: ClockDomain
    name: str
    sort: int


class _Builder:
    """Collects slices per track and counters, then lays out and writes the trace."""

    def __init__(self) -> None:
        self._next_id = 1
        self._seq = 0
        self.domains: dict[str, ClockDomain] = {}
        self.processes: dict[tuple[str, str], _Process] = {}
        self.tracks: dict[tuple[int, str], _Track] = {}
        self.extra_threads: list[tuple[int, int, str, int]] = []  # overflow lanes
        self.counters: list[tuple[_Process, str, str, list[tuple[int, float]]]] = []
        self.op_place: dict[int, tuple[int, int, int, ClockDomain]] = {}
        self.kernel_place: dict[int, tuple[int, int, int, ClockDomain]] = {}
        self.skipped: dict[str, int] = {}
        self._proc_by_pid: dict[int, _Process] = {}
        # Kernel and op names repeat thousands of times: escape each once.
        self._json_str: dict[str, str] = {}
        self._source_domain: dict[str, ClockDomain] = {}
        #: what the host clock's process is named (the command that measured on it) and the
        #: process its telemetry counters watched
        self.host_name = "aaco run"
        self.watched = "worker"

    def _new_id(self) -> int:
        i = self._next_id
        self._next_id += 1
        return i

    def skip(self, why: str, n: int = 1) -> None:
        if n:
            self.skipped[why] = self.skipped.get(why, 0) + n

    def domain(self, key: str, label: str) -> ClockDomain:
        d = self.domains.get(key)
        if d is None:
            d = self.domains[key] = ClockDomain(key, label)
        return d

    def process(self, domain: ClockDomain, key: str, name: str, sort: int) -> _Process:
        p = self.processes.get((domain.key, key))
        if p is None:
            rank = list(self.domains).index(domain.key)
            p = _Process(self._new_id(), domain, name, rank * 10_000 + sort)
            self.processes[(domain.key, key)] = p
        return p

    def track(
        self,
        proc: _Process,
        key: str,
        name: str,
        sort: int,
        mode: Literal["nest", "seq"] = "nest",
        ref_kind: Literal["op", "kernel", ""] = "",
    ) -> _Track:
        t = self.tracks.get((proc.pid, key))
        if t is None:
            t = _Track(proc.pid, self._new_id(), name, sort * 100, mode, ref_kind)
            self.tracks[(proc.pid, key)] = t
        return t

    def add(
        self,
        proc: _Process,
        track: _Track,
        start: int,
        dur: int,
        name: str,
        cat: str,
        args: dict[str, Any] | None = None,
        ref: int = -1,
    ) -> None:
        if dur < 0:
            self.skip("negative_duration")
            return
        proc.domain.see(start)
        self._seq += 1
        track.recs.append(
            (
                start,
                -dur,
                self._seq,
                _js(name),
                _js(cat),
                _encode(args).decode() if args else "{}",
                ref,
            )
        )

    def instant(
        self,
        proc: _Process,
        track: _Track,
        ts: int,
        name: str,
        cat: str,
        args: dict[str, Any] | None = None,
    ) -> None:
        proc.domain.see(ts)
        body = _encode(args).decode() if args else "{}"
        track.instants.append((ts, _js(name), _js(cat), body))

    def counter(
        self, proc: _Process, name: str, key: str, samples: list[tuple[int, float]]
    ) -> None:
        if samples:
            proc.domain.see(min(t for t, _ in samples))
            self.counters.append((proc, name, key, samples))

    # -- layout ---------------------------------------------------------------------------
    def _lanes(self, track: _Track) -> tuple[list[int], list[int]]:
        """Lane of each (sorted) record and, for nesting tracks, a free point inside each.

        The free point is a time inside the slice that none of its children covers (the
        middle of the first gap of at least 2 ns), so a flow event there binds to this slice
        and not to a child; slices with no such gap fall back to their start.
        """
        recs = track.recs
        n = len(recs)
        lane_of = [0] * n
        free = [0] * n
        if track.mode == "seq":
            ends: list[int] = []
            for i, (start, negdur, *_rest) in enumerate(recs):
                free[i] = start
                li = next((k for k, end in enumerate(ends) if start >= end), len(ends))
                if li == len(ends):
                    ends.append(0)
                ends[li] = start - negdur
                lane_of[i] = li
            return lane_of, free
        # Nesting: each lane is a stack of open slices; a slice goes to the first lane where
        # it fits inside the innermost open slice (or the lane is empty at its start).
        stacks: list[list[int]] = []
        cursor = [0] * n
        found = [False] * n

        def close(j: int) -> None:
            end_j = recs[j][0] - recs[j][1]
            if not found[j]:
                if end_j - cursor[j] >= 2:
                    free[j] = cursor[j] + (end_j - cursor[j]) // 2
                else:
                    free[j] = recs[j][0]

        for i, (start, negdur, *_rest) in enumerate(recs):
            end = start - negdur
            cursor[i] = start
            placed = -1
            for li, stack in enumerate(stacks):
                while stack and recs[stack[-1]][0] - recs[stack[-1]][1] <= start:
                    close(stack.pop())
                if not stack or end <= recs[stack[-1]][0] - recs[stack[-1]][1]:
                    placed = li
                    break
            if placed < 0:
                placed = len(stacks)
                stacks.append([])
            stack = stacks[placed]
            if stack:
                p = stack[-1]
                if not found[p] and start - cursor[p] >= 2:
                    free[p] = cursor[p] + (start - cursor[p]) // 2
                    found[p] = True
                cursor[p] = max(cursor[p], end)
            stack.append(i)
            lane_of[i] = placed
        for stack in stacks:
            while stack:
                close(stack.pop())
        return lane_of, free

    def _write_instants(self, out: list[str]) -> None:
        for track in self.tracks.values():
            if not track.instants:
                continue
            off = self._proc_by_pid[track.pid].domain.offset_ns
            head = f'{{"ph":"i","s":"t","pid":{track.pid},"tid":{track.tid},"ts":'
            for ts, name, cat, args in sorted(track.instants):
                out.append(f'{head}{us(ts + off)},"name":{name},"cat":{cat},"args":{args}}}')
            track.instants = []
            track.written = True

    def _write_slices(self, out: list[str]) -> None:
        for track in self.tracks.values():
            if not track.recs:
                continue
            track.recs.sort()
            lane_of, free = self._lanes(track)
            domain = self._proc_by_pid[track.pid].domain
            off = domain.offset_ns
            lane_tids = [track.tid]
            for li in range(1, max(lane_of) + 1):
                tid = self._new_id()
                label = "(overlap)" if li == 1 else f"(overlap {li})"
                self.extra_threads.append(
                    (track.pid, tid, f"{track.name} {label}", track.sort + li)
                )
                lane_tids.append(tid)
            head = f'{{"ph":"X","pid":{track.pid},"tid":'
            for i, (start, negdur, _seq, name, cat, args, ref) in enumerate(track.recs):
                tid = lane_tids[lane_of[i]]
                out.append(
                    f'{head}{tid},"ts":{us(start + off)},"dur":{us(-negdur)},'
                    f'"name":{name},"cat":{cat},"args":{args}}}'
                )
                if ref >= 0:
                    if track.ref_kind == "op":
                        self.op_place[ref] = (track.pid, tid, free[i], domain)
                    elif track.ref_kind == "kernel":
                        self.kernel_place[ref] = (track.pid, tid, start, domain)
            track.recs = []  # written: let the encoded strings go before the join
            track.written = True

    def _write_counters(self, out: list[str]) -> None:
        for proc, name, key, samples in self.counters:
            off = proc.domain.offset_ns
            head = f'{{"ph":"C","pid":{proc.pid},"name":{_js(name)},"ts":'
            k = _js(key)
            for ts, v in sorted(samples):
                out.append(f'{head}{us(ts + off)},"args":{{{k}:{v!r}}}}}')

    def _write_flows(self, out: list[str], pairs: Iterator[tuple[int, int]]) -> int:
        n = 0
        for op_row, kernel_row in pairs:
            src = self.op_place.get(op_row)
            dst = self.kernel_place.get(kernel_row)
            if src is None or dst is None:
                self.skip("flow_endpoint_not_drawn")
                continue
            n += 1
            out.append(
                f'{{"ph":"s","id":{n},"pid":{src[0]},"tid":{src[1]},'
                f'"ts":{us(src[2] + src[3].offset_ns)},"cat":"{FLOW_CAT}","name":"{FLOW_NAME}"}}'
            )
            out.append(
                f'{{"ph":"f","bp":"e","id":{n},"pid":{dst[0]},"tid":{dst[1]},'
                f'"ts":{us(dst[2] + dst[3].offset_ns)},"cat":"{FLOW_CAT}","name":"{FLOW_NAME}"}}'
            )
        return n

    def _write_metadata(self, out: list[str]) -> None:
        for p in self.processes.values():
            name = _js(f"{p.name} [{p.domain.label}]")
            out.append(f'{{"ph":"M","pid":{p.pid},"name":"process_name","args":{{"name":{name}}}}}')
            out.append(
                f'{{"ph":"M","pid":{p.pid},"name":"process_sort_index",'
                f'"args":{{"sort_index":{p.sort}}}}}'
            )
        threads = [(t.pid, t.tid, t.name, t.sort) for t in self.tracks.values() if t.written]
        for pid, tid, name, sort in threads + self.extra_threads:
            out.append(
                f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name",'
                f'"args":{{"name":{_js(name)}}}}}'
            )
            out.append(
                f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_sort_index",'
                f'"args":{{"sort_index":{sort}}}}}'
            )

    def build(self, pairs: Iterator[tuple[int, int]], other: dict[str, Any]) -> bytes:
        self._proc_by_pid = {p.pid: p for p in self.processes.values()}
        body: list[str] = []
        self._write_slices(body)
        self._write_instants(body)
        self._write_counters(body)
        flows = self._write_flows(body, pairs)
        meta: list[str] = []
        self._write_metadata(meta)
        other = {
            **other,
            "clock_domains": [
                {
                    "name": d.label,
                    "key": d.key,
                    "offset_ns": d.offset_ns,
                    "aligned_to_host": d.aligned_to_host,
                    "note": d.note,
                }
                for d in self.domains.values()
                if d.min_ns is not None
            ],
            "flows": flows,
            "overflow_tracks": len(self.extra_threads),
            "skipped": self.skipped,
        }
        text = (
            '{"traceEvents":[\n'
            + ",\n".join(meta + body)
            + '\n],"displayTimeUnit":"ns","otherData":'
            + _encode(other).decode()
            + "}\n"
        )
        return text.encode()


# -- reading the bundle -------------------------------------------------------------------
def _cols(table: pa.Table, names: Sequence[str]) -> list[list[Any]]:
    return [table.column(n).to_pylist() for n in names]


def _nonempty(session: Session, name: str) -> pa.Table | None:
    t = session.table(name)
    return t if t is not None and t.num_rows else None


def _domain_for(b: _Builder, source: str) -> ClockDomain:
    d = b._source_domain.get(source)
    if d is None:
        if source == ORT:
            d = b.domain(ORT, "ORT profile clock")
        else:
            # Kineto writes its framework ops as source `pytorch`: same trace, same clock.
            key = "kineto" if source in ("kineto", "pytorch") else source
            d = b.domain(key, f"{key} trace clock")
        b._source_domain[source] = d
    return d


def _clean(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


def _host_process(b: _Builder) -> _Process:
    return b.process(b.domain(HOST, "host monotonic clock"), "run", b.host_name, 0)


def _add_host(b: _Builder, session: Session) -> None:
    phases = session.meta.get("phases")
    if isinstance(phases, dict):
        for name, span in phases.items():
            if (
                isinstance(span, list)
                and len(span) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span)
            ):
                proc = _host_process(b)
                b.add(
                    proc,
                    b.track(proc, "phases", "phases", 0),
                    span[0],
                    span[1] - span[0],
                    str(name),
                    "phase",
                )
    iters = _nonempty(session, "inference_iters")
    if iters is not None:
        proc = _host_process(b)
        phase, it, start, end = _cols(iters, ("phase", "iteration", "start_ns", "end_ns"))
        for ph, i, s, e in zip(phase, it, start, end, strict=True):
            label = "iteration" if ph == "measured" else str(ph)
            track = b.track(proc, f"iters:{ph}", f"{ph} iterations", 1 if ph == "warmup" else 2)
            b.add(proc, track, s, e - s, f"{label} {i}", "iteration", {"phase": ph, "iteration": i})
    events = _nonempty(session, "system_events")
    if events is not None:
        proc = _host_process(b)
        ts = events.column("ts_ns").to_pylist()
        for col, name, key, scale in _COUNTERS:
            name = name.replace("worker", b.watched)
            values = events.column(col).to_pylist()
            samples = [
                (t, round(float(v) * scale, 6) if scale != 1.0 else float(v))
                for t, v in zip(ts, values, strict=True)
                if v is not None and math.isfinite(v)
            ]
            b.counter(proc, name, key, samples)


#: GPU telemetry columns drawn as counters per device: (column, counter name, unit key)
_GPU_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("sm_clock_mhz", "SM clock", "MHz"),
    ("sm_clock_max_mhz", "SM clock max", "MHz"),
    ("mem_clock_mhz", "memory clock", "MHz"),
    ("power_w", "power", "W"),
    ("power_limit_w", "power limit", "W"),
    ("util_gpu_pct", "GPU busy", "%"),
    ("util_mem_pct", "memory controller busy", "%"),
    ("temp_c", "temperature", "degC"),
    ("temp_hotspot_c", "hotspot temperature", "degC"),
    ("temp_mem_c", "memory temperature", "degC"),
)


def _add_machine(b: _Builder, session: Session) -> None:
    """The GPU and scheduler telemetry, on the host clock like the iterations: per device
    its clocks, power, utilisation and temperatures, the energy it used since its first
    sample and its throttled periods (slices named by their reasons); per worker thread
    its run-queue wait (ms waited per s), and the system's PSI cpu ``some`` and the other
    tasks' CPU on the worker's CPUs."""
    devices = gpu_devices(_nonempty(session, "gpu_telemetry"))
    threads = _nonempty(session, "sched_threads")
    system = _nonempty(session, "sched_system")
    if not devices and threads is None and system is None:
        return  # no host domain created for a bundle without them: process order unchanged
    domain = b.domain(HOST, "host monotonic clock")
    for dev, t in devices.items():
        name = next((n for n in t.column("name").to_pylist() if n), None)
        label = f"GPU {dev} telemetry" + (f" ({name})" if name else "")
        proc = b.process(domain, f"gpu-telemetry:{dev}", label, 300 + dev)
        for col, counter, key in _GPU_COUNTERS:
            b.counter(proc, counter, key, column_series(t, col))
        if any(v is not None for v in t.column("energy_j").to_pylist()):
            energy = [(ts, round(j, 6)) for ts, j in energy_series(t)]
            b.counter(proc, "energy since first sample", "J", energy)
        track = b.track(proc, "throttle", "clock throttling", 0)
        for start, end, why in throttle_periods(t):
            b.add(proc, track, start, end - start, why, "throttle", {"reasons": why.split(", ")})
    if threads is None and system is None:
        return
    proc = b.process(domain, "sched", f"scheduler ({b.watched} threads, system)", 200)
    for tid, (comm, rates) in sorted(thread_wait_rates(threads).items()):
        # ns waited per ns = ms waited per ms; x 1000: ms waited per s
        samples = [(ts, round(r * 1000.0, 6)) for ts, r in rates]
        b.counter(proc, f"run-queue wait {comm} [{tid}]", "ms/s", samples)
    # PSI totals are microseconds: Δus / Δns x 1e3 is the stalled fraction, x 100 in %
    psi = [(ts, round(v, 6)) for ts, v in counter_rate_series(system, "psi_cpu_some_us", 1e5)]
    b.counter(proc, "PSI cpu some", "%", psi)
    other = column_series(system, "other_cpu_pct")
    b.counter(proc, f"other tasks on the {b.watched}'s CPUs", "%", other)


def _add_ort_runs(b: _Builder, session: Session) -> None:
    runs = _nonempty(session, "ort_runs")
    if runs is None:
        return
    proc = b.process(_domain_for(b, ORT), "ort", "ONNX Runtime profiled pass", 0)
    track = b.track(proc, "runs", "profiled runs", 0)
    cols = _cols(runs, ("iteration", "start_ns", "dur_ns", "node_ns", "node_count", "wall_ns"))
    for i, s, d, node_ns, count, wall in zip(*cols, strict=True):
        args = _clean({"iteration": i, "node_ns": node_ns, "node_count": count, "wall_ns": wall})
        b.add(proc, track, s, d, f"profiled run {i}", "iteration", args)


def _cpu_process(b: _Builder, domain: ClockDomain, pid: int | None) -> _Process:
    if domain.key == ORT:
        return b.process(domain, "ort", "ONNX Runtime profiled pass", 0)
    if pid is None:
        return b.process(domain, "host:?", "host process (pid unknown)", 1)
    return b.process(domain, f"host:{pid}", f"process {pid}", 1)


def _thread_track(b: _Builder, proc: _Process, tid: int | None) -> _Track:
    if tid is None:
        return b.track(proc, "thread:?", "thread (id unknown)", 9, ref_kind="op")
    return b.track(proc, f"thread:{tid}", f"thread {tid}", 5, ref_kind="op")


def _add_ops(b: _Builder, session: Session) -> None:
    ops = _nonempty(session, "ops")
    if ops is None:
        return
    names = (
        "source",
        "node_name",
        "op_type",
        "provider",
        "start_ns",
        "dur_ns",
        "nested_ns",
        "thread_id",
        "process_id",
        "iteration",
        "external_id",
    )
    # ONNX Runtime's nodes are named by the original ONNX node they stand for; ORT's own
    # name goes into the args (docs/metrics.md, "Operator names")
    labels = {n: x for n, x in session_op_names(session).by_node.items() if x.renamed}
    for row, (src, node, op_type, prov, s, d, nested, tid, pid, it, ext) in enumerate(
        zip(*_cols(ops, names), strict=True)
    ):
        if s is None:
            b.skip("op_without_start")
            continue
        proc = _cpu_process(b, _domain_for(b, src), pid)
        renamed = labels.get(node)
        args = _clean(
            {
                "op_type": op_type,
                "provider": prov,
                "iteration": it,
                "external_id": ext,
                "ort_node": node if renamed is not None else None,
            }
        )
        name = renamed.label if renamed is not None else node
        # the slice spans the nodes an If/Loop/Scan ran too, so they draw nested in it
        span = d + (nested or 0)
        b.add(proc, _thread_track(b, proc, tid), s, span, name, "op", args, ref=row)


def _add_api_calls(b: _Builder, session: Session) -> None:
    api = _nonempty(session, "api_calls")
    if api is None:
        return
    names = (
        "source",
        "domain",
        "name",
        "kind",
        "process_id",
        "thread_id",
        "start_ns",
        "dur_ns",
        "correlation_id",
        "external_id",
    )
    for src, dom, name, kind, pid, tid, s, d, corr, ext in zip(*_cols(api, names), strict=True):
        proc = _cpu_process(b, _domain_for(b, src), pid)
        args = _clean({"domain": dom, "kind": kind, "correlation": corr, "external_id": ext})
        b.add(proc, _thread_track(b, proc, tid), s, d, name, "api", args)


def _gpu_process(b: _Builder, domain: ClockDomain, device: int | None) -> _Process:
    if device is None:
        return b.process(domain, "gpu:?", "GPU (device unknown)", 999)
    return b.process(domain, f"gpu:{device}", f"GPU {device}", 500 + device)


def _stream_track(b: _Builder, proc: _Process, stream: int | None, suffix: str = "") -> _Track:
    key = f"stream:{stream}{suffix}"
    name = f"stream {stream if stream is not None else '(unknown)'}{suffix}"
    sort = 1 if stream is None else 2
    return b.track(proc, key, name, sort, mode="seq", ref_kind="kernel")


def _add_kernels(b: _Builder, session: Session) -> None:
    kernels = _nonempty(session, "kernels")
    if kernels is None:
        return
    names = (
        "source",
        "name",
        "short_name",
        "family",
        "start_ns",
        "dur_ns",
        "time_is_gpu",
        "device",
        "stream",
        "correlation_id",
        "external_id",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers",
        "shared_bytes",
        "iteration",
    )
    for row, (
        src,
        name,
        short,
        fam,
        s,
        d,
        is_gpu,
        dev,
        stream,
        corr,
        ext,
        gx,
        gy,
        gz,
        bx,
        by,
        bz,
        regs,
        shared,
        it,
    ) in enumerate(zip(*_cols(kernels, names), strict=True)):
        proc = _gpu_process(b, _domain_for(b, src), dev)
        # ORT Kernel events carry the parent node's start, not a device time: keep them
        # apart so nobody reads their position as when the GPU ran them.
        suffix = "" if is_gpu else " (start = parent node start; durations real)"
        args = _clean(
            {
                "kernel": name if short and short != name else None,
                "family": fam,
                "correlation": corr,
                "external_id": ext,
                "grid": [gx, gy, gz] if gx is not None else None,
                "block": [bx, by, bz] if bx is not None else None,
                "registers": regs,
                "shared_bytes": shared,
                "iteration": it,
            }
        )
        b.add(
            proc,
            _stream_track(b, proc, stream, suffix),
            s,
            d,
            short or name,
            "kernel",
            args,
            ref=row,
        )


def _add_memcpy(b: _Builder, session: Session) -> None:
    mc = _nonempty(session, "memcpy")
    if mc is None:
        return
    names = (
        "source",
        "name",
        "kind",
        "bytes",
        "start_ns",
        "dur_ns",
        "device",
        "stream",
        "correlation_id",
    )
    for src, name, kind, nbytes, s, d, dev, stream, corr in zip(*_cols(mc, names), strict=True):
        proc = _gpu_process(b, _domain_for(b, src), dev)
        if stream is None:
            track = b.track(proc, "copies", "copies (stream unknown)", 3, mode="seq")
        else:
            track = _stream_track(b, proc, stream)
        args = _clean({"kind": kind, "bytes": nbytes, "correlation": corr})
        b.add(proc, track, s, d, name, "memcpy", args)


def _add_annotations(b: _Builder, session: Session) -> None:
    ann = _nonempty(session, "annotations")
    if ann is None:
        return
    names = (
        "source",
        "kind",
        "name",
        "process_id",
        "thread_id",
        "device",
        "stream",
        "start_ns",
        "dur_ns",
        "step",
    )
    for src, kind, name, pid, tid, dev, stream, s, d, step in zip(*_cols(ann, names), strict=True):
        domain = _domain_for(b, src)
        args = _clean({"kind": kind, "step": step})
        if kind == "gpu_user":
            proc = _gpu_process(b, domain, dev)
            label = stream if stream is not None else "(unknown)"
            track = b.track(proc, f"ann:{stream}", f"annotations, stream {label}", 4)
        elif kind == "step":
            proc = _cpu_process(b, domain, pid)
            track = b.track(proc, "steps", "profiler steps", 0)
        elif kind == "marker" and tid is None:
            proc = _cpu_process(b, domain, pid)
            track = b.track(proc, "markers", "markers", 1)
        else:
            proc = _cpu_process(b, domain, pid)
            track = _thread_track(b, proc, tid)
        b.add(proc, track, s, d, name, kind, args)


def _flow_pairs(session: Session) -> Iterator[tuple[int, int]]:
    m = _nonempty(session, "op_kernel_map")
    if m is None:
        return
    ops, kernels = _cols(m, ("op_row", "kernel_row"))
    for op_row, kernel_row in zip(ops, kernels, strict=True):
        if op_row is not None:
            yield op_row, kernel_row


# -- clocks -------------------------------------------------------------------------------
def _ort_to_host_ns(session: Session) -> tuple[int, int] | None:
    """Offset from the ORT profile clock to the host clock, and its error bound, or None.

    ``aaco run`` records the host-clock end of the last profiled ``session.run`` call
    (``phases.profile[1]``); that call's ``model_run`` ends inside it, at most
    ``wall_ns - dur_ns`` earlier. Matching the two ends gives the offset to within that bound.
    """
    phases = session.meta.get("phases")
    span = phases.get("profile") if isinstance(phases, dict) else None
    runs = _nonempty(session, "ort_runs")
    if not (isinstance(span, list) and len(span) == 2 and isinstance(span[1], int)) or runs is None:
        return None
    iters, starts, durs, walls = _cols(runs, ("iteration", "start_ns", "dur_ns", "wall_ns"))
    last = max(range(len(iters)), key=lambda i: (starts[i], iters[i]))
    wall = walls[last]
    if wall is None or wall < durs[last]:
        return None
    return span[1] - (starts[last] + durs[last]), wall - durs[last]


def _place_domains(b: _Builder, session: Session) -> None:
    host = b.domains.get(HOST)
    ort = b.domains.get(ORT)
    base: int | None = host.min_ns if host is not None else None
    if ort is not None and ort.min_ns is not None and host is not None and host.min_ns is not None:
        est = _ort_to_host_ns(session)
        if est is not None:
            shift, bound = est
            ort.aligned_to_host = True
            ort.label = f"ORT profile clock, aligned to host clock within {us(bound)} us"
            ort.note = (
                "end of the last profiled model_run matched to the host-clock end of its "
                f"session.run call; shifted by {shift} ns, error between 0 and {bound} ns"
            )
            base = min(host.min_ns, ort.min_ns + shift)
            ort.offset_ns = shift - base
    for d in b.domains.values():
        if d.min_ns is None:
            continue
        if d.key == HOST:
            d.offset_ns = -(base or 0)
            d.note = "host monotonic clock (perf_counter_ns); trace time 0 = first host event"
        elif not d.aligned_to_host:
            # Nothing in the bundle ties this clock to the host's: start it at trace time 0
            # in its own processes rather than pretend the two are aligned.
            d.offset_ns = -d.min_ns
            d.label = f"{d.label}, not aligned to other clocks"
            d.note = f"own clock, shifted by {-d.min_ns} ns so its first event is at 0"


# -- serving benchmarks ---------------------------------------------------------------------
#: chunk instants drawn at most; beyond, none are (``otherData.skipped``)
MAX_CHUNK_INSTANTS = 200_000
#: server metrics drawn as counters: (AACO metric, counter name, unit key, scale)
_SERVER_COUNTERS: tuple[tuple[str, str, str, float], ...] = (
    ("running", "server running", "requests", 1.0),
    ("waiting", "server waiting", "requests", 1.0),
    ("kv_cache_usage", "server KV-cache usage", "%", 100.0),
)


def _serving_host(b: _Builder, session: Session) -> None:
    """Name the host process and its telemetry after what a serving benchmark measured."""
    cfg = session.meta.get("serving")
    b.host_name = "aaco llm bench" if isinstance(cfg, dict) and cfg.get("url") else "aaco llm run"
    tel = session.meta.get("telemetry")
    process = tel.get("process") if isinstance(tel, dict) else None
    b.watched = process if process in ("server", "client") else "watched"


def _add_serving(b: _Builder, session: Session) -> None:
    """One track per request (``queued``, ``prefill``, ``decode``; ``failed`` for an error),
    an instant per chunk, and counters: requests in flight and the server's /metrics."""
    spans = request_spans(session)
    if not spans and not _nonempty(session, "server_metrics"):
        return
    host = _host_process(b)
    labels = point_labels(session)
    chunks = _chunks_by_request(session)
    n_chunks = sum(len(c) for c in chunks.values())
    if n_chunks > MAX_CHUNK_INSTANTS:
        # a long benchmark streams millions of chunks: the request slices stay, the instants
        # would make the file hundreds of MB
        b.skip("chunk_instants_over_limit", n_chunks)
        chunks = {}
    for order, sp in enumerate(spans):
        label = labels.get(sp.point, f"point {sp.point}")
        proc = b.process(host.domain, f"serving:{sp.point}", f"requests, {label}", 10 + sp.point)
        warm = " (warmup)" if sp.phase != "measured" else ""
        track = b.track(proc, f"request:{sp.request}", f"request {sp.request}{warm}", order)
        ids = {"point": sp.point, "request": sp.request, "phase": sp.phase}
        if sp.queued_ns > 0:
            b.add(proc, track, sp.start_ns, sp.queued_ns, "queued", "serving", ids)
        if sp.end_ns is None:
            b.skip("request_without_end")
        elif sp.status != "ok":
            args = _clean({**ids, "status": sp.status, "error": sp.error})
            b.add(proc, track, sp.sent_ns, sp.end_ns - sp.sent_ns, "failed", "serving", args)
        elif sp.first_token_ns is None:
            args = {**ids, "output_tokens": sp.output_tokens}
            b.add(proc, track, sp.sent_ns, sp.end_ns - sp.sent_ns, "request", "serving", args)
        else:
            first = sp.first_token_ns
            b.add(proc, track, sp.sent_ns, first - sp.sent_ns, "prefill", "serving", ids)
            args = _clean({**ids, "output_tokens": sp.output_tokens})
            b.add(proc, track, first, sp.end_ns - first, "decode", "serving", args)
        for t, kind, tokens in chunks.get((sp.point, sp.request), []):
            b.instant(proc, track, t, "chunk", "chunk", _clean({"kind": kind, "tokens": tokens}))
    flight = in_flight(spans)
    b.counter(host, "in-flight", "requests", [(t, float(n)) for t, n in flight])
    series = server_series(session.table("server_metrics"))
    for metric, name, key, scale in _SERVER_COUNTERS:
        samples = [(t, round(v * scale, 6)) for t, v in series.get(metric, [])]
        b.counter(host, name, key, samples)


def _chunks_by_request(session: Session) -> dict[tuple[int, int], list[tuple[int, str, Any]]]:
    t = _nonempty(session, "serving_chunks")
    out: dict[tuple[int, int], list[tuple[int, str, Any]]] = {}
    if t is None:
        return out
    for p, r, ts, kind, tokens in zip(
        *_cols(t, ("point", "request", "t_ns", "kind", "tokens")), strict=True
    ):
        out.setdefault((p, r), []).append((ts, kind, tokens))
    return out


def _add_critical_path(b: _Builder, session: Session) -> None:
    """One process per traced process (rank) with its critical path as a track of slices,
    each named by its kind and event, on the GPU trace's clock (computed here: the bundle
    keeps only the longest segments)."""
    kernels = _nonempty(session, "kernels")
    memcpy = _nonempty(session, "memcpy")
    gpu = kernels if kernels is not None else memcpy
    if gpu is None:
        return
    from aaco.analysis.critical_path import critical_paths

    tables = {n: session.table(n) for n in ("kernels", "api_calls", "memcpy", "annotations")}
    tables["ops"] = session.ops()
    try:
        paths = critical_paths(tables)
    except Exception:  # the timeline is still worth having without the path
        b.skip("critical_path_failed")
        return
    src = gpu.column("source")[0].as_py() if "source" in gpu.column_names else "trace"
    domain = _domain_for(b, src or "trace")
    for cp in paths:
        label = f"critical path (process {cp.process_id})" if cp.process_id else "critical path"
        proc = b.process(domain, f"critical_path:{cp.process_id}", label, 9_000)
        track = b.track(proc, "path", f"critical path, {cp.length_ns / 1e6:.3f} ms", 1, mode="seq")
        for sg in cp.segments:
            args = _clean(
                {
                    "category": sg.category,
                    "operator": sg.operator,
                    "where": sg.where,
                    "unexplained": sg.unexplained or None,
                    "meanwhile": sg.meanwhile,
                }
            )
            name = f"{sg.kind}: {sg.name}" if sg.name else sg.kind
            b.add(proc, track, sg.start_ns, sg.dur_ns, name, "critical_path", args)


def export_perfetto(session: Session) -> bytes:
    """The session as a Chrome JSON trace (UTF-8 bytes) for ui.perfetto.dev.

    >>> data = export_perfetto(Session.load("sessions/latest"))   # doctest: +SKIP
    >>> Path("trace.json").write_bytes(data)                       # doctest: +SKIP
    """
    b = _Builder()
    serving = is_serving(session)
    if serving:
        _serving_host(b, session)
    # Domain creation order fixes the process order: host first, then ORT, then imports.
    _add_host(b, session)
    _add_machine(b, session)
    if serving:
        _add_serving(b, session)
    _add_ort_runs(b, session)
    _add_ops(b, session)
    _add_annotations(b, session)
    _add_api_calls(b, session)
    _add_kernels(b, session)
    _add_memcpy(b, session)
    _add_critical_path(b, session)
    _place_domains(b, session)
    other = {"aaco_session": session.session_id, "generator": "aaco export perfetto"}
    return b.build(_flow_pairs(session), other)


class PerfettoRenderer(Renderer):
    """The session as a Perfetto-loadable Chrome JSON trace (text; see :func:`export_perfetto`)."""

    name = "perfetto"
    output_file_extension = ".json"
    output_is_binary = False

    def render(self, session: Session) -> str:
        return export_perfetto(session).decode()
