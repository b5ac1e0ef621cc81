"""Shape probing for the open-dimension hint: candidates, the command line, real runs."""

from __future__ import annotations

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
    SEQUENCE_LENGTH,
    candidate_shapes,
    hint_command,
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
    assert [c["x"][2] for c in cands[1:]] == [s for s in FALLBACK_SIZES if s != IMAGE_SIDE]
    assert all(c["x"][2] == c["x"][3] for c in cands)


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
    assert found.shapes is None and found.tried == len(candidate_shapes(exc))
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
