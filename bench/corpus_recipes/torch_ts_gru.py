# TorchScript-based exporter: GRU with explicit initial hidden state input/output (streaming
# style), opset 13.
import torch
import torch.nn as nn
from _common import out

torch.manual_seed(0)


class G(nn.Module):
    def __init__(s):
        super().__init__()
        s.rnn = nn.GRU(40, 64, num_layers=2)
        s.fc = nn.Linear(64, 1)

    def forward(s, feats, h0):
        y, h = s.rnn(feats, h0)
        return torch.sigmoid(s.fc(y)), h


torch.onnx.export(
    G().eval(),
    (torch.randn(10, 1, 40), torch.zeros(2, 1, 64)),
    out("torch_ts_gru"),
    dynamo=False,
    opset_version=13,
    input_names=["feats", "h0"],
    output_names=["prob", "hn"],
    dynamic_axes={
        "feats": {0: "time", 1: "batch"},
        "h0": {1: "batch"},
        "prob": {0: "time", 1: "batch"},
        "hn": {1: "batch"},
    },
)
