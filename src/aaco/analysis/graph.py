"""Extract an ONNX model's graph (nodes, edges, shapes, sizes) and map ORT's optimized graph to it.

Everything here works on ``onnx.ModelProto`` objects loaded without external data, so a
multi-gigabyte model costs what its graph costs, not what its weights cost. Apart from
:func:`load_model_proto` and :func:`file_sha256`, which read the file they are given, the
functions are pure.

Example::

    original = load_model_proto(Path("model.onnx"))
    optimized = load_model_proto(Path("model.optimized.onnx"))  # optimized_model_filepath
    info = extract_graph(original, input_shapes={"x": [1, 3, 224, 224]})
    omap = map_optimized_to_original(original, optimized)
    opt_info = extract_graph(
        optimized, {"x": [1, 3, 224, 224]}, "optimized", original_map=omap, reference=original
    )
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper
import pyarrow as pa
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, TensorShapeProto, TypeProto

from aaco.errors import InputError, UsageError
from aaco.session.fingerprint import file_sha256
from aaco.session.schema import GRAPH_EDGES, GRAPH_NODES

__all__ = [
    "DATA_PROP_MAX_ELEMS",
    "GraphInfo",
    "eliminated_original_nodes",
    "extract_graph",
    "file_sha256",
    "load_model_proto",
    "map_optimized_to_original",
    "node_names",
]

Shape = list[int | str | None]

# Initializers and constants larger than this are handed to shape inference without their
# data (see _inference_copy).
_INFERENCE_INIT_MAX_ELEMS = 1024
#: The longest 1-D tensor whose values shape inference's data propagation may hold.
#: Data propagation gives inference the values of small integer tensors (a Reshape target
#: computed by Shape -> Gather -> Concat). ONNX holds one protobuf dimension per value, about
#: 70 B, and makes them for a 1-D tensor whose values it does not know too, each time an op
#: with a propagation function (Add, Sub, Mul, Cast, Gather, Concat, Slice...) reads it: 8
#: elementwise ops over a 1-D input of 32 M floats took 9 to 18 GiB and minutes. A shape has
#: one value per dimension of a tensor, and inference never sees the values of a constant
#: longer than _INFERENCE_INIT_MAX_ELEMS, so a longer 1-D tensor's values are never known:
#: holding them costs memory and gives nothing. See _infer.
DATA_PROP_MAX_ELEMS = 1024
# The default-domain ops with a data propagation function (onnx 1.23), for an onnx whose
# OpSchema does not say.
_DATA_PROP_OPS = frozenset(
    {"Add", "Cast", "Concat", "Gather", "Mul", "Shape", "Size", "Slice", "Squeeze", "Sub"}
    | {"Unsqueeze"}
)
# Shape and Size propagate from their input's type, never its values.
_TYPE_ONLY_PROPAGATION = frozenset({"Shape", "Size"})
_CUT_PREFIX = "__aaco_cut_"
# ONNX names the unknown dims it makes unk__0, unk__1... per inference pass.
_GENERATED_DIM = "unk__"
# Passes with data propagation _infer may run (each one reads more tensors directly); the
# first without it is not counted.
_DATA_PROP_PASSES = 4
# meta["data_propagation"]["skipped"] names at most this many tensors.
_SKIPPED_LISTED = 20
_DOC_STRING_MAX = 200

# ORT inserts these to change layout or device; the value is the same tensor (except a
# ReorderOutput with channels_last=1, which stands in for a Transpose: see _is_layout_node).
_VALUE_PRESERVING_OPS = frozenset(
    {"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost"}
)
_NCHWC_DOMAIN = "com.microsoft.nchwc"
# The activations an NCHWc Conv applies last; its `activation` attribute names the op.
_ACTIVATION_OPS = frozenset({"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid"})
# Ops that add two tensors: an NCHWc Conv takes one's other input as its Sum input.
_SUM_OPS = frozenset({"Add", "Sum"})
# Ops ORT may fold into a Conv besides its activation and Sum: BatchNormalization, constant
# Add/Mul (ConvBNFusion, ConvAddFusion, ConvMulFusion).
_CONV_FOLDED_OPS = frozenset({"BatchNormalization", "Add", "Sum", "Mul"})
# Ops that only reshape or transpose: ORT wraps fused nodes in them (MatMulAddFusion).
_RESHAPE_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose"})
# Original ops that pass their input through at inference; ORT removes them and rewires the
# consumer, so a backward walk would wrongly credit them to the consumer.
_PASS_THROUGH_OPS = frozenset({"Identity", "Dropout"})
# ORT's NCHWc transformer names the node it creates `<original output>_nchwc`, or
# `<original output>_bn_nchwc` for a BatchNormalization it turns into a Conv (made unique
# with `_token_<n>` when taken); the original output is what the node computed then.
_NCHWC_NAME = re.compile(r"^(.*)_nchwc(?:_token_\d+)?$")

_DTYPE_BITS: dict[str, int] = {
    "float": 32, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "int32": 32, "int64": 64,
    "bool": 8, "float16": 16, "double": 64, "uint32": 32, "uint64": 64, "complex64": 64,
    "complex128": 128, "bfloat16": 16, "float8e4m3fn": 8, "float8e4m3fnuz": 8,
    "float8e5m2": 8, "float8e5m2fnuz": 8, "uint4": 4, "int4": 4, "float4e2m1": 4,
    "float8e8m0": 8, "uint2": 2, "int2": 2, "float6e2m3": 6, "float6e3m2": 6,
}  # fmt: skip


@dataclass(frozen=True)
class GraphInfo:
    """One graph as bundle tables: GRAPH_NODES ``nodes``, GRAPH_EDGES ``edges``, JSON ``meta``."""

    nodes: pa.Table
    edges: pa.Table
    meta: dict[str, Any]


# --------------------------------------------------------------------------- files


def load_model_proto(path: Path) -> ModelProto:
    """Load the ONNX model at ``path`` without its external data.

    Raises :class:`InputError` (one line, naming the file) when the file is missing,
    unreadable or not an ONNX model.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such ONNX model")
    if not path.is_file():
        raise InputError(f"{path}: not a file, expected an ONNX model")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if size == 0:
        raise InputError(f"{path}: empty file, expected an ONNX model")
    try:
        # Force protobuf: onnx otherwise guesses a text format from the file extension.
        model = onnx.load(str(path), format="protobuf", load_external_data=False)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:  # DecodeError, ValueError...: whatever it is, not a model
        reason = _first_line(exc) or type(exc).__name__
        raise InputError(f"{path}: not an ONNX model ({reason})") from None
    # Protobuf accepts many byte strings as a message full of unknown fields; a model has
    # at least an IR version and a graph.
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputError(f"{path}: not an ONNX model (no IR version or graph)")
    bad = _undecoded_text(model.graph)
    if bad is not None:
        raise InputError(f"{path}: not a valid ONNX model: {bad} is not UTF-8 text")
    return model


