"""Concrete, seeded input tensors for every model input: shapes resolved, dtypes right.

Shape resolution happens in the parent from the ONNX graph (so a bad ``--shape`` is a usage
error before any worker starts); the worker turns each :class:`InputSpec` into an array.

Resolution order for each input, dimension by dimension:
  1. ``--shape NAME=...`` given by the user;
  2. the registry entry's ``input_shapes``;
  3. the model's fixed dimension;
  4. a symbolic dimension already resolved elsewhere under the same name (``sequence``);
  5. a leading symbolic dimension takes ``--batch`` (1 when not given).
``--batch`` also replaces the leading dimension of registry shapes whose model dimension is
symbolic. Any dimension still unknown is an error naming the input and the dimension.

Values: floats ~ N(0, 1); integers uniform in ``--int-range`` (default ``[0, 100)``, capped
by the size of the table when the input directly indexes a Gather, so token ids stay in
vocabulary); inputs named like ``*mask*`` are all ones (attend to every token),
``*token_type*``/``*segment*`` all zeros, ``*position*`` ``0..n-1`` along the last axis;
bools are all True for masks, else fair coin flips.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from aaco.errors import UsageError

DEFAULT_INT_RANGE = (0, 100)

_NUMPY_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.BOOL: "bool",
}


@dataclass(frozen=True)
class InputSpec:
    """What the worker needs to build one input tensor."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    fill: str  # normal | randint | ones | zeros | arange | bool
    low: int = 0
    high: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "fill": self.fill,
            "low": self.low,
            "high": self.high,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InputSpec:
        return cls(
            name=str(d["name"]),
            dtype=str(d["dtype"]),
            shape=tuple(int(x) for x in d["shape"]),
            fill=str(d["fill"]),
            low=int(d.get("low", 0)),
            high=int(d.get("high", 1)),
        )

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ModelInput:
    """A graph input as the model declares it."""

    name: str
    elem_type: int
    dims: tuple[int | str | None, ...] | None  # None when the rank itself is unknown


def model_inputs(model: onnx.ModelProto) -> list[ModelInput]:
    """Graph inputs that need feeding (initializers listed as inputs are skipped)."""
    inits = {i.name for i in model.graph.initializer}
    out: list[ModelInput] = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UsageError(f"input {vi.name!r} is not a tensor; AACO feeds tensor inputs only")
        dims: tuple[int | str | None, ...] | None = None
        if tt.HasField("shape"):
            dims = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim
            )
        out.append(ModelInput(vi.name, tt.elem_type, dims))
    return out


def _gather_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """For inputs used directly as Gather indices into an initializer: the table size."""
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[0] not in inits:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        dims = inits[node.input[0]]
        if -len(dims) <= axis < len(dims):
            size = int(dims[axis])
            name = node.input[1]
            bounds[name] = min(bounds.get(name, size), size)
    return bounds


def _fill_for(name: str, dtype: str) -> str:
    lname = name.lower()
    if dtype == "bool":
        return "ones" if "mask" in lname else "bool"
    if dtype.startswith("float"):
        return "normal"
    if "mask" in lname:
        return "ones"
    if re.search(r"token_?type|segment", lname):
        return "zeros"
    if "position" in lname:
        return "arange"
    return "randint"


