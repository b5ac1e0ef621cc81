"""The labeled workload zoo: small ONNX models whose bottleneck on a CPU is known by
construction (``aaco models list`` shows each one's ``expected_bottleneck``).

- ``zoo_launch``: hundreds of tiny elementwise operators on a [1, 16] tensor: each does a
  few nanoseconds of work and pays a microsecond-scale dispatch (launch-bound).
- ``zoo_compute``: a chain of large float32 GEMMs, ~90 FLOP per byte, far above any CPU's
  ridge point (compute-bound).
- ``zoo_memory``: an elementwise chain over 256 MiB tensors ([16384, 4096] float32), 1 FLOP
  per 8 bytes, far below the ridge point; each op moves 512 MiB, more than the largest
  last-level cache a server CPU reports (Intel Xeon 6: 504 MiB; AMD EPYC: 32-96 MiB per
  CCD), so its traffic is DRAM's on any of them (memory-bound).
- ``zoo_latency``: one 8x8 Gemm and a Relu: a few hundred FLOPs, so the fixed cost of a
  call is the latency (latency-bound).
- ``zoo_image``: a small convolutional head on a 224x224 image; run with ``preprocess:
  image`` (the registry's ``zoo-host``) the Python-side preprocessing inside each iteration
  takes most of the time (cpu-bound).
- ``zoo_warmup``: a broadcast of the input to a large buffer reduced back to a scalar; the
  first run pays for the memory arena's first touch (page faults) of that buffer, many
  times the steady-state cost; with ``warmup: 0`` (``zoo-warmup``) that lands in the
  measured phase (warmup-instability).
"""

from __future__ import annotations

import math

import onnx

from aaco.models._graph import GraphBuilder, check_int

__all__ = [
    "zoo_compute",
    "zoo_image",
    "zoo_latency",
    "zoo_launch",
    "zoo_memory",
    "zoo_warmup",
]

_CHAIN = ("Add", "Mul", "Sub", "Relu")


def zoo_launch(
    *, ops: int = 400, width: int = 16, seed: int = 0, dtype: str = "float32"
) -> onnx.ModelProto:
    """``ops`` elementwise nodes in a chain on [1, width]: Add, Mul, Sub (distinct
    constants) and Relu in turn."""
    check_int("ops", ops)
    check_int("width", width)
    g = GraphBuilder("zoo_launch", seed=seed, dtype=dtype)
    x = g.input("input", [1, width])
    for i in range(ops):
        op = _CHAIN[i % len(_CHAIN)]
        if op == "Relu":
            x = g.node("Relu", [x], f"/op{i}/Relu", out="output" if i == ops - 1 else None)
        else:
            c = g.weight(f"c{i}", (width,), std=0.1)
            x = g.node(op, [x, c], f"/op{i}/{op}", out="output" if i == ops - 1 else None)
    g.output("output", [1, width])
    return g.build(f"aaco zoo: {ops} tiny elementwise ops on [1, {width}]")


def zoo_compute(
    *, rows: int = 256, dim: int = 1024, layers: int = 8, seed: int = 0, dtype: str = "float32"
) -> onnx.ModelProto:
    """``layers`` MatMuls [rows, dim] x [dim, dim] in a chain (2 x rows x dim^2 FLOPs each)."""
    check_int("rows", rows)
    check_int("dim", dim)
    check_int("layers", layers)
    g = GraphBuilder("zoo_compute", seed=seed, dtype=dtype)
    x = g.input("input", [rows, dim])
    for i in range(layers):
        w = g.weight(f"w{i}", (dim, dim), std=1.0 / math.sqrt(dim))
        x = g.node("MatMul", [x, w], f"/layer{i}/MatMul", out="output" if i == layers - 1 else None)
    g.output("output", [rows, dim])
    return g.build(f"aaco zoo: {layers} GEMMs {rows}x{dim}x{dim}")


def zoo_memory(
    *, rows: int = 16384, cols: int = 4096, ops: int = 4, seed: int = 0, dtype: str = "float32"
) -> onnx.ModelProto:
    """``ops`` elementwise nodes (Add / Mul with a scalar) over a [rows, cols] tensor.

    Two-dimensional since a 1-D input made graph extraction hold gigabytes (ONNX's data
    propagation; bounded since, see ``aaco.analysis.graph.DATA_PROP_MAX_ELEMS``): kept so
    that existing baselines stay comparable."""
    check_int("rows", rows)
    check_int("cols", cols)
    check_int("ops", ops)
    g = GraphBuilder("zoo_memory", seed=seed, dtype=dtype)
    x = g.input("input", [rows, cols])
    for i in range(ops):
        op = "Add" if i % 2 == 0 else "Mul"
        c = g.filled(f"c{i}", (1,), 0.5 + 0.01 * i)
        x = g.node(op, [x, c], f"/op{i}/{op}", out="output" if i == ops - 1 else None)
    g.output("output", [rows, cols])
    return g.build(f"aaco zoo: {ops} elementwise ops over {rows}x{cols} elements")


def zoo_latency(*, width: int = 8, seed: int = 0, dtype: str = "float32") -> onnx.ModelProto:
    """One Gemm [1, width] x [width, width] and a Relu."""
    check_int("width", width)
    g = GraphBuilder("zoo_latency", seed=seed, dtype=dtype)
    x = g.input("input", [1, width])
    w = g.weight("fc.weight", (width, width), std=1.0 / math.sqrt(width))
    b = g.weight("fc.bias", (width,), std=0.1)
    x = g.node("Gemm", [x, w, b], "/fc/Gemm", transB=1)
    g.node("Relu", [x], "/relu/Relu", out="output")
    g.output("output", [1, width])
    return g.build(f"aaco zoo: one {width}x{width} Gemm + Relu")


def zoo_image(
    *, size: int = 224, channels: int = 8, seed: int = 0, dtype: str = "float32"
) -> onnx.ModelProto:
    """Conv 3->channels (3x3, stride 2) + Relu + GlobalAveragePool + Flatten on an image."""
    check_int("size", size)
    check_int("channels", channels)
    g = GraphBuilder("zoo_image", seed=seed, dtype=dtype)
    x = g.input("input", [1, 3, size, size])
    w = g.he_weight("conv.weight", (channels, 3, 3, 3), fan=27)
    x = g.node("Conv", [x, w], "/conv/Conv", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    x = g.node("Relu", [x], "/relu/Relu")
    x = g.node("GlobalAveragePool", [x], "/pool/GlobalAveragePool")
    g.node("Flatten", [x], "/flatten/Flatten", out="output")
    g.output("output", [1, channels])
    return g.build(f"aaco zoo: conv head on a {size}x{size} image")


def zoo_warmup(
    *, rows: int = 8192, cols: int = 4096, seed: int = 0, dtype: str = "float32"
) -> onnx.ModelProto:
    """input [1, 1] -> Expand to [rows, cols] -> ReduceMax -> [1, 1]: one large buffer
    written once and read once per run (2-D, for the reason given in ``zoo_memory``)."""
    check_int("rows", rows)
    check_int("cols", cols)
    g = GraphBuilder("zoo_warmup", seed=seed, dtype=dtype)
    x = g.input("input", [1, 1])
    shape = g.const_i64([rows, cols], "/shape/Constant")
    big = g.node("Expand", [x, shape], "/expand/Expand")
    g.node("ReduceMax", [big], "/reduce/ReduceMax", out="output", keepdims=1)
    g.output("output", [1, 1])
    return g.build(f"aaco zoo: broadcast to {rows}x{cols} elements and reduce")
