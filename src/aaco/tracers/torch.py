"""The PyTorch profiler as a tracer of any Python program, with no change to its code.

The tracer has no command prefix: it puts :data:`INJECT_DIR`, a folder holding only a
``sitecustomize.py``, first on the command's ``PYTHONPATH`` and names the trace folder in
``AACO_TORCH_TRACE_DIR``. Every Python process the command starts then runs that
``sitecustomize`` at start-up (after chaining to any ``sitecustomize`` it shadows), which
waits for ``torch`` to be imported: only then does it start ``torch.profiler.profile`` (CPU,
plus CUDA/ROCm activity when a GPU is available, shapes recorded, CUDA sync events where the
profiler offers them), and at the interpreter's exit it stops it and writes the Kineto trace
``$AACO_TORCH_TRACE_DIR/<pid>.json``. A process that never imports torch writes nothing; a
failure of the hook is written to ``<pid>.error.txt`` beside the traces and never reaches
the program.

Example::

    aaco profile --tracer torch -- python train.py --epochs 1
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from aaco.session.paths import TORCH_TRACES_DIR
from aaco.tracers.base import Tracer

__all__ = ["ERROR_SUFFIX", "INJECT_DIR", "TRACE_DIR_ENV", "TorchTracer"]

#: the folder put first on ``PYTHONPATH``: it holds the ``sitecustomize`` that starts the profiler
INJECT_DIR = Path(__file__).resolve().parent / "_torch_inject"
#: names the folder the traces go to; the hook does nothing where it is unset
TRACE_DIR_ENV = "AACO_TORCH_TRACE_DIR"
#: a process whose hook failed writes ``<pid>.error.txt`` beside the traces
ERROR_SUFFIX = ".error.txt"


class TorchTracer(Tracer):
    """``torch.profiler`` started in every Python process of the command that imports torch."""

    name: ClassVar[str] = "torch"
    description: ClassVar[str] = (
        "PyTorch profiler (Kineto trace) injected through sitecustomize, no code change"
    )
    output_dir: ClassVar[str] = TORCH_TRACES_DIR

    def prepare(self, provider: str) -> None:
        """Nothing to check here: whether the command's Python has torch shows when it runs
        (a process that never imports it writes no trace, :meth:`check_output` says so)."""

    def command(self, output_dir: Path) -> list[str]:
        return []

    def environment(self, output_dir: Path) -> dict[str, str]:
        path = os.environ.get("PYTHONPATH")
        return {
            "PYTHONPATH": os.pathsep.join([str(INJECT_DIR), *([path] if path else [])]),
            TRACE_DIR_ENV: str(output_dir),
        }

    def check_output(self, files: list[str]) -> str | None:
        if any(f.endswith(".json") for f in files):
            return None
        errors = [f for f in files if f.endswith(ERROR_SUFFIX)]
        if errors:
            return f"the torch profiler hook failed (see {', '.join(errors)})"
        return (
            "no Python process of the command imported torch (or none exited normally), so "
            "the torch profiler wrote no trace"
        )
