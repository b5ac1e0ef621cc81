"""NVIDIA Nsight Systems (nsys) as a tracer: its command line and output layout.

``--profile kernels`` on a CUDA backend (and ``aaco profile --tracer nsys -- CMD``) re-runs
the workload wrapped as::

    nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none \\
        [--cuda-event-trace=true] --export=sqlite --stats=false --force-overwrite=true \\
        --output=<bundle>/profiler/nsys/report \\
        <python> -m aaco.runners.harness <bundle> --capture

nsys writes ``report.nsys-rep`` and, through ``--export=sqlite``, ``report.sqlite`` beside it;
the nsys importer (:mod:`aaco.importers.nsys`) reads the export and leaves the report to it.
``--cuda-event-trace`` records ``cudaEventRecord`` with its stream (the table that links an
event sync to the stream it waited on); nsys releases before 2024 do not know the flag, so it
is passed only where ``nsys profile --help`` lists it. CPU sampling and context switches are
off: the capture is for the GPU timeline, and sampling would only add overhead.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

from aaco.errors import UsageError
from aaco.session.paths import NSYS_DIR
from aaco.tracers.base import ANY_PROVIDER, Tracer

__all__ = ["NSYS_PROVIDERS", "OUTPUT_DIR", "OUTPUT_NAME", "NsysTracer", "find_nsys"]

#: execution providers whose GPU work is CUDA, which nsys traces
NSYS_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})
#: where nsys writes, relative to the bundle
OUTPUT_DIR = NSYS_DIR
#: the report's name inside OUTPUT_DIR (nsys adds .nsys-rep, the export .sqlite)
OUTPUT_NAME = "report"
_EVENT_TRACE_FLAG = "--cuda-event-trace"
# `nsys profile --help` answers in about a second; a hung nsys must not hang the run
_HELP_TIMEOUT_S = 60.0


def find_nsys() -> str | None:
    """The nsys executable on PATH, or None."""
    return shutil.which("nsys")


def supports_cuda_event_trace(executable: str) -> bool:
    """Whether this nsys knows ``--cuda-event-trace`` (listed by ``nsys profile --help``)."""
    try:
        proc = subprocess.run(
            [executable, "profile", "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_HELP_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return _EVENT_TRACE_FLAG in proc.stdout + proc.stderr


class NsysTracer(Tracer):
    """CUDA API, kernel, copy, sync and NVTX trace, exported to SQLite."""

    name: ClassVar[str] = "nsys"
    description: ClassVar[str] = (
        "NVIDIA Nsight Systems CUDA, NVTX and OS runtime trace, exported to SQLite"
    )
    output_dir: ClassVar[str] = OUTPUT_DIR
    #: the providers it can trace; None: any
    providers: ClassVar[frozenset[str] | None] = NSYS_PROVIDERS

    def __init__(self) -> None:
        self.executable: str | None = None
        #: whether to pass --cuda-event-trace=true (decided by :meth:`prepare`)
        self.cuda_event_trace = False

    def prepare(self, provider: str) -> None:
        if (
            provider != ANY_PROVIDER
            and self.providers is not None
            and provider not in self.providers
        ):
            raise UsageError(
                f"the nsys tracer records CUDA work and {provider} runs none; use --backend "
                "cuda or tensorrt (or rocprofv3 on a ROCm backend)"
            )
        self.executable = find_nsys()
        if self.executable is None:
            raise UsageError(
                "the nsys tracer needs nsys on PATH (NVIDIA Nsight Systems: the CUDA "
                "toolkit's nsight-systems package or developer.nvidia.com/nsight-systems); "
                "not found"
            )
        self.cuda_event_trace = supports_cuda_event_trace(self.executable)

    def command(self, output_dir: Path) -> list[str]:
        """The nsys prefix; the worker's own command line follows it (nsys stops reading
        options at the first word that is not one)."""
        return [
            self.executable or "nsys",
            "profile",
            "--trace=cuda,nvtx,osrt",
            "--sample=none",
            "--cpuctxsw=none",
            *([f"{_EVENT_TRACE_FLAG}=true"] if self.cuda_event_trace else []),
            "--export=sqlite",
            "--stats=false",
            "--force-overwrite=true",
            f"--output={output_dir / OUTPUT_NAME}",
        ]

    def check_output(self, files: list[str]) -> str | None:
        # the importer reads the export, or exports the report itself where nsys runs
        if any(f.endswith((".sqlite", ".nsys-rep", ".qdrep")) for f in files):
            return None
        if any(f.endswith(".qdstrm") for f in files):
            return (
                f"nsys left only its raw .qdstrm capture under {OUTPUT_DIR}: it could not "
                "turn it into a report here (its QdstrmImporter failed or is missing)"
            )
        return f"nsys wrote no report under {OUTPUT_DIR}"
