"""Builder of a BERT encoder laid out op for op like a Hugging Face ``BertModel`` export."""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto

from aaco.errors import UsageError
from aaco.models._graph import GraphBuilder, check_bool, check_int

LAYER_NORM_EPS = 1e-12


def bert(
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    intermediate: int = 3072,
    vocab: int = 30522,
    max_position: int = 512,
    type_vocab: int = 2,
    pooler: bool = True,
    seed: int = 0,
    dtype: str = "float32",
) -> onnx.ModelProto:
    """A post-LayerNorm BERT encoder; defaults are bert-base-uncased (about 110 M parameters).

    Inputs ``input_ids``, ``attention_mask``, ``token_type_ids``: int64 [batch, sequence].
    Outputs ``last_hidden_state`` [batch, sequence, hidden] and, with ``pooler``,
    ``pooler_output`` [batch, hidden] (tanh of a dense layer over the first token).
    GELU is written in its erf form so onnxruntime's Gelu fusion recognises it.
    """
    check_int("layers", layers)
    check_int("hidden", hidden)
    check_int("heads", heads)
    check_int("intermediate", intermediate)
    check_int("vocab", vocab)
    check_int("max_position", max_position)
    check_int("type_vocab", type_vocab)
    check_bool("pooler", pooler)
    if hidden % heads:
        raise UsageError(f"param 'heads': hidden size {hidden} is not divisible by {heads} heads")
    head_dim = hidden // heads

    g = GraphBuilder("bert", seed=seed, dtype=dtype)
    int64 = TensorProto.INT64
    input_ids = g.input("input_ids", ["batch", "sequence"], int64)
    attention_mask = g.input("attention_mask", ["batch", "sequence"], int64)
    token_type_ids = g.input("token_type_ids", ["batch", "sequence"], int64)

    # Embeddings: word + position + token type, then LayerNorm.
    e = "/embeddings"
    word = g.weight("embeddings.word_embeddings.weight", (vocab, hidden))
    pos = g.weight("embeddings.position_embeddings.weight", (max_position, hidden))
    tok = g.weight("embeddings.token_type_embeddings.weight", (type_vocab, hidden))
    x = g.node("Gather", [word, input_ids], f"{e}/word_embeddings/Gather", axis=0)
    shape = g.node("Shape", [input_ids], f"{e}/Shape")
    seq_len = g.node("Gather", [shape, g.const_i64(1)], f"{e}/Gather", axis=0)
    position_ids = g.node("Range", [g.const_i64(0), seq_len, g.const_i64(1)], f"{e}/Range")
    position_ids = g.node("Unsqueeze", [position_ids, g.const_i64([0])], f"{e}/Unsqueeze")
    t = g.node("Gather", [tok, token_type_ids], f"{e}/token_type_embeddings/Gather", axis=0)
    x = g.node("Add", [x, t], f"{e}/Add")
    p = g.node("Gather", [pos, position_ids], f"{e}/position_embeddings/Gather", axis=0)
    x = g.node("Add", [x, p], f"{e}/Add")
    x = g.layer_norm(x, "embeddings.LayerNorm", f"{e}/LayerNorm", hidden, LAYER_NORM_EPS)

    # The additive mask bias, (1 - mask) * -10000, broadcast over heads and query positions.
    m = g.node("Unsqueeze", [attention_mask, g.const_i64([1, 2])], "/Unsqueeze")
    m = g.node("Cast", [m], "/Cast", to=g.elem_type)
    m = g.node("Sub", [g.const(1.0), m], "/Sub")
    mask_bias = g.node("Mul", [m, g.const(-10000.0)], "/Mul")

    for i in range(layers):
        x = _layer(g, x, mask_bias, i, hidden, heads, head_dim, intermediate)

    g.node("Identity", [x], "/encoder/Identity", out="last_hidden_state")
    g.output("last_hidden_state", ["batch", "sequence", hidden])
    if pooler:
        first = g.node("Gather", [x, g.const_i64(0)], "/pooler/Gather", axis=1)
        w = g.weight("pooler.dense.weight", (hidden, hidden))
        b = g.weight("pooler.dense.bias", (hidden,))
        y = g.node("Gemm", [first, w, b], "/pooler/dense/Gemm", alpha=1.0, beta=1.0, transB=1)
        g.node("Tanh", [y], "/pooler/activation/Tanh", out="pooler_output")
        g.output("pooler_output", ["batch", hidden])
    return g.build(
        f"aaco bert: {layers} layers, hidden {hidden}, {heads} heads, ffn {intermediate}"
    )


