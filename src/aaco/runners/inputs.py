"""Concrete, seeded input tensors for every model input: shapes resolved, dtypes right.

Shape resolution happens in the parent from the ONNX graph (so a bad ``--shape`` is a usage
error before any worker starts); the worker turns each :class:`InputSpec` into an array.

How the model's declared dimensions are read (as ONNX Runtime reads them): a non-negative
``dim_value`` is fixed; a negative ``dim_value`` (Paddle2ONNX writes ``-1``), an empty
``dim_param`` and the anonymous ``dim_param`` ``"?"`` are dynamic and nameless; any other
``dim_param`` is a named symbol.

Resolution order for each input, dimension by dimension:
  1. ``--shape NAME=...`` given by the user (``-1`` in it leaves that dimension open);
  2. the registry entry's ``input_shapes``;
  3. the model's fixed dimension;
  4. a named symbol already resolved elsewhere to exactly one value (``sequence``); a symbol
     given different values (a model that names height and width alike, or two inputs the
     user sized differently) is not unified and fills nothing;
  5. a leading dynamic dimension takes ``--batch`` (1 when not given).
``--batch`` also replaces the leading dimension of registry shapes whose model dimension is
symbolic. Dimensions still open raise :class:`UnresolvedShapes` (a :class:`UsageError`) that
lists every one of them; ``aaco run`` then looks for shapes the model runs with
(:mod:`aaco.runners.probe`) and puts them into its error's command line.

Values: floats ~ N(0, 1); integers uniform in ``--int-range`` (default ``[0, 100)``, capped
by the size of the table when the input directly indexes a Gather, so token ids stay in
vocabulary); integer inputs that an operator takes as a shape, axes, sizes or counts
(Reshape's shape, Slice's starts, Split's split...) are zeros, ones for Tile, Expand and
OneHot (``--int-range`` or ``--input`` overrides); inputs named like ``*mask*`` are all
ones (attend to every token), ``*token_type*``/``*segment*`` all zeros, ``*position*``
``0..n-1`` along the last axis; bools are all True for masks, else fair coin flips;
strings are random lower-case words.
``--input NAME=NUMBER`` fills an input with that constant, ``--input NAME=FILE.npy`` feeds
the array saved in the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from aaco.errors import InputError, UsageError

DEFAULT_INT_RANGE = (0, 100)
#: dim_param values that name nothing: every such dimension is its own unknown
ANONYMOUS_DIMS = frozenset({"", "?"})
#: size of a string input's words (random lower-case letters)
_WORD_LETTERS = 8

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
    onnx.TensorProto.STRING: "str",
}


@dataclass(frozen=True)
class InputSpec:
    """What the worker needs to build one input tensor.

    ``fill``: normal | randint | ones | zeros | arange | bool | text | const (every element
    ``value``) | file (the array saved at ``path``, shape and dtype as recorded here).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    fill: str
    low: int = 0
    high: int = 1
    value: float | None = None
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "fill": self.fill,
            "low": self.low,
            "high": self.high,
        }
        if self.value is not None:
            d["value"] = self.value
        if self.path is not None:
            d["path"] = self.path
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InputSpec:
        value = d.get("value")
        path = d.get("path")
        return cls(
            name=str(d["name"]),
            dtype=str(d["dtype"]),
            shape=tuple(int(x) for x in d["shape"]),
            fill=str(d["fill"]),
            low=int(d.get("low", 0)),
            high=int(d.get("high", 1)),
            value=float(value) if value is not None else None,
            path=str(path) if path is not None else None,
        )

    @property
    def nbytes(self) -> int:
        n = int(np.prod(self.shape, dtype=np.int64))
        if self.dtype == "str":
            return n * (_WORD_LETTERS + 1)
        if self.dtype in _BIT_TYPES:
            return n * (2 if self.dtype == "bfloat16" else 1)
        return n * np.dtype(self.dtype).itemsize


Dim = int | str | None