def _undecoded_text(graph: GraphProto) -> str | None:
    """Where a name in ``graph`` (or a subgraph) is not UTF-8 (protobuf then hands the field
    over as bytes, which ONNX forbids), else None."""
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if isinstance(vi.name, bytes):
            return "a value name"
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if isinstance(d.dim_param, bytes):
                    return f"a dimension name of {vi.name!r}"
    for t in graph.initializer:
        if isinstance(t.name, bytes):
            return "an initializer name"
    for node in graph.node:
        fields = (node.name, node.op_type, node.domain, *node.input, *node.output)
        if any(isinstance(f, bytes) for f in fields):
            return "a node's name, type or tensor name"
        for a in node.attribute:
            if isinstance(a.name, bytes):
                return "an attribute name"
            for g in (*([a.g] if a.HasField("g") else []), *a.graphs):
                found = _undecoded_text(g)
                if found is not None:
                    return found
    return None


def external_data_files(model: ModelProto, model_path: Path) -> list[Path]:
    """The external-data files the model's initializers refer to (relative to the model)."""
    files: dict[str, Path] = {}
    for tensor in model.graph.initializer:
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        for entry in tensor.external_data:
            if entry.key == "location":
                files.setdefault(entry.value, Path(model_path).parent / entry.value)
    return list(files.values())


def check_external_data(model: ModelProto, model_path: Path) -> None:
    """InputError naming the first external-data file that is missing or unreadable."""
    for f in external_data_files(model, model_path):
        if not f.is_file() or not os.access(f, os.R_OK):
            raise InputError(
                f"{model_path}: its external weights file {f.name} is missing or unreadable"
            )


# --------------------------------------------------------------------------- names


def node_names(graph: GraphProto, reference: GraphProto | None = None) -> list[str]:
    """The name of every node of ``graph``, in order; ``<op_type>_<index>`` for unnamed ones.

    This is the name ONNX Runtime gives an unnamed node in its profile, with ``index`` its
    position in the model it loaded. For a graph ORT optimized (``reference`` = the original
    graph), an unnamed node is one ORT kept from the original, so it takes the name of the
    original node with the same op type and first output.
    """
    by_output: dict[tuple[str, str], str] = {}
    if reference is not None:
        for node, name in zip(reference.node, node_names(reference), strict=True):
            out = _first_output(node)
            if out:
                by_output.setdefault((node.op_type, out), name)
    names: list[str] = []
    for index, node in enumerate(graph.node):
        if node.name:
            names.append(node.name)
            continue
        found = by_output.get((node.op_type, _first_output(node)))
        names.append(found if found is not None else f"{node.op_type}_{index}")
    return names


def _first_output(node: onnx.NodeProto) -> str:
    return next((o for o in node.output if o), "")


# --------------------------------------------------------------------------- extraction


def extract_graph(
    model: ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    graph_label: str = "original",
    original_map: Mapping[str, list[str] | None] | None = None,
    reference: ModelProto | None = None,
) -> GraphInfo:
    """Nodes, edges and metadata of ``model``'s main graph, after ONNX shape inference.

    ``input_shapes`` (graph input -> concrete dims) replaces the inputs' declared dims before
    inference, so symbolic dims resolve and edge sizes become concrete; ``meta["inputs"]``
    keeps the declared ones. Shape inference failing (contrib ops of an ORT-optimized model,
    say) does not fail extraction: ``meta["shape_inference"]`` says ``failed: <reason>`` and
    whatever could be inferred is used. Its cost does not grow with tensor sizes;
    ``meta["data_propagation"]`` says which tensors' values it left out (see :func:`_infer`).

    ``original_nodes``: from ``original_map`` when given (``graph_label="optimized"``); for
    the original graph each node stands for itself. ``reference``: the original model, when
    ``model`` is ORT's optimized one, so unnamed nodes get the names ORT gives them
    (see :func:`node_names`).

    Raises :class:`UsageError` when ``input_shapes`` names a tensor that is not a graph
    input or gives the wrong rank.
    """
    graph = model.graph
    init_names = {t.name for t in graph.initializer} | {
        t.values.name for t in graph.sparse_initializer
    }
    real_inputs = [vi for vi in graph.input if vi.name not in init_names]
    declared = {vi.name: _type_info(vi.type) for vi in real_inputs}

    infer_model = _inference_copy(model)
    if input_shapes:
        _apply_input_shapes(infer_model.graph, input_shapes, init_names)
    inferred, status, data_prop = _infer(infer_model)

    types: dict[str, tuple[str | None, Shape | None]] = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dtype, shape = _type_info(vi.type)
        if vi.name not in types or (types[vi.name][1] is None and shape is not None):
            types[vi.name] = (dtype, shape)
    for t in graph.initializer:
        types[t.name] = (_dtype_name(t.data_type), list(t.dims))
    for st in graph.sparse_initializer:
        types[st.values.name] = (_dtype_name(st.values.data_type), list(st.dims))

    ref_graph = reference.graph if reference is not None else None
    names = node_names(graph, ref_graph)
    nodes = _nodes_table(graph, names, types, graph_label, original_map)
    edges = _edges_table(graph, names, types, init_names)
    meta = _meta(model, graph_label, names, declared, status, input_shapes)
    meta["data_propagation"] = data_prop
    return GraphInfo(nodes=nodes, edges=edges, meta=meta)


def _inference_copy(model: ModelProto) -> ModelProto:
    """A copy of ``model`` for shape inference, without the data of large tensors.

    Inference needs the values of small shape-like tensors (Reshape targets), never of
    weights, and copying weights would double the memory of a model with embedded data (and
    inference copies the model three more times). The main graph's large initializers
    become typed inputs; a large Constant node, or a subgraph's large initializer, becomes a
    stand-in of the same type and shape (:func:`_stand_in`). Model-local functions are
    inlined, so that :func:`_infer` sees every tensor their bodies make.
    """
    src = model.graph
    g = _graph_copy(src, model.opset_import, top=True)
    init_names = {t.name for t in src.initializer}
    g.input.extend(vi for vi in src.input if vi.name not in init_names)
    for t in src.initializer:
        if _small(t):
            g.initializer.append(t)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    m = ModelProto(
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
    )
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    m.graph.CopyFrom(g)
    if m.functions:
        # Should the inliner fail, inference infers each call's body itself, and
        # _cut_long_values still guards what the call reads.
        with contextlib.suppress(Exception):
            from onnx import inliner

            m = inliner.inline_local_functions(m)
    return m


