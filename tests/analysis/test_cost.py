"""FLOP and byte formulas per operator family, on shapes whose answer is computed by hand."""

from __future__ import annotations

from collections.abc import Sequence
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


# --- every family, on real ONNX through extract_graph + node_costs ------------------------

MS = "com.microsoft"
U8, I8, I32, I64 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.INT64


def _graph_costs(
    nodes: list[onnx.NodeProto],
    inputs: Sequence[tuple[str, Any, list[Any] | None]],
    outputs: Sequence[tuple[str, Any, list[Any] | None]],
    inits: dict[str, Any] | None = None,
    opsets: tuple[tuple[str, int], ...] = (("", 17), (MS, 1)),
) -> dict[str, dict[str, Any]]:
    """Costs of a real model: ``inits`` are numpy arrays (any dtype); outputs declared with
    their shapes, as contrib operators have no ONNX shape inference."""
    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 10
    return _costs(m)


def _zeros(shape: tuple[int, ...], dtype: Any = None) -> Any:
    import numpy as np

    return np.zeros(shape, dtype=dtype or np.float32)


def _scalar(value: float, dtype: Any) -> Any:
    import numpy as np

    return np.array(value, dtype=dtype)


def test_qlinearconv_reads_its_weight_at_input_3_and_requantizes() -> None:
    import numpy as np

    # x uint8 [1, 4, 8, 8], W int8 [8, 4, 3, 3], pad 1 -> y [1, 8, 8, 8] = 512 outputs:
    # MACs = 512 x 4 x 9 = 18432; FLOPs = 36864 + bias 512 + requantization 3 x 512 = 38912
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        ["y"],
        "qc",
        pads=[1, 1, 1, 1],
    )
    inits = {"xs": _scalar(0.1, np.float32), "xz": _scalar(0, np.uint8),
             "w": _zeros((8, 4, 3, 3), np.int8), "ws": _scalar(0.1, np.float32),
             "wz": _scalar(0, np.int8), "ys": _scalar(0.1, np.float32),
             "yz": _scalar(0, np.uint8), "b": _zeros((8,), np.int32)}  # fmt: skip
    c = _graph_costs([node], [("x", U8, [1, 4, 8, 8])], [("y", U8, [1, 8, 8, 8])], inits)["qc"]
    assert (c["macs"], c["flops"], c["cost_model"]) == (18432, 38912, "conv")
    assert c["dtype"] == "uint8"  # an integer kernel: the roofline's int8 ceiling applies


def test_fused_conv_counts_bias_sum_and_activation() -> None:
    # x [1, 2, 5, 5], W [3, 2, 3, 3] -> y [1, 3, 3, 3] = 27: MACs 27 x 2 x 9 = 486;
    # FLOPs = 972 + bias 27 + Sum input 27 + Relu 27 = 1053
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], "fc", domain=MS,
                            activation="Relu")  # fmt: skip
    c = _graph_costs(
        [node],
        [("x", F, [1, 2, 5, 5]), ("z", F, [1, 3, 3, 3])],
        [("y", F, [1, 3, 3, 3])],
        {"w": _zeros((3, 2, 3, 3)), "b": _zeros((3,))},
    )["fc"]
    assert (c["macs"], c["flops"]) == (486, 1053)


def test_integer_and_dynamically_quantized_gemms() -> None:
    import numpy as np

    f32 = np.float32
    nodes = [
        # A uint8 [2, 3, 4] x B int8 [4, 5] -> [2, 3, 5] = 30: MACs 120; + scale 30 + bias 30
        helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"],
                         ["y1"], "mitf", domain=MS),
        # A float [3, 4] quantized on the fly (4 x 12 = 48), x B int8 [4, 5]: MACs 60;
        # FLOPs = 120 + 48 + scale 15 + bias 15 = 198
        helper.make_node("DynamicQuantizeMatMul", ["af", "b", "bs", "bz", "bias"], ["y2"],
                         "dqmm", domain=MS),
        # A uint8 [2, 4] x B^T, B int8 [3, 4]: MACs 24; + C 6 + requantization 18 = 72
        helper.make_node("QGemm", ["a2", "as", "az", "b2", "bs", "bz", "c", "ys", "yz"],
                         ["y3"], "qg", domain=MS, transB=1),
        # [2, 4] x [4, 3]: MACs 24, + requantization 3 x 6 -> 66
        helper.make_node("QLinearMatMul", ["a2", "as", "az", "b3", "bs", "bz", "ys", "yz"],
                         ["y4"], "qmm"),
        helper.make_node("MatMulInteger", ["a2", "b3"], ["y5"], "mmi"),
    ]  # fmt: skip
    inits = {"b": _zeros((4, 5), np.int8), "as": _scalar(0.1, f32), "bs": _scalar(0.1, f32),
             "az": _scalar(0, np.uint8), "bz": _scalar(0, np.int8), "bias": _zeros((5,)),
             "b2": _zeros((3, 4), np.int8), "c": _zeros((3,), np.int32),
             "ys": _scalar(0.1, f32), "yz": _scalar(0, np.uint8),
             "b3": _zeros((4, 3), np.int8)}  # fmt: skip
    c = _graph_costs(
        nodes,
        [("a", U8, [2, 3, 4]), ("af", F, [3, 4]), ("a2", U8, [2, 4])],
        [("y1", F, [2, 3, 5]), ("y2", F, [3, 5]), ("y3", U8, [2, 3]), ("y4", U8, [2, 3]),
         ("y5", I32, [2, 3])],
        inits,
    )  # fmt: skip
    assert (c["mitf"]["macs"], c["mitf"]["flops"], c["mitf"]["dtype"]) == (120, 300, "uint8")
    assert (c["dqmm"]["macs"], c["dqmm"]["flops"], c["dqmm"]["dtype"]) == (60, 198, "int8")
    assert (c["qg"]["macs"], c["qg"]["flops"]) == (24, 72)
    assert (c["qmm"]["macs"], c["qmm"]["flops"]) == (24, 66)
    assert (c["mmi"]["flops"], c["mmi"]["dtype"]) == (48, "uint8")
    assert {r["cost_model"] for r in c.values()} == {"gemm"}


