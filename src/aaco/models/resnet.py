"""Builder of ResNet image classifiers equivalent to torchvision's resnet18/34/50/101/152."""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx

from aaco.errors import UsageError
from aaco.models._graph import GraphBuilder, check_int
from aaco.models.small import conv_bn

# depth -> (bottleneck blocks?, blocks per stage), as in torchvision.models.resnet.
DEPTHS: dict[int, tuple[bool, tuple[int, int, int, int]]] = {
    18: (False, (2, 2, 2, 2)),
    34: (False, (3, 4, 6, 3)),
    50: (True, (3, 4, 6, 3)),
    101: (True, (3, 4, 23, 3)),
    152: (True, (3, 8, 36, 3)),
}


def resnet50(
    *,
    depth: int = 50,
    blocks: Sequence[int] | None = None,
    width: int = 64,
    num_classes: int = 1000,
    image_size: int = 224,
    seed: int = 0,
    dtype: str = "float32",
) -> onnx.ModelProto:
    """A torchvision-layout ResNet, BatchNormalization kept as its own node (no Conv folding).

    ``depth`` picks the block type (basic for 18/34, bottleneck for 50+) and default stage
    sizes; ``blocks`` overrides the four stage sizes (e.g. [1, 1, 1, 1] for a quick test model);
    ``width`` is the stem width (64 in torchvision; stages use width, 2x, 4x, 8x).
    Input ``input`` [batch, 3, image_size, image_size], output ``output`` [batch, num_classes].
    """
    if depth not in DEPTHS:
        raise UsageError(f"param 'depth': {depth!r} is not one of {sorted(DEPTHS)}")
    bottleneck, default_blocks = DEPTHS[depth]
    stages = _check_blocks(default_blocks if blocks is None else blocks)
    check_int("width", width)
    check_int("num_classes", num_classes)
    check_int("image_size", image_size, minimum=32)
    g = GraphBuilder(f"resnet{depth}", seed=seed, dtype=dtype)
    x = g.input("input", ["batch", 3, image_size, image_size])

    x = conv_bn(g, x, "conv1", "bn1", "/conv1", "/bn1", 3, width, kernel=7, stride=2)
    x = g.node("Relu", [x], "/relu/Relu")
    x = g.node(
        "MaxPool",
        [x],
        "/maxpool/MaxPool",
        ceil_mode=0,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[2, 2],
    )
    expansion = 4 if bottleneck else 1
    c_in = width
    for stage, n_blocks in enumerate(stages):
        planes = width * 2**stage
        for b in range(n_blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            name = f"layer{stage + 1}.{b}"
            path = f"/layer{stage + 1}/{name}"
            block = _bottleneck if bottleneck else _basic
            x = block(g, x, name, path, c_in, planes, stride)
            c_in = planes * expansion

    x = g.node("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    x = g.node("Flatten", [x], "/Flatten", axis=1)
    w = g.weight("fc.weight", (num_classes, c_in), std=1.0 / math.sqrt(c_in))
    bias = g.weight("fc.bias", (num_classes,), std=1.0 / math.sqrt(c_in))
    g.node("Gemm", [x, w, bias], "/fc/Gemm", out="output", alpha=1.0, beta=1.0, transB=1)
    g.output("output", ["batch", num_classes])
    kind = "bottleneck" if bottleneck else "basic"
    return g.build(f"aaco resnet{depth}: {kind} blocks {list(stages)}, width {width}")


def _check_blocks(blocks: object) -> tuple[int, ...]:
    if (
        not isinstance(blocks, (list, tuple))
        or len(blocks) != 4
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in blocks)
    ):
        raise UsageError(f"param 'blocks': expected four integers >= 1, got {blocks!r}")
    return tuple(blocks)


def _shortcut(
    g: GraphBuilder, x: str, name: str, path: str, c_in: int, c_out: int, stride: int
) -> str:
    """Identity, or the 1x1 strided projection torchvision calls ``downsample``."""
    if stride == 1 and c_in == c_out:
        return x
    return conv_bn(
        g,
        x,
        f"{name}.downsample.0",
        f"{name}.downsample.1",
        f"{path}/downsample/downsample.0",
        f"{path}/downsample/downsample.1",
        c_in,
        c_out,
        kernel=1,
        stride=stride,
    )


def _bottleneck(
    g: GraphBuilder, x: str, name: str, path: str, c_in: int, planes: int, stride: int
) -> str:
    """1x1 reduce, 3x3 (strided, the "ResNet v1.5" placement), 1x1 expand, residual, Relu."""
    c_out = planes * 4
    y = conv_bn(g, x, f"{name}.conv1", f"{name}.bn1", f"{path}/conv1", f"{path}/bn1",
                c_in, planes, kernel=1, stride=1)  # fmt: skip
    y = g.node("Relu", [y], f"{path}/relu/Relu")
    y = conv_bn(g, y, f"{name}.conv2", f"{name}.bn2", f"{path}/conv2", f"{path}/bn2",
                planes, planes, kernel=3, stride=stride)  # fmt: skip
    y = g.node("Relu", [y], f"{path}/relu/Relu")
    y = conv_bn(g, y, f"{name}.conv3", f"{name}.bn3", f"{path}/conv3", f"{path}/bn3",
                planes, c_out, kernel=1, stride=1)  # fmt: skip
    shortcut = _shortcut(g, x, name, path, c_in, c_out, stride)
    y = g.node("Add", [y, shortcut], f"{path}/Add")
    return g.node("Relu", [y], f"{path}/relu/Relu")


def _basic(
    g: GraphBuilder, x: str, name: str, path: str, c_in: int, planes: int, stride: int
) -> str:
    """Two 3x3 convs with a residual, the block of resnet18/34."""
    y = conv_bn(g, x, f"{name}.conv1", f"{name}.bn1", f"{path}/conv1", f"{path}/bn1",
                c_in, planes, kernel=3, stride=stride)  # fmt: skip
    y = g.node("Relu", [y], f"{path}/relu/Relu")
    y = conv_bn(g, y, f"{name}.conv2", f"{name}.bn2", f"{path}/conv2", f"{path}/bn2",
                planes, planes, kernel=3, stride=1)  # fmt: skip
    shortcut = _shortcut(g, x, name, path, c_in, planes, stride)
    y = g.node("Add", [y, shortcut], f"{path}/Add")
    return g.node("Relu", [y], f"{path}/relu/Relu")