def _small(t: TensorProto) -> bool:
    return (
        t.data_location != TensorProto.EXTERNAL and math.prod(t.dims) <= _INFERENCE_INIT_MAX_ELEMS
    )


def _graph_copy(
    src: GraphProto, opsets: Iterable[onnx.OperatorSetIdProto], *, top: bool
) -> GraphProto:
    """``src`` without its large constants, subgraphs included; the main graph's inputs and
    initializers are left to the caller."""
    g = GraphProto(name=src.name)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    opset = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 0)
    if not top:
        g.input.extend(src.input)
        for t in src.initializer:
            stand_in = None if _small(t) else _stand_in(t.name, t.data_type, t.dims, opset)
            if stand_in is None:
                g.initializer.append(t)
            else:
                g.node.append(stand_in[0])
                g.initializer.append(stand_in[1])
    for node in src.node:
        value = (
            _constant_value(node)
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            else None
        )
        if value is not None and math.prod(value[1]) > _INFERENCE_INIT_MAX_ELEMS:
            stand_in = _stand_in(node.output[0], value[0], value[1], opset)
            if stand_in is not None:
                g.node.append(stand_in[0])
                g.initializer.append(stand_in[1])
                continue
        if not any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            g.node.append(node)
            continue
        copy = g.node.add()
        copy.input.extend(node.input)
        copy.output.extend(node.output)
        copy.name, copy.op_type, copy.domain = node.name, node.op_type, node.domain
        copy.overload, copy.doc_string = node.overload, node.doc_string
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                attr = copy.attribute.add(name=a.name, type=a.type)
                attr.g.CopyFrom(_graph_copy(a.g, opsets, top=False))
            elif a.type == AttributeProto.GRAPHS:
                attr = copy.attribute.add(name=a.name, type=a.type)
                attr.graphs.extend(_graph_copy(sub, opsets, top=False) for sub in a.graphs)
            else:
                copy.attribute.append(a)
    return g


def _apply_input_shapes(
    graph: GraphProto, input_shapes: Mapping[str, Sequence[int]], init_names: set[str]
) -> None:
    inputs = {vi.name: vi for vi in graph.input if vi.name not in init_names}
    for name, dims in input_shapes.items():
        vi = inputs.get(name)
        if vi is None:
            valid = ", ".join(sorted(inputs)) or "none"
            raise UsageError(f"input_shapes names {name!r}, not a graph input (inputs: {valid})")
        if vi.type.WhichOneof("value") != "tensor_type":
            raise UsageError(f"input_shapes gives a shape for {name!r}, which is not a tensor")
        tt = vi.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
            raise UsageError(
                f"input_shapes gives {name!r} rank {len(dims)}, the model declares "
                f"rank {len(tt.shape.dim)}"
            )
        tt.shape.Clear()
        for d in dims:
            tt.shape.dim.add().dim_value = int(d)


def _constant_value(node: onnx.NodeProto) -> tuple[int, list[int]] | None:
    """(element type, dims) of a Constant node's value; None for a scalar or a reference."""
    for a in node.attribute:
        if a.ref_attr_name:
            return None
        if a.name == "value":
            return a.t.data_type, list(a.t.dims)
        if a.name == "sparse_value":
            return a.sparse_tensor.values.data_type, list(a.sparse_tensor.dims)
        if a.name == "value_floats":
            return TensorProto.FLOAT, [len(a.floats)]
        if a.name == "value_ints":
            return TensorProto.INT64, [len(a.ints)]
        if a.name == "value_strings":
            return TensorProto.STRING, [len(a.strings)]
    return None


def _stand_in(
    name: str, elem_type: int, dims: Sequence[int], opset: int
) -> tuple[onnx.NodeProto, TensorProto] | None:
    """A ConstantOfShape node making ``name`` with this type and shape, and its shape
    initializer; None where the opset or the element type does not allow one (a string)."""
    if opset < 9:
        return None
    try:
        schema = onnx.defs.get_schema("ConstantOfShape", opset, "")
        type_str = f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
    except (onnx.defs.SchemaError, ValueError):
        return None
    allowed = {
        s for c in schema.type_constraints if c.type_param_str == "T2" for s in c.allowed_type_strs
    }
    if type_str not in allowed:
        return None
    itemsize = onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    value = TensorProto(name="value", data_type=elem_type, dims=[1], raw_data=bytes(itemsize))
    shape = onnx.numpy_helper.from_array(np.asarray(dims, dtype=np.int64), f"{name}__aaco_shape")
    return onnx.helper.make_node("ConstantOfShape", [shape.name], [name], value=value), shape


def _infer(
    model: ModelProto, max_elems: int | None = None
) -> tuple[ModelProto, str, dict[str, Any]]:
    """Shape inference with data propagation whose cost does not grow with tensor sizes.

    Returns the inferred model, strict inference's verdict (``ok`` or ``failed: <reason>``;
    lenient inference gives what it can) and what data propagation did, for
    ``meta["data_propagation"]``. A pass without data propagation (cheap: no values) gives
    each tensor's type; the values of 1-D tensors that may be longer than ``max_elems``
    (:data:`DATA_PROP_MAX_ELEMS`) are then hidden from the pass with data propagation by
    :func:`_cut_long_values`, and the dims the cuts made symbolic get their values back
    from the first pass (:func:`_restore_cuts`). A tensor cut because its length was not
    known yet (a ConstantOfShape of a computed shape) but that the pass with data
    propagation found short is read directly in one more pass, until none is left
    (at most :data:`_DATA_PROP_PASSES` passes).
    """
    limit = DATA_PROP_MAX_ELEMS if max_elems is None else max_elems
    try:
        plain = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError...
        reason = _first_line(exc) or type(exc).__name__
        return model, f"failed: {reason}", _data_prop_meta("off", limit, [])
    first_types = _value_types(plain)
    proven: set[str] = set()
    failure: str | None = None
    for _ in range(_DATA_PROP_PASSES):
        work = ModelProto()
        work.CopyFrom(model)
        cuts = _cut_long_values(work, first_types, limit, proven)
        inferred, failure = _data_prop_pass(work, plain, failure)
        if not cuts:
            break
        _restore_cuts(inferred.graph, plain.graph, cuts)
        types = _value_types(inferred)
        short = {t for t in cuts.values() if _bounded_values(types.get(t), False, limit)}
        if not short:
            break
        proven |= short
    status = "ok" if failure is None else f"failed: {failure}"
    mode = "guarded" if cuts else "full"
    return inferred, status, _data_prop_meta(mode, limit, cuts.values())