def _rnn_model(op: str, hidden: int, direction: str, **kw: Any) -> dict[str, dict[str, Any]]:
    """X [T 3, B 2, I 4] through ``op`` with bias; weights shaped for ``op``."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    ins = ["x", "w", "r", "b"]
    inits = {"w": _zeros((dirs, gates * hidden, 4)), "r": _zeros((dirs, gates * hidden, hidden)),
             "b": _zeros((dirs, 2 * gates * hidden))}  # fmt: skip
    if kw.pop("peepholes", False):
        ins += ["", "", "", "p"]
        inits["p"] = _zeros((dirs, 3 * hidden))
    if kw.pop("no_bias", False):
        ins[3] = ""
        del inits["b"]
    node = helper.make_node(op, ins, ["y", "yh"], "rnn", hidden_size=hidden,
                            direction=direction, **kw)  # fmt: skip
    return _graph_costs(
        [node], [("x", F, [3, 2, 4])], [("y", F, None), ("yh", F, None)], inits,
        opsets=(("", 17),),
    )  # fmt: skip


def test_lstm_gru_rnn_step_counts() -> None:
    # LSTM, H 5, I 4, bidirectional, bias: per step, row and direction
    #   projections 4 x 5 x (4 + 5) = 180 MACs -> 360; joining them 20; biases 40;
    #   sigmoid on i, f, o 15 x 4 = 60; tanh on g 20, on c 20; c and h updates 20 -> 540
    #   x T 3 x B 2 x 2 directions = 12 -> 6480 FLOPs, 2160 MACs
    c = _rnn_model("LSTM", 5, "bidirectional")["rnn"]
    assert (c["flops"], c["macs"], c["cost_model"]) == (6480, 2160, "rnn")
    # peepholes: + 6 x 5 = 30 per step -> 570 x 12
    assert _rnn_model("LSTM", 5, "bidirectional", peepholes=True)["rnn"]["flops"] == 6840
    # GRU, forward: 3 x 5 x 9 = 135 MACs -> 270; joining 15; biases 30; sigmoid on z, r 40;
    # r applied 5; tanh 20; h update 20 -> 400 x T 3 x B 2 = 2400 FLOPs, 810 MACs
    g = _rnn_model("GRU", 5, "forward")["rnn"]
    assert (g["flops"], g["macs"]) == (2400, 810)
    # RNN, Relu, no bias: 5 x 9 = 45 MACs -> 90; joining 5; relu 5 -> 100 x 6 = 600
    r = _rnn_model("RNN", 5, "forward", activations=["Relu"], no_bias=True)["rnn"]
    assert (r["flops"], r["macs"]) == (600, 270)


def test_dynamic_quantize_lstm() -> None:
    import numpy as np

    # W int8 [1, I 4, 4H 20] (transposed against LSTM's), H 5, forward, bias: the LSTM's 540
    # per step x 6 = 3240; + quantizing X (24 values x 4) and every h (6 steps x 5 x 4)
    # = 96 + 120 -> 3456 FLOPs; 1080 MACs
    f32 = np.float32
    node = helper.make_node(
        "DynamicQuantizeLSTM",
        ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"],
        ["y", "yh"],
        "dql",
        domain=MS,
        hidden_size=5,
    )
    inits = {"w": _zeros((1, 4, 20), np.int8), "r": _zeros((1, 5, 20), np.int8),
             "b": _zeros((1, 40)), "ws": _zeros((1,), f32), "wz": _zeros((1,), np.int8),
             "rs": _zeros((1,), f32), "rz": _zeros((1,), np.int8)}  # fmt: skip
    c = _graph_costs(
        [node], [("x", F, [3, 2, 4])], [("y", F, [3, 1, 2, 5]), ("yh", F, [1, 2, 5])], inits
    )["dql"]
    assert (c["flops"], c["macs"], c["dtype"], c["cost_model"]) == (3456, 1080, "int8", "rnn")


def test_attention_operators() -> None:
    import numpy as np

    f32 = np.float32
    nodes = [
        # B 2, S 4, H_in 8 -> QKV 24, 2 heads of 4: projection 2 x 4 x 8 x 24 = 1536 MACs
        # (3072) + bias 192; scores 2 x 2 x 4 x 4 = 64, QK and PV 64 x 8 = 512 MACs (1024)
        # + scale and softmax 6 x 64 = 384 -> 4672 FLOPs, 2048 MACs
        helper.make_node("Attention", ["x", "wqkv", "bqkv"], ["a"], "att", domain=MS,
                         num_heads=2),
        # the same with a mask: + 1 per score -> 4736
        helper.make_node("Attention", ["x", "wqkv", "bqkv", "mask"], ["am"], "attm",
                         domain=MS, num_heads=2),
        # Q [2, 4, 8], K and V [2, 6, 8], 2 heads: scores 96, MACs 96 x 8 = 768 -> 1536
        # + 6 x 96 = 576 -> 2112
        helper.make_node("MultiHeadAttention", ["x", "k", "k"], ["m"], "mha", domain=MS,
                         num_heads=2),
        # Q [1, 3, 16] 4 heads of 4, K/V [1, 3, 8] 2 kv heads: scores 1 x 4 x 3 x 3 = 36,
        # MACs 36 x 8 = 288 -> 576 + 6 x 36 = 216 -> 792
        helper.make_node("GroupQueryAttention", ["q", "kv", "kv", "", "", "sl", "tl"],
                         ["g", "pk", "pv"], "gqa", domain=MS, num_heads=4, kv_num_heads=2),
        # int8 input [1, 4, 8], weight [8, 24], 2 heads: projection 768 MACs (1536) + bias 96
        # + dequantize 96; core 32 scores, 256 MACs (512) + 192 -> 2432 FLOPs, 1024 MACs
        helper.make_node("QAttention", ["xq", "wq", "bqkv", "s", "s"], ["qa"], "qatt",
                         domain=MS, num_heads=2),
        # [1, 3, 8], 2 heads of 4, rotary dim 2: half of 24 elements rotated, 3 each -> 36
        helper.make_node("RotaryEmbedding", ["r", "pos", "cos", "cos"], ["ro"], "rope",
                         domain=MS, num_heads=2, rotary_embedding_dim=2),
    ]  # fmt: skip
    inits = {"wqkv": _zeros((8, 24)), "bqkv": _zeros((24,)), "wq": _zeros((8, 24), np.int8),
             "s": _scalar(0.1, f32), "sl": np.array([2], np.int32),
             "tl": np.array(3, np.int32), "pos": np.zeros((1, 3), np.int64),
             "cos": _zeros((3, 1))}  # fmt: skip
    c = _graph_costs(
        nodes,
        [("x", F, [2, 4, 8]), ("mask", I32, [2, 4]), ("k", F, [2, 6, 8]), ("q", F, [1, 3, 16]),
         ("kv", F, [1, 3, 8]), ("xq", I8, [1, 4, 8]), ("r", F, [1, 3, 8])],
        [("a", F, [2, 4, 8]), ("am", F, [2, 4, 8]), ("m", F, [2, 4, 8]), ("g", F, [1, 3, 16]),
         ("pk", F, [1, 2, 3, 4]), ("pv", F, [1, 2, 3, 4]), ("qa", F, [1, 4, 8]),
         ("ro", F, [1, 3, 8])],
        inits,
    )  # fmt: skip
    assert (c["att"]["flops"], c["att"]["macs"]) == (4672, 2048)
    assert c["attm"]["flops"] == 4736
    assert c["mha"]["flops"] == 2112
    assert c["gqa"]["flops"] == 792
    assert (c["qatt"]["flops"], c["qatt"]["macs"], c["qatt"]["dtype"]) == (2432, 1024, "int8")
    assert c["rope"]["flops"] == 36
    assert {r["cost_model"] for r in c.values()} == {"attention"}


def test_onnx_attention_opset_23() -> None:
    # Q [1, 2, 3, 4], K [1, 2, 5, 4], V [1, 2, 5, 6]: 30 scores x (4 + 6) = 300 MACs -> 600
    # + scale and softmax 6 x 30 -> 780; causal: + 1 per score -> 810
    nodes = [
        helper.make_node("Attention", ["q", "k", "v"], ["y"], "att"),
        helper.make_node("Attention", ["q", "k", "v"], ["yc"], "causal", is_causal=1),
    ]
    c = _graph_costs(
        nodes,
        [("q", F, [1, 2, 3, 4]), ("k", F, [1, 2, 5, 4]), ("v", F, [1, 2, 5, 6])],
        [("y", F, None), ("yc", F, None)],
        opsets=(("", 23),),
    )  # fmt: skip
    assert (c["att"]["flops"], c["att"]["macs"], c["causal"]["flops"]) == (780, 300, 810)


def test_resize_modes_grid_sample_and_roi_align() -> None:
    import numpy as np

    scales = np.array([1, 1, 2, 2], np.float32)
    nodes = [
        # [1, 2, 4, 4] -> [1, 2, 8, 8] = 128 outputs; bilinear: 4 neighbours, 2 x 4 - 1 = 7
        helper.make_node("Resize", ["x", "", "sc"], ["lin"], "linear", mode="linear"),
        # bicubic: 16 neighbours, 31
        helper.make_node("Resize", ["x", "", "sc"], ["cub"], "cubic", mode="cubic"),
        helper.make_node("Resize", ["x", "", "sc"], ["nn"], "nearest"),
        # antialiased [1, 1, 8, 8] -> [1, 1, 4, 4]: ceil(2 x 8 / 4) = 4 taps per axis,
        # 16 neighbours -> 31 x 16 outputs = 496
        helper.make_node("Resize", ["x8", "", "half"], ["aa"], "antialias", mode="linear",
                         antialias=1),
        # [1, 2, 4, 4] sampled at a [1, 3, 3, 2] grid -> [1, 2, 3, 3]: 7 x 18 bilinear
        # + 2 coordinates x 2 FLOPs x 9 points = 162
        helper.make_node("GridSample", ["x", "grid"], ["gs"], "grid"),
        # 3 RoIs x 2 channels x 2 x 2 outputs, 2 x 2 samples each: 24 x 4 x 8 = 768
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["ra"], "roi", output_height=2,
                         output_width=2, sampling_ratio=2),
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["rz"], "adaptive",
                         output_height=2, output_width=2),
    ]  # fmt: skip
    inits = {"sc": scales, "half": np.array([1, 1, 0.5, 0.5], np.float32),
             "rois": _zeros((3, 4)), "bi": np.zeros((3,), np.int64)}  # fmt: skip
    c = _graph_costs(
        nodes,
        [("x", F, [1, 2, 4, 4]), ("x8", F, [1, 1, 8, 8]), ("grid", F, [1, 3, 3, 2])],
        [(o, F, None) for o in ("lin", "cub", "nn", "aa", "gs", "ra", "rz")],
        inits,
        opsets=(("", 19),),
    )
    assert c["linear"]["flops"] == 128 * 7 and c["cubic"]["flops"] == 128 * 31
    assert c["nearest"]["flops"] == 0 and c["antialias"]["flops"] == 496
    assert c["grid"]["flops"] == 162 and c["roi"]["flops"] == 768
    assert c["adaptive"]["flops"] is None  # the sampling grid follows the RoIs (data)
    assert c["linear"]["cost_model"] == "resize"


def test_einsum_topk_unique_dft_det() -> None:
    import numpy as np

    nodes = [
        # batched matmul: index space 2 x 3 x 4 x 5 = 120 points: 120 multiplies, 120 - 30
        # adds -> 210; the same with an ellipsis
        helper.make_node("Einsum", ["a", "b"], ["e1"], "bmm", equation="bij,bjk->bik"),
        helper.make_node("Einsum", ["a", "w"], ["e2"], "ell", equation="...ij,jk->...ik"),
        # a full sum of [3, 4]: 12 points, 11 adds
        helper.make_node("Einsum", ["m"], ["e3"], "total", equation="ij->"),
        # [2, 10], k 3: 20 x ceil(log2 4) = 40 comparisons
        helper.make_node("TopK", ["t", "k"], ["tv", "ti"], "topk"),
        helper.make_node("Unique", ["u"], ["uy"], "unique"),  # 8 x 3 = 24
        # 2 real signals of 8: 5 x 8 x 3 = 120 each
        helper.make_node("DFT", ["sig"], ["f"], "dft", axis=1),
        helper.make_node("DFT", ["sig6"], ["f6"], "dft6", axis=1),  # 8 x 36 = 288 each
        helper.make_node("Det", ["d"], ["dy"], "det"),  # 2 matrices x 2/3 x 27 = 36
    ]
    c = _graph_costs(
        nodes,
        [("a", F, [2, 3, 4]), ("b", F, [2, 4, 5]), ("m", F, [3, 4]), ("t", F, [2, 10]),
         ("u", F, [8]), ("sig", F, [2, 8, 1]), ("sig6", F, [1, 6, 1]), ("d", F, [2, 3, 3])],
        [(o, F, None) for o in ("e1", "e2", "e3", "tv", "uy", "f", "f6", "dy")]
        + [("ti", I64, None)],
        {"w": _zeros((4, 5)), "k": np.array([3], np.int64)},
    )  # fmt: skip
    assert (c["bmm"]["flops"], c["bmm"]["macs"]) == (210, 120)
    assert c["ell"]["flops"] == 210 and c["total"]["flops"] == 11
    assert c["topk"]["flops"] == 40 and c["unique"]["flops"] == 24
    assert c["dft"]["flops"] == 240 and c["dft6"]["flops"] == 288
    assert c["det"]["flops"] == 36
    assert [c[n]["cost_model"] for n in ("bmm", "topk", "dft", "det")] == [
        "einsum", "sort", "fft", "linalg"]  # fmt: skip


def test_quantized_elementwise_and_pools() -> None:
    import numpy as np

    s, z = _scalar(0.1, np.float32), _scalar(0, np.uint8)
    nodes = [
        # [2, 3] = 6 outputs x (2 + 2 + 1 + 3) = 48
        helper.make_node("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"], ["qa"],
                         "qadd", domain=MS),
        # [1, 2, 4, 4]: 3 x 32 + 4 x 2 = 104
        helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["gap"],
                         "qgap", domain=MS),
        # [2, 5] x 10 = 100
        helper.make_node("QLinearSoftmax", ["sm", "s", "z", "s", "z"], ["qs"], "qsm",
                         domain=MS, axis=-1, opset=13),
        # [1, 1, 4, 4], 2 x 2 windows -> 4 outputs: 4 x 4 + 2 x 16 + 3 x 4 = 60
        helper.make_node("QLinearAveragePool", ["p", "s", "z", "s", "z"], ["qp"], "qpool",
                         domain=MS, kernel_shape=[2, 2], strides=[2, 2]),
    ]  # fmt: skip
    c = _graph_costs(
        nodes,
        [("a", U8, [2, 3]), ("x", U8, [1, 2, 4, 4]), ("sm", U8, [2, 5]), ("p", U8, [1, 1, 4, 4])],
        [("qa", U8, [2, 3]), ("gap", U8, [1, 2, 1, 1]), ("qs", U8, [2, 5]),
         ("qp", U8, [1, 1, 2, 2])],
        {"s": s, "z": z},
    )  # fmt: skip
    assert (c["qadd"]["flops"], c["qadd"]["dtype"]) == (48, "uint8")
    assert c["qgap"]["flops"] == 104 and c["qsm"]["flops"] == 100 and c["qpool"]["flops"] == 60


def test_variadic_control_flow_and_no_formula() -> None:
    import numpy as np

    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], "t")], "then", [],
                             [helper.make_tensor_value_info("t", F, [2, 2])])  # fmt: skip
    nodes = [
        helper.make_node("Sum", ["x", "x", "y"], ["s"], "sum"),  # 4 x (3 - 1) = 8
        helper.make_node("Mean", ["x", "y"], ["mn"], "mean"),  # 4 x (1 + 1) = 8
        helper.make_node("If", ["c"], ["i"], "if", then_branch=then, else_branch=then),
        helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"], "nms"),
    ]
    c = _graph_costs(
        nodes,
        [("x", F, [2, 2]), ("y", F, [2, 2]), ("c", TensorProto.BOOL, []),
         ("boxes", F, [1, 5, 4]), ("scores", F, [1, 1, 5])],
        [("s", F, None), ("mn", F, None), ("i", F, None), ("sel", I64, None)],
        {"unused": np.zeros(1, np.float32)},
    )  # fmt: skip
    assert c["sum"]["flops"] == 8 and c["mean"]["flops"] == 8
    cf = c["if"]
    assert (cf["cost_model"], cf["flops"], cf["bytes"], cf["flops_known"]) == (
        "control_flow", 0, None, True)  # fmt: skip
    assert c["nms"]["flops"] is None and c["nms"]["flops_known"] is False
    assert "depends on the scores" in c["nms"]["note"]


def test_tree_ensembles_linear_svm_and_ml_transforms() -> None:
    import numpy as np

    ml = "ai.onnx.ml"
    # tree 0: root -> (branch -> 2 leaves, leaf): longest path 2 branches; tree 1: root -> 2
    # leaves: 1. 5 leaves, 5 weights: 1 per leaf. Per sample 2 + 1 + 2 trees x 1 = 5; N 4
    classic = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["tr"], "trees", domain=ml,
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
        nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF", "BRANCH_LEQ",
                     "LEAF", "LEAF"],
        nodes_featureids=[0] * 8, nodes_values=[0.0] * 8,
        nodes_truenodeids=[1, 3, 0, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 4, 0, 0, 0, 2, 0, 0],
        target_treeids=[0, 0, 0, 1, 1], target_nodeids=[2, 3, 4, 1, 2], target_ids=[0] * 5,
        target_weights=[1.0] * 5, n_targets=1,
    )  # fmt: skip
    # the same two trees in ai.onnx.ml 5's layout: 3 branch nodes, leaves apart
    v5 = helper.make_node(
        "TreeEnsemble", ["x"], ["t5"], "trees5", domain=ml, tree_roots=[0, 2],
        nodes_modes=numpy_helper.from_array(np.zeros(3, np.uint8)),
        nodes_featureids=[0, 0, 0], nodes_splits=numpy_helper.from_array(_zeros((3,))),
        nodes_truenodeids=[1, 1, 3], nodes_trueleafs=[0, 1, 1],
        nodes_falsenodeids=[0, 2, 4], nodes_falseleafs=[1, 1, 1],
        leaf_targetids=[0] * 5, leaf_weights=numpy_helper.from_array(_zeros((5,))),
        n_targets=1, aggregate_function=1, post_transform=0,
    )  # fmt: skip
    # X [4, 3] . coefficients [2, 3]: 24 MACs (48) + 8 intercepts + softmax 5 x 8 -> 96
    linear = helper.make_node("LinearClassifier", ["x"], ["lab", "prob"], "linear", domain=ml,
                              coefficients=[0.5] * 6, intercepts=[0.0, 0.0],
                              classlabels_ints=[0, 1], post_transform="SOFTMAX")  # fmt: skip
    # 3 RBF support vectors of 2 features, 2 classes: per sample 3 x (3 x 2 + 2) + 2 x 3
    # = 30; 5 samples -> 150
    svm = helper.make_node("SVMClassifier", ["x2"], ["sl", "ss"], "svm", domain=ml,
                           kernel_type="RBF", support_vectors=[0.0] * 6,
                           vectors_per_class=[2, 1], coefficients=[1.0] * 3, rho=[0.0],
                           classlabels_ints=[0, 1])  # fmt: skip
    scaler = helper.make_node("Scaler", ["x"], ["sc"], "scaler", domain=ml, offset=[0.0],
                              scale=[1.0])  # fmt: skip
    norm = helper.make_node("Normalizer", ["x"], ["nm"], "norm", domain=ml, norm="L2")
    c = _graph_costs(
        [classic, v5, linear, svm, scaler, norm],
        [("x", F, [4, 3]), ("x2", F, [5, 2])],
        [("tr", F, [4, 1]), ("t5", F, [4, 1]), ("lab", I64, [4]), ("prob", F, [4, 2]),
         ("sl", I64, [5]), ("ss", F, [5, 2]), ("sc", F, [4, 3]), ("nm", F, [4, 3])],
        opsets=(("", 17), (ml, 5)),
    )  # fmt: skip
    assert c["trees"]["flops"] == 20 and c["trees"]["cost_model"] == "tree_ensemble"
    assert c["trees5"]["flops"] == 20
    assert (c["linear"]["flops"], c["linear"]["macs"]) == (96, 24)
    assert c["svm"]["flops"] == 150 and c["svm"]["cost_model"] == "svm"
    assert c["scaler"]["flops"] == 24 and c["norm"]["flops"] == 36


def test_every_ort_cpu_kernel_has_a_family_or_a_reason() -> None:
    """ONNX Runtime's CPU kernel registry: no operator is left without a word."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    from aaco.analysis.cost import NO_FORMULA, cost_family

    ops = {k.op_name for k in ort_c.get_all_opkernel_def() if k.provider == "CPUExecutionProvider"}
    assert len(ops) > 250
    missing = sorted(op for op in ops if cost_family(op) == "unknown" and op not in NO_FORMULA)
    assert missing == []
    assert not set(NO_FORMULA) & {op for op in ops if cost_family(op) != "unknown"}


