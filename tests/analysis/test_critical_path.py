"""Critical path over CPU threads and GPU streams (aaco.analysis.critical_path).

Hand-built traces whose critical path is worked out by hand in the comments (times in ns),
invariants of the model on those, on the recorded CUDA traces of fixtures/cuda and on random
small traces (hypothesis), and the --what-if parser.

Notation in the comments: ``[a, b]`` is an interval in ns; "chain" is a thread's program
order, "launch"/"fifo"/"sync"/"event" the causal edges of the module docstring. A launch or
fifo edge carries its observed latency only when it is the binding one (the latest to
arrive at the activity's start), else 0; a blocking call linked to GPU work keeps only its
return latency (call end - GPU end) on its own chain segment.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aaco.analysis.critical_path import (
    CATEGORIES,
    EDGE_CATEGORY,
    STREAM_GAP_UNEXPLAINED_NS,
    CriticalPath,
    critical_paths,
    parse_what_if,
)
from aaco.importers.registry import import_paths
from aaco.session.schema import API_CALLS, KERNELS, MEMCPY, OPS

CUDA_FIXTURES = sorted((Path(__file__).parent / "fixtures" / "cuda").glob("*.json.gz"))
PID = 100
#: every what-if target the docstring of WhatIf names
TARGETS = ("kernel", "gpu_compute", "gpu", "copy", "memcpy", "cpu_op", "cpu", "op", "runtime",
           "launch", "sync", "idle")  # fmt: skip
TABLES = ("kernels", "api_calls", "memcpy", "ops", "annotations")


# -- building traces -------------------------------------------------------------------------


def _k(
    name: str,
    start: int,
    end: int,
    *,
    corr: int | None = None,
    stream: int = 7,
    device: int = 0,
    pid: int | None = PID,
    source: str = "kineto",
) -> dict[str, Any]:
    return {"source": source, "name": name, "short_name": name, "start_ns": start,
            "end_ns": end, "dur_ns": end - start, "time_is_gpu": True, "device": device,
            "stream": stream, "correlation_id": corr, "process_id": pid}  # fmt: skip


def _api(
    name: str,
    kind: str,
    start: int,
    end: int,
    *,
    corr: int | None = None,
    pid: int = PID,
    tid: int = 1,
    domain: str = "cuda_runtime",
    source: str = "kineto",
) -> dict[str, Any]:
    return {"source": source, "domain": domain, "name": name, "kind": kind, "start_ns": start,
            "end_ns": end, "dur_ns": end - start, "correlation_id": corr, "process_id": pid,
            "thread_id": tid}  # fmt: skip


def _dev(
    name: str,
    at: int,
    *,
    corr: int,
    stream: int,
    wait_stream: int | None = None,
    wait_corr: int | None = None,
    device: int = 0,
) -> dict[str, Any]:
    """A device-side sync row (Kineto ``cuda_sync`` on a GPU track)."""
    return {"source": "kineto", "domain": "cuda_runtime", "name": name, "kind": "sync",
            "start_ns": at, "end_ns": at, "dur_ns": 0, "correlation_id": corr, "device": device,
            "stream": stream, "wait_stream": wait_stream,
            "wait_correlation_id": wait_corr}  # fmt: skip


def _op(name: str, start: int, end: int, *, pid: int = PID, tid: int = 1) -> dict[str, Any]:
    return {"source": "pytorch", "node_name": name, "op_type": name, "start_ns": start,
            "dur_ns": end - start, "thread_id": tid, "process_id": pid}  # fmt: skip


def _copy(
    name: str, kind: str, start: int, end: int, *, corr: int, stream: int = 7
) -> dict[str, Any]:
    return {"source": "kineto", "name": name, "kind": kind, "start_ns": start, "end_ns": end,
            "dur_ns": end - start, "device": 0, "stream": stream,
            "correlation_id": corr}  # fmt: skip


def _tables(
    kernels: Sequence[Mapping[str, Any]] = (),
    api: Sequence[Mapping[str, Any]] = (),
    memcpy: Sequence[Mapping[str, Any]] = (),
    ops: Sequence[Mapping[str, Any]] = (),
) -> dict[str, pa.Table]:
    return {
        "kernels": KERNELS.from_rows(kernels),
        "api_calls": API_CALLS.from_rows(api),
        "memcpy": MEMCPY.from_rows(memcpy),
        "ops": OPS.from_rows(ops),
    }


def _one(tables: Mapping[str, pa.Table], **kw: Any) -> CriticalPath:
    cps = critical_paths(tables, **kw)
    assert len(cps) == 1
    _assert_invariants(cps[0])
    return cps[0]


def _segs(cp: CriticalPath) -> list[tuple[str, int, int, str | None]]:
    return [(s.kind, s.start_ns, s.end_ns, s.name) for s in cp.segments]


def _cats(**ns: int) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    out.update(ns)
    return out


def _saved(tables: Mapping[str, pa.Table], spec: str, **kw: Any) -> int:
    cp = _one(tables, what_if=[parse_what_if(spec)], **kw)
    return cp.what_if[0].saved_ns


# -- invariants ------------------------------------------------------------------------------


def _assert_invariants(cp: CriticalPath) -> None:
    """What holds for every critical path, whatever the trace."""
    assert cp.length_ns == cp.wall_ns == cp.region_end_ns - cp.region_start_ns
    assert cp.stats["model_reproduces_times"] is True
    assert list(cp.by_category) == list(CATEGORIES)
    assert all(v >= 0 for v in cp.by_category.values())
    assert sum(cp.by_category.values()) == cp.length_ns
    assert sum(cp.by_edge.values()) == cp.length_ns
    assert all(v > 0 for v in cp.by_edge.values())
    assert 0 <= cp.unexplained_wait_ns <= cp.length_ns
    segs = cp.segments
    assert sum(s.dur_ns for s in segs) == cp.length_ns
    assert sum(s.dur_ns for s in segs if s.unexplained) == cp.unexplained_wait_ns
    for s in segs:
        assert s.dur_ns > 0
        assert s.category == EDGE_CATEGORY[s.kind]
    if cp.length_ns:
        assert segs[0].start_ns == cp.region_start_ns
        assert segs[-1].end_ns == cp.region_end_ns
        for a, b in itertools.pairwise(segs):
            assert b.start_ns == a.end_ns, (a, b)
    # by_category and by_edge say the same thing
    per_cat = dict.fromkeys(CATEGORIES, 0)
    for k, v in cp.by_edge.items():
        per_cat[EDGE_CATEGORY[k]] += v
    assert per_cat == cp.by_category
    for w in cp.what_if:
        assert w.length_ns == cp.length_ns


def _assert_what_if_invariants(tables: Mapping[str, pa.Table], **kw: Any) -> None:
    """Factor 1 changes nothing, a factor <= 1 never lengthens the path, and the saving is
    never more than the matched time (Amdahl on summed time is an upper bound)."""
    specs = [f"{t}:{f}" for t in TARGETS for f in ("1", "1.0", "0.5", "0")]
    cps = critical_paths(tables, what_if=[parse_what_if(s) for s in specs], **kw)
    for cp in cps:
        _assert_invariants(cp)
        for w in cp.what_if:
            factor = float(w.spec.rpartition(":")[2])
            assert 0 <= w.new_length_ns <= w.length_ns, w
            if factor == 1.0:
                assert w.new_length_ns == w.length_ns, w
            if factor in (0.0, 1.0):
                assert w.saved_ns <= w.amdahl_saved_ns, w


def _unique_names(
    tables: Mapping[str, pa.Table],
) -> tuple[dict[str, pa.Table], list[str], list[str]]:
    """The tables with every kernel and copy renamed ``K0001_<name>`` / ``C0001_<name>``: a
    regex ``^K0001_`` then matches that one activity (the graph does not depend on names)."""
    out = dict(tables)
    k = tables["kernels"]
    knames = [f"K{i:04d}_{n}" for i, n in enumerate(k.column("name").to_pylist())]
    out["kernels"] = k.set_column(k.schema.get_field_index("short_name"), "short_name",
                                  pa.array(knames, pa.string()))  # fmt: skip
    m = tables["memcpy"]
    cnames = [f"C{i:04d}_{n}" for i, n in enumerate(m.column("name").to_pylist())]
    out["memcpy"] = m.set_column(m.schema.get_field_index("name"), "name",
                                 pa.array(cnames, pa.string()))  # fmt: skip
    return out, knames, cnames


def _assert_single_activity_what_ifs(
    tables: Mapping[str, pa.Table], *, require_gain: bool = False
) -> list[tuple[str, int, int, int, int]]:
    """Shrink one activity at a time (a unique name) by a factor 0 and 0.5.

    Its saving is at most its time saved d = dur - round(dur * f); an activity whose start
    has slack > 0 changes nothing (every path through it is shorter than the longest);
    halving saves no more than removing. Returns (name, dur, slack, on_path, saved at 0.5)
    for activities whose whole time is on the reported path with zero slack."""
    tabs, knames, cnames = _unique_names(tables)
    specs = [f"kernel~^{n[:5]}_:{f}" for n in knames for f in ("0", "0.5")]
    specs += [f"copy~^{n[:5]}_:{f}" for n in cnames for f in ("0", "0.5")]
    cps = critical_paths(tabs, what_if=[parse_what_if(s) for s in specs], top_kernels=1 << 30)
    critical: list[tuple[str, int, int, int, int]] = []
    for cp in cps:
        _assert_invariants(cp)
        info = {row["name"][:5]: row for row in cp.kernels}
        res = {w.spec: w for w in cp.what_if}
        for key, row in info.items():
            assert row["count"] == 1
            tgt = "kernel" if key.startswith("K") else "copy"
            w0, w5 = res[f"{tgt}~^{key}_:0"], res[f"{tgt}~^{key}_:0.5"]
            dur = row["total_ns"]
            assert 0 <= w0.saved_ns <= dur, (row, w0)
            assert 0 <= w5.saved_ns <= dur - round(dur * 0.5), (row, w5)
            assert w5.saved_ns <= w0.saved_ns
            slack = row["min_slack_ns"]
            if slack is None:  # a zero-length activity: nothing to shrink
                assert w0.saved_ns == 0
                continue
            assert slack >= 0
            if slack > 0:
                assert w0.saved_ns == 0, (row, w0)
            if slack == 0 and row["on_path_ns"] == dur and dur > 1:
                critical.append((row["name"], dur, slack, row["on_path_ns"], w5.saved_ns))
    if require_gain:
        assert critical
        assert all(c[4] > 0 for c in critical), [c for c in critical if c[4] <= 0]
    return critical


# -- 1. hand-computed paths ------------------------------------------------------------------


def _three_kernels() -> dict[str, pa.Table]:
    # thread 1 launches kA, kB, kC on stream 7 and runs ahead to cudaDeviceSynchronize:
    #   launch A [0,10] -> kA [15,215]; launch B [20,30] -> kB [220,420];
    #   launch C [40,50] -> kC [425,925]; cudaDeviceSynchronize [60,940]
    return _tables(
        kernels=[_k("kA", 15, 215, corr=1), _k("kB", 220, 420, corr=2), _k("kC", 425, 925, corr=3)],
        api=[
            _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
            _api("cudaLaunchKernel", "launch", 20, 30, corr=2),
            _api("cudaLaunchKernel", "launch", 40, 50, corr=3),
            _api("cudaDeviceSynchronize", "sync", 60, 940, corr=4),
        ],
    )


def test_gpu_bound_three_kernels_then_device_sync() -> None:
    # region [0, 940] (first call .. end of the sync)
    # kA: launch A ends at 10, the stream is empty -> launch delay 5 (binding)
    # kB: fifo from kA's end 215 arrives after launch B's end 30 -> kernel gap 5; same for kC
    # the sync links to the process's last activity ended by 940: kC (925) -> return 15;
    # its wait [60, 925] is not on the path.
    # path: runtime [0,10] (launch A), launch_delay [10,15], kA 200, gap 5, kB 200, gap 5,
    #       kC 500, sync_return [925,940] = 10 + 5 + 900 + 10 + 15 = 940
    cp = _one(_three_kernels())
    assert cp.process_id == PID
    assert (cp.region_start_ns, cp.region_end_ns, cp.length_ns) == (0, 940, 940)
    assert cp.by_edge == {"runtime": 10, "launch_delay": 5, "gpu_compute": 900,
                          "kernel_gap": 10, "sync_return": 15}  # fmt: skip
    assert cp.by_category == _cats(runtime=15, gpu_compute=900, idle_gap=10, sync_wait=15)
    assert _segs(cp) == [
        ("runtime", 0, 10, "cudaLaunchKernel"),
        ("launch_delay", 10, 15, "kA"),
        ("gpu_compute", 15, 215, "kA"),
        ("kernel_gap", 215, 220, "kB"),
        ("gpu_compute", 220, 420, "kB"),
        ("kernel_gap", 420, 425, "kC"),
        ("gpu_compute", 425, 925, "kC"),
        ("sync_return", 925, 940, "kC"),
    ]
    assert not any(s.kind == "sync_wait" for s in cp.segments)
    assert cp.unexplained_wait_ns == 0
    assert cp.stats["sync_links"] == 1
    assert all(row["min_slack_ns"] == 0 and row["on_path_ns"] == row["total_ns"]
               for row in cp.kernels)  # fmt: skip
    assert cp.segments[2].where == "device 0 stream 7"
    assert cp.segments[0].where == "thread 1"


def test_gpu_bound_what_ifs() -> None:
    t = _three_kernels()
    # kA (200, zero slack, alone on the path at [15,215]) halved: everything after it moves
    # 100 earlier -> saves exactly d = 100
    # kC (500) halved: kC ends at 675, the sync returns at 690 -> saves 250
    # every kernel removed: kA ends at 15; kB waits for launch B's end (30) -> [30,30];
    # kC waits for launch C's end (50) -> [50,50]; sync edge 50+15 = 65, the sync's own
    # return segment 60+15 = 75 -> 75: saves 865, not the 900 Amdahl predicts
    specs = ["kernel~^kA$:0.5", "kernel~^kC$:0.5", "kernel:0", "kernel~^kB$:1"]
    cp = _one(t, what_if=[parse_what_if(s) for s in specs])
    wa, wc, wall, wb = cp.what_if
    assert (wa.saved_ns, wa.matched, wa.matched_ns, wa.amdahl_saved_ns) == (100, 1, 200, 100)
    assert (wc.saved_ns, wc.new_length_ns) == (250, 690)
    assert (wall.new_length_ns, wall.saved_ns, wall.amdahl_saved_ns, wall.matched) == (
        75,
        865,
        900,
        3,
    )
    assert wb.new_length_ns == wb.length_ns == 940
    assert wa.to_dict()["saved_pct"] == round(100 * 100 / 940, 3)
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def _launch_bound() -> dict[str, pa.Table]:
    # thread 1: aten::add [0,100] with launch [60,80] -> k1 [85,90]
    #           aten::mul [100,200] with launch [160,180] -> k2 [185,190]
    #           aten::relu [200,290] with launch [260,280] -> k3 [285,300]
    #           cudaDeviceSynchronize [290,310]
    return _tables(
        kernels=[_k("k1", 85, 90, corr=1), _k("k2", 185, 190, corr=2), _k("k3", 285, 300, corr=3)],
        api=[
            _api("cudaLaunchKernel", "launch", 60, 80, corr=1),
            _api("cudaLaunchKernel", "launch", 160, 180, corr=2),
            _api("cudaLaunchKernel", "launch", 260, 280, corr=3),
            _api("cudaDeviceSynchronize", "sync", 290, 310),
        ],
        ops=[_op("aten::add", 0, 100), _op("aten::mul", 100, 200), _op("aten::relu", 200, 290)],
    )


def test_launch_bound_path_follows_the_cpu_thread() -> None:
    # every kernel starts 5 after its launch returns (the stream is empty: launch binding)
    # the sync links to k3 (300 > 290) -> return 10
    # path: along thread 1 to the end of launch 3 (280), launch delay 5, k3 15, return 10
    #   cpu_op: [0,60] + [80,100] + [100,160] + [180,200] + [200,260] = 220
    #   runtime: 3 launches x 20 = 60, + launch delay 5 = 65
    #   gpu_compute 15, sync_wait 10 -> 220 + 65 + 15 + 10 = 310 = wall [0,310]
    cp = _one(_launch_bound())
    assert (cp.region_start_ns, cp.region_end_ns) == (0, 310)
    assert cp.by_category == _cats(cpu_op=220, runtime=65, gpu_compute=15, sync_wait=10)
    assert cp.by_edge == {"cpu_op": 220, "runtime": 60, "launch_delay": 5, "gpu_compute": 15,
                          "sync_return": 10}  # fmt: skip
    assert _segs(cp) == [
        ("cpu_op", 0, 60, "aten::add"),
        ("runtime", 60, 80, "cudaLaunchKernel"),
        ("cpu_op", 80, 100, "aten::add"),
        ("cpu_op", 100, 160, "aten::mul"),
        ("runtime", 160, 180, "cudaLaunchKernel"),
        ("cpu_op", 180, 200, "aten::mul"),
        ("cpu_op", 200, 260, "aten::relu"),
        ("runtime", 260, 280, "cudaLaunchKernel"),
        ("launch_delay", 280, 285, "k3"),
        ("gpu_compute", 285, 300, "k3"),
        ("sync_return", 300, 310, "k3"),
    ]
    # by_operator: an op's own segments; a call or an activity with no external id counts
    # under its own name (k3: launch delay 5 + 15 + return 10)
    assert dict(cp.by_operator) == {"aten::add": 80, "aten::mul": 80, "aten::relu": 60,
                                    "cudaLaunchKernel": 60, "k3": 30}  # fmt: skip
    slack = {r["name"]: r["min_slack_ns"] for r in cp.kernels}
    # k3 is critical; k2 could start as late as 280 - 0 (it only feeds k3 by a 0-weight fifo
    # edge, k3 being bound by its launch): latest start 285 - 5 = 280, earliest 185 -> 95;
    # k1 feeds k2 the same way: latest end 280, latest start 275, earliest 85 -> 190
    assert slack == {"k1": 190, "k2": 95, "k3": 0}


def test_launch_bound_what_ifs() -> None:
    t = _launch_bound()
    # all kernels removed: k3 ends at 285, the sync edge gives 295 but the sync call's own
    # return segment [290, +10] gives 300 -> saves 10 of the 25 of kernel time
    # cpu:0.5 halves every cpu_op segment (220 -> 110); the launches keep their time:
    #   launch 3 ends at 170, k3 [175,190], sync call starts at 175 (relu's last 10 -> 5)
    #   -> returns at max(175 + 10, 190 + 10) = 200 -> saves 110
    # k1 (slack 190) removed: nothing changes; k3 (zero slack) removed: saves 10 (see above)
    specs = ["kernel:0", "cpu:0.5", "kernel~^k1$:0", "kernel~^k3$:0", "launch:1"]
    cp = _one(t, what_if=[parse_what_if(s) for s in specs])
    got = [(w.new_length_ns, w.saved_ns) for w in cp.what_if]
    assert got == [(300, 10), (200, 110), (310, 0), (300, 10), (310, 0)]
    assert cp.what_if[0].amdahl_saved_ns == 25
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def _two_streams(with_wait_row: bool = True) -> dict[str, pa.Table]:
    # thread 1: launch [0,10] -> gemm_big on stream 7 [20,520]
    #           cudaEventRecord [20,30] (corr 2, on stream 7)
    #           cudaStreamWaitEvent [40,50] (corr 3: stream 8 waits for that event)
    #           launch [60,70] -> relu_small on stream 8 [525,625]
    #           cudaDeviceSynchronize [80,640]
    # device-side row: Stream Wait Event, stream 8, wait_on_stream 7, record corr 2
    api = [
        _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
        _api("cudaEventRecord", "other", 20, 30, corr=2),
        _api("cudaStreamWaitEvent", "sync", 40, 50, corr=3),
        _api("cudaLaunchKernel", "launch", 60, 70, corr=4),
        _api("cudaDeviceSynchronize", "sync", 80, 640, corr=5),
    ]
    if with_wait_row:
        api.append(_dev("Stream Wait Event", 45, corr=3, stream=8, wait_stream=7, wait_corr=2))
    return _tables(
        kernels=[
            _k("gemm_big", 20, 520, corr=1, stream=7),
            _k("relu_small", 525, 625, corr=4, stream=8),
        ],
        api=api,
    )


def test_stream_wait_event_links_the_other_stream() -> None:
    # event edge: the last work launched on stream 7 before the record (gemm_big) -> the
    # first launched on stream 8 after the wait (relu_small); it arrives at 520, after
    # relu_small's launch (70): binding, weight 5
    # path: runtime [0,10], launch delay [10,20], gemm_big 500, event wait [520,525],
    #       relu_small 100, sync return [625,640] = 10 + 10 + 500 + 5 + 100 + 15 = 640
    cp = _one(_two_streams())
    assert cp.stats["event_links"] == 1
    assert cp.by_edge == {"runtime": 10, "launch_delay": 10, "gpu_compute": 600,
                          "event_wait": 5, "sync_return": 15}  # fmt: skip
    assert cp.by_category == _cats(runtime=20, gpu_compute=600, sync_wait=20)
    assert _segs(cp) == [
        ("runtime", 0, 10, "cudaLaunchKernel"),
        ("launch_delay", 10, 20, "gemm_big"),
        ("gpu_compute", 20, 520, "gemm_big"),
        ("event_wait", 520, 525, "relu_small"),
        ("gpu_compute", 525, 625, "relu_small"),
        ("sync_return", 625, 640, "relu_small"),
    ]
    assert [s.where for s in cp.segments if s.kind == "gpu_compute"] == [
        "device 0 stream 7",
        "device 0 stream 8",
    ]
    assert cp.unexplained_wait_ns == 0
    # halving gemm_big moves relu_small 250 earlier: the saving goes through the event edge
    cp = _one(_two_streams(), what_if=[parse_what_if("kernel~gemm_big:0.5")])
    assert cp.what_if[0].saved_ns == 250
    _assert_what_if_invariants(_two_streams())
    _assert_single_activity_what_ifs(_two_streams(), require_gain=True)


def test_without_the_wait_row_relu_is_bound_by_its_launch() -> None:
    # no device-side row: nothing says stream 8 waited for stream 7, so relu_small's start
    # is bound by its launch (ended at 70): launch delay 455
    # path: thread 1 [0,70] (runtime 10+10+10+10 = 40, idle 3 x 10 = 30), launch delay 455,
    #       relu_small 100, sync return 15 = 640
    cp = _one(_two_streams(with_wait_row=False))
    assert cp.stats["event_links"] == 0
    assert cp.by_category == _cats(runtime=40 + 455, idle_gap=30, gpu_compute=100, sync_wait=15)
    # gemm_big is not on the path: shrinking it changes nothing
    cp = _one(_two_streams(with_wait_row=False), what_if=[parse_what_if("kernel~gemm:0.5")])
    assert cp.what_if[0].saved_ns == 0


def test_event_wait_that_the_trace_links_is_not_unexplained() -> None:
    # As above, but stream 8 already runs kX [25,300] (launched [12,18]) when the wait is
    # enqueued, and gemm_big is short: [20,120]. relu_small [305,405] waits for both kX
    # (stream order, ends 300) and gemm_big (event, ends 120): stream order binds.
    # path: runtime [0,10], idle [10,12], runtime [12,18], launch delay [18,25], kX 275,
    #       kernel gap [300,305], relu_small 100, sync return [405,420] = 420
    # The event is linked (device-side row with the record's correlation), so the gap is
    # the stream's own dispatch gap: a kernel_gap, nothing unexplained.
    api = [
        _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
        _api("cudaLaunchKernel", "launch", 12, 18, corr=5),
        _api("cudaEventRecord", "other", 20, 30, corr=2),
        _api("cudaStreamWaitEvent", "sync", 40, 50, corr=3),
        _api("cudaLaunchKernel", "launch", 60, 70, corr=4),
        _api("cudaDeviceSynchronize", "sync", 80, 420),
        _dev("Stream Wait Event", 45, corr=3, stream=8, wait_stream=7, wait_corr=2),
    ]
    kernels = [
        _k("gemm_big", 20, 120, corr=1, stream=7),
        _k("kX", 25, 300, corr=5, stream=8),
        _k("relu_small", 305, 405, corr=4, stream=8),
    ]
    cp = _one(_tables(kernels=kernels, api=api))
    assert cp.stats["event_links"] == 1
    assert cp.by_edge == {"runtime": 16, "idle_gap": 2, "launch_delay": 7, "gpu_compute": 375,
                          "kernel_gap": 5, "sync_return": 15}  # fmt: skip
    assert cp.unexplained_wait_ns == 0


def test_blocking_memcpy_links_to_its_copy() -> None:
    # launch [0,10] -> gemm [15,315]; cudaMemcpy (blocking) [20,400] -> DtoH [320,380]
    # the copy starts while cudaMemcpy still runs: its launch edge leaves from the call's
    # start (20); the fifo edge from gemm's end (315) binds: gap 5
    # the call links to its own copy: return [380,400] = 20
    # path: runtime 10, launch delay 5, gemm 300, gap 5, copy 60, return 20 = 400
    name = "Memcpy DtoH (Device -> Pageable)"
    t = _tables(
        kernels=[_k("gemm", 15, 315, corr=1)],
        api=[
            _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
            _api("cudaMemcpy", "memcpy", 20, 400, corr=2),
        ],
        memcpy=[_copy(name, "DtoH", 320, 380, corr=2)],
    )
    cp = _one(t)
    assert cp.stats["sync_links"] == 1
    assert cp.stats["launch_links_from_call_start"] == 1
    assert cp.by_edge == {"runtime": 10, "launch_delay": 5, "gpu_compute": 300,
                          "kernel_gap": 5, "copy": 60, "sync_return": 20}  # fmt: skip
    assert cp.by_category == _cats(runtime=15, gpu_compute=300, idle_gap=5, copy=60, sync_wait=20)
    assert _segs(cp)[-2:] == [("copy", 320, 380, name), ("sync_return", 380, 400, name)]
    # copy:0 -> the copy ends at 320, the call returns at max(20 + 20, 320 + 20) = 340
    cp = _one(t, what_if=[parse_what_if("copy:0"), parse_what_if("memcpy~DtoH:0.5")])
    assert [w.saved_ns for w in cp.what_if] == [60, 30]
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def test_graph_launch_links_every_kernel() -> None:
    # cudaGraphLaunch [0,50] (corr 1) -> g1 [30,130], g2 [135,235], g3 [240,340], all corr 1
    # cudaStreamSynchronize [60,350], no device-side row: the last activity ended by 350 (g3)
    # g1 starts before the call returns: linked from the call's start (0), delay 30
    # g2, g3: stream order binds (gaps 5); their launch edges leave from the call's end
    # path: launch delay [0,30], g1 100, gap 5, g2 100, gap 5, g3 100, return 10 = 350
    t = _tables(
        kernels=[_k("g1", 30, 130, corr=1), _k("g2", 135, 235, corr=1), _k("g3", 240, 340, corr=1)],
        api=[
            _api("cudaGraphLaunch", "launch", 0, 50, corr=1),
            _api("cudaStreamSynchronize", "sync", 60, 350, corr=2),
        ],
    )
    cp = _one(t)
    assert cp.stats["launch_links"] == 3
    assert cp.stats["launch_links_from_call_start"] == 1
    assert cp.stats["clock_skew_dropped"] == 0
    assert _segs(cp) == [
        ("launch_delay", 0, 30, "g1"),
        ("gpu_compute", 30, 130, "g1"),
        ("kernel_gap", 130, 135, "g2"),
        ("gpu_compute", 135, 235, "g2"),
        ("kernel_gap", 235, 240, "g3"),
        ("gpu_compute", 240, 340, "g3"),
        ("sync_return", 340, 350, "g3"),
    ]
    assert cp.by_category == _cats(runtime=30, gpu_compute=300, idle_gap=10, sync_wait=10)
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def _improper_nesting() -> dict[str, pa.Table]:
    # one thread, call stack not properly nested:
    #   launch 1 [5,30] starts before its "parent" aten::a [10,100]
    #   aten::b [80,200] overlaps aten::a without nesting in it
    #   launch 2 [150,160] in aten::b; cudaDeviceSynchronize [210,310]
    # launch 1 -> k1 [40,240]; launch 2 -> k2 [245,300]
    return _tables(
        kernels=[_k("k1", 40, 240, corr=1), _k("k2", 245, 300, corr=2)],
        api=[
            _api("cudaLaunchKernel", "launch", 5, 30, corr=1),
            _api("cudaLaunchKernel", "launch", 150, 160, corr=2),
            _api("cudaDeviceSynchronize", "sync", 210, 310),
        ],
        ops=[_op("aten::a", 10, 100), _op("aten::b", 80, 200)],
    )


def test_improper_nesting_does_not_make_a_cycle() -> None:
    # region [5,310]; path: thread [5,30] (launch 1 and/or aten::a: 25), launch delay 10,
    # k1 200, gap 5, k2 55, sync return 10 = 305
    cp = _one(_improper_nesting())
    assert cp.length_ns == 305
    assert cp.stats["repaired_nesting"] > 0
    assert cp.by_category["runtime"] + cp.by_category["cpu_op"] == 25 + 10
    assert cp.by_category["gpu_compute"] == 255
    assert cp.by_category["idle_gap"] == 5
    assert cp.by_category["sync_wait"] == 10
    _assert_what_if_invariants(_improper_nesting())
    _assert_single_activity_what_ifs(_improper_nesting(), require_gain=True)


def test_clock_skew_drops_the_backward_launch_edge() -> None:
    # launch [100,110] -> k1 [50,150]: the kernel starts before its launch call: the edge
    # would go backwards, it is dropped and counted; k1 hangs off the region start
    # cudaDeviceSynchronize [120,160] links to k1 (150): return 10
    # region [50,160]: path k1 100 + return 10 = 110
    t = _tables(
        kernels=[_k("k1", 50, 150, corr=1)],
        api=[
            _api("cudaLaunchKernel", "launch", 100, 110, corr=1),
            _api("cudaDeviceSynchronize", "sync", 120, 160),
        ],
    )
    cp = _one(t)
    assert cp.stats["clock_skew_dropped"] == 1
    assert cp.stats["launch_links"] == 0
    assert (cp.region_start_ns, cp.region_end_ns) == (50, 160)
    assert cp.by_edge == {"gpu_compute": 100, "sync_return": 10}
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def _two_processes(corr_b: int = 2, pid_b_kernel: int | None = None) -> dict[str, pa.Table]:
    # pid 100 thread 1: launch [0,10] -> kA (device 0, stream 7) [15,115]; sync [20,130]
    # pid 200 thread 2: launch [1000,1020] -> kB (device 1, stream 7) [1030,1530];
    #                   sync [1040,1550]
    return _tables(
        kernels=[
            _k("kA", 15, 115, corr=1, pid=100),
            _k("kB", 1030, 1530, corr=corr_b, device=1, pid=pid_b_kernel),
        ],
        api=[
            _api("cudaLaunchKernel", "launch", 0, 10, corr=1, pid=100, tid=1),
            _api("cudaDeviceSynchronize", "sync", 20, 130, pid=100, tid=1),
            _api("cudaLaunchKernel", "launch", 1000, 1020, corr=corr_b, pid=200, tid=2),
            _api("cudaDeviceSynchronize", "sync", 1040, 1550, pid=200, tid=2),
        ],
    )


def _assert_two_processes(cps: list[CriticalPath]) -> None:
    # pid 100: runtime 10 + launch delay 5 + kA 100 + return 15 = 130, region [0,130]
    # pid 200: runtime 20 + launch delay 10 + kB 500 + return 20 = 550, region [1000,1550]
    assert [cp.process_id for cp in cps] == [100, 200]
    a, b = cps
    for cp in cps:
        _assert_invariants(cp)
    assert (a.region_start_ns, a.region_end_ns) == (0, 130)
    assert a.by_edge == {"runtime": 10, "launch_delay": 5, "gpu_compute": 100, "sync_return": 15}
    assert (b.region_start_ns, b.region_end_ns) == (1000, 1550)
    assert b.by_edge == {"runtime": 20, "launch_delay": 10, "gpu_compute": 500, "sync_return": 20}
    assert [s.name for s in a.segments if s.kind == "gpu_compute"] == ["kA"]
    assert [s.name for s in b.segments if s.kind == "gpu_compute"] == ["kB"]


def test_two_processes_give_one_path_each() -> None:
    # kB's process comes from its launch call (its own process_id is null)
    t = _two_processes()
    _assert_two_processes(critical_paths(t))
    only = critical_paths(t, process_id=200)
    assert [cp.process_id for cp in only] == [200]
    assert only[0].length_ns == 550
    assert critical_paths(t, process_id=999) == []
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def test_two_processes_with_the_same_correlation_ids() -> None:
    # Each process numbers its CUPTI correlation ids on its own: two ranks' traces merged
    # (import_paths of one file per rank) reuse the same ids. The kernels say which process
    # launched them; the result must be the same as with distinct ids.
    _assert_two_processes(critical_paths(_two_processes(corr_b=1, pid_b_kernel=200)))


def test_rocm_stream_sync_without_device_row() -> None:
    # rocprofv3: domain hip, no device-side sync records
    # hipLaunchKernel [0,10] -> k1 stream 1 [20,220]; hipLaunchKernel [15,25] -> k2 stream 2
    # [30,130]; hipStreamSynchronize [40,240] -> the process's last activity ended by 240: k1
    # path: runtime 10, launch delay 10, k1 200, return 20 = 240
    def api(name: str, kind: str, s: int, e: int, corr: int) -> dict[str, Any]:
        return _api(name, kind, s, e, corr=corr, domain="hip", source="rocprofv3")

    t = _tables(
        kernels=[
            _k("k1", 20, 220, corr=1, stream=1, source="rocprofv3"),
            _k("k2", 30, 130, corr=2, stream=2, source="rocprofv3"),
        ],
        api=[
            api("hipLaunchKernel", "launch", 0, 10, 1),
            api("hipLaunchKernel", "launch", 15, 25, 2),
            api("hipStreamSynchronize", "sync", 40, 240, 3),
        ],
    )
    cp = _one(t)
    assert cp.stats["sync_links"] == 1
    assert cp.by_edge == {"runtime": 10, "launch_delay": 10, "gpu_compute": 200, "sync_return": 20}
    assert _segs(cp)[-1] == ("sync_return", 220, 240, "k1")
    _assert_what_if_invariants(t)
    _assert_single_activity_what_ifs(t, require_gain=True)


def test_sync_with_nothing_to_wait_for_is_unexplained() -> None:
    # cudaDeviceSynchronize [0,100] before any GPU work: nothing ended by 100 to link to;
    # then launch [110,120] -> k [130,180]
    # path: sync [0,100] (sync_wait, unexplained), idle [100,110], launch [110,120],
    #       launch delay 10, k 50 = 180
    t = _tables(
        kernels=[_k("k", 130, 180, corr=1)],
        api=[
            _api("cudaDeviceSynchronize", "sync", 0, 100),
            _api("cudaLaunchKernel", "launch", 110, 120, corr=1),
        ],
    )
    cp = _one(t)
    assert cp.stats["sync_unlinked"] == 1
    assert cp.unexplained_wait_ns == 100
    assert cp.by_edge == {"sync_wait": 100, "idle_gap": 10, "runtime": 10, "launch_delay": 10,
                          "gpu_compute": 50}  # fmt: skip
    _assert_what_if_invariants(t)


@pytest.mark.parametrize(
    ("gap", "unexplained"),
    [(STREAM_GAP_UNEXPLAINED_NS * 2, True), (STREAM_GAP_UNEXPLAINED_NS, False)],
)
def test_long_stream_gap_without_dependency_is_unexplained(gap: int, unexplained: bool) -> None:
    # launch [0,10] -> k1 [20,120]; launch [30,40] -> k2 [120+gap, 220+gap];
    # cudaDeviceSynchronize [50, 230+gap] -> k2, return 10
    # k2's start: the fifo edge from k1 (gap) binds, nothing else explains the wait
    # path: runtime 10, launch delay 10, k1 100, gap, k2 100, return 10 = 230 + gap
    t = _tables(
        kernels=[_k("k1", 20, 120, corr=1), _k("k2", 120 + gap, 220 + gap, corr=2)],
        api=[
            _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
            _api("cudaLaunchKernel", "launch", 30, 40, corr=2),
            _api("cudaDeviceSynchronize", "sync", 50, 230 + gap),
        ],
    )
    cp = _one(t)
    gap_kind = "unexplained_gpu_wait" if unexplained else "kernel_gap"
    assert cp.by_edge == {"runtime": 10, "launch_delay": 10, "gpu_compute": 200, gap_kind: gap,
                          "sync_return": 10}  # fmt: skip
    assert cp.by_category["idle_gap"] == gap
    assert cp.unexplained_wait_ns == (gap if unexplained else 0)
    assert cp.stats["long_stream_gaps"] == int(unexplained)
    _assert_what_if_invariants(t)


def test_overlapping_kernels_on_one_stream_keep_the_longer_one_on_the_path() -> None:
    # launch [0,10] -> kA [20,1000]; launch [12,18] -> kB [30,40] on the same stream,
    # overlapping kA (e.g. programmatic dependent launch). No sync.
    # region [0,1000], ended by kA. Nothing waits for kB; kA runs until the end:
    # path: runtime [0,10], launch delay [10,20], kA 980 = 1000
    t = _tables(
        kernels=[_k("kA", 20, 1000, corr=1), _k("kB", 30, 40, corr=2)],
        api=[
            _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
            _api("cudaLaunchKernel", "launch", 12, 18, corr=2),
        ],
    )
    cp = _one(t)
    assert cp.stats["stream_overlaps"] == 1
    assert cp.by_edge == {"runtime": 10, "launch_delay": 10, "gpu_compute": 980}


def test_shrinking_the_last_kernel_moves_the_region_end() -> None:
    # launch [0,10] -> k [20,1020]; the thread has nothing else to do (no sync)
    # path: runtime 10, launch delay 10, k 1000 = 1020; k has zero slack and is alone on
    # the path during [20,1020]. Halving it ends it at 520: nothing else runs after 10, so
    # the region ends at 520 -> saves 500; removing it ends the region at 20 -> saves 1000.
    t = _tables(kernels=[_k("k", 20, 1020, corr=1)],
                api=[_api("cudaLaunchKernel", "launch", 0, 10, corr=1)])  # fmt: skip
    cp = _one(t, what_if=[parse_what_if("kernel~^k$:0.5"), parse_what_if("kernel:0")])
    assert cp.by_edge == {"runtime": 10, "launch_delay": 10, "gpu_compute": 1000}
    assert [w.saved_ns for w in cp.what_if] == [500, 1000]


@pytest.mark.parametrize("case", ["blocking_copy", "device_sync"])
def test_zero_length_activity_ending_when_its_sync_returns(case: str) -> None:
    # A zero-length GPU activity (a tiny memset or copy in a trace with coarse timestamps)
    # that ends exactly when the blocking call waiting for it returns:
    #   blocking_copy: cudaMemcpy [0,1] -> copy [1,1]; region [0,1]
    #   device_sync: launch [0,2] -> k [5,5]; cudaDeviceSynchronize [3,5]; region [0,5]
    # The path still spans the region and the model reproduces every observed time.
    if case == "blocking_copy":
        t = _tables(api=[_api("cudaMemcpy", "memcpy", 0, 1, corr=1)],
                    memcpy=[_copy("c", "DtoH", 1, 1, corr=1)])  # fmt: skip
    else:
        t = _tables(kernels=[_k("k", 5, 5, corr=1)],
                    api=[_api("cudaLaunchKernel", "launch", 0, 2, corr=1),
                         _api("cudaDeviceSynchronize", "sync", 3, 5)])  # fmt: skip
    _one(t)  # asserts length == wall and model_reproduces_times


def test_window_keeps_the_gpu_work_of_the_window() -> None:
    # two iterations: launch [0,10] -> k1 [15,115], sync [20,130];
    #                 launch [1000,1010] -> k2 [1015,1115], sync [1020,1130]
    # window [0,500): only the first iteration's calls, and the GPU work they launched
    # path: runtime 10, launch delay 5, k1 100, return 15 = 130, region [0,130]
    t = _tables(
        kernels=[_k("k1", 15, 115, corr=1), _k("k2", 1015, 1115, corr=2)],
        api=[
            _api("cudaLaunchKernel", "launch", 0, 10, corr=1),
            _api("cudaDeviceSynchronize", "sync", 20, 130),
            _api("cudaLaunchKernel", "launch", 1000, 1010, corr=2),
            _api("cudaDeviceSynchronize", "sync", 1020, 1130),
        ],
    )
    cp = _one(t, window=(0, 500))
    assert (cp.region_start_ns, cp.region_end_ns) == (0, 130)
    assert cp.by_edge == {"runtime": 10, "launch_delay": 5, "gpu_compute": 100, "sync_return": 15}


def test_empty_and_host_only_traces() -> None:
    assert critical_paths(_tables()) == []
    assert critical_paths({}) == []
    # a process with no GPU activity is skipped
    host_only = _tables(api=[_api("cudaGetDevice", "other", 0, 10)], ops=[_op("aten::x", 0, 5)])
    assert critical_paths(host_only) == []


# -- 2. the recorded CUDA traces -------------------------------------------------------------


@pytest.fixture(scope="module", params=[p.name for p in CUDA_FIXTURES])
def cuda_trace(request: pytest.FixtureRequest) -> dict[str, pa.Table]:
    tt = import_paths([Path(__file__).parent / "fixtures" / "cuda" / request.param])
    return {name: getattr(tt, name) for name in TABLES}


def test_fixtures_exist() -> None:
    assert len(CUDA_FIXTURES) >= 2


def test_real_trace_invariants(cuda_trace: dict[str, pa.Table]) -> None:
    cps = critical_paths(cuda_trace)
    assert cps
    for cp in cps:
        _assert_invariants(cp)
        assert cp.stats["backward_dropped"] == 0
        assert cp.by_category["gpu_compute"] + cp.by_category["copy"] > 0
    _assert_what_if_invariants(cuda_trace)


def test_real_trace_single_kernel_what_ifs(cuda_trace: dict[str, pa.Table]) -> None:
    critical = _assert_single_activity_what_ifs(cuda_trace)
    # activities whose whole time is on the path with zero slack exist in both traces; the
    # ones the path goes through alone (no other stream or thread ending at the same
    # instant) save time when shrunk
    assert critical
    assert any(c[4] > 0 for c in critical)


def test_real_trace_process_filter(cuda_trace: dict[str, pa.Table]) -> None:
    cps = critical_paths(cuda_trace)
    for cp in cps:
        again = critical_paths(cuda_trace, process_id=cp.process_id)
        assert [c.length_ns for c in again] == [cp.length_ns]
        assert again[0].by_category == cp.by_category


# -- 3. random small traces ------------------------------------------------------------------


_ACTIONS = ("launch", "launch", "graph", "copy", "memcpy", "sync", "stream_sync", "record",
            "wait")  # fmt: skip


@st.composite
def _random_trace(draw: st.DrawFn) -> dict[str, pa.Table]:
    """1-3 threads (one or two processes) running nested ops that launch kernels and copies on
    1-3 streams, record and wait on events, and synchronise; sometimes with clock skew or
    improperly nested ops."""
    n_threads = draw(st.integers(1, 3))
    n_streams = draw(st.integers(1, 3))
    chaos = draw(st.booleans())
    small = st.integers(0, 40)
    stream_end = dict.fromkeys(range(n_streams), 0)
    corr = itertools.count(1)
    kernels: list[dict[str, Any]] = []
    api: list[dict[str, Any]] = []
    copies: list[dict[str, Any]] = []
    ops: list[dict[str, Any]] = []
    records: list[tuple[int, int, int]] = []  # (corr, stream, time the event completes)
    n_k = itertools.count()

    def gpu_start(call_s: int, call_e: int, s: int) -> int:
        t0 = max(call_e + draw(small), stream_end[s] + draw(small))
        if chaos and draw(st.integers(0, 5)) == 0:
            t0 = max(0, call_s + draw(st.integers(-60, 60)))  # skewed or inside the call
        return t0

    for tid in range(1, n_threads + 1):
        pid = 100 if tid == 1 or not chaos else draw(st.sampled_from([100, 200]))
        t = draw(st.integers(0, 100))
        for _ in range(draw(st.integers(1, 3))):
            op_start = t
            t += draw(small)
            for _ in range(draw(st.integers(0, 3))):
                action = draw(st.sampled_from(_ACTIONS))
                s = draw(st.integers(0, n_streams - 1))
                c = next(corr)
                cs, ce = t, t + draw(st.integers(1, 30))
                if action in ("launch", "graph"):
                    n = 1 if action == "launch" else draw(st.integers(2, 3))
                    k0 = gpu_start(cs, ce, s)
                    if action == "graph" and draw(st.booleans()):
                        k0 = cs + draw(st.integers(0, ce - cs))  # starts before the call returns
                    for _ in range(n):
                        k1 = k0 + draw(st.integers(0, 300))
                        kernels.append(_k(f"k{next(n_k)}", k0, k1, corr=c, stream=s, pid=pid))
                        stream_end[s] = max(stream_end[s], k1)
                        k0 = k1 + draw(small)
                    name = "cudaLaunchKernel" if action == "launch" else "cudaGraphLaunch"
                    api.append(_api(name, "launch", cs, ce, corr=c, pid=pid, tid=tid))
                elif action in ("copy", "memcpy"):
                    c0 = gpu_start(cs, ce, s)
                    c1 = c0 + draw(st.integers(0, 200))
                    copies.append(_copy(f"c{c}", "DtoH", c0, c1, corr=c, stream=s))
                    stream_end[s] = max(stream_end[s], c1)
                    if action == "memcpy":  # blocking: returns after its copy
                        ce = max(ce, c1 + draw(small))
                        api.append(_api("cudaMemcpy", "memcpy", cs, ce, corr=c, pid=pid, tid=tid))
                    else:
                        api.append(_api("cudaMemcpyAsync", "memcpy", cs, ce, corr=c, pid=pid,
                                        tid=tid))  # fmt: skip
                elif action == "sync":
                    ce = max(ce, max(stream_end.values()) + draw(small))
                    api.append(_api("cudaDeviceSynchronize", "sync", cs, ce, corr=c, pid=pid,
                                    tid=tid))  # fmt: skip
                elif action == "stream_sync":
                    ce = max(ce, stream_end[s] + draw(small))
                    api.append(_api("cudaStreamSynchronize", "sync", cs, ce, corr=c, pid=pid,
                                    tid=tid))  # fmt: skip
                    if draw(st.booleans()):
                        api.append(_dev("Stream Sync", ce, corr=c, stream=s, wait_stream=s))
                elif action == "record":
                    api.append(_api("cudaEventRecord", "other", cs, ce, corr=c, pid=pid, tid=tid))
                    records.append((c, s, stream_end[s]))
                else:  # wait: stream s waits for a recorded event
                    api.append(_api("cudaStreamWaitEvent", "sync", cs, ce, corr=c, pid=pid,
                                    tid=tid))  # fmt: skip
                    if records:
                        rc, rs, rt = draw(st.sampled_from(records))
                        stream_end[s] = max(stream_end[s], rt)
                        if draw(st.integers(0, 3)):
                            api.append(_dev("Stream Wait Event", cs, corr=c, stream=s,
                                            wait_stream=rs, wait_corr=rc))  # fmt: skip
                t = ce + draw(small)
            op_end = t + draw(small)
            if chaos and draw(st.booleans()):  # improperly nested: ends anywhere
                op_end = op_start + draw(st.integers(0, 2 * (op_end - op_start) + 10))
            ops.append(_op(f"op{len(ops)}", op_start, op_end, pid=pid, tid=tid))
            t = max(t, op_end) + draw(small)
    return _tables(kernels=kernels, api=api, memcpy=copies, ops=ops)


_PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_PROPERTY
@given(_random_trace())
def test_random_traces_keep_the_invariants(tables: dict[str, pa.Table]) -> None:
    cps = critical_paths(tables)
    for cp in cps:
        _assert_invariants(cp)
    _assert_what_if_invariants(tables)


@_PROPERTY
@given(_random_trace())
def test_random_traces_single_activity_what_ifs(tables: dict[str, pa.Table]) -> None:
    _assert_single_activity_what_ifs(tables)


# -- 4. parse_what_if ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "target", "pattern", "factor"),
    [
        ("kernel~gemm:0.5", "kernel", "gemm", 0.5),
        ("copy:0", "copy", None, 0.0),
        ("cpu:2", "cpu", None, 2.0),
        ("Kernel~GEMM:1e-1", "kernel", "GEMM", 0.1),
        ("runtime~cuda(Launch|Memcpy):0.25", "runtime", "cuda(Launch|Memcpy)", 0.25),
        ("kernel~at::native:0", "kernel", "at::native", 0.0),  # the factor is after the last ':'
        ("idle~:0", "idle", "", 0.0),
    ],
)
def test_parse_what_if_valid(text: str, target: str, pattern: str | None, factor: float) -> None:
    wi = parse_what_if(text)
    assert (wi.target, wi.pattern, wi.factor, wi.text) == (target, pattern, factor, text)
    assert wi.edge_kinds()
    assert set(wi.edge_kinds()) <= set(EDGE_CATEGORY)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("kernel", "expected TARGET[~REGEX]:FACTOR"),
        (":0.5", "expected TARGET[~REGEX]:FACTOR"),
        ("kernel:", "is not a number"),
        ("kernel:fast", "is not a number"),
        ("kernel:-0.5", "must be a number from 0 to 1000"),
        ("kernel:nan", "must be a number from 0 to 1000"),
        ("kernel:inf", "must be a number from 0 to 1000"),
        ("gpus:0.5", "unknown target 'gpus'"),
        ("kernel~(gemm:0.5", "bad regular expression"),
        ("kernel~[:0.5", "bad regular expression"),
    ],
)
def test_parse_what_if_errors(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=r".") as exc:
        parse_what_if(text)
    msg = str(exc.value)
    assert needle in msg
    assert "\n" not in msg
    assert repr(text) in msg


def test_parse_what_if_unknown_target_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as exc:
        parse_what_if("tensor~x:0.5")
    msg = str(exc.value)
    for t in TARGETS:
        assert t in msg.rpartition("one of ")[2]


def test_two_ranks_of_a_real_trace_with_the_same_correlation_ids(tmp_path: Path) -> None:
    """Two ranks imported together (the H100 trace again as pid 505 on device 1, 50 ms
    later): correlation ids repeat across them, and each rank's path is the single trace's."""
    import gzip
    import json

    src = Path(__file__).parent / "fixtures" / "cuda" / "cuda_sync_streams.json.gz"
    with gzip.open(src) as f:
        data = json.loads(f.read())
    alone = critical_paths(_from_import(import_paths([src])))[0]
    second = []
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") == "M":
            continue
        e2 = dict(e)
        if isinstance(e2.get("ts"), int | float):
            e2["ts"] = e2["ts"] + 50_000
        if e2.get("pid") == 504:
            e2["pid"] = 505
        elif e2.get("pid") == 0:
            e2["pid"] = 1
        if e2.get("tid") == 504:
            e2["tid"] = 505
        args = e2.get("args")
        if isinstance(args, dict) and "device" in args:
            e2["args"] = {**args, "device": 1}
        second.append(e2)
    # one file per rank, as torch.profiler writes them, imported together
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_text(json.dumps(data))
    (ranks / "rank1.json").write_text(json.dumps({**data, "traceEvents": second}))
    paths = critical_paths(_from_import(import_paths([ranks])))
    assert sorted(p.process_id for p in paths) == [504, 505]
    for p in paths:
        assert p.stats["gpu_activities"] == alone.stats["gpu_activities"]
        assert p.length_ns == alone.length_ns
        assert p.by_category == alone.by_category


def _from_import(tt: Any) -> dict[str, pa.Table]:
    return {name: getattr(tt, name) for name in TABLES}
