"""Builder of a GPT-2 decoder with a tied LM head, in a prefill or a KV-cache (decode) flavour."""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto

from aaco.errors import UsageError
from aaco.models._graph import GraphBuilder, check_bool, check_int

LAYER_NORM_EPS = 1e-5
# GPT-2's own masked_bias: large enough that exp() underflows to 0, small enough for float16.
MASK_VALUE = -10000.0


def gpt2(
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    vocab: int = 50257,
    n_positions: int = 1024,
    intermediate: int | None = None,
    with_past: bool = False,
    seed: int = 0,
    dtype: str = "float32",
) -> onnx.ModelProto:
    """A pre-LayerNorm causal decoder; defaults are GPT-2 small (about 124 M parameters).

    Input ``input_ids`` int64 [batch, sequence]; outputs ``logits`` [batch, sequence, vocab]
    and, per layer i, ``present.{i}.key`` / ``present.{i}.value`` [batch, heads, S, head_dim].
    With ``with_past`` there are also inputs ``past.{i}.key`` / ``past.{i}.value``
    [batch, heads, past_sequence, head_dim]: they are concatenated in front of this step's
    keys and values (S = past_sequence + sequence), position ids start at past_sequence and the
    causal mask lets query t see keys 0 .. past_sequence + t. Without past, S = sequence.
    """
    check_int("layers", layers)
    check_int("hidden", hidden)
    check_int("heads", heads)
    check_int("vocab", vocab)
    check_int("n_positions", n_positions)
    check_bool("with_past", with_past)
    if intermediate is None:
        intermediate = 4 * hidden
    check_int("intermediate", intermediate)
    if hidden % heads:
        raise UsageError(f"param 'heads': hidden size {hidden} is not divisible by {heads} heads")
    head_dim = hidden // heads

    g = GraphBuilder("gpt2_with_past" if with_past else "gpt2", seed=seed, dtype=dtype)
    input_ids = g.input("input_ids", ["batch", "sequence"], TensorProto.INT64)
    kv_shape: list[int | str] = ["batch", heads, "past_sequence", head_dim]
    pasts: list[tuple[str, str]] = []
    if with_past:
        for i in range(layers):
            pasts.append((g.input(f"past.{i}.key", kv_shape), g.input(f"past.{i}.value", kv_shape)))

    shape = g.node("Shape", [input_ids], "/transformer/Shape")
    seq_len = g.node("Gather", [shape, g.const_i64(1)], "/transformer/Gather", axis=0)
    if with_past:
        past_shape = g.node("Shape", [pasts[0][0]], "/transformer/Shape")
        past_len = g.node("Gather", [past_shape, g.const_i64(2)], "/transformer/Gather", axis=0)
        total_len = g.node("Add", [past_len, seq_len], "/transformer/Add")
    else:
        past_len, total_len = g.const_i64(0), seq_len
    one = g.const_i64(1)
    # Positions of this step's tokens, past_len .. total_len - 1 (0 .. seq - 1 on prefill).
    position_ids = g.node("Range", [past_len, total_len, one], "/transformer/Range")

    # Causal mask [sequence, total]: query at absolute position q sees key k when k <= q.
    key_pos = g.node("Range", [g.const_i64(0), total_len, one], "/transformer/Range")
    key_pos = g.node("Unsqueeze", [key_pos, g.const_i64([0])], "/transformer/Unsqueeze")
    query_pos = g.node("Unsqueeze", [position_ids, g.const_i64([1])], "/transformer/Unsqueeze")
    causal = g.node("LessOrEqual", [key_pos, query_pos], "/transformer/LessOrEqual")

    wte = g.weight("transformer.wte.weight", (vocab, hidden))
    wpe = g.weight("transformer.wpe.weight", (n_positions, hidden), std=0.01)
    x = g.node("Gather", [wte, input_ids], "/transformer/wte/Gather", axis=0)
    p = g.node("Gather", [wpe, position_ids], "/transformer/wpe/Gather", axis=0)
    x = g.node("Add", [x, p], "/transformer/Add")

    # GPT-2 scales the init of residual projections by 1/sqrt(2 * n_layer).
    proj_std = 0.02 / math.sqrt(2.0 * layers)
    for i in range(layers):
        past = pasts[i] if with_past else None
        x = _block(g, x, causal, past, i, hidden, heads, intermediate, proj_std)

    x = g.layer_norm(x, "transformer.ln_f", "/transformer/ln_f", hidden, LAYER_NORM_EPS)
    # The LM head is tied to the token embedding, as in GPT-2; ORT folds the Transpose once.
    head = g.node("Transpose", [wte], "/lm_head/Transpose", perm=[1, 0])
    g.node("MatMul", [x, head], "/lm_head/MatMul", out="logits")
    g.output("logits", ["batch", "sequence", vocab])
    total_dim = "total_sequence" if with_past else "sequence"
    for i in range(layers):
        for kind in ("key", "value"):
            g.output(f"present.{i}.{kind}", ["batch", heads, total_dim, head_dim])
    flavour = "with past (decode)" if with_past else "prefill"
    return g.build(f"aaco gpt2 {flavour}: {layers} layers, hidden {hidden}, {heads} heads")


