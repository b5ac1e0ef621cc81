# TorchScript-based exporter (dynamo=False), small ResNet-style CNN, dynamic batch/H/W, opset 17.
import torch
import torch.nn as nn
from _common import out

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c1 = nn.Conv2d(c, c, 3, padding=1)
        s.b1 = nn.BatchNorm2d(c)
        s.c2 = nn.Conv2d(c, c, 3, padding=1)
        s.b2 = nn.BatchNorm2d(c)

    def forward(s, x):
        return torch.relu(x + s.b2(s.c2(torch.relu(s.b1(s.c1(x))))))


class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2)
        )
        s.blocks = nn.Sequential(Block(16), Block(16))
        s.head = nn.Linear(16, 10)

    def forward(s, x):
        return torch.softmax(s.head(s.blocks(s.stem(x)).mean((2, 3))), -1)


m = Net().eval()
torch.onnx.export(
    m,
    (torch.randn(1, 3, 64, 64),),
    out("torch_ts_cnn"),
    dynamo=False,
    opset_version=17,
    input_names=["image"],
    output_names=["probs"],
    dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}, "probs": {0: "batch"}},
)