def resolve_inputs(
    model: onnx.ModelProto,
    user_shapes: Mapping[str, Sequence[int]] | None = None,
    registry_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    int_range: tuple[int, int] | None = None,
) -> list[InputSpec]:
    """Resolve every input's concrete shape and value recipe (see the module docstring)."""
    inputs = model_inputs(model)
    names = [i.name for i in inputs]
    user_shapes = dict(user_shapes or {})
    registry_shapes = dict(registry_shapes or {})
    for name in user_shapes:
        if name not in names:
            raise UsageError(
                f"--shape names input {name!r}, which the model does not have; "
                f"its inputs are: {', '.join(names) or '(none)'}"
            )
    if batch is not None and batch < 1:
        raise UsageError(f"--batch must be >= 1, got {batch}")

    symbols: dict[str, int] = {}
    resolved: dict[str, list[int | None]] = {}
    batch_used = False
    # The user's --shape values go first, so the symbolic dims they fix (a longer sequence)
    # also override the registry's shapes of the other inputs.
    for inp in sorted(inputs, key=lambda i: i.name not in user_shapes):
        given = user_shapes.get(inp.name)
        from_registry = False
        if given is None and inp.name in registry_shapes:
            given = registry_shapes[inp.name]
            from_registry = True
        dims = inp.dims
        if given is None:
            if dims is None:
                raise UsageError(
                    f"input {inp.name!r} has no shape in the model: give --shape {inp.name}=..."
                )
            resolved[inp.name] = [d if isinstance(d, int) else None for d in dims]
            continue
        if dims is not None and len(dims) != len(given):
            raise UsageError(
                f"input {inp.name!r} has rank {len(dims)} in the model but the shape given "
                f"has rank {len(given)}: {list(given)}"
            )
        shape: list[int | None] = list(given)
        for axis, want in enumerate(dims or ()):
            got = shape[axis]
            if isinstance(want, int) and want != got:
                raise UsageError(
                    f"input {inp.name!r}: dimension {axis} is fixed at {want} in the "
                    f"model, the shape given says {got}"
                )
            if isinstance(want, str):
                if from_registry and want in symbols:
                    shape[axis] = symbols[want]
                elif from_registry and axis == 0 and batch is not None:
                    shape[0] = batch
                    batch_used = True
                symbols.setdefault(want, int(shape[axis] or 0))
        resolved[inp.name] = shape

    for inp in inputs:
        shape = resolved[inp.name]
        dims = inp.dims or ()
        for axis, value in enumerate(shape):
            if value is not None:
                continue
            sym = dims[axis] if axis < len(dims) else None
            if isinstance(sym, str) and sym in symbols:
                shape[axis] = symbols[sym]
            elif axis == 0:
                leading = batch if batch is not None else 1
                batch_used = batch_used or batch is not None
                shape[0] = leading
                if isinstance(sym, str):
                    symbols[sym] = leading
            else:
                label = f" ({sym!r})" if isinstance(sym, str) else ""
                example = "x".join(str(s) if s is not None else "N" for s in shape)
                raise UsageError(
                    f"input {inp.name!r}: dimension {axis}{label} is not fixed by the model; "
                    f"give --shape {inp.name}={example}"
                )
    # --batch must show up somewhere: in a symbolic leading dimension it filled, or one that
    # the user's shapes already set to the same value.
    batch_used = batch_used or any(
        inp.dims and isinstance(inp.dims[0], str) and resolved[inp.name][0] == batch
        for inp in inputs
    )
    if batch is not None and not batch_used:
        raise UsageError(
            f"--batch {batch} has no effect: no input has a symbolic leading dimension left to "
            "fill (the model or --shape fixes them); give the shapes with --shape"
        )
    _check_symbols_agree(inputs, resolved)

    bounds = _gather_bounds(model)
    lo_default, hi_default = int_range or DEFAULT_INT_RANGE
    specs: list[InputSpec] = []
    for inp in inputs:
        dtype = _NUMPY_DTYPES.get(inp.elem_type)
        if dtype is None:
            type_name = onnx.TensorProto.DataType.Name(inp.elem_type)
            raise UsageError(
                f"input {inp.name!r} has element type {type_name}, which AACO cannot generate"
            )
        fill = _fill_for(inp.name, dtype)
        lo, hi = lo_default, hi_default
        if fill == "randint" and int_range is None and inp.name in bounds:
            hi = max(lo + 1, min(hi, bounds[inp.name]))
        if fill == "randint":
            info = np.iinfo(np.dtype(dtype))
            if lo < info.min or hi - 1 > info.max:
                raise UsageError(f"--int-range {lo}:{hi} does not fit input {inp.name!r} ({dtype})")
        shape_final = tuple(int(d) for d in resolved[inp.name] if d is not None)
        specs.append(InputSpec(inp.name, dtype, shape_final, fill, lo, hi))
    return specs


def _check_symbols_agree(
    inputs: Sequence[ModelInput], resolved: Mapping[str, list[int | None]]
) -> None:
    """Inputs sharing a symbolic dimension (``sequence``) must agree on its value."""
    seen: dict[str, tuple[str, int | None]] = {}
    for inp in inputs:
        for axis, sym in enumerate(inp.dims or ()):
            if not isinstance(sym, str):
                continue
            value = resolved[inp.name][axis]
            if sym in seen and seen[sym][1] != value:
                other, other_value = seen[sym]
                raise UsageError(
                    f"inputs disagree on dimension {sym!r}: {other} has {other_value}, "
                    f"{inp.name} has {value}; give matching --shape values"
                )
            seen.setdefault(sym, (inp.name, value))


def make_array(spec: InputSpec, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Build the tensor for one input (worker side)."""
    dtype = np.dtype(spec.dtype)
    shape = spec.shape
    if spec.fill == "normal":
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)
    if spec.fill == "ones":
        return np.ones(shape, dtype=dtype)
    if spec.fill == "zeros":
        return np.zeros(shape, dtype=dtype)
    if spec.fill == "bool":
        return rng.random(shape) < 0.5
    if spec.fill == "arange":
        n = shape[-1] if shape else 1
        ramp: np.ndarray[Any, Any] = np.broadcast_to(np.arange(n, dtype=dtype), shape).copy()
        return ramp
    out: np.ndarray[Any, Any] = rng.integers(spec.low, spec.high, size=shape, dtype=dtype)
    return out


def batch_of(specs: Sequence[InputSpec]) -> int | None:
    """The batch size read off the inputs: their common leading dimension, when every input
    has rank >= 2 and they agree on it; None (unknown) otherwise, e.g. for a rank-1 input
    whose leading dimension is a feature count, not a batch."""
    if not specs or any(len(s.shape) < 2 for s in specs):
        return None
    leading = {s.shape[0] for s in specs}
    return leading.pop() if len(leading) == 1 else None
