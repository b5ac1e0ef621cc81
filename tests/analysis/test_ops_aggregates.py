from __future__ import annotations

import pytest

from aaco.analysis.ops import op_aggregates, profile_coverage
from aaco.session.schema import OPS, ORT_RUNS


def _ops() -> object:
    rows = []
    for it in range(2):
        for name, op, dur in (("a", "Conv", 600), ("b", "Relu", 100), ("c", "Conv", 300)):
            rows.append(
                {
                    "source": "onnxruntime",
                    "iteration": it,
                    "node_name": name,
                    "op_type": op,
                    "provider": "CPUExecutionProvider",
                    "dur_ns": dur * 1000,
                }
            )
    return OPS.from_rows(rows)


def test_node_and_type_aggregates_known_by_construction() -> None:
    agg = op_aggregates(_ops()).to_pylist()
    assert [r["node_name"] for r in agg] == ["a", "c", "b"]
    a = agg[0]
    assert a["calls"] == 2 and a["total_ns"] == 1_200_000
    assert a["ns_per_iter"] == pytest.approx(600_000)
    assert a["pct"] == pytest.approx(60.0)
    types = op_aggregates(_ops(), by="op_type").to_pylist()
    assert types[0]["op_type"] == "Conv" and types[0]["pct"] == pytest.approx(90.0)
    assert types[0]["calls"] == 4


def test_empty_ops() -> None:
    assert op_aggregates(OPS.empty()).num_rows == 0


def test_coverage() -> None:
    runs = ORT_RUNS.from_rows(
        [
            {
                "iteration": 0,
                "start_ns": 0,
                "dur_ns": 1_100_000,
                "node_ns": 1_000_000,
                "node_count": 3,
            },
            {
                "iteration": 1,
                "start_ns": 2_000_000,
                "dur_ns": 1_100_000,
                "node_ns": 1_000_000,
                "node_count": 3,
            },
        ]
    )
    cov = profile_coverage(_ops(), runs, measured_mean_ms=1.25, measured_p50_ms=1.25)
    assert cov["node_ms_per_iter"] == pytest.approx(1.0)
    assert cov["node_ms_per_iter_p50"] == pytest.approx(1.0)
    assert cov["ort_run_ms_per_iter"] == pytest.approx(1.1)
    assert cov["coverage"] == pytest.approx(0.8)
    assert cov["overhead_ms"] == pytest.approx(0.25)
    assert cov["ort_internal_overhead_ms"] == pytest.approx(0.1)
    assert cov["ort_run_ms_p50"] == pytest.approx(1.1)
    assert cov["node_share_of_ort_run"] == pytest.approx(1.0 / 1.1)
    assert cov["profiler_inflation"] == pytest.approx(1.1 / 1.25)  # no wall times: ORT run
    assert cov["coverage_same_pass"] is None and cov["profiled_wall_ms_p50"] is None


def test_same_pass_coverage_from_wall_times() -> None:
    # runs of 1 ms node time inside 1.25 ms session.run calls: operators cover 80 %
    runs = ORT_RUNS.from_rows(
        [
            {
                "iteration": i,
                "start_ns": 0,
                "dur_ns": 1_100_000,
                "node_ns": 1_000_000,
                "node_count": 3,
                "wall_ns": 1_250_000,
            }
            for i in range(2)
        ]
    )
    # the measured pass ran twice as fast (a machine that got quieter): cross-pass coverage
    # says 160 %, the same-pass figure still says 80 %
    cov = profile_coverage(_ops(), runs, measured_mean_ms=0.625, measured_p50_ms=0.625)
    assert cov["coverage"] == pytest.approx(1.6)
    assert cov["coverage_same_pass"] == pytest.approx(0.8)
    assert cov["profiled_wall_ms_p50"] == pytest.approx(1.25)
    assert cov["profiler_inflation"] == pytest.approx(2.0)
    unknown = profile_coverage(_ops(), None, None)
    assert unknown["coverage"] is None and unknown["ort_run_ms_per_iter"] is None


