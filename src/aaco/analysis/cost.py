"""Work (FLOPs) and memory traffic (bytes) of each ONNX node, from its shapes.

A multiply-add counts as 2 FLOPs; integer arithmetic (quantized operators) and comparisons
count as operations too. Bytes are the node's distinct input tensors read once
(initializers counted apart as weights) plus its outputs written once, at their element
size. Formulas per operator family are in docs/metrics.md ("Work and traffic per
operator"); an operator without a formula gets its bytes and ``flops`` = null, never a
guess. Any unknown dimension or attribute makes the affected figure null, with a note.

Two sources of shapes: the model's graph after ONNX shape inference (:func:`node_costs`), and,
for the nodes ONNX Runtime actually executed (its optimized graph, fused and contrib
operators, nodes inside If/Loop/Scan bodies), the input and output shapes its profile
recorded (:func:`executed_node_costs`). :func:`work_coverage` tells how much of the profiled
operator time has known work.

Example::

    costs = node_costs(nodes, edges)        # graph_nodes / graph_edges of a bundle
    cost_summary(costs)["flops"]
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.ops import distinct_codes, exclusive_ns
from aaco.session.schema import OP_COSTS

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto

__all__ = [
    "CONTROL_FLOW",
    "ELEMENTWISE_FLOPS",
    "NO_FORMULA",
    "cost_family",
    "cost_summary",
    "executed_node_costs",
    "model_costs",
    "node_costs",
    "work_coverage",
]

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
#: count the operations of their usual polynomial/tanh formulations; quantized operators
#: count their reference semantics: dequantize inputs, compute in float, quantize output)
ELEMENTWISE_FLOPS: dict[str, int] = {
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Neg": 1, "Abs": 1, "Relu": 1, "Max": 1,
    "Min": 1, "Sum": 1, "Mean": 1, "Sqrt": 1, "Reciprocal": 1, "Exp": 1, "Log": 1,
    "Floor": 1, "Ceil": 1, "Round": 1, "Sign": 1, "Equal": 1, "Less": 1, "Greater": 1,
    "LessOrEqual": 1, "GreaterOrEqual": 1, "Not": 1, "And": 1, "Or": 1, "Xor": 1,
    "Where": 1, "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "Pow": 1, "Mod": 1, "IsNaN": 1,
    "IsInf": 1, "Sigmoid": 4, "Tanh": 4, "Erf": 4, "Softplus": 3, "Softsign": 3, "Elu": 3,
    "Selu": 4, "Celu": 4, "HardSigmoid": 3, "HardSwish": 4, "Mish": 8, "Gelu": 8,
    "FastGelu": 8, "BiasGelu": 9, "QuickGelu": 5, "Swish": 5, "Sin": 1, "Cos": 1, "Tan": 1,
    "Asin": 1, "Acos": 1, "Atan": 1, "Sinh": 1, "Cosh": 1, "Asinh": 1, "Acosh": 1,
    "Atanh": 1, "BitShift": 1, "BitwiseAnd": 1, "BitwiseOr": 1, "BitwiseXor": 1,
    "BitwiseNot": 1, "Affine": 2, "ThresholdedRelu": 1, "Shrink": 2, "ScaledTanh": 6,
    "ParametricSoftplus": 5, "ImageScaler": 2, "Scale": 1, "ScaledSiLU": 6,
    "Cast": 0, "CastLike": 0, "DequantizeLinear": 2, "QuantizeLinear": 3,
    "DynamicQuantizeLinear": 4, "BiasAdd": 2, "BiasDropout": 1, "Dropout": 0,
    "QLinearAdd": 8, "QLinearMul": 8, "QLinearLeakyRelu": 7, "QLinearSigmoid": 9,
    "QLinearWhere": 8, "QLinearConcat": 5, "GatherBlockQuantized": 2, "GatherPacked": 2,
    "Binarizer": 1, "Imputer": 1, "Scaler": 2, "GatedAdd": 2,
    "HannWindow": 5, "HammingWindow": 5, "BlackmanWindow": 9, "MelWeightMatrix": 4,
}  # fmt: skip
#: transcendental or composite functions whose constant is a convention (said in ``note``)
_ASSUMED = {
    "Sigmoid", "Tanh", "Erf", "Gelu", "FastGelu", "BiasGelu", "Mish", "Swish", "QuickGelu",
    "Softplus", "Elu", "Selu", "HardSwish", "Celu", "ScaledTanh", "ParametricSoftplus",
    "ScaledSiLU", "QLinearSigmoid", "HannWindow", "HammingWindow", "BlackmanWindow",
}  # fmt: skip
#: variadic operators: (inputs - 1) operations per output element (Mean: one more, the divide)
_VARIADIC = {"Sum", "Max", "Min", "Mean"}

#: per-element constants of normalization / softmax (see docs/metrics.md)
NORM_FLOPS = {
    "BatchNormalization": 2,  # inference: scale and shift, statistics folded
    "InstanceNormalization": 8,
    "LayerNormalization": 8,  # mean, variance (2), subtract, divide/rsqrt, scale, shift
    "SkipLayerNormalization": 9,  # + the residual add
    "SkipSimplifiedLayerNormalization": 6,
    "SimplifiedLayerNormalization": 5,  # RMSNorm: square, mean, rsqrt, normalize, scale
    "RMSNormalization": 5,
    "BranchwiseRMSNorm": 5,
    "GroupNormalization": 8,
    "LpNormalization": 3,
    "MeanVarianceNormalization": 6,
    "EmbedLayerNormalization": 9,  # per output element: 3 gathers summed (2) + LayerNorm
    "QEmbedLayerNormalization": 15,  # + dequantizing the 3 gathered embeddings (2 each)
}
_NORM_ON_OUTPUT = {"EmbedLayerNormalization", "QEmbedLayerNormalization"}
SOFTMAX_FLOPS = {
    "Softmax": 5,  # max, subtract, exp, sum, divide
    "LogSoftmax": 6,  # + log
    "BiasSoftmax": 6,  # + the bias add
    "QLinearSoftmax": 10,  # dequantize 2 + softmax 5 + quantize 3
}
#: post_transform of ai.onnx.ml classifiers/regressors, per output score (TreeEnsemble,
#: ai.onnx.ml 5, numbers them 0-4 in this order)
_POST_TRANSFORM = {"NONE": 0, "SOFTMAX": 5, "LOGISTIC": 4, "SOFTMAX_ZERO": 5, "PROBIT": 4}


def _post_flops(value: Any) -> int:
    names = list(_POST_TRANSFORM)
    key = names[value] if isinstance(value, int) and 0 <= value < len(names) else str(value)
    if key not in _POST_TRANSFORM:
        raise _Unknown
    return _POST_TRANSFORM[key]


REDUCTIONS = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "CumSum", "CumProd", "Hardmax",
    "NonZero", "Col2Im",
}  # fmt: skip
POOLS = {"MaxPool", "AveragePool", "LpPool", "QLinearAveragePool", "NhwcMaxPool",
         "MaxpoolWithMask"}  # fmt: skip
#: operators that only describe a tensor differently: 0 FLOPs and 0 bytes moved
METADATA_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size",
                 "Constant", "ConstantOfShape", "ExpandDims", "Optional",
                 "OptionalGetElement", "OptionalHasElement"}  # fmt: skip
#: operators that move or select data without arithmetic: 0 FLOPs, their bytes
DATA_MOVEMENT = {
    "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
    "Expand", "Tile", "Pad", "ScatterND", "ScatterElements", "Scatter", "DepthToSpace",
    "SpaceToDepth", "Compress", "OneHot", "Range", "ReverseSequence", "Trilu",
    "ReorderInput", "ReorderOutput", "BitCast", "ConcatFromSequence", "Crop", "DynamicSlice",
    "EyeLike", "MaxUnpool", "MemcpyFromHost", "MemcpyToHost", "SequenceAt",
    "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
    "SequenceLength", "SplitToSequence", "TensorScatter", "UnfoldTensor", "ZipMap",
    "ArrayFeatureExtractor", "CastMap", "CategoryMapper", "DictVectorizer",
    "FeatureVectorizer", "LabelEncoder", "OneHotEncoder", "RegexFullMatch", "StringConcat",
    "StringNormalizer", "StringSplit", "Tokenizer", "BifurcationDetector", "SampleOp",
}  # fmt: skip
#: operators that run subgraphs: their own work is orchestration (0 FLOPs); ORT profiles
#: the subgraph's nodes as their own events, nested inside the parent's time
CONTROL_FLOW = {"If", "Loop", "Scan", "BeamSearch", "GreedySearch", "Sampling",
                "WhisperBeamSearch"}  # fmt: skip
GEMMS = {"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "MatMulNBits",
         "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "FusedGemm",
         "TransposeMatMul", "MatMulInteger16", "MatMulBnb4", "MatMulFpQ4"}  # fmt: skip
CONVS = {"Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv"}
RNNS = {"LSTM", "GRU", "RNN", "DynamicQuantizeLSTM"}
ATTENTIONS = {"Attention", "MultiHeadAttention", "QAttention", "GroupQueryAttention",
              "DecoderMaskedMultiHeadAttention"}  # fmt: skip
RESIZES = {"Resize", "Upsample", "GridSample", "CropAndResize", "RoiAlign"}
#: operators that compute in integers (quantized): their dtype is the integer type, so the
#: roofline compares them with the int8 ceiling when the device has one
INTEGER_COMPUTE = {
    "MatMulInteger", "MatMulInteger16", "QLinearMatMul", "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat", "QGemm", "ConvInteger", "QLinearConv", "QAttention",
    "DynamicQuantizeLSTM", "QLinearAdd", "QLinearMul", "QLinearLeakyRelu", "QLinearSigmoid",
    "QLinearWhere", "QLinearConcat", "QLinearSoftmax", "QLinearAveragePool",
    "QLinearGlobalAveragePool", "QEmbedLayerNormalization",
}  # fmt: skip
#: operators ONNX Runtime's CPU provider runs for which AACO defines no FLOP count, and why
NO_FORMULA: dict[str, str] = {
    "NonMaxSuppression": "how many boxes are compared depends on the scores (data)",
    "MaxRoiPool": "the pooling windows are the RoIs, which are data",
    "RandomNormal": "random-number generation has no FLOP count",
    "RandomNormalLike": "random-number generation has no FLOP count",
    "RandomUniform": "random-number generation has no FLOP count",
    "RandomUniformLike": "random-number generation has no FLOP count",
    "Multinomial": "random-number generation has no FLOP count",
    "TfIdfVectorizer": "n-gram matching work depends on the data",
    "SparseAttention": "the block-sparse layout is data",
    "SparseToDenseMatMul": "the number of non-zeros is data",
    "MurmurHash3": "hashing is integer bit manipulation, not counted",
    "NGramHashMapping": "hashing is integer bit manipulation, not counted",
    "VarlenNGramHashMapping": "hashing is integer bit manipulation, not counted",
    "NGramRepeatBlock": "n-gram matching work depends on the data",
    "AttnLSTM": "no formula yet (an LSTM with an attention wrapper; rare)",
    "WordConvEmbedding": "no formula yet (character convolution embedding; rare)",
    "LinearAttention": "no formula yet (recurrent linear attention, chunked in ORT)",
    "GatedDeltaNet": "no formula yet (recurrent gated delta rule, chunked in ORT)",
    "EngramGate": "no formula yet",
    "MoEGroupRouter": "expert selection is data-dependent",
    "VarlenCausalConvWithState": "the sequence lengths are data",
}


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


class _Unknown(Exception):
    """A FLOP formula needed a dimension or attribute that is not known."""


_MISSING = object()


class _Node:
    """One graph_nodes-like row with parsed shapes and attributes.

    ``attrs_known`` is False for a node known only from a profile: its attributes are not
    recorded, so a formula asking for one gets :class:`_Unknown` instead of the default.
    """

    def __init__(self, row: Mapping[str, Any], weights: set[str]) -> None:
        self.name: str = row["node_name"]
        self.op: str = row["op_type"]
        self.domain: str = row.get("domain") or ""
        self.inputs: list[str] = list(row.get("inputs") or [])
        self.outputs: list[str] = list(row.get("outputs") or [])
        self.in_shapes: list[Shape | None] = json.loads(row.get("input_shapes") or "[]")
        self.out_shapes: list[Shape | None] = json.loads(row.get("output_shapes") or "[]")
        self.in_dtypes: list[str | None] = list(row.get("input_dtypes") or [])
        self.out_dtypes: list[str | None] = list(row.get("output_dtypes") or [])
        attrs = row.get("attributes")
        self.attrs_known = attrs is not None
        self.attrs: dict[str, Any] = json.loads(attrs) if attrs else {}
        self.weights = weights

    def shape(self, i: int, out: bool = False) -> Shape | None:
        shapes = self.out_shapes if out else self.in_shapes
        return shapes[i] if i < len(shapes) else None

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and bool(self.inputs[i])

    def n_inputs(self) -> int:
        return sum(1 for t in self.inputs if t)

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        """The attribute's value; its ONNX default when absent from a known attribute set."""
        if name in self.attrs:
            return self.attrs[name]
        if default is _MISSING or not self.attrs_known:
            raise _Unknown
        return default

    def dtype(self) -> str | None:
        if self.op in INTEGER_COMPUTE:
            for d in (*self.in_dtypes, *self.out_dtypes):
                if d in ("int8", "uint8", "int16", "uint16", "int4", "uint4"):
                    return d
        for d in self.in_dtypes:
            if d and (d.startswith("float") or d in ("double", "bfloat16")):
                return d
        return next((d for d in self.in_dtypes if d), None) or next(
            (d for d in self.out_dtypes if d), None
        )


