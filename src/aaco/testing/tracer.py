"""A tracer that wraps the capture worker like rocprofv3 does and writes a rocprofv3-format
kernel trace (``<out>/<host>/<pid>_kernel_trace.csv``) of known kernels.

Run as a program (``python -m aaco.testing.tracer OUT KERNELS_JSON -- APP...``) it runs the
application, then writes the CSV with the application's pid, and exits with its code.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import ClassVar

from aaco.importers._rocprofiler_sdk import KERNEL_TRACE_COLUMNS
from aaco.tracers.base import Tracer


@dataclass(frozen=True)
class RecordedKernel:
    """One kernel dispatch: name, correlation id, start and end (ns), workgroup and grid x."""

    name: str
    correlation_id: int
    start_ns: int
    end_ns: int
    workgroup_x: int = 64
    grid_x: int = 64


class FakeTracer(Tracer):
    """Records :attr:`kernels` for any execution provider; set the class attribute (or
    subclass) before the run."""

    name: ClassVar[str] = "fake"
    description: ClassVar[str] = "writes a rocprofv3-format trace of known kernels"
    output_dir: ClassVar[str] = "profiler/fake_tracer"
    kernels: ClassVar[list[RecordedKernel]] = [
        RecordedKernel("fake_gemm_kernel", 1, 1_000_000_000, 1_000_020_000, 256, 4096),
    ]

    def prepare(self, provider: str) -> None:
        pass

    def command(self, output_dir: Path) -> list[str]:
        kernels = json.dumps([astuple(k) for k in self.kernels])
        return [sys.executable, "-m", "aaco.testing.tracer", str(output_dir), kernels, "--"]

    def check_output(self, files: list[str]) -> str | None:
        if not any(f.endswith("_kernel_trace.csv") for f in files):
            return f"fake tracer wrote no *_kernel_trace.csv under {self.output_dir}"
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args or args.index("--") != 2:
        print("usage: python -m aaco.testing.tracer OUT KERNELS_JSON -- APP...", file=sys.stderr)
        return 2
    out, kernels_json, app = Path(args[0]), args[1], args[3:]
    proc = subprocess.Popen(app)
    rc = proc.wait()
    kernels = [RecordedKernel(*k) for k in json.loads(kernels_json)]
    target = out / socket.gethostname() / f"{proc.pid}_kernel_trace.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(KERNEL_TRACE_COLUMNS["current"])
        for i, k in enumerate(kernels):
            w.writerow(
                ["KERNEL_DISPATCH", "Agent 2", 1, 0, proc.pid, i + 1, 40 + i, k.name,
                 k.correlation_id, k.start_ns, k.end_ns, 0, 0, 32, 0, 16, k.workgroup_x, 1, 1,
                 k.grid_x, 1, 1]
            )  # fmt: skip
    return rc


if __name__ == "__main__":
    sys.exit(main())
