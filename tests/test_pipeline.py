"""The pipeline with the shipped test doubles at its seams: a runner whose iterations take a
known time, a collector that hands back recorded rows, a tracer that writes known kernels.
Everything else (the harness, the launcher, the bundle, the importers, the analyses, the
reports) is the real code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from aaco.cli import app
from aaco.collectors.base import COLLECTORS
from aaco.errors import UsageError
from aaco.pipeline import RunOptions, run_model
from aaco.runners.base import RUNNERS
from aaco.testing import FakeCollector, FakeRunner, FakeTracer, RecordedKernel
from aaco.tracers.base import TRACERS

ITERATION_US = 300


@pytest.fixture
def fake_runner() -> Iterator[None]:
    with RUNNERS.registered("fake", FakeRunner):
        yield


def _opts(tmp_path: Path, **kw: object) -> RunOptions:
    base: dict[str, object] = {
        "model": f"fake:{ITERATION_US}",
        "framework": "fake",
        "warmup": 2,
        "iterations": 25,
        "output": tmp_path / "sessions",
        "auto_calibrate": False,
    }
    base.update(kw)
    return RunOptions(**base)  # type: ignore[arg-type]


def test_fake_runner_latencies_are_known_by_construction(tmp_path: Path, fake_runner: None) -> None:
    s = run_model(_opts(tmp_path, telemetry=False))
    assert s.status == "completed", s.error
    iters = s.table("inference_iters")
    assert iters is not None
    phases = iters.column("phase").to_pylist()
    assert phases.count("warmup") == 2 and phases.count("measured") == 25
    # each iteration spins at least ITERATION_US: no latency can be shorter
    assert pc.min(iters.column("latency_ns")).as_py() >= ITERATION_US * 1_000
    assert s.summary["latency_ms"]["min"] >= ITERATION_US / 1_000
    # the runner's own result fields reach session.json through RunStage.update
    assert s.meta["run"]["iteration_ns"] == ITERATION_US * 1_000
    assert s.meta["run"]["framework"] == "fake"
    # the profiled pass ran through the harness (profile warmup max(2, warmup) + 10)
    assert s.meta["phases"]["profile"][1] > s.meta["phases"]["profile"][0]
    assert s.table("system_events") is None
    assert "telemetry" not in s.meta


def test_collectors_are_plug_ins(tmp_path: Path, fake_runner: None) -> None:
    rows = [
        {"ts_ns": 1_000 + i, "proc_cpu_pct": 50.0 + i, "proc_rss_bytes": 2**20 * (i + 1)}
        for i in range(4)
    ]

    class Recorded(FakeCollector):
        pass  # its class attribute name stays "fake": the registry's name is what counts

    Recorded.rows = rows
    with COLLECTORS.registered("recorded", Recorded):
        s = run_model(_opts(tmp_path, collectors=("recorded",)))
    assert s.status == "completed", s.error
    table = s.table("system_events")
    assert table is not None
    assert table.column("proc_cpu_pct").to_pylist() == [50.0, 51.0, 52.0, 53.0]
    info = s.meta["collectors"]["recorded"]
    assert info["samples"] == 4 and info["hz"] == 10.0 and info["pid"] > 0
    assert "telemetry" not in s.meta  # that key is the system collector's


def test_default_collector_is_the_system_sampler(tmp_path: Path, fake_runner: None) -> None:
    s = run_model(_opts(tmp_path, iterations=200, sample_hz=50.0))
    assert s.status == "completed", s.error
    assert s.meta["telemetry"]["hz"] == 50.0
    assert s.meta["telemetry"]["samples"] >= 1
    assert s.table("system_events") is not None


def test_unknown_collector_lists_the_valid_ones(tmp_path: Path, fake_runner: None) -> None:
    with pytest.raises(
        UsageError, match=r"unknown collector 'nosuch'; valid: system, process_tree, sched, gpu"
    ):
        run_model(_opts(tmp_path, collectors=("nosuch",)))
    assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir())


def test_tracer_wraps_a_capture_pass_and_its_trace_is_imported(tmp_path: Path) -> None:
    """A real ONNX Runtime run with ``--profile kernels`` and the fake tracer: the capture
    worker runs under the tracer's command line, the kernels it wrote are imported."""

    class Known(FakeTracer):
        kernels: ClassVar[list[RecordedKernel]] = [
            RecordedKernel("gemm_a", 21, 5_000_000_000, 5_000_030_000, 256, 4096),
            RecordedKernel("relu_b", 22, 5_000_040_000, 5_000_045_000, 64, 1024),
        ]

    with TRACERS.registered("known", Known):
        s = run_model(
            RunOptions(
                model="mlp",
                warmup=1,
                iterations=3,
                profile_iterations=2,
                telemetry=False,
                profile_mode="kernels",
                tracer="known",
                output=tmp_path / "sessions",
                auto_calibrate=False,
            )
        )
    assert s.status == "completed", s.error
    cap = s.meta["kernel_capture"]
    assert cap["status"] == "completed", cap
    assert cap["runs"] == 2 + 2
    assert cap["command"][-2:] == [str(s.path.parent / f".{s.path.name}.partial"), "--capture"]
    kernels = s.table("kernels")
    assert kernels is not None
    got = sorted(kernels.select(["name", "dur_ns"]).to_pylist(), key=lambda r: r["name"])
    assert got == [{"name": "gemm_a", "dur_ns": 30_000}, {"name": "relu_b", "dur_ns": 5_000}]


