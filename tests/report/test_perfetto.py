"""``aaco export perfetto``: the Chrome JSON trace of a bundle, checked by a format validator.

Bundles are built here with :class:`BundleWriter` and the schema's ``from_rows`` (timelines
whose answer is known by construction), plus one real ``aaco run`` of the built-in ``mlp``.
The validator checks the rules Perfetto's JSON importer relies on: required fields per
``ph``, strict nesting of ``X`` slices per (pid, tid), paired flows bound to slices, numeric
counters and metadata naming every pid/tid.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aaco.report.perfetto import FLOW_CAT, PerfettoRenderer, export_perfetto, us
from aaco.session.bundle import FORMAT_VERSION, BundleWriter, Session
from aaco.session.schema import TABLES

# -- the validator ------------------------------------------------------------------------


def _ns(v: Any) -> int:
    assert isinstance(v, (int, float)) and not isinstance(v, bool), v
    n = round(v * 1000)
    assert abs(v * 1000 - n) < 1e-3, f"{v} us is not a whole number of ns"
    return n


@dataclass
class Slice:
    pid: int
    tid: int
    start: int
    end: int
    name: str
    cat: str
    args: dict[str, Any]


@dataclass
class Trace:
    events: list[dict[str, Any]]
    other: dict[str, Any]
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)
    counters: dict[tuple[int, str], list[tuple[int, dict[str, float]]]] = field(
        default_factory=dict
    )
    flows: list[tuple[Slice, Slice]] = field(default_factory=list)  # (op slice, kernel slice)

    def track_of(self, s: Slice) -> str:
        return self.thread_names[(s.pid, s.tid)]

    def process_of(self, s: Slice) -> str:
        return self.process_names[s.pid]

    def named(self, name: str) -> list[Slice]:
        return [s for s in self.slices if s.name == name]


def _deepest(slices: list[Slice], starts: list[int], ts: int) -> Slice | None:
    """The innermost slice of a nested, sorted track that is open at ``ts`` (start <= ts < end).

    Going back from the last slice starting at or before ``ts``, the first one still open
    is the innermost: slices that enclose it start earlier (or, at the same start, are longer
    and sort earlier).
    """
    for i in range(bisect.bisect_right(starts, ts) - 1, -1, -1):
        if slices[i].end > ts:
            return slices[i]
    return None


def validate(data: bytes) -> Trace:
    """Parse a trace and check the format rules; return it decoded for content checks."""
    top = json.loads(data.decode("utf-8"))
    assert isinstance(top, dict) and isinstance(top["traceEvents"], list)
    trace = Trace(top["traceEvents"], top.get("otherData", {}))
    flow_s: dict[int, dict[str, Any]] = {}
    flow_f: dict[int, dict[str, Any]] = {}
    used_pids: set[int] = set()
    used_tracks: set[tuple[int, int]] = set()
    for e in trace.events:
        ph = e["ph"]
        assert isinstance(e["pid"], int)
        used_pids.add(e["pid"])
        if ph == "M":
            assert e["name"] in {
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            }
            if e["name"] == "process_name":
                trace.process_names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                trace.thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
            elif e["name"].endswith("sort_index"):
                assert isinstance(e["args"]["sort_index"], int)
        elif ph == "X":
            assert isinstance(e["tid"], int) and isinstance(e["name"], str)
            assert isinstance(e["cat"], str) and isinstance(e.get("args", {}), dict)
            start, dur = _ns(e["ts"]), _ns(e["dur"])
            assert dur >= 0
            used_tracks.add((e["pid"], e["tid"]))
            trace.slices.append(
                Slice(e["pid"], e["tid"], start, start + dur, e["name"], e["cat"], e["args"])
            )
        elif ph == "C":
            assert isinstance(e["name"], str) and e["args"]
            for v in e["args"].values():
                assert isinstance(v, (int, float)) and not isinstance(v, bool)
            trace.counters.setdefault((e["pid"], e["name"]), []).append((_ns(e["ts"]), e["args"]))
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int) and isinstance(e["tid"], int)
            assert isinstance(e["cat"], str) and isinstance(e["name"], str)
            _ns(e["ts"])
            used_tracks.add((e["pid"], e["tid"]))
            table = flow_s if ph == "s" else flow_f
            assert e["id"] not in table, f"flow id {e['id']} used twice"
            table[e["id"]] = e
            if ph == "f":
                assert e["bp"] == "e"
        else:
            raise AssertionError(f"unexpected ph {ph!r}")

    # metadata names every pid and every thread that carries events
    assert used_pids <= set(trace.process_names), used_pids - set(trace.process_names)
    assert used_tracks <= set(trace.thread_names), used_tracks - set(trace.thread_names)

    # strict nesting of X slices per (pid, tid)
    by_track: dict[tuple[int, int], list[Slice]] = {}
    for s in trace.slices:
        by_track.setdefault((s.pid, s.tid), []).append(s)
    for key, slices in by_track.items():
        slices.sort(key=lambda s: (s.start, -(s.end - s.start)))
        stack: list[Slice] = []
        for s in slices:
            while stack and stack[-1].end <= s.start:
                stack.pop()
            assert not stack or s.end <= stack[-1].end, (
                f"{s.name} [{s.start},{s.end}) partially overlaps {stack[-1].name} "
                f"[{stack[-1].start},{stack[-1].end}) on {trace.thread_names[key]}"
            )
            stack.append(s)

    # every flow start has its end; both ends bind to a slice of their track
    assert set(flow_s) == set(flow_f)
    starts = {key: [s.start for s in slices] for key, slices in by_track.items()}
    for fid, s_ev in flow_s.items():
        f_ev = flow_f[fid]
        assert (s_ev["cat"], s_ev["name"]) == (f_ev["cat"], f_ev["name"])
        src = (s_ev["pid"], s_ev["tid"])
        op = _deepest(by_track[src], starts[src], _ns(s_ev["ts"]))
        assert op is not None, f"flow {fid} starts outside any slice"
        dst = (f_ev["pid"], f_ev["tid"])
        kts = _ns(f_ev["ts"])
        k = _deepest(by_track[dst], starts[dst], kts)
        assert k is not None and k.start == kts, f"flow {fid} ends where no slice starts"
        trace.flows.append((op, k))
    return trace


# -- building bundles ---------------------------------------------------------------------

H = 5_000_000_000  # host monotonic time of the first measured iteration
B = 1_700_000_000_000_000_000  # a trace clock far from the host's (epoch-like ns)


def make_bundle(
    root: Path, tables: dict[str, list[dict[str, Any]]], meta: dict[str, Any] | None = None
) -> Session:
    w = BundleWriter(root)
    w.write_json(
        "session.json",
        {"format_version": FORMAT_VERSION, "session_id": w.session_id, "status": "completed"}
        | (meta or {}),
    )
    for name, rows in tables.items():
        w.write_table(name, TABLES[name].from_rows(rows))
    return Session.load(w.publish())


def _kernel(
    name: str, start: int, dur: int, device: int | None, stream: int | None, **kw: Any
) -> dict[str, Any]:
    return {
        "source": "kineto",
        "name": name,
        "start_ns": B + start,
        "end_ns": B + start + dur,
        "dur_ns": dur,
        "time_is_gpu": True,
        "device": device,
        "stream": stream,
        **kw,
    }


def _op(name: str, start: int, dur: int, ext: int) -> dict[str, Any]:
    return {
        "source": "pytorch",
        "node_name": name,
        "op_type": name,
        "start_ns": B + start,
        "dur_ns": dur,
        "process_id": 100,
        "thread_id": 200,
        "external_id": ext,
    }


def _api(name: str, start: int, end: int, corr: int) -> dict[str, Any]:
    return {
        "source": "kineto",
        "domain": "cuda_runtime",
        "name": name,
        "kind": "launch",
        "process_id": 100,
        "thread_id": 200,
        "start_ns": B + start,
        "end_ns": B + end,
        "dur_ns": end - start,
        "correlation_id": corr,
    }


def full_tables() -> dict[str, list[dict[str, Any]]]:
    """A Kineto-like import plus a host measured loop, on two unaligned clocks."""
    return {
        "inference_iters": [
            {
                "phase": "measured",
                "iteration": 0,
                "start_ns": H,
                "end_ns": H + 1_000_000,
                "latency_ns": 1_000_000,
            },
            {
                "phase": "measured",
                "iteration": 1,
                "start_ns": H + 1_000_000,
                "end_ns": H + 2_000_000,
                "latency_ns": 1_000_000,
            },
        ],
        "system_events": [
            {
                "ts_ns": H + 500_000,
                "proc_cpu_pct": 50.0,
                "proc_rss_bytes": 2 * 1048576,
                "sys_cpu_pct": None,
                "load_1m": 0.25,
            },
        ],
        "annotations": [
            {
                "source": "kineto",
                "kind": "step",
                "name": "ProfilerStep#3",
                "process_id": 100,
                "thread_id": 200,
                "start_ns": B,
                "dur_ns": 100_000,
                "step": 3,
            },
        ],
        "ops": [
            _op("aten::linear", 1_000, 50_000, 11),
            _op("aten::addmm", 1_000, 40_000, 12),  # starts with its parent
            _op("aten::relu", 60_000, 10_000, 13),
        ],
        "api_calls": [
            _api("cudaLaunchKernel", 2_000, 7_000, 21),
            _api("cudaLaunchKernel", 61_000, 64_000, 22),
        ],
        "kernels": [
            _kernel(
                "void gemm<float, 128>(float*)",
                10_000,
                20_000,
                0,
                7,
                short_name="gemm",
                correlation_id=21,
                grid_x=4,
                grid_y=1,
                grid_z=1,
                block_x=256,
                block_y=1,
                block_z=1,
            ),
            _kernel("overlapping_kernel", 25_000, 10_000, 0, 7),  # partial overlap
            _kernel("relu_kernel", 40_000, 1_234, 0, 7, correlation_id=22),
            _kernel("other_device_kernel", 50_000, 500, 1, 3),
        ],
        "memcpy": [
            {
                "source": "kineto",
                "name": "Memcpy HtoD",
                "kind": "HtoD",
                "bytes": 4096,
                "start_ns": B + 45_000,
                "end_ns": B + 47_000,
                "dur_ns": 2_000,
                "device": 0,
                "stream": 7,
            },
        ],
        "op_kernel_map": [
            {
                "kernel_row": 0,
                "kernel_name": "gemm",
                "dur_ns": 20_000,
                "op_row": 1,
                "op_name": "aten::addmm",
                "method": "external_id",
            },
            {
                "kernel_row": 1,
                "kernel_name": "overlapping_kernel",
                "dur_ns": 10_000,
                "op_row": 1,
                "op_name": "aten::addmm",
                "method": "external_id",
            },
            {
                "kernel_row": 2,
                "kernel_name": "relu_kernel",
                "dur_ns": 1_234,
                "op_row": 2,
                "op_name": "aten::relu",
                "method": "correlation",
            },
            {"kernel_row": 3, "kernel_name": "other_device_kernel", "dur_ns": 500},
        ],
    }


FULL_META = {"phases": {"measured": [H, H + 2_000_000]}}


@pytest.fixture
def full(tmp_path: Path) -> Trace:
    return validate(export_perfetto(make_bundle(tmp_path, full_tables(), FULL_META)))


# -- tests --------------------------------------------------------------------------------


def test_us_is_exact_decimal() -> None:
    assert us(1_234_567) == "1234.567"
    assert us(5) == "0.005"
    assert us(-1) == "-0.001"
    assert us(-1_234_567) == "-1234.567"
    assert us(B) == "1700000000000000.000"


def test_kernel_times_in_microseconds_on_device_stream_tracks(full: Trace) -> None:
    (gemm,) = full.named("gemm")
    # the Kineto clock is not tied to the host's: it starts at 0 in its own processes
    assert (gemm.start, gemm.end) == (10_000, 30_000)
    assert full.process_of(gemm) == "GPU 0 [kineto trace clock, not aligned to other clocks]"
    assert full.track_of(gemm) == "stream 7"
    assert gemm.args["kernel"] == "void gemm<float, 128>(float*)"
    assert gemm.args["grid"] == [4, 1, 1] and gemm.args["block"] == [256, 1, 1]
    (relu,) = full.named("relu_kernel")
    assert (relu.start, relu.end - relu.start) == (40_000, 1_234)
    raw = next(e for e in full.events if e.get("name") == "relu_kernel")
    assert (raw["ts"], raw["dur"]) == (40.0, 1.234)
    (other,) = full.named("other_device_kernel")
    assert full.process_of(other).startswith("GPU 1 [") and full.track_of(other) == "stream 3"
    (copy,) = full.named("Memcpy HtoD")
    assert full.track_of(copy) == "stream 7" and copy.args == {"kind": "HtoD", "bytes": 4096}
    assert (copy.pid, copy.tid) == (gemm.pid, gemm.tid)


def test_partial_overlap_goes_to_overflow_track(full: Trace) -> None:
    (k,) = full.named("overlapping_kernel")
    (gemm,) = full.named("gemm")
    assert k.pid == gemm.pid and k.tid != gemm.tid
    assert full.track_of(k) == "stream 7 (overlap)"
    assert (k.start, k.end) == (25_000, 35_000)
    assert full.other["overflow_tracks"] == 1


def test_op_to_kernel_arrows(full: Trace) -> None:
    pairs = {(op.name, k.name) for op, k in full.flows}
    assert pairs == {
        ("aten::addmm", "gemm"),
        ("aten::addmm", "overlapping_kernel"),
        ("aten::relu", "relu_kernel"),
    }
    assert full.other["flows"] == 3
    flows = [e for e in full.events if e["ph"] in ("s", "f")]
    assert {e["cat"] for e in flows} == {FLOW_CAT}
    # addmm starts with its parent linear and has a launch call at 2 us: the arrow leaves
    # from the gap before that child, so it binds to addmm itself
    starts = sorted(e["ts"] for e in flows if e["ph"] == "s")
    assert starts == [1.5, 1.5, 60.5]
    # the arrow into the overflow lane lands on that lane
    (k,) = full.named("overlapping_kernel")
    f = [e for e in flows if e["ph"] == "f" and e["tid"] == k.tid]
    assert len(f) == 1 and f[0]["ts"] == 25.0


def test_cpu_tracks_iterations_and_counters(full: Trace) -> None:
    (addmm,) = full.named("aten::addmm")
    assert full.process_of(addmm) == "process 100 [kineto trace clock, not aligned to other clocks]"
    assert full.track_of(addmm) == "thread 200"
    assert addmm.args["external_id"] == 12
    launches = full.named("cudaLaunchKernel")
    assert {full.track_of(s) for s in launches} == {"thread 200"}
    assert launches[0].args["correlation"] == 21
    (step,) = full.named("ProfilerStep#3")
    assert full.track_of(step) == "profiler steps" and step.pid == addmm.pid
    # host clock: first host event at trace time 0
    it0, it1 = full.named("iteration 0"), full.named("iteration 1")
    assert (it0[0].start, it0[0].end, it1[0].start) == (0, 1_000_000, 1_000_000)
    assert full.track_of(it0[0]) == "measured iterations"
    assert full.process_of(it0[0]) == "aaco run [host monotonic clock]"
    (phase,) = full.named("measured")
    assert full.track_of(phase) == "phases" and phase.end == 2_000_000
    host_pid = it0[0].pid
    assert full.counters[(host_pid, "worker RSS")] == [(500_000, {"MiB": 2.0})]
    assert full.counters[(host_pid, "worker CPU")] == [(500_000, {"%": 50.0})]
    assert full.counters[(host_pid, "load average")] == [(500_000, {"1m": 0.25})]
    assert (host_pid, "system CPU") not in full.counters  # null sample: no made-up value
    domains = {d["key"]: d for d in full.other["clock_domains"]}
    assert domains["host"]["offset_ns"] == -H
    assert domains["kineto"]["offset_ns"] == -B and not domains["kineto"]["aligned_to_host"]


def test_pids_and_tids_are_unique_ints(full: Trace) -> None:
    pids = set(full.process_names)
    tids = {tid for _, tid in full.thread_names}
    assert not pids & tids
    assert len(tids) == len(full.thread_names)


TABLE_NAMES = sorted(full_tables())


@pytest.mark.parametrize(
    "keep",
    [()]
    + [(n,) for n in TABLE_NAMES]
    + [tuple(x for x in TABLE_NAMES if x != n) for n in TABLE_NAMES],
    ids=lambda k: "+".join(k) or "none",
)
def test_any_combination_of_tables(tmp_path: Path, keep: tuple[str, ...]) -> None:
    tables = {k: v for k, v in full_tables().items() if k in keep}
    # an empty table is handled like a missing one
    if "ops" not in keep:
        tables["ops"] = []
    trace = validate(export_perfetto(make_bundle(tmp_path, tables)))
    expected_flows = 3 if {"ops", "kernels", "op_kernel_map"} <= set(keep) else 0
    assert trace.other["flows"] == expected_flows
    n_slices = sum(len(v) for k, v in tables.items() if k not in ("system_events", "op_kernel_map"))
    drawn = [x for x in trace.slices if x.cat != "critical_path"]
    assert len(drawn) == n_slices
    # with a GPU timeline, the critical path is a track of its own whose slices tile it
    path = [x for x in trace.slices if x.cat == "critical_path"]
    assert bool(path) == bool({"kernels", "memcpy"} & set(keep))
    assert len({(x.pid, x.tid) for x in path}) <= 1


def test_empty_bundle_is_a_valid_empty_trace(tmp_path: Path) -> None:
    trace = validate(export_perfetto(make_bundle(tmp_path, {})))
    assert trace.events == [] and trace.other["clock_domains"] == []


def _ort_tables(wall_ns: int | None) -> dict[str, list[dict[str, Any]]]:
    return {
        "inference_iters": [
            {
                "phase": "measured",
                "iteration": 0,
                "start_ns": H,
                "end_ns": H + 1_000_000,
                "latency_ns": 1_000_000,
            },
        ],
        "ort_runs": [
            {
                "iteration": 0,
                "start_ns": 1_000_000,
                "dur_ns": 500_000,
                "node_ns": 300_000,
                "node_count": 1,
                "wall_ns": wall_ns,
            },
        ],
        "ops": [
            {
                "source": "onnxruntime",
                "iteration": 0,
                "node_name": "conv1",
                "op_type": "Conv",
                "provider": "CUDAExecutionProvider",
                "start_ns": 1_100_000,
                "dur_ns": 300_000,
                "thread_id": 42,
            },
        ],
        "kernels": [
            {
                "source": "onnxruntime",
                "name": f"k{i}",
                "start_ns": 1_100_000,
                "end_ns": 1_100_000 + 1_000 * (i + 1),
                "dur_ns": 1_000 * (i + 1),
                "time_is_gpu": False,
                "device": 0,
                "stream": 1,
                "thread_id": 42,
            }
            for i in range(2)
        ],
        "op_kernel_map": [
            {
                "kernel_row": i,
                "kernel_name": f"k{i}",
                "dur_ns": 1_000 * (i + 1),
                "op_row": 0,
                "op_name": "conv1",
                "method": "parent_node",
            }
            for i in range(2)
        ],
    }


def test_ort_profile_aligned_by_end_of_last_run(tmp_path: Path) -> None:
    p1 = H + 10_000_000  # host end of the last profiled session.run
    meta = {"phases": {"profile": [H + 8_000_000, p1]}}
    trace = validate(export_perfetto(make_bundle(tmp_path, _ort_tables(600_000), meta)))
    (run,) = trace.named("profiled run 0")
    shift = p1 - 1_500_000  # ORT clock -> host clock
    assert run.start == 1_000_000 + shift - H and run.end == p1 - H
    assert trace.process_of(run) == (
        "ONNX Runtime profiled pass [ORT profile clock, aligned to host clock within 100.000 us]"
    )
    (conv,) = trace.named("conv1")
    assert conv.start == 1_100_000 + shift - H and trace.track_of(conv) == "thread 42"
    # ORT kernel events carry their parent's start: their own track says so, and the two
    # that start together cannot share a stream track
    k0, k1 = trace.named("k0")[0], trace.named("k1")[0]
    # (at equal starts the longer one comes first, as a parent would)
    assert trace.track_of(k1) == "stream 1 (start = parent node start; durations real)"
    assert trace.track_of(k0) == "stream 1 (start = parent node start; durations real) (overlap)"
    assert {(op.name, k.name) for op, k in trace.flows} == {("conv1", "k0"), ("conv1", "k1")}
    domain = next(d for d in trace.other["clock_domains"] if d["key"] == "onnxruntime")
    assert domain["aligned_to_host"] and domain["offset_ns"] == shift - H


def test_ort_profile_not_aligned_without_wall_time(tmp_path: Path) -> None:
    meta = {"phases": {"profile": [H + 8_000_000, H + 10_000_000]}}
    trace = validate(export_perfetto(make_bundle(tmp_path, _ort_tables(None), meta)))
    (run,) = trace.named("profiled run 0")
    assert run.start == 0  # its own clock, started at 0
    assert "not aligned" in trace.process_of(run)


def test_renderer(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, full_tables(), FULL_META)
    r = PerfettoRenderer()
    assert r.output_file_extension == ".json"
    assert r.render(s).encode() == export_perfetto(s)


def test_real_run_exports_a_valid_timeline(tmp_path: Path) -> None:
    from aaco.run import RunOptions, run_model

    s = run_model(
        RunOptions(model="mlp", warmup=2, iterations=5, profile_iterations=2, output=tmp_path)
    )
    assert s.status == "completed", s.error
    trace = validate(export_perfetto(s))
    iters = [x for x in trace.slices if x.cat == "iteration" and x.name.startswith("iteration")]
    assert len(iters) == 5
    runs = [x for x in trace.slices if x.name.startswith("profiled run")]
    assert len(runs) == 2
    ops = trace.named("/fc3/Gemm")
    assert len(ops) == 2 and trace.track_of(ops[0]).startswith("thread ")
    # the profiled runs land inside the host-clock window of the profiled pass
    (phase,) = trace.named("profile")
    assert all(phase.start <= r.start and r.end <= phase.end for r in runs)
    assert runs[-1].end == phase.end  # matched by construction of the alignment
    assert any(k[1] == "worker RSS" for k in trace.counters)


def test_many_events_stay_valid(tmp_path: Path) -> None:
    n = 30_000
    # kernel i runs on stream i % 4, so each stream gets one every 4 us; every 97th lasts
    # 5 us and partially overlaps the next one of its stream (97 is odd: all 4 streams)
    kernels = [_kernel("k", i * 1_000, 5_000 if i % 97 == 0 else 900, 0, i % 4) for i in range(n)]
    ops = [_op("aten::op", i * 1_000, 800, i) for i in range(n)]
    mapping = [
        {"kernel_row": i, "kernel_name": "k", "dur_ns": 900, "op_row": i, "op_name": "aten::op"}
        for i in range(n)
    ]
    s = make_bundle(tmp_path, {"kernels": kernels, "ops": ops, "op_kernel_map": mapping})
    trace = validate(export_perfetto(s))
    drawn = [x for x in trace.slices if x.cat != "critical_path"]
    assert len(drawn) == 2 * n and trace.other["flows"] == n
    assert all(op.name == "aten::op" and k.name == "k" for op, k in trace.flows)
    assert trace.other["overflow_tracks"] == 4
    overflow = [x for x in trace.slices if trace.track_of(x).endswith("(overlap)")]
    assert len(overflow) == len(range(0, n, 97))
