"""Tests of aaco.analysis.graph: loading, extraction, and the optimized-to-original mapping."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tests.onnx_models import (
    IR_VERSION,
    OPSET,
    const,
    conv_chain,
    f32,
    gelu_mlp,
    make_model,
    unnamed_chain,
    vi,
)

import aaco.analysis.graph as graph_module
from aaco.analysis.graph import (
    GraphInfo,
    eliminated_original_nodes,
    extract_graph,
    file_sha256,
    load_model_proto,
    map_optimized_to_original,
    node_names,
)
from aaco.errors import InputError, UsageError
from aaco.session.schema import GRAPH_EDGES, GRAPH_NODES

Level = ort.GraphOptimizationLevel


# --------------------------------------------------------------------------- models


def resnet_blocks() -> onnx.ModelProto:
    """Stem Conv+Relu, two residual blocks, pooling head: what NCHWc rewrites on x86."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
    ]
    inits = [f32("w0", [16, 3, 3, 3], 1), f32("b0", [16], 2)]
    prev = "r0"
    for b in range(2):
        nodes += [
            helper.make_node(
                "Conv", [prev, f"wa{b}", f"ba{b}"], [f"ca{b}"], name=f"b{b}_conva", pads=[1] * 4
            ),
            helper.make_node("Relu", [f"ca{b}"], [f"ra{b}"], name=f"b{b}_relua"),
            helper.make_node(
                "Conv", [f"ra{b}", f"wb{b}", f"bb{b}"], [f"cb{b}"], name=f"b{b}_convb", pads=[1] * 4
            ),
            helper.make_node("Add", [f"cb{b}", prev], [f"s{b}"], name=f"b{b}_add"),
            helper.make_node("Relu", [f"s{b}"], [f"o{b}"], name=f"b{b}_relu"),
        ]
        inits += [
            f32(f"wa{b}", [16, 16, 3, 3], 10 + b),
            f32(f"ba{b}", [16], 20 + b),
            f32(f"wb{b}", [16, 16, 3, 3], 30 + b),
            f32(f"bb{b}", [16], 40 + b),
        ]
        prev = f"o{b}"
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["fl"], name="flat"),
        helper.make_node("Gemm", ["fl", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    inits += [f32("wf", [10, 16], 50), f32("bf", [10], 51)]
    return make_model(
        nodes,
        [vi("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [vi("y", TensorProto.FLOAT, ["N", 10])],
        inits,
    )


def torchvision_resnet() -> onnx.ModelProto:
    """A tiny torchvision ResNet, with the node and tensor names torch.onnx gives it.

    Stem conv1/bn1/relu/maxpool; bottleneck ``layer1.0`` (stride 2, with a downsample
    Conv+BatchNormalization) and ``layer1.1`` (identity shortcut), each conv1/bn1/relu,
    conv2/bn2/relu, conv3/bn3, residual Add, Relu; avgpool, Flatten, fc. Channels are
    multiples of 16, so ORT's NCHWc transformer takes everything up to the avgpool.
    """
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []

    def op(op_type: str, name: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{name}_output_0"
        nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def conv_bn(x: str, path: str, conv: str, bn: str, shape: list[int], stride: int = 1) -> str:
        """``path/conv/Conv`` -> ``path/bn/BatchNormalization``; ``shape``: [out, in, k]."""
        cout, cin, k = shape
        prefix = path.split("/")[-1] + "." if path else ""  # /layer1/layer1.0 -> layer1.0.
        cw, bw = (prefix + conv.split("/")[-1], prefix + bn.split("/")[-1])
        inits.append(f32(f"{cw}.weight", [cout, cin, k, k], len(inits)))
        for stat in ("weight", "bias", "running_mean"):
            inits.append(f32(f"{bw}.{stat}", [cout], len(inits)))
        inits.append(const(f"{bw}.running_var", np.linspace(0.5, 1.5, cout)))
        pads, strides = [k // 2] * 4, [stride, stride]
        c = op("Conv", f"{path}/{conv}/Conv", [x, f"{cw}.weight"], pads=pads, strides=strides)
        stats = [f"{bw}.{s}" for s in ("weight", "bias", "running_mean", "running_var")]
        return op("BatchNormalization", f"{path}/{bn}/BatchNormalization", [c, *stats])

    x = op("Relu", "/relu/Relu", [conv_bn("input", "", "conv1", "bn1", [16, 3, 7], 2)])
    x = op("MaxPool", "/maxpool/MaxPool", [x], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2])
    for b, (cin, stride) in enumerate([(16, 2), (64, 1)]):
        path = f"/layer1/layer1.{b}"
        h = op("Relu", f"{path}/relu/Relu", [conv_bn(x, path, "conv1", "bn1", [16, cin, 1])])
        h = conv_bn(h, path, "conv2", "bn2", [16, 16, 3], stride)
        h = op("Relu", f"{path}/relu/Relu_1", [h])
        h = conv_bn(h, path, "conv3", "bn3", [64, 16, 1])
        if b == 0:
            ds = ("downsample/downsample.0", "downsample/downsample.1")
            x = conv_bn(x, path, *ds, [64, cin, 1], stride)
        x = op("Relu", f"{path}/relu/Relu_2", [op("Add", f"{path}/Add", [h, x])])
    x = op("Flatten", "/Flatten", [op("GlobalAveragePool", "/avgpool/GlobalAveragePool", [x])])
    inits += [f32("fc.weight", [10, 64], 90), f32("fc.bias", [10], 91)]
    nodes.append(
        helper.make_node("Gemm", [x, "fc.weight", "fc.bias"], ["output"], name="/fc/Gemm", transB=1)
    )
    return make_model(
        nodes,
        [vi("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [vi("output", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )


def layer_norm_block() -> onnx.ModelProto:
    """MatMul+Add, Dropout, residual Add, decomposed LayerNorm, constant-foldable Reshape."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "B"], ["h"], name="bias"),
        helper.make_node("Dropout", ["h"], ["hd"], name="drop"),
        helper.make_node("Add", ["hd", "x"], ["res"], name="resid"),
        helper.make_node("ReduceMean", ["res"], ["mu"], name="rm1", axes=[-1]),
        helper.make_node("Sub", ["res", "mu"], ["d"], name="sub"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
        helper.make_node("ReduceMean", ["d2"], ["var"], name="rm2", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="addeps"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
        helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
        helper.make_node("Mul", ["n", "gamma"], ["ng"], name="mulg"),
        helper.make_node("Add", ["ng", "beta"], ["ln"], name="addb"),
        helper.make_node("Shape", ["ln"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["b0"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["b0", "ax0"], ["b0u"], name="unsq"),
        helper.make_node("Concat", ["b0u", "minus1"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["ln", "newshape"], ["y"], name="reshape"),
    ]
    inits = [
        f32("W", [32, 32], 1),
        f32("B", [32], 2),
        const("two", 2.0),
        const("eps", 1e-5),
        const("gamma", np.ones(32)),
        const("beta", np.zeros(32)),
        const("zero", 0, np.int64),
        const("ax0", [0], np.int64),
        const("minus1", [-1], np.int64),
    ]
    return make_model(
        nodes,
        [vi("x", TensorProto.FLOAT, [2, 8, 32])],
        [vi("y", TensorProto.FLOAT, [2, 256])],
        inits,
    )


@pytest.fixture
def optimize(tmp_path: Path) -> Callable[[onnx.ModelProto, Any], onnx.ModelProto]:
    """Let ORT optimize a model at a level and hand back the graph it saved."""
    counter = iter(range(1000))

    def run(model: onnx.ModelProto, level: Any) -> onnx.ModelProto:
        n = next(counter)
        src = tmp_path / f"model{n}.onnx"
        dst = tmp_path / f"model{n}.opt.onnx"
        onnx.save(model, src)
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        so.optimized_model_filepath = str(dst)
        so.log_severity_level = 3  # the NCHWc "hardware specific" notice is expected
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        return load_model_proto(dst)

    return run


def _rows(table: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _edge(info: GraphInfo, tensor: str, consumer: str | None) -> dict[str, Any]:
    rows = [r for r in _rows(info.edges) if r["tensor"] == tensor and r["consumer"] == consumer]
    assert len(rows) == 1, rows
    return rows[0]


# --------------------------------------------------------------------------- loading


def test_load_model_proto_reads_a_model(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(conv_chain(), path)
    model = load_model_proto(path)
    assert [n.name for n in model.graph.node] == ["conv1", "bn1", "relu1", "conv2", "add1"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no such"),
        (b"", "empty"),
        (b"this is a text file, not a model\n" * 10, "not an ONNX model"),
        (np.random.default_rng(0).bytes(4096), "not an ONNX model"),
        (b'{"ir_version": 8}', "not an ONNX model"),
    ],
    ids=["missing", "empty", "text", "random-bytes", "json"],
)
def test_load_model_proto_rejects_non_models(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as err:
        load_model_proto(path)
    message = str(err.value)
    assert str(path) in message
    assert reason in message
    assert "\n" not in message


def test_load_model_proto_rejects_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a file"):
        load_model_proto(tmp_path)


def test_load_model_proto_leaves_external_data_on_disk(tmp_path: Path) -> None:
    model = conv_chain()
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, location="ext.bin", size_threshold=0)
    loaded = load_model_proto(path)
    w1 = next(t for t in loaded.graph.initializer if t.name == "w1")
    assert w1.data_location == TensorProto.EXTERNAL
    assert not w1.raw_data
    info = extract_graph(loaded, {"x": [1, 3, 16, 16]})
    assert info.meta["has_external_data"] is True
    # Counted from dims x dtype, the data never read.
    assert info.meta["parameter_count"] == 8 * 3 * 3 * 3 + 8 * 5 + 8 * 8 * 3 * 3 + 8
    assert info.meta["parameter_bytes"] == 4 * info.meta["parameter_count"]
    assert _edge(info, "c2", "add1")["bytes"] == 1 * 8 * 16 * 16 * 4


def test_file_sha256_matches_hashlib(tmp_path: Path) -> None:
    data = np.random.default_rng(1).bytes(3 * (1 << 20) + 17)  # spans several chunks
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    with pytest.raises(InputError):
        file_sha256(tmp_path / "absent.bin")


# --------------------------------------------------------------------------- extraction


def test_tables_follow_the_declared_schemas() -> None:
    info = extract_graph(conv_chain(), {"x": [2, 3, 16, 16]})
    assert info.nodes.schema.equals(GRAPH_NODES.schema, check_metadata=True)
    assert info.edges.schema.equals(GRAPH_EDGES.schema, check_metadata=True)
    json.dumps(info.meta)  # JSON-ready


def test_edge_bytes_are_known_by_construction() -> None:
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "bias"], ["y"], name="add"),
        ],
        [vi("x", TensorProto.FLOAT, [2, 3, 4])],
        [vi("y", TensorProto.FLOAT, [2, 3, 4])],
        [f32("bias", [4])],
    )
    info = extract_graph(model)
    x = _edge(info, "x", "relu")
    expected = ("graph_input", None, "float", "[2,3,4]", 96)
    assert (x["kind"], x["producer"], x["dtype"], x["shape"], x["bytes"]) == expected
    r = _edge(info, "r", "add")
    assert (r["kind"], r["producer"], r["bytes"]) == ("activation", "relu", 96)
    bias = _edge(info, "bias", "add")
    assert (bias["kind"], bias["producer"], bias["bytes"]) == ("initializer", None, 16)
    y = _edge(info, "y", None)
    assert (y["kind"], y["producer"], y["bytes"]) == ("graph_output", "add", 96)
    assert info.edges.num_rows == 4


def test_parameter_counts_by_construction() -> None:
    model = make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
        [vi("x", TensorProto.FLOAT16, [4, 10])],
        [vi("y", TensorProto.FLOAT16, [4, 5])],
        [
            numpy_helper.from_array(np.zeros((5, 10), np.float16), "w"),
            numpy_helper.from_array(np.zeros(5, np.float16), "b"),
        ],
    )
    meta = extract_graph(model).meta
    assert meta["parameter_count"] == 55
    assert meta["parameter_bytes"] == 110
    assert meta["initializer_count"] == 2
    assert meta["has_external_data"] is False
    assert meta["inputs"] == [{"name": "x", "dtype": "float16", "shape": [4, 10]}]


def test_symbolic_dims_resolve_with_input_shapes() -> None:
    model = conv_chain()
    symbolic = extract_graph(model)
    assert _edge(symbolic, "c1", "bn1")["shape"] == '["N",8,16,16]'
    assert _edge(symbolic, "c1", "bn1")["bytes"] is None

    info = extract_graph(model, {"x": [2, 3, 16, 16]})
    assert _edge(info, "c1", "bn1")["shape"] == "[2,8,16,16]"
    assert _edge(info, "c1", "bn1")["bytes"] == 2 * 8 * 16 * 16 * 4
    assert _edge(info, "y", None)["bytes"] == 2 * 8 * 16 * 16 * 4
    # meta keeps what the model declares; the given shapes are recorded beside it.
    assert info.meta["inputs"] == [{"name": "x", "dtype": "float", "shape": ["N", 3, 16, 16]}]
    assert info.meta["outputs"] == [{"name": "y", "dtype": "float", "shape": ["N", 8, 16, 16]}]
    assert info.meta["input_shapes"] == {"x": [2, 3, 16, 16]}
    assert info.meta["shape_inference"] == "ok"
    conv = _rows(info.nodes)[0]
    assert json.loads(conv["input_shapes"]) == [[2, 3, 16, 16], [8, 3, 3, 3], [8]]
    assert conv["input_dtypes"] == ["float", "float", "float"]


def test_extract_graph_does_not_change_the_model() -> None:
    model = conv_chain()
    before = model.SerializeToString()
    extract_graph(model, {"x": [2, 3, 16, 16]})
    assert model.SerializeToString() == before


def test_bad_input_shapes_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="not a graph input"):
        extract_graph(conv_chain(), {"nope": [1, 3, 16, 16]})
    with pytest.raises(UsageError, match="rank"):
        extract_graph(conv_chain(), {"x": [1, 3]})


def test_int64_input_and_gather() -> None:
    model = make_model(
        [
            helper.make_node("Gather", ["table", "ids"], ["emb"], name="lookup", axis=0),
            helper.make_node("ReduceSum", ["emb", "axis"], ["y"], name="sum", keepdims=0),
        ],
        [vi("ids", TensorProto.INT64, ["batch", "seq"])],
        [vi("y", TensorProto.FLOAT, ["batch", 4])],
        [f32("table", [100, 4]), const("axis", [1], np.int64)],
    )
    info = extract_graph(model, {"ids": [3, 7]})
    ids = _edge(info, "ids", "lookup")
    assert (ids["dtype"], ids["shape"], ids["bytes"]) == ("int64", "[3,7]", 3 * 7 * 8)
    emb = _edge(info, "emb", "sum")
    assert (emb["shape"], emb["bytes"]) == ("[3,7,4]", 3 * 7 * 4 * 4)
    lookup = _rows(info.nodes)[0]
    assert lookup["input_dtypes"] == ["float", "int64"]
    assert lookup["attributes"] == '{"axis":0}'


def test_attribute_summary_elides_tensors_and_graphs() -> None:
    then_graph = helper.make_graph(
        [helper.make_node("Identity", ["y0"], ["t"])],
        "then",
        [],
        [vi("t", TensorProto.FLOAT, [2])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["y0"], ["e"])], "else", [], [vi("e", TensorProto.FLOAT, [2])]
    )
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k", value=const("kv", np.ones((2, 2)))),
        helper.make_node("MatMul", ["x", "k"], ["mm"], name="mm"),
        helper.make_node("LeakyRelu", ["mm"], ["lr"], name="lrelu", alpha=0.1),
        helper.make_node("Pad", ["lr", "pads"], ["p"], name="pad", mode="reflect"),
        helper.make_node("ReduceMax", ["p"], ["y0"], name="rmax", axes=[0], keepdims=0),
        helper.make_node(
            "If", ["cond"], ["y"], name="branch", then_branch=then_graph, else_branch=else_graph
        ),
    ]
    model = make_model(
        nodes,
        [vi("x", TensorProto.FLOAT, [2, 2]), vi("cond", TensorProto.BOOL, [])],
        [vi("y", TensorProto.FLOAT, [2])],
        [const("pads", [0, 0, 0, 0], np.int64)],
    )
    attrs = {r["node_name"]: json.loads(r["attributes"]) for r in _rows(extract_graph(model).nodes)}
    assert attrs["k"] == {"value": "<tensor float[2,2]>"}
    assert attrs["lrelu"] == {"alpha": 0.1}  # float32 0.1 spelled as written
    assert attrs["pad"] == {"mode": "reflect"}
    assert attrs["rmax"] == {"axes": [0], "keepdims": 0}
    assert attrs["branch"] == {"then_branch": "<graph>", "else_branch": "<graph>"}
    assert attrs["mm"] == {}
    cond = _edge(extract_graph(model), "cond", "branch")
    assert (cond["dtype"], cond["shape"], cond["bytes"]) == ("bool", "[]", 1)


def test_unnamed_nodes_get_generated_names() -> None:
    info = extract_graph(unnamed_chain())
    rows = _rows(info.nodes)
    assert [r["node_name"] for r in rows] == ["Relu_0", "Neg_1", "Identity_2", "Abs_3"]
    assert [r["node_index"] for r in rows] == [0, 1, 2, 3]
    assert _edge(info, "a", "Neg_1")["producer"] == "Relu_0"
    assert rows[0]["original_nodes"] == ["Relu_0"]


def test_failed_shape_inference_is_recorded_not_raised() -> None:
    # Broadcasting [2,3] with [4,5] is an error strict inference reports.
    model = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Relu", ["a"], ["ra"], name="relu"),
                helper.make_node("Add", ["ra", "b"], ["y"], name="add"),
            ],
            "bad",
            [vi("a", TensorProto.FLOAT, [2, 3]), vi("b", TensorProto.FLOAT, [4, 5])],
            [vi("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=OPSET,
        ir_version=IR_VERSION,
    )
    info = extract_graph(model)
    assert info.meta["shape_inference"].startswith("failed: ")
    assert "\n" not in info.meta["shape_inference"]
    assert info.nodes.num_rows == 2
    assert _edge(info, "ra", "add")["shape"] == "[2,3]"  # what inference got before failing


def test_unused_graph_input_still_has_an_edge() -> None:
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [vi("x", TensorProto.FLOAT, [2]), vi("unused", TensorProto.INT32, [5])],
        [vi("y", TensorProto.FLOAT, [2])],
    )
    row = _edge(extract_graph(model), "unused", None)
    assert (row["kind"], row["producer"], row["bytes"]) == ("graph_input", None, 20)


# --------------------------------------------------------------------------- bounded inference


def _unchecked(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[TensorProto] | None = None,
) -> onnx.ModelProto:
    """A model whose outputs declare no shape (the checker wants one): inference finds it."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=OPSET, ir_version=IR_VERSION)


def elementwise_1d(n: int) -> onnx.ModelProto:
    """Issue #14's model: Add, Mul, Relu, Sigmoid, twice, over a 1-D input of n floats."""
    ops = ["Add", "Mul", "Relu", "Sigmoid"] * 2
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        ins = [prev, "c"] if op in ("Add", "Mul") else [prev]
        nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}{i}"))
        prev = out
    return _unchecked(
        nodes,
        [vi("x", TensorProto.FLOAT, [n])],
        [vi("y", TensorProto.FLOAT, None)],
        [const("c", 0.5)],
    )


def _long_values_models(n: int) -> dict[str, onnx.ModelProto]:
    """Each way a 1-D tensor of ``n`` values reaches an op that propagates values, next to
    shape computations data propagation must still see through."""
    i64 = np.int64
    f = TensorProto.FLOAT
    models = {"elementwise": elementwise_1d(n)}
    # a Reshape target from Shape and a ConstantOfShape whose length only data propagation
    # knows (torch's Pad export): the zeros are cut in the first pass, read in the next
    models["computed_shape"] = _unchecked(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "c"], ["a"], name="add"),
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Shape", ["m"], ["sm"], name="shape_m"),
            helper.make_node("Slice", ["sm", "zero", "one"], ["k"], name="slice"),
            helper.make_node(
                "ConstantOfShape", ["k"], ["z"], name="zeros", value=const("v", [1], i64)
            ),
            helper.make_node("Concat", ["s", "z"], ["t"], name="concat", axis=0),
            helper.make_node("Reshape", ["a", "t"], ["y"], name="reshape"),
        ],
        [vi("x", f, [n]), vi("m", f, [2, 3])],
        [vi("y", f, None)],
        [const("c", 0.5), const("zero", [0], i64), const("one", [1], i64)],
    )
    models["large_initializer"] = _unchecked(
        [
            helper.make_node("Add", ["x", "w"], ["a"], name="add"),
            helper.make_node("Mul", ["a", "w"], ["y"], name="mul"),
        ],
        [vi("x", f, [n])],
        [vi("y", f, None)],
        [const("w", np.ones(n))],
    )
    models["large_constant"] = _unchecked(
        [
            helper.make_node("Constant", [], ["k"], name="k", value=const("kv", np.arange(n), i64)),
            helper.make_node("Add", ["k", "one"], ["k1"], name="add"),
            helper.make_node("Gather", ["k1", "idx"], ["g"], name="gather", axis=0),
            helper.make_node("Cast", ["g"], ["y"], name="cast", to=f),
        ],
        [],
        [vi("y", f, None)],
        [const("one", 1, i64), const("idx", [3], i64)],
    )
    models["range"] = _unchecked(
        [
            helper.make_node("Range", ["s0", "lim", "d1"], ["r"], name="range"),
            helper.make_node("Cast", ["r"], ["rf"], name="cast", to=f),
            helper.make_node("Add", ["rf", "c"], ["y"], name="add"),
        ],
        [],
        [vi("y", f, None)],
        [const("c", 0.5), const("s0", 0, i64), const("lim", n, i64), const("d1", 1, i64)],
    )
    models["flattened_2d"] = _unchecked(
        [
            helper.make_node("Reshape", ["x", "minus1"], ["r"], name="flatten"),
            helper.make_node("Mul", ["r", "c"], ["y"], name="mul"),
        ],
        [vi("x", f, [2, (n + 1) // 2])],
        [vi("y", f, None)],
        [const("c", 0.5), const("minus1", [-1], i64)],
    )
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["o1"])], "then", [], [vi("o1", f, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "c"], ["o2"])], "else", [], [vi("o2", f, None)]
    )
    models["subgraph"] = _unchecked(
        [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other)],
        [vi("x", f, [n])],
        [vi("y", f, None)],
        [const("c", 0.5), const("cond", True, np.bool_)],
    )
    fn = helper.make_function(
        "local",
        "Scale",
        ["a"],
        ["b"],
        [
            helper.make_node("Constant", [], ["h"], value_float=0.5),
            helper.make_node("Mul", ["a", "h"], ["b"]),
        ],
        OPSET,
    )
    local = _unchecked(
        [helper.make_node("Scale", ["x"], ["y"], name="scale", domain="local")],
        [vi("x", f, [n])],
        [vi("y", f, None)],
    )
    local.opset_import.append(helper.make_opsetid("local", 1))
    local.functions.append(fn)
    models["function"] = local
    return models


def _shapes(info: GraphInfo) -> dict[str, str | None]:
    return {r["tensor"]: r["shape"] for r in _rows(info.edges)}


def test_long_1d_tensors_are_cut_from_data_propagation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_module, "DATA_PROP_MAX_ELEMS", 100)
    info = extract_graph(elementwise_1d(101))
    assert info.meta["shape_inference"] == "ok"
    # the input read by the first Add and the Sigmoid output read by the second
    assert info.meta["data_propagation"] == {
        "mode": "guarded",
        "max_elems": 100,
        "skipped_count": 2,
        "skipped": ["t3", "x"],
    }
    assert set(_shapes(info).values()) == {"[101]", "[]"}  # the chain and the scalar c
    assert _edge(info, "y", None)["bytes"] == 404

    at_guard = extract_graph(elementwise_1d(100)).meta["data_propagation"]
    assert at_guard == {"mode": "full", "max_elems": 100, "skipped_count": 0, "skipped": []}


def test_ops_known_to_propagate_values_match_onnx() -> None:
    # graph._DATA_PROP_OPS stands in for OpSchema.has_data_propagation_function on an old onnx
    schemas = onnx.defs.get_all_schemas_with_history()
    found = {s.name for s in schemas if s.domain == "" and s.has_data_propagation_function}
    assert found == graph_module._DATA_PROP_OPS


@pytest.mark.parametrize(
    "name",
    [
        "elementwise",
        "computed_shape",
        "large_initializer",
        "large_constant",
        "range",
        "flattened_2d",
        "subgraph",
        "function",
    ],
)
def test_guard_keeps_every_shape_unguarded_inference_finds(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    model = _long_values_models(2000)[name]
    monkeypatch.setattr(graph_module, "DATA_PROP_MAX_ELEMS", 10**12)
    unguarded = extract_graph(model)
    assert unguarded.meta["data_propagation"]["mode"] == "full"
    monkeypatch.setattr(graph_module, "DATA_PROP_MAX_ELEMS", 100)
    guarded = extract_graph(model)
    assert guarded.meta["data_propagation"]["mode"] == "guarded"
    assert guarded.meta["shape_inference"] == unguarded.meta["shape_inference"] == "ok"
    assert _shapes(guarded) == _shapes(unguarded)
    if name == "computed_shape":  # the zeros were cut in the first pass, read in the second
        assert guarded.meta["data_propagation"]["skipped"] == ["r"]
    assert _shapes(guarded)["y"] == {
        "computed_shape": '[2000,"unk__0","unk__1"]',  # a ConstantOfShape's values are unknown
        "large_constant": "[1]",
        "flattened_2d": "[2000]",
    }.get(name, "[2000]")


def test_guard_bounds_peak_memory_of_extraction() -> None:
    """A 1-D input of 4 M floats: ONNX's data propagation alone took 1.1 GB for it."""
    script = """
import sys, time
import onnx
from aaco.analysis.graph import extract_graph
from aaco.runners.rss import own_peak_rss_bytes
from tests.analysis.test_graph import elementwise_1d
model = elementwise_1d(4_000_000)
extract_graph(elementwise_1d(10))  # imports and first-use allocations
before = own_peak_rss_bytes()
start = time.perf_counter()
info = extract_graph(model)
mode = info.meta["data_propagation"]["mode"]
print(own_peak_rss_bytes() - before, time.perf_counter() - start, mode)
"""
    from aaco.runners.rss import own_peak_rss_bytes

    if own_peak_rss_bytes() is None:
        pytest.skip("no VmHWM on this system")
    root = Path(__file__).parents[2]  # where `tests` imports from
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=root,
    ).stdout.split()
    added, seconds, mode = int(out[0]), float(out[1]), out[2]
    assert mode == "guarded"
    assert added < 64 * 2**20, f"extract_graph added {added / 2**20:.0f} MiB"
    assert seconds < 10


def test_meta_describes_the_model() -> None:
    model = conv_chain()
    model.producer_name = "aaco-tests"
    model.producer_version = "1"
    model.doc_string = "x" * 1000
    model.model_version = 3
    meta = extract_graph(model).meta
    assert meta["ir_version"] == IR_VERSION
    assert meta["opset"] == {"ai.onnx": 17}
    assert meta["producer_name"] == "aaco-tests"
    assert meta["model_version"] == 3
    assert len(meta["doc_string"]) <= 200
    assert meta["graph_name"] == "g"
    assert meta["node_count"] == 5
    assert meta["op_type_counts"] == {"Conv": 2, "Add": 1, "BatchNormalization": 1, "Relu": 1}
    assert meta["graph"] == "original"


# --------------------------------------------------------------------------- ORT mapping


def test_fused_conv_maps_to_conv_bn_relu(optimize: Callable[..., onnx.ModelProto]) -> None:
    original = conv_chain()
    optimized = optimize(original, Level.ORT_ENABLE_EXTENDED)
    ops = {n.name: n.op_type for n in optimized.graph.node}
    assert ops == {"conv1": "FusedConv", "conv2": "Conv", "add1": "Add"}
    assert map_optimized_to_original(original, optimized) == {
        "conv1": ["conv1", "bn1", "relu1"],
        "conv2": ["conv2"],
        "add1": ["add1"],
    }
    assert eliminated_original_nodes(original, optimized) == []


def test_basic_level_folds_batchnorm_into_conv(optimize: Callable[..., onnx.ModelProto]) -> None:
    original = conv_chain()
    optimized = optimize(original, Level.ORT_ENABLE_BASIC)
    mapping = map_optimized_to_original(original, optimized)
    assert mapping == {
        "conv1": ["conv1", "bn1"],
        "relu1": ["relu1"],
        "conv2": ["conv2"],
        "add1": ["add1"],
    }


def _assert_partition(
    original: onnx.ModelProto,
    optimized: onnx.ModelProto,
    mapping: dict[str, list[str] | None],
) -> None:
    """Known mappings never overlap, and with what was eliminated cover the original."""
    seen: list[str] = []
    for names in mapping.values():
        seen += names or []
    assert len(seen) == len(set(seen))
    covered = set(seen) | set(eliminated_original_nodes(original, optimized))
    if all(v is not None for k, v in mapping.items() if not k.startswith("Reorder")):
        assert covered == set(node_names(original.graph))


def test_nchwc_conv_chain_maps_through_reorders(optimize: Callable[..., onnx.ModelProto]) -> None:
    original = conv_chain()
    optimized = optimize(original, Level.ORT_ENABLE_ALL)
    mapping = map_optimized_to_original(original, optimized)
    domains = {n.domain for n in optimized.graph.node}
    if "com.microsoft.nchwc" in domains:  # x86 MLAS: Conv rewritten to the blocked layout
        # inserted layout nodes stand for no original node (ORT 1.32 adds a second one
        # for the residual branch, ReorderOutput_token_N; earlier versions one)
        reorders = {k: v for k, v in mapping.items() if k.startswith("ReorderOutput")}
        assert reorders and all(v is None for v in reorders.values())
        assert {k: v for k, v in mapping.items() if k not in reorders} == {
            "r_nchwc": ["conv1", "bn1", "relu1"],
            "c2_nchwc": ["conv2", "add1"],  # the residual Add is folded into the Conv
        }
    _assert_partition(original, optimized, mapping)
    # Contrib-domain nodes do not break extraction.
    info = extract_graph(
        optimized, {"x": [1, 3, 16, 16]}, "optimized", original_map=mapping, reference=original
    )
    rows = _rows(info.nodes)
    assert {r["graph"] for r in rows} == {"optimized"}
    assert {r["node_name"]: r["original_nodes"] for r in rows} == mapping
    assert info.meta["shape_inference"] == "ok" or info.meta["shape_inference"].startswith(
        "failed: "
    )


def test_nchwc_residual_blocks_map_node_by_node(optimize: Callable[..., onnx.ModelProto]) -> None:
    original = resnet_blocks()
    optimized = optimize(original, Level.ORT_ENABLE_ALL)
    mapping = map_optimized_to_original(original, optimized)
    if "cb0_nchwc" in mapping:
        assert mapping["r0_nchwc"] == ["conv0", "relu0"]
        assert mapping["ra0_nchwc"] == ["b0_conva", "b0_relua"]
        # Named after the Conv's output, the node also computes the Add and Relu after it.
        assert mapping["cb0_nchwc"] == ["b0_convb", "b0_add", "b0_relu"]
        assert mapping["cb1_nchwc"] == ["b1_convb", "b1_add", "b1_relu"]
    assert mapping["fc"] == ["fc"]
    _assert_partition(original, optimized, mapping)


NCHWC = "com.microsoft.nchwc"


def _resnet_nchwc_mapping() -> dict[str, list[str] | None]:
    """What each node of torchvision_resnet's NCHWc graph stands for, by construction."""

    def bn_conv(path: str, conv: str, bn: str, *after: str) -> list[str]:
        return [f"{path}/{conv}/Conv", f"{path}/{bn}/BatchNormalization", *after]

    mapping: dict[str, list[str] | None] = {
        "/relu/Relu_output_0_nchwc": bn_conv("", "conv1", "bn1", "/relu/Relu"),
        "/maxpool/MaxPool_output_0_nchwc": ["/maxpool/MaxPool"],
        "/avgpool/GlobalAveragePool_output_0_nchwc": ["/avgpool/GlobalAveragePool"],
        "ReorderOutput": None,  # inserted: stands for no original node
        "/Flatten": ["/Flatten"],
        "/fc/Gemm": ["/fc/Gemm"],
    }
    for b in range(2):
        p = f"/layer1/layer1.{b}"
        mapping[f"{p}/relu/Relu_output_0_nchwc"] = bn_conv(p, "conv1", "bn1", f"{p}/relu/Relu")
        mapping[f"{p}/relu/Relu_1_output_0_nchwc"] = bn_conv(p, "conv2", "bn2", f"{p}/relu/Relu_1")
        # Named after bn3's output; ORT then folded in the residual Add (taking the shortcut
        # as its Sum input) and the block's last Relu.
        mapping[f"{p}/bn3/BatchNormalization_output_0_nchwc"] = bn_conv(
            p, "conv3", "bn3", f"{p}/Add", f"{p}/relu/Relu_2"
        )
    # The downsample branch feeds that Sum input: it computes no Add and no Relu.
    ds = "/layer1/layer1.0/downsample"
    mapping[f"{ds}/downsample.1/BatchNormalization_output_0_nchwc"] = [
        f"{ds}/downsample.0/Conv",
        f"{ds}/downsample.1/BatchNormalization",
    ]
    return mapping


def test_nchwc_torchvision_resnet_maps_every_conv(
    optimize: Callable[..., onnx.ModelProto],
) -> None:
    original = torchvision_resnet()
    optimized = optimize(original, Level.ORT_ENABLE_ALL)
    mapping = map_optimized_to_original(original, optimized)
    assert mapping["/Flatten"] == ["/Flatten"]
    assert mapping["/fc/Gemm"] == ["/fc/Gemm"]
    _assert_partition(original, optimized, mapping)
    if NCHWC not in {n.domain for n in optimized.graph.node}:
        return  # no NCHWc layout off x86: the exact mapping below is x86's
    assert mapping == _resnet_nchwc_mapping()
    assert eliminated_original_nodes(original, optimized) == []


@pytest.mark.parametrize(
    ("renamed", "known", "also_unknown"),
    [
        # A Conv inside the chain: its output cannot be told, so neither can where the next
        # Conv's walk must stop; the rest of the chain still maps.
        (
            "/layer1/layer1.0/relu/Relu_1_output_0_nchwc",
            False,
            ["/layer1/layer1.0/bn3/BatchNormalization_output_0_nchwc"],
        ),
        # The pool's output goes through the ReorderOutput to the original tensor: known.
        ("/avgpool/GlobalAveragePool_output_0_nchwc", True, []),
    ],
)
def test_nchwc_chain_with_an_unreadable_name_maps_what_it_can(
    optimize: Callable[..., onnx.ModelProto], renamed: str, known: bool, also_unknown: list[str]
) -> None:
    original = torchvision_resnet()
    optimized = optimize(original, Level.ORT_ENABLE_ALL)
    if NCHWC not in {n.domain for n in optimized.graph.node}:
        pytest.skip("ORT makes no NCHWc graph on this CPU")
    node = next(n for n in optimized.graph.node if n.name == renamed)
    node.name = "mystery"  # a name that says nothing of what the node computes
    expected = _resnet_nchwc_mapping()
    stands_for = expected.pop(renamed)
    expected["mystery"] = stands_for if known else None
    expected.update(dict.fromkeys(also_unknown))
    mapping = map_optimized_to_original(original, optimized)
    assert mapping == expected
    _assert_partition(original, optimized, mapping)
    # What the unknown nodes may compute is not reported as eliminated.
    assert eliminated_original_nodes(original, optimized) == []


def test_bias_gelu_maps_to_the_gelu_subgraph(optimize: Callable[..., onnx.ModelProto]) -> None:
    original = gelu_mlp()
    optimized = optimize(original, Level.ORT_ENABLE_EXTENDED)
    ops = [n.op_type for n in optimized.graph.node]
    assert ops == ["MatMul", "BiasGelu", "MatMul"]  # what ORT 1.2x/1.3x makes of it
    fused = next(n.name for n in optimized.graph.node if n.op_type == "BiasGelu")
    mapping = map_optimized_to_original(original, optimized)
    assert mapping == {
        "mm": ["mm"],
        fused: ["bias", "div", "erf", "add1", "mul", "mulhalf"],
        "mm2": ["mm2"],
    }
    assert eliminated_original_nodes(original, optimized) == ["ident"]


def test_layer_norm_gemm_and_folded_constants(optimize: Callable[..., onnx.ModelProto]) -> None:
    original = layer_norm_block()
    for level in (Level.ORT_ENABLE_EXTENDED, Level.ORT_ENABLE_ALL):
        optimized = optimize(original, level)
        mapping = map_optimized_to_original(original, optimized)
        names = node_names(optimized.graph, original.graph)
        by_op = {
            n.op_type: mapping[name] for n, name in zip(optimized.graph.node, names, strict=True)
        }
        ln = ["rm1", "sub", "pow", "rm2", "addeps", "sqrt", "div", "mulg", "addb"]
        if "SkipLayerNormalization" in by_op:
            assert by_op["SkipLayerNormalization"] == ["resid", *ln]
        else:
            assert by_op["LayerNormalization"] == ln
        if "Gemm" in by_op:  # MatMulAddFusion wraps a Gemm in two Reshapes it adds
            assert by_op["Gemm"] == ["mm", "bias"]
        # Dropout removed; Shape->Gather->Unsqueeze->Concat folded into an initializer.
        gone = eliminated_original_nodes(original, optimized)
        assert gone == ["drop", "shape", "gather", "unsq", "concat"]
        _assert_partition(original, optimized, mapping)


def test_unnamed_nodes_keep_their_names_in_the_optimized_graph(
    optimize: Callable[..., onnx.ModelProto],
) -> None:
    original = unnamed_chain()
    optimized = optimize(original, Level.ORT_ENABLE_ALL)
    # ORT saves the kept nodes unnamed; its profile calls them <op>_<original index>.
    assert [n.name for n in optimized.graph.node] == ["", "", ""]
    assert node_names(optimized.graph, original.graph) == ["Relu_0", "Neg_1", "Abs_3"]
    assert node_names(optimized.graph) == ["Relu_0", "Neg_1", "Abs_2"]
    assert map_optimized_to_original(original, optimized) == {
        "Relu_0": ["Relu_0"],
        "Neg_1": ["Neg_1"],
        "Abs_3": ["Abs_3"],
    }
    assert eliminated_original_nodes(original, optimized) == ["Identity_2"]
    info = extract_graph(optimized, graph_label="optimized", reference=original)
    assert [r["node_name"] for r in _rows(info.nodes)] == ["Relu_0", "Neg_1", "Abs_3"]
    assert [r["original_nodes"] for r in _rows(info.nodes)] == [None, None, None]


# --------------------------------------------------------------------------- mapping rules


def _chain_original() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("Neg", ["a"], ["b"], name="neg"),
            helper.make_node("Abs", ["b"], ["c"], name="abs"),
            helper.make_node("Add", ["c", "z"], ["y"], name="add"),
        ],
        [vi("x", TensorProto.FLOAT, [4]), vi("z", TensorProto.FLOAT, [4])],
        [vi("y", TensorProto.FLOAT, [4])],
    )


