"""Operator names: the lead of a fused group, the label, unmapped nodes, whole tables."""

from __future__ import annotations

import pyarrow as pa

from aaco.analysis.names import UNMAPPED_MARK, OpName, OpNames, op_name, op_names, pick_original
from aaco.session.schema import OP_COSTS, OPS

FUSED = ["/conv/Conv", "/bn/BatchNormalization", "/Add", "/relu/Relu"]


def test_lead_is_the_member_with_the_most_flops() -> None:
    # a group listed with its Relu first (graph order is not always the Conv first)
    group = ["/relu/Relu", "/conv/Conv", "/bn/BatchNormalization"]
    flops = {"/relu/Relu": 1_000, "/conv/Conv": 9_000_000, "/bn/BatchNormalization": 2_000}
    assert pick_original(group, flops) == "/conv/Conv"
    # a tie goes to the earlier member
    assert pick_original(["/a/Add", "/b/Add"], {"/a/Add": 10, "/b/Add": 10}) == "/a/Add"
    # one member without FLOPs (no formula, unknown shape): graph order decides
    assert pick_original(group, {**flops, "/bn/BatchNormalization": None}) == "/relu/Relu"
    assert pick_original(group, {"/conv/Conv": 5}) == "/relu/Relu"  # others not costed
    assert pick_original(group, None) == "/relu/Relu"
    assert pick_original(["/x/Conv"], {}) == "/x/Conv"


def test_label_of_each_kind_of_node() -> None:
    # stands for itself
    assert op_name("/fc/Gemm", ["/fc/Gemm"]) == OpName("/fc/Gemm", "/fc/Gemm", "/fc/Gemm", 0)
    # renamed by ORT, one original node
    n = op_name("/pool/MaxPool_output_0_nchwc", ["/pool/MaxPool"])
    assert (n.label, n.original, n.fused, n.renamed) == ("/pool/MaxPool", "/pool/MaxPool", 0, True)
    # fused: the lead, and how many others
    n = op_name("/relu/Relu_output_0_nchwc", FUSED, {m: 1 for m in FUSED} | {"/conv/Conv": 99})
    assert n.label == "/conv/Conv +3 fused"
    assert (n.name, n.original, n.fused) == ("/relu/Relu_output_0_nchwc", "/conv/Conv", 3)
    # no original node known, in a profile that maps: ORT's name, marked
    for originals in (None, []):
        n = op_name("ReorderOutput", originals)
        assert n.label == "ReorderOutput" + UNMAPPED_MARK == "ReorderOutput (ORT node)"
        assert n.original is None and n.renamed
    # a source that maps nothing (imported trace): unchanged
    n = op_name("aten::linear", None, mapped=False)
    assert (n.label, n.original, n.renamed) == ("aten::linear", None, False)
    assert n.to_json() == {"label": "aten::linear", "original_name": None}


def _ops(rows: list[tuple[str, str, list[str] | None]]) -> pa.Table:
    return OPS.from_rows(
        [
            {
                "source": src,
                "iteration": it,
                "node_name": name,
                "op_type": "Conv",
                "start_ns": i,
                "dur_ns": 10,
                "original_nodes": orig,
            }
            for it in range(3)  # every node once per iteration: one name each
            for i, (src, name, orig) in enumerate(rows)
        ]
    )


def test_names_of_a_table_per_source_and_with_costs() -> None:
    ops = _ops(
        [
            ("onnxruntime", "/relu/Relu_output_0_nchwc", ["/relu/Relu", "/conv/Conv"]),
            ("onnxruntime", "ReorderInput", None),
            ("onnxruntime", "/fc/Gemm", ["/fc/Gemm"]),
            ("pytorch", "aten::conv2d", None),
        ]
    )
    names = op_names(ops)
    # without costs: graph order
    assert names.label("/relu/Relu_output_0_nchwc") == "/relu/Relu +1 fused"
    assert names.label("ReorderInput") == "ReorderInput (ORT node)"
    assert names.label("/fc/Gemm") == "/fc/Gemm"
    # the Kineto source maps nothing: its names are left alone, as is any name not profiled
    assert "aten::conv2d" not in names.by_node
    assert names.label("aten::conv2d") == "aten::conv2d"
    assert names.get("a kernel") == OpName("a kernel", "a kernel", None)
    costs = OP_COSTS.from_rows(
        [
            {"node_name": "/relu/Relu", "op_type": "Relu", "cost_model": "x", "flops": 64},
            {"node_name": "/conv/Conv", "op_type": "Conv", "cost_model": "x", "flops": 10**6},
        ]
    )
    assert op_names(ops, costs).label("/relu/Relu_output_0_nchwc") == "/conv/Conv +1 fused"


def test_no_mapping_at_all_names_nothing() -> None:
    ops = _ops([("pytorch", "aten::linear", None), ("pytorch", "aten::relu", None)])
    assert op_names(ops) == OpNames()
    assert op_names(None) == OpNames()
    assert op_names(OPS.empty()) == OpNames()
