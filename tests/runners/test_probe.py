"""Shape probing for the open-dimension hint: candidates, the command line, real runs."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco.runners.inputs import UnresolvedShapes, resolve_inputs
from aaco.runners.probe import (
    FALLBACK_SIZES,
    IMAGE_SIDE,
    MAX_CANDIDATE_BYTES,
    SEQUENCE_LENGTH,
    candidate_shapes,
    hint_command,
    implied_sizes,
    probe_shapes,
)


def _open(model: onnx.ModelProto) -> UnresolvedShapes:
    with pytest.raises(UnresolvedShapes) as info:
        resolve_inputs(model)
    return info.value


def _save(model: onnx.ModelProto, tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def _reshape_model(numel: int) -> onnx.ModelProto:
    """x [-1, 3, ?, ?] reshaped to [1, numel]: only sizes with 3 * H * W == numel run."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    for kind, v in (("value", -1), ("value", 3), ("param", "?"), ("param", "?")):
        d = x.type.tensor_type.shape.dim.add()
        if kind == "value":
            d.dim_value = int(v)
        else:
            d.dim_param = str(v)
    target = numpy_helper.from_array(np.array([1, numel], dtype=np.int64), "target")
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "target"], ["y"])],
        "g",
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [target],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_candidates_image_first_then_uniform_sizes() -> None:
    exc = _open(_reshape_model(3 * 8 * 8))
    cands = candidate_shapes(exc)
    assert cands[0] == {"x": (1, 3, IMAGE_SIDE, IMAGE_SIDE)}
    n = len(FALLBACK_SIZES)
    assert [c["x"] for c in cands[1 : n + 1]] == [(1, 3, s, s) for s in FALLBACK_SIZES]
    # then the leading -1 (defaulted to a batch of 1) is tried as a sequence too
    assert exc.default_leading == ["x"]
    assert [c["x"] for c in cands[n + 1 :]] == [(s, 3, s, s) for s in FALLBACK_SIZES if s != 1]


def test_recurrent_state_batch_follows_the_batch() -> None:
    # silero-vad: input [?, ?], state [2, ?, 128] (the state's ? is the batch)
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["", ""])
    state = helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "", 128])
    g = helper.make_graph(
        [
            helper.make_node("Identity", ["input"], ["a"]),
            helper.make_node("Identity", ["state"], ["b"]),
        ],
        "g",
        [inp, state],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    cands = candidate_shapes(_open(m))
    assert cands[0] == {"input": (1, SEQUENCE_LENGTH), "state": (2, 1, 128)}
    assert all(c["state"][1] == 1 for c in cands)


def test_probe_finds_the_only_size_that_runs(tmp_path: Path) -> None:
    model = _reshape_model(3 * 8 * 8)
    exc = _open(model)
    found = probe_shapes(_save(model, tmp_path), model, exc)
    assert found.shapes == {"x": (1, 3, 8, 8)}
    # every size tried before 8 failed, with ONNX Runtime's reason
    assert found.tried == 1 + FALLBACK_SIZES.index(8) + 1
    assert len(found.errors) == found.tried - 1 and "Reshape" in found.errors[0]


def test_probe_reports_when_nothing_runs(tmp_path: Path) -> None:
    model = _reshape_model(7)  # 3 * H * W is never 7
    exc = _open(model)
    found = probe_shapes(_save(model, tmp_path), model, exc)
    # every candidate whose inputs fit the probe's memory cap was tried (512x3x512x512
    # floats do not)
    fits = [c for c in candidate_shapes(exc) if 4 * math.prod(c["x"]) <= MAX_CANDIDATE_BYTES]
    assert found.shapes is None and found.tried == len(fits) > len(FALLBACK_SIZES)
    assert found.errors


def test_probe_of_a_model_onnxruntime_cannot_load(tmp_path: Path) -> None:
    model = _reshape_model(12)
    path = _save(model, tmp_path)
    path.write_bytes(b"garbage")
    found = probe_shapes(path, model, _open(model))
    assert found.shapes is None and "did not load" in found.errors[0]


def test_hint_command_replaces_only_the_open_inputs_shapes() -> None:
    argv = ["aaco", "run", "--model", "my model.onnx", "--shape", "x=-1x3x48x48",
            "--shape=y=1x2", "--iterations", "5"]  # fmt: skip
    cmd = hint_command(argv, {"x": (1, 3, 48, 48), "s": ()})
    assert shlex.split(cmd) == [
        "aaco", "run", "--model", "my model.onnx", "--shape=y=1x2", "--iterations", "5",
        "--shape", "x=1x3x48x48", "--shape", "s=scalar",
    ]  # fmt: skip


def _weights_model(kind: str) -> onnx.ModelProto:
    """x [T, F] (both open) -> Unsqueeze(1) -> LSTM with input size 266, or -> Transpose ->
    MatMul with a [40, 8] weight, or NHWC -> Transpose -> Conv with 6 input channels."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "F"])
    nodes, inits = [], []
    if kind == "lstm":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "F"])
        inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "ax"))
        inits.append(numpy_helper.from_array(np.zeros((1, 40, 266), np.float32), "W"))
        inits.append(numpy_helper.from_array(np.zeros((1, 40, 10), np.float32), "R"))
        nodes.append(helper.make_node("Unsqueeze", ["x", "ax"], ["x3"]))
        nodes.append(helper.make_node("LSTM", ["x3", "W", "R"], ["y"], hidden_size=10))
    elif kind == "matmul":
        inits.append(numpy_helper.from_array(np.zeros((40, 8), np.float32), "W"))
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]))
        nodes.append(helper.make_node("Mul", ["xt", "W"], ["unused"]))
        nodes.append(helper.make_node("MatMul", ["xt", "W"], ["y"]))
    else:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "H", "W", "C"])
        inits.append(numpy_helper.from_array(np.zeros((4, 3, 1, 1), np.float32), "W"))
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]))
        nodes.append(helper.make_node("Conv", ["xt", "W"], ["y"], group=2))
    g = helper.make_graph(
        nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_implied_sizes_follow_axes_back_to_the_input() -> None:
    assert implied_sizes(_weights_model("lstm")) == {("x", 1): 266}
    # MatMul's K is axis 0 of x after the Transpose
    assert implied_sizes(_weights_model("matmul")) == {("x", 0): 40}
    # grouped Conv: 2 groups x 3 channels, NHWC's C after the Transpose
    assert implied_sizes(_weights_model("conv")) == {("x", 3): 6}
    # and the candidates keep them
    cands = candidate_shapes(_open(_weights_model("lstm")), implied={("x", 1): 266})
    assert all(c["x"][1] == 266 for c in cands)


def test_probe_uses_the_size_the_weights_imply(tmp_path: Path) -> None:
    model = _weights_model("lstm")
    found = probe_shapes(_save(model, tmp_path), model, _open(model))
    assert found.shapes == {"x": (1, 266)} and found.tried == 1
