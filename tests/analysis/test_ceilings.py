"""Published peaks, dtype mapping, the calibration store and session precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from aaco.analysis.ceilings import (
    Ceilings,
    hardware_fingerprint,
    list_calibrations,
    load_calibration,
    load_device_table,
    normalize_dtype,
    published_ceilings,
    save_calibration,
    session_ceilings,
)

ENV = {
    "cpu": {"model": "Test CPU", "architecture": "x86_64", "physical_cores": 2,
            "logical_cores": 2, "flags": {"avx2": True, "avx512f": False}},
    "memory": {"total_bytes": 24 * 1024**3},
    "gpus": {"devices": [{"vendor": "NVIDIA", "name": "NVIDIA H100 80GB HBM3"}]},
    "onnxruntime": {"version": "1.0"},
}  # fmt: skip


def test_device_table_has_the_six_gpus_in_si_units() -> None:
    table = {d["name"]: d for d in load_device_table()}
    assert set(table) == {"MI300X", "MI250X", "MI210", "H200", "H100 SXM", "A100 SXM 80GB"}
    assert table["MI300X"]["flops_per_s"]["float16_matrix"] == 1307.4e12
    assert table["MI300X"]["bytes_per_s"] == 5.3e12
    assert table["H100 SXM"]["flops_per_s"]["bfloat16_matrix"] == 989.4e12
    assert table["H200"]["bytes_per_s"] == 4.8e12
    assert table["MI250X"]["flops_per_s"]["float64_matrix"] == 95.7e12
    assert table["A100 SXM 80GB"]["flops_per_s"]["float16_matrix"] == 312e12


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X/MI250", "MI250X"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ],
)
def test_published_ceilings_match_real_names(name: str, device: str) -> None:
    c = published_ceilings(name)
    assert c is not None and c.device == device and c.source == "published"


def test_unknown_device_has_no_ceiling() -> None:
    assert published_ceilings("Radeon 780M") is None


def test_peak_flops_dtype_mapping() -> None:
    c = published_ceilings("NVIDIA H100 80GB HBM3")
    assert c is not None
    # float16: the matrix peak is the roof; float32 has only its vector peak here
    assert c.peak_flops("float16") == 989.4e12
    assert c.peak_flops("float") == 66.9e12  # ONNX spells float32 "float"
    assert c.peak_flops("double") == 66.9e12  # float64 matrix 66.9 > vector 33.5
    assert c.peak_flops("float16_matrix") == 989.4e12
    assert c.peak_flops("int64") is None and c.peak_flops(None) is None
    assert c.ridge("float16") == pytest.approx(989.4e12 / 3.35e12)
    assert normalize_dtype("torch.bfloat16") == "bfloat16"


def test_store_round_trip_and_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AACO_CALIBRATION_DIR", str(tmp_path))
    fp = hardware_fingerprint(ENV)
    # nothing stored: the GPU's published peaks for a GPU backend, nothing for the CPU
    got = session_ceilings(ENV, "cuda", "NVIDIA H100 80GB HBM3")
    assert got is not None and got.source == "published"
    assert session_ceilings(ENV, "cpu", None) is None
    cal = Ceilings(device="Test CPU", source="calibrated", flops_per_s={"float32": 1e11},
                   bytes_per_s=2e10, fingerprint=fp, backend="cpu")  # fmt: skip
    path = save_calibration(cal)
    assert path.parent == tmp_path and load_calibration(fp, "cpu") == cal
    assert session_ceilings(ENV, "cpu", None) == cal
    assert [c for _, c in list_calibrations()] == [cal]
    # another machine (more memory) has another fingerprint: not its calibration
    other = {**ENV, "memory": {"total_bytes": 64 * 1024**3}}
    assert hardware_fingerprint(other) != fp
    assert session_ceilings(other, "cpu", None) is None
    # software versions are not part of the hardware fingerprint
    assert hardware_fingerprint({**ENV, "onnxruntime": {"version": "9.9"}}) == fp
    # a damaged file is no calibration
    path.write_text("{not json")
    assert load_calibration(fp, "cpu") is None
