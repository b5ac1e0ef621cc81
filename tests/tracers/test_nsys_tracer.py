"""The nsys tracer: its command line, its checks before a run, what it accepts as output.

There is no nsys here (and the GPU machines lent to the project record no report with it), so
``prepare`` is tested against PATH without nsys and with a fake ``nsys`` script that answers
``nsys profile --help`` as a release with or without ``--cuda-event-trace`` would.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from aaco.errors import UsageError
from aaco.session.paths import NSYS_DIR
from aaco.tracers.base import ANY_PROVIDER, TRACERS
from aaco.tracers.nsys import OUTPUT_DIR, NsysTracer


def _fake_nsys(bin_dir: Path, help_text: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nsys"
    exe.write_text(f'#!/bin/sh\n[ "$1 $2" = "profile --help" ] || exit 3\necho "{help_text}"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def test_registered_by_name() -> None:
    assert TRACERS.get("nsys") is NsysTracer
    assert "nsys" in TRACERS.names()
    assert NsysTracer.output_dir == OUTPUT_DIR == NSYS_DIR == "profiler/nsys"


def test_command_line() -> None:
    tracer = NsysTracer()
    tracer.executable = "/opt/nvidia/nsight-systems/bin/nsys"
    out = Path("/b/profiler/nsys")
    assert tracer.command(out) == [
        "/opt/nvidia/nsight-systems/bin/nsys",
        "profile",
        "--trace=cuda,nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
        "--export=sqlite",
        "--stats=false",
        "--force-overwrite=true",
        "--output=/b/profiler/nsys/report",
    ]
    tracer.cuda_event_trace = True
    assert "--cuda-event-trace=true" in tracer.command(out)
    assert tracer.command(out)[-1] == "--output=/b/profiler/nsys/report"


def test_prepare_without_nsys_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as err:
        NsysTracer().prepare("CUDAExecutionProvider")
    msg = str(err.value)
    assert "\n" not in msg and "nsys on PATH" in msg and "Nsight Systems" in msg


def test_prepare_refuses_a_provider_without_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nsys(tmp_path / "bin", "")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(UsageError, match="CPUExecutionProvider runs none"):
        NsysTracer().prepare("CPUExecutionProvider")


@pytest.mark.parametrize(
    ("help_text", "event_trace"),
    [
        ("--cuda-event-trace=<true|false> trace CUDA events", True),
        ("--trace=<cuda,nvtx,osrt>", False),
    ],
)
def test_prepare_finds_nsys_and_its_event_trace_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, help_text: str, event_trace: bool
) -> None:
    exe = _fake_nsys(tmp_path / "bin", help_text)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for provider in ("CUDAExecutionProvider", ANY_PROVIDER):
        tracer = NsysTracer()
        tracer.prepare(provider)
        assert tracer.executable == str(exe)
        assert tracer.cuda_event_trace is event_trace
        assert ("--cuda-event-trace=true" in tracer.command(tmp_path)) is event_trace


def test_check_output() -> None:
    tracer = NsysTracer()
    base = "profiler/nsys/report"
    assert tracer.check_output([f"{base}.nsys-rep", f"{base}.sqlite"]) is None
    # the importer exports a report by itself where nsys runs
    assert tracer.check_output([f"{base}.nsys-rep"]) is None
    why = tracer.check_output([f"{base}.qdstrm"])
    assert why is not None and ".qdstrm" in why
    assert tracer.check_output([]) == "nsys wrote no report under profiler/nsys"
