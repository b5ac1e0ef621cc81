"""Kernel capture under rocprofv3: the command line, the capture worker, and how it ended.

``aaco run --profile kernels`` on a ROCm or MIGraphX backend re-runs the profiled workload
after the measured loop, in a worker wrapped as::

    rocprofv3 --kernel-trace --hip-trace --memory-copy-trace --output-format csv \\
        -d <bundle>/profiler/rocprofv3 -o %hostname%/%pid% \\
        -- <python> -m aaco.runners.rocprof <bundle>

``-o`` is rocprofv3's output-file prefix and takes its ``%hostname%``/``%pid%`` keys, so the
CSVs land as ``profiler/rocprofv3/<host>/<pid>_kernel_trace.csv`` (also ``_hip_api_trace``,
``_memory_copy_trace``): the layout rocprofv3 uses by default, which the importers expect.
ROCm 7 defaults to the rocpd database, hence the explicit ``--output-format csv``.

The capture worker (``python -m aaco.runners.rocprof BUNDLE_DIR``) reads the same
``runtime/worker_spec.json`` as the ONNX Runtime worker and runs ``profile_warmup`` +
``profile_iterations`` calls of a plain session (no ORT profiling: the kernels are what is
wanted, without ORT's own profiler in the way). It reports in ``runtime/capture_*`` files so
the measuring worker's account is kept.

``AACO_FORCE_ROCPROF=1`` lets the capture run on a backend that is not ROCm; it exists for
AACO's own tests (a fake ``rocprofv3`` on the CPU backend) and should not be set otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aaco.errors import UsageError
from aaco.runners.spec import CAPTURE_FILES, SPEC_FILE, RunSpec, WorkerResult

__all__ = [
    "FORCE_ENV",
    "OUTPUT_DIR",
    "ROCPROF_PROVIDERS",
    "KernelCapture",
    "capture_kernels",
    "check_kernel_capture",
    "find_rocprofv3",
    "main",
    "rocprofv3_command",
    "run_capture_worker",
]

#: execution providers whose kernels rocprofv3 can trace
ROCPROF_PROVIDERS = frozenset({"ROCMExecutionProvider", "MIGraphXExecutionProvider"})
#: test-only switch: allow the capture on a non-ROCm backend (see the module docstring)
FORCE_ENV = "AACO_FORCE_ROCPROF"
#: where rocprofv3 writes, relative to the bundle
OUTPUT_DIR = "profiler/rocprofv3"
#: rocprofv3's output-file prefix: <host>/<pid>, its documented default layout
OUTPUT_NAME = "%hostname%/%pid%"
WORKER_MODULE = "aaco.runners.rocprof"


def find_rocprofv3() -> str | None:
    """The rocprofv3 executable on PATH, or None."""
    return shutil.which("rocprofv3")


def _forced() -> bool:
    return os.environ.get(FORCE_ENV, "") not in ("", "0")


def check_kernel_capture(provider: str) -> str:
    """The rocprofv3 to use for ``--profile kernels`` on ``provider``, or a UsageError
    saying why kernels cannot be captured there; called before anything runs."""
    if provider not in ROCPROF_PROVIDERS and not _forced():
        if provider == "CUDAExecutionProvider" or provider == "TensorrtExecutionProvider":
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
    exe = find_rocprofv3()
    if exe is None:
        raise UsageError(
            "--profile kernels needs rocprofv3 on PATH (ROCm's rocprofiler-sdk); not found"
        )
    return exe


def rocprofv3_command(rocprofv3: str, output_dir: Path) -> list[str]:
    """The rocprofv3 prefix; the worker's own command line follows the ``--``."""
    return [
        rocprofv3,
        "--kernel-trace",
        "--hip-trace",
        "--memory-copy-trace",
        "--output-format",
        "csv",
        "-d",
        str(output_dir),
        "-o",
        OUTPUT_NAME,
        "--",
    ]