# --- the nodes ONNX Runtime executed, from a real profile ---------------------------------


def _profiled(model: onnx.ModelProto, feeds: dict[str, Any], tmp_path: Path) -> Any:
    """Run ``model`` once under ORT's profiler (1 thread); return (ops, optimized model,
    graph_nodes of both graphs, the original's graph_edges)."""
    import onnxruntime as ort
    import pyarrow as pa

    from aaco.analysis.graph import load_model_proto, map_optimized_to_original
    from aaco.importers.ort_profile import parse_ort_profile

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    ops = parse_ort_profile(Path(sess.end_profiling())).ops
    optimized = load_model_proto(tmp_path / "optimized.onnx")
    original = extract_graph(model)
    opt = extract_graph(optimized, graph_label="optimized", reference=model,
                        original_map=map_optimized_to_original(model, optimized))  # fmt: skip
    nodes = pa.concat_tables([original.nodes, opt.nodes])
    return ops, optimized, nodes, original.edges


def _control_flow_model() -> onnx.ModelProto:
    """A Loop (5 trips) and a Scan (10 rows) whose bodies multiply by an outer-scope weight,
    and an If on a constant condition; weights W [64, 64]."""
    import numpy as np

    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_in", "W"], ["mm"], "body_mm"),
         helper.make_node("Add", ["mm", "x_in"], ["x_out"], "body_add"),
         helper.make_node("Relu", ["x_out"], ["r"], "body_relu"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], "body_id")],
        "body",
        [vi("i", I64, []), vi("cond_in", TensorProto.BOOL, []), vi("x_in", F, [8, 64])],
        [vi("cond_out", TensorProto.BOOL, []), vi("x_out", F, [8, 64]), vi("r", F, [8, 64])],
    )  # fmt: skip
    scan_body = helper.make_graph(
        [helper.make_node("MatMul", ["s_in", "W"], ["smm"], "scan_mm"),
         helper.make_node("Add", ["smm", "row"], ["s_out"], "scan_add"),
         helper.make_node("Identity", ["s_out"], ["o"], "scan_id")],
        "scan_body",
        [vi("s_in", F, [1, 64]), vi("row", F, [1, 64])],
        [vi("s_out", F, [1, 64]), vi("o", F, [1, 64])],
    )  # fmt: skip
    then = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t"], "then_mm")],
                             "then", [], [vi("t", F, [8, 64])])  # fmt: skip
    orelse = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["e"], "else_sig")],
                               "else", [], [vi("e", F, [8, 64])])  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("Loop", ["trip", "cond", "x"], ["y", "ys"], "loop", body=body),
         helper.make_node("Scan", ["s0", "seq"], ["sf", "so"], "scan", body=scan_body,
                          num_scan_inputs=1),
         helper.make_node("If", ["cond"], ["z"], "if", then_branch=then, else_branch=orelse)],
        "cf",
        [vi("x", F, [8, 64]), vi("s0", F, [1, 64]), vi("seq", F, [10, 1, 64])],
        [vi("y", F, [8, 64]), vi("ys", F, [5, 8, 64]), vi("sf", F, [1, 64]),
         vi("so", F, [10, 1, 64]), vi("z", F, [8, 64])],
        initializer=[numpy_helper.from_array(np.full((64, 64), 0.01, np.float32), "W"),
                     numpy_helper.from_array(np.array(5, np.int64), "trip"),
                     numpy_helper.from_array(np.array(True), "cond")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_subgraph_nodes_are_costed_from_the_optimized_model(tmp_path: Path) -> None:
    import numpy as np

    from aaco.analysis.cost import executed_node_costs, work_coverage
    from aaco.analysis.roofline import node_roofline

    m = _control_flow_model()
    feeds = {"x": np.ones((8, 64), np.float32), "s0": np.zeros((1, 64), np.float32),
             "seq": np.ones((10, 1, 64), np.float32)}  # fmt: skip
    ops, optimized, nodes, edges = _profiled(m, feeds, tmp_path)
    names = set(ops.column("node_name").to_pylist())
    assert {"loop", "scan"} <= names and len(names) > 3  # the bodies' nodes are profiled
    executed = executed_node_costs(ops, nodes, optimized, edges)
    assert set(executed.column("node_name").to_pylist()) == names
    rows = node_roofline(ops, node_costs(nodes, edges), nodes, edges, None, executed=executed)
    # Work per run, whatever ORT fused (MatMul + Add and Gemm count the same): the If's
    # branch MatMul 2 x 8 x 64 x 64 = 65536; 10 Scan steps of 2 x 64 x 64 + 64 = 8256;
    # 5 Loop trips of 2 x 8 x 64 x 64 + 512 (Add) + 512 (Relu) = 66560 -> 480896
    assert sum(r["flops"] for r in rows.to_pylist()) == 65536 + 10 * 8256 + 5 * 66560
    by_name = {r["node_name"]: r for r in executed.to_pylist()}
    assert by_name["loop"]["cost_model"] == "control_flow" and by_name["loop"]["flops"] == 0
    cov = work_coverage(ops, rows)
    assert cov["share_known"] == 1.0 and cov["unknown_op_types"] == []
    # exclusive time: the Loop and Scan keep their own time, their bodies count once
    assert cov["time_ns"] < sum(ops.column("dur_ns").to_pylist())


def test_profile_shapes_fill_what_inference_cannot_and_skip_prepacked_weights(
    tmp_path: Path,
) -> None:
    import numpy as np

    from aaco.analysis.cost import executed_node_costs

    # symbolic dims: the graph cannot cost these nodes; the profile's concrete shapes can.
    # ORT pre-packs MatMul's B and LSTM's W and R and leaves them out of its profile.
    lstm = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y", "yh"], "lstm", hidden_size=5,
                            direction="bidirectional")  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "wm"], ["am"], "mm"), lstm],
        "g",
        [helper.make_tensor_value_info("a", F, ["n", 3, 4]),
         helper.make_tensor_value_info("x", F, ["t", "b", 4])],
        [helper.make_tensor_value_info("am", F, None), helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in {
            "wm": np.ones((4, 5), np.float32), "w": np.ones((2, 20, 4), np.float32),
            "r": np.ones((2, 20, 5), np.float32), "b": np.ones((2, 40), np.float32)}.items()],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    ops, optimized, nodes, edges = _profiled(
        m, {"a": np.ones((2, 3, 4), np.float32), "x": np.ones((3, 2, 4), np.float32)}, tmp_path
    )
    assert node_costs(nodes, edges)["flops"].null_count == 2  # the graph alone: unknown
    recorded = {r["node_name"]: r["input_shapes"] for r in ops.to_pylist()}
    assert "[4,5]" not in recorded["mm"] and "[2,20,4]" not in recorded["lstm"]  # pre-packed
    got = {r["node_name"]: r for r in executed_node_costs(ops, nodes, optimized, edges).to_pylist()}
    # [2, 3, 5] outputs x K 4 = 120 MACs; the LSTM of test_lstm_gru_rnn_step_counts: 6480
    assert (got["mm"]["flops"], got["mm"]["macs"]) == (240, 120)
    assert got["lstm"]["flops"] == 6480
    # bytes from the graph's weights and the profile's activations: a 2x3x4, w 4x5, out 2x3x5
    assert got["mm"]["bytes"] == 4 * (24 + 20 + 30) and got["mm"]["weight_bytes"] == 80
    assert "shapes from the profile" in got["mm"]["note"]