def _layer(
    g: GraphBuilder,
    x: str,
    mask_bias: str,
    i: int,
    hidden: int,
    heads: int,
    head_dim: int,
    intermediate: int,
) -> str:
    """One encoder layer: self-attention, residual + LayerNorm, GELU FFN, residual + LayerNorm."""
    name, path = f"encoder.layer.{i}", f"/encoder/layer.{i}"
    a, s = f"{name}.attention", f"{path}/attention/self"
    heads_shape = g.const_i64([0, 0, heads, head_dim])

    def split_heads(y: str, perm: list[int]) -> str:
        y = g.node("Reshape", [y, heads_shape], f"{s}/Reshape")
        return g.node("Transpose", [y], f"{s}/Transpose", perm=perm)

    q = g.linear(x, f"{a}.self.query", f"{s}/query", hidden, hidden)
    k = g.linear(x, f"{a}.self.key", f"{s}/key", hidden, hidden)
    v = g.linear(x, f"{a}.self.value", f"{s}/value", hidden, hidden)
    q = split_heads(q, [0, 2, 1, 3])  # [batch, heads, seq, head_dim]
    k = split_heads(k, [0, 2, 3, 1])  # [batch, heads, head_dim, seq], ready for Q @ K^T
    v = split_heads(v, [0, 2, 1, 3])
    scores = g.node("MatMul", [q, k], f"{s}/MatMul")
    scores = g.node("Div", [scores, g.const(math.sqrt(head_dim))], f"{s}/Div")
    scores = g.node("Add", [scores, mask_bias], f"{s}/Add")
    probs = g.node("Softmax", [scores], f"{s}/Softmax", axis=-1)
    ctx = g.node("MatMul", [probs, v], f"{s}/MatMul")
    ctx = g.node("Transpose", [ctx], f"{s}/Transpose", perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const_i64([0, 0, hidden])], f"{s}/Reshape")

    o = f"{path}/attention/output"
    y = g.linear(ctx, f"{a}.output.dense", f"{o}/dense", hidden, hidden)
    y = g.node("Add", [y, x], f"{o}/Add")
    x = g.layer_norm(y, f"{a}.output.LayerNorm", f"{o}/LayerNorm", hidden, LAYER_NORM_EPS)

    it = f"{path}/intermediate"
    y = g.linear(x, f"{name}.intermediate.dense", f"{it}/dense", hidden, intermediate)
    y = gelu_erf(g, y, f"{it}/intermediate_act_fn")

    o = f"{path}/output"
    y = g.linear(y, f"{name}.output.dense", f"{o}/dense", intermediate, hidden)
    y = g.node("Add", [y, x], f"{o}/Add")
    return g.layer_norm(y, f"{name}.output.LayerNorm", f"{o}/LayerNorm", hidden, LAYER_NORM_EPS)


def gelu_erf(g: GraphBuilder, x: str, path: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt 2)), the exact subgraph torch exports for ``nn.GELU()``."""
    y = g.node("Div", [x, g.const(math.sqrt(2.0))], f"{path}/Div")
    y = g.node("Erf", [y], f"{path}/Erf")
    y = g.node("Add", [y, g.const(1.0)], f"{path}/Add")
    y = g.node("Mul", [x, y], f"{path}/Mul")
    return g.node("Mul", [y, g.const(0.5)], f"{path}/Mul")
