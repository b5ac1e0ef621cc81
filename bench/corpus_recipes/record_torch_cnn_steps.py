# torch.profiler (Kineto) on the CPU: a small CNN's inference under a schedule (wait 1, warmup 1,
# active 3), record_shapes: ProfilerStep#N annotations, aten ops with input shapes.
import os

import torch
import torch.nn as nn

out = os.path.join(os.environ.get("AACO_CORPUS_OUT", "."), "record_torch_cnn_steps.json.gz")
torch.manual_seed(0)
net = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(32, 10),
).eval()  # fmt: skip
x = torch.randn(4, 3, 64, 64)
sched = torch.profiler.schedule(wait=1, warmup=1, active=3)
with (
    torch.inference_mode(),
    torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, record_shapes=True
    ) as prof,
):
    for _ in range(5):
        net(x)
        prof.step()
prof.export_chrome_trace(out)
