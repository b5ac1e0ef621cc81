"""Work (FLOPs) and memory traffic (bytes) of each ONNX node, from its inferred shapes.

A multiply-add counts as 2 FLOPs. Bytes are the node's distinct input tensors read once
(initializers counted apart as weights) plus its outputs written once, at their element
size. Formulas per operator family are in docs/metrics.md ("Work and traffic per
operator"); an operator without a formula gets its bytes and ``flops`` = null, never a
guess. Any unknown dimension makes the affected figure null, with a note.

Example::

    costs = node_costs(nodes, edges)        # graph_nodes / graph_edges of a bundle
    cost_summary(costs)["flops"]
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aaco.session.schema import OP_COSTS

__all__ = ["ELEMENTWISE_FLOPS", "cost_summary", "model_costs", "node_costs"]

Shape = list[Any]

#: bytes per element of the ONNX element types (graph_nodes spells them lower-case)
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "float16": 2, "bfloat16": 2,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
    "uint64": 8, "bool": 1, "float8e4m3fn": 1, "float8e4m3fnuz": 1, "float8e5m2": 1,
    "float8e5m2fnuz": 1, "complex64": 8, "complex128": 16,
}  # fmt: skip

#: FLOPs per output element of elementwise operators (documented constants; transcendental
#: functions count as one operation each, as in most FLOP counters; Gelu/Erf and friends
#: count the operations of their usual polynomial/tanh formulations)
ELEMENTWISE_FLOPS: dict[str, int] = {
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Neg": 1, "Abs": 1, "Relu": 1, "Max": 1,
    "Min": 1, "Sum": 1, "Mean": 1, "Sqrt": 1, "Reciprocal": 1, "Exp": 1, "Log": 1,
    "Floor": 1, "Ceil": 1, "Round": 1, "Sign": 1, "Equal": 1, "Less": 1, "Greater": 1,
    "LessOrEqual": 1, "GreaterOrEqual": 1, "Not": 1, "And": 1, "Or": 1, "Xor": 1,
    "Where": 1, "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "Pow": 1, "Mod": 1, "IsNaN": 1,
    "Sigmoid": 4, "Tanh": 4, "Erf": 4, "Softplus": 3, "Softsign": 3, "Elu": 3, "Selu": 4,
    "Celu": 4, "HardSigmoid": 3, "HardSwish": 4, "Mish": 8, "Gelu": 8, "FastGelu": 8,
    "BiasGelu": 9, "QuickGelu": 5, "Swish": 5, "Sin": 1, "Cos": 1, "Tan": 1, "Atan": 1,
    "BitShift": 1, "Affine": 2, "ThresholdedRelu": 1, "Shrink": 2,
    "Cast": 0, "CastLike": 0, "DequantizeLinear": 2, "QuantizeLinear": 3,
    "DynamicQuantizeLinear": 4, "BiasAdd": 1, "BiasDropout": 1, "Dropout": 0,
}  # fmt: skip

#: per-element constants of normalization / softmax (see docs/metrics.md)
NORM_FLOPS = {
    "BatchNormalization": 2,  # inference: scale and shift, statistics folded
    "InstanceNormalization": 8,
    "LayerNormalization": 8,  # mean, variance (2), subtract, divide/rsqrt, scale, shift
    "SkipLayerNormalization": 9,  # + the residual add
    "SkipSimplifiedLayerNormalization": 6,
    "SimplifiedLayerNormalization": 5,  # RMSNorm: square, mean, rsqrt, normalize, scale
    "RMSNormalization": 5,
    "GroupNormalization": 8,
    "LpNormalization": 3,
    "MeanVarianceNormalization": 6,
    "EmbedLayerNormalization": 9,
}
SOFTMAX_FLOPS = {"Softmax": 5, "LogSoftmax": 6}  # max, subtract, exp, sum, divide (+ log)

REDUCTIONS = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "CumSum",
}  # fmt: skip
POOLS = {"MaxPool", "AveragePool", "LpPool", "QLinearAveragePool"}
#: operators that only describe a tensor differently: 0 FLOPs and 0 bytes moved
METADATA_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size",
                 "Constant", "ConstantOfShape"}  # fmt: skip
DATA_MOVEMENT = {
    "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
    "Expand", "Tile", "Pad", "ScatterND", "ScatterElements", "Scatter", "DepthToSpace",
    "SpaceToDepth", "Resize", "Upsample", "Compress", "NonZero", "TopK", "OneHot", "Range",
    "ReverseSequence", "Trilu", "ReorderInput", "ReorderOutput", "Col2Im", "GridSample",
}  # fmt: skip
GEMMS = {"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "MatMulNBits",
         "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "FusedGemm"}  # fmt: skip
CONVS = {"Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv"}


def _numel(shape: Shape | None) -> int | None:
    if shape is None:
        return None
    n = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return None
        n *= d
    return n


def _nbytes(dtype: str | None, shape: Shape | None) -> int | None:
    size = DTYPE_BYTES.get(dtype or "")
    n = _numel(shape)
    return None if size is None or n is None else n * size


class _Node:
    """One graph_nodes row with parsed shapes and attributes."""

    def __init__(self, row: dict[str, Any], weights: set[str]) -> None:
        self.name: str = row["node_name"]
        self.op: str = row["op_type"]
        self.domain: str = row["domain"] or ""
        self.inputs: list[str] = list(row["inputs"] or [])
        self.outputs: list[str] = list(row["outputs"] or [])
        self.in_shapes: list[Shape | None] = json.loads(row["input_shapes"] or "[]")
        self.out_shapes: list[Shape | None] = json.loads(row["output_shapes"] or "[]")
        self.in_dtypes: list[str | None] = list(row["input_dtypes"] or [])
        self.out_dtypes: list[str | None] = list(row["output_dtypes"] or [])
        self.attrs: dict[str, Any] = json.loads(row["attributes"] or "{}")
        self.weights = weights

    def shape(self, i: int, out: bool = False) -> Shape | None:
        shapes = self.out_shapes if out else self.in_shapes
        return shapes[i] if i < len(shapes) else None

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and bool(self.inputs[i])

    def dtype(self) -> str | None:
        for d in self.in_dtypes:
            if d and (d.startswith("float") or d in ("double", "bfloat16")):
                return d
        return next((d for d in self.in_dtypes if d), None) or next(
            (d for d in self.out_dtypes if d), None
        )


class _Unknown(Exception):
    """A FLOP formula needed a dimension that is not known."""


def _dims(shape: Shape | None) -> list[int]:
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        raise _Unknown
    return [int(d) for d in shape]


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs) if xs else 1


def _out_numel(n: _Node, i: int = 0) -> int:
    return _prod(_dims(n.shape(i, out=True)))


# --- formulas: each returns (flops, macs or None, note or None) ---------------------------

Formula = tuple[int, int | None, str | None]


def _conv(n: _Node) -> Formula:
    x, w, y = _dims(n.shape(0)), _dims(n.shape(1)), _dims(n.shape(0, out=True))
    group = int(n.attrs.get("group", 1))
    if n.op == "NhwcConv":  # channels last
        cout, cin, spatial_out = y[-1], x[-1], y[1:-1]
    else:
        cout, cin, spatial_out = y[1], x[1], y[2:]
    kernel = w[2:]
    macs = y[0] * cout * _prod(spatial_out) * (cin // group) * _prod(kernel)
    flops = 2 * macs
    if n.has_input(2) and n.op in ("Conv", "FusedConv", "NhwcConv"):
        flops += _prod(y)  # bias add
    note = None
    if n.op == "FusedConv" and n.attrs.get("activation"):
        flops += _prod(y) * ELEMENTWISE_FLOPS.get(str(n.attrs["activation"]), 1)
        note = f"fused activation {n.attrs['activation']} counted"
    return flops, macs, note


def _conv_transpose(n: _Node) -> Formula:
    x, w = _dims(n.shape(0)), _dims(n.shape(1))
    # weight [Cin, Cout/group, k...]: every input element scatters into Cout/group x k
    macs = x[0] * x[1] * _prod(x[2:]) * w[1] * _prod(w[2:])
    flops = 2 * macs
    if n.has_input(2):
        flops += _out_numel(n)
    return flops, macs, None


def _matmul(n: _Node) -> Formula:
    a, b = _dims(n.shape(0)), _dims(n.shape(1))
    if n.op in ("Gemm", "QGemm", "FusedGemm"):
        ta, tb = int(n.attrs.get("transA", 0)), int(n.attrs.get("transB", 0))
        m, k = (a[1], a[0]) if ta else (a[0], a[1])
        nn = b[0] if tb else b[1]
        macs = m * k * nn
        flops = 2 * macs
        if n.has_input(2):
            flops += 2 * m * nn if n.attrs.get("beta", 1.0) != 1.0 else m * nn
        if n.attrs.get("alpha", 1.0) != 1.0:
            flops += m * nn
        return flops, macs, None
    if n.op == "MatMulNBits":
        kk, nn = int(n.attrs["K"]), int(n.attrs["N"])
        m = _prod(a[:-1])
        macs = m * kk * nn
        return 2 * macs, macs, "4-bit weights dequantized on the fly (not counted)"
    y = _dims(n.shape(0, out=True))
    k = a[-1]
    macs = _prod(y) * k  # every output element is a dot product of length K
    flops = 2 * macs
    note = None
    if n.op == "FusedMatMul" and n.attrs.get("alpha", 1.0) != 1.0:
        flops += _prod(y)
    if n.op in ("QLinearMatMul", "MatMulInteger", "DynamicQuantizeMatMul"):
        note = "integer multiply-adds"
    return flops, macs, note


def _attention(n: _Node) -> Formula:
    """com.microsoft Attention (fused QKV projection) and MultiHeadAttention."""
    x = _dims(n.shape(0))
    heads = int(n.attrs.get("num_heads", 1))
    if n.op == "Attention":
        b, s, hidden_in = x
        w = _dims(n.shape(1))
        qkv = w[1]
        proj = b * s * hidden_in * qkv
        hidden = qkv // 3
        total_s = s
        scores = b * s * total_s * hidden  # Q K^T over all heads
        context = b * s * total_s * hidden  # P V
        softmax = b * heads * s * total_s * SOFTMAX_FLOPS["Softmax"] // 2
        macs = proj + scores + context
        return 2 * macs + 2 * softmax, macs, "QKV projection + scores + softmax + context"
    # MultiHeadAttention: Q [B, S, H], K [B, L, H] (projections done outside)
    b, s, hidden = x
    k = _dims(n.shape(1))
    total_s = k[1]
    macs = 2 * b * s * total_s * hidden
    softmax = b * heads * s * total_s * SOFTMAX_FLOPS["Softmax"]
    return 2 * macs + softmax, macs, "scores + softmax + context"


def _elementwise(n: _Node) -> Formula:
    per = ELEMENTWISE_FLOPS[n.op]
    note = None
    if n.op in ("Sigmoid", "Tanh", "Erf", "Gelu", "FastGelu", "BiasGelu", "Mish", "Swish",
                "QuickGelu", "Softplus", "Elu", "Selu", "HardSwish"):  # fmt: skip
        note = f"{per} FLOPs per element assumed for {n.op}"
    return _out_numel(n) * per, None, note


def _reduction(n: _Node) -> Formula:
    return _prod(_dims(n.shape(0))), None, None


def _pool(n: _Node) -> Formula:
    kernel = n.attrs.get("kernel_shape")
    if not isinstance(kernel, list):
        raise _Unknown
    return _out_numel(n) * _prod([int(k) for k in kernel]), None, None


def _norm(n: _Node) -> Formula:
    per = NORM_FLOPS[n.op]
    return _prod(_dims(n.shape(0))) * per, None, f"{per} FLOPs per element"


def _softmax(n: _Node) -> Formula:
    per = SOFTMAX_FLOPS[n.op]
    return _prod(_dims(n.shape(0))) * per, None, f"{per} FLOPs per element"


def _formula(n: _Node) -> tuple[str, Callable[[_Node], Formula] | None]:
    op = n.op
    if op in CONVS:
        return "conv", _conv
    if op in ("ConvTranspose",):
        return "conv", _conv_transpose
    if op in GEMMS:
        return "gemm", _matmul
    if op in ("Attention", "MultiHeadAttention") and n.domain == "com.microsoft":
        return "attention", _attention
    if op in NORM_FLOPS:
        return "normalization", _norm
    if op in SOFTMAX_FLOPS:
        return "softmax", _softmax
    if op in REDUCTIONS:
        return "reduction", _reduction
    if op in POOLS:
        return "pooling", _pool
    if op in METADATA_ONLY or op in DATA_MOVEMENT:
        return "data_movement", None
    if op in ELEMENTWISE_FLOPS:
        return "elementwise", _elementwise
    return "unknown", None


def _cost_row(n: _Node) -> dict[str, Any]:
    notes: list[str] = []
    # bytes: distinct inputs once (weights apart), outputs once
    in_bytes: int | None = 0
    w_bytes: int | None = 0
    seen: set[str] = set()
    for i, t in enumerate(n.inputs):
        if not t or t in seen:
            continue
        seen.add(t)
        dt = n.in_dtypes[i] if i < len(n.in_dtypes) else None
        b = _nbytes(dt, n.shape(i))
        if t in n.weights:
            w_bytes = None if b is None or w_bytes is None else w_bytes + b
        else:
            in_bytes = None if b is None or in_bytes is None else in_bytes + b
    out_bytes: int | None = 0
    for i, t in enumerate(n.outputs):
        if not t:
            continue
        dt = n.out_dtypes[i] if i < len(n.out_dtypes) else None
        b = _nbytes(dt, n.shape(i, out=True))
        out_bytes = None if b is None or out_bytes is None else out_bytes + b
    model, fn = _formula(n)
    flops: int | None = None
    macs: int | None = None
    if n.op in METADATA_ONLY:
        flops, in_bytes, w_bytes, out_bytes = 0, 0, 0, 0
        notes.append("metadata only: no data moved")
    elif model == "data_movement":
        flops = 0
    elif fn is not None:
        try:
            flops, macs, note = fn(n)
            if note:
                notes.append(note)
        except (_Unknown, IndexError, KeyError, ValueError, TypeError, ZeroDivisionError):
            notes.append("FLOPs unknown: a shape or attribute is not known")
    else:
        notes.append(f"no FLOP formula for {n.domain + '.' if n.domain else ''}{n.op}")
    parts = (in_bytes, w_bytes, out_bytes)
    total = None if any(p is None for p in parts) else sum(p or 0 for p in parts)
    if total is None:
        notes.append("bytes unknown: a tensor has an unknown dimension or type")
    return {
        "node_name": n.name,
        "op_type": n.op,
        "domain": n.domain,
        "dtype": n.dtype(),
        "cost_model": model,
        "flops": flops,
        "macs": macs,
        "input_bytes": in_bytes,
        "weight_bytes": w_bytes,
        "output_bytes": out_bytes,
        "bytes": total,
        "intensity": flops / total if flops is not None and total else None,
        "flops_known": fn is not None or model == "data_movement",
        "note": "; ".join(notes) or None,
    }


def node_costs(nodes: pa.Table, edges: pa.Table | None = None, graph: str = "original") -> pa.Table:
    """OP_COSTS rows for the nodes of ``graph`` (``original`` or ``optimized``).

    ``edges`` tells which inputs are initializers (weights); without it every input counts
    as an activation.
    """
    sel = nodes.filter(pc.equal(nodes.column("graph"), graph))
    weights: set[str] = set()
    if edges is not None and edges.num_rows:
        init = edges.filter(pc.equal(edges.column("kind"), "initializer"))
        weights = set(init.column("tensor").to_pylist())
    rows = [_cost_row(_Node(r, weights)) for r in sel.to_pylist()]
    return OP_COSTS.from_rows(rows) if rows else OP_COSTS.empty()


def cost_summary(costs: pa.Table) -> dict[str, Any]:
    """Totals: FLOPs, MACs, bytes, nodes, nodes without a FLOP formula, FLOPs per family."""
    rows = costs.to_pylist()
    by_model: dict[str, int] = {}
    for r in rows:
        if r["flops"] is not None:
            by_model[r["cost_model"]] = by_model.get(r["cost_model"], 0) + r["flops"]
    unknown = [r for r in rows if r["flops"] is None]
    return {
        "nodes": len(rows),
        "flops": sum(r["flops"] or 0 for r in rows),
        "macs": sum(r["macs"] or 0 for r in rows),
        "bytes": sum(r["bytes"] or 0 for r in rows),
        "nodes_flops_unknown": len(unknown),
        "op_types_flops_unknown": sorted({r["op_type"] for r in unknown}),
        "nodes_bytes_unknown": sum(1 for r in rows if r["bytes"] is None),
        "flops_by_cost_model": dict(sorted(by_model.items(), key=lambda kv: -kv[1])),
    }


def model_costs(model_path: Path, input_shapes: dict[str, list[int]] | None = None) -> pa.Table:
    """Costs of an ``.onnx`` file's nodes (shape inference with ``input_shapes``)."""
    from aaco.analysis.graph import extract_graph, load_model_proto

    info = extract_graph(load_model_proto(Path(model_path)), input_shapes)
    return node_costs(info.nodes, info.edges)
