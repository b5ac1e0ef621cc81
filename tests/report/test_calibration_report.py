"""Rendering of calibrations: figures in GFLOP/s and GB/s, measurements, the busy warning."""

from __future__ import annotations

from pathlib import Path

from aaco.analysis.ceilings import published_ceilings
from aaco.report.calibration import busy_note, render_calibration, render_calibrations
from aaco.session.calibration import Ceilings


def _cal(others: float | None) -> Ceilings:
    return Ceilings(
        device="Test CPU",
        source="calibrated",
        flops_per_s={"float32": 123.45e9, "float64": 60e9},
        bytes_per_s=20.04e9,
        fingerprint="0123456789abcdef",
        backend="cpu",
        measured_utc="2026-01-01T00:00:00Z",
        details={
            "measurements": [
                {"name": "numpy_gemm_float32", "unit": "FLOP/s", "value": 123.45e9,
                 "cv": 0.012, "repeats": 7, "stable": True, "size": "1024x1024x1024"},
                {"name": "numpy_copy_bandwidth", "unit": "B/s", "value": 20.04e9,
                 "cv": 0.05, "repeats": 40, "stable": False, "size": "128 MiB arrays"},
            ],
            "other_cpu_share": others,
            "logical_cpus": 2,
        },
    )  # fmt: skip


def test_render_shows_figures_in_giga_units_with_repeats_and_cv() -> None:
    text = render_calibration(_cal(0.01), Path("/store/x-cpu.json"), "measured in 9.0 s")
    # 123.45e9 FLOP/s = 123.5 GFLOP/s (one decimal); 20.04e9 B/s = 20.0 GB/s
    assert "123.5" in text and "20.0" in text and "/store/x-cpu.json" in text
    assert "1.2%" in text and "5.0%" in text  # CV 0.012 and 0.05
    assert "measured in 9.0 s" in text and "other processes" not in text


def test_busy_note_only_when_others_used_a_tenth_of_the_cpu_time() -> None:
    assert busy_note(_cal(0.099)) is None and busy_note(_cal(None)) is None
    note = busy_note(_cal(0.1))
    assert note is not None and "other processes used 10% of the CPU time" in note
    assert "used 42% of the CPU time" in render_calibration(_cal(0.42))


def test_render_calibrations_lists_stored_and_published() -> None:
    h100 = published_ceilings("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    text = render_calibrations([(Path("/store/x-cpu.json"), _cal(0.01))], [h100])
    # published H100: float16 matrix 989.4e12 FLOP/s = 989,400.0 GFLOP/s; 3.35e12 B/s
    assert "/store/x-cpu.json" in text and "989,400.0" in text and "3,350.0" in text
    assert "published peaks for NVIDIA H100 80GB HBM3" in text
    assert "no stored calibration" in render_calibrations([], [])