def _ops_rows(rows: list[tuple[Any, ...]]) -> Any:
    """OPS rows (iteration, name, op, start µs, dur µs, thread, inputs, outputs)."""
    from aaco.session.schema import OPS

    return OPS.from_rows(
        [{"source": "onnxruntime", "iteration": it, "node_name": n, "op_type": op,
          "start_ns": s * 1000, "dur_ns": d * 1000, "thread_id": th, "input_shapes": i,
          "output_shapes": o}
         for it, n, op, s, d, th, i, o in rows]
    )  # fmt: skip


def test_profile_alone_costs_what_needs_no_attribute() -> None:
    from aaco.analysis.cost import executed_node_costs

    ops = _ops_rows([
        (0, "mm", "MatMul", 0, 5, 1, '[{"float":[2,4]}]', '[{"float":[2,3]}]'),
        (0, "gemm", "Gemm", 5, 5, 1, '[{"float":[2,4]}]', '[{"float":[2,3]}]'),
        (0, "mm", "MatMul", 10, 5, 1, '[{"float":[6,4]}]', '[{"float":[6,3]}]'),
    ])  # fmt: skip
    got = {r["node_name"]: r for r in executed_node_costs(ops).to_pylist()}
    # MatMul needs no attribute: K = 4; calls of 2 and 6 rows: 48 and 144 FLOPs, mean 96
    assert got["mm"]["flops"] == 96 and "mean over 2 shape signatures" in got["mm"]["note"]
    # Gemm's alpha is an attribute the profile does not record: unknown, not assumed
    assert got["gemm"]["flops"] is None and "attributes unknown" in got["gemm"]["note"]


