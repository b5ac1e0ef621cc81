"""rocprofv3 kernel capture: the command line, the output layout and the import, end to end.

There is no ROCm here, so the tests put a fake ``rocprofv3`` on PATH: a small script that
parses the command line AACO builds (exiting 3 on anything it does not expect), runs the
wrapped worker, and writes CSVs in rocprofv3's current-generation columns under
``<-d>/<expanded -o>_<domain>.csv``, the layout the real tool produces. The CPU backend is
let through by registering, for the test, a rocprofv3 tracer that accepts any provider (the
plug-in seam; production code has no test switch).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aaco.errors import UsageError
from aaco.importers._rocprofiler_sdk import KERNEL_TRACE_COLUMNS
from aaco.importers.registry import detect
from aaco.importers.rocprofv3 import Rocprofv3DirImporter
from aaco.run import RunOptions, run_model
from aaco.runners.harness import CAPTURE_FLAG, WORKER_MODULE
from aaco.tracers.base import TRACERS
from aaco.tracers.rocprofv3 import OUTPUT_DIR, Rocprofv3Tracer


class AnyProviderRocprofv3(Rocprofv3Tracer):
    """rocprofv3 as AACO drives it, let through on the CPU execution provider."""

    providers = None


def check_kernel_capture(provider: str) -> str | None:
    tracer = Rocprofv3Tracer()
    tracer.prepare(provider)
    return tracer.executable


def rocprofv3_command(exe: str, output_dir: Path) -> list[str]:
    tracer = Rocprofv3Tracer()
    tracer.executable = exe
    return tracer.command(output_dir)


# Known by construction: what the fake reports as the GPU work of the capture.
KERNELS = [
    # name, correlation id, start, end (ns since boot), workgroup x, grid x (work-items)
    (
        "Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN",
        11,
        1_000_000_000_000_000,
        1_000_000_000_020_000,
        256,
        4096,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4>",
        12,
        1_000_000_000_030_000,
        1_000_000_000_034_000,
        128,
        1024,
    ),
    ("MIOpenBatchNormFwdInferSpatialEst", 13, 1_000_000_000_040_000, 1_000_000_000_047_000, 64, 64),
]

FAKE = r'''#!@PYTHON@
"""Fake rocprofv3: checks AACO's command line, runs the app, writes rocprofv3-format CSVs."""
import argparse, csv, json, os, socket, subprocess, sys
from pathlib import Path

argv = sys.argv[1:]
if "--" not in argv:
    sys.exit("fake rocprofv3: no '--' before the application")
cut = argv.index("--")
opts, app = argv[:cut], argv[cut + 1:]
ap = argparse.ArgumentParser(prog="rocprofv3")
ap.add_argument("--kernel-trace", action="store_true")
ap.add_argument("--hip-trace", action="store_true")
ap.add_argument("--memory-copy-trace", action="store_true")
ap.add_argument("--output-format", "-f", nargs="+", default=["rocpd"])
ap.add_argument("-d", "--output-directory", default="%hostname%/%pid%")
ap.add_argument("-o", "--output-file", default="%hostname%/%pid%")
ns = ap.parse_args(opts)
if not (ns.kernel_trace and ns.hip_trace and ns.memory_copy_trace) or ns.output_format != ["csv"]:
    sys.exit(3)
proc = subprocess.Popen(app)
rc = proc.wait()
log = os.environ.get("FAKE_ROCPROF_LOG")
if log:
    Path(log).write_text(json.dumps({"argv": argv, "app_pid": proc.pid, "app_rc": rc}))
if os.environ.get("FAKE_ROCPROF_WRITE_NOTHING"):
    sys.exit(rc)

def expand(s):
    return s.replace("%hostname%", socket.gethostname()).replace("%pid%", str(proc.pid))

prefix = Path(expand(ns.output_directory)) / expand(ns.output_file)
prefix.parent.mkdir(parents=True, exist_ok=True)
kernels = json.loads(@KERNELS@)