@dataclass(frozen=True)
class ModelInput:
    """A graph input as the model declares it (dims: int fixed, str named symbol, None
    dynamic without a usable name; ``dims`` None when the rank itself is unknown)."""

    name: str
    elem_type: int
    dims: tuple[Dim, ...] | None


def read_dim(d: onnx.TensorShapeProto.Dimension) -> Dim:
    """One declared dimension, read as ONNX Runtime reads it (see the module docstring)."""
    if d.HasField("dim_value"):
        return int(d.dim_value) if d.dim_value >= 0 else None
    param = d.dim_param.strip()
    return None if param in ANONYMOUS_DIMS else param


def describe_type(t: onnx.TypeProto) -> str:
    """``tensor(float)``, ``seq(tensor(int64))``, ``map(string,tensor(float))``..."""
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(t, kind)
        elem = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type else "?"
        return f"{'sparse_' if kind == 'sparse_tensor_type' else ''}tensor({elem})"
    if kind == "sequence_type":
        return f"seq({describe_type(t.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({describe_type(t.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(t.map_type.key_type).lower()
        return f"map({key},{describe_type(t.map_type.value_type)})"
    return kind or "unknown type"


def model_inputs(model: onnx.ModelProto) -> list[ModelInput]:
    """Graph inputs that need feeding (initializers listed as inputs are skipped: they have a
    default value). ``optional(tensor)`` inputs are fed as tensors; sequence, map and sparse
    inputs raise :class:`UsageError`, since AACO generates tensors only."""
    inits = {i.name for i in model.graph.initializer}
    inits |= {i.values.name for i in model.graph.sparse_initializer}
    out: list[ModelInput] = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type
        if t.WhichOneof("value") == "optional_type" and t.optional_type.elem_type.HasField(
            "tensor_type"
        ):
            t = t.optional_type.elem_type
        if t.WhichOneof("value") != "tensor_type":
            raise UsageError(
                f"input {vi.name!r} is a {describe_type(vi.type)}, not a tensor: AACO generates "
                "tensor inputs only, so it cannot run this model"
            )
        tt = t.tensor_type
        dims: tuple[Dim, ...] | None = None
        if tt.HasField("shape"):
            dims = tuple(read_dim(d) for d in tt.shape.dim)
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


# Operator inputs that give a shape, axes, sizes or counts: random integers there are
# almost never valid. Zeros are (axis 0, empty slices and splits of empty axes, "copy this
# dimension" in Reshape, no padding); Tile and Expand take ones (repeat once, broadcast).
_SHAPE_SLOTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Squeeze": (1,),
    "Unsqueeze": (1,), "Slice": (1, 2, 3, 4), "Split": (1,), "Pad": (1, 3), "TopK": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "Resize": (3,), "Upsample": (1,),
    "OneHot": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2),
}  # fmt: skip
_ONES_SLOTS = frozenset({("Tile", 1), ("Expand", 1), ("OneHot", 1)})


def _shape_inputs(model: onnx.ModelProto) -> dict[str, str]:
    """Graph inputs used directly as a shape-like operand: input name -> fill."""
    fills: dict[str, str] = {}
    for node in model.graph.node:
        for slot in _SHAPE_SLOTS.get(node.op_type, ()):
            if slot < len(node.input) and node.input[slot]:
                fill = "ones" if (node.op_type, slot) in _ONES_SLOTS else "zeros"
                fills.setdefault(node.input[slot], fill)
    return fills


def _fill_for(name: str, dtype: str) -> str:
    lname = name.lower()
    if dtype == "str":
        return "text"
    if dtype == "bool":
        return "ones" if "mask" in lname else "bool"
    if _is_float(dtype):
        return "normal"
    if "mask" in lname:
        return "ones"
    if re.search(r"token_?type|segment", lname):
        return "zeros"
    if "position" in lname:
        return "arange"
    return "randint"


@dataclass(frozen=True)
class OpenDim:
    """A dimension that nothing fixed: ``symbol`` is its name in the model, when it has one."""

    input: str
    axis: int
    symbol: str | None