def _dims(shape: Shape | None) -> list[int]:
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        raise _Unknown
    return [int(d) for d in shape]


def _prod(xs: Iterable[int]) -> int:
    return math.prod(xs)


def _in_numel(n: _Node, i: int = 0) -> int:
    return _prod(_dims(n.shape(i)))


def _out_numel(n: _Node, i: int = 0) -> int:
    return _prod(_dims(n.shape(i, out=True)))


def _act_flops(name: Any) -> int:
    """FLOPs per element of a named activation (an ``activation`` attribute, LSTM's
    ``activations``); unknown names are unknown."""
    key = {"swish": "Swish", "silu": "Swish", "gelu": "Gelu", "tanh": "Tanh",
           "sigmoid": "Sigmoid", "relu": "Relu", "none": "Identity"}.get(
        str(name).lower(), str(name)
    )  # fmt: skip
    if key == "Identity":
        return 0
    if key not in ELEMENTWISE_FLOPS:
        raise _Unknown
    return ELEMENTWISE_FLOPS[key]


# --- formulas: each returns (flops, macs or None, note or None) ---------------------------

Formula = tuple[int, int | None, str | None]

#: (weight input, bias input, extra "Sum" input) of the convolutions
_CONV_INPUTS = {"QLinearConv": (3, 8, None), "FusedConv": (1, 2, 3), "Conv": (1, 2, 3),
                "NhwcConv": (1, 2, None), "ConvInteger": (1, None, None),
                "DeformConv": (1, 3, None)}  # fmt: skip


def _conv(n: _Node) -> Formula:
    """Every output element (any layout) is a dot product over C_in / group x kernel."""
    x, y = _dims(n.shape(0)), _dims(n.shape(0, out=True))
    w_i, b_i, sum_i = _CONV_INPUTS.get(n.op, (1, 2, None))
    w = n.shape(w_i)
    if w is not None and _numel(w) is not None:
        wd = _dims(w)
        cin_per_group, kernel = wd[1], wd[2:]  # [C_out, C_in / group, k...] in every layout
    else:  # the weight's shape is not recorded (an outer-scope initializer in a subgraph)
        kernel = [int(k) for k in n.attr("kernel_shape")]
        channels_last = n.op == "NhwcConv" or bool(int(n.attrs.get("channels_last", 0)))
        cin_per_group = (x[-1] if channels_last else x[1]) // int(n.attr("group", 1))
    out = _prod(y)
    macs = out * cin_per_group * _prod(kernel)
    flops = 2 * macs
    notes = []
    if b_i is not None and n.has_input(b_i):
        flops += out  # bias add
    if sum_i is not None and n.has_input(sum_i):
        flops += out  # NCHWc / FusedConv Sum input: the residual add folded in
    if n.op == "QLinearConv":
        flops += 3 * out  # requantize the int32 accumulators
        notes.append("integer multiply-adds; requantization 3 per output")
    elif n.op == "ConvInteger":
        notes.append("integer multiply-adds")
    if n.op == "DeformConv":
        # every sampled input value is a bilinear interpolation (7) of 4 neighbours, times
        # the modulation mask when given (1)
        per = 7 + (1 if n.has_input(4) else 0)
        flops += x[0] * x[1] * _prod(y[2:]) * _prod(kernel) * per
        notes.append(f"bilinear sampling {per} per sampled value")
    act = ""
    if n.op == "FusedConv" or (n.op == "Conv" and n.domain == "com.microsoft.nchwc"):
        act = n.attr("activation", "")
    elif n.op == "Conv" and not n.attrs_known and n.name.endswith("_nchwc"):
        raise _Unknown  # an NCHWc Conv (ORT's naming) whose fused activation is not known
    if act:
        flops += out * _act_flops(act)
        notes.append(f"fused activation {act} counted")
    return flops, macs, "; ".join(notes) or None


