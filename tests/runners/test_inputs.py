from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco.errors import UsageError
from aaco.runners.inputs import (
    InputSpec,
    UnresolvedShapes,
    batch_of,
    feed_value,
    make_array,
    resolve_inputs,
)


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
    m = _model([_vi("s", TensorProto.INT4, [2])])
    with pytest.raises(UsageError, match="INT4"):
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
    # two inputs the user sized differently: the symbol is not unified (no error here;
    # ONNX Runtime says so at run time if the model needs them equal)
    specs = resolve_inputs(m, user_shapes={"input_ids": [1, 64], "attention_mask": [1, 32]})
    assert [s.shape for s in specs] == [(1, 64), (1, 32)]


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


# --- models as other exporters write them ------------------------------------------------


def _dim_model(dims: list[tuple[str, int | str]]) -> onnx.ModelProto:
    """One float input whose dims are given raw: ("value", -1) or ("param", "?")."""
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    shape = vi.type.tensor_type.shape
    for kind, v in dims:
        d = shape.dim.add()
        if kind == "value":
            d.dim_value = int(v)
        else:
            d.dim_param = str(v)
    return _model([vi])


def test_negative_dim_value_is_dynamic_like_onnxruntime() -> None:
    # Paddle2ONNX: x [-1, 3, "?", "?"]
    m = _dim_model([("value", -1), ("value", 3), ("param", "?"), ("param", "?")])
    # the leading -1 takes the batch; "?" is nameless: height and width are not unified
    specs = resolve_inputs(m, user_shapes={"x": [1, 3, 48, 192]})
    assert specs[0].shape == (1, 3, 48, 192)
    assert resolve_inputs(m, user_shapes={"x": [4, 3, 48, 192]})[0].shape == (4, 3, 48, 192)
    assert resolve_inputs(m, user_shapes={"x": [-1, 3, 48, 192]}, batch=2)[0].shape == (
        2,
        3,
        48,
        192,
    )


def test_open_dims_are_all_listed() -> None:
    m = _dim_model([("value", -1), ("value", 3), ("param", "?"), ("param", "?")])
    with pytest.raises(UnresolvedShapes) as info:
        resolve_inputs(m)
    exc = info.value
    assert [(o.input, o.axis, o.symbol) for o in exc.open_dims] == [("x", 2, None), ("x", 3, None)]
    assert exc.partial == {"x": [1, 3, None, None]}
    assert "--shape x=1x3xNxN" in str(exc) and "-1" not in str(exc)


def test_fixed_dimension_still_checked_and_minus_one_keeps_it() -> None:
    m = _dim_model([("param", "N"), ("value", 3)])
    with pytest.raises(UsageError, match="fixed at 3"):
        resolve_inputs(m, user_shapes={"x": [1, 4]})
    assert resolve_inputs(m, user_shapes={"x": [2, -1]})[0].shape == (2, 3)


def test_symbol_given_two_values_fills_nothing() -> None:
    a = _vi("a", TensorProto.FLOAT, ["B", "S"])
    b = _vi("b", TensorProto.FLOAT, ["B", "S"])
    c = _vi("c", TensorProto.FLOAT, ["B", "S"])
    m = _model([a, b, c])
    # a and b disagree on S: c's S cannot be taken from either
    with pytest.raises(UnresolvedShapes) as info:
        resolve_inputs(m, user_shapes={"a": [1, 8], "b": [1, 16]})
    assert [(o.input, o.axis, o.symbol) for o in info.value.open_dims] == [("c", 1, "S")]
    specs = resolve_inputs(m, user_shapes={"a": [1, 8], "b": [1, 16], "c": [1, 4]})
    assert [s.shape for s in specs] == [(1, 8), (1, 16), (1, 4)]


def test_scalar_input_and_constant_value() -> None:
    m = _model([_vi("sr", TensorProto.INT64, []), _vi("x", TensorProto.FLOAT, [1, 4])])
    specs = {s.name: s for s in resolve_inputs(m, values={"sr": "16000"})}
    assert specs["sr"].shape == () and specs["sr"].fill == "const"
    arr = make_array(specs["sr"], np.random.default_rng(0))
    assert arr.dtype == np.int64 and arr.shape == () and int(arr) == 16000
    assert InputSpec.from_json(specs["sr"].to_json()) == specs["sr"]
    with pytest.raises(UsageError, match="not a value of its type"):
        resolve_inputs(m, values={"sr": "0.5"})
    with pytest.raises(UsageError, match="--input names input 'nope'"):
        resolve_inputs(m, values={"nope": "1"})


def test_input_from_npy_file(tmp_path: Path) -> None:
    m = _model([_vi("x", TensorProto.FLOAT, ["N", "T"])])
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tmp_path / "x.npy"
    np.save(f, data)
    spec = resolve_inputs(m, values={"x": str(f)})[0]
    assert spec.shape == (3, 4) and spec.fill == "file"
    assert np.array_equal(make_array(spec, np.random.default_rng(0)), data)
    with pytest.raises(UsageError, match="holds int64 values"):
        np.save(tmp_path / "i.npy", np.zeros((3, 4), dtype=np.int64))
        resolve_inputs(m, values={"x": str(tmp_path / "i.npy")})
    with pytest.raises(UsageError, match="no such file"):
        resolve_inputs(m, values={"x": str(tmp_path / "missing.npy")})
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(UsageError, match=r"not a \.npy array"):
        resolve_inputs(m, values={"x": str(tmp_path / "bad.npy")})


