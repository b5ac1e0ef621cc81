"""A bundle recorded on a real H100 (tests/fixtures/bundles/h100_torch_cuda/README.md):
real NVML telemetry and a real CUDA kernel trace, read and re-analysed on a CPU machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc

from aaco.analysis.gpu import summarize_gpu
from aaco.pipeline import analyze_session
from aaco.report.model import build_report
from aaco.session.bundle import Session

BUNDLE = Path(__file__).parents[1] / "fixtures" / "bundles" / "h100_torch_cuda"


def test_real_nvml_telemetry_reads_and_summarises_as_recorded() -> None:
    s = Session.load(BUNDLE)
    gpu = s.table("gpu_telemetry")
    assert gpu is not None and gpu.num_rows >= 3
    assert pc.max(gpu.column("power_w")).as_py() > 50  # a busy H100 draws well over 50 W
    stored = s.summary["gpu"]
    assert stored["source"] == "nvml" and stored["devices"][0]["name"].startswith("NVIDIA H100")
    assert stored["energy_j"] > 0 and 50 < stored["avg_power_w"] < 700
    # the old-format api_calls (no wait_* columns) conforms: the new columns read as unknown
    api = s.table("api_calls")
    assert api is not None and api.column("wait_stream").null_count == api.num_rows
    # the stored summary is what the analysis gives from the recorded table and window
    window = s.meta["phases"]["measured"]
    again = summarize_gpu(gpu, (int(window[0]), int(window[1])), None)
    assert again is not None
    assert abs(again["energy_j"] - stored["energy_j"]) < 1e-6 * stored["energy_j"]


def test_reanalysed_on_cpu_with_the_critical_path(tmp_path: Path) -> None:
    path = tmp_path / "b"
    shutil.copytree(BUNDLE, path)
    s = analyze_session(path, auto_calibrate=False)
    cp = json.loads((path / "metrics" / "critical_path.json").read_text())["primary"]
    assert cp["length_ns"] == cp["wall_ns"] > 0
    assert cp["stats"]["launch_links"] > 0
    report = build_report(s)
    assert report["critical_path"]["length_ns"] == cp["length_ns"]
    assert report["gpu"]["source"] == "nvml"