def test_coverage_uses_medians() -> None:
    rows = [
        {
            "source": "onnxruntime",
            "iteration": it,
            "node_name": "a",
            "op_type": "Conv",
            "provider": "CPUExecutionProvider",
            "dur_ns": d,
        }
        for it, d in enumerate([1_000_000, 1_000_000, 9_000_000])
    ]
    cov = profile_coverage(OPS.from_rows(rows), None, measured_mean_ms=1.5, measured_p50_ms=1.0)
    assert cov["node_ms_per_iter"] == pytest.approx(11 / 3)
    assert cov["node_ms_per_iter_p50"] == pytest.approx(1.0)
    assert cov["coverage"] == pytest.approx(1.0)  # one slow profiled iteration does not count


def test_no_operator_rows_is_unknown_coverage() -> None:
    # a model whose only node ORT folded away: runs exist, operators do not
    runs = ORT_RUNS.from_rows(
        [
            {
                "iteration": 0,
                "start_ns": 0,
                "dur_ns": 5_000,
                "node_ns": 0,
                "node_count": 0,
                "wall_ns": 20_000,
            }
        ]
    )
    cov = profile_coverage(OPS.empty(), runs, measured_mean_ms=0.02, measured_p50_ms=0.02)
    assert cov["profiled_iterations"] == 0
    assert cov["coverage"] is None and cov["coverage_same_pass"] is None


def test_typical_time_per_iteration_is_a_median_with_implicit_zeros() -> None:
    from aaco.analysis.ops import typical_ns_per_iter

    rows = []
    # node a: 10 us in iterations 0-3 and one 8 ms stall in iteration 4 -> median 10 us
    # (the mean would be 1.608 ms); node b runs twice per iteration (3 + 4 us) but only
    # in iterations 0 and 1 of 5 -> median 0
    for it in range(5):
        rows.append(("a", "MatMul", it, 8_000_000 if it == 4 else 10_000))
        if it < 2:
            rows += [("b", "Add", it, 3_000), ("b", "Add", it, 4_000)]
    ops = OPS.from_rows(
        [
            {"source": "onnxruntime", "iteration": it, "node_name": n, "op_type": t,
             "provider": "CPUExecutionProvider", "dur_ns": d}
            for n, t, it, d in rows
        ]
    )  # fmt: skip
    assert typical_ns_per_iter(ops) == {"a": pytest.approx(10_000), "b": pytest.approx(0.0)}
    assert typical_ns_per_iter(ops, "op_type") == {
        "MatMul": pytest.approx(10_000),
        "Add": pytest.approx(0.0),
    }
    assert typical_ns_per_iter(OPS.empty()) == {}
    with pytest.raises(ValueError, match="by must be"):
        typical_ns_per_iter(ops, "provider")


def test_iterations_are_counted_within_each_source() -> None:
    from aaco.analysis.ops import per_iteration_medians

    rows = []
    # an ONNX Runtime profile of 3 iterations and an imported trace of 10 in one table: the
    # ORT node's median is over its own 3 iterations, not 10 (7 of them zeros)
    for it in range(3):
        rows.append(("onnxruntime", "conv", "Conv", it, 5_000))
    for it in range(10):
        rows += [("pytorch", "aten::mm", "aten::mm", it, 2_000)] * 2
    ops = OPS.from_rows(
        [
            {"source": src, "iteration": it, "node_name": n, "op_type": t,
             "provider": "CPUExecutionProvider", "dur_ns": d}
            for src, n, t, it, d in rows
        ]
    )  # fmt: skip
    out = per_iteration_medians(ops, ("node_name", "op_type"))
    assert out[("conv", "Conv")] == (pytest.approx(5_000), pytest.approx(1.0))
    assert out[("aten::mm", "aten::mm")] == (pytest.approx(4_000), pytest.approx(2.0))


def test_keys_keep_nulls_and_any_characters() -> None:
    from aaco.analysis.ops import per_iteration_medians

    ops = OPS.from_rows(
        [
            {"source": None, "iteration": 0, "node_name": "a\x1fb", "op_type": None,
             "provider": "CPUExecutionProvider", "dur_ns": 1_000},
            {"source": None, "iteration": 1, "node_name": "a\x1fb", "op_type": None,
             "provider": "CPUExecutionProvider", "dur_ns": 3_000},
            {"source": None, "iteration": 1, "node_name": "c", "op_type": "Add",
             "provider": "CPUExecutionProvider", "dur_ns": 5_000},
        ]
    )  # fmt: skip
    out = per_iteration_medians(ops, ("node_name", "op_type"))
    assert out == {("a\x1fb", None): (2_000.0, 1.0), ("c", "Add"): (2_500.0, 0.5)}