def test_work_coverage_uses_exclusive_time_and_ranks_unknown_ops() -> None:
    import pyarrow as pa

    from aaco.analysis.cost import work_coverage
    from aaco.analysis.ops import exclusive_ns

    # a Loop of 100 µs holding body nodes A (20) and B (30); C (30) after it; D on another
    # thread overlapping the Loop is not nested in it
    ops = _ops_rows([
        (0, "loop", "Loop", 0, 100, 1, None, None),
        (0, "a", "Gemm", 10, 20, 1, None, None),
        (0, "b", "Frobnicate", 40, 30, 1, None, None),
        (0, "c", "Relu", 120, 30, 1, None, None),
        (0, "d", "Frobnicate", 50, 10, 2, None, None),
    ])  # fmt: skip
    assert exclusive_ns(ops).tolist() == [50_000, 20_000, 30_000, 30_000, 10_000]
    work = pa.table({"name": ["loop", "a", "c", "b"], "flops": [0.0, 1e6, 10.0, None]})
    cov = work_coverage(ops, work)
    assert cov["time_ns"] == 140_000 and cov["time_ns_known"] == 100_000
    assert cov["share_known"] == pytest.approx(100 / 140)
    assert (cov["nodes"], cov["nodes_known"]) == (5, 3)
    assert cov["unknown_op_types"] == [
        {"op_type": "Frobnicate", "time_ns": 40_000, "time_share": pytest.approx(40 / 140),
         "nodes": 2}]  # fmt: skip
    assert work_coverage(ops.slice(0, 0), work)["share_known"] is None
