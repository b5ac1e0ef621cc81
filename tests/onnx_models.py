"""Small ONNX models for tests, built with onnx.helper: answers known by construction.

Models use opset 17 and IR version 10 (onnxruntime 1.31 rejects the IR 14 that onnx 1.23
writes by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]
IR_VERSION = 10


def f32(name: str, shape: list[int], seed: int = 0) -> TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def const(name: str, value: Any, dtype: Any = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: Sequence[TensorProto] = (),
    name: str = "g",
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def vi(name: str, dtype: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def conv_chain() -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> Conv -> Add(residual): ORT fuses the first three."""
    var = numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "v")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"], name="bn1"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu1"),
        helper.make_node("Conv", ["r", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r"], ["y"], name="add1"),
    ]
    inits = [
        f32("w1", [8, 3, 3, 3], 1),
        f32("b1", [8], 2),
        f32("s", [8], 3),
        f32("bb", [8], 4),
        f32("m", [8], 5),
        var,
        f32("w2", [8, 8, 3, 3], 6),
        f32("b2", [8], 7),
    ]
    return make_model(
        nodes,
        [vi("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [vi("y", TensorProto.FLOAT, ["N", 8, 16, 16])],
        inits,
    )


def gelu_mlp(identity: bool = True) -> onnx.ModelProto:
    """MatMul -> Add -> erf-GELU [-> Identity] -> MatMul; ORT makes Add+GELU one BiasGelu
    and drops the Identity."""
    last = "gi" if identity else "g"
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "B"], ["a"], name="bias"),
        helper.make_node("Div", ["a", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add1"),
        helper.make_node("Mul", ["a", "e1"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["g"], name="mulhalf"),
        *([helper.make_node("Identity", ["g"], ["gi"], name="ident")] if identity else []),
        helper.make_node("MatMul", [last, "W2"], ["y"], name="mm2"),
    ]
    inits = [
        f32("W", [16, 32], 1),
        f32("B", [32], 2),
        const("sqrt2", np.sqrt(2.0)),
        const("one", 1.0),
        const("half", 0.5),
        f32("W2", [32, 16], 3),
    ]
    return make_model(
        nodes,
        [vi("x", TensorProto.FLOAT, ["batch", 8, 16])],
        [vi("y", TensorProto.FLOAT, ["batch", 8, 16])],
        inits,
    )


def unnamed_chain() -> onnx.ModelProto:
    """Relu -> Neg -> Identity -> Abs, no node names; ORT drops the Identity."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Identity", ["b"], ["c"]),
        helper.make_node("Abs", ["c"], ["y"]),
    ]
    return make_model(
        nodes, [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])]
    )


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def make_matmul_chain(
    path: Path, n_layers: int = 3, width: int = 64, batch: str | int = "batch"
) -> Path:
    """x[batch, width] -> (MatMul + Add + Relu) x n_layers -> y; symbolic batch by default."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(n_layers):
        w = numpy_helper.from_array(rng.standard_normal((width, width), dtype=np.float32), f"w{i}")
        b = numpy_helper.from_array(np.zeros(width, dtype=np.float32), f"b{i}")
        inits += [w, b]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"layer{i}.matmul"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"layer{i}.add"),
            helper.make_node("Relu", [f"add{i}"], [f"h{i}"], name=f"layer{i}.relu"),
        ]
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return save_model(model, path)