def test_string_inputs_are_random_words() -> None:
    m = _model([_vi("text", TensorProto.STRING, [2, 3])])
    spec = resolve_inputs(m)[0]
    arr = make_array(spec, np.random.default_rng(0))
    assert arr.shape == (2, 3) and arr.dtype == object
    assert all(isinstance(w, str) and w.isalpha() and len(w) == 8 for w in arr.ravel())


def test_sequence_and_map_inputs_are_clear_errors() -> None:
    seq = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, None)
    g = helper.make_graph(
        [helper.make_node("SequenceLength", ["xs"], ["n"])],
        "g",
        [seq],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with pytest.raises(UsageError, match=r"'xs' is a seq\(tensor\(float\)\), not a tensor"):
        resolve_inputs(m)


def test_optional_tensor_input_is_fed_as_a_tensor() -> None:
    opt = helper.make_value_info(
        "o",
        helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 2])),
    )
    m = helper.make_model(
        helper.make_graph(
            [helper.make_node("OptionalHasElement", ["o"], ["has"])],
            "g",
            [opt],
            [helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
        ir_version=9,
    )
    spec = resolve_inputs(m)[0]
    assert (spec.name, spec.dtype, spec.shape) == ("o", "float32", (2, 2))


def test_initializer_defaults_need_no_feeding() -> None:
    # IR >= 4: an input with an initializer of the same name has a default value
    default = numpy_helper.from_array(np.ones((2,), dtype=np.float32), "bias")
    x = _vi("x", TensorProto.FLOAT, [2])
    bias = _vi("bias", TensorProto.FLOAT, [2])
    add = helper.make_node("Add", ["x", "bias"], ["y"])
    g = helper.make_graph(
        [add],
        "g",
        [x, bias],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [default],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert [s.name for s in resolve_inputs(m)] == ["x"]


@pytest.mark.parametrize(
    ("elem", "name"),
    [
        (TensorProto.BFLOAT16, "bfloat16"),
        (TensorProto.FLOAT8E4M3FN, "float8e4m3fn"),
        (TensorProto.FLOAT8E4M3FNUZ, "float8e4m3fnuz"),
        (TensorProto.FLOAT8E5M2, "float8e5m2"),
        (TensorProto.FLOAT8E5M2FNUZ, "float8e5m2fnuz"),
    ],
)
def test_bfloat16_and_float8_inputs_run_in_onnxruntime(elem: int, name: str) -> None:
    """numpy has no such dtypes: the values go to ONNX Runtime as bit patterns in an
    OrtValue of the ONNX type, and a Cast to float32 gives them back."""
    import onnxruntime as ort

    x = _vi("x", elem, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g",
                          [x], [y])  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for fill, value in (("ones", 1.0), ("const", 0.5), ("zeros", 0.0)):
        spec = InputSpec("x", name, (3, 4), fill, value=value if fill == "const" else None)
        assert spec.dtype == resolve_inputs(m)[0].dtype == name
        arr = make_array(spec, np.random.default_rng(0))
        (out,) = sess.run(None, {"x": feed_value(spec, arr)})
        assert np.all(out == value), (fill, out)
    normal = resolve_inputs(m)[0]
    (out,) = sess.run(None, {"x": feed_value(normal, make_array(normal, np.random.default_rng(1)))})
    ref = np.random.default_rng(1).standard_normal((3, 4), dtype=np.float32)
    # the nearest code: within the type's relative precision (3 / 2 / 7 mantissa bits)
    tol = {"bfloat16": 2**-8, "float8e5m2": 2**-2, "float8e5m2fnuz": 2**-2}.get(name, 2**-3)
    assert np.all(np.isfinite(out)) and np.allclose(out, ref, rtol=tol, atol=2**-6)


def test_rank0_inputs_are_arrays() -> None:
    for dtype, fill in (("bool", "bool"), ("int64", "randint"), ("float32", "normal"),
                        ("int64", "arange"), ("float32", "ones")):  # fmt: skip
        arr = make_array(InputSpec("c", dtype, (), fill, 0, 5), np.random.default_rng(0))
        assert isinstance(arr, np.ndarray) and arr.shape == () and arr.dtype == np.dtype(dtype)


def test_shape_like_integer_inputs_are_valid_values() -> None:
    """An integer input that an operator takes as axes or sizes gets zeros (ones for Tile),
    not random values that would almost never be valid; a real ONNX Runtime run accepts
    them."""
    import onnxruntime as ort

    data = _vi("data", TensorProto.FLOAT, [2, 0, 4])
    axes = _vi("axes", TensorProto.INT64, [1])
    split = _vi("split", TensorProto.INT64, [3])
    reps = _vi("reps", TensorProto.INT64, [3])
    nodes = [
        helper.make_node("ReduceSum", ["data", "axes"], ["r"], keepdims=1),
        helper.make_node("Split", ["data", "split"], ["s0", "s1", "s2"], axis=1),
        helper.make_node("Tile", ["data", "reps"], ["t"]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("r", "s0", "s1", "s2", "t")]  # fmt: skip
    g = helper.make_graph(nodes, "g", [data, axes, split, reps], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    specs = {s.name: s for s in resolve_inputs(m)}
    assert (specs["axes"].fill, specs["split"].fill, specs["reps"].fill) == (
        "zeros",
        "zeros",
        "ones",
    )
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    sess.run(None, {n: make_array(s, rng) for n, s in specs.items()})
    # the user's range is their word
    assert resolve_inputs(m, int_range=(1, 3))[1].fill == "randint"
