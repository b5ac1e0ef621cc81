# HF transformers BertModel with a tiny RANDOM config (no hub download), TorchScript exporter
# (opset 17, dynamic batch/seq),
# then onnxruntime.transformers.optimizer (model_type='bert') fuses into com.microsoft contrib ops
# (EmbedLayerNormalization / Attention / SkipLayerNormalization / BiasGelu ...).
import os
import tempfile

import torch
from _common import out
from onnxruntime.transformers.optimizer import optimize_model
from transformers import BertConfig, BertModel

torch.manual_seed(0)
cfg = BertConfig(
    vocab_size=1000,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=128,
)
bert = BertModel(cfg, add_pooling_layer=True).eval()


class Wrap(torch.nn.Module):  # fixes the positional-argument order for the exporter
    def __init__(s):
        super().__init__()
        s.bert = bert

    def forward(s, input_ids, attention_mask, token_type_ids):
        o = s.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            return_dict=True,
        )
        return o.last_hidden_state, o.pooler_output


m = Wrap().eval()
ids = torch.randint(0, 1000, (1, 16))
mask = torch.ones(1, 16, dtype=torch.int64)
tt = torch.zeros(1, 16, dtype=torch.int64)
raw = os.path.join(tempfile.mkdtemp(), "bert.onnx")
dyn = {"batch": 0, "seq": 1}
torch.onnx.export(
    m,
    (ids, mask, tt),
    raw,
    dynamo=False,
    opset_version=17,
    input_names=["input_ids", "attention_mask", "token_type_ids"],
    output_names=["last_hidden_state", "pooler_output"],
    dynamic_axes={
        n: {0: "batch", 1: "seq"}
        for n in ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]
    }
    | {"pooler_output": {0: "batch"}},
)
opt = optimize_model(raw, model_type="bert", num_heads=4, hidden_size=64)
print(opt.get_fused_operator_statistics())
opt.save_model_to_file(out("ortopt_bert_fused"))
