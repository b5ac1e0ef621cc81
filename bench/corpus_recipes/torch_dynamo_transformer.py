# torch.export-based (dynamo=True) exporter via onnxscript: tiny Transformer encoder classifier,
# dynamic batch & seq.
import torch
import torch.nn as nn
from _common import out

torch.manual_seed(0)


class Enc(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(1000, 64)
        s.pos = nn.Parameter(torch.randn(1, 128, 64) * 0.02)
        layer = nn.TransformerEncoderLayer(
            64, 4, 128, dropout=0.0, batch_first=True, activation="gelu"
        )
        s.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        s.cls = nn.Linear(64, 3)

    def forward(s, input_ids, attention_mask):
        h = s.emb(input_ids) + s.pos[:, : input_ids.shape[1]]
        h = s.enc(h, src_key_padding_mask=attention_mask == 0)
        return s.cls(h[:, 0])


ids = torch.randint(0, 1000, (2, 16))
mask = torch.ones(2, 16, dtype=torch.int64)
B, S = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=128)
prog = torch.onnx.export(
    Enc().eval(),
    (ids, mask),
    dynamo=True,
    input_names=["input_ids", "attention_mask"],
    output_names=["logits"],
    dynamic_shapes={"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}},
)
prog.save(out("torch_dynamo_transformer"))
