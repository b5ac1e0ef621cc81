"""FLOP and byte formulas per operator family, on shapes whose answer is computed by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco.analysis.cost import cost_summary, model_costs, node_costs
from aaco.analysis.graph import extract_graph
from aaco.config import load_registry
from aaco.models.registry import build_cached

F = TensorProto.FLOAT


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[tuple[str, int, list[Any]]],
    outputs: list[tuple[str, int, list[Any]]],
    inits: dict[str, Any] | None = None,
    opset: int = 17,
    extra_opsets: tuple[tuple[str, int], ...] = (),
) -> onnx.ModelProto:
    import numpy as np

    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[
            numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)
            for name, shape in (inits or {}).items()
        ],
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def _costs(m: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    info = extract_graph(m)
    return {r["node_name"]: r for r in node_costs(info.nodes, info.edges).to_pylist()}


def test_conv_with_groups_dilation_stride_pads() -> None:
    # x [1, 8, 16, 16], w [16, 4, 3, 3] (group 2), stride 2, dilation 2, pads 2 -> out 8x8:
    # (16 + 4 - 2*(3-1) - 1) // 2 + 1 = 8. MACs = 1 x 16 x 64 x (8/2) x 9 = 36864,
    # FLOPs = 2 x 36864 + bias 1 x 16 x 64 = 74752
    m = _model(
        [
            helper.make_node(
                "Conv",
                ["x", "w", "b"],
                ["y"],
                "conv",
                group=2,
                strides=[2, 2],
                dilations=[2, 2],
                pads=[2, 2, 2, 2],
                kernel_shape=[3, 3],
            )
        ],
        [("x", F, [1, 8, 16, 16])],
        [("y", F, [1, 16, 8, 8])],
        {"w": (16, 4, 3, 3), "b": (16,)},
    )
    c = _costs(m)["conv"]
    assert c["macs"] == 36864 and c["flops"] == 74752 and c["cost_model"] == "conv"
    # bytes: x 2048 x 4, weights (576 + 16) x 4, out 1024 x 4
    assert (c["input_bytes"], c["weight_bytes"], c["output_bytes"]) == (8192, 2368, 4096)
    assert c["bytes"] == 14656 and c["intensity"] == pytest.approx(74752 / 14656)


def test_conv_transpose() -> None:
    # x [1, 4, 5, 5], w [4, 6, 3, 3]: every input element scatters into 6 x 9 outputs:
    # MACs = 1 x 4 x 25 x 6 x 9 = 5400
    m = _model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], "ct", kernel_shape=[3, 3])],
        [("x", F, [1, 4, 5, 5])],
        [("y", F, [1, 6, 7, 7])],
        {"w": (4, 6, 3, 3)},
    )
    c = _costs(m)["ct"]
    assert c["macs"] == 5400 and c["flops"] == 10800


def test_batched_matmul_broadcast_and_gemm() -> None:
    # [2, 3, 4, 5] x [5, 6] -> [2, 3, 4, 6]: 144 outputs x K 5 = 720 MACs
    m = _model(
        [helper.make_node("MatMul", ["a", "w"], ["y"], "mm")],
        [("a", F, [2, 3, 4, 5])],
        [("y", F, [2, 3, 4, 6])],
        {"w": (5, 6)},
    )
    assert _costs(m)["mm"]["macs"] == 720
    # Gemm transB: A [4, 8] x B^T, B [16, 8] -> [4, 16]: 512 MACs, + C bias 64 adds
    m = _model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], "gemm", transB=1)],
        [("a", F, [4, 8])],
        [("y", F, [4, 16])],
        {"b": (16, 8), "c": (16,)},
    )
    g = _costs(m)["gemm"]
    assert g["macs"] == 512 and g["flops"] == 1024 + 64 and g["cost_model"] == "gemm"


def test_elementwise_reduction_norm_softmax_pool_transpose() -> None:
    shape = [2, 3, 8, 8]  # 384 elements
    m = _model(
        [
            helper.make_node("Add", ["x", "x"], ["a"], "add"),
            helper.make_node("ReduceMean", ["a"], ["r"], "rm", keepdims=1, axes=[3]),
            helper.make_node("Softmax", ["a"], ["s"], "sm", axis=-1),
            helper.make_node("MaxPool", ["a"], ["p"], "mp", kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Transpose", ["a"], ["t"], "tr", perm=[0, 2, 3, 1]),
            helper.make_node("LayerNormalization", ["a", "g", "bb"], ["ln"], "ln", axis=-1),
            helper.make_node("Reshape", ["a", "shp"], ["rs"], "rs"),
        ],
        [("x", F, shape), ("shp", TensorProto.INT64, [2])],
        [
            ("r", F, None),
            ("s", F, None),
            ("p", F, None),
            ("t", F, None),
            ("ln", F, None),
            ("rs", F, None),
        ],
        {"g": (8,), "bb": (8,)},
        opset=17,
    )
    c = _costs(m)
    # Add: one FLOP per output element; reads x once (deduplicated), writes a
    assert c["add"]["flops"] == 384 and c["add"]["input_bytes"] == 1536
    assert c["rm"]["flops"] == 384  # one per input element
    assert c["sm"]["flops"] == 5 * 384 and c["sm"]["cost_model"] == "softmax"
    assert c["mp"]["flops"] == 96 * 4  # 96 outputs x 2x2 window
    assert c["tr"]["flops"] == 0 and c["tr"]["bytes"] == 2 * 1536
    assert c["ln"]["flops"] == 8 * 384 and c["ln"]["cost_model"] == "normalization"
    # Reshape is metadata only; its output shape is data-dependent (unknown) here
    assert c["rs"]["flops"] == 0 and c["rs"]["bytes"] == 0


def test_unknown_op_and_symbolic_dims() -> None:
    m = _model(
        [
            helper.make_node("Frobnicate", ["x"], ["y"], "custom", domain="my.ops"),
            helper.make_node("Relu", ["x"], ["z"], "relu"),
        ],
        [("x", F, ["batch", 16])],
        [("y", F, ["batch", 16]), ("z", F, ["batch", 16])],
        extra_opsets=(("my.ops", 1),),
    )
    c = _costs(m)
    assert c["custom"]["flops"] is None and c["custom"]["flops_known"] is False
    assert c["custom"]["cost_model"] == "unknown"
    assert "no FLOP formula for my.ops.Frobnicate" in c["custom"]["note"]
    # a symbolic batch: neither FLOPs nor bytes can be known
    assert c["relu"]["flops"] is None and c["relu"]["bytes"] is None
    assert c["relu"]["flops_known"] is True
    s = cost_summary(node_costs(extract_graph(m).nodes, extract_graph(m).edges))
    assert s["nodes_flops_unknown"] == 2 and s["op_types_flops_unknown"] == ["Frobnicate", "Relu"]


def _registry_costs(name: str) -> Any:
    entry = load_registry(None).models[name]
    path: Path = build_cached(entry.builder or "", entry.params)
    return model_costs(path, {k: list(v) for k, v in entry.input_shapes.items()})


def test_resnet50_total_matches_the_published_count() -> None:
    # torchvision resnet50 at 1x3x224x224: ~4.09 G multiply-accumulates (8.2 GFLOP)
    s = cost_summary(_registry_costs("resnet50"))
    assert s["macs"] == pytest.approx(4.09e9, rel=0.05)
    assert s["flops"] == pytest.approx(8.2e9, rel=0.05)
    assert s["nodes_flops_unknown"] == 0


def test_bert_base_gemm_macs_match_the_analytic_count() -> None:
    """Per layer at sequence 128, hidden 768, FFN 3072: QKV 3 x 128 x 768 x 768 = 226,492,416;
    scores 128 x 128 x 768 = 12,582,912; context the same; output projection 128 x 768 x 768
    = 75,497,472; FFN 2 x 128 x 768 x 3072 = 603,979,776; per layer 931,135,488; x 12 =
    11,173,625,856; + pooler 768 x 768 = 589,824 -> 11,174,215,680 MACs."""
    s = cost_summary(_registry_costs("bert-base"))
    assert s["macs"] == pytest.approx(11_174_215_680, rel=0.01)
    assert s["flops_by_cost_model"]["gemm"] >= 2 * 11_174_215_680 * 0.99
