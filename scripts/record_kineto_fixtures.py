"""Record the real CPU Kineto fixtures of tests/importers/test_kineto.py with torch.profiler.

Run with any Python that has torch (CPU build is enough)::

    python scripts/record_kineto_fixtures.py tests/importers/fixtures/kineto

Writes ``cpu_mlp.json.gz``: a tiny MLP, 3 profiled steps (schedule wait=1, warmup=1,
active=3), ``record_shapes=True``, exported with ``export_chrome_trace``; and
``cpu_all_options.json.gz``: forward and backward of a tiny convnet, 2 profiled steps, with
every profiler option on (``record_shapes``, ``with_stack``, ``with_flops``,
``profile_memory``, ``with_modules``: python_function, cpu_instant_event ``[memory]`` and
fwdbwd flow events) and a ``record_function`` whose name holds brackets, braces and the
``},{`` event separator.
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main(out_dir: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(2, 8)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"

        def on_ready(prof: profile) -> None:
            prof.export_chrome_trace(str(raw))

        with (
            profile(
                activities=[ProfilerActivity.CPU],
                schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                record_shapes=True,
                on_trace_ready=on_ready,
            ) as prof,
            torch.no_grad(),
        ):
            for _ in range(5):
                model(x)
                prof.step()
        with gzip.open(out_dir / "cpu_mlp.json.gz", "wb") as f:
            f.write(raw.read_bytes())
        _all_options(Path(tmp) / "all.json")
        with gzip.open(out_dir / "cpu_all_options.json.gz", "wb") as f:
            f.write((Path(tmp) / "all.json").read_bytes())


def _all_options(raw: Path) -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(18, 2)
    )
    x = torch.randn(1, 1, 5, 5)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        record_shapes=True,
        with_stack=True,
        with_flops=True,
        profile_memory=True,
        with_modules=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
    ) as prof:
        for _ in range(3):
            with record_function("block [a] {b}, },{ c"):
                net(x).sum().backward()
            prof.step()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