def test_unknown_tracer_is_refused_before_any_bundle(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"unknown tracer 'nosuch'; valid: rocprofv3, nsys, torch"):
        run_model(
            RunOptions(model="mlp", profile_mode="kernels", tracer="nosuch", output=tmp_path / "s")
        )
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").rglob("session.json"))


def test_a_tracer_that_cannot_see_the_backend_is_refused_before_any_bundle(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"the nsys tracer records CUDA work"):
        run_model(
            RunOptions(model="mlp", profile_mode="kernels", tracer="nsys", output=tmp_path / "s")
        )
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").rglob("session.json"))


def test_a_runner_without_a_tracer_refuses_one(tmp_path: Path, fake_runner: None) -> None:
    with pytest.raises(UsageError, match=r"^--framework fake takes no tracer \(got 'x'\)$"):
        run_model(_opts(tmp_path, tracer="x"))


def test_a_registered_runner_is_a_framework_on_the_command_line(
    tmp_path: Path, fake_runner: None
) -> None:
    args = ["run", "--framework", "fake", "--model", "fake:100", "--iterations", "5"]
    args += ["--no-telemetry", "--report", "none", "-o", str(tmp_path / "s")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "fake" in CliRunner().invoke(app, ["run", "--help"]).output
    meta = json.loads((tmp_path / "s" / "latest" / "session.json").read_text())
    assert meta["run"]["framework"] == "fake" and meta["status"] == "completed"


def test_gpu_telemetry_reaches_the_summary_the_classifier_and_the_reports(
    tmp_path: Path, fake_runner: None
) -> None:
    """The NVML collector over a fake ``pynvml`` built from a recorded Tesla T4 (``nvidia-smi
    -q -x``, tests/collectors/fixtures/smi/README.md) whose clocks are held by the power cap
    and which lists the worker's pid: the whole pipeline, from the collector to the reports."""
    import dataclasses

    from aaco.collectors.gpu.nvml import NvmlCollector
    from aaco.report.perfetto import export_perfetto
    from aaco.report.terminal import TerminalRenderer
    from aaco.testing.fake_gpu import FakePynvml, nvml_records_from_xml

    xml = (Path(__file__).parent / "collectors/fixtures/smi/tesla-t4.xml").read_text()
    (t4,) = nvml_records_from_xml(xml)
    capped = dataclasses.replace(t4, reasons=0x4)  # SwPowerCap: throttling, not idling

    class PowerCappedT4(NvmlCollector):
        @classmethod
        def for_process(cls, pid: int, hz: float) -> NvmlCollector:
            return cls(pid, hz, nvml=FakePynvml([capped], pids={0: [pid]}))

    with COLLECTORS.registered("gpu", PowerCappedT4):
        s = run_model(_opts(tmp_path, iterations=400, sample_hz=50.0, batch=2))
    assert s.status == "completed", s.error
    table = s.table("gpu_telemetry")
    assert table is not None and table.num_rows >= 3
    assert set(table.column("sm_clock_mhz").to_pylist()) == {t4.sm_clock}
    gpu = s.summary["gpu"]
    assert gpu["source"] == "nvml"
    (dev,) = gpu["devices"]
    assert dev["used"] is True and dev["name"] == t4.name
    assert gpu["throttled_share"] == pytest.approx(1.0)
    assert dev["throttle_share"] == {"power_cap": pytest.approx(1.0)}
    # the fake's energy counter advances at the recorded power draw: the average power over
    # the window is that draw, and an inference is one sample: energy per inference is it x
    # window / (iterations x batch)
    assert gpu["avg_power_w"] == pytest.approx(t4.power_draw_w, rel=0.02)
    window_s = (s.meta["phases"]["measured"][1] - s.meta["phases"]["measured"][0]) / 1e9
    assert gpu["joules_per_inference"] == pytest.approx(
        t4.power_draw_w * window_s / (400 * 2), rel=0.05
    )
    assert gpu["inferences_per_joule"] == pytest.approx(1 / gpu["joules_per_inference"])
    bottleneck = s.json_file("metrics/bottleneck.json")
    assert bottleneck is not None
    assert bottleneck["bottleneck_class"] == "throttling"
    assert bottleneck["signals"]["gpu_throttle_share"]["value"] == pytest.approx(1.0)
    text = TerminalRenderer(width=140).render(s)
    assert "power_cap" in text and "J/inference" in text
    trace = json.loads(export_perfetto(s))
    counters = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "C"}
    assert "SM clock" in counters, counters
