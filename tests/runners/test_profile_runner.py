"""aaco.runners.profile as a library: the tracer choice, the traced and measured runs, what a
run records; real subprocesses, the library's own FakeTracer at the tracer seam."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from aaco.diagnose import default_analyses
from aaco.errors import UsageError
from aaco.runners.profile import (
    KIND,
    ProfileOptions,
    choose_tracer,
    exit_status,
    profile_command,
    resolve_command,
)
from aaco.testing.tracer import FakeTracer
from aaco.tracers.base import TRACERS
from aaco.tracers.rocprofv3 import Rocprofv3Tracer
from aaco.tracers.torch import TorchTracer

PY = sys.executable


def _tool(bin_dir: Path, name: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / name
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


def test_tracer_none_and_unknown_names() -> None:
    choice = choose_tracer(["true"], "none")
    assert (choice.name, choice.tracer, choice.reason) == ("none", None, "--tracer none")
    with pytest.raises(UsageError, match=r"unknown --tracer 'x'; valid: auto, none, rocprofv3"):
        choose_tracer(["true"], "x")


def test_auto_prefers_rocprofv3_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _tool(tmp_path / "bin", "rocprofv3")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    choice = choose_tracer(["./app"], "auto")
    assert choice.name == "rocprofv3" and isinstance(choice.tracer, Rocprofv3Tracer)
    assert choice.reason == f"--tracer auto: rocprofv3 is on PATH ({exe})"
    assert choice.tracer.command(Path("out"))[0] == str(exe)


def test_auto_without_tools_or_python_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    choice = choose_tracer(["/bin/true"], "auto", "/bin/true")
    assert choice.name == "none" and choice.tracer is None
    assert choice.reason == (
        "--tracer auto: no rocprofv3 or nsys on PATH; the command is not a Python "
        "interpreter that can import torch"
    )


def test_auto_picks_torch_for_a_python_that_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("PATH", str(tmp_path))
    choice = choose_tracer([PY, "-c", "pass"], "auto", PY)
    assert choice.name == "torch" and isinstance(choice.tracer, TorchTracer)
    assert "is a Python interpreter that can import torch" in choice.reason


def test_resolve_command_says_what_a_shell_would(tmp_path: Path) -> None:
    plain = tmp_path / "data.txt"
    plain.write_text("not a program")
    assert resolve_command([str(plain)])[1:] == (
        126,
        f"permission denied (not an executable file): {plain}",
    )
    assert resolve_command([str(tmp_path)])[1] == 126
    assert resolve_command(["no-such-program-aaco"])[1:] == (
        127,
        "command not found: no-such-program-aaco",
    )
    path, status, why = resolve_command(["sh"])
    assert path is not None and status is None and why is None


def test_usage_errors_before_any_bundle(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with pytest.raises(UsageError, match="--counters are collected by rocprofv3"):
        profile_command(ProfileOptions(["true"], tracer="none", counters=("X",), output=root))
    with pytest.raises(UsageError, match="more than one writes system_events"):
        profile_command(
            ProfileOptions(
                ["true"], tracer="none", collectors=("system", "process_tree"), output=root
            )
        )
    with pytest.raises(UsageError, match="give the command to profile"):
        profile_command(ProfileOptions([], output=root))
    with pytest.raises(UsageError, match="--repeat must be >= 1"):
        profile_command(ProfileOptions(["true"], repeat=0, output=root))
    assert not root.exists()


def test_only_run_one_is_traced_and_the_others_are_measured(tmp_path: Path) -> None:
    with TRACERS.registered("fake", FakeTracer):
        session = profile_command(
            ProfileOptions(
                [PY, "-c", "print('hi')"],
                tracer="fake",
                repeat=3,
                output=tmp_path / "s",
                echo=False,
                collectors=("process_tree",),
            )
        )
    assert session.status == "completed" and exit_status(session) == 0
    assert session.meta["kind"] == KIND
    runs = session.meta["profile"]["runs"]
    assert [(r["run"], r["traced"], r["phase"]) for r in runs] == [
        (1, True, "warmup"),
        (2, False, "measured"),
        (3, False, "measured"),
    ]
    iters = session.iters()
    assert iters is not None
    assert iters.column("phase").to_pylist() == ["warmup", "measured", "measured"]
    assert iters.column("iteration").to_pylist() == [0, 0, 1]
    assert session.meta["run"]["warmup"] == 1 and session.meta["run"]["iterations"] == 2
    assert set(session.meta["phases"]) == {"warmup", "measured"}
    summary = session.summary
    assert summary is not None and summary["latency_ms"]["count"] == 2
    assert summary["warmup"]["first_iteration_ms"] == pytest.approx(runs[0]["wall_s"] * 1e3)
    assert summary["warnings"][0].startswith("run 1 was traced by fake (--tracer fake)")
    # the tracer's trace of run 1 was imported and analysed like any bundle's
    tracer = session.meta["profile"]["tracer"]
    assert tracer["status"] == "completed" and tracer["rows"]["kernels"] == 1
    kernels = session.table("kernels")
    assert kernels is not None and kernels.column("name").to_pylist() == ["fake_gemm_kernel"]
    assert (session.path / "metrics" / "bottleneck.json").is_file()
    # every run's output was kept (echo off: nothing reached this process's stdout)
    for r in runs:
        assert (session.path / r["stdout_tail"]).read_text() == "hi\n"
    analysis = json.loads((session.path / "analysis.json").read_text())
    assert analysis["runs"] == {
        "requested": 3,
        "ran": 3,
        "measured": 2,
        "traced_run": 1,
        "per_run": [
            {k: r[k] for k in ("run", "phase", "traced", "wall_s", "status", "exit_status")}
            | {"signal": None}
            for r in runs
        ],
    }
    assert analysis["dominant_kernels"][0]["name"] == "fake_gemm_kernel"
    assert analysis["dominant_kernels"][0]["share"] == pytest.approx(1.0)
    assert analysis["critical_path"] is None or isinstance(analysis["critical_path"], dict)


def test_a_run_that_fails_stops_the_others(tmp_path: Path) -> None:
    session = profile_command(
        ProfileOptions(
            ["sh", "-c", "exit 7"], tracer="none", repeat=4, output=tmp_path / "s", echo=False
        )
    )
    assert session.status == "failed" and exit_status(session) == 7
    assert [r["exit_status"] for r in session.meta["profile"]["runs"]] == [7]
    assert session.error is not None and session.error["returncode"] == 7
    assert "3 more run(s) skipped" in session.error["message"]
    # a failed session gets no diagnosis (as aaco run), but its summary file is written
    assert not (session.path / "metrics" / "bottleneck.json").exists()
    analysis = json.loads((session.path / "analysis.json").read_text())
    assert analysis["bottleneck"] is None and analysis["what_to_fix_first"] is None


def test_torch_tracer_environment_prepends_the_inject_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = TorchTracer().environment(Path("/b/profiler/torch_traces"))
    inject, rest = env["PYTHONPATH"].split(os.pathsep)
    assert Path(inject, "sitecustomize.py").is_file() and rest == "/elsewhere"
    assert env["AACO_TORCH_TRACE_DIR"] == "/b/profiler/torch_traces"
    assert TorchTracer().command(Path("x")) == []


def test_profile_bundles_get_the_model_run_analyses() -> None:
    for analysis in default_analyses():
        if "run" in analysis.kinds:
            assert KIND in analysis.kinds