def _data_prop_pass(
    model: ModelProto, fallback: ModelProto, failure: str | None
) -> tuple[ModelProto, str | None]:
    """One inference with data propagation, and why strict inference fails (None: it does not).

    Strict inference, to learn whether it works, unless an earlier pass learnt it does not
    (``failure``); then lenient inference for what it can give (``fallback`` if even that
    raises).
    """
    if failure is None:
        try:
            return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True), None
        except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError...
            failure = _first_line(exc) or type(exc).__name__
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True), failure
    except Exception:
        return fallback, failure


def _data_prop_meta(mode: str, limit: int, skipped: Iterable[str]) -> dict[str, Any]:
    names = sorted(skipped)
    return {
        "mode": mode,
        "max_elems": limit,
        "skipped_count": len(names),
        "skipped": names[:_SKIPPED_LISTED],
    }


def _cut_long_values(
    model: ModelProto, types: Mapping[str, TypeProto], limit: int, proven: Iterable[str] = ()
) -> dict[str, str]:
    """Make the ops that propagate values read, instead of a tensor whose values could be
    longer than ``limit``, a new input of the same type but with a symbolic length (no
    declared type when ``types`` has none for it); returns {cut input: original tensor}.

    ONNX materialises the values of a tensor an op reads (one dimension each) only for a 1-D
    tensor of known length, an initializer or another op's propagated output. Initializers
    here are small (:func:`_inference_copy`); an output that an op propagated is no longer
    than what it read (a Concat: the sum), so it is safe by induction; Shape and Size read
    only the type. What is left is cut unless its type in ``types`` (inference without data
    propagation) or a pass with it (``proven``) rules it out: cut when 1-D with a known length
    over ``limit``, or of a rank or length that data propagation could still learn (a graph
    input's type is fixed, so only a known length counts there).
    """
    proven = set(proven)
    graphs = list(_graphs(model.graph))
    kept = {t.name for g in graphs for t in g.initializer} | {
        t.values.name for g in graphs for t in g.sparse_initializer
    }
    fixed = {vi.name for vi in model.graph.input}
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    functions = {(f.domain, f.name) for f in model.functions}
    cache: dict[tuple[str, str], bool] = {}

    def propagates(node: onnx.NodeProto) -> bool:
        domain = "" if node.domain == "ai.onnx" else node.domain
        key = (domain, node.op_type)
        if key not in cache:
            cache[key] = (node.domain, node.op_type) in functions or _has_data_prop(
                node.op_type, domain, opsets.get(domain)
            )
        return cache[key]

    nodes = [n for g in graphs for n in g.node]
    propagated = {out for n in nodes if propagates(n) for out in n.output}
    names = {t for n in nodes for t in (*n.input, *n.output)} | set(types) | kept
    cuts: dict[str, str] = {}
    for node in nodes:
        if not propagates(node) or (
            node.domain in ("", "ai.onnx") and node.op_type in _TYPE_ONLY_PROPAGATION
        ):
            continue
        for i, name in enumerate(node.input):
            if not name or name in kept or name in propagated or name in proven:
                continue
            if _bounded_values(types.get(name), name in fixed, limit):
                continue
            if name not in cuts:
                cut = f"{_CUT_PREFIX}{len(cuts)}"
                while cut in names:
                    cut += "_"
                cuts[name] = cut
                declared = _cut_input(cut, types.get(name))
                if declared is not None:
                    model.graph.input.append(declared)
            node.input[i] = cuts[name]
    return {cut: name for name, cut in cuts.items()}


def _value_types(model: ModelProto) -> dict[str, TypeProto]:
    """The declared or inferred type of every value in ``model``, subgraphs included."""
    types: dict[str, TypeProto] = {}
    for g in _graphs(model.graph):
        for vi in (*g.input, *g.value_info, *g.output):
            types.setdefault(vi.name, vi.type)
    return types


def _graphs(graph: GraphProto) -> Iterable[GraphProto]:
    """``graph`` and every subgraph in it, at any depth."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _graphs(sub)


def _has_data_prop(op_type: str, domain: str, version: int | None) -> bool:
    """Whether the op has a data propagation function in the opset the model imports."""
    if version is None:
        return False
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return False
    has = getattr(schema, "has_data_propagation_function", None)
    if has is None:  # an onnx too old to say
        return domain == "" and op_type in _DATA_PROP_OPS
    return bool(has)


def _bounded_values(tp: TypeProto | None, fixed: bool, limit: int) -> bool:
    """Whether data propagation reading a tensor of type ``tp`` (in the pass without it) makes
    at most ``limit`` values of it, whatever the pass with it learns."""
    if tp is None:
        return False
    if tp.WhichOneof("value") != "tensor_type":
        return True  # sequences, maps, sparse tensors: no values are made
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return fixed
    if len(tt.shape.dim) != 1:
        return True
    dim = tt.shape.dim[0]
    if dim.HasField("dim_value"):
        return bool(dim.dim_value <= limit)
    return fixed


def _cut_input(name: str, tp: TypeProto | None) -> onnx.ValueInfoProto | None:
    if tp is None:
        return None
    vi = onnx.ValueInfoProto(name=name)
    vi.type.CopyFrom(tp)
    if vi.type.WhichOneof("value") == "tensor_type" and len(vi.type.tensor_type.shape.dim) == 1:
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = name
    return vi


def _restore_cuts(inferred: GraphProto, plain: GraphProto, cuts: Mapping[str, str]) -> None:
    """Drop the cut inputs, and give back every dim that only the cuts hid: a dim named after
    a cut takes the cut tensor's length, a dim unknown here takes the value ``plain`` knows.

    The dim names ONNX makes up for unknown dims (``unk__<n>``) are not carried over from
    ``plain``: each pass numbers its own, so the same name would stand for two dims.
    """
    kept_inputs = [vi for vi in inferred.input if vi.name not in cuts]
    del inferred.input[:]
    inferred.input.extend(kept_inputs)
    before = {vi.name: vi.type for vi in (*plain.input, *plain.value_info, *plain.output)}
    after = {vi.name: vi.type for vi in (*inferred.value_info, *inferred.output, *kept_inputs)}
    lengths: dict[str, TensorShapeProto.Dimension] = {}
    for cut, name in cuts.items():
        # The cut tensor's producer still runs in this pass, and may know its length better.
        now, then = _dims(after.get(name)), _dims(before.get(name))
        if now is not None and len(now) == 1 and _known_here(now[0], cuts):
            lengths[cut] = now[0]
        elif then is not None and len(then) == 1:
            lengths[cut] = _portable(then[0])
        else:
            lengths[cut] = _unknown()
    seen: set[str] = set()
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        seen.add(vi.name)
        if vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        ref = _dims(before.get(vi.name))
        if not tt.HasField("shape"):
            if ref is not None:
                tt.shape.dim.extend(_portable(d) for d in ref)
            continue
        if ref is not None and len(ref) != len(tt.shape.dim):
            ref = None
        for i, dim in enumerate(tt.shape.dim):
            if ref is not None and ref[i].HasField("dim_value") and not dim.HasField("dim_value"):
                dim.CopyFrom(ref[i])
            elif dim.HasField("dim_param") and dim.dim_param in lengths:
                dim.CopyFrom(lengths[dim.dim_param])
    for vi in plain.value_info:
        if vi.name not in seen:
            added = inferred.value_info.add()
            added.CopyFrom(vi)
            if added.type.WhichOneof("value") == "tensor_type":
                for dim in added.type.tensor_type.shape.dim:
                    dim.CopyFrom(_portable(dim))


def _known_here(dim: TensorShapeProto.Dimension, cuts: Mapping[str, str]) -> bool:
    """A value, or a name of this pass that is not a cut's."""
    if dim.HasField("dim_value"):
        return True
    return dim.HasField("dim_param") and dim.dim_param not in cuts


