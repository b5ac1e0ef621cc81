"""Record real CUDA Kineto traces for the critical-path tests and HTA agreement.

Run on a machine with an NVIDIA GPU and PyTorch (CUDA build)::

    python scripts/record_cuda_traces.py OUT_DIR

Writes into OUT_DIR:

* ``cuda_sync_streams.json.gz``: a small program built to exercise every causal edge the
  critical path knows: two streams with ``cudaEventRecord`` / ``cudaStreamWaitEvent``,
  ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, a blocking
  device-to-host copy (``.item()``), a pinned async copy, a CUDA graph replay
  (``cudaGraphLaunch``), a CPU-only gap (``time.sleep``) and a GPU-bound stretch of large
  matrix products.  3 profiled steps, ``enable_cuda_sync_events`` on (Kineto ``cuda_sync``
  events carry ``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id``).
* ``cuda_transformer_infer.json.gz``: inference of a small transformer encoder (fp16), 5
  profiled steps, the kind of trace a user brings.

The module also exposes ``build()`` (``--framework torch --model file.py:build``) and, run as
``python scripts/record_cuda_traces.py --workload N``, a plain workload with no profiler for
``aaco profile --tracer torch -- ...``.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def _sync_config() -> Any:
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception:  # older torch: no cuda_sync events
        return None


def _sync_step(
    mats: list[torch.Tensor], side: torch.cuda.Stream, graph: Any, static_in: torch.Tensor
) -> float:
    a, b, big = mats
    main = torch.cuda.current_stream()
    with record_function("main_work"):
        c = a @ b
        c = torch.relu(c)
    ev = torch.cuda.Event()
    ev.record(main)
    with torch.cuda.stream(side):
        side.wait_event(ev)
        with record_function("side_work"):
            d = (c * 2.0) @ b
            d = torch.tanh(d)
    ev2 = torch.cuda.Event()
    ev2.record(side)
    main.wait_stream(side)
    with record_function("join"):
        e = c + d
    ev2.synchronize()
    with record_function("graph_replay"):
        static_in.copy_(e[: static_in.shape[0], : static_in.shape[1]])
        graph.replay()
    side.synchronize()
    with record_function("cpu_gap"):
        time.sleep(0.002)
    with record_function("gpu_bound"):
        x = big
        for _ in range(4):
            x = torch.tanh(x @ big)
    host = torch.empty(1024, pin_memory=True)
    host.copy_(x[0, :1024], non_blocking=True)
    value = float(e.sum().item())  # blocking DtoH copy
    torch.cuda.synchronize()
    return value + float(host[0])


def _record_sync(out: Path) -> None:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(512, 512, device=dev)
    b = torch.randn(512, 512, device=dev)
    big = torch.randn(2048, 2048, device=dev) / 45.0
    side = torch.cuda.Stream()
    static_in = torch.zeros(256, 256, device=dev)
    w = torch.randn(256, 256, device=dev)
    # warm up before capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            torch.relu(static_in @ w) + 1.0
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = torch.relu(static_in @ w)
        y = y * 0.5 + 1.0
        _ = torch.softmax(y, dim=-1)
    for _ in range(2):
        _sync_step([a, b, big], side, graph, static_in)
    _profile(out, lambda: _sync_step([a, b, big], side, graph, static_in), steps=3)


class _Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(
            d_model=256, nhead=4, dim_feedforward=1024, batch_first=True
        )
        self.enc = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.head = torch.nn.Linear(256, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x)[:, 0])


def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A small transformer encoder and its input (``aaco run --framework torch``)."""
    torch.manual_seed(0)
    return _Encoder().eval(), (torch.randn(8, 64, 256),)


def _record_transformer(out: Path, steps: int = 5) -> None:
    model, (x,) = build()
    model = model.cuda().half()
    x = x.cuda().half()
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()

        def step() -> float:
            y = model(x)
            return float(y.float().sum().item())

        _profile(out, step, steps=steps)


def _profile(out: Path, step: Any, steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"

        def on_ready(prof: profile) -> None:
            prof.export_chrome_trace(str(raw))

        kwargs: dict[str, Any] = {}
        cfg = _sync_config()
        if cfg is not None:
            kwargs["experimental_config"] = cfg
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
            record_shapes=True,
            on_trace_ready=on_ready,
            **kwargs,
        ) as prof:
            for _ in range(steps + 2):
                step()
                prof.step()
        with open(raw, "rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)


def _workload(n: int) -> None:
    model, (x,) = build()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(dev)
    x = x.to(dev)
    with torch.no_grad():
        for _ in range(n):
            y = model(x)
            float(y.sum().item())
    print(f"ran {n} steps on {dev}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir", nargs="?")
    p.add_argument("--workload", type=int, default=0)
    p.add_argument(
        "--big", type=int, default=0,
        help="only write cuda_transformer_big.json.gz: N profiled steps (about 570 events each)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.workload:
        _workload(args.workload)
        return 0
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.big:
        _record_transformer(out / "cuda_transformer_big.json.gz", steps=args.big)
        return 0
    _record_sync(out / "cuda_sync_streams.json.gz")
    _record_transformer(out / "cuda_transformer_infer.json.gz")
    for f in sorted(out.iterdir()):
        print(f.name, f.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
