"""`aaco profile` on programs that fight the torch tracer, and odd limits: real subprocesses."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
from tests.cli.test_cli import assert_one_line_error
from tests.cli.test_profile import PY, only_bundle, profile

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch not installed"
)


@needs_torch
def test_a_program_with_its_own_torch_profiler_still_runs(tmp_path: Path) -> None:
    """Two torch profilers at once crash the process: ours stops when the program starts its
    own, says so, and the program ends normally with its own profile intact."""
    prog = tmp_path / "own.py"
    prog.write_text(
        "import torch\n"
        "torch.ones(4).sum()\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "with profile(activities=[ProfilerActivity.CPU]) as p:\n"
        "    torch.ones(64).sum()\n"
        "print('events', len(p.events()) > 0)\n"
    )
    proc = profile(tmp_path / "s", "--tracer", "torch", "-f", "none", "--", PY, str(prog))
    assert proc.returncode == 0, proc.stderr
    assert "events True" in proc.stdout
    s = only_bundle(tmp_path / "s")
    files = s.meta["profile"]["tracer"]["files"]
    assert any(f.endswith(".note.txt") for f in files), files
    assert any(f.endswith(".json") for f in files), files


@needs_torch
def test_probing_for_torch_first_does_not_lose_the_trace(tmp_path: Path) -> None:
    code = (
        "import importlib.util; importlib.util.find_spec('torch'); import torch; "
        "torch.ones(8).sum()"
    )
    proc = profile(tmp_path / "s", "--tracer", "torch", "-f", "none", "--", PY, "-c", code)
    assert proc.returncode == 0, proc.stderr
    s = only_bundle(tmp_path / "s")
    assert s.meta["profile"]["tracer"]["status"] == "completed"
    ops = s.table("ops")
    assert ops is not None and ops.num_rows > 0


@needs_torch
def test_the_programs_own_sitecustomize_is_still_its_module(tmp_path: Path) -> None:
    usc = tmp_path / "usc"
    usc.mkdir()
    (usc / "sitecustomize.py").write_text("HELPER = 42\n")
    proc = profile(
        tmp_path / "s", "--tracer", "torch", "-f", "none", "--",
        PY, "-c", "import sitecustomize; print(sitecustomize.HELPER)",
        env={"PYTHONPATH": str(usc)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("42")


def test_a_timed_out_run_has_no_wall_time_statistics(tmp_path: Path) -> None:
    proc = profile(tmp_path / "s", "--timeout", "1", "--tracer", "none", "-f", "none", "--",
                   "sh", "-c", "sleep 5")  # fmt: skip
    assert proc.returncode == 124
    s = only_bundle(tmp_path / "s")
    analysis = json.loads((s.path / "analysis.json").read_text())
    assert analysis["wall_time_s"] is None
    assert analysis["runs"]["measured"] == 0


@pytest.mark.parametrize("value", ["inf", "nan", "1e20", "0", "-3"])
def test_odd_timeouts_are_one_line_errors(tmp_path: Path, value: str) -> None:
    proc = profile(tmp_path / "s", "--timeout", value, "--", "true")
    assert_one_line_error(proc, 2)
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").iterdir())


def test_a_background_child_holding_the_pipes_costs_the_drain_once(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = profile(tmp_path / "s", "--tracer", "none", "-f", "none", "--",
                   "sh", "-c", "sleep 30 & echo hi")  # fmt: skip
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "hi" in proc.stdout
    assert took < 5.0 + 4.0, took  # one 5 s drain, plus start-up, not two
