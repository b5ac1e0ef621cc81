# torch.profiler (Kineto) on the CPU: a torch.compile'd (inductor, C++ kernels) MLP and an eager
# LSTM in one trace, several profiler steps: "Torch-Compiled Region" and inductor-generated
# kernels next to aten ops.
import os

import torch
import torch.nn as nn

out = os.path.join(os.environ.get("AACO_CORPUS_OUT", "."), "record_torch_compile_lstm.json.gz")
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval()
lstm = nn.LSTM(64, 64, batch_first=True).eval()
try:
    fast = torch.compile(mlp)
    fast(torch.randn(8, 64))
except Exception:  # no C++ compiler: the eager module keeps the trace recordable
    fast = mlp
x = torch.randn(8, 16, 64)
with (
    torch.no_grad(),
    torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1),
        record_shapes=True,
    ) as prof,
):
    for _ in range(4):
        y, _ = lstm(x)
        fast(y.reshape(-1, 64))
        prof.step()
prof.export_chrome_trace(out)
