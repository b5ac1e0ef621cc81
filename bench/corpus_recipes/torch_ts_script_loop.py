# TorchScript exporter on a torch.jit.script module with data-dependent control flow -> ONNX
# Loop + If, opset 16.
import torch
import torch.nn as nn
from _common import out

torch.manual_seed(0)


class Iter(nn.Module):
    def __init__(s):
        super().__init__()
        s.lin = nn.Linear(8, 8)

    def forward(s, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        for _ in range(int(n)):
            x = torch.tanh(s.lin(x))
        x = x * 2.0 if bool(x.sum() > 0) else x - 1.0
        return x


m = torch.jit.script(Iter().eval())
torch.onnx.export(
    m,
    (torch.randn(2, 8), torch.tensor(3)),
    out("torch_ts_script_loop"),
    dynamo=False,
    opset_version=16,
    input_names=["x", "n"],
    output_names=["y"],
    dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
)
