"""Derived timeline and launch metrics on a hand-built trace whose answers are known.

The trace (times in microseconds, stored in ns):

device 0, stream 7: K1 gemm [10,40) launched [2,5); K2 elementwise [45,55) launched [6,8);
K3 NCCL all-reduce [100,120) launched [60,62); K4 gemm [200,230) launched [90,95).
device 0, stream 8: memcpy HtoD [20,50) (cudaMemcpyAsync [15,18)); K5 softmax [60,61)
launched [55,57). device 1, stream 3: K6 [0,10) and K7 [15,27), Triton pointwise, no launch
calls. One ProfilerStep annotation spans [0,250).

Temporal breakdown of device 0 by hand: total = 230 - 10 = 220; busy union = [10,55) +
[60,61) + [100,120) + [200,230) = 96, so idle = 124; compute union (all but memcpy and
NCCL) = 30 + 10 + 1 + 30 = 71; non-compute = 220 - 71 - 124 = 25.
HTA 0.2.x (`TraceAnalysis.get_temporal_breakdown`) on the same events written as a Kineto
trace (rank 0, device 0 only) gave: idle_time 124 us, compute_time 71 us, non_compute_time
25 us, kernel_time 220 us (56.36 / 32.27 / 11.36 %); `get_idle_time_breakdown` gave stream 7
host_wait 45, kernel_wait 5, other 80 us and stream 8 host_wait 10 us, as asserted below;
`get_cuda_kernel_launch_stats` gave the same delays and CPU durations but left out K3 (its
`cuLaunchKernel` is not in HTA's list of launch calls) and added the memcpy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aaco.analysis.launches import match_copies, match_launches
from aaco.analysis.timeline import (
    derived_metrics,
    gpu_active_ratio,
    hta_is_compute,
    hta_selection,
    hta_temporal_breakdown,
    idle_breakdown,
    kernel_summary,
    launch_metrics,
    launch_stats,
    measured_window,
    merge_intervals,
    temporal_breakdown,
    union_ns,
)
from aaco.session.schema import ANNOTATIONS, API_CALLS, KERNELS, MEMCPY

US = 1_000
GEMM = "ampere_sgemm_128x64_nn"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>()"
TRITON = "triton_poi_fused_add_0"

# name, start, end (us), device, stream, correlation, iteration
KERNEL_ROWS = [
    (GEMM, 10, 40, 0, 7, 1, 0),
    (ADD, 45, 55, 0, 7, 2, 0),
    (NCCL, 100, 120, 0, 7, 3, 1),
    (GEMM, 200, 230, 0, 7, 4, 1),
    (SOFTMAX, 60, 61, 0, 8, 6, 0),
    (TRITON, 0, 10, 1, 3, None, 0),
    (TRITON, 15, 27, 1, 3, None, 1),
]
# name, kind, start, end (us), correlation
API_ROWS = [
    ("cudaLaunchKernel", "launch", 2, 5, 1),
    ("cudaLaunchKernel", "launch", 6, 8, 2),
    ("cuLaunchKernel", "launch", 60, 62, 3),
    ("cudaLaunchKernel", "launch", 90, 95, 4),
    ("cudaMemcpyAsync", "memcpy", 15, 18, 5),
    ("cudaLaunchKernel", "launch", 55, 57, 6),
]


def _kernels(gpu_time: bool = True) -> pa.Table:
    rows: list[dict[str, Any]] = [
        {"source": "test", "name": n, "start_ns": s * US, "end_ns": e * US,
         "dur_ns": (e - s) * US, "time_is_gpu": gpu_time, "device": d, "stream": st,
         "correlation_id": c, "iteration": it}
        for n, s, e, d, st, c, it in KERNEL_ROWS
    ]  # fmt: skip
    return KERNELS.from_rows(rows)


def _api() -> pa.Table:
    return API_CALLS.from_rows(
        [
            {"source": "test", "domain": "cuda_runtime", "name": n, "kind": k,
             "start_ns": s * US, "end_ns": e * US, "dur_ns": (e - s) * US,
             "correlation_id": c, "thread_id": 11}
            for n, k, s, e, c in API_ROWS
        ]
    )  # fmt: skip


def _memcpy() -> pa.Table:
    return MEMCPY.from_rows(
        [
            {"source": "test", "name": "Memcpy HtoD (Pageable -> Device)", "kind": "HtoD",
             "start_ns": 20 * US, "end_ns": 50 * US, "dur_ns": 30 * US, "device": 0,
             "stream": 8, "correlation_id": 5, "bytes": 4096},
        ]
    )  # fmt: skip


def _steps() -> pa.Table:
    return ANNOTATIONS.from_rows(
        [{"source": "test", "kind": "step", "name": "ProfilerStep#3", "start_ns": 0,
          "dur_ns": 250 * US, "step": 3}]
    )  # fmt: skip


def test_merge_intervals_and_union() -> None:
    s = np.array([50, 0, 10, 30, 100])
    e = np.array([60, 20, 15, 50, 100])
    ms, me = merge_intervals(s, e)
    # [30,50) touches [50,60): merged like HTA does; the empty [100,100) stays a point.
    assert ms.tolist() == [0, 30, 100]
    assert me.tolist() == [20, 60, 100]
    assert union_ns(s, e) == 50
    assert union_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


def test_window_sources() -> None:
    k = _kernels()
    assert measured_window(k, _memcpy(), _steps()) == {
        "start_ns": 0, "end_ns": 250 * US, "source": "steps",
    }  # fmt: skip
    assert measured_window(k, _memcpy()) == {
        "start_ns": 0, "end_ns": 230 * US, "source": "gpu_activity",
    }  # fmt: skip
    assert measured_window(k, window=(5, 9))["source"] == "argument"
    assert measured_window(_kernels(gpu_time=False))["source"] is None


def test_gpu_active_ratio_overall_and_per_device() -> None:
    r = gpu_active_ratio(_kernels(), 0, 250 * US)
    # Kernels only (the copy is not kernel time): device 0 busy 30+10+20+30+1 = 91 us,
    # device 1 busy 22 us; merged over devices [0,40)+[45,55)+1+20+30 = 101.
    assert r["overall"] == pytest.approx(101 / 250)
    assert r["per_device"] == {0: pytest.approx(91 / 250), 1: pytest.approx(22 / 250)}
    # Clipping: window [20, 50) us is fully covered by K1 [10,40) and K2 [45,55) except 5 us.
    assert gpu_active_ratio(_kernels(), 20 * US, 50 * US)["overall"] == pytest.approx(25 / 30)
    assert gpu_active_ratio(_kernels(gpu_time=False), 0, 250 * US)["overall"] is None
    assert gpu_active_ratio(_kernels(), None, None)["overall"] is None


def test_temporal_breakdown_matches_hand_and_hta() -> None:
    rows = {r["device"]: r for r in temporal_breakdown(_kernels(), _memcpy())}
    d0 = rows[0]
    assert (d0["idle_ns"], d0["compute_ns"], d0["non_compute_ns"], d0["total_ns"]) == (
        124 * US, 71 * US, 25 * US, 220 * US,
    )  # fmt: skip
    assert d0["idle_pct"] == pytest.approx(100 * 124 / 220)
    assert d0["compute_pct"] == pytest.approx(100 * 71 / 220)
    assert d0["non_compute_pct"] == pytest.approx(100 * 25 / 220)
    d1 = rows[1]
    assert (d1["idle_ns"], d1["compute_ns"], d1["non_compute_ns"], d1["total_ns"]) == (
        5 * US, 22 * US, 0, 27 * US,
    )  # fmt: skip
    assert temporal_breakdown(_kernels(gpu_time=False), _memcpy()) == []


def test_hta_selection_drops_last_step_and_untraced_launches() -> None:
    k, mc, api = _kernels(), _memcpy(), _api()
    # one step: HTA filters nothing
    assert hta_selection(k, mc, api, _steps()) == (k, mc)
    two = ANNOTATIONS.from_rows(
        [{"source": "test", "kind": "step", "name": f"ProfilerStep#{i}", "start_ns": s * US,
          "dur_ns": d * US, "step": i} for i, s, d in ((3, 0, 58), (4, 58, 200))]
    )  # fmt: skip
    kk, mm = hta_selection(k, mc, api, two)
    # launches starting before 58 us: correlations 1, 2, 5 (memcpy), 6; the kernels of the
    # last step (3, 4) and those with no launch call (device 1) are dropped
    assert sorted(kk.column("correlation_id").to_pylist()) == [1, 2, 6]
    assert mm.column("correlation_id").to_pylist() == [5]
    # device 0 then spans [10, 61): busy [10,55) + [60,61) = 46; compute 30 + 10 + 1 = 41
    (row,) = temporal_breakdown(kk, mm)
    assert (row["total_ns"], row["idle_ns"], row["compute_ns"], row["non_compute_ns"]) == (
        51 * US, 5 * US, 41 * US, 5 * US,
    )  # fmt: skip


def test_idle_breakdown_host_kernel_and_other_waits() -> None:
    k, api, mc = _kernels(), _api(), _memcpy()
    t = idle_breakdown(k, mc, match_launches(k, api), match_copies(mc, api))
    got = {(r["device"], r["stream"]): r for r in t.to_pylist()}
    # stream 7: K2 gap 5 (launched before K1 ended) -> kernel_wait; K3 gap 45, launched at
    # 60 after K2 ended at 55 -> host_wait; K4 gap 80, launched at 90 before K3 ended ->
    # other. stream 8: K5 gap 10, launched at 55 after the copy ended at 50 -> host_wait.
    assert got[(0, 7)]["host_wait_ns"] == 45 * US
    assert got[(0, 7)]["kernel_wait_ns"] == 5 * US
    assert got[(0, 7)]["other_ns"] == 80 * US
    assert got[(0, 7)]["idle_ns"] == 130 * US
    assert got[(0, 7)]["host_wait_ratio"] == pytest.approx(45 / 130)
    assert (got[(0, 8)]["host_wait_ns"], got[(0, 8)]["idle_ns"]) == (10 * US, 10 * US)
    # no launch calls on device 1: the 5 us gap can only be kernel_wait
    assert (got[(1, 3)]["kernel_wait_ns"], got[(1, 3)]["host_wait_ns"]) == (5 * US, 0)
    # a lower threshold turns the short gaps into "other"
    t2 = idle_breakdown(k, mc, match_launches(k, api), None, consecutive_kernel_delay_ns=1)
    got2 = {(r["device"], r["stream"]): r for r in t2.to_pylist()}
    assert got2[(0, 7)]["other_ns"] == 85 * US
    # without copy launches the copy-preceded K5 gap is still host_wait (K5's own launch)
    assert got2[(0, 8)]["host_wait_ns"] == 10 * US


def test_launch_stats() -> None:
    k, api = _kernels(), _api()
    s = launch_stats(k, api)
    assert (s["matched"], s["unmatched"]) == (5, 2)
    delays = np.array([5, 37, 38, 105, 3]) * US
    assert s["launch_delay_ns"] == {
        "mean": pytest.approx(delays.mean()), "p50": 37 * US,
        "p95": pytest.approx(91.6 * US), "max": 105 * US,
    }  # fmt: skip
    assert s["cpu_launch_ns"]["max"] == 5 * US
    assert s["cpu_launch_ns"]["p50"] == 2 * US
    # K5 ran 1 us on the GPU after a 2 us launch call
    assert s["short_kernels"] == {"count": 1, "share": pytest.approx(1 / 5)}
    assert (s["runtime_outliers"], s["delay_outliers"]) == (0, 1)
    assert s["per_api"] == {"cudaLaunchKernel": 4, "cuLaunchKernel": 1}


def test_kernel_summary_by_family_and_name() -> None:
    t = kernel_summary(_kernels(), by="family")
    rows = {r["family"]: r for r in t.to_pylist()}
    assert t.column("family").to_pylist() == ["gemm", "elementwise", "communication", "softmax"]
    assert rows["gemm"]["count"] == 2 and rows["gemm"]["total_ns"] == 60 * US
    assert rows["gemm"]["std_ns"] == 0.0
    ew = rows["elementwise"]
    assert (ew["count"], ew["total_ns"], ew["min_ns"], ew["max_ns"]) == (
        3,
        32 * US,
        10 * US,
        12 * US,
    )
    assert ew["mean_ns"] == pytest.approx(32 * US / 3)
    assert ew["std_ns"] == pytest.approx(float(np.std([10, 10, 12], ddof=1)) * US)
    assert ew["share"] == pytest.approx(32 / 113)
    assert rows["softmax"]["std_ns"] == 0.0  # one call
    by_name = {r["name"]: r for r in kernel_summary(_kernels()).to_pylist()}
    assert by_name[TRITON]["count"] == 2 and by_name[TRITON]["family"] == "elementwise"
    assert by_name[SOFTMAX]["short_name"] == "at::native::cunn_SoftMaxForward"
    with pytest.raises(ValueError):
        kernel_summary(_kernels(), by="stream")


def test_launch_metrics() -> None:
    m = launch_metrics(_kernels(), graph_node_count=7, iterations=2, window_ns=250 * US)
    assert m["kernel_count"] == 7
    assert m["kar"] == pytest.approx(0.5)  # 7 kernels / 2 iterations / 7 nodes
    assert m["microkernel_pct"] == pytest.approx(100 / 7)  # only K5 (1 us) is under 10 us
    assert m["launch_rate_per_s"] == pytest.approx(28_000.0)
    assert m["launch_tax_score"] == pytest.approx(4.0)
    kpi = m["kernels_per_iteration"]
    assert (kpi["mean"], kpi["iterations"]) == (3.5, 2)
    assert kpi["std"] == pytest.approx(math.sqrt(0.5))
    assert kpi["cv"] == pytest.approx(math.sqrt(0.5) / 3.5)
    unknown = launch_metrics(_kernels(), graph_node_count=None, iterations=2, window_ns=None)
    assert (unknown["kar"], unknown["launch_rate_per_s"], unknown["launch_tax_score"]) == (
        None, None, None,
    )  # fmt: skip
    m2 = launch_metrics(_kernels(), 7, 2, 250 * US, microkernel_threshold_ns=11 * US)
    assert m2["microkernel_pct"] == pytest.approx(300 / 7)  # K2 and K6 (10 us) join K5


def test_derived_metrics_assembles_json_ready_dict() -> None:
    import json

    d = derived_metrics(_kernels(), _api(), _memcpy(), _steps(), graph_node_count=7)
    json.dumps(d)  # JSON-ready
    assert d["window"] == {"start_ns": 0, "end_ns": 250 * US, "source": "steps"}
    assert d["gpu_active_ratio"] == pytest.approx(101 / 250)
    assert d["kar"] == pytest.approx(0.5)
    assert d["kernel_count"] == 7 and d["iterations"] == 2
    assert d["launch_tax_score"] == pytest.approx(4.0)
    assert d["temporal_breakdown"][0]["idle_ns"] == 124 * US
    assert len(d["idle_breakdown"]) == 3
    assert d["launch_stats"]["matched"] == 5
    for key in ("microkernel_pct", "launch_rate_per_s", "kernels_per_iteration"):
        assert key in d


def test_derived_metrics_unknowns() -> None:
    d = derived_metrics(_kernels(gpu_time=False))
    assert d["window"]["source"] is None
    assert d["gpu_active_ratio"] is None
    assert d["kar"] is None and d["launch_rate_per_s"] is None
    assert d["launch_stats"] is None
    assert d["temporal_breakdown"] == [] and d["idle_breakdown"] == []
    empty = derived_metrics(KERNELS.empty())
    assert empty["kernel_count"] == 0 and empty["microkernel_pct"] is None


# --- HTA's figure exactly, on real traces and by construction -----------------------------

KINETO = Path(__file__).parents[1] / "importers" / "fixtures" / "kineto"


@pytest.mark.parametrize(
    ("trace", "hta_us"),
    [
        # HolisticTraceAnalysis 0.5.0 (pandas 2.3.3), TraceAnalysis(...).get_temporal_breakdown()
        # on these very files: idle, compute, non-compute, kernel_time in µs
        ("hta_event_sync_multi_stream.json.gz", (19132, 371, 3, 19506)),
        ("hta_mi250_rocm6.2_train.json.gz", (8780, 96, 35, 8911)),
    ],
)
def test_hta_exact_breakdown_equals_hta_on_real_traces(
    trace: str, hta_us: tuple[int, int, int, int]
) -> None:
    from aaco.importers.registry import import_paths
    from aaco.ingest import analyze_trace

    metrics = analyze_trace(import_paths([KINETO / trace])).metrics
    (row,) = metrics["temporal_breakdown_hta"]
    got = tuple(row[k] for k in ("idle_ns", "compute_ns", "non_compute_ns", "total_ns"))
    assert got == tuple(us * US for us in hta_us)
    # AACO's own figure is within half a point of HTA's on both
    ours = metrics["temporal_breakdown"][0]
    for k in ("idle", "compute", "non_compute"):
        assert abs(ours[f"{k}_pct"] - row[f"{k}_pct"]) < 0.5


def test_hta_name_rule() -> None:
    compute = ["ampere_sgemm_128x64_nn", "Stream Wait Event", "__amd_rocclr_copyBuffer",
               "rcclKernel_AllReduce", "fill Memset kernel"]  # fmt: skip
    other = ["Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "ncclDevKernel_AllReduce",
             "Stream Sync", "Context Sync", "Event Sync", "dma_copy", "foo Memcpy bar"]  # fmt: skip
    assert all(hta_is_compute(n) for n in compute)
    assert not any(hta_is_compute(n) for n in other)


def test_hta_exact_rounds_pools_and_counts_syncs() -> None:
    """By construction: two devices pooled in one row; a Stream Wait Event counts as
    compute and a Context Sync on stream 4294967295 stretches the window (HTA's rules);
    with rounding every start goes up and every end down to whole µs."""
    k = KERNELS.from_rows(
        [
            {"source": "t", "name": "gemm", "device": 0, "stream": 7, "start_ns": 10_400,
             "end_ns": 20_600, "dur_ns": 10_200, "time_is_gpu": True, "correlation_id": 1},
            {"source": "t", "name": "gemm", "device": 1, "stream": 3, "start_ns": 30_000,
             "end_ns": 40_000, "dur_ns": 10_000, "time_is_gpu": True, "correlation_id": 2},
        ]
    )  # fmt: skip
    syncs = API_CALLS.from_rows(
        [
            {"source": "t", "domain": "cuda_sync", "name": "Stream Wait Event", "kind": "sync",
             "start_ns": 20_600, "end_ns": 22_600, "dur_ns": 2_000, "device": 0, "stream": 7},
            {"source": "t", "domain": "cuda_sync", "name": "Context Sync", "kind": "sync",
             "start_ns": 50_000, "end_ns": 60_000, "dur_ns": 10_000, "device": 0,
             "stream": 4294967295},
            {"source": "t", "domain": "cuda_sync", "name": "Event Sync", "kind": "sync",
             "start_ns": 70_000, "end_ns": 80_000, "dur_ns": 10_000, "device": 0, "stream": -1},
        ]
    )  # fmt: skip
    (row,) = hta_temporal_breakdown(k, None, syncs, None)
    # events [10.4, 22.6) on device 0, [30, 40) on device 1, the Context Sync [50, 60);
    # the Event Sync on stream -1 is not GPU time to HTA
    assert row["devices"] == [0, 1] and row["device"] is None
    assert row["total_ns"] == 60_000 - 10_400
    assert row["compute_ns"] == (22_600 - 10_400) + 10_000
    assert row["non_compute_ns"] == 10_000
    assert row["idle_ns"] == row["total_ns"] - row["compute_ns"] - 10_000
    (r2,) = hta_temporal_breakdown(k, None, syncs, None, round_us=True)
    # rounded: gemm [11, 20), wait [21, 22), gemm [30, 40), context sync [50, 60)
    assert (r2["total_ns"], r2["compute_ns"], r2["non_compute_ns"]) == (49_000, 20_000, 10_000)
    # AACO's own figure: per device, only syncs on a real stream, never as compute
    rows = {r["device"]: r for r in temporal_breakdown(k, None, syncs)}
    assert rows[0]["total_ns"] == 22_600 - 10_400 and rows[0]["non_compute_ns"] == 2_000
    assert rows[1]["total_ns"] == 10_000


def test_derived_metrics_uses_hta_selection_with_two_steps() -> None:
    two = ANNOTATIONS.from_rows(
        [{"source": "test", "kind": "step", "name": f"ProfilerStep#{i}", "start_ns": s * US,
          "dur_ns": d * US, "step": i} for i, s, d in ((3, 0, 58), (4, 58, 200))]
    )  # fmt: skip
    d = derived_metrics(_kernels(), _api(), _memcpy(), two)
    # the same events as test_hta_selection_drops_last_step_and_untraced_launches keeps
    (row,) = [r for r in d["temporal_breakdown"] if r["device"] == 0]
    assert (row["total_ns"], row["idle_ns"], row["compute_ns"]) == (51 * US, 5 * US, 41 * US)
    assert d["hta_selection"]["kernels_dropped"] == 4
    (hta,) = d["temporal_breakdown_hta"]
    # HTA pools device 1 too, but its kernels had no traced launch: dropped there as well
    assert hta["devices"] == [0] and hta["total_ns"] == 51 * US
