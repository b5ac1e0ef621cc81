"""Builders of the two small reference models: a multilayer perceptron and a tiny convnet."""

from __future__ import annotations

import math

import onnx

from aaco.models._graph import GraphBuilder, check_int


def mlp(
    *,
    in_features: int = 256,
    hidden: int = 512,
    layers: int = 3,
    out_features: int = 10,
    seed: int = 0,
    dtype: str = "float32",
) -> onnx.ModelProto:
    """An MLP of ``layers`` Linear layers (Gemm, transB=1 as torch exports it) with Relu between.

    Input ``input`` [batch, in_features], output ``output`` [batch, out_features].
    """
    check_int("in_features", in_features)
    check_int("hidden", hidden)
    check_int("layers", layers)
    check_int("out_features", out_features)
    g = GraphBuilder("mlp", seed=seed, dtype=dtype)
    x = g.input("input", ["batch", in_features])
    widths = [in_features] + [hidden] * (layers - 1) + [out_features]
    for i in range(layers):
        n_in, n_out = widths[i], widths[i + 1]
        # nn.Linear's default init is uniform(+-1/sqrt(fan_in)); a normal of that scale is close.
        w = g.weight(f"fc{i + 1}.weight", (n_out, n_in), std=1.0 / math.sqrt(n_in))
        b = g.weight(f"fc{i + 1}.bias", (n_out,), std=1.0 / math.sqrt(n_in))
        last = i == layers - 1
        x = g.node(
            "Gemm",
            [x, w, b],
            f"/fc{i + 1}/Gemm",
            out="output" if last else None,
            alpha=1.0,
            beta=1.0,
            transB=1,
        )
        if not last:
            x = g.node("Relu", [x], f"/relu{i + 1}/Relu")
    g.output("output", ["batch", out_features])
    return g.build(f"aaco mlp: {layers} layers, {in_features}->{hidden}->{out_features}")


def tiny_convnet(
    *,
    width: int = 16,
    num_classes: int = 10,
    image_size: int = 32,
    seed: int = 0,
    dtype: str = "float32",
) -> onnx.ModelProto:
    """Three Conv+BatchNormalization+Relu stages, a MaxPool, GlobalAveragePool, Flatten and Gemm.

    Input ``input`` [batch, 3, image_size, image_size], output ``output`` [batch, num_classes].
    Channels go 3 -> width -> 2*width -> (MaxPool) -> 4*width.
    """
    check_int("width", width)
    check_int("num_classes", num_classes)
    check_int("image_size", image_size, minimum=2)
    g = GraphBuilder("tiny_convnet", seed=seed, dtype=dtype)
    x = g.input("input", ["batch", 3, image_size, image_size])
    channels = [3, width, 2 * width, 4 * width]
    for i in range(3):
        if i == 2:
            x = g.node(
                "MaxPool", [x], "/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2], pads=[0] * 4
            )
        x = conv_bn(g, x, f"conv{i + 1}", f"bn{i + 1}", f"/conv{i + 1}", f"/bn{i + 1}",
                    channels[i], channels[i + 1], kernel=3, stride=1)  # fmt: skip
        x = g.node("Relu", [x], f"/relu{i + 1}/Relu")
    x = g.node("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    x = g.node("Flatten", [x], "/Flatten", axis=1)
    c = channels[-1]
    w = g.weight("fc.weight", (num_classes, c), std=1.0 / math.sqrt(c))
    b = g.weight("fc.bias", (num_classes,), std=1.0 / math.sqrt(c))
    g.node("Gemm", [x, w, b], "/fc/Gemm", out="output", alpha=1.0, beta=1.0, transB=1)
    g.output("output", ["batch", num_classes])
    return g.build(f"aaco tiny-convnet: width {width}, {num_classes} classes")


def conv_bn(
    g: GraphBuilder,
    x: str,
    conv_prefix: str,
    bn_prefix: str,
    conv_path: str,
    bn_path: str,
    c_in: int,
    c_out: int,
    *,
    kernel: int,
    stride: int,
) -> str:
    """A bias-free Conv followed by an un-fused BatchNormalization, torchvision style."""
    w = g.he_weight(f"{conv_prefix}.weight", (c_out, c_in, kernel, kernel), fan=c_out * kernel**2)
    pad = kernel // 2
    y = g.node(
        "Conv",
        [x, w],
        f"{conv_path}/Conv",
        dilations=[1, 1],
        group=1,
        kernel_shape=[kernel, kernel],
        pads=[pad] * 4,
        strides=[stride, stride],
    )
    scale = g.filled(f"{bn_prefix}.weight", (c_out,), 1.0)
    bias = g.filled(f"{bn_prefix}.bias", (c_out,), 0.0)
    mean = g.filled(f"{bn_prefix}.running_mean", (c_out,), 0.0)
    var = g.filled(f"{bn_prefix}.running_var", (c_out,), 1.0)
    return g.node(
        "BatchNormalization",
        [y, scale, bias, mean, var],
        f"{bn_path}/BatchNormalization",
        epsilon=1e-5,
        momentum=0.9,
    )