def write(domain, header, rows):
    with open(f"{prefix}_{domain}.csv", "w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(header)
        w.writerows(rows)

write(
    "kernel_trace",
    json.loads(@HEADER@),
    [["KERNEL_DISPATCH", "Agent 2", 1, 0, proc.pid, i + 1, 40 + i, name, corr, start, end,
      0, 0, 32, 0, 16, wg, 1, 1, grid, 1, 1]
     for i, (name, corr, start, end, wg, grid) in enumerate(kernels)],
)
write(
    "hip_api_trace",
    ["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp",
     "End_Timestamp"],
    [["HIP_RUNTIME_API", "hipLaunchKernel", proc.pid, proc.pid, corr, start - 9000, start - 4000]
     for name, corr, start, end, wg, grid in kernels]
    + [["HIP_RUNTIME_API", "hipMemcpy", proc.pid, proc.pid, 10, 999_999_999_990_000,
        999_999_999_999_000]],
)
write(
    "memory_copy_trace",
    ["Kind", "Direction", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
     "Start_Timestamp", "End_Timestamp"],
    [["MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", "Agent 0", "Agent 2", 10,
      999_999_999_992_000, 999_999_999_998_000]],
)
sys.exit(rc)
'''


@pytest.fixture
def fake_rocprofv3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake rocprofv3 first on PATH; returns the file it logs its command line to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "rocprofv3"
    exe.write_text(
        FAKE.replace("@PYTHON@", sys.executable)
        .replace("@KERNELS@", repr(json.dumps(KERNELS)))
        .replace("@HEADER@", repr(json.dumps(KERNEL_TRACE_COLUMNS["current"])))
    )
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "fake_rocprof.json"
    monkeypatch.setenv("FAKE_ROCPROF_LOG", str(log))
    return log


@pytest.fixture
def any_provider() -> Iterator[None]:
    with TRACERS.registered("rocprofv3", AnyProviderRocprofv3):
        yield


def _opts(tmp_path: Path) -> RunOptions:
    return RunOptions(
        model="mlp",
        warmup=1,
        iterations=3,
        profile_iterations=2,
        telemetry=False,
        profile_mode="kernels",
        output=tmp_path / "sessions",
    )


def test_command_line() -> None:
    assert rocprofv3_command("/opt/rocm/bin/rocprofv3", Path("/b/profiler/rocprofv3")) == [
        "/opt/rocm/bin/rocprofv3",
        "--kernel-trace",
        "--hip-trace",
        "--memory-copy-trace",
        "--output-format",
        "csv",
        "-d",
        "/b/profiler/rocprofv3",
        "-o",
        "%hostname%/%pid%",
        "--",
    ]


def test_backends_without_rocprof_kernels_are_explained() -> None:
    with pytest.raises(UsageError, match="CPUExecutionProvider runs no GPU kernels"):
        check_kernel_capture("CPUExecutionProvider")
    with pytest.raises(UsageError, match="--enable_cuda_profiling; use --framework torch"):
        check_kernel_capture("CUDAExecutionProvider")


def test_missing_rocprofv3_is_a_usage_error_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no rocprofv3
    for provider in ("ROCMExecutionProvider", "MIGraphXExecutionProvider"):
        with pytest.raises(UsageError) as info:
            check_kernel_capture(provider)
        assert str(info.value) == (
            "--profile kernels needs rocprofv3 on PATH (ROCm's rocprofiler-sdk); not found"
        )
    with (
        TRACERS.registered("rocprofv3", AnyProviderRocprofv3),
        pytest.raises(UsageError, match="needs rocprofv3 on PATH"),
    ):
        run_model(_opts(tmp_path))
    assert not list((tmp_path / "sessions").rglob("session.json"))


def test_capture_end_to_end(tmp_path: Path, fake_rocprofv3: Path, any_provider: None) -> None:
    s = run_model(_opts(tmp_path))
    assert s.status == "completed", s.error
    cap = s.meta["kernel_capture"]
    assert cap["status"] == "completed", cap
    assert cap["runs"] == 2 + 2  # profile warmup (max(2, warmup)) + profile iterations

    # The command line rocprofv3 received, written out: rocprofv3's documented call
    # (`--kernel-trace --hip-trace --memory-copy-trace --output-format csv -d DIR -o NAME --
    # app`), DIR the staging bundle's profiler/rocprofv3 (the bundle is built in the hidden
    # `.<id>.partial` folder and renamed when the run ends), NAME rocprofv3's default
    # <hostname>/<pid> layout, and the app AACO's capture worker on that staging bundle.
    seen = json.loads(fake_rocprofv3.read_text())
    staging = s.path.parent / f".{s.path.name}.partial"
    assert cap["output_dir"] == str(staging / "profiler" / "rocprofv3")
    assert seen["argv"] == [
        "--kernel-trace",
        "--hip-trace",
        "--memory-copy-trace",
        "--output-format",
        "csv",
        "-d",
        str(staging / "profiler" / "rocprofv3"),
        "-o",
        "%hostname%/%pid%",
        "--",
        sys.executable,
        "-m",
        WORKER_MODULE,
        str(staging),
        CAPTURE_FLAG,
    ]
    assert seen["app_rc"] == 0
    out_dir = s.path / "profiler" / "rocprofv3"

    # <dir>/<hostname>/<pid>_<domain>.csv
    host_dir = out_dir / socket.gethostname()
    pid = seen["app_pid"]
    for domain in ("kernel_trace", "hip_api_trace", "memory_copy_trace"):
        assert (host_dir / f"{pid}_{domain}.csv").is_file()
    assert sorted(cap["files"]) == sorted(
        f"{OUTPUT_DIR}/{socket.gethostname()}/{pid}_{d}.csv"
        for d in ("hip_api_trace", "kernel_trace", "memory_copy_trace")
    )
    # the measuring worker's own account is intact, the capture has its own
    assert json.loads((s.path / "runtime/worker_result.json").read_text())["stage"] == "done"
    capture = json.loads((s.path / "runtime/capture_result.json").read_text())
    assert capture["status"] == "completed" and capture["profile_runs"] == 4
    # the ORT operator profile is still there
    ops = s.table("ops")
    assert ops is not None and "onnxruntime" in set(ops.column("source").to_pylist())

    # The kernel ingest, end to end: AACO's own importer and analysis must run; any failure
    # of theirs (an ImportError included) is recorded under kernel_ingest and fails here.
    assert [f for f in s.meta["failures"] if f["stage"] == "kernel_ingest"] == []
    assert detect(out_dir) is Rocprofv3DirImporter
    kernels = s.table("kernels")
    assert kernels is not None
    rows = sorted(kernels.select(["name", "dur_ns"]).to_pylist(), key=lambda r: r["dur_ns"])
    assert rows == [
        {"name": KERNELS[1][0], "dur_ns": 4_000},
        {"name": KERNELS[2][0], "dur_ns": 7_000},
        {"name": KERNELS[0][0], "dur_ns": 20_000},
    ]
    assert s.table("memcpy").num_rows == 1  # type: ignore[union-attr]
    assert (s.path / "metrics" / "derived_metrics.json").is_file()


def test_failed_capture_keeps_the_run(
    tmp_path: Path, fake_rocprofv3: Path, any_provider: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ROCPROF_WRITE_NOTHING", "1")
    s = run_model(_opts(tmp_path))
    assert s.status == "completed", s.error
    assert s.meta["kernel_capture"]["status"] == "failed"
    assert s.meta["kernel_capture"]["error"] == (
        "rocprofv3 wrote no *_kernel_trace.csv under profiler/rocprofv3"
    )
    assert any(f["stage"] == "kernel_capture" for f in s.meta["failures"])
    assert s.summary["latency_ms"]["count"] == 3