class UnresolvedShapes(UsageError):
    """Dimensions of some inputs are fixed neither by the model nor by the options.

    ``partial``: every input's shape with the open dimensions as None; ``open_dims``: each
    open dimension (input, axis, symbol); ``declared``: the inputs as declared;
    ``default_leading``: inputs whose leading dimension took the default batch of 1 (the
    model may use that axis for something else, a sequence of frames).
    """

    def __init__(
        self,
        message: str,
        partial: dict[str, list[int | None]],
        open_dims: list[OpenDim],
        declared: list[ModelInput],
        default_leading: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.open_dims = open_dims
        self.declared = declared
        self.default_leading = list(default_leading or [])


@dataclass
class _Symbols:
    """The values each named symbol was given: one value fills, several fill nothing."""

    values: dict[str, set[int]] = field(default_factory=dict)

    def add(self, sym: str, value: int | None) -> None:
        if value is not None:
            self.values.setdefault(sym, set()).add(int(value))

    def get(self, sym: str) -> int | None:
        v = self.values.get(sym)
        return next(iter(v)) if v is not None and len(v) == 1 else None


def resolve_inputs(
    model: onnx.ModelProto,
    user_shapes: Mapping[str, Sequence[int]] | None = None,
    registry_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    int_range: tuple[int, int] | None = None,
    values: Mapping[str, str] | None = None,
) -> list[InputSpec]:
    """Resolve every input's concrete shape and value recipe (see the module docstring).

    ``values``: ``--input NAME=NUMBER|FILE.npy`` (a constant fill, or an array file whose
    shape takes the place of a ``--shape``).
    """
    inputs = model_inputs(model)
    names = [i.name for i in inputs]
    user_shapes = {k: list(v) for k, v in (user_shapes or {}).items()}
    registry_shapes = dict(registry_shapes or {})
    values = dict(values or {})
    for option, named in (("--shape", list(user_shapes)), ("--input", list(values))):
        for name in named:
            if name not in names:
                raise UsageError(
                    f"{option} names input {name!r}, which the model does not have; "
                    f"its inputs are: {', '.join(names) or '(none)'}"
                )
    if batch is not None and batch < 1:
        raise UsageError(f"--batch must be >= 1, got {batch}")
    arrays = {n: _load_array(n, v) for n, v in values.items() if _is_file_value(v)}
    for name, arr in arrays.items():
        if name in user_shapes and list(arr.shape) != user_shapes[name]:
            raise UsageError(
                f"--input {name} holds an array of shape {list(arr.shape)}, --shape says "
                f"{user_shapes[name]}; give one of them"
            )
        user_shapes[name] = list(arr.shape)

    symbols = _Symbols()
    resolved: dict[str, list[int | None]] = {}
    batch_used = False
    # The user's --shape values go first, so the symbolic dims they fix (a longer sequence)
    # also override the registry's shapes of the other inputs.
    for inp in sorted(inputs, key=lambda i: i.name not in user_shapes):
        given: Sequence[int] | None = user_shapes.get(inp.name)
        from_registry = False
        if given is None and inp.name in registry_shapes:
            given = registry_shapes[inp.name]
            from_registry = True
        dims = inp.dims
        if given is None:
            if dims is None:
                raise UsageError(
                    f"input {inp.name!r} has no shape in the model (its rank is unknown): "
                    f"give --shape {inp.name}=... with every dimension"
                )
            resolved[inp.name] = [d if isinstance(d, int) else None for d in dims]
            continue
        if dims is not None and len(dims) != len(given):
            raise UsageError(
                f"input {inp.name!r} has rank {len(dims)} in the model but the shape given "
                f"has rank {len(given)}: {_shape_text(given)}"
            )
        # -1 in --shape leaves the dimension open, as the model's own -1 does
        shape: list[int | None] = [int(d) if d >= 0 else None for d in given]
        for axis, want in enumerate(dims or ()):
            got = shape[axis]
            if isinstance(want, int) and got is not None and want != got:
                raise UsageError(
                    f"input {inp.name!r}: dimension {axis} is fixed at {want} in the "
                    f"model, the shape given says {got}"
                )
            if isinstance(want, int):
                shape[axis] = want
            elif isinstance(want, str):
                if from_registry and symbols.get(want) is not None:
                    shape[axis] = symbols.get(want)
                elif from_registry and axis == 0 and batch is not None:
                    shape[0] = batch
                    batch_used = True
                symbols.add(want, shape[axis])
        resolved[inp.name] = shape

    open_dims: list[OpenDim] = []
    defaulted: list[str] = []
    for inp in inputs:
        shape = resolved[inp.name]
        dims = inp.dims or ()
        for axis, value in enumerate(shape):
            if value is not None:
                continue
            sym = dims[axis] if axis < len(dims) else None
            sym = sym if isinstance(sym, str) else None
            known = symbols.get(sym) if sym is not None else None
            if known is not None:
                shape[axis] = known
            elif axis == 0:
                leading = batch if batch is not None else 1
                batch_used = batch_used or batch is not None
                shape[0] = leading
                if batch is None:
                    defaulted.append(inp.name)
                if sym is not None:
                    symbols.add(sym, leading)
            else:
                open_dims.append(OpenDim(inp.name, axis, sym))
    if open_dims:
        # a symbol resolved after its first open use (a later input's batch) fills it now
        still = []
        for od in open_dims:
            known = symbols.get(od.symbol) if od.symbol is not None else None
            if known is not None:
                resolved[od.input][od.axis] = known
            else:
                still.append(od)
        open_dims = still
    if open_dims:
        raise UnresolvedShapes(
            _open_message(open_dims, resolved), resolved, open_dims, inputs, defaulted
        )
    # --batch must show up somewhere: in a symbolic leading dimension it filled, or one that
    # the user's shapes already set to the same value.
    batch_used = batch_used or any(
        inp.dims and not isinstance(inp.dims[0], int) and resolved[inp.name][0] == batch
        for inp in inputs
    )
    if batch is not None and not batch_used:
        raise UsageError(
            f"--batch {batch} has no effect: no input has a symbolic leading dimension left to "
            "fill (the model or --shape fixes them); give the shapes with --shape"
        )
    concrete = {n: tuple(int(d) for d in s if d is not None) for n, s in resolved.items()}
    return build_specs(model, inputs, concrete, int_range, values, arrays)


def build_specs(
    model: onnx.ModelProto,
    inputs: Sequence[ModelInput],
    shapes: Mapping[str, tuple[int, ...]],
    int_range: tuple[int, int] | None = None,
    values: Mapping[str, str] | None = None,
    arrays: Mapping[str, np.ndarray[Any, Any]] | None = None,
) -> list[InputSpec]:
    """The value recipe of every input, at the given concrete shapes."""
    values = values or {}
    arrays = arrays or {}
    bounds = _gather_bounds(model)
    shape_like = _shape_inputs(model)
    lo_default, hi_default = int_range or DEFAULT_INT_RANGE
    specs: list[InputSpec] = []
    for inp in inputs:
        dtype = _NUMPY_DTYPES.get(inp.elem_type)
        if dtype is None:
            try:
                type_name = onnx.TensorProto.DataType.Name(inp.elem_type)
            except ValueError:  # a number no ONNX version defines
                type_name = f"{inp.elem_type} (not an ONNX element type)"
            raise UsageError(
                f"input {inp.name!r} has element type {type_name}, which AACO cannot generate"
            )
        shape = shapes[inp.name]
        if inp.name in arrays:
            arr = arrays[inp.name]
            want = "f" if _is_float(dtype) else "OU" if dtype == "str" else np.dtype(dtype).kind
            if arr.dtype.kind not in want:
                raise UsageError(
                    f"--input {inp.name}: the file holds {arr.dtype} values, the model wants "
                    f"{dtype}"
                )
            specs.append(InputSpec(inp.name, dtype, shape, "file", path=values[inp.name]))
            continue
        if inp.name in values:
            specs.append(_const_spec(inp.name, dtype, shape, values[inp.name]))
            continue
        fill = _fill_for(inp.name, dtype)
        if dtype.startswith("int") and inp.name in shape_like and int_range is None:
            fill = shape_like[inp.name]
        lo, hi = lo_default, hi_default
        if fill == "randint" and int_range is None and inp.name in bounds:
            hi = max(lo + 1, min(hi, bounds[inp.name]))
        if fill == "randint":
            info = np.iinfo(np.dtype(dtype))
            if lo < info.min or hi - 1 > info.max:
                raise UsageError(f"--int-range {lo}:{hi} does not fit input {inp.name!r} ({dtype})")
        specs.append(InputSpec(inp.name, dtype, shape, fill, lo, hi))
    return specs


def _shape_text(dims: Sequence[int | None]) -> str:
    return "x".join(str(d) if d is not None else "N" for d in dims) if dims else "scalar"


def _open_message(open_dims: Sequence[OpenDim], resolved: Mapping[str, list[int | None]]) -> str:
    first = open_dims[0]
    label = f" ({first.symbol!r})" if first.symbol else ""
    more = len(open_dims) - 1
    tail = f" (and {more} more open dimension{'s' if more > 1 else ''})" if more else ""
    shapes = " ".join(
        f"--shape {name}={_shape_text(resolved[name])}"
        for name in dict.fromkeys(od.input for od in open_dims)
    )
    return (
        f"input {first.input!r}: dimension {first.axis}{label} is not fixed by the model"
        f"{tail}; give {shapes} with N replaced by sizes"
    )


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype in _BIT_TYPES


def _is_file_value(text: str) -> bool:
    return text.strip().lower().endswith(".npy")


def _load_array(name: str, text: str) -> np.ndarray[Any, Any]:
    path = Path(text.strip()).expanduser()
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"--input {name}: {path}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"--input {name}: {path}: not a .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise InputError(f"--input {name}: {path}: not a single .npy array")
    return arr


def _const_spec(name: str, dtype: str, shape: tuple[int, ...], text: str) -> InputSpec:
    if dtype == "str":
        raise UsageError(f"--input {name}: a string input takes a .npy file, not a number")
    try:
        value = float(text)
    except ValueError:
        raise UsageError(
            f"malformed --input {name}={text}: expected a number or a .npy file"
        ) from None
    if dtype != "bool" and not _is_float(dtype):
        info = np.iinfo(np.dtype(dtype))
        if value != int(value) or not info.min <= value <= info.max:
            raise UsageError(f"--input {name}={text} is not a value of its type ({dtype})")
    return InputSpec(name, dtype, shape, "const", value=value)


def make_array(spec: InputSpec, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Build the tensor for one input (worker side). Types numpy has no dtype for (bfloat16,
    float8) come back as their bit patterns (uint16 / uint8); :func:`feed_value` wraps
    them for ONNX Runtime."""
    shape = spec.shape
    if spec.fill == "file" and spec.path is not None:
        loaded: np.ndarray[Any, Any] = np.load(spec.path, allow_pickle=False)
        return _encode_bits(loaded, spec.dtype) if spec.dtype in _BIT_TYPES else loaded
    if spec.fill == "text" or spec.dtype == "str":
        letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
        n = int(np.prod(shape, dtype=np.int64))
        codes = letters[rng.integers(0, len(letters), size=(n, _WORD_LETTERS))]
        words = [bytes(row).decode("ascii") for row in codes]
        return np.array(words, dtype=object).reshape(shape)
    bits = _BIT_TYPES.get(spec.dtype)
    dtype = np.dtype(np.float32 if bits is not None else spec.dtype)
    out: np.ndarray[Any, Any]
    if spec.fill == "const" and spec.value is not None:
        out = np.full(shape, spec.value, dtype=dtype)
    elif spec.fill == "normal":
        out = rng.standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)
    elif spec.fill == "ones":
        out = np.ones(shape, dtype=dtype)
    elif spec.fill == "zeros":
        out = np.zeros(shape, dtype=dtype)
    elif spec.fill == "bool":
        out = rng.random(shape) < 0.5
    elif spec.fill == "arange":
        n = shape[-1] if shape else 1
        out = np.broadcast_to(np.arange(n, dtype=dtype), (*shape[:-1], n)).reshape(shape).copy()
    else:
        out = rng.integers(spec.low, spec.high, size=shape, dtype=dtype)
    # numpy hands rank-0 results back as scalars; ONNX Runtime takes arrays only
    out = np.asarray(out, dtype=dtype).reshape(shape)
    return _encode_bits(out, spec.dtype) if bits is not None else out


def feed_value(spec: InputSpec, array: np.ndarray[Any, Any]) -> Any:
    """What to pass ONNX Runtime for ``array``: the array itself, or an ``OrtValue`` of the
    ONNX element type for the bit patterns :func:`make_array` makes for bfloat16/float8."""
    elem = _BIT_TYPES.get(spec.dtype)
    if elem is None:
        return array
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, elem[0])


# element type -> (ONNX type, exponent bits, mantissa bits, bias, "fnuz": no -0, NaN at 0x80)
_BIT_TYPES: dict[str, tuple[int, int, int, int, bool]] = {
    "bfloat16": (onnx.TensorProto.BFLOAT16, 8, 7, 127, False),
    "float8e4m3fn": (onnx.TensorProto.FLOAT8E4M3FN, 4, 3, 7, False),
    "float8e4m3fnuz": (onnx.TensorProto.FLOAT8E4M3FNUZ, 4, 3, 8, True),
    "float8e5m2": (onnx.TensorProto.FLOAT8E5M2, 5, 2, 15, False),
    "float8e5m2fnuz": (onnx.TensorProto.FLOAT8E5M2FNUZ, 5, 2, 16, True),
}
for _name, (_elem, *_rest) in _BIT_TYPES.items():
    _NUMPY_DTYPES[_elem] = _name


def _encode_bits(values: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    """float32 values -> the nearest finite codes of a bfloat16/float8 type (bit patterns)."""
    if dtype == "bfloat16":
        # round to nearest even on the upper 16 bits of the float32
        u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return rounded.astype(np.uint16)
    codes, decoded = _float8_table(dtype)
    order = np.argsort(decoded)
    sorted_vals = decoded[order]
    flat = values.astype(np.float64).ravel()
    idx = np.clip(np.searchsorted(sorted_vals, flat), 1, len(sorted_vals) - 1)
    lower, upper = sorted_vals[idx - 1], sorted_vals[idx]
    pick = np.where(np.abs(flat - lower) <= np.abs(upper - flat), idx - 1, idx)
    encoded: np.ndarray[Any, Any] = codes[order][pick].astype(np.uint8).reshape(values.shape)
    return encoded


def _float8_table(dtype: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Every finite code of a float8 type and its value (OCP / ONNX definitions)."""
    _, ebits, mbits, bias, fnuz = _BIT_TYPES[dtype]
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exp = (codes >> mbits) & ((1 << ebits) - 1)
    man = codes & ((1 << mbits) - 1)
    normal = (1.0 + man / (1 << mbits)) * np.exp2(exp - bias)
    sub = man / (1 << mbits) * np.exp2(1 - bias)
    value = sign * np.where(exp == 0, sub, normal)
    if fnuz:
        finite = codes != 0x80
    elif ebits == 4:  # e4m3fn: S.1111.111 is NaN, no infinities
        finite = (codes & 0x7F) != 0x7F
    else:  # e5m2: IEEE-like, exponent all ones is inf/NaN
        finite = exp != (1 << ebits) - 1
    return codes[finite], value[finite]


def batch_of(specs: Sequence[InputSpec]) -> int | None:
    """The batch size read off the inputs: their common leading dimension, when every input
    has rank >= 2 and they agree on it; None (unknown) otherwise, e.g. for a rank-1 input
    whose leading dimension is a feature count, not a batch."""
    if not specs or any(len(s.shape) < 2 for s in specs):
        return None
    leading = {s.shape[0] for s in specs}
    return leading.pop() if len(leading) == 1 else None
