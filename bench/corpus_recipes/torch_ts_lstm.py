# TorchScript-based exporter: 2-layer bidirectional LSTM tagger with embedding, dynamic
# batch/seq, opset 14.
import torch
import torch.nn as nn
from _common import out

torch.manual_seed(0)


class Tagger(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(100, 32)
        s.rnn = nn.LSTM(32, 48, num_layers=2, bidirectional=True, batch_first=True)
        s.fc = nn.Linear(96, 5)

    def forward(s, tokens):
        y, _ = s.rnn(s.emb(tokens))
        return s.fc(y)


torch.onnx.export(
    Tagger().eval(),
    (torch.randint(0, 100, (2, 7)),),
    out("torch_ts_lstm"),
    dynamo=False,
    opset_version=14,
    input_names=["tokens"],
    output_names=["logits"],
    dynamic_axes={"tokens": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
)
