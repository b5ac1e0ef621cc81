"""A small graph-building helper over ``onnx.helper`` shared by the built-in model builders."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from aaco.errors import UsageError

# onnx 1.23 stamps IR 14, which onnxruntime 1.31 rejects; IR 10 loads in every ORT >= 1.18.
IR_VERSION = 10
OPSET = 17
PRODUCER = "aaco"

FLOAT_DTYPES: dict[str, int] = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}

Dim = int | str

# While set, builders declare weights by shape and type only: enough to count parameters
# (``aaco models list``) without generating and serialising hundreds of MB of random data.
_SHAPES_ONLY: ContextVar[bool] = ContextVar("aaco_models_shapes_only", default=False)


@contextmanager
def shapes_only() -> Iterator[None]:
    """Within this block, built models carry initializer shapes but no weight data."""
    token = _SHAPES_ONLY.set(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.reset(token)


def check_dtype(dtype: str) -> str:
    """Return ``dtype`` if a builder can emit it, else raise a UsageError naming the choices."""
    if not isinstance(dtype, str) or dtype not in FLOAT_DTYPES:
        choices = ", ".join(sorted(FLOAT_DTYPES))
        raise UsageError(f"param 'dtype': {dtype!r} is not supported; use one of: {choices}")
    return dtype


def check_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` as an int if it is one and at least ``minimum``, else raise UsageError."""
    # bool is an int subclass, but `layers: true` in a YAML file is a mistake, not a count.
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"param {name!r}: expected an integer >= {minimum}, got {value!r}")
    return value


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool, else raise UsageError."""
    if not isinstance(value, bool):
        raise UsageError(f"param {name!r}: expected true or false, got {value!r}")
    return value


class GraphBuilder:
    """Accumulates inputs, initializers and uniquely named nodes, then emits a checked model.

    Learned weights become initializers (so they are what ``count_parameters`` counts);
    non-learned constants (shapes, scalars) become ``Constant`` nodes, as an exporter writes
    them, and onnxruntime folds them away at session creation.
    """

    def __init__(self, name: str, *, seed: int = 0, dtype: str = "float32") -> None:
        self.name = name
        self.dtype = check_dtype(dtype)
        check_int("seed", seed, minimum=0)
        self.elem_type = FLOAT_DTYPES[dtype]
        self.np_dtype: np.dtype[np.floating] = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        # Weights go straight into the final proto: copying a 500 MB graph is seconds here.
        self.model = onnx.ModelProto()
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self._node_names: set[str] = set()
        self._value_names: set[str] = set()
        self._constants: dict[tuple[str, bytes, tuple[int, ...]], str] = {}

    # -- graph interface -------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[Dim], elem_type: int | None = None) -> str:
        """Declare a graph input; ``elem_type`` defaults to the model's float type."""
        self._claim_value(name)
        kind = self.elem_type if elem_type is None else elem_type
        self.inputs.append(helper.make_tensor_value_info(name, kind, list(shape)))
        return name

    def output(self, name: str, shape: Sequence[Dim], elem_type: int | None = None) -> None:
        """Declare an existing value as a graph output."""
        kind = self.elem_type if elem_type is None else elem_type
        self.outputs.append(helper.make_tensor_value_info(name, kind, list(shape)))

    # -- weights ---------------------------------------------------------------------------

    def weight(self, name: str, shape: Sequence[int], std: float = 0.02) -> str:
        """Add a zero-mean normal weight initializer of deviation ``std``, in the model's type."""
        if _SHAPES_ONLY.get():
            return self._declare(name, shape)
        data = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        data *= np.float32(std)
        return self.tensor(name, data)

    def he_weight(self, name: str, shape: Sequence[int], fan: int) -> str:
        """Add a Kaiming-normal weight (std sqrt(2/fan)), the torchvision conv initialisation."""
        return self.weight(name, shape, std=math.sqrt(2.0 / fan))

    def filled(self, name: str, shape: Sequence[int], value: float) -> str:
        """Add a constant-valued initializer (a LayerNorm gamma of ones, a bias of zeros)."""
        if _SHAPES_ONLY.get():
            return self._declare(name, shape)
        return self.tensor(name, np.full(tuple(shape), value, dtype=np.float32))

    def tensor(self, name: str, data: npt.NDArray[np.generic]) -> str:
        """Add ``data`` as an initializer; float arrays are cast to the model's float type."""
        self._claim_value(name)
        if np.issubdtype(data.dtype, np.floating):
            data = data.astype(self.np_dtype, copy=False)
        tensor = self.model.graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(data.dtype)
        tensor.dims.extend(data.shape)
        # Native-endian bytes match ONNX's little-endian raw_data on every platform ORT runs on.
        tensor.raw_data = np.ascontiguousarray(data).tobytes()
        return name

    def _declare(self, name: str, shape: Sequence[int]) -> str:
        self._claim_value(name)
        tensor = self.model.graph.initializer.add()
        tensor.name = name
        tensor.data_type = self.elem_type
        tensor.dims.extend(int(d) for d in shape)
        return name

    # -- constants -------------------------------------------------------------------------

    def const(self, values: float | Sequence[float], name: str = "/Constant") -> str:
        """A float constant (scalar or 1-D) in the model's float type, shared by value."""
        array = np.asarray(values, dtype=np.float32).astype(self.np_dtype)
        return self._constant(array, name)

    def const_i64(self, values: int | Sequence[int], name: str = "/Constant") -> str:
        """An int64 constant (scalar or 1-D), e.g. a Reshape target or Unsqueeze axes."""
        return self._constant(np.asarray(values, dtype=np.int64), name)

    def _constant(self, array: npt.NDArray[np.generic], name: str) -> str:
        key = (array.dtype.str, array.tobytes(), tuple(array.shape))
        found = self._constants.get(key)
        if found is not None:
            return found
        value = numpy_helper.from_array(array)
        out = self.node("Constant", [], name, value=value)
        self._constants[key] = out
        return out

    # -- nodes -----------------------------------------------------------------------------

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        *,
        out: str | None = None,
        **attrs: Any,
    ) -> str:
        """Add a single-output node named ``name`` (made unique); return its output's name.

        ``out`` names the output explicitly, for values that are graph outputs.
        """
        outputs = None if out is None else [out]
        return self.node_multi(op_type, inputs, name, 1, outputs=outputs, **attrs)[0]

    def node_multi(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        n_outputs: int,
        *,
        outputs: Sequence[str] | None = None,
        **attrs: Any,
    ) -> list[str]:
        """Add a node with ``n_outputs`` outputs, by default named after the node as torch does."""
        node_name = self._unique_node_name(name)
        if outputs is None:
            outputs = [f"{node_name}_output_{i}" for i in range(n_outputs)]
        elif len(outputs) != n_outputs:
            raise ValueError(f"{node_name}: {n_outputs} outputs expected, got {len(outputs)}")
        for out in outputs:
            self._claim_value(out)
        self.nodes.append(
            helper.make_node(op_type, list(inputs), list(outputs), node_name, **attrs)
        )
        return list(outputs)

    def _unique_node_name(self, name: str) -> str:
        if not name:
            raise ValueError("node names must not be empty")
        candidate, n = name, 0
        while candidate in self._node_names:
            n += 1
            candidate = f"{name}_{n}"
        self._node_names.add(candidate)
        return candidate

    def _claim_value(self, name: str) -> None:
        if name in self._value_names:
            raise ValueError(f"value name {name!r} is defined twice")
        self._value_names.add(name)

    # -- composite helpers shared by several builders ------------------------------------------

    def linear(
        self, x: str, prefix: str, path: str, n_in: int, n_out: int, std: float = 0.02
    ) -> str:
        """MatMul + Add with an [in, out] weight, the way exporters lower ``nn.Linear`` on 3-D x."""
        w = self.weight(f"{prefix}.weight", (n_in, n_out), std=std)
        b = self.weight(f"{prefix}.bias", (n_out,), std=std)
        y = self.node("MatMul", [x, w], f"{path}/MatMul")
        return self.node("Add", [b, y], f"{path}/Add")

    def layer_norm(self, x: str, prefix: str, path: str, size: int, eps: float) -> str:
        """LayerNormalization over the last axis with gamma=1, beta=0 (the usual init)."""
        gamma = self.filled(f"{prefix}.weight", (size,), 1.0)
        beta = self.filled(f"{prefix}.bias", (size,), 0.0)
        return self.node(
            "LayerNormalization",
            [x, gamma, beta],
            f"{path}/LayerNormalization",
            axis=-1,
            epsilon=eps,
        )

    # -- output ----------------------------------------------------------------------------

    def build(self, doc_string: str = "") -> onnx.ModelProto:
        """Stamp IR 10 / opset 17, check the model and return it (the builder is spent after)."""
        model = self.model
        graph = model.graph
        graph.name = self.name
        graph.node.extend(self.nodes)
        graph.input.extend(self.inputs)
        graph.output.extend(self.outputs)
        model.ir_version = IR_VERSION
        model.producer_name = PRODUCER
        model.doc_string = doc_string
        model.opset_import.extend([helper.make_opsetid("", OPSET)])
        check_structure(model)
        return model


def check_structure(model: onnx.ModelProto) -> None:
    """Run the ONNX checker with strict shape inference on a weightless copy of ``model``.

    Weights are declared as graph inputs of the same type and shape instead of carrying their
    bytes: the checker then validates every node, name and shape without serializing hundreds
    of megabytes, and initializer bytes are consistent by construction in ``GraphBuilder``.
    """
    skeleton = onnx.ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    graph = skeleton.graph
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in model.graph.initializer
    )
    graph.output.extend(model.graph.output)
    onnx.checker.check_model(skeleton, full_check=True)