@dataclass
class KernelCapture:
    """How the capture went; ``output_dir`` holds the CSVs when ``status`` is completed."""

    status: str  # completed | failed | timeout
    error: str | None
    command: list[str]
    output_dir: str
    returncode: int | None
    wall_s: float
    files: list[str] = field(default_factory=list)
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def capture_kernels(bundle_dir: Path, rocprofv3: str, timeout_s: float | None) -> KernelCapture:
    """Re-run the profiled workload of ``bundle_dir``'s spec under rocprofv3.

    Never raises for a failed capture: the status and error say what happened, and the
    measured run already in the bundle stays as it is.
    """
    from aaco.runners.launch import launch_worker

    out = bundle_dir / OUTPUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    prefix = rocprofv3_command(rocprofv3, out)
    outcome = launch_worker(
        bundle_dir, WORKER_MODULE, timeout_s, None, wrapper=prefix, files=CAPTURE_FILES
    )
    files = sorted(str(p.relative_to(bundle_dir)) for p in out.rglob("*") if p.is_file())
    status, error = outcome.status, outcome.error
    if status == "completed" and not any(f.endswith("_kernel_trace.csv") for f in files):
        status = "failed"
        error = f"rocprofv3 wrote no *_kernel_trace.csv under {OUTPUT_DIR}"
    return KernelCapture(
        status=status,
        error=error,
        command=[*prefix, sys.executable, "-m", WORKER_MODULE, str(bundle_dir)],
        output_dir=str(out),
        returncode=outcome.returncode,
        wall_s=outcome.wall_ns / 1e9,
        files=files,
        runs=outcome.result.profile_runs if outcome.result else 0,
    )


def run_capture_worker(bundle_dir: Path) -> WorkerResult:
    """The workload rocprofv3 watches: the profiled runs of the spec, nothing else."""
    from aaco.runners.ort import _one_line, _Progress, _providers, _session_options, timing_loop

    result = WorkerResult()
    progress = _Progress(bundle_dir / CAPTURE_FILES.progress)
    try:
        import numpy as np
        import onnxruntime as ort

        from aaco.runners.inputs import make_array

        spec = RunSpec.from_json(json.loads((bundle_dir / SPEC_FILE).read_text()))
        names, options = _providers(spec)
        result.providers_requested = names
        result.stage = "load"
        progress.stage("load")
        sess = ort.InferenceSession(
            spec.model_path,
            sess_options=_session_options(spec, ort),
            providers=names,
            provider_options=options,
        )
        result.providers_active = list(sess.get_providers())
        rng = np.random.default_rng(spec.seed)
        feeds = {i.name: make_array(i, rng) for i in spec.inputs}
        output_names = [o.name for o in sess.get_outputs()]
        result.stage = "capture"
        progress.stage("capture")
        runs = spec.profile_warmup + spec.profile_iterations
        starts, ends = timing_loop(sess.run, output_names, feeds, runs)
        result.phases["kernel_capture"] = [starts[0], ends[-1]]
        result.profile_runs = runs
        result.profile_wall_ns = [e - s for s, e in zip(starts, ends, strict=True)]
        del sess
        result.status = "completed"
        result.stage = "done"
        progress.stage("done")
    except Exception as exc:
        result.status = "failed"
        result.error_type = type(exc).__name__
        result.error = _one_line(exc)
        with (bundle_dir / "runtime" / "capture_traceback.txt").open("w") as fh:
            traceback.print_exc(file=fh)
    from aaco.runners.rss import own_peak_rss_bytes
    from aaco.session.bundle import atomic_write_json

    result.peak_rss_bytes = own_peak_rss_bytes()  # last: it covers the whole run
    atomic_write_json(bundle_dir / CAPTURE_FILES.result, result.to_json())
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m aaco.runners.rocprof BUNDLE_DIR", file=sys.stderr)
        return 2
    result = run_capture_worker(Path(args[0]))
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