def _conv_transpose(n: _Node) -> Formula:
    x, w = _dims(n.shape(0)), _dims(n.shape(1))
    # weight [Cin, Cout/group, k...]: every input element scatters into Cout/group x k
    macs = x[0] * x[1] * _prod(x[2:]) * w[1] * _prod(w[2:])
    flops = 2 * macs
    if n.has_input(2):
        flops += _out_numel(n)
    return flops, macs, None


def _causal_conv(n: _Node) -> Formula:
    """CausalConvWithState: depthwise, weight [C, 1, k...]; one tap per kernel element."""
    w = _dims(n.shape(1))
    out = _out_numel(n)
    macs = out * _prod(w[2:])
    flops = 2 * macs + (out if n.has_input(2) else 0)
    act = n.attr("activation", "none")
    flops += out * _act_flops(act)
    return flops, macs, None


def _matmul_k(n: _Node, a: list[int]) -> int:
    if len(a) == 1:
        return a[0]
    if n.op in ("FusedMatMul", "TransposeMatMul"):
        if int(n.attr("transBatchA", 0)) and int(n.attr("transA", 0)):
            raise _Unknown
        return a[-2] if int(n.attr("transA", 0)) else a[-1]
    return a[-1]


def _gemm(n: _Node) -> Formula:
    """Gemm, FusedGemm, QGemm: Y [M, N]; K = elements of A / M, whatever transA says."""
    a = _dims(n.shape(0))
    y = n.shape(0, out=True)
    if y is not None and _numel(y) is not None and len(y) == 2:
        m, nn = _dims(y)
        k = _prod(a) // m if m else 0
    else:
        b_i = 3 if n.op == "QGemm" else 1
        b = _dims(n.shape(b_i))
        ta, tb = int(n.attr("transA", 0)), int(n.attr("transB", 0))
        m, k = (a[1], a[0]) if ta else (a[0], a[1])
        nn = b[0] if tb else b[1]
    macs = m * k * nn
    flops = 2 * macs
    out = m * nn
    c_i = 6 if n.op == "QGemm" else 2
    if n.has_input(c_i):
        flops += 2 * out if float(n.attr("beta", 1.0)) != 1.0 else out
    if float(n.attr("alpha", 1.0)) != 1.0:
        flops += out
    note = None
    if n.op == "QGemm":
        flops += 3 * out if n.has_input(7) else out  # requantize, or scale to float
        note = "integer multiply-adds; output scaling counted"
    if n.op == "FusedGemm" and n.attr("activation", ""):
        flops += out * _act_flops(n.attr("activation"))
        note = f"fused activation {n.attr('activation')} counted"
    return flops, macs, note


def _matmul(n: _Node) -> Formula:
    if n.op in ("Gemm", "QGemm", "FusedGemm"):
        return _gemm(n)
    a = _dims(n.shape(0))
    if n.op in ("MatMulNBits", "MatMulBnb4", "MatMulFpQ4"):
        kk, nn = int(n.attr("K")), int(n.attr("N"))
        m = _prod(a[:-1])
        macs = m * kk * nn
        flops = 2 * macs
        bias_i = {"MatMulNBits": 5}.get(n.op)
        if bias_i is not None and n.has_input(bias_i):
            flops += m * nn
        return flops, macs, "low-bit weights dequantized on the fly (not counted)"
    y = _dims(n.shape(0, out=True))
    out = _prod(y)
    k = _matmul_k(n, a)
    macs = out * k  # every output element is a dot product of length K
    flops = 2 * macs
    note = None
    if n.op in ("FusedMatMul", "TransposeMatMul") and float(n.attr("alpha", 1.0)) != 1.0:
        flops += out
    if n.op in ("MatMulInteger", "MatMulInteger16"):
        note = "integer multiply-adds"
    elif n.op == "QLinearMatMul":
        flops += 3 * out
        note = "integer multiply-adds; requantization 3 per output"
    elif n.op == "MatMulIntegerToFloat":
        flops += out + (out if n.has_input(6) else 0)  # scale to float (+ bias)
        note = "integer multiply-adds; scale (and bias) per output"
    elif n.op == "DynamicQuantizeMatMul":
        flops += ELEMENTWISE_FLOPS["DynamicQuantizeLinear"] * _prod(a)  # quantize A
        flops += out + (out if n.has_input(4) else 0)
        note = "A quantized on the fly (4 per element); integer multiply-adds; scale, bias"
    return flops, macs, note


def _cdist(n: _Node) -> Formula:
    """CDist: A [M, K], B [N, K] -> [M, N]; (a - b)^2 summed: 3 per term, + sqrt."""
    a, b = _dims(n.shape(0)), _dims(n.shape(1))
    terms = a[0] * b[0] * a[1]
    metric = str(n.attr("metric", "sqeuclidean"))
    flops = 3 * terms + (a[0] * b[0] if metric == "euclidean" else 0)
    return flops, terms, None


def _opt_dims(n: _Node, i: int, out: bool = False) -> list[int] | None:
    s = n.shape(i, out)
    if s is None or _numel(s) is None:
        return None
    return _dims(s)


def _attention_core(b: int, heads: int, s: int, t: int, dk: int, dv: int, masked: bool) -> Formula:
    """Scores Q K^T (B N S T dk MACs), scale (1 per score), mask or bias add (1), softmax
    (5), context P V (B N S T dv MACs); dk, dv per head."""
    scores = b * heads * s * t
    macs = scores * (dk + dv)
    per_score = 1 + (1 if masked else 0) + SOFTMAX_FLOPS["Softmax"]
    return 2 * macs + per_score * scores, macs, None