def _dims(tp: TypeProto | None) -> Sequence[TensorShapeProto.Dimension] | None:
    """The dims of a tensor type with a shape, else None."""
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return None
    return list(tp.tensor_type.shape.dim) if tp.tensor_type.HasField("shape") else None


def _portable(dim: TensorShapeProto.Dimension) -> TensorShapeProto.Dimension:
    """``dim`` as another inference pass may use it: without a name ONNX made up."""
    if dim.HasField("dim_param") and dim.dim_param.startswith(_GENERATED_DIM):
        return _unknown()
    copy = TensorShapeProto.Dimension()
    copy.CopyFrom(dim)
    return copy


def _unknown() -> TensorShapeProto.Dimension:
    return TensorShapeProto.Dimension()


def _nodes_table(
    graph: GraphProto,
    names: list[str],
    types: Mapping[str, tuple[str | None, Shape | None]],
    graph_label: str,
    original_map: Mapping[str, list[str] | None] | None,
) -> pa.Table:
    cols: dict[str, list[Any]] = {c: [] for c in GRAPH_NODES.column_names}
    for index, (node, name) in enumerate(zip(graph.node, names, strict=True)):
        ins = list(node.input)
        outs = list(node.output)
        in_types = [types.get(t, (None, None)) if t else (None, None) for t in ins]
        out_types = [types.get(t, (None, None)) if t else (None, None) for t in outs]
        if original_map is not None:
            original = original_map.get(name)
        else:
            original = [name] if graph_label == "original" else None
        cols["graph"].append(graph_label)
        cols["node_index"].append(index)
        cols["node_name"].append(name)
        cols["op_type"].append(node.op_type)
        cols["domain"].append("" if node.domain == "ai.onnx" else node.domain)
        cols["inputs"].append(ins)
        cols["outputs"].append(outs)
        cols["input_shapes"].append(_json([s for _, s in in_types]))
        cols["output_shapes"].append(_json([s for _, s in out_types]))
        cols["input_dtypes"].append([d for d, _ in in_types])
        cols["output_dtypes"].append([d for d, _ in out_types])
        cols["attributes"].append(_json({a.name: _attr_value(a) for a in node.attribute}))
        cols["original_nodes"].append(original)
    return GRAPH_NODES.from_columns(cols)


def _edges_table(
    graph: GraphProto,
    names: list[str],
    types: Mapping[str, tuple[str | None, Shape | None]],
    init_names: set[str],
) -> pa.Table:
    producer: dict[str, str] = {}
    for node, name in zip(graph.node, names, strict=True):
        for t in node.output:
            if t:
                producer.setdefault(t, name)
    input_names = {vi.name for vi in graph.input} - init_names

    rows: list[tuple[str, str | None, str | None, str]] = []
    seen: set[tuple[str, str | None, str | None]] = set()
    consumed: set[str] = set()

    def add(tensor: str, prod: str | None, cons: str | None, kind: str) -> None:
        if (tensor, prod, cons) not in seen:
            seen.add((tensor, prod, cons))
            rows.append((tensor, prod, cons, kind))

    for node, name in zip(graph.node, names, strict=True):
        for t in node.input:
            if not t:
                continue  # omitted optional input
            consumed.add(t)
            if t in init_names:
                add(t, None, name, "initializer")
            elif t in input_names:
                add(t, None, name, "graph_input")
            else:
                add(t, producer.get(t), name, "activation")
    for vi in graph.output:
        add(vi.name, producer.get(vi.name), None, "graph_output")
    # Inputs nobody reads still belong to the graph's interface.
    for vi in graph.input:
        if vi.name in input_names and vi.name not in consumed:
            add(vi.name, None, None, "graph_input")

    cols: dict[str, list[Any]] = {c: [] for c in GRAPH_EDGES.column_names}
    for tensor, prod, cons, kind in rows:
        dtype, shape = types.get(tensor, (None, None))
        cols["tensor"].append(tensor)
        cols["producer"].append(prod)
        cols["consumer"].append(cons)
        cols["kind"].append(kind)
        cols["dtype"].append(dtype)
        cols["shape"].append(None if shape is None else _json(shape))
        cols["bytes"].append(_tensor_bytes(dtype, shape))
    return GRAPH_EDGES.from_columns(cols)


