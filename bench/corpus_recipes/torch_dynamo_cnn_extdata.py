# torch.export-based exporter (dynamo=True): depthwise-separable CNN + MLP head; saved with
# EXTERNAL DATA (.onnx + .onnx.data).
import torch
import torch.nn as nn
from _common import out

torch.manual_seed(0)


def dw(ci, co, s):
    return nn.Sequential(
        nn.Conv2d(ci, ci, 3, s, 1, groups=ci),
        nn.BatchNorm2d(ci),
        nn.Hardswish(),
        nn.Conv2d(ci, co, 1),
        nn.BatchNorm2d(co),
        nn.Hardswish(),
    )


class M(nn.Module):
    def __init__(s):
        super().__init__()
        s.f = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1),
            dw(32, 64, 1),
            dw(64, 128, 2),
            dw(128, 256, 2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        s.head = nn.Sequential(
            nn.Linear(256, 2048), nn.GELU(), nn.Linear(2048, 1000)
        )  # ~2.6M params so the data file is non-trivial

    def forward(s, x):
        return s.head(s.f(x))


prog = torch.onnx.export(
    M().eval(),
    (torch.randn(1, 3, 96, 96),),
    dynamo=True,
    input_names=["pixel_values"],
    output_names=["logits"],
    dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=32)}},
)
prog.save(out("torch_dynamo_cnn_extdata"), external_data=True)
