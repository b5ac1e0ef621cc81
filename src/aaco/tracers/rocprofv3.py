"""rocprofv3 (ROCm's rocprofiler-SDK) as a tracer: its command line and output layout.

``aaco run --profile kernels`` on a ROCm or MIGraphX backend re-runs the profiled workload
after the measured loop, in a capture worker wrapped as::

    rocprofv3 --kernel-trace --hip-trace --memory-copy-trace --output-format csv \\
        -d <bundle>/profiler/rocprofv3 -o %hostname%/%pid% \\
        -- <python> -m aaco.runners.harness <bundle> --capture

``-o`` is rocprofv3's output-file prefix and takes its ``%hostname%``/``%pid%`` keys, so the
CSVs land as ``profiler/rocprofv3/<host>/<pid>_kernel_trace.csv`` (also ``_hip_api_trace``,
``_memory_copy_trace``): the layout rocprofv3 uses by default, which the importers expect.
ROCm 7 defaults to the rocpd database, hence the explicit ``--output-format csv``.

``aaco profile --tracer rocprofv3 [--counters A,B] -- CMD`` wraps any command the same way
(:data:`~aaco.tracers.base.ANY_PROVIDER`: no provider check); :attr:`Rocprofv3Tracer.counters`
adds ``--pmc A,B``, whose per-dispatch values (``<pid>_counter_collection.csv``) feed the
kernel roofline. Counter collection serialises the kernels it samples, so their times are
those of a slower run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import ClassVar

from aaco.errors import UsageError
from aaco.session.paths import ROCPROFV3_DIR
from aaco.tracers.base import ANY_PROVIDER, Tracer

__all__ = ["OUTPUT_DIR", "OUTPUT_NAME", "ROCPROF_PROVIDERS", "Rocprofv3Tracer", "find_rocprofv3"]

#: execution providers whose kernels rocprofv3 can trace
ROCPROF_PROVIDERS = frozenset({"ROCMExecutionProvider", "MIGraphXExecutionProvider"})
#: where rocprofv3 writes, relative to the bundle
OUTPUT_DIR = ROCPROFV3_DIR
#: rocprofv3's output-file prefix: <host>/<pid>, its documented default layout
OUTPUT_NAME = "%hostname%/%pid%"


def find_rocprofv3() -> str | None:
    """The rocprofv3 executable on PATH, or None."""
    return shutil.which("rocprofv3")


class Rocprofv3Tracer(Tracer):
    """Kernel, HIP API and memory-copy traces as CSV."""

    name: ClassVar[str] = "rocprofv3"
    description: ClassVar[str] = "ROCm rocprofiler-SDK kernel, HIP API and memory-copy trace"
    output_dir: ClassVar[str] = OUTPUT_DIR
    #: the providers it can trace; None: any (a subclass for a workload whose GPU work
    #: rocprofv3 sees through another route)
    providers: ClassVar[frozenset[str] | None] = ROCPROF_PROVIDERS

    def __init__(self) -> None:
        self.executable: str | None = None
        #: hardware counters to collect with the trace (``--pmc``); none by default
        self.counters: tuple[str, ...] = ()

    def prepare(self, provider: str) -> None:
        if (
            self.providers is not None
            and provider != ANY_PROVIDER
            and provider not in self.providers
        ):
            if provider in ("CUDAExecutionProvider", "TensorrtExecutionProvider"):
                hint = (
                    f"{provider} writes Kernel events only in ONNX Runtime builds made with "
                    "--enable_cuda_profiling; use --framework torch for CUPTI kernels"
                )
            else:
                hint = (
                    f"{provider} runs no GPU kernels; use --backend rocm or migraphx (with "
                    "rocprofv3), or --framework torch --device cuda for CUPTI kernels"
                )
            raise UsageError(f"--profile kernels captures GPU kernels with rocprofv3: {hint}")
        self.executable = find_rocprofv3()
        if self.executable is None:
            what = "--tracer rocprofv3" if provider == ANY_PROVIDER else "--profile kernels"
            raise UsageError(f"{what} needs rocprofv3 on PATH (ROCm's rocprofiler-sdk); not found")

    def command(self, output_dir: Path) -> list[str]:
        """The rocprofv3 prefix; the worker's own command line follows the ``--``."""
        return [
            self.executable or "rocprofv3",
            "--kernel-trace",
            "--hip-trace",
            "--memory-copy-trace",
            *(["--pmc", ",".join(self.counters)] if self.counters else []),
            "--output-format",
            "csv",
            "-d",
            str(output_dir),
            "-o",
            OUTPUT_NAME,
            "--",
        ]

    def check_output(self, files: list[str]) -> str | None:
        if not any(f.endswith("_kernel_trace.csv") for f in files):
            return f"rocprofv3 wrote no *_kernel_trace.csv under {OUTPUT_DIR}"
        return None
