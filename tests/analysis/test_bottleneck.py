"""The bottleneck classifier on signals whose answer is known by construction."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aaco.analysis.bottleneck import (
    RULES,
    Condition,
    Signal,
    classify,
    classify_ops,
    gather_signals,
    micro_op_time_share,
    profiler_scale,
)
from aaco.analysis.ops import group_medians
from aaco.analysis.roofline import node_roofline
from aaco.session.schema import INFERENCE_ITERS, OPS, ROOFLINE


def sigs(**values: float | None) -> dict[str, Signal]:
    """Every signal the rules use, missing unless given."""
    names = {c.signal for r in RULES for c in r.conditions}
    return {
        n: Signal(n, values.get(n), "", "test", None if values.get(n) is not None else "absent")
        for n in names
    }


MAIN_OK = {
    # every main signal present, none firing
    "ops_per_iter": 60.0,
    "micro_op_time_share": 0.1,
    "host_work_share": 0.0,
    "memory_bound_time_share": 0.3,
    "compute_bound_time_share": 0.3,
    "bandwidth_utilization": 0.1,
    "compute_utilization": 0.1,
    "latency_p50_us": 5000.0,
    "first_iter_vs_p50": 1.1,
    "first_iter_excess_ms": 0.5,
    "op_share_of_latency": 0.9,
}


def test_condition_strength_is_a_ramp_from_threshold_to_full() -> None:
    c = Condition("x", 100, 300, 1.0)
    assert [c.strength(v) for v in (50, 100, 200, 300, 900)] == [0.0, 0.0, 0.5, 1.0, 1.0]
    low = Condition("y", 500, 100, 1.0, above=False)  # smaller is stronger
    assert [low.strength(v) for v in (600, 500, 300, 100, 10)] == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert low.holds(400) and not low.holds(600)


def test_launch_bound() -> None:
    # 400 ops/iter: (400-100)/(300-100) -> 1; micro share 0.7: (0.7-0.5)/(0.9-0.5) = 0.5;
    # gpu_microkernel_pct missing (optional): score = (0.3 x 1 + 0.5 x 0.5) / 0.8 = 0.6875
    v = classify(sigs(**{**MAIN_OK, "ops_per_iter": 400.0, "micro_op_time_share": 0.7}))
    assert v["bottleneck_class"] == "launch-bound"
    assert v["score"] == pytest.approx(0.6875, abs=1e-3)
    # completeness 0.8 of the rule's weight, no runner-up: 0.6875 x 0.8 = 0.55
    assert v["confidence"] == pytest.approx(0.55, abs=1e-3)
    assert {e["signal"] for e in v["top_evidence"]} == {"ops_per_iter", "micro_op_time_share"}
    assert all(e["holds"] for e in v["top_evidence"])
    assert any(m["signal"] == "gpu_microkernel_pct" for m in v["missing_evidence"])


def test_memory_bound_with_runner_up_lowers_confidence() -> None:
    base = {**MAIN_OK, "memory_bound_time_share": 0.9, "bandwidth_utilization": 0.7}
    alone = classify(sigs(**base))
    assert alone["bottleneck_class"] == "memory-bound" and alone["score"] == 1.0
    assert alone["confidence"] == 1.0
    # launch-bound as runner-up: ops 200 -> 0.5, micro share 0.7 -> 0.5, score 0.5;
    # confidence = 1 x (1 - 0.5 / 2) x completeness 1 = 0.75
    both = classify(sigs(**{**base, "ops_per_iter": 200.0, "micro_op_time_share": 0.7}))
    assert both["bottleneck_class"] == "memory-bound"
    assert both["secondary"] == [{"class": "launch-bound", "score": 0.5}]
    assert both["confidence"] == pytest.approx(0.75)
    # the operators are a small part of the latency: not memory-bound whatever they do
    assert classify(sigs(**{**base, "op_share_of_latency": 0.2}))["bottleneck_class"] == (
        "balanced"
    )


def test_measurement_validity_comes_first() -> None:
    # first iteration 5x p50 (strength 1) and 20 ms too much (1); trend missing: score 1.
    # memory-bound scores 1 too, but a contaminated measurement is the first thing to fix
    v = classify(
        sigs(**{**MAIN_OK, "memory_bound_time_share": 0.9, "bandwidth_utilization": 0.7,
                "first_iter_vs_p50": 5.0, "first_iter_excess_ms": 20.0})
    )  # fmt: skip
    assert v["bottleneck_class"] == "warmup-instability"
    assert v["secondary"] == [{"class": "memory-bound", "score": 1.0}]
    # confidence = 1 x (1 - 1/2) x completeness 0.8 (trend_shift missing) = 0.4
    assert v["confidence"] == pytest.approx(0.4)
    # a big ratio on a tiny model (excess under 0.5 ms) is noise, not instability
    tiny = classify(sigs(**{**MAIN_OK, "first_iter_vs_p50": 8.0, "first_iter_excess_ms": 0.03}))
    assert tiny["bottleneck_class"] == "balanced"


def test_missing_evidence_gives_unknown_not_a_guess() -> None:
    v = classify(sigs())
    assert v["bottleneck_class"] == "unknown" and v["confidence"] is None
    missing = {m["signal"] for m in v["missing_evidence"]}
    assert {"ops_per_iter", "memory_bound_time_share", "host_work_share"} <= missing
    # every main signal present and quiet: balanced
    assert classify(sigs(**MAIN_OK))["bottleneck_class"] == "balanced"


def test_required_condition_failing_blocks_the_class() -> None:
    # many ops but they are long: not launch-bound
    v = classify(sigs(**{**MAIN_OK, "ops_per_iter": 900.0, "micro_op_time_share": 0.2}))
    assert v["bottleneck_class"] == "balanced"


def test_every_class_gets_its_confidence_by_the_verdicts_formula() -> None:
    # memory-bound scores 1 (completeness 1); launch-bound 0.5 (ops 200 -> 0.5, micro share
    # 0.7 -> 0.5; completeness 0.8, gpu_microkernel_pct missing). MAIN_OK rules out the rest
    base = {**MAIN_OK, "memory_bound_time_share": 0.9, "bandwidth_utilization": 0.7}
    v = classify(sigs(**{**base, "ops_per_iter": 200.0, "micro_op_time_share": 0.7}))
    by = v["confidence_by_class"]
    assert set(by) == {r.cls for r in RULES}
    # the verdict: 1 x (1 - 0.5 / 2) x 1 = 0.75, its entry is the verdict's confidence
    assert v["bottleneck_class"] == "memory-bound"
    assert by["memory-bound"] == v["confidence"] == pytest.approx(0.75)
    # launch-bound, not the verdict: its competitor is the verdict (1),
    # 0.5 x (1 - 1 / 2) x 0.8 = 0.2
    assert by["launch-bound"] == pytest.approx(0.2)
    # a required condition failed (host share 0, compute share 0.3, p50 5 ms, first
    # iteration 1.1x) or had no data (no GPU grid sizes, no clocks): no confidence
    for cls in ("cpu-bound", "compute-bound", "latency-bound", "warmup-instability",
                "under-occupied", "throttling", "frequency-scaling"):  # fmt: skip
        assert by[cls] is None, cls


def test_class_confidence_of_a_steady_state_class_behind_a_validity_verdict() -> None:
    # warmup-instability (score 1, completeness 0.8) wins before memory-bound (score 1)
    v = classify(
        sigs(**{**MAIN_OK, "memory_bound_time_share": 0.9, "bandwidth_utilization": 0.7,
                "first_iter_vs_p50": 5.0, "first_iter_excess_ms": 20.0})
    )  # fmt: skip
    by = v["confidence_by_class"]
    assert by["warmup-instability"] == v["confidence"] == pytest.approx(0.4)
    # memory-bound against the verdict's score 1: 1 x (1 - 1 / 2) x 1 = 0.5
    assert by["memory-bound"] == pytest.approx(0.5)


def test_class_confidence_below_min_score_and_without_a_verdict() -> None:
    # host share 0.35: strength (0.35 - 0.3) / 0.4 = 0.125, cpu_contention missing
    # (optional): score 0.125 < MIN_SCORE, not a candidate; completeness 0.7 (0.7 of 1.0).
    # No candidate at all: balanced, no verdict confidence, but cpu-bound's own
    # confidence is 0.125 x (1 - 0 / 2) x 0.7 = 0.0875
    v = classify(sigs(**{**MAIN_OK, "host_work_share": 0.35}))
    assert v["bottleneck_class"] == "balanced" and v["confidence"] is None
    assert v["confidence_by_class"]["cpu-bound"] == pytest.approx(0.0875, abs=1e-3)
    assert v["confidence_by_class"]["launch-bound"] is None
    # no evidence at all: no class has a confidence
    assert set(classify(sigs())["confidence_by_class"].values()) == {None}


def _iters(lat_us: list[float], pre_us: list[float] | None) -> Any:
    n = len(lat_us)
    return INFERENCE_ITERS.from_columns(
        {
            "phase": ["measured"] * n,
            "iteration": list(range(n)),
            "start_ns": [i * 10_000_000 for i in range(n)],
            "end_ns": [i * 10_000_000 + int(v * 1e3) for i, v in enumerate(lat_us)],
            "latency_ns": [int(v * 1e3) for v in lat_us],
            "preprocess_ns": [int(p * 1e3) for p in pre_us] if pre_us else [None] * n,
        }
    )


def test_gather_signals_from_tables() -> None:
    # latencies 1000 us with 600 us of preprocessing -> host share 0.6 (median of ratios)
    iters = _iters([1000.0] * 6, [600.0] * 6)
    # 2 iterations x 3 ops: 2 us, 4 us, 50 us -> 3 ops/iter, micro share (2+4)/(56) per iter
    ops = OPS.from_rows(
        [
            {"source": "onnxruntime", "iteration": it, "node_name": n, "op_type": "Add",
             "start_ns": 0, "dur_ns": d}
            for it in (0, 1)
            for n, d in (("a", 2000), ("b", 4000), ("c", 50000))
        ]
    )  # fmt: skip
    summary = {
        "latency_ms": {"p50": 1.0},
        "profile": {"coverage": 0.3, "profiler_inflation": 1.0},
        "telemetry": {"sys_cpu_pct_mean": 80.0, "proc_cpu_pct_mean": 100.0,
                      "cpu_freq_mhz_min": 2000.0, "cpu_freq_mhz_max": 2500.0},
    }  # fmt: skip
    s = gather_signals(summary=summary, iters=iters, ops=ops, cpu_count=2)
    assert s["host_work_share"].value == pytest.approx(0.6)
    assert s["ops_per_iter"].value == 3
    assert s["micro_op_time_share"].value == pytest.approx(6 / 56)
    assert s["latency_p50_us"].value == 1000
    # fixed overhead = 1 - coverage 0.3 - host 0.6 = 0.1
    assert s["fixed_overhead_share"].value == pytest.approx(0.1)
    # contention: 0.8 of the machine busy, the worker 1 core of 2 = 0.5 -> 0.3
    assert s["cpu_contention"].value == pytest.approx(0.3)
    assert s["cpu_freq_drop"].value == pytest.approx(0.2)
    assert s["first_iter_vs_p50"].value == pytest.approx(1.0)
    assert s["first_iter_excess_ms"].value == pytest.approx(0.0)
    assert s["op_share_of_latency"].value == pytest.approx(0.3)
    # with the profiled runs timed, the same pass's share: the machine sped up or slowed
    # down between the passes (coverage 0.3 across them), the operators took 0.9 of each run
    same = {**summary, "profile": {**summary["profile"], "coverage_same_pass": 0.9}}
    s2 = gather_signals(summary=same, iters=iters, ops=ops, cpu_count=2)
    assert s2["op_share_of_latency"].value == pytest.approx(0.9)
    assert s["memory_bound_time_share"].value is None
    assert s["memory_bound_time_share"].missing == "no roofline"
    v = classify(s)
    # the clock moved 20 % during the window: that comes first, the host work second
    assert v["bottleneck_class"] == "frequency-scaling"
    assert v["secondary"][0]["class"] == "cpu-bound"


def _op_rows(spec: list[tuple[int, str, int]]) -> Any:
    """OPS rows from (iteration, node, dur_ns) triples."""
    return OPS.from_rows(
        [
            {"source": "onnxruntime", "iteration": it, "node_name": n, "op_type": "Add",
             "start_ns": 0, "dur_ns": d}
            for it, n, d in spec
        ]
    )  # fmt: skip


def test_micro_op_share_ignores_a_stalled_execution() -> None:
    # 400 nodes of 2 us in each of 10 iterations; in iteration 3, five of them stall 3 ms
    # (a preemption): summed durations would give 15,990 / 30,990 = 0.52 (the class flips)
    spec = [(it, f"n{k}", 2_000) for it in range(10) for k in range(400)]
    spec = [(it, n, 3_000_000 if it == 3 and n in {"n0", "n1", "n2", "n3", "n4"} else d)
            for it, n, d in spec]  # fmt: skip
    assert micro_op_time_share(_op_rows(spec)) == 1.0
    # a slow node stays slow when one of its executions was fast: 50 us x 9, 2 us once
    spec = [(it, "slow", 2_000 if it == 0 else 50_000) for it in range(10)]
    spec += [(it, "fast", 5_000) for it in range(10)]
    assert micro_op_time_share(_op_rows(spec)) == pytest.approx(5 / 55)


def test_micro_op_share_with_a_nameless_node() -> None:
    # a profile row without a node name is one node "", not a crash: 5 us of 55 us
    spec: list[tuple[int, Any, int]] = [(it, None, 5_000) for it in range(10)]
    spec += [(it, "slow", 50_000) for it in range(10)]
    assert micro_op_time_share(_op_rows(spec)) == pytest.approx(5 / 55)


def test_micro_op_share_in_measured_time() -> None:
    # 400 nodes recorded at 7-14 us under a profiler that made the pass 25x slower: in the
    # measured pass they are sub-us operators (zoo-launch on the 2-core machine)
    spec = [(it, f"n{k}", 7_000 + 15 * k + 100 * it) for it in range(10) for k in range(400)]
    assert micro_op_time_share(_op_rows(spec)) < 0.5
    assert micro_op_time_share(_op_rows(spec), 25.0) == 1.0
    assert profiler_scale({"profile": {"profiler_inflation": 25.0}}) == 25.0
    # a profiled pass that ran faster, or no figure: durations are taken as recorded
    assert profiler_scale({"profile": {"profiler_inflation": 0.8}}) == 1.0
    assert profiler_scale({"profile": {"profiler_inflation": None}}) == 1.0
    assert profiler_scale(None) == 1.0
    ops = _op_rows(spec)
    summary = {"latency_ms": {"p50": 0.2}, "profile": {"profiler_inflation": 25.0}}
    assert gather_signals(summary=summary, iters=None, ops=ops)["micro_op_time_share"].value == 1


def test_group_medians_match_numpy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, size = int(rng.integers(1, 6)), int(rng.integers(1, 8))
        data = {g: list(rng.integers(0, 50, int(rng.integers(1, size + 1))).astype(float))
                for g in range(n)}  # fmt: skip
        groups = np.array([g for g, v in data.items() for _ in v])
        values = np.array([x for v in data.values() for x in v])
        perm = rng.permutation(len(values))
        got = group_medians(groups[perm], values[perm], n)
        assert np.allclose(got, [np.median(data[g]) for g in range(n)])
        # padded with zeros to `size` values (a node absent from some iterations)
        got = group_medians(groups[perm], values[perm], n, size=size)
        want = [np.median(data[g] + [0.0] * (size - len(data[g]))) for g in range(n)]
        assert np.allclose(got, want)


def test_micro_op_share_typical_time_per_iteration() -> None:
    # "loop" runs 3 x 4 us per iteration (typical 12 us, micro); "big" 30 us but only in
    # 1 of 3 iterations (typical time per iteration: the median of 30, 0, 0 = 0);
    # "mid" 20 us every iteration -> 12 / (12 + 0 + 20)
    spec = [(it, "loop", 4_000) for it in range(3) for _ in range(3)]
    spec += [(0, "big", 30_000)] + [(it, "mid", 20_000) for it in range(3)]
    assert micro_op_time_share(_op_rows(spec)) == pytest.approx(12 / 32)
    # rows without an iteration do not count; nothing but zero durations: no share
    assert micro_op_time_share(_op_rows([(0, "a", 0), (1, "a", 0)])) is None
    t = OPS.from_rows([{"source": "onnxruntime", "iteration": None, "node_name": "x",
                        "op_type": "Add", "start_ns": 0, "dur_ns": 1_000}])  # fmt: skip
    assert micro_op_time_share(t) is None
    assert micro_op_time_share(pa.concat_tables([t, _op_rows([(0, "a", 2_000)])])) == 1.0


def test_classify_ops() -> None:
    rows = ROOFLINE.from_rows(
        [
            {"level": "node", "name": "tiny", "op_type": "Add", "calls_per_iter": 2.0,
             "time_ns": 4000.0, "bound": "memory", "efficiency": 0.01},
            {"level": "node", "name": "gemm", "op_type": "MatMul", "calls_per_iter": 1.0,
             "time_ns": 900000.0, "bound": "compute", "efficiency": 0.8},
            {"level": "node", "name": "custom", "op_type": "X", "calls_per_iter": 1.0,
             "time_ns": 50000.0},
        ]
    )  # fmt: skip
    got = {r["name"]: r for r in classify_ops(rows)}
    # 2 us per call: dispatch dominated; confidence 10 us / 2 us / 4 = 1.25 -> capped at 1
    assert got["tiny"]["bottleneck_class"] == "launch-bound" and got["tiny"]["confidence"] == 1
    assert got["gemm"]["bottleneck_class"] == "compute-bound"
    assert got["gemm"]["confidence"] == 0.8
    assert got["custom"]["bottleneck_class"] == "unknown" and got["custom"]["confidence"] is None


def test_classify_ops_zero_time_per_call_is_unknown() -> None:
    # a profile imported next to another one (ORT nodes in 10 iterations, a Kineto trace in
    # 100): a node's median time per iteration is one of implicit zeros, 0 ns per call
    ops = _op_rows([(it, "a", 5_000) for it in range(3)] + [(0, "rare", 30_000)])
    rows = node_roofline(ops, None, None, None, None)
    assert {r["name"]: r["time_ns"] for r in rows.to_pylist()}["rare"] == 0
    rows = pa.concat_tables([rows, ROOFLINE.from_rows([
        {"level": "node", "name": "zero", "op_type": "Add", "calls_per_iter": 1.0, "time_ns": 0.0},
        {"level": "node", "name": "untimed", "op_type": "Add", "calls_per_iter": 1.0},
        {"level": "node", "name": "no calls", "op_type": "Add", "calls_per_iter": 0.0,
         "time_ns": 8_000.0},
    ])])  # fmt: skip
    got = {r["name"]: r for r in classify_ops(rows)}
    assert got["a"]["bottleneck_class"] == "launch-bound"  # 5 us per call
    for name in ("rare", "zero", "untimed", "no calls"):
        assert got[name]["bottleneck_class"] == "unknown" and got[name]["confidence"] is None
        assert got[name]["evidence"][0] == {"signal": "time_per_call_us", "value": None}


def test_taxonomy_doc_lists_every_rule_as_coded() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "bottleneck_taxonomy.md").read_text()
    for rule in RULES:
        for c in rule.conditions:
            op = "≥" if c.above else "≤"
            line = f"`{c.signal}` {op} {c.threshold:g} → {c.full:g}, {c.weight:g} | "
            line += "yes" if c.required else "no"
            assert line in doc, line


def test_cache_resident_data_is_not_dram_bound() -> None:
    # a memory-bound op moving 1 MiB per call at twice the DRAM roof: its data sat in the
    # 32 MiB last-level cache, so it says nothing about DRAM bandwidth
    rows = ROOFLINE.from_rows(
        [{"level": "node", "name": "add", "op_type": "Add", "calls_per_iter": 1.0,
          "time_ns": 1000.0, "time_share": 1.0, "bytes": 2.0**20, "bound": "memory",
          "achieved_bytes_per_s": 2e10, "peak_bytes_per_s": 1e10, "efficiency": 2.0}]
    )  # fmt: skip
    roof = {"ceilings": {"source": "calibrated"}, "time_share_unknown": 0.0,
            "time_share_memory_bound": 1.0, "time_share_compute_bound": 0.0}  # fmt: skip
    kw: dict[str, Any] = {"summary": {}, "iters": None, "ops": None, "roofline": roof}
    s = gather_signals(**kw, rows=rows, cache_bytes=32 * 2**20)
    assert s["bandwidth_utilization"].value is None
    assert "fits in the last-level cache (32 MiB)" in (s["bandwidth_utilization"].missing or "")
    assert "this calibration has no cache roofs" in (s["bandwidth_utilization"].missing or "")
    # cache size unknown (a GPU's published peaks): taken as it is, at most at the roof
    got = gather_signals(**kw, rows=rows)["bandwidth_utilization"]
    assert got.value == 1.0


def _mem_row(name: str, level: str | None, achieved: float, peak: float, share: float,
             above: bool | None = False) -> dict[str, Any]:  # fmt: skip
    return {"level": "node", "name": name, "op_type": "Add", "calls_per_iter": 1.0,
            "time_ns": 1000.0 * share, "time_share": share, "bytes": 2.0**20,
            "bound": "memory", "achieved_bytes_per_s": achieved, "peak_bytes_per_s": peak,
            "efficiency": achieved / peak, "memory_level": level, "above_roof": above}  # fmt: skip


def test_cache_resident_data_is_judged_against_its_level() -> None:
    # a cache-aware calibration: 1 MiB per call fits the L2, whose roof (1e11 B/s) is the
    # row's peak; the classifier weighs it like any other (no last-level-cache exception)
    rows = ROOFLINE.from_rows(
        [_mem_row("a", "L2", 6e10, 1e11, 0.75), _mem_row("b", "DRAM", 1e10, 2e10, 0.25)]
    )
    roof = {"ceilings": {"source": "calibrated"}, "time_share_unknown": 0.0,
            "time_share_memory_bound": 1.0, "time_share_compute_bound": 0.0}  # fmt: skip
    kw: dict[str, Any] = {"summary": {}, "iters": None, "ops": None, "roofline": roof}
    s = gather_signals(**kw, rows=rows, cache_bytes=32 * 2**20)
    # time-weighted: 0.75 x 0.6 + 0.25 x 0.5
    assert s["bandwidth_utilization"].value == pytest.approx(0.75 * 0.6 + 0.25 * 0.5)


def test_rows_above_their_roof_are_no_evidence() -> None:
    roof = {"ceilings": {"source": "calibrated", "contention": "quiet"}, "time_share_unknown": 0.0,
            "time_share_memory_bound": 1.0, "time_share_compute_bound": 0.0}  # fmt: skip
    kw: dict[str, Any] = {"summary": {}, "iters": None, "ops": None, "roofline": roof}
    # one row at 3x its roof, one at half: only the second counts
    rows = ROOFLINE.from_rows(
        [_mem_row("a", "L1", 3e11, 1e11, 0.5, True), _mem_row("b", "L3", 2e10, 4e10, 0.5)]
    )
    assert gather_signals(**kw, rows=rows)["bandwidth_utilization"].value == pytest.approx(0.5)
    # all of them above: no evidence, and the reason says why
    rows = ROOFLINE.from_rows([_mem_row("a", "L1", 3e11, 1e11, 1.0, True)])
    sig = gather_signals(**kw, rows=rows)["bandwidth_utilization"]
    assert sig.value is None and "above its bandwidth roof" in (sig.missing or "")
    # 1.5x its roof, a quiet calibration: the drift of quiet calibrations (up to 2.1x on a
    # shared VM): it ran at least at the roof, so it counts as saturating it
    rows = ROOFLINE.from_rows(
        [_mem_row("a", "DRAM", 1.5e10, 1e10, 0.5, True), _mem_row("b", "L3", 2e10, 4e10, 0.5)]
    )
    assert gather_signals(**kw, rows=rows)["bandwidth_utilization"].value == pytest.approx(
        0.5 * 1.0 + 0.5 * 0.5
    )
    # the same against a disturbed calibration: its roof is wrong, the row is left out
    disturbed = {**kw, "roofline": {**roof, "ceilings": {"source": "calibrated",
                                                         "contention": "disturbed"}}}  # fmt: skip
    assert gather_signals(**disturbed, rows=rows)["bandwidth_utilization"].value == (
        pytest.approx(0.5)
    )
    # published peaks (no cache roofs, no TF32 entry) or a calibration of unknown quality:
    # the drift allowance does not apply, the row is left out
    for ceil in ({"source": "published"}, {"source": "calibrated"}):
        other = {**kw, "roofline": {**roof, "ceilings": ceil}}
        got = gather_signals(**other, rows=rows)["bandwidth_utilization"]
        assert got.value == pytest.approx(0.5)
    # exactly at the bound (2.5x) still counts; just past it does not
    for ratio, expected in ((2.5, 1.0), (2.51, None)):
        edge = ROOFLINE.from_rows([_mem_row("a", "DRAM", ratio * 1e10, 1e10, 1.0, True)])
        assert gather_signals(**kw, rows=edge)["bandwidth_utilization"].value == expected
    # compute-bound rows follow the same rule
    comp = [
        {
            **_mem_row("g", None, 0.0, 1.0, 1.0, True),
            "op_type": "MatMul",
            "bound": "compute",
            "achieved_flops_per_s": 1.3e11,
            "peak_flops_per_s": 1e11,
        }
    ]
    sig = gather_signals(**kw, rows=ROOFLINE.from_rows(comp))["compute_utilization"]
    assert sig.value == 1.0
    sig = gather_signals(**disturbed, rows=ROOFLINE.from_rows(comp))["compute_utilization"]
    assert sig.value is None and "above its compute roof" in (sig.missing or "")
    # per operator: above its roof, the efficiency is no confidence
    (op,) = classify_ops(ROOFLINE.from_rows([{**_mem_row("a", "L1", 3e11, 1e11, 1.0, True),
                                              "time_ns": 1e6}]))  # fmt: skip
    assert op["bottleneck_class"] == "memory-bound" and op["confidence"] is None
    assert {"signal": "above_roof", "value": True} in op["evidence"]


def test_no_ceilings_reason_comes_from_the_roofline() -> None:
    roof = {"ceilings": None, "ceilings_note": "no ceilings: the quick calibration was "
            "refused, other processes used 80 % of the CPU"}  # fmt: skip
    s = gather_signals(summary={}, iters=None, ops=None, roofline=roof)
    assert s["memory_bound_time_share"].missing == roof["ceilings_note"]
    s = gather_signals(summary={}, iters=None, ops=None, roofline={"ceilings": None})
    assert s["memory_bound_time_share"].missing == "no ceilings: run `aaco calibrate`"


def test_missing_signal_of_a_class_already_ruled_out_is_moot() -> None:
    # memory-bound is ruled out by its time share (0.3 < 0.5): its missing bandwidth signal
    # cannot change the answer, so the session is balanced, not unknown
    v = classify(sigs(**{**MAIN_OK, "bandwidth_utilization": None}))
    assert v["bottleneck_class"] == "balanced"
    v = classify(sigs(**{**MAIN_OK, "bandwidth_utilization": None,
                         "memory_bound_time_share": 0.8}))  # fmt: skip
    assert v["bottleneck_class"] == "unknown"


def test_small_grid_share_counts_workgroups_per_source() -> None:
    from aaco.analysis.bottleneck import small_grid_share
    from aaco.session.schema import KERNELS

    def k(source: str, dur: int, grid: tuple[int, int, int], block: tuple[int, int, int]
          ) -> dict[str, Any]:  # fmt: skip
        return {"source": source, "name": "k", "start_ns": 0, "end_ns": dur, "dur_ns": dur,
                "time_is_gpu": True, "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
                "block_x": block[0], "block_y": block[1], "block_z": block[2]}  # fmt: skip

    kernels = KERNELS.from_rows(
        [
            # Kineto: grid in blocks: 10 x 2 = 20 blocks < 104 CUs -> small (300 ns)
            k("kineto", 300, (10, 2, 1), (256, 1, 1)),
            # rocprof: grid in work-items: 65536 / 256 = 256 workgroups -> not small (100 ns)
            k("rocprofv3", 100, (65536, 1, 1), (256, 1, 1)),
            # rocprof: 1000 / 256 -> 4 workgroups (ceil) -> small (100 ns)
            k("rocprofv3", 100, (1000, 1, 1), (256, 1, 1)),
        ]
    )
    assert small_grid_share(kernels, 104) == (pytest.approx(400 / 500), None)
    assert small_grid_share(kernels, None)[0] is None
    assert small_grid_share(None, 104) == (None, "no GPU kernels")


def test_cpu_contention_is_a_validity_class_ahead_of_the_steady_state() -> None:
    # wait 0.25: (0.25 - 0.1) / (0.4 - 0.1) = 0.5 (weight 0.7); cpu_contention 0.4:
    # (0.4 - 0.2) / (0.6 - 0.2) = 0.5 (weight 0.3): score 0.5, completeness 1
    base = {**MAIN_OK, "memory_bound_time_share": 0.9, "bandwidth_utilization": 0.7}
    v = classify(sigs(**{**base, "runqueue_wait_share": 0.25, "cpu_contention": 0.4}))
    assert v["bottleneck_class"] == "cpu-contention"
    assert v["secondary"][0]["class"] == "memory-bound"
    # 0.5 x (1 - 1 / 2) x 1
    assert v["confidence"] == pytest.approx(0.25)
    # below the threshold the class does not hold and the steady-state verdict stands
    v = classify(sigs(**{**base, "runqueue_wait_share": 0.05, "cpu_contention": 0.4}))
    assert v["bottleneck_class"] == "memory-bound"
    assert v["confidence_by_class"]["cpu-contention"] is None


def test_throttling_needs_the_drivers_throttle_evidence_not_a_clock_drop_alone() -> None:
    # a GPU idling between iterations drops its clocks: no throttle reason, no class
    v = classify(sigs(**{**MAIN_OK, "gpu_clock_drop": 0.5, "gpu_throttle_share": 0.0}))
    assert v["bottleneck_class"] != "throttling"
    assert v["confidence_by_class"]["throttling"] is None
    # throttled 30 % of the window (strength 1, weight 0.6) with a 0.2 drop (0.5, 0.4):
    # score (0.6 + 0.2) / 1 = 0.8
    v = classify(sigs(**{**MAIN_OK, "gpu_clock_drop": 0.2, "gpu_throttle_share": 0.3}))
    assert v["bottleneck_class"] == "throttling"
    assert v["confidence"] == pytest.approx(0.8)


def test_machine_signals_come_from_the_summaries_or_say_why_not() -> None:
    from aaco.analysis.bottleneck import machine_signals

    none = {s.name: s for s in machine_signals({})}
    assert none["gpu_clock_drop"].value is None and "no GPU telemetry" in str(
        none["gpu_clock_drop"].missing
    )
    assert none["runqueue_wait_share"].value is None
    assert "schedstat" in str(none["runqueue_wait_share"].missing)
    got = {
        s.name: s
        for s in machine_signals(
            {
                "gpu": {"clock_drop": 0.2, "throttled_share": 0.1, "violation_share": 0.25},
                "sched": {"wait_share": 0.38, "scope": "window", "coverage": 0.8},
            }
        )
    }
    assert got["gpu_clock_drop"].value == pytest.approx(0.2)
    assert got["gpu_throttle_share"].value == pytest.approx(0.25)  # the larger of the two
    assert got["runqueue_wait_share"].value == pytest.approx(0.38)
    odd = {s.name: s for s in machine_signals({"gpu": {"clock_drop": float("nan")}})}
    assert odd["gpu_clock_drop"].value is None

    # the scheduler's figures of a phase much shorter than the sampling period describe the
    # run around it (start-up, the parent's work): no evidence about the phase
    short = {
        s.name: s
        for s in machine_signals(
            {
                "sched": {
                    "wait_share": 0.38,
                    "scope": "window",
                    "coverage": 0.01,
                    "measured_s": 0.001,
                    "window_s": 0.1,
                }
            }
        )
    }
    assert short["runqueue_wait_share"].value is None
    assert "fills 1% of the 100 ms" in str(short["runqueue_wait_share"].missing)
    run = {s.name: s for s in machine_signals({"sched": {"wait_share": 0.38, "scope": "run"}})}
    assert run["runqueue_wait_share"].value is None