def _block(
    g: GraphBuilder,
    x: str,
    causal: str,
    past: tuple[str, str] | None,
    i: int,
    hidden: int,
    heads: int,
    intermediate: int,
    proj_std: float,
) -> str:
    """x + attn(ln_1(x)), then + mlp(ln_2(.)), with this layer's present key/value as outputs."""
    name, path = f"transformer.h.{i}", f"/transformer/h.{i}"
    a = f"{path}/attn"
    h = g.layer_norm(x, f"{name}.ln_1", f"{path}/ln_1", hidden, LAYER_NORM_EPS)
    qkv = g.linear(h, f"{name}.attn.c_attn", f"{a}/c_attn", hidden, 3 * hidden)
    q, k, v = g.node_multi("Split", [qkv, g.const_i64([hidden] * 3)], f"{a}/Split", 3, axis=2)
    heads_shape = g.const_i64([0, 0, heads, hidden // heads])

    def split_heads(y: str) -> str:  # [batch, seq, hidden] -> [batch, heads, seq, head_dim]
        y = g.node("Reshape", [y, heads_shape], f"{a}/Reshape")
        return g.node("Transpose", [y], f"{a}/Transpose", perm=[0, 2, 1, 3])

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    present_k, present_v = f"present.{i}.key", f"present.{i}.value"
    if past is None:
        k = g.node("Identity", [k], f"{a}/Identity", out=present_k)
        v = g.node("Identity", [v], f"{a}/Identity", out=present_v)
    else:
        k = g.node("Concat", [past[0], k], f"{a}/Concat", out=present_k, axis=2)
        v = g.node("Concat", [past[1], v], f"{a}/Concat", out=present_v, axis=2)

    kt = g.node("Transpose", [k], f"{a}/Transpose", perm=[0, 1, 3, 2])
    scores = g.node("MatMul", [q, kt], f"{a}/MatMul")
    scores = g.node("Div", [scores, g.const(math.sqrt(hidden // heads))], f"{a}/Div")
    scores = g.node("Where", [causal, scores, g.const(MASK_VALUE)], f"{a}/Where")
    probs = g.node("Softmax", [scores], f"{a}/Softmax", axis=-1)
    ctx = g.node("MatMul", [probs, v], f"{a}/MatMul")
    ctx = g.node("Transpose", [ctx], f"{a}/Transpose", perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const_i64([0, 0, hidden])], f"{a}/Reshape")
    y = g.linear(ctx, f"{name}.attn.c_proj", f"{a}/c_proj", hidden, hidden, std=proj_std)
    x = g.node("Add", [x, y], f"{path}/Add")

    m = f"{path}/mlp"
    h = g.layer_norm(x, f"{name}.ln_2", f"{path}/ln_2", hidden, LAYER_NORM_EPS)
    h = g.linear(h, f"{name}.mlp.c_fc", f"{m}/c_fc", hidden, intermediate)
    h = gelu_tanh(g, h, f"{m}/act")
    h = g.linear(h, f"{name}.mlp.c_proj", f"{m}/c_proj", intermediate, hidden, std=proj_std)
    return g.node("Add", [x, h], f"{path}/Add")


def gelu_tanh(g: GraphBuilder, x: str, path: str) -> str:
    """GPT-2's ``gelu_new``: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as exported."""
    cube = g.node("Pow", [x, g.const(3.0)], f"{path}/Pow")
    y = g.node("Mul", [cube, g.const(0.044715)], f"{path}/Mul")
    y = g.node("Add", [x, y], f"{path}/Add")
    y = g.node("Mul", [y, g.const(math.sqrt(2.0 / math.pi))], f"{path}/Mul")
    y = g.node("Tanh", [y], f"{path}/Tanh")
    y = g.node("Add", [y, g.const(1.0)], f"{path}/Add")
    half = g.node("Mul", [x, g.const(0.5)], f"{path}/Mul")
    return g.node("Mul", [half, y], f"{path}/Mul")