def _meta(
    model: ModelProto,
    graph_label: str,
    names: list[str],
    declared: Mapping[str, tuple[str | None, Shape | None]],
    status: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
) -> dict[str, Any]:
    graph = model.graph
    op_counts: dict[str, int] = {}
    for node in graph.node:
        op_counts[node.op_type] = op_counts.get(node.op_type, 0) + 1
    param_count = 0
    param_bytes = 0
    for t in graph.initializer:
        numel = math.prod(t.dims)
        param_count += numel
        param_bytes += _tensor_bytes(_dtype_name(t.data_type), list(t.dims)) or 0
    doc = model.doc_string
    if len(doc) > _DOC_STRING_MAX:
        doc = doc[: _DOC_STRING_MAX - 3] + "..."
    return {
        "graph": graph_label,
        "ir_version": model.ir_version,
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "domain": model.domain,
        "model_version": model.model_version,
        "doc_string": doc,
        "graph_name": graph.name,
        "node_count": len(names),
        "op_type_counts": dict(sorted(op_counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "parameter_count": param_count,
        "parameter_bytes": param_bytes,
        "initializer_count": len(graph.initializer) + len(graph.sparse_initializer),
        "has_external_data": any(
            t.data_location == TensorProto.EXTERNAL for t in graph.initializer
        ),
        "inputs": [{"name": n, "dtype": d, "shape": s} for n, (d, s) in declared.items()],
        "outputs": [_io(vi) for vi in graph.output],
        "input_shapes": {k: [int(d) for d in v] for k, v in (input_shapes or {}).items()},
        "shape_inference": status,
    }


def _io(vi: onnx.ValueInfoProto) -> dict[str, Any]:
    dtype, shape = _type_info(vi.type)
    return {"name": vi.name, "dtype": dtype, "shape": shape}


# --------------------------------------------------------------------------- types


def _type_info(tp: TypeProto) -> tuple[str | None, Shape | None]:
    """(element type, dims) of a value type; dims are ints, dim_param strings or None."""
    which = tp.WhichOneof("value")
    if which not in ("tensor_type", "sparse_tensor_type"):
        return (None if which is None else which.removesuffix("_type"), None)
    tt = tp.tensor_type if which == "tensor_type" else tp.sparse_tensor_type
    dtype = _dtype_name(tt.elem_type)
    if not tt.HasField("shape"):
        return dtype, None
    dims: Shape = []
    for d in tt.shape.dim:
        kind = d.WhichOneof("value")
        dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind else None)
    return dtype, dims


def _dtype_name(elem_type: int) -> str | None:
    if elem_type == TensorProto.UNDEFINED:
        return None
    try:
        return str(TensorProto.DataType.Name(elem_type)).lower()
    except ValueError:
        return f"type{elem_type}"


def _tensor_bytes(dtype: str | None, shape: Shape | None) -> int | None:
    bits = _DTYPE_BITS.get(dtype or "")
    if bits is None or shape is None:
        return None
    numel = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return None
        numel *= d
    return (numel * bits + 7) // 8


# --------------------------------------------------------------------------- attributes


def _attr_value(a: AttributeProto) -> Any:
    """A JSON-ready summary of one attribute; tensors and graphs are named, not dumped."""
    if a.ref_attr_name:
        return f"<ref {a.ref_attr_name}>"
    t = a.type
    A = AttributeProto
    if t == A.FLOAT:
        return _float(a.f)
    if t == A.INT:
        return a.i
    if t == A.STRING:
        return a.s.decode("utf-8", "replace")
    if t == A.TENSOR:
        return _tensor_sig(a.t)
    if t == A.GRAPH:
        return "<graph>"
    if t == A.SPARSE_TENSOR:
        dims = ",".join(str(d) for d in a.sparse_tensor.dims)
        return f"<sparse_tensor {_dtype_name(a.sparse_tensor.values.data_type)}[{dims}]>"
    if t == A.TYPE_PROTO:
        return "<type>"
    if t == A.FLOATS:
        return [_float(x) for x in a.floats]
    if t == A.INTS:
        return list(a.ints)
    if t == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if t == A.TENSORS:
        return [_tensor_sig(x) for x in a.tensors]
    if t == A.GRAPHS:
        return ["<graph>"] * len(a.graphs)
    if t == A.SPARSE_TENSORS:
        return ["<sparse_tensor>"] * len(a.sparse_tensors)
    if t == A.TYPE_PROTOS:
        return ["<type>"] * len(a.type_protos)
    return None


def _tensor_sig(t: TensorProto) -> str:
    dims = ",".join(str(d) for d in t.dims)
    return f"<tensor {_dtype_name(t.data_type)}[{dims}]>"


def _float(x: float) -> float | str:
    """A float32 attribute as its shortest float32 spelling (1e-05, not 9.99999974e-06)."""
    if not math.isfinite(x):
        return str(x)
    return float(str(np.float32(x)))


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return line[:300]


# --------------------------------------------------------------------------- mapping


def map_optimized_to_original(
    original: ModelProto, optimized: ModelProto
) -> dict[str, list[str] | None]:
    """For each node of ORT's optimized graph, the original nodes it stands for.

    Keys are optimized node names as :func:`node_names` gives them with the original as
    reference (the names in ORT's profile); values are original node names in graph order,
    or None when the mapping cannot be known. The rule:

    1. A tensor name present in both graphs is the same tensor (ORT keeps names when it
       rewrites). Layout and copy nodes ORT inserts (``ReorderInput``, ``ReorderOutput``,
       ``MemcpyToHost``, ``MemcpyFromHost``) carry their input's value, so their output is
       the same original tensor as their input, and the other way round.
    2. An optimized node stands for the original nodes found by walking backward in the
       original graph from its output tensors, collecting producers, and stopping at its own
       input tensors, initializers and Constant outputs. A node ORT left alone thus maps to
       itself; ``FusedConv`` to Conv+BatchNormalization+Relu; ``BiasGelu`` to
       Add+Div+Erf+Add+Mul+Mul. Identity and Dropout nodes met on the way are not credited
       (ORT removes them and rewires their consumers). Reaching a graph input that is not
       one of the node's inputs, or having no output tensor known in the original, makes
       the mapping unknown.
    3. Nodes linked by tensors that exist only in the optimized graph (NCHWc chains) are
       mapped as a group, each node with a guessed output tensor. ORT names an NCHWc node
       ``<original output>_nchwc`` (``<original output>_bn_nchwc`` for a
       BatchNormalization it made a Conv). An NCHWc Conv may then fold in the Add that
       consumes that output (the Add's other input becomes the Conv's fourth, Sum, input)
       and after it an activation (its ``activation`` attribute); the guess follows the
       Add only if the node has a Sum input and the activation only if it names one, so a
       Conv whose output merely feeds another Conv's Sum input keeps its own. A node that
       keeps an original node's name and op type computes that node's outputs. The
       guesses are kept if the per-node walks partition, exactly, the original subgraph
       between the group's boundary tensors known for certain. Failing that, if one node
       of the group is not a Reshape, Squeeze, Unsqueeze, Flatten or Transpose, it stands
       for the whole subgraph (ORT's MatMulAddFusion: Reshape -> Gemm -> Reshape).
       Failing that, each node is judged on its own: its walk is kept if all its inputs
       are known and used, nothing computed inside it is used outside it, no other node of
       the group claims any of it, and it fits the node's op (an NCHWc Conv: one Conv, or
       one BatchNormalization, with only BatchNormalization, Add, Mul and activations
       besides, an Add of two computed tensors exactly when it has a Sum input, its
       activation last; any other node: one original node of its own op type). The other
       nodes of the group are unknown.
    4. An unknown node that keeps an original node's name and op type maps to that node,
       unless another node stands for it. Layout and copy nodes ORT inserted map to None:
       they stand for no original node.
    """
    return _map(original, optimized)[0]


def eliminated_original_nodes(original: ModelProto, optimized: ModelProto) -> list[str]:
    """Original nodes no optimized node stands for: removed (Identity, Dropout...),
    constant-folded, or Constant nodes turned into initializers.

    Nodes that an unknown-mapping node of the optimized graph may compute are left out, so
    this names only what is certainly gone. Uses the rule of :func:`map_optimized_to_original`.
    """
    return _map(original, optimized)[1]


class _OriginalIndex:
    """The original graph, indexed for backward walks."""

    def __init__(self, graph: GraphProto) -> None:
        self.graph = graph
        self.names = node_names(graph)
        self.producer: dict[str, int] = {}
        self.constants: set[str] = {t.name for t in graph.initializer}
        self.constants |= {t.values.name for t in graph.sparse_initializer}
        for i, node in enumerate(graph.node):
            for t in node.output:
                if not t:
                    continue
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    self.constants.add(t)  # ORT turns these into initializers
                else:
                    self.producer.setdefault(t, i)
        self.inputs = {vi.name for vi in graph.input} - self.constants
        self.tensors = set(self.producer) | self.constants | self.inputs
        self.outputs = {vi.name for vi in graph.output}
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(graph.node):
            for t in dict.fromkeys(node.input):
                if t:
                    self.consumers.setdefault(t, []).append(i)

    def producer_op(self, tensor: str) -> str | None:
        """The op type that computes ``tensor``, looking through Identity and Dropout."""
        seen: set[str] = set()
        while tensor not in seen:
            seen.add(tensor)
            p = self.producer.get(tensor)
            if p is None:
                return None
            node = self.graph.node[p]
            op: str = node.op_type
            if op not in _PASS_THROUGH_OPS or not node.input:
                return op
            tensor = node.input[0]
        return None

    def sum_inputs(self, node: onnx.NodeProto) -> int:
        """How many inputs of ``node`` are computed, not constants."""
        return sum(1 for t in node.input if t and t not in self.constants)

    def _sole_use(self, tensor: str, ops: frozenset[str]) -> onnx.NodeProto | None:
        """The one node using ``tensor``, when it is one of ``ops`` and nothing else uses it."""
        users = self.consumers.get(tensor, [])
        if tensor in self.outputs or len(users) != 1:
            return None
        node: onnx.NodeProto = self.graph.node[users[0]]
        if node.op_type not in ops or not node.output or not node.output[0]:
            return None
        return node

    def nchwc_conv_output(self, tensor: str, has_sum: bool, activation: str | None) -> str | None:
        """What an NCHWc Conv named after ``tensor`` computes; None if it cannot be found.

        ORT names the node after the output its Conv (or FusedConv) had then. Later it may
        fold the Add that consumes that output, taking the Add's other input as a fourth
        (Sum) input, and after that an activation: ``has_sum`` and ``activation`` say which
        it did, read from the node. An activation or Add already computing ``tensor`` was
        folded before the naming (FusedConv) and is not looked for after it.
        """
        op = self.producer_op(tensor)
        if activation is not None and op == activation:
            return tensor  # FusedConv: nothing is folded after an activation
        p = self.producer.get(tensor)
        sum_done = op in _SUM_OPS and p is not None and self.sum_inputs(self.graph.node[p]) >= 2
        if has_sum and not sum_done:
            add = self._sole_use(tensor, _SUM_OPS)
            if add is None or self.sum_inputs(add) != 2:
                return None
            tensor = add.output[0]
        if activation is not None:
            act = self._sole_use(tensor, frozenset({activation}))
            if act is None:
                return None
            tensor = act.output[0]
        return tensor

    def walk(self, outputs: Iterable[str], stops: set[str], strict: bool = True) -> set[int] | None:
        """Original nodes between ``outputs`` and ``stops``; None if a foreign input is hit."""
        found: set[int] = set()
        seen: set[str] = set()
        stack = [t for t in outputs if t]
        while stack:
            t = stack.pop()
            if t in seen or t in stops or t in self.constants:
                continue
            seen.add(t)
            if t in self.inputs:
                if strict:
                    return None
                continue
            p = self.producer.get(t)
            if p is None or p in found:
                continue
            found.add(p)
            stack.extend(x for x in self.graph.node[p].input if x)
        return found


def _is_layout_node(node: onnx.NodeProto) -> bool:
    """A node ORT inserted to change layout or device, whose output has its input's value.

    A ReorderOutput with ``channels_last=1`` is not one: ORT puts it in place of a
    Transpose (NCHW to NHWC), so it computes that Transpose.
    """
    if node.op_type not in _VALUE_PRESERVING_OPS:
        return False
    return not any(a.name == "channels_last" and a.i for a in node.attribute)


def _is_nchwc_conv(node: onnx.NodeProto) -> bool:
    return node.op_type == "Conv" and node.domain == _NCHWC_DOMAIN


def _activation(node: onnx.NodeProto) -> str | None:
    for a in node.attribute:
        if a.name == "activation" and a.type == AttributeProto.STRING:
            return a.s.decode("utf-8", "replace") or None
    return None


def _has_sum_input(node: onnx.NodeProto) -> bool:
    return len(node.input) >= 4 and bool(node.input[3])


def _map(
    original: ModelProto, optimized: ModelProto
) -> tuple[dict[str, list[str] | None], list[str]]:
    orig = _OriginalIndex(original.graph)
    orig_nodes = orig.graph.node
    pg = optimized.graph
    pnodes = list(pg.node)
    pnames = node_names(pg, original.graph)
    p_consts = {t.name for t in pg.initializer} | {t.values.name for t in pg.sparse_initializer}
    p_graph_outputs = {vi.name for vi in pg.output}
    layout = [_is_layout_node(n) for n in pnodes]

    orig_by_name = {name: i for i, name in enumerate(orig.names)}

    def same_node(i: int) -> int | None:
        """The original node an optimized node keeps the name and op type of."""
        node = pnodes[i]
        j = orig_by_name.get(node.name) if node.name else None
        return j if j is not None and orig_nodes[j].op_type == node.op_type else None

    # 1. Exact aliases: optimized tensor -> original tensor.
    alias: dict[str, str] = {}
    for node in pnodes:
        for t in (*node.input, *node.output):
            if t and t in orig.tensors:
                alias[t] = t
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(pnodes):
            if not layout[i] or not node.input or not node.output:
                continue
            src, dst = node.input[0], node.output[0]
            if src in alias and dst not in alias:
                alias[dst] = alias[src]
                changed = True
            elif dst in alias and src not in alias:
                alias[src] = alias[dst]
                changed = True

    # Guessed output tensors, kept only when validated: what an NCHWc node was named after
    # (followed through the Add and activation an NCHWc Conv folded in after its naming),
    # or the outputs of the original node a node keeps the name and op type of.
    guess: dict[str, str] = {}
    for i, (node, name) in enumerate(zip(pnodes, pnames, strict=True)):
        out = node.output[0] if node.output else ""
        m = _NCHWC_NAME.match(name)
        if m and out and out not in alias:
            base = m.group(1)
            bases = [base, base[: -len("_bn")]] if base.endswith("_bn") else [base]
            named = next((b for b in bases if b in orig.producer), None)
            if named is not None and _is_nchwc_conv(node):
                named = orig.nchwc_conv_output(named, _has_sum_input(node), _activation(node))
            if named is not None:
                guess[out] = named
            continue
        j = same_node(i)
        if j is not None:
            for t, ot in zip(node.output, orig_nodes[j].output, strict=False):
                if t and ot and t not in alias:
                    guess[t] = ot

    # 2. Group nodes linked by tensors unknown to the original graph.
    parent = list(range(len(pnodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer: dict[str, int] = {}
    for i, node in enumerate(pnodes):
        for t in node.output:
            if t:
                producer.setdefault(t, i)
    consumed: set[str] = set()
    for i, node in enumerate(pnodes):
        for t in node.input:
            if not t:
                continue
            consumed.add(t)
            p = producer.get(t)
            if p is not None and t not in alias and t not in p_consts:
                parent[find(i)] = find(p)
    groups: dict[int, list[int]] = {}
    for i in range(len(pnodes)):
        groups.setdefault(find(i), []).append(i)

    def known(t: str) -> str | None:
        return alias.get(t) or guess.get(t)

    def node_claim(i: int) -> set[int] | None:
        node = pnodes[i]
        outs = [t for t in node.output if t]
        needed = [t for t in outs if t in consumed or t in p_graph_outputs]
        mapped = [known(t) for t in outs]
        if not any(mapped) or any(not known(t) for t in needed):
            return None
        if _is_nchwc_conv(node) and mapped[0]:
            # What the node computes last must be its activation, and only then one.
            op = orig.producer_op(mapped[0])
            act = _activation(node)
            if (op != act) if act is not None else (op in _ACTIVATION_OPS):
                return None
        stops = {known(t) or "" for t in node.input if t} - {""}
        return orig.walk((k for k in mapped if k), stops)

    def group_claims(compute: list[int], region: set[int]) -> dict[int, set[int]] | None:
        """Per-node claims if they partition ``region`` exactly, else None."""
        result: dict[int, set[int]] = {}
        union: set[int] = set()
        for i in compute:
            c = node_claim(i)
            if c is None or union & c:
                return None
            union |= c
            result[i] = c
        return result if union == region else None

    def sole_worker(compute: list[int], region: set[int]) -> dict[int, set[int]] | None:
        """The whole region for the one node of the group that is not a mere reshape."""
        kept = {i: j for i in compute if (j := same_node(i)) is not None}
        workers = [i for i in compute if i not in kept and pnodes[i].op_type not in _RESHAPE_OPS]
        if len(workers) != 1:
            return None
        result = {i: {j} for i, j in kept.items()}
        result[workers[0]] = region - set(kept.values())
        return result

    def fits_op(i: int, claim: set[int]) -> bool:
        """Whether the original nodes of ``claim`` are what node ``i``'s op computes."""
        node = pnodes[i]
        ops = [orig_nodes[j].op_type for j in claim]
        if not _is_nchwc_conv(node):
            wanted = {node.op_type}
            if node.domain == _NCHWC_DOMAIN and node.op_type == "Upsample":
                wanted = {"Upsample", "Resize"}
            elif node.op_type == "ReorderOutput" and not layout[i]:
                wanted = {"Transpose"}
            return len(ops) == 1 and ops[0] in wanted
        convs = ops.count("Conv")
        if convs != 1 and not (convs == 0 and ops.count("BatchNormalization") == 1):
            return False
        allowed = _CONV_FOLDED_OPS | _ACTIVATION_OPS | _PASS_THROUGH_OPS | {"Conv"}
        if any(op not in allowed for op in ops):
            return False
        sums = sum(
            1
            for j in claim
            if orig_nodes[j].op_type in _SUM_OPS and orig.sum_inputs(orig_nodes[j]) >= 2
        )
        return sums == (1 if _has_sum_input(node) else 0)

    def lone_claim(i: int, region: set[int]) -> set[int] | None:
        """Node ``i``'s claim when the node alone shows it whole (rule 3, last part)."""
        node = pnodes[i]
        sources = [known(t) for t in node.input if t and t not in p_consts]
        if not all(sources):
            return None
        c = node_claim(i)
        if not c or not c <= region:
            return None
        made = {t for j in c for t in orig_nodes[j].output if t}
        used = {t for j in c for t in orig_nodes[j].input if t} - made
        if not {s for s in sources if s} <= used:
            return None  # an input it has is not one it needs
        results = {k for t in node.output if t and (k := known(t))}
        for t in made - results:
            if t in orig.outputs or any(k not in c for k in orig.consumers.get(t, [])):
                return None  # something it computes inside is used outside it
        return c if fits_op(i, c) else None

    def lone_claims(compute: list[int], region: set[int]) -> dict[int, set[int]]:
        found = {i: c for i in compute if (c := lone_claim(i, region)) is not None}
        count: dict[int, int] = {}
        for c in found.values():
            for j in c:
                count[j] = count.get(j, 0) + 1
        return {i: c for i, c in found.items() if all(count[j] == 1 for j in c)}

    claims: dict[int, set[int]] = {}
    uncertain: set[int] = set()
    for members in groups.values():
        compute = [i for i in members if not layout[i]]
        if not compute:
            continue
        group_out = {alias[t] for i in members for t in pnodes[i].output if t in alias}
        group_in = {alias[t] for i in members for t in pnodes[i].input if t in alias}
        region = orig.walk(group_out, group_in)
        found = None
        if region is not None:
            found = group_claims(compute, region) or sole_worker(compute, region)
        if found is not None:
            claims.update(found)
            continue
        if region is not None:
            claims.update(lone_claims(compute, region))
        guessed = {guess[t] for i in members for t in pnodes[i].output if t in guess}
        uncertain |= orig.walk(group_out | guessed, group_in, strict=False) or set()

    mapping: dict[str, list[str] | None] = {}
    taken = {j for c in claims.values() for j in c}
    claimed: set[int] = set()
    for i, name in enumerate(pnames):
        c = claims.get(i)
        if c is None and not layout[i]:
            j = same_node(i)
            c = None if j is None or j in taken else {j}
        if c is None:
            mapping[name] = None
            continue
        c = {
            j for j in c if orig_nodes[j].op_type not in _PASS_THROUGH_OPS or orig.names[j] == name
        }
        claimed |= c
        mapping[name] = [orig.names[j] for j in sorted(c)]
    eliminated = [
        orig.names[j] for j in range(len(orig_nodes)) if j not in claimed and j not in uncertain
    ]
    return mapping, eliminated
