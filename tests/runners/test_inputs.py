from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco.errors import UsageError
from aaco.runners.inputs import InputSpec, batch_of, make_array, resolve_inputs


def _model(
    inputs: list[onnx.ValueInfoProto],
    extra_nodes: list[onnx.NodeProto] | None = None,
    inits: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    nodes = list(extra_nodes or [])
    outputs = []
    for i, vi in enumerate(inputs):
        nodes.append(helper.make_node("Identity", [vi.name], [f"o{i}"], name=f"id{i}"))
        outputs.append(helper.make_tensor_value_info(f"o{i}", vi.type.tensor_type.elem_type, None))
    g = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _vi(name: str, t: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


def test_symbolic_batch_and_shared_symbols() -> None:
    m = _model(
        [
            _vi("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            _vi("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ]
    )
    specs = resolve_inputs(m, user_shapes={"input_ids": [2, 16]})
    assert [s.shape for s in specs] == [(2, 16), (2, 16)]  # 'sequence' and 'batch' propagate
    assert specs[1].fill == "ones"  # masks attend to everything


def test_unresolved_dim_names_the_input() -> None:
    m = _model([_vi("input_ids", TensorProto.INT64, ["batch", "sequence"])])
    with pytest.raises(
        UsageError, match=r"input 'input_ids': dimension 1 \('sequence'\).*--shape input_ids=1xN"
    ):
        resolve_inputs(m)


def test_batch_fills_leading_symbolic_dim_and_registry_shapes() -> None:
    m = _model([_vi("x", TensorProto.FLOAT, ["N", 3, 8, 8])])
    assert resolve_inputs(m, batch=4)[0].shape == (4, 3, 8, 8)
    assert resolve_inputs(m)[0].shape == (1, 3, 8, 8)
    # a registry shape's leading dim yields to --batch when the model dim is symbolic
    assert resolve_inputs(m, registry_shapes={"x": [1, 3, 8, 8]}, batch=8)[0].shape == (8, 3, 8, 8)


def test_shape_errors() -> None:
    m = _model([_vi("x", TensorProto.FLOAT, ["N", 3])])
    with pytest.raises(UsageError, match="does not have; its inputs are: x"):
        resolve_inputs(m, user_shapes={"y": [1, 3]})
    with pytest.raises(UsageError, match="rank 2 in the model"):
        resolve_inputs(m, user_shapes={"x": [1, 3, 4]})
    with pytest.raises(UsageError, match="fixed at 3"):
        resolve_inputs(m, user_shapes={"x": [1, 4]})
    with pytest.raises(UsageError, match="--batch must be >= 1"):
        resolve_inputs(m, batch=0)


def test_dtypes_and_fills() -> None:
    m = _model(
        [
            _vi("a", TensorProto.FLOAT16, [2, 2]),
            _vi("b", TensorProto.INT32, [2, 2]),
            _vi("c", TensorProto.BOOL, [2, 2]),
            _vi("token_type_ids", TensorProto.INT64, [1, 4]),
            _vi("position_ids", TensorProto.INT64, [1, 4]),
        ]
    )
    specs = {s.name: s for s in resolve_inputs(m)}
    rng = np.random.default_rng(0)
    arrays = {n: make_array(s, rng) for n, s in specs.items()}
    assert arrays["a"].dtype == np.float16
    assert arrays["b"].dtype == np.int32 and arrays["b"].min() >= 0 and arrays["b"].max() < 100
    assert arrays["c"].dtype == np.bool_
    assert not arrays["token_type_ids"].any()
    assert arrays["position_ids"].tolist() == [[0, 1, 2, 3]]


def test_gather_indices_stay_in_table() -> None:
    table = numpy_helper.from_array(np.zeros((7, 4), dtype=np.float32), "emb")
    gather = helper.make_node("Gather", ["emb", "ids"], ["e"], name="gather")
    m = _model([_vi("ids", TensorProto.INT64, [1, 50])], extra_nodes=[gather], inits=[table])
    spec = resolve_inputs(m)[0]
    assert (spec.low, spec.high) == (0, 7)
    arr = make_array(spec, np.random.default_rng(0))
    assert arr.max() < 7
    # an explicit --int-range is the user's word
    assert resolve_inputs(m, int_range=(0, 1000))[0].high == 1000


def test_seeded_inputs_are_reproducible() -> None:
    spec = InputSpec("x", "float32", (3, 3), "normal")
    a = make_array(spec, np.random.default_rng(5))
    b = make_array(spec, np.random.default_rng(5))
    assert np.array_equal(a, b)
    assert InputSpec.from_json(spec.to_json()) == spec
    assert spec.nbytes == 36


def test_batch_of() -> None:
    assert (
        batch_of(
            [
                InputSpec("a", "float32", (4, 3), "normal"),
                InputSpec("b", "int64", (4, 9), "randint"),
            ]
        )
        == 4
    )
    assert (
        batch_of(
            [
                InputSpec("a", "float32", (4, 3), "normal"),
                InputSpec("b", "int64", (2, 9), "randint"),
            ]
        )
        is None
    )
    assert batch_of([InputSpec("a", "float32", (256,), "normal")]) is None


def test_unsupported_dtype() -> None:
    m = _model([_vi("s", TensorProto.STRING, [1])])
    with pytest.raises(UsageError, match="STRING"):
        resolve_inputs(m)


def test_user_shape_symbols_override_registry_shapes() -> None:
    m = _model(
        [
            _vi("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            _vi("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ]
    )
    registry = {"input_ids": [1, 32], "attention_mask": [1, 32]}
    specs = resolve_inputs(m, user_shapes={"input_ids": [1, 64]}, registry_shapes=registry)
    assert [s.shape for s in specs] == [(1, 64), (1, 64)]
    with pytest.raises(UsageError, match="inputs disagree on dimension 'sequence'"):
        resolve_inputs(m, user_shapes={"input_ids": [1, 64], "attention_mask": [1, 32]})


def test_batch_without_effect_is_an_error() -> None:
    fixed = _model([_vi("x", TensorProto.FLOAT, [1, 4])])
    with pytest.raises(UsageError, match="--batch 8 has no effect"):
        resolve_inputs(fixed, batch=8)
    sym = _model([_vi("x", TensorProto.FLOAT, ["N", 4])])
    with pytest.raises(UsageError, match="--batch 8 has no effect"):
        resolve_inputs(sym, user_shapes={"x": [2, 4]}, batch=8)
    # agreeing with the user's shapes is fine
    two = _model([_vi("a", TensorProto.FLOAT, ["N", 4]), _vi("b", TensorProto.FLOAT, ["N", 4])])
    specs = resolve_inputs(two, user_shapes={"a": [2, 4]}, batch=2)
    assert [s.shape for s in specs] == [(2, 4), (2, 4)]


def test_zero_size_dimension_is_a_fixed_dimension() -> None:
    m = _model([_vi("past", TensorProto.FLOAT, [1, 2, 0, 8])])
    assert resolve_inputs(m)[0].shape == (1, 2, 0, 8)
