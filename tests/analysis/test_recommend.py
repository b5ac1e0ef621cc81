"""What-to-fix-first items: gains computed by hand, ranking and the Amdahl cap."""

from __future__ import annotations

from typing import Any

import pytest

from aaco.analysis.bottleneck import Signal, classify
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
    # a verdict without per-class confidences knows only its own class's: every other
    # item's is unknown, neither the efficiency (0.25) nor a default (0.6, 0.3, 0.5)
    assert by_class["compute-bound"]["confidence"] is None
    assert by_class["cpu-bound"]["confidence"] is None
    assert by_class["latency-bound"]["confidence"] is None
    assert by_class["warmup-instability"]["confidence"] is None
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


def test_item_confidence_is_the_classifiers_for_its_class() -> None:
    # The classifier's scores, by hand (docs/bottleneck_taxonomy.md, "Rules"):
    #   memory-bound: time share 0.9 -> 1, bandwidth 0.7 -> 1, op share 0.8 -> 1: score 1,
    #     completeness 1;
    #   cpu-bound: host share 0.5 -> (0.5 - 0.3) / 0.4 = 0.5, contention 0.4 -> 0.5: score
    #     0.5, completeness 1;
    #   launch-bound: ops 200 -> 0.5, micro share 0.7 -> 0.5: score 0.5, completeness 0.8
    #     (gpu_microkernel_pct missing);
    #   compute-bound: no compute share; latency-bound: no p50; warmup-instability: no
    #     first_iter_excess_ms: required signals missing, no score.
    # Verdict memory-bound, runner-up 0.5: 1 x (1 - 0.5 / 2) x 1 = 0.75. The others
    # against the verdict's score 1: cpu-bound 0.5 x 0.5 x 1 = 0.25, launch-bound
    # 0.5 x 0.5 x 0.8 = 0.2.
    signals = _sig(
        memory_bound_time_share=0.9, bandwidth_utilization=0.7, op_share_of_latency=0.8,
        host_work_share=0.5, cpu_contention=0.4, ops_per_iter=200.0,
        micro_op_time_share=0.7, fixed_overhead_share=0.2, first_iter_vs_p50=3.0,
    )  # fmt: skip
    verdict = classify(signals)
    assert verdict["bottleneck_class"] == "memory-bound"
    assert verdict["confidence"] == pytest.approx(0.75)
    # p50 1 ms. A memory-bound Add of 400 us (headroom 2, efficiency 0.3) and a
    # compute-bound MatMul of 200 us (headroom 4, efficiency 0.4)
    rows = ROOFLINE.from_rows(
        [{"level": "node", "name": "add", "op_type": "Add", "calls_per_iter": 1.0,
          "time_ns": 400000.0, "time_share": 0.4, "bound": "memory", "efficiency": 0.3,
          "headroom": 2.0, "intensity": 0.1, "ridge_intensity": 10.0,
          "ceiling_source": "calibrated"},
         {"level": "node", "name": "mm", "op_type": "MatMul", "calls_per_iter": 1.0,
          "time_ns": 200000.0, "time_share": 0.2, "bound": "compute", "efficiency": 0.4,
          "headroom": 4.0, "intensity": 50.0, "ridge_intensity": 10.0,
          "ceiling_source": "calibrated"}]
    )  # fmt: skip
    kw: dict[str, Any] = {
        "signals": signals,
        "rows": rows,
        "ops": _ops([[2, 3, 20, 1, 1, 1], [2, 3, 30, 1, 1, 1]]),
        "summary": {"latency_ms": {"p50": 1.0}},
        "provider": "CPUExecutionProvider",
    }
    items = recommend(verdict=verdict, **kw)
    conf = {i["class"]: i["confidence"] for i in items}
    assert conf == {
        "memory-bound": pytest.approx(0.75),  # the verdict's confidence, not efficiency 0.3
        "cpu-bound": pytest.approx(0.25),
        "launch-bound": pytest.approx(0.2),
        "compute-bound": None,  # not efficiency 0.4: the classifier has no compute evidence
        "latency-bound": None,  # no default 0.3
        "warmup-instability": None,  # first iteration 3x, but no score: no default 0.5
    }
    # without a verdict nothing has a confidence: no number is made up
    assert {i["confidence"] for i in recommend(verdict={}, **kw)} == {None}


def test_recommend_needs_a_latency() -> None:
    assert recommend(signals={}, verdict={}, rows=None, ops=None, summary={}, provider=None) == []
