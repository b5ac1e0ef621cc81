"""The one worker harness: its timing loops on an injected clock (latencies known by
construction), and whole worker runs of small workloads, in process and as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from aaco.runners.harness import (
    CAPTURE_FLAG,
    WORKER_MODULE,
    Profiled,
    Workload,
    run_worker,
    timing_loop,
    timing_loop_for,
)
from aaco.runners.spec import CAPTURE_FILES, MEASURE_FILES, SPEC_FILE, WorkerResult
from aaco.testing import FakeClock


def test_timing_loop_reads_the_clock_twice_per_call() -> None:
    clock = FakeClock(start_ns=1_000, step_ns=7)
    calls: list[int] = []
    starts, ends = timing_loop(lambda: calls.append(1), 5, clock=clock)
    assert len(calls) == 5
    assert clock.readings == 10
    assert list(starts) == [1_000 + 14 * i for i in range(5)]
    assert [e - s for s, e in zip(starts, ends, strict=True)] == [7] * 5


def test_timing_loop_for_stops_at_the_deadline() -> None:
    clock = FakeClock(start_ns=0, step_ns=10)
    starts, ends = timing_loop_for(lambda: None, 100, clock=clock)
    # deadline = first reading (0) + 100; each call moves the clock by 20
    assert len(starts) == 5
    assert ends[-1] >= 100 > ends[-2]


def test_timing_loop_for_makes_at_least_one_call() -> None:
    starts, _ = timing_loop_for(lambda: None, 0, clock=FakeClock())
    assert len(starts) == 1


class CountingWorkload(Workload):
    """Counts its iterations; fails in the stage named by the spec's ``fail_in``."""

    def prepare(self, purpose: str) -> Callable[[], Any]:
        self.ctx.stage("load")
        if self.spec.get("fail_in") == "load":
            raise RuntimeError("model file is corrupt\nsecond line")
        self.ctx.result.extra["purpose"] = purpose
        self.calls = 0

        def step() -> None:
            self.calls += 1

        return step

    @contextmanager
    def profiled(self) -> Iterator[Profiled | None]:
        marks: list[int] = []
        yield Profiled(lambda: None, after=lambda: marks.append(1))
        self.ctx.result.extra["marks"] = len(marks)

    def finish(self) -> None:
        self.ctx.result.extra["finished"] = True


def _write_spec(bundle: Path, **kw: Any) -> None:
    spec = {
        "workload": f"{__name__}:CountingWorkload",
        "warmup": 3,
        "iterations": 11,
        "duration_s": None,
        "profile": True,
        "profile_warmup": 2,
        "profile_iterations": 4,
        **kw,
    }
    (bundle / SPEC_FILE).parent.mkdir(parents=True, exist_ok=True)
    (bundle / SPEC_FILE).write_text(json.dumps(spec))


def test_measure_run_records_everything_once(tmp_path: Path) -> None:
    _write_spec(tmp_path)
    result = run_worker(tmp_path)
    assert result.status == "completed" and result.stage == "done", result.error
    assert result.warmup_iterations == 3 and result.measured_iterations == 11
    assert result.profile_runs == 6 and len(result.profile_wall_ns) == 6
    assert set(result.phases) == {"warmup", "measured", "profile"}
    assert result.extra == {"purpose": "measure", "marks": 6, "finished": True}
    iters = pq.read_table(tmp_path / "metrics" / "inference_iters.parquet")
    assert iters.column("phase").to_pylist() == ["warmup"] * 3 + ["measured"] * 11
    on_disk = json.loads((tmp_path / MEASURE_FILES.result).read_text())
    assert on_disk["purpose"] == "measure"  # a runner's own fields sit flat beside the rest
    assert WorkerResult.from_json(on_disk).get("marks") == 6
    lines = (tmp_path / MEASURE_FILES.progress).read_text().splitlines()
    stages = [json.loads(ln)["stage"] for ln in lines]
    assert stages == ["load", "warmup", "measure", "profile", "done"]


def test_failure_is_recorded_not_raised(tmp_path: Path) -> None:
    _write_spec(tmp_path, fail_in="load")
    result = run_worker(tmp_path)
    assert result.status == "failed" and result.stage == "load"
    assert result.error == "model file is corrupt"  # one line
    assert result.error_type == "RuntimeError"
    assert result.extra == {"finished": True}  # finish runs whatever happened
    assert "RuntimeError" in (tmp_path / "runtime" / "worker_traceback.txt").read_text()
    assert not (tmp_path / "metrics").exists()


def test_unloadable_workload_is_a_failed_result(tmp_path: Path) -> None:
    _write_spec(tmp_path, workload="no_such_module:Nothing")
    result = run_worker(tmp_path)
    assert result.status == "failed" and result.error_type == "ModuleNotFoundError"


def test_capture_pass_runs_the_profiled_count_in_its_own_files(tmp_path: Path) -> None:
    _write_spec(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", WORKER_MODULE, str(tmp_path), CAPTURE_FLAG],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(Path(__file__).resolve().parent), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / CAPTURE_FILES.result).read_text())
    assert result["status"] == "completed" and result["purpose"] == "capture"
    assert result["profile_runs"] == 6 and "kernel_capture" in result["phases"]
    assert not (tmp_path / MEASURE_FILES.result).exists()
    assert not (tmp_path / "metrics").exists()


def test_usage_is_explained() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", WORKER_MODULE], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "usage: python -m aaco.runners.harness BUNDLE_DIR [--capture]" in proc.stderr