def _attention(n: _Node) -> Formula:
    """com.microsoft Attention / QAttention (fused QKV projection)."""
    x = _dims(n.shape(0))
    b, s, hidden_in = x
    w = _dims(n.shape(1))
    qkv_total = w[1]
    sizes = n.attr("qkv_hidden_sizes", [])
    q, _, v = (int(z) for z in sizes) if sizes else (qkv_total // 3,) * 3
    heads = int(n.attr("num_heads"))
    past_i = 8 if n.op == "QAttention" else 4
    past = _opt_dims(n, past_i) if n.has_input(past_i) else None
    present = _opt_dims(n, 1, out=True)
    if present is not None and len(present) == 5:
        total = present[3]
    elif past is not None:
        total = past[3] + s
    elif n.has_input(past_i):
        raise _Unknown
    else:
        total = s
    proj = b * s * hidden_in * qkv_total
    flops = 2 * proj + (b * s * qkv_total if n.has_input(2) else 0)  # projection (+ bias)
    masked = n.has_input(5) if n.op == "QAttention" else n.has_input(3) or n.has_input(5)
    core, core_macs, _ = _attention_core(b, heads, s, total, q // heads, v // heads, masked)
    note = "QKV projection + scores + scale + softmax + context"
    if n.op == "QAttention":
        flops += b * s * qkv_total  # dequantize the projection's int32 results
        note = "integer QKV projection (dequantized, 1 per value) + float attention"
    return flops + core, proj + (core_macs or 0), note


def _mha(n: _Node) -> Formula:
    """MultiHeadAttention / DecoderMaskedMultiHeadAttention: projections done outside."""
    q = _dims(n.shape(0))
    heads = int(n.attr("num_heads"))
    key = _opt_dims(n, 1) if n.has_input(1) else None
    if n.has_input(1) and key is None:
        raise _Unknown
    if len(q) == 5:  # packed QKV [B, S, N, 3, H]
        b, s, dq = q[0], q[1], q[2] * q[4]
        kv_len = s
    else:
        b, s, dq = q
        if key is None:
            raise _Unknown
        kv_len = key[2] if len(key) == 4 else key[1]
    present = _opt_dims(n, 1, out=True)
    # (past_key, bias, masks) inputs
    past_i, bias_i, masks = (6, 3, (4, 5)) if n.op == "MultiHeadAttention" else (5, 10, (3, 4))
    if present is not None and len(present) == 4:
        total = present[2]
        if n.op == "DecoderMaskedMultiHeadAttention":
            raise _Unknown  # a shared buffer: its size is the maximum, not the length used
    elif n.has_input(past_i):
        past = _opt_dims(n, past_i)
        if past is None:
            raise _Unknown
        total = past[2] + kv_len
    else:
        total = kv_len
    out = _dims(n.shape(0, out=True))
    dv = out[-1]
    masked = any(n.has_input(i) for i in masks)
    flops, macs, _ = _attention_core(b, heads, s, total, dq // heads, dv // heads, masked)
    if n.has_input(bias_i):  # projection bias, added to Q, K and V
        flops += b * s * dq + b * kv_len * (dq + dv)
    return flops, macs, "scores + scale + softmax + context"


def _gqa(n: _Node) -> Formula:
    """GroupQueryAttention: query heads share kv_num_heads K/V heads."""
    q = _dims(n.shape(0))
    heads, kv_heads = int(n.attr("num_heads")), int(n.attr("kv_num_heads"))
    b, s, d = q
    # packed QKV (no key input): d = (heads + 2 kv_heads) x head
    head = d // heads if n.has_input(1) else d // (heads + 2 * kv_heads)
    past = _opt_dims(n, 3) if n.has_input(3) else None
    present = _opt_dims(n, 1, out=True)
    if n.has_input(3):
        if past is None or present is None:
            raise _Unknown
        if present[2] == past[2]:
            raise _Unknown  # a shared KV buffer: the length used is data (seqlens_k)
        total = present[2]
    else:
        total = present[2] if present is not None else s
    flops, macs, _ = _attention_core(b, heads, s, total, head, head, False)
    note = "scores + scale + softmax + context over the full key length"
    if int(n.attr("do_rotary", 0)):
        flops += 3 * b * s * (heads + kv_heads) * head
        note += "; rotary on Q and K (3 per element)"
    return flops, macs, note


def _onnx_attention(n: _Node) -> Formula:
    """ai.onnx Attention (opset 23): Q [B, Nq, S, H] or [B, S, Nq x H]."""
    q, k, v = _dims(n.shape(0)), _dims(n.shape(1)), _dims(n.shape(2))
    if len(q) == 4:
        b, heads, s, dk = q
    else:
        heads = int(n.attr("q_num_heads"))
        b, s, dk = q[0], q[1], q[2] // heads
    kv_len = k[2] if len(k) == 4 else k[1]
    dv = v[3] if len(v) == 4 else v[2] // int(n.attr("kv_num_heads"))
    present = _opt_dims(n, 1, out=True)
    if present is not None:
        total = present[2]
    elif n.has_input(4):
        past = _opt_dims(n, 4)
        if past is None:
            raise _Unknown
        total = past[2] + kv_len
    else:
        total = kv_len
    masked = n.has_input(3) or bool(int(n.attr("is_causal", 0)))
    return _attention_core(b, heads, s, total, dk, dv, masked)


def _attention_family(n: _Node) -> Formula:
    if n.op in ("Attention", "QAttention") and n.domain != "":
        return _attention(n)
    if n.op == "Attention":
        return _onnx_attention(n)
    if n.op == "GroupQueryAttention":
        return _gqa(n)
    return _mha(n)


def _rotary(n: _Node) -> Formula:
    """RotaryEmbedding: x * cos + rotate(x) * sin, 3 per rotated element."""
    x = _dims(n.shape(0))
    numel = _prod(x)
    rot = int(n.attr("rotary_embedding_dim", 0))
    if rot:
        head = x[-1] if len(x) == 4 else x[-1] // int(n.attr("num_heads"))
        numel = numel // head * min(rot, head)
    return 3 * numel, None, "3 per rotated element"


_GATES = {"LSTM": 4, "DynamicQuantizeLSTM": 4, "GRU": 3, "RNN": 1}
_LSTM_ACTS = ["Sigmoid", "Tanh", "Tanh"]
_DEFAULT_ACTS = {"LSTM": _LSTM_ACTS, "DynamicQuantizeLSTM": _LSTM_ACTS,
                 "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}  # fmt: skip


def _rnn(n: _Node) -> Formula:
    """LSTM, GRU, RNN, DynamicQuantizeLSTM: per time step, batch row and direction, the
    gate projections X W^T and H R^T (G H (I + H) MACs, G gates), their sum and biases,
    the gate activations and the state update (docs/metrics.md)."""
    x = _dims(n.shape(0))
    layout = int(n.attr("layout", 0))
    t, batch = (x[1], x[0]) if layout else (x[0], x[1])
    inp = x[2]
    gates = _GATES[n.op]
    y_h = _opt_dims(n, 1, out=True)
    y = _opt_dims(n, 0, out=True)
    w = _opt_dims(n, 1)
    if "hidden_size" in n.attrs:
        hidden = int(n.attrs["hidden_size"])
    elif w is not None:
        hidden = (w[2] if n.op == "DynamicQuantizeLSTM" else w[1]) // gates
    elif y_h is not None:
        hidden = y_h[-1]
    elif y is not None:
        hidden = y[-1]
    else:
        raise _Unknown
    if "direction" in n.attrs:
        dirs = 2 if n.attrs["direction"] == "bidirectional" else 1
    elif w is not None:
        dirs = w[0]
    elif y_h is not None:
        dirs = y_h[1] if layout else y_h[0]
    else:
        dirs = 2 if n.attr("direction", "forward") == "bidirectional" else 1
    acts = n.attr("activations", []) or _DEFAULT_ACTS[n.op]
    per_dir = len(_DEFAULT_ACTS[n.op])
    act = [_act_flops(a) for a in acts[:per_dir]]
    h = hidden
    macs_step = gates * h * (inp + h)
    step = 2 * macs_step + gates * h  # projections, and adding the two together
    if n.has_input(3):
        step += 2 * gates * h  # input and recurrence biases
    if n.op in ("LSTM", "DynamicQuantizeLSTM"):
        # i, f, o through f (3H), g and c through g / h (2H); c = f*c + i*g; h = o * h(c)
        step += 3 * h * act[0] + h * act[1] + h * act[2] + 4 * h
        if n.has_input(7):
            step += 6 * h  # peepholes: P * c added to i, f, o
    elif n.op == "GRU":
        # z, r through f (2H); r applied (H); candidate through g (H); h = (1-z)*n + z*h (4H)
        step += 2 * h * act[0] + h + h * act[1] + 4 * h
    else:
        step += h * act[0]
    runs = t * batch * dirs
    flops = runs * step
    note = "counted over the full sequence length"
    if n.op == "DynamicQuantizeLSTM":
        q = ELEMENTWISE_FLOPS["DynamicQuantizeLinear"]
        flops += q * _prod(x) * dirs + q * runs * h  # X and every h quantized on the fly
        note += "; integer gate projections, X and h quantized on the fly (4 per value)"
    return flops, runs * macs_step, note


def _elementwise(n: _Node) -> Formula:
    per = ELEMENTWISE_FLOPS[n.op]
    note = None
    if n.op in _VARIADIC:
        per = max(1, n.n_inputs() - 1) + (1 if n.op == "Mean" else 0)
    elif n.op == "GatedAdd" and n.has_input(3):
        raise _Unknown  # the gate is then computed from gate_weight (not counted yet)
    if n.op in _ASSUMED:
        note = f"{per} FLOPs per element assumed for {n.op}"
    return _out_numel(n) * per, None, note


def _linear_attention_gate(n: _Node) -> Formula:
    per = 5 + (ELEMENTWISE_FLOPS["Sigmoid"] if n.has_input(3) else 0)
    return _in_numel(n) * per, None, "add, softplus (3), scale; sigmoid of b"


def _affine_grid(n: _Node) -> Formula:
    """Each output coordinate = theta row . [x, y, (z,) 1]: d+1 multiplies, d adds."""
    theta = _dims(n.shape(0))
    d = theta[-1] - 1
    return _out_numel(n) * (2 * d + 1), None, None


def _hyper_pre(n: _Node) -> Formula:
    return 2 * _in_numel(n) + _out_numel(n), None, "multiply-add per stream element, scale"


def _hyper_post(n: _Node) -> Formula:
    streams = _dims(n.shape(0))
    c = streams[-2] if len(streams) >= 2 else 1
    per = (2 * c if n.has_input(3) else 1) + 2
    return _out_numel(n) * per, None, "stream mix (C multiply-adds) + post mix (2)"


def _gated_rms(n: _Node) -> Formula:
    per = NORM_FLOPS["SimplifiedLayerNormalization"] + 1 + _act_flops(n.attr("activation", "silu"))
    return _in_numel(n) * per, None, f"{per} FLOPs per element"


def _dtw(n: _Node) -> Formula:
    """DynamicTimeWarping: one add and a 3-way minimum (2 compares) per cost cell."""
    return 3 * _in_numel(n), None, None


def _reduction(n: _Node) -> Formula:
    return _in_numel(n), None, None


def _scatter(n: _Node) -> Formula:
    """ScatterElements/ScatterND with a reduction: one operation per update element."""
    return _in_numel(n, 2), None, None


def _qlinear_gap(n: _Node) -> Formula:
    # dequantize (2) and sum (1) every input element; divide (1), quantize (3) per output
    return 3 * _in_numel(n) + 4 * _out_numel(n), None, None


def _pool(n: _Node) -> Formula:
    kernel = n.attr("kernel_shape")
    if not isinstance(kernel, list):
        raise _Unknown
    flops = _out_numel(n) * _prod(int(k) for k in kernel)
    if n.op == "QLinearAveragePool":
        flops += 2 * _in_numel(n) + 3 * _out_numel(n)
    return flops, None, None


def _lrn(n: _Node) -> Formula:
    size = int(n.attr("size"))
    per = 2 * size + 4  # sum of squares over the window; bias + alpha x, power, divide
    return _in_numel(n) * per, None, f"{per} FLOPs per element"


def _norm(n: _Node) -> Formula:
    per = NORM_FLOPS[n.op]
    numel = _out_numel(n) if n.op in _NORM_ON_OUTPUT else _in_numel(n)
    return numel * per, None, f"{per} FLOPs per element"


def _ml_normalizer(n: _Node) -> Formula:
    per = 2 if str(n.attr("norm", "MAX")) == "MAX" else 3
    return _in_numel(n) * per, None, f"{per} FLOPs per element"


def _softmax(n: _Node) -> Formula:
    per = SOFTMAX_FLOPS[n.op]
    return _in_numel(n) * per, None, f"{per} FLOPs per element"


def _taps(mode: str) -> int:
    mode = mode.lower()
    if mode in ("nearest",):
        return 1
    if mode in ("linear", "bilinear", "trilinear"):
        return 2
    if mode in ("cubic", "bicubic"):
        return 4
    raise _Unknown


def _interp_flops(taps: Sequence[int]) -> int:
    """A weighted sum of prod(taps) neighbours: that many multiply-adds, less one add."""
    points = _prod(taps)
    return 0 if points <= 1 else 2 * points - 1


def _resize(n: _Node) -> Formula:
    x, y = _dims(n.shape(0)), _dims(n.shape(0, out=True))
    out = _prod(y)
    if n.op == "RoiAlign":
        ratio = int(n.attr("sampling_ratio", 0))
        if ratio <= 0:
            raise _Unknown  # adaptive: the sampling grid follows the RoI sizes (data)
        # per output: ratio^2 bilinear samples (7 each), their mean or max (ratio^2)
        return out * ratio * ratio * 8, None, "ratio^2 bilinear samples per output"
    if n.op == "CropAndResize":
        t = _taps(str(n.attr("mode", "bilinear")))
        return out * _interp_flops([t, t]), None, None
    if n.op == "GridSample":
        mode = str(n.attr("mode", "linear" if n.domain == "" else "bilinear"))
        t = _taps(mode)
        spatial = len(y) - 2
        points = y[0] * _prod(y[2:])  # grid locations: unnormalize 2 FLOPs per coordinate
        return out * _interp_flops([t] * spatial) + 2 * spatial * points, None, None
    mode = str(n.attr("mode", "nearest"))
    t = _taps(mode)
    if t == 1:
        return 0, None, "nearest: no arithmetic"
    antialias = int(n.attr("antialias", 0)) if n.op == "Resize" else 0
    taps = []
    for a, b in zip(x, y, strict=True):
        if a == b:
            continue
        taps.append(math.ceil(t * a / b) if antialias and a > b else t)
    return out * _interp_flops(taps), None, f"{mode}: weighted sum of {_prod(taps)} neighbours"


def _einsum(n: _Node) -> Formula:
    """Naive evaluation over the full index space: (operands - 1) multiplies per point,
    and the adds that reduce it to the output (points - output elements)."""
    eq = str(n.attr("equation")).replace(" ", "")
    terms = eq.partition("->")[0].split(",")
    sizes: dict[str, int] = {}
    for i, term in enumerate(terms):
        shape = _dims(n.shape(i))
        head, ell, tail = term.partition("...")
        if not ell:
            keys = list(term)
        else:  # ellipsis dims are keyed by their distance from the right, as they broadcast
            extra = len(shape) - len(head) - len(tail)
            if extra < 0:
                raise _Unknown
            keys = [*head, *(f"...{extra - j}" for j in range(extra)), *tail]
        if len(keys) != len(shape):
            raise _Unknown
        for key, d in zip(keys, shape, strict=True):
            sizes[key] = max(sizes.get(key, 1), d)
    points = _prod(sizes.values())
    out = _out_numel(n)
    mults = (len(terms) - 1) * points
    adds = points - out
    return mults + adds, mults if len(terms) == 2 else None, "naive evaluation"


def _topk(n: _Node) -> Formula:
    """Heap selection: every element compared against the heap, log2(k) deep."""
    x = _dims(n.shape(0))
    y = _dims(n.shape(0, out=True))
    axis = int(n.attr("axis", -1))
    k = y[axis]
    return _prod(x) * max(1, math.ceil(math.log2(k + 1))), None, "comparisons"


def _unique(n: _Node) -> Formula:
    numel = _in_numel(n)
    return numel * max(1, math.ceil(math.log2(max(numel, 2)))), None, "sort: n log2 n compares"


def _fft_flops(size: int) -> int:
    """A complex FFT of a power-of-two length: 5 n log2 n; any other length, ORT's direct
    DFT: 8 n^2 (a complex multiply-add is 8 real operations)."""
    if size <= 1:
        return 0
    if size & (size - 1) == 0:
        return 5 * size * int(math.log2(size))
    return 8 * size * size


def _dft(n: _Node) -> Formula:
    """DFT along ``axis`` of every signal; input and output end in 1 (real) or 2 (complex)."""
    x, y = _dims(n.shape(0)), _dims(n.shape(0, out=True))
    if n.has_input(2):
        raise _Unknown  # opset 20: the axis is an input value
    if "axis" in n.attrs:
        axis = int(n.attrs["axis"])
    elif len(y) == 3:
        axis = 1  # opset 17's default (1) and opset 20's (-2) agree at rank 3
    else:
        raise _Unknown
    axis %= len(y)
    if axis == len(y) - 1:
        raise _Unknown
    if not n.has_input(1):
        length = x[axis]
    elif int(n.attr("onesided", 0)):
        raise _Unknown  # dft_length is an input value; the one-sided output hides it
    else:
        length = y[axis]
    signals = _prod(y[:-1]) // y[axis] if y[axis] else 0
    return signals * _fft_flops(length), None, "FFT: 5 n log2 n; other lengths 8 n^2"


def _stft(n: _Node) -> Formula:
    y = _dims(n.shape(0, out=True))  # [B, frames, bins, 2]
    if not n.has_input(2):
        raise _Unknown  # the frame length is then an input value
    window = _dims(n.shape(2))
    length = window[0]
    frames = y[0] * y[1]
    return frames * (length + _fft_flops(length)), None, "window multiply + FFT per frame"


def _linalg(n: _Node) -> Formula:
    """Det: LU decomposition, 2/3 n^3; Inverse: LU and solve, 2 n^3."""
    x = _dims(n.shape(0))
    size = x[-1]
    mats = _prod(x[:-2])
    per = (2 * size**3) // 3 if n.op == "Det" else 2 * size**3
    return mats * per, None, None


def _moe(n: _Node) -> Formula:
    """MoE / QMoE: each token through its top-k experts' FFN (fc1, activation, fc2, and
    fc3 when gated)."""
    x = _dims(n.shape(0))
    hidden = x[-1]
    tokens = _prod(x[:-1])
    k = int(n.attr("k", 1))
    fc1 = _dims(n.shape(2))
    bits = int(n.attr("expert_weight_bits", 4)) if n.op == "QMoE" else 0
    dims = list(fc1[1:])
    if bits == 4:
        dims[-1] *= 2
    fc1_out = dims[0] if dims[1] == hidden else dims[1]
    inter = fc1_out // 2 if int(n.attr("swiglu_fusion", 0)) else fc1_out
    fc3_i = 6 if n.op == "MoE" else 8
    macs_token = hidden * fc1_out + hidden * inter
    if n.has_input(fc3_i):
        macs_token += hidden * inter
    act_name = str(n.attr("activation_type", "relu"))
    act = 6 if act_name == "swiglu" else _act_flops(act_name)  # silu(gate) x up
    macs = tokens * k * macs_token
    flops = 2 * macs + tokens * k * (inter * act + hidden)  # activation, weighted sum
    return flops, macs, "top-k experts per token"


def _longest_paths(roots: Iterable[int], children: Mapping[int, list[int]]) -> list[int]:
    """Branch nodes on the longest root-to-leaf path of each tree (``children``: branch
    node -> its child branch nodes; leaves are not keys)."""
    depth: dict[int, int] = {}
    out = []
    for root in roots:
        stack = [(root, False)]
        on_path: set[int] = set()
        while stack:
            node, done = stack.pop()
            if done:
                on_path.discard(node)
                depth[node] = 1 + max((depth[c] for c in children.get(node, [])), default=0)
                continue
            if node in depth:
                continue
            if node in on_path:
                raise _Unknown  # a cycle: not a tree
            on_path.add(node)
            stack.append((node, True))
            stack.extend((c, False) for c in children.get(node, []) if c not in depth)
        out.append(depth[root])
    return out


def _tree_depths(n: _Node) -> tuple[list[int], int, int]:
    """(longest path per tree, leaves, leaf weights) of a tree ensemble's attributes."""
    true_ids = [int(v) for v in n.attr("nodes_truenodeids")]
    false_ids = [int(v) for v in n.attr("nodes_falsenodeids")]
    children: dict[int, list[int]] = {}
    if n.op == "TreeEnsemble":  # ai.onnx.ml 5: nodes are indices, leaves apart
        true_leaf = [int(v) for v in n.attr("nodes_trueleafs")]
        false_leaf = [int(v) for v in n.attr("nodes_falseleafs")]
        for i, (t_id, f_id) in enumerate(zip(true_ids, false_ids, strict=True)):
            children[i] = [c for c, leaf in ((t_id, true_leaf[i]), (f_id, false_leaf[i]))
                           if not leaf]  # fmt: skip
        roots = [int(r) for r in n.attr("tree_roots")]
        leaves = len(n.attr("leaf_targetids"))
        return _longest_paths(roots, children), leaves, leaves
    tree_ids = [int(v) for v in n.attr("nodes_treeids")]
    node_ids = [int(v) for v in n.attr("nodes_nodeids")]
    modes = [str(m) for m in n.attr("nodes_modes")]
    index = {(t, i): j for j, (t, i) in enumerate(zip(tree_ids, node_ids, strict=True))}
    referenced: set[int] = set()
    for j, (t, mode) in enumerate(zip(tree_ids, modes, strict=True)):
        if mode == "LEAF":
            continue
        kids = [index.get((t, true_ids[j])), index.get((t, false_ids[j]))]
        if any(k is None for k in kids):
            raise _Unknown
        referenced.update(k for k in kids if k is not None)
        children[j] = [k for k in kids if k is not None and modes[k] != "LEAF"]
    roots = [j for j in range(len(tree_ids)) if j not in referenced]
    weight_key = "class_weights" if n.op == "TreeEnsembleClassifier" else "target_weights"
    weights = len(n.attr(weight_key, []))
    leaves = sum(1 for m in modes if m == "LEAF")
    depths = [
        d if modes[r] != "LEAF" else 0
        for r, d in zip(roots, _longest_paths(roots, children), strict=True)
    ]
    return depths, leaves, weights


def _tree_ensemble(n: _Node) -> Formula:
    """Per sample and tree: one comparison per branch node on the longest root-to-leaf path
    (an upper bound: shorter paths exist), adding the leaf's weights; the post transform
    per output score."""
    x = _dims(n.shape(0))
    samples = x[0] if len(x) > 1 else 1
    depths, leaves, weights = _tree_depths(n)
    per_leaf = math.ceil(weights / leaves) if leaves else 0
    per_sample = sum(depths) + len(depths) * per_leaf
    outputs = _out_numel(n, 1) if n.op == "TreeEnsembleClassifier" else _out_numel(n)
    post = _post_flops(n.attr("post_transform", "NONE"))
    return samples * per_sample + outputs * post, None, "longest path per tree (upper bound)"


def _ml_linear(n: _Node) -> Formula:
    """LinearClassifier / LinearRegressor: X [N, F] . coefficients [C, F] + intercepts."""
    x = _dims(n.shape(0))
    samples, feats = (x[0], _prod(x[1:])) if len(x) > 1 else (1, x[0])
    coefs = len(n.attr("coefficients"))
    classes = coefs // feats if feats else 0
    macs = samples * classes * feats
    flops = 2 * macs + (samples * classes if n.attr("intercepts", []) else 0)
    post = _post_flops(n.attr("post_transform", "NONE"))
    return flops + samples * classes * post, macs, None


_SVM_KERNEL = {"LINEAR": (2, 0), "POLY": (2, 3), "RBF": (3, 2), "SIGMOID": (2, 6)}


def _svm(n: _Node) -> Formula:
    """Kernel value of every support vector (per feature: 2, RBF 3; + the kernel function),
    then one multiply-add per (support vector, classifier it votes in)."""
    x = _dims(n.shape(0))
    samples, feats = (x[0], _prod(x[1:])) if len(x) > 1 else (1, x[0])
    kernel = _SVM_KERNEL.get(str(n.attr("kernel_type", "LINEAR")))
    if kernel is None:
        raise _Unknown
    per_feat, per_kernel = kernel
    n_sv = len(n.attr("support_vectors", [])) // feats if feats else 0
    if n_sv == 0:  # linear model: coefficients [classifiers, F]
        coefs = len(n.attr("coefficients"))
        return samples * 2 * coefs, samples * coefs, "linear SVM"
    if n.op == "SVMClassifier":
        classes = len(n.attr("vectors_per_class", []))
        votes = (classes - 1) if classes > 2 else 1
    else:
        votes = 1
    per_sample = n_sv * (per_feat * feats + per_kernel) + 2 * n_sv * votes
    return samples * per_sample, None, None


_Fn = Callable[[_Node], Formula]


def _registry() -> dict[str, tuple[str, _Fn | None]]:
    reg: dict[str, tuple[str, _Fn | None]] = {}

    def add(family: str, fn: _Fn | None, ops: Iterable[str]) -> None:
        for op in ops:
            reg.setdefault(op, (family, fn))

    add("conv", _conv, CONVS | {"DeformConv"})
    add("conv", _conv_transpose, {"ConvTranspose", "ConvTransposeWithDynamicPads"})
    add("conv", _causal_conv, {"CausalConvWithState"})
    add("gemm", _matmul, GEMMS)
    add("gemm", _cdist, {"CDist"})
    add("gemm", _ml_linear, {"LinearClassifier", "LinearRegressor"})
    add("gemm", _moe, {"MoE", "QMoE"})
    add("attention", _attention_family, ATTENTIONS)
    add("attention", _rotary, {"RotaryEmbedding", "MRotaryEmbedding"})
    add("rnn", _rnn, RNNS)
    add("normalization", _norm, NORM_FLOPS)
    add("normalization", _lrn, {"LRN"})
    add("normalization", _gated_rms, {"GatedRMSNorm"})
    add("normalization", _ml_normalizer, {"Normalizer"})
    add("softmax", _softmax, SOFTMAX_FLOPS)
    add("reduction", _qlinear_gap, {"QLinearGlobalAveragePool"})
    add("reduction", _reduction, REDUCTIONS)
    add("pooling", _pool, POOLS)
    add("resize", _resize, RESIZES)
    add("einsum", _einsum, {"Einsum"})
    add("sort", _topk, {"TopK"})
    add("sort", _unique, {"Unique"})
    add("fft", _dft, {"DFT"})
    add("fft", _stft, {"STFT"})
    add("linalg", _linalg, {"Det", "Inverse"})
    add("tree_ensemble", _tree_ensemble, {"TreeEnsemble", "TreeEnsembleClassifier",
                                          "TreeEnsembleRegressor"})  # fmt: skip
    add("svm", _svm, {"SVMClassifier", "SVMRegressor"})
    add("elementwise", _linear_attention_gate, {"LinearAttentionGate"})
    add("elementwise", _affine_grid, {"AffineGrid"})
    add("elementwise", _hyper_pre, {"HyperConnectionPreMix"})
    add("elementwise", _hyper_post, {"HyperConnectionPostMix"})
    add("elementwise", _dtw, {"DynamicTimeWarping"})
    add("control_flow", None, CONTROL_FLOW)
    add("data_movement", None, METADATA_ONLY | DATA_MOVEMENT)
    add("elementwise", _elementwise, ELEMENTWISE_FLOPS)
    return reg


_FORMULAS = _registry()
#: ScatterElements / ScatterND with reduction="add" etc. do arithmetic on the updates
_REDUCING_SCATTERS = {"ScatterElements", "ScatterND", "TensorScatter"}


def _formula(n: _Node) -> tuple[str, _Fn | None]:
    if n.op in _REDUCING_SCATTERS and str(n.attrs.get("reduction", "none")) != "none":
        return "reduction", _scatter
    return _FORMULAS.get(n.op, ("unknown", None))


def cost_family(op_type: str) -> str:
    """The ``cost_model`` family of ``op_type`` (``unknown`` when AACO has no formula)."""
    return _FORMULAS.get(op_type, ("unknown", None))[0]


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
    elif model == "control_flow":
        flops, in_bytes, w_bytes, out_bytes = 0, None, None, None
        notes.append("runs a subgraph whose nodes are costed as their own profile entries")
    elif model == "data_movement":
        flops = 0
    elif fn is not None:
        try:
            flops, macs, note = fn(n)
            if note:
                notes.append(note)
        except (_Unknown, IndexError, KeyError, ValueError, TypeError, ZeroDivisionError):
            notes.append("FLOPs unknown: a shape or attribute is not known")
    elif n.op in NO_FORMULA:
        notes.append(f"FLOPs unknown: {NO_FORMULA[n.op]}")
    else:
        notes.append(f"no FLOP formula for {n.domain + '.' if n.domain else ''}{n.op}")
    parts = (in_bytes, w_bytes, out_bytes)
    total = None if any(p is None for p in parts) else sum(p or 0 for p in parts)
    if total is None and model != "control_flow":
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
        "flops_known": fn is not None or model in ("data_movement", "control_flow"),
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
    # aaco.analysis.graph imports onnx (~0.2 s): only when a model file is read
    from aaco.analysis.graph import extract_graph, load_model_proto

    info = extract_graph(load_model_proto(Path(model_path)), input_shapes)
    return node_costs(info.nodes, info.edges)


# --- the nodes ONNX Runtime executed -------------------------------------------------------

#: ORT profile element-type spellings that differ from graph_nodes'
_PROFILE_DTYPES = {"MLFloat16": "float16", "BFloat16": "bfloat16", "Float8E4M3FN": "float8e4m3fn",
                   "Float8E5M2": "float8e5m2"}  # fmt: skip


def _profile_io(text: str | None) -> list[tuple[str | None, Shape | None]] | None:
    """(dtype, shape) per tensor of an ops ``input_shapes`` / ``output_shapes`` value."""
    if not text:
        return None
    try:
        items = json.loads(text)
    except ValueError:
        return None
    out: list[tuple[str | None, Shape | None]] = []
    if not isinstance(items, list):
        return None
    for item in items:
        if not isinstance(item, dict) or len(item) != 1:
            return None
        ((dtype, shape),) = item.items()
        ok = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
        out.append((_PROFILE_DTYPES.get(dtype, dtype), shape if ok else None))
    return out


#: the search below recurses once per tensor: beyond this many, only exact counts match
_MAX_LINE_UP = 400


def _line_up(
    names: Sequence[str],
    dtypes: Sequence[str | None],
    shapes: Sequence[Shape | None],
    recorded: Sequence[tuple[str | None, Shape | None]],
    skippable: set[str],
) -> dict[int, tuple[str | None, Shape | None]]:
    """Which of the node's tensors the profile's entries describe, or {} when none fits.

    ORT lists the tensors a node was given, in order, leaving out absent optional ones,
    the weights it pre-packed (MatMul's B, Conv's W, LSTM's W and R...) and, inside a
    subgraph, the outer-scope values. The entries are matched in order to the node's
    tensors, skipping only ``skippable`` ones (initializers, outer-scope values), an entry
    matching a tensor only when their element types agree and, where the graph knows the
    tensor's full shape, their shapes too. The first reading that fits, matching as early
    as it can, wins.
    """
    present = [i for i, t in enumerate(names) if t]
    if len(present) + len(recorded) > _MAX_LINE_UP:  # a Concat of hundreds: no skipping
        return dict(zip(present, recorded, strict=True)) if len(present) == len(recorded) else {}

    def fits(i: int, rec: tuple[str | None, Shape | None]) -> bool:
        dtype = dtypes[i] if i < len(dtypes) else None
        if dtype and rec[0] and dtype != rec[0]:
            return False
        shape = shapes[i] if i < len(shapes) else None
        return not (shape is not None and _numel(shape) is not None and rec[1] != shape)

    failed: set[tuple[int, int]] = set()

    def search(p: int, r: int) -> list[tuple[int, int]] | None:
        if r == len(recorded):
            rest = present[p:]
            return [] if all(names[i] in skippable for i in rest) else None
        if p == len(present) or (p, r) in failed:
            return None
        i = present[p]
        if fits(i, recorded[r]):
            got = search(p + 1, r + 1)
            if got is not None:
                return [(i, r), *got]
        if names[i] in skippable:
            got = search(p + 1, r)
            if got is not None:
                return got
        failed.add((p, r))
        return None

    found = search(0, 0)
    return {i: recorded[r] for i, r in found} if found is not None else {}


def _with_profile(
    row: Mapping[str, Any], ins: str | None, outs: str | None, skippable: set[str]
) -> tuple[dict[str, Any], bool]:
    """``row`` with the shapes and types the profile recorded; True when any was used."""
    row = dict(row)
    used = False
    for names_key, shapes_key, dtypes_key, text in (
        ("inputs", "input_shapes", "input_dtypes", ins),
        ("outputs", "output_shapes", "output_dtypes", outs),
    ):
        recorded = _profile_io(text)
        if recorded is None:
            continue
        names = list(row.get(names_key) or [])
        if not names:  # known only from the profile: one tensor per entry
            names = [f"{row['node_name']}:{names_key}:{i}" for i in range(len(recorded))]
            row[names_key] = names
        shapes: list[Shape | None] = json.loads(row.get(shapes_key) or "[]")
        dtypes: list[str | None] = list(row.get(dtypes_key) or [])
        shapes += [None] * (len(names) - len(shapes))
        dtypes += [None] * (len(names) - len(dtypes))
        skip = skippable if names_key == "inputs" else set()
        for i, (dtype, shape) in _line_up(names, dtypes, shapes, recorded, skip).items():
            if shape is not None and shapes[i] != shape:
                shapes[i] = shape  # measured: it wins over inference
                used = True
            if dtypes[i] is None and dtype:
                dtypes[i] = dtype
        row[shapes_key] = json.dumps(shapes)
        row[dtypes_key] = dtypes
    return row, used


def _subgraph_rows(model: ModelProto) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """graph_nodes-like rows (name -> row, with ``outer``: its outer-scope inputs) of every
    named node of ``model`` and its subgraphs, and the names of all initializers."""
    # onnx and aaco.analysis.graph (which imports it, ~0.2 s): only when a model is read
    from onnx import AttributeProto

    from aaco.analysis.graph import _attr_value, _dtype_name, _type_info

    rows: dict[str, dict[str, Any]] = {}
    inits: set[str] = set()

    def walk(g: GraphProto, inherited: Mapping[str, tuple[str | None, Shape | None]]) -> None:
        types = dict(inherited)
        for t in g.initializer:
            types[t.name] = (_dtype_name(t.data_type), list(t.dims))
            inits.add(t.name)
        for vi in (*g.input, *g.value_info, *g.output):
            dtype, shape = _type_info(vi.type)
            if vi.name not in types or types[vi.name][1] is None:
                types[vi.name] = (dtype, shape)
        local = {t.name for t in g.initializer} | {vi.name for vi in g.input}
        local |= {o for node in g.node for o in node.output if o}
        for node in g.node:
            ins, outs = list(node.input), list(node.output)
            tin = [types.get(t, (None, None)) for t in ins]
            tout = [types.get(t, (None, None)) for t in outs]
            if node.name and node.name not in rows:
                rows[node.name] = {
                    "node_name": node.name,
                    "op_type": node.op_type,
                    "domain": "" if node.domain == "ai.onnx" else node.domain,
                    "inputs": ins,
                    "outputs": outs,
                    "input_shapes": json.dumps([s for _, s in tin]),
                    "output_shapes": json.dumps([s for _, s in tout]),
                    "input_dtypes": [d for d, _ in tin],
                    "output_dtypes": [d for d, _ in tout],
                    "attributes": json.dumps(
                        {a.name: _attr_value(a) for a in node.attribute}, allow_nan=False
                    ),
                    "outer": {t for t in ins if t and t not in local},
                }
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    walk(a.g, types)
                elif a.type == AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        walk(sub, types)

    walk(model.graph, {})
    return rows, inits


def executed_node_costs(
    ops: pa.Table,
    nodes: pa.Table | None = None,
    model: ModelProto | None = None,
    edges: pa.Table | None = None,
) -> pa.Table:
    """OP_COSTS rows for every node of an ONNX Runtime profile, costed as ORT ran it.

    One row per distinct ``node_name`` of ``ops`` (rows of other sources are ignored).
    What the node is comes from, in this order: its row of graph ``optimized`` in ``nodes``;
    a node of ``model`` (ORT's optimized model, ``model/optimized.onnx``), which reaches the
    nodes inside If/Loop/Scan bodies; else the profile alone (op type and shapes; its
    attributes unknown, so formulas needing one give null). The shapes and element types
    the profile recorded for a call replace the graph's where they line up with the node's
    tensors (:func:`_line_up`). A node whose calls recorded different shapes gets the mean
    FLOPs and bytes per call. ``edges`` (the original graph's) and ``model`` tell which
    inputs are weights.
    """
    if ops is None or not ops.num_rows:
        return OP_COSTS.empty()
    if "source" in ops.column_names:
        ops = ops.filter(pc.equal(pc.fill_null(ops.column("source"), ""), "onnxruntime"))
    cols = [c for c in ("node_name", "op_type", "input_shapes", "output_shapes")
            if c in ops.column_names]  # fmt: skip
    if "input_shapes" not in cols:
        ops = ops.append_column("input_shapes", pa.nulls(ops.num_rows, pa.string()))
        ops = ops.append_column("output_shapes", pa.nulls(ops.num_rows, pa.string()))
    sig = ops.group_by(["node_name", "op_type", "input_shapes", "output_shapes"],
                       use_threads=False).aggregate([("node_name", "count")])  # fmt: skip
    graph_rows: dict[str, dict[str, Any]] = {}
    if nodes is not None and nodes.num_rows:
        opt = nodes.filter(pc.equal(nodes.column("graph"), "optimized"))
        graph_rows = {r["node_name"]: r for r in opt.to_pylist()}
    model_rows: dict[str, dict[str, Any]] = {}
    weights: set[str] = set()
    if model is not None:
        model_rows, weights = _subgraph_rows(model)
    if edges is not None and edges.num_rows:
        init = edges.filter(pc.equal(edges.column("kind"), "initializer"))
        weights |= set(init.column("tensor").to_pylist())
    per_node: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    order: list[str] = []
    for r in sig.to_pylist():
        name, op = r["node_name"], r["op_type"]
        source = "graph"
        base = graph_rows.get(name) or model_rows.get(name)
        if base is None or (op and base["op_type"] != op):
            base = {"node_name": name, "op_type": op or "", "domain": None, "inputs": [],
                    "outputs": [], "attributes": None}  # fmt: skip
            source = "profile"
        skippable = weights | set(base.get("outer") or ())
        row, used = _with_profile(base, r["input_shapes"], r["output_shapes"], skippable)
        cost = _cost_row(_Node(row, weights))
        how = "shapes from the profile" if used else None
        if source == "profile":
            how = "known from the profile alone (attributes unknown)"
        if how:
            cost["note"] = "; ".join(x for x in (how, cost["note"]) if x)
        if name not in per_node:
            order.append(name)
        per_node.setdefault(name, []).append((r["node_name_count"], cost))
    rows = [_mean_cost(per_node[name]) for name in order]
    return OP_COSTS.from_rows(rows) if rows else OP_COSTS.empty()


def _mean_cost(calls: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """One node's cost over calls with different shapes: the mean per call."""
    if len(calls) == 1:
        return calls[0][1]
    total = sum(c for c, _ in calls)
    out = dict(max(calls, key=lambda cc: cc[0])[1])
    for key in ("flops", "macs", "input_bytes", "weight_bytes", "output_bytes", "bytes"):
        values = [(c, r[key]) for c, r in calls]
        if any(v is None for _, v in values):
            out[key] = None
        else:
            out[key] = round(sum(c * v for c, v in values) / total)
    out["intensity"] = (
        out["flops"] / out["bytes"] if out["flops"] is not None and out["bytes"] else None
    )
    note = f"mean over {len(calls)} shape signatures"
    out["note"] = "; ".join(x for x in (note, out["note"]) if x)
    return out


def _value_codes(col: pa.ChunkedArray) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Codes (int64) of a column's values and the distinct values, a null being one of them."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    enc = pc.dictionary_encode(arr, null_encoding="encode")
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, enc.dictionary.to_pylist()


def work_coverage(ops: pa.Table, work: pa.Table | None) -> dict[str, Any]:
    """How much of the profiled operator time has known work (FLOPs).

    ``work``: one row per executed node with its ``flops``: ROOFLINE rows (``name``; only
    ``level`` ``node`` rows are read) or OP_COSTS rows of executed nodes (``node_name``,
    from :func:`executed_node_costs`). A node it does not list has unknown work.

    Time is exclusive (:func:`aaco.analysis.ops.exclusive_ns`): a node that runs a subgraph
    (If, Loop, Scan) keeps only its own time, the nested nodes count as themselves.
    Returns ``time_ns`` (all operator time, summed over the profiled iterations),
    ``time_ns_known``, ``share_known`` (0-1, None without time), ``nodes``,
    ``nodes_known`` and ``unknown_op_types``: ``{op_type, time_ns, time_share, nodes}`` for
    each op type with unknown work, longest first.
    """
    known: set[str] = set()
    if work is not None and work.num_rows:
        if "level" in work.column_names:
            work = work.filter(pc.equal(work.column("level"), "node"))
        key = "name" if "name" in work.column_names else "node_name"
        flops = work.column("flops")
        known = {n for n, f in zip(work.column(key).to_pylist(), flops.to_pylist(), strict=True)
                 if f is not None}  # fmt: skip
    empty: dict[str, Any] = {"time_ns": 0, "time_ns_known": 0, "share_known": None,
                             "nodes": 0, "nodes_known": 0, "unknown_op_types": []}  # fmt: skip
    if ops is None or not ops.num_rows:
        return empty
    excl = exclusive_ns(ops)
    # per distinct node name (null its own value) and op type: codes, then numpy sums
    name_codes, name_values = _value_codes(ops.column("node_name"))
    op_codes, op_values = _value_codes(ops.column("op_type"))
    # a null op type and an empty one are one key, "" (as in the report)
    keys: dict[str, int] = {}
    key_of = np.asarray(
        [keys.setdefault(v or "", len(keys)) for v in op_values],
        dtype=np.int64,
    )
    key_names = list(keys)
    op_codes = key_of[op_codes] if len(key_of) else op_codes
    t = np.asarray(excl, dtype=np.int64)
    total = int(t.sum())
    known_name = np.fromiter((v in known for v in name_values), bool, len(name_values))
    is_known = known_name[name_codes]
    known_ns = int(t[is_known].sum())
    # op types with unknown work, in the order of their first row (ties keep that order)
    unk = np.flatnonzero(~is_known)
    merged: dict[str, list[int]] = {}
    if len(unk):
        nk = len(key_names)
        uop = op_codes[unk]
        first_row = np.full(nk, len(t), dtype=np.int64)
        np.minimum.at(first_row, uop, unk)
        t_by_op = np.zeros(nk, dtype=np.int64)
        np.add.at(t_by_op, uop, t[unk])
        pairs, _, _ = distinct_codes(uop * len(name_values) + name_codes[unk])
        names_by_op = np.bincount(pairs // len(name_values), minlength=nk)
        present = np.flatnonzero(first_row < len(t))  # the op types of unknown rows
        for code in sorted(present.tolist(), key=lambda c: int(first_row[c])):
            merged[key_names[code]] = [int(t_by_op[code]), int(names_by_op[code])]
    ranked = sorted(merged.items(), key=lambda kv: -kv[1][0])
    return {
        "time_ns": total,
        "time_ns_known": known_ns,
        "share_known": known_ns / total if total else None,
        "nodes": len(name_values),
        "nodes_known": int(known_name.sum()),
        "unknown_op_types": [
            {
                "op_type": op,
                "time_ns": op_ns,
                "time_share": op_ns / total if total else None,
                "nodes": n_nodes,
            }
            for op, (op_ns, n_nodes) in ranked
        ],
    }
