"""What-to-fix-first items: gains computed by hand, ranking and the Amdahl cap."""

from __future__ import annotations

from typing import Any

import pytest

from aaco.analysis.bottleneck import Signal
from aaco.analysis.recommend import micro_op_chains, recommend
from aaco.session.schema import OPS, ROOFLINE


def _ops(durs_us: list[list[float]]) -> Any:
    rows = []
    for it, durs in enumerate(durs_us):
        t = 0
        for k, d in enumerate(durs):
            rows.append({"source": "onnxruntime", "iteration": it, "node_name": f"n{k}",
                         "op_type": "Add" if d < 10 else "MatMul", "start_ns": t,
                         "dur_ns": int(d * 1000)})  # fmt: skip
            t += int(d * 1000) + 100
    return OPS.from_rows(rows)


def test_micro_op_chains() -> None:
    # iteration 0: [2, 3] | 20 | [1, 1, 1]; iteration 1 the same with 30 us in the middle.
    # Micro-op times 2,3,1,1,1 twice: 10th percentile (the dispatch floor) = 1 us. Chain of 2
    # saves min(1 x 1, 5/2) = 1 us; chain of 3 saves min(2 x 1, 3 x 2/3) = 2 us: 3 us.
    c = micro_op_chains(_ops([[2, 3, 20, 1, 1, 1], [2, 3, 30, 1, 1, 1]]))
    assert c is not None
    assert c["dispatch_floor_ns"] == pytest.approx(1000)
    assert c["fusable_ns"] == pytest.approx(3000)
    assert c["chain_count"] == 2 and c["ops_in_chains"] == 5
    assert c["chains"][0]["first"] == "n0" and c["chains"][0]["length"] == 2
    assert micro_op_chains(_ops([[20, 30]]))["fusable_ns"] == 0  # type: ignore[index]
    assert micro_op_chains(None) is None


def test_micro_op_chains_in_measured_time() -> None:
    # recorded under a profiler that made the pass 4x slower: 12 and 16 us are 3 and 4 us
    # of the measured pass, one chain of 2 with floor 3 us: min(1 x 3, 7 / 2) = 3 us
    c = micro_op_chains(_ops([[12, 16]]), scale=4.0)
    assert c is not None and c["chain_count"] == 1
    assert c["dispatch_floor_ns"] == pytest.approx(3100)  # 10th percentile of 3 and 4 us
    assert c["fusable_ns"] == pytest.approx(3100)
    assert micro_op_chains(_ops([[12, 16]]))["chain_count"] == 0  # type: ignore[index]


def _sig(**v: float) -> dict[str, Signal]:
    return {k: Signal(k, x, "", "test") for k, x in v.items()}


def test_recommend_ranks_and_caps() -> None:
    # latency 0.05 ms = 50 us. Estimates: a compute-bound MatMul of 40 us with headroom 4
    # saves 40 x (1 - 1/4) = 30 us; host work 0.3 x 50 = 15 us; chains 3 us: 48 us in all.
    # The fixed overhead (0.2 x 50 = 10 us, an upper bound) gets the 2 us left.
    rows = ROOFLINE.from_rows(
        [{"level": "node", "name": "mm", "op_type": "MatMul", "calls_per_iter": 1.0,
          "time_ns": 40000.0, "time_share": 0.8, "bound": "compute", "efficiency": 0.25,
          "headroom": 4.0, "intensity": 50.0, "ridge_intensity": 10.0,
          "ceiling_source": "calibrated"}]
    )  # fmt: skip
    items = recommend(
        signals=_sig(host_work_share=0.3, first_iter_vs_p50=5.0, fixed_overhead_share=0.2),
        verdict={"bottleneck_class": "launch-bound", "confidence": 0.7},
        rows=rows,
        ops=_ops([[2, 3, 20, 1, 1, 1], [2, 3, 30, 1, 1, 1]]),
        summary={"latency_ms": {"p50": 0.05}},
        provider="CPUExecutionProvider",
        graph_optimization_level="ORT_ENABLE_BASIC",
    )
    by_class = {i["class"]: i for i in items}
    assert [i["class"] for i in items] == [
        "compute-bound", "cpu-bound", "launch-bound", "latency-bound", "warmup-instability",
    ]  # fmt: skip
    assert by_class["compute-bound"]["gain_ms"] == pytest.approx(0.03)
    assert by_class["compute-bound"]["confidence"] == 0.25
    assert by_class["cpu-bound"]["gain_ms"] == pytest.approx(0.015)
    assert by_class["cpu-bound"]["gain_pct"] == pytest.approx(30.0)
    assert by_class["launch-bound"]["gain_ms"] == pytest.approx(0.003)
    assert by_class["launch-bound"]["confidence"] == 0.7
    assert "ORT_ENABLE_ALL" in by_class["launch-bound"]["action"]
    assert by_class["latency-bound"]["gain_ms"] == pytest.approx(0.002)
    assert by_class["latency-bound"]["capped_by_amdahl"] is True
    assert by_class["latency-bound"]["gain_kind"] == "upper_bound"
    steady = [i["gain_ms"] for i in items if i["gain_kind"] != "first_request"]
    assert sum(steady) == pytest.approx(0.05)
    # first request: (5 - 1) x 0.05 ms, listed last, outside the cap
    assert by_class["warmup-instability"]["gain_ms"] == pytest.approx(0.2)
    assert by_class["warmup-instability"]["rank"] == 5


def test_recommend_needs_a_latency() -> None:
    assert recommend(signals={}, verdict={}, rows=None, ops=None, summary={}, provider=None) == []