def _rewritten(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "opt",
        [vi("x", TensorProto.FLOAT, [4]), vi("z", TensorProto.FLOAT, [4])],
        [vi("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(
        graph,
        opset_imports=[*OPSET, helper.make_opsetid("com.example", 1)],
        ir_version=IR_VERSION,
    )


def test_fused_node_takes_the_subgraph_between_its_tensors() -> None:
    optimized = _rewritten(
        [
            helper.make_node("ReluNegAbs", ["x"], ["c"], name="fused", domain="com.example"),
            helper.make_node("Add", ["c", "z"], ["y"], name="add"),
        ]
    )
    assert map_optimized_to_original(_chain_original(), optimized) == {
        "fused": ["relu", "neg", "abs"],
        "add": ["add"],
    }


def test_walk_reaching_a_foreign_graph_input_is_unknown() -> None:
    # "c" exists in the original, but computing it from "z" is not what the original does.
    optimized = _rewritten(
        [
            helper.make_node("Odd", ["z"], ["c"], name="odd", domain="com.example"),
            helper.make_node("Add", ["c", "z"], ["y"], name="add"),
        ]
    )
    assert map_optimized_to_original(_chain_original(), optimized)["odd"] is None


def test_outputs_unknown_to_the_original_make_the_mapping_unknown() -> None:
    optimized = _rewritten(
        [
            helper.make_node("Relu", ["x"], ["fresh1"], name="relu"),
            helper.make_node("NegAbs", ["fresh1"], ["fresh2"], name="na", domain="com.example"),
            helper.make_node("Mystery", ["fresh2", "z"], ["y"], name="m", domain="com.example"),
        ]
    )
    mapping = map_optimized_to_original(_chain_original(), optimized)
    assert mapping["na"] is None
    assert mapping["m"] is None
    assert mapping["relu"] == ["relu"]  # same name and op type: itself
    assert eliminated_original_nodes(_chain_original(), optimized) == []


def test_inserted_layout_nodes_map_to_none_and_carry_tensors() -> None:
    dom = "com.microsoft.nchwc"
    optimized = _rewritten(
        [
            helper.make_node("ReorderInput", ["x"], ["r0"], name="ReorderInput", domain=dom),
            helper.make_node("Thing", ["r0"], ["r1"], name="b_nchwc", domain=dom),
            helper.make_node("ReorderOutput", ["r1"], ["b"], name="ReorderOutput", domain=dom),
            helper.make_node("Abs", ["b"], ["c"], name="abs"),
            helper.make_node("Add", ["c", "z"], ["y"], name="add"),
        ]
    )
    assert map_optimized_to_original(_chain_original(), optimized) == {
        "ReorderInput": None,
        "b_nchwc": ["relu", "neg"],  # its tensors are x and b, via the reorders
        "ReorderOutput": None,
        "abs": ["abs"],
        "add": ["add"],
    }
