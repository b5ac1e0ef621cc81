"""Roofline rows, node grouping and counter formulas on cases computed by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from aaco.analysis.roofline import (
    counter_work,
    kernel_roofline,
    node_roofline,
    roofline_row,
    roofline_summary,
)
from aaco.session.schema import (
    GRAPH_EDGES,
    GRAPH_NODES,
    KERNEL_COUNTERS,
    KERNELS,
    OP_COSTS,
    OPS,
    ROOFLINE,
)


@dataclass
class FakeCeilings:
    """A ceilings object with round numbers: 2 TFLOP/s float32, 100 GB/s."""

    device: str = "test-device"
    source: str = "calibrated"
    bytes_per_s: float | None = 1e11
    flops_per_s: dict[str, float] = field(default_factory=lambda: {"float32": 2e12})

    def peak_flops(self, dtype: str | None) -> float | None:
        return self.flops_per_s.get(dtype or "")


def row(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "level": "node",
        "name": "n",
        "op_type": "MatMul",
        "dtype": "float32",
        "calls_per_iter": 1.0,
        "peak_flops": 2e12,
        "peak_bytes": 1e11,
        "source": "calibrated",
    }
    base.update(kw)
    return roofline_row(**base)


def test_memory_bound_row_at_its_roof() -> None:
    # 1 GFLOP and 100 MB in 1 ms: intensity 10 FLOP/B < ridge 2e12 / 1e11 = 20 -> memory;
    # attainable = min(2e12, 10 x 1e11) = 1e12 = achieved -> efficiency 1, headroom 1
    r = row(time_ns=1e6, flops=1e9, nbytes=1e8)
    assert r["intensity"] == 10
    assert r["ridge_intensity"] == 20
    assert r["bound"] == "memory"
    assert r["achieved_flops_per_s"] == pytest.approx(1e12)
    assert r["achieved_bytes_per_s"] == pytest.approx(1e11)
    assert r["attainable_flops_per_s"] == pytest.approx(1e12)
    assert r["efficiency"] == pytest.approx(1.0)
    assert r["headroom"] == pytest.approx(1.0)


def test_compute_bound_row_below_its_roof() -> None:
    # 1 GFLOP, 10 MB (intensity 100 > 20) in 4 ms: 2.5e11 FLOP/s of 2e12 -> 1/8, headroom 8
    r = row(time_ns=4e6, flops=1e9, nbytes=1e7)
    assert r["bound"] == "compute"
    assert r["attainable_flops_per_s"] == pytest.approx(2e12)
    assert r["efficiency"] == pytest.approx(0.125)
    assert r["headroom"] == pytest.approx(8.0)


def test_data_movement_and_unknowns() -> None:
    # a Transpose: 0 FLOPs, 50 MB in 1 ms = 5e10 B/s of 1e11 -> half the bandwidth roof
    r = row(time_ns=1e6, flops=0.0, nbytes=5e7, op_type="Transpose")
    assert r["bound"] == "memory"
    assert r["efficiency"] == pytest.approx(0.5)
    assert r["headroom"] == pytest.approx(2.0)
    # no ceilings: nothing invented
    r = row(time_ns=1e6, flops=1e9, nbytes=1e8, peak_flops=None, peak_bytes=None)
    assert r["bound"] is None and r["efficiency"] is None and r["ceiling_source"] is None
    assert r["intensity"] == 10
    # unknown work
    r = row(time_ns=1e6, flops=None, nbytes=None)
    assert r["intensity"] is None and r["bound"] is None and r["achieved_flops_per_s"] is None


def _graph() -> tuple[Any, Any]:
    """a1: x (100 B) + w1 (initializer, 50 B) -> t1 (100 B); a2: t1 -> y (100 B); b: y -> z.

    ORT fused a1 + a2 into node "A": its traffic is x + w1 + y = 250 B (t1 stays inside).
    """
    nodes = GRAPH_NODES.from_rows(
        [
            {"graph": "original", "node_index": 0, "node_name": "a1", "op_type": "MatMul",
             "inputs": ["x", "w1"], "outputs": ["t1"]},
            {"graph": "original", "node_index": 1, "node_name": "a2", "op_type": "Relu",
             "inputs": ["t1"], "outputs": ["y"]},
            {"graph": "original", "node_index": 2, "node_name": "b", "op_type": "Transpose",
             "inputs": ["y"], "outputs": ["z"]},
        ]
    )  # fmt: skip
    edges = GRAPH_EDGES.from_rows(
        [
            {"tensor": "x", "producer": None, "consumer": "a1", "kind": "graph_input",
             "bytes": 100},
            {"tensor": "w1", "producer": None, "consumer": "a1", "kind": "initializer",
             "bytes": 50},
            {"tensor": "t1", "producer": "a1", "consumer": "a2", "kind": "activation",
             "bytes": 100},
            {"tensor": "y", "producer": "a2", "consumer": "b", "kind": "activation",
             "bytes": 100},
            {"tensor": "z", "producer": "b", "consumer": None, "kind": "graph_output",
             "bytes": 100},
        ]
    )  # fmt: skip
    return nodes, edges


def _costs() -> Any:
    rows = [
        ("a1", "MatMul", 1000, 250),
        ("a2", "Relu", 25, 200),
        ("b", "Transpose", 0, 200),
    ]
    return OP_COSTS.from_rows(
        [
            {"node_name": n, "op_type": t, "dtype": "float32", "cost_model": "gemm",
             "flops": f, "bytes": b, "flops_known": True}
            for n, t, f, b in rows
        ]
    )  # fmt: skip


def _ops() -> Any:
    # iteration 0: A 3000 ns, B 1000 ns; iteration 1: A 5000, B 1000 + a second B call 500
    rows = [
        (0, "A", "FusedMatMul", ["a1", "a2"], 3000),
        (0, "b", "Transpose", None, 1000),
        (1, "A", "FusedMatMul", ["a1", "a2"], 5000),
        (1, "b", "Transpose", None, 1000),
        (1, "b", "Transpose", None, 500),
    ]
    return OPS.from_rows(
        [
            {"source": "onnxruntime", "iteration": i, "node_name": n, "op_type": t,
             "original_nodes": o, "start_ns": 0, "dur_ns": d}
            for i, n, t, o, d in rows
        ]
    )  # fmt: skip


def test_node_roofline_groups_fused_nodes() -> None:
    nodes, edges = _graph()
    t = node_roofline(_ops(), _costs(), nodes, edges, FakeCeilings())
    got = {r["name"]: r for r in t.to_pylist()}
    a, b = got["A"], got["b"]
    # A: median of 3000 and 5000 = 4000 ns; flops 1000 + 25; traffic at the group boundary
    assert a["time_ns"] == 4000 and a["calls_per_iter"] == 1.0
    assert a["flops"] == 1025 and a["bytes"] == 250
    # b: per-iteration sums 1000 and 1500 -> median 1250; 3 calls over 2 iterations
    assert b["time_ns"] == 1250 and b["calls_per_iter"] == 1.5
    assert b["flops"] == 0 and b["bytes"] == 300  # 200 B per call x 1.5
    assert a["time_share"] == pytest.approx(4000 / 5250)
    assert [r["name"] for r in t.to_pylist()] == ["A", "b"]  # longest first
    s = roofline_summary(t, FakeCeilings())
    assert s["time_share_memory_bound"] == pytest.approx(1.0)  # both below the ridge
    assert s["ceilings"]["source"] == "calibrated"
    assert len(s["points"]) == 2


def test_node_roofline_takes_the_executed_nodes_own_cost_where_the_originals_fail() -> None:
    nodes, edges = _graph()
    costs = OP_COSTS.from_rows(
        [{"node_name": "a1", "op_type": "MatMul", "cost_model": "gemm", "flops": 1000,
          "bytes": 250, "flops_known": True},
         {"node_name": "a2", "op_type": "Relu", "cost_model": "elementwise", "flops": None,
          "bytes": 200, "flops_known": True},
         {"node_name": "if", "op_type": "If", "cost_model": "control_flow", "flops": 0,
          "bytes": None, "flops_known": True}]
    )  # fmt: skip
    ops = OPS.from_rows(
        [{"source": "onnxruntime", "iteration": 0, "node_name": n, "op_type": t,
          "original_nodes": o, "start_ns": 0, "dur_ns": 1000}
         for n, t, o in (("A", "FusedMatMul", ["a1", "a2"]), ("X", "QuickGelu", None),
                         ("branch_mm", "MatMul", ["if"]), ("Y", "Frobnicate", None))]
    )  # fmt: skip
    executed = OP_COSTS.from_rows(
        [{"node_name": n, "op_type": t, "cost_model": "gemm", "flops": f, "bytes": b,
          "dtype": "float32", "flops_known": True}
         for n, t, f, b in (("A", "FusedMatMul", 1100, 260), ("X", "QuickGelu", 500, 80),
                            ("branch_mm", "MatMul", 4096, 96))]
    )  # fmt: skip
    got = {r["name"]: r for r in node_roofline(ops, costs, nodes, edges, None,
                                               executed=executed).to_pylist()}  # fmt: skip
    # A's group has a member without FLOPs: its own cost, work and traffic together
    assert (got["A"]["flops"], got["A"]["bytes"]) == (1100, 260)
    # X has no mapping: its own cost; the inlined If branch: its own, not the If's 0
    assert (got["X"]["flops"], got["X"]["bytes"]) == (500, 80)
    assert got["branch_mm"]["flops"] == 4096
    assert got["Y"]["flops"] is None  # in neither: unknown
    without = {r["name"]: r for r in node_roofline(ops, costs, nodes, edges, None).to_pylist()}
    assert without["X"]["flops"] is None and without["branch_mm"]["flops"] is None


def test_node_roofline_takes_traffic_from_the_profiles_shapes_when_the_graph_lacks_it() -> None:
    # lac_encoder (Paddle2ONNX): a GRU whose initial_h has a symbolic batch in the graph;
    # its FLOPs are known from X and W, its bytes only from the shapes ORT recorded
    costs = OP_COSTS.from_rows(
        [{"node_name": "gru", "op_type": "GRU", "cost_model": "rnn", "flops": 5000,
          "bytes": None, "dtype": "float32", "flops_known": True}]
    )  # fmt: skip
    ops = OPS.from_rows(
        [{"source": "onnxruntime", "iteration": 0, "node_name": "gru", "op_type": "GRU",
          "original_nodes": ["gru"], "start_ns": 0, "dur_ns": 1000}]
    )  # fmt: skip
    executed = OP_COSTS.from_rows(
        [{"node_name": "gru", "op_type": "GRU", "cost_model": "rnn", "flops": 5000,
          "bytes": 991232, "dtype": "float32", "flops_known": True}]
    )  # fmt: skip
    (row,) = node_roofline(ops, costs, None, None, FakeCeilings(), executed=executed).to_pylist()
    assert (row["flops"], row["bytes"]) == (5000, 991232)
    assert row["bound"] is not None
    (row,) = node_roofline(ops, costs, None, None, FakeCeilings()).to_pylist()
    assert row["bytes"] is None and row["bound"] is None


def test_node_roofline_without_costs_or_ops() -> None:
    t = node_roofline(_ops(), None, None, None, None)
    assert all(r["flops"] is None and r["bound"] is None for r in t.to_pylist())
    assert node_roofline(OPS.empty(), None, None, None, None).num_rows == 0


def test_counter_work_mi300_and_mi200() -> None:
    # MI300: 128 x 10 + 32 x 100 + 64 x (1000 - 10 - 100) + 32 x (500 - 200) + 64 x 200
    #      = 1280 + 3200 + 56960 + 9600 + 12800 = 83840 B
    mi300 = {
        "TCC_BUBBLE_sum": 10, "TCC_EA0_RDREQ_32B_sum": 100, "TCC_EA0_RDREQ_sum": 1000,
        "TCC_EA0_WRREQ_sum": 500, "TCC_EA0_WRREQ_64B_sum": 200,
        # VALU F32: 64 x (ADD 10 + MUL 5 + 2 x FMA 20 + TRANS 1) = 64 x 56 = 3584
        "SQ_INSTS_VALU_ADD_F32": 10, "SQ_INSTS_VALU_MUL_F32": 5, "SQ_INSTS_VALU_FMA_F32": 20,
        "SQ_INSTS_VALU_TRANS_F32": 1,
        # MFMA F16: 512 x 100 = 51200
        "SQ_INSTS_VALU_MFMA_MOPS_F16": 100,
        # L2: 64 x (300 + 100 + 4) = 25856; LDS: (1000 - 200) x 128 = 102400
        "TCP_TCC_READ_REQ_sum": 300, "TCP_TCC_WRITE_REQ_sum": 100,
        "TCP_TCC_ATOMIC_WITH_RET_REQ_sum": 4, "SQ_LDS_IDX_ACTIVE": 1000,
        "SQ_LDS_BANK_CONFLICT": 200,
    }  # fmt: skip
    w = counter_work(mi300)
    assert w["arch"] == "mi300"
    assert w["hbm_bytes"] == 83840
    assert w["flops"] == 3584 + 51200
    assert w["flops_by_dtype"] == {"float32": 3584, "float16_matrix": 51200}
    assert w["l2_bytes"] == 25856 and w["lds_bytes"] == 102400
    # MI200: 32 x 100 + 64 x (1000 - 100) + 64 x 200 + 32 x (500 - 200) = 3200 + 57600 +
    # 12800 + 9600 = 83200 B
    mi200 = {
        "TCC_EA_RDREQ_32B_sum": 100, "TCC_EA_RDREQ_sum": 1000, "TCC_EA_WRREQ_sum": 500,
        "TCC_EA_WRREQ_64B_sum": 200,
    }  # fmt: skip
    w = counter_work(mi200)
    assert w["arch"] == "mi200" and w["hbm_bytes"] == 83200
    assert w["flops"] is None and w["l2_bytes"] is None and w["lds_bytes"] is None


def test_kernel_roofline_joins_counters_by_dispatch() -> None:
    kernels = KERNELS.from_rows(
        [
            {"source": "rocprofv3", "name": "gemm_k", "start_ns": 0, "end_ns": 1000,
             "dur_ns": 1000, "time_is_gpu": True, "dispatch_id": 1, "iteration": 0},
            {"source": "rocprofv3", "name": "gemm_k", "start_ns": 2000, "end_ns": 5000,
             "dur_ns": 3000, "time_is_gpu": True, "dispatch_id": 2, "iteration": 1},
        ]
    )  # fmt: skip
    counters = KERNEL_COUNTERS.from_rows(
        [
            {"source": "rocprofv3", "dispatch_id": d, "kernel_name": "gemm_k", "counter": c,
             "value": v}
            for d in (1, 2)
            for c, v in (("SQ_INSTS_VALU_MFMA_MOPS_F16", 1000.0), ("TCC_EA_RDREQ_sum", 100.0),
                         ("TCC_EA_RDREQ_32B_sum", 0.0), ("TCC_EA_WRREQ_sum", 10.0),
                         ("TCC_EA_WRREQ_64B_sum", 10.0))
        ]
    )  # fmt: skip
    ceil = FakeCeilings(flops_per_s={"float16_matrix": 1e15})
    t, details = kernel_roofline(kernels, counters, ceil)
    (r,) = t.to_pylist()
    # per dispatch: 512 x 1000 FLOPs, 64 x 100 + 64 x 10 = 7040 B; two dispatches over two
    # iterations -> one per iteration; time (1000 + 3000) / 2 = 2000 ns
    assert r["level"] == "kernel" and r["calls_per_iter"] == 1.0
    assert r["flops"] == 512_000 and r["bytes"] == 7040 and r["time_ns"] == 2000
    assert r["dtype"] == "float16_matrix" and r["peak_flops_per_s"] == 1e15
    assert details[0]["arch"] == "mi200" and details[0]["dispatches"] == 2


def test_attributed_gpu_time_replaces_host_launch_time() -> None:
    # on a GPU EP the profile's 4000 ns for A is the launch; its kernels ran 2000 ns per iter
    nodes, edges = _graph()
    t = node_roofline(_ops(), _costs(), nodes, edges, FakeCeilings(), {"A": 2000.0})
    got = {r["name"]: r for r in t.to_pylist()}
    assert got["A"]["time_ns"] == 2000 and got["b"]["time_ns"] == 1250
    assert got["A"]["achieved_flops_per_s"] == pytest.approx(1025 / 2e-6)


# --- the cache-aware roofline and the above-the-roof flag ---------------------------------


def test_a_row_above_its_roof_is_flagged_past_the_tolerance() -> None:
    # compute roof 2e12: 1 GFLOP in 0.45 ms = 2.22e12 (11 % over) is a ceiling problem;
    # in 0.47 ms = 2.13e12 (6 % over) it is within the 10 % tolerance
    assert row(time_ns=4.5e5, flops=1e9, nbytes=1e6)["above_roof"] is True
    assert row(time_ns=4.7e5, flops=1e9, nbytes=1e6)["above_roof"] is False
    # bandwidth roof 1e11: 0 FLOPs, 120 MB in 1 ms = 1.2e11 B/s (20 % over)
    r = row(time_ns=1e6, flops=0.0, nbytes=1.2e8, op_type="Transpose")
    assert r["above_roof"] is True and r["efficiency"] == pytest.approx(1.2)
    # no roof: nothing to be above
    assert (
        row(time_ns=1e6, flops=1e9, nbytes=1e8, peak_flops=None, peak_bytes=None)["above_roof"]
        is None
    )


def _levels_ceilings() -> Any:
    from aaco.session.calibration import Ceilings, MemoryLevel

    # L1 holds 220 B, L2 1000 B: b (200 B per call) fits L1, A (250 B) fits L2
    return Ceilings(device="cpu", source="calibrated", flops_per_s={"float32": 2e12},
                    bytes_per_s=1e10, memory_levels=(MemoryLevel("L1", 220, 4e11),
                                                     MemoryLevel("L2", 1000, 2e11),
                                                     MemoryLevel("DRAM", None, 1e10)),
                    mode="quick", contention="quiet")  # fmt: skip


def test_each_node_is_judged_against_the_level_its_working_set_fits_in() -> None:
    nodes, edges = _graph()
    t = node_roofline(_ops(), _costs(), nodes, edges, _levels_ceilings())
    got = {r["name"]: r for r in t.to_pylist()}
    # A: 250 B per call -> L2 (2e11 B/s): ridge 2e12 / 2e11 = 10 FLOP/B
    assert got["A"]["memory_level"] == "L2" and got["A"]["peak_bytes_per_s"] == 2e11
    assert got["A"]["ridge_intensity"] == pytest.approx(10.0)
    # b: 300 B per iteration over 1.5 calls = 200 B per call -> L1 (4e11 B/s)
    assert got["b"]["memory_level"] == "L1" and got["b"]["peak_bytes_per_s"] == 4e11
    # its efficiency: 300 B in 1250 ns = 2.4e8 B/s of 4e11
    assert got["b"]["efficiency"] == pytest.approx(2.4e8 / 4e11)
    s = roofline_summary(t, _levels_ceilings())
    assert [lv["name"] for lv in s["ceilings"]["memory_levels"]] == ["L1", "L2", "DRAM"]
    assert s["ceilings"]["mode"] == "quick" and s["ceilings"]["contention"] == "quiet"
    assert s["time_share_by_memory_level"] == pytest.approx({"L2": 4000 / 5250, "L1": 1250 / 5250})
    assert s["above_roof"]["rows"] == 0 and s["above_roof"]["message"] is None
    # published peaks or an older calibration: no levels, DRAM's roof, level unknown
    t = node_roofline(_ops(), _costs(), nodes, edges, FakeCeilings())
    assert {r["memory_level"] for r in t.to_pylist()} == {None}
    assert {r["peak_bytes_per_s"] for r in t.to_pylist()} == {1e11}


def test_summary_flags_rows_above_their_roof_and_keeps_them_out_of_efficiency() -> None:

    fine = row(name="ok", time_ns=4e6, flops=1e9, nbytes=1e7)  # efficiency 1/8
    high = row(name="high", time_ns=4e5, flops=1e9, nbytes=1e7)  # 2.5e12 > 2e12 x 1.1
    for r, share in ((fine, 0.9), (high, 0.1)):
        r["time_share"] = share
    s = roofline_summary(ROOFLINE.from_rows([fine, high]), FakeCeilings())
    assert s["above_roof"]["rows"] == 1 and s["above_roof"]["names"] == ["high"]
    assert s["above_roof"]["time_share"] == pytest.approx(0.1)
    assert s["above_roof"]["message"] == (
        "1 operator run above the measured roof: the calibration is too low — re-run "
        "`aaco calibrate` on a quiet machine"
    )
    # the time-weighted efficiency is the fine row's alone
    assert s["weighted_efficiency"] == pytest.approx(0.125)
    published = FakeCeilings(source="published")
    assert (
        "above the published roof"
        in roofline_summary(ROOFLINE.from_rows([high]), published)["above_roof"]["message"]
    )


def test_operators_that_do_no_work_are_not_unknown() -> None:
    # 10 us each: a Reshape (0 FLOPs, 0 bytes: metadata), an If's self time (0 FLOPs, its
    # bytes unknown: its body's nodes are rows of their own), a Transpose whose bytes are
    # unknown (it does move data: unknown), a memory-bound Add
    rows = [
        row(name="r", op_type="Reshape", time_ns=1e4, flops=0, nbytes=0),
        row(name="if", op_type="If", dtype="bool", time_ns=1e4, flops=0, nbytes=None),
        row(name="t", op_type="Transpose", time_ns=1e4, flops=0, nbytes=None),
        row(name="a", op_type="Add", time_ns=1e4, flops=1e3, nbytes=1.2e4),
    ]
    s = roofline_summary(ROOFLINE.from_rows(_with_shares(rows)), FakeCeilings())
    assert s["time_share_no_work"] == pytest.approx(0.5)
    assert s["time_share_unknown"] == pytest.approx(0.25)
    assert s["time_share_memory_bound"] == pytest.approx(0.25)


def _with_shares(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    total = sum(r["time_ns"] for r in rows)
    return [{**r, "time_share": r["time_ns"] / total} for r in rows]


def test_summary_shares_come_from_one_level() -> None:
    # operators (shares summing to 1) and kernels with counters (their own shares summing
    # to 1) in one table: the summary's shares are the operators', never the sum of both
    nodes = [
        row(name="mm", time_ns=3e4, flops=1e9, nbytes=1e6),  # compute
        row(name="add", op_type="Add", time_ns=1e4, flops=1e3, nbytes=1.2e4),  # memory
    ]
    kernels = [
        row(level="kernel", name="k", op_type=None, time_ns=1e4, flops=1e3, nbytes=1.2e4),
    ]
    table = ROOFLINE.from_rows(_with_shares(nodes) + _with_shares(kernels))
    s = roofline_summary(table, FakeCeilings())
    assert s["time_share_compute_bound"] == pytest.approx(0.75)
    assert s["time_share_memory_bound"] == pytest.approx(0.25)
    # a trace imported alone: kernel rows are all there is
    s = roofline_summary(ROOFLINE.from_rows(_with_shares(kernels)), FakeCeilings())
    assert s["time_share_memory_bound"] == pytest.approx(1.0)


# --------------------------------------------------------------------------- instruction roofs


def _fp32_gemm_rows(unit: str | None) -> dict[str, Any]:
    from aaco.analysis.ceilings import published_ceilings

    h100 = published_ceilings("NVIDIA H100 80GB HBM3")  # FP32 SIMT 66.9, TF32 494.7 TF
    ops = OPS.from_rows(
        [{"source": "onnxruntime", "iteration": 0, "node_name": "mm", "op_type": "MatMul",
          "start_ns": 0, "dur_ns": 1_000_000}]
    )  # fmt: skip
    # 200 GFLOP in 1 ms: 200 TF/s, above the FP32 SIMT roof, below the TF32 tensor-core one
    costs = OP_COSTS.from_rows(
        [{"node_name": "mm", "op_type": "MatMul", "flops": 200e9, "bytes": 3 * 8192**2 * 4,
          "dtype": "float", "cost_model": "matmul", "flops_known": True}]
    )  # fmt: skip
    instruction = {"mm": unit} if unit else None
    (row,) = node_roofline(ops, costs, None, None, h100, instruction=instruction).to_pylist()
    return row


def test_an_fp32_gemm_on_tensor_cores_is_held_to_the_tf32_roof() -> None:
    # a cuBLAS xmma_gemm_f32f32_tf32f32 kernel (tf32) or any tensor-core kernel (matrix):
    # NVIDIA's FP32-input tensor-core path is TF32
    for unit in ("tf32", "matrix"):
        row = _fp32_gemm_rows(unit)
        assert row["peak_flops_per_s"] == pytest.approx(494.7e12)
        assert row["efficiency"] == pytest.approx(200e12 / 494.7e12)
        assert row["above_roof"] is False
    # unit unknown: the highest FP32 roof it could have used, the same
    assert _fp32_gemm_rows(None)["peak_flops_per_s"] == pytest.approx(494.7e12)
    # an sgemm (SIMT) cannot reach 200 TF on a 66.9 TF roof: flagged as a ceiling problem,
    # its efficiency not used, rather than a 299 % efficient kernel
    vector = _fp32_gemm_rows("vector")
    assert vector["peak_flops_per_s"] == pytest.approx(66.9e12)
    assert vector["above_roof"] is True


def test_an_fp32_gemm_on_amd_matrix_cores_is_held_to_the_matrix_roof() -> None:
    from aaco.analysis.ceilings import published_ceilings

    mi300x = published_ceilings("AMD Instinct MI300X")
    assert mi300x is not None
    # MFMA FP32 (a Tensile _MI tile): "Matrix FP32" 163.4 TF, not the TF32 (XF32) 653.7
    assert mi300x.peak_flops("float32_matrix") == pytest.approx(163.4e12)
    mi250x = published_ceilings("AMD Instinct MI250X/MI250")
    assert mi250x is not None
    # per GCD: matrix FP32 95.7 / 2, and packed FP32 on the VALU reaches the same
    assert mi250x.peak_flops("float32_matrix") == pytest.approx(95.7e12 / 2)
    assert mi250x.peak_flops("float32_vector") == pytest.approx(95.7e12 / 2)


def test_an_elementwise_op_is_held_to_the_vector_roof() -> None:
    from aaco.analysis.ceilings import published_ceilings

    h100 = published_ceilings("NVIDIA H100 80GB HBM3")
    ops = OPS.from_rows(
        [{"source": "onnxruntime", "iteration": 0, "node_name": "g", "op_type": "Gelu",
          "start_ns": 0, "dur_ns": 1000}]
    )  # fmt: skip
    costs = OP_COSTS.from_rows(
        [{"node_name": "g", "op_type": "Gelu", "flops": 8e6, "bytes": 8e6, "dtype": "float",
          "cost_model": "elementwise", "flops_known": True}]
    )  # fmt: skip
    (row,) = node_roofline(ops, costs, None, None, h100).to_pylist()
    assert row["peak_flops_per_s"] == pytest.approx(66.9e12)  # never the TF32 494.7


def test_node_instructions_from_kernel_names() -> None:
    from aaco.analysis.roofline import node_instructions
    from aaco.session.schema import OP_KERNEL_MAP

    rows = [
        ("tf", "cutlass_80_tensorop_s1688tf32gemm_256x128_16x3_tt_align4", "gemm"),
        (
            "tf_cublas",
            "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_"
            "warpsize2x2x1_tensor16x8x8_kernel",
            "gemm",
        ),
        (
            "ffma",
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_"
            "ffma_aligna4",
            "gemm",
        ),
        ("mfma", "Cijk_Ailk_Bljk_SB_MT64x64x8_MI32x32x2x1_SN_1LDSB0", "gemm"),
        ("mfma", "elementwise_kernel", "elementwise"),  # not a compute kernel: ignored
        ("simt", "ampere_sgemm_32x32_sliced1x4_tn", "gemm"),
        ("valu", "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_1LDSB0", "gemm"),
        ("mixed", "ampere_sgemm_32x32_sliced1x4_tn", "gemm"),
        ("mixed", "my_custom_gemm_kernel", "gemm"),  # the name does not tell
        ("copy", "elementwise_kernel", "elementwise"),
    ]
    op_map = OP_KERNEL_MAP.from_rows(
        [{"kernel_row": i, "kernel_name": k, "family": f, "dur_ns": 1, "op_name": op}
         for i, (op, k, f) in enumerate(rows)]
    )  # fmt: skip
    assert node_instructions(op_map) == {
        "tf": "tf32", "tf_cublas": "tf32", "ffma": "vector", "mfma": "matrix",
        "simt": "vector", "valu": "vector",
    }  # fmt: skip


def test_counter_valu_work_is_held_to_the_vector_roof() -> None:
    from aaco.analysis.ceilings import published_ceilings

    mi300x = published_ceilings("AMD Instinct MI300X")
    kernels = KERNELS.from_rows(
        [{"source": "rocprofv3", "name": "k", "start_ns": 0, "end_ns": 1000, "dur_ns": 1000,
          "time_is_gpu": True, "dispatch_id": 1}]
    )  # fmt: skip
    counters = KERNEL_COUNTERS.from_rows(
        [{"source": "rocprofv3", "dispatch_id": 1, "kernel_name": "k", "counter": c, "value": v}
         for c, v in (("SQ_INSTS_VALU_FMA_F64", 1000.0),)]
    )  # fmt: skip
    table, _ = kernel_roofline(kernels, counters, mi300x)
    (row,) = table.to_pylist()
    # FP64 FMA on VALU: MI300X's FP64 vector roof (81.7 TF), not its FP64 matrix one (163.4)
    assert row["dtype"] == "float64" and row["peak_flops_per_s"] == pytest.approx(81.7e12)


def test_infinite_bytes_give_no_roof_not_a_division_by_zero() -> None:
    """Odd counters (bytes overflowing to inf) make the intensity 0 with work done: the row
    has no bound or efficiency (unknown) instead of raising ZeroDivisionError."""
    from aaco.analysis.roofline import roofline_row

    row = roofline_row(
        level="kernel",
        name="k",
        op_type=None,
        dtype="float32",
        calls_per_iter=1.0,
        time_ns=1000.0,
        flops=1e6,
        nbytes=float("inf"),
        peak_flops=1e12,
        peak_bytes=1e12,
        source="test",
    )
    assert row["intensity"] == 0.0
    assert row["bound"] is None and row["efficiency"] is None
