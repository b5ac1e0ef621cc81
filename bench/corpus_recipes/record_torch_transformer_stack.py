# torch.profiler (Kineto) on the CPU: a Transformer encoder with with_stack, profile_memory and
# with_flops: python_function events, [memory] instant events, flops args, nested aten ops.
import os

import torch
import torch.nn as nn

out = os.path.join(os.environ.get("AACO_CORPUS_OUT", "."), "record_torch_transformer_stack.json.gz")
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
enc = nn.TransformerEncoder(layer, num_layers=2).eval()
x = torch.randn(2, 32, 64)
with (
    torch.no_grad(),
    torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        profile_memory=True,
        with_flops=True,
        record_shapes=True,
    ) as prof,
):
    for _ in range(3):
        with torch.profiler.record_function("encoder_step"):
            enc(x)
prof.export_chrome_trace(out)
