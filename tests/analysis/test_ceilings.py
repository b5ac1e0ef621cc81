"""Published peaks, dtype mapping, the calibration store and session precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aaco.analysis.ceilings import published_ceilings, session_ceilings
from aaco.session.calibration import (
    Ceilings,
    MemoryLevel,
    list_calibrations,
    load_calibration,
    normalize_dtype,
    quality_label,
    quality_rank,
    replaces,
    reusable,
    save_calibration,
)
from aaco.session.devices import load_device_table
from aaco.session.fingerprint import hardware_fingerprint

FIXTURES = Path(__file__).parent / "fixtures"

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
    # (device, key, value): the vendor figures of the brief, TFLOP/s x 1e12, TB/s x 1e12
    expected = [
        ("MI300X", "float64", 81.7e12), ("MI300X", "float64_matrix", 163.4e12),
        ("MI300X", "float32", 163.4e12), ("MI300X", "float16_matrix", 1307.4e12),
        ("MI300X", "bfloat16_matrix", 1307.4e12), ("MI300X", "float8_matrix", 2614.9e12),
        ("MI250X", "float64", 47.9e12), ("MI250X", "float64_matrix", 95.7e12),
        ("MI250X", "float32", 95.7e12), ("MI250X", "bfloat16_matrix", 383e12),
        ("MI210", "float64", 22.6e12), ("MI210", "float64_matrix", 45.3e12),
        ("MI210", "float32", 45.3e12), ("MI210", "float16_matrix", 181e12),
        ("H100 SXM", "float64", 33.5e12), ("H100 SXM", "float64_matrix", 66.9e12),
        ("H100 SXM", "float32", 66.9e12), ("H100 SXM", "bfloat16_matrix", 989.4e12),
        ("H100 SXM", "float8_matrix", 1979e12), ("H200", "float16_matrix", 989.4e12),
        ("A100 SXM 80GB", "float64", 9.7e12), ("A100 SXM 80GB", "float64_matrix", 19.5e12),
        ("A100 SXM 80GB", "float32", 19.5e12), ("A100 SXM 80GB", "tfloat32_matrix", 156e12),
        ("A100 SXM 80GB", "float16_matrix", 312e12), ("A100 SXM 80GB", "int8_matrix", 624e12),
    ]  # fmt: skip
    for device, key, value in expected:
        assert table[device]["peaks"]["flops_per_s"][key] == value, (device, key)
    bandwidth = {"MI300X": 5.3e12, "MI250X": 3.2e12, "MI210": 1.6e12, "H100 SXM": 3.35e12,
                 "H200": 4.8e12, "A100 SXM 80GB": 2.039e12}  # fmt: skip
    memory = {"MI300X": 192e9, "MI250X": 128e9, "MI210": 64e9, "H100 SXM": 80e9,
              "H200": 141e9, "A100 SXM 80GB": 80e9}  # fmt: skip
    for device, entry in table.items():
        assert entry["peaks"]["bytes_per_s"] == bandwidth[device]
        assert entry["memory_bytes"] == memory[device]
        assert entry["source"] and entry["vendor"] in ("AMD", "NVIDIA")
    assert table["MI300X"]["compute_units"] == 304 and table["H100 SXM"]["compute_units"] == 132


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X/MI250", "MI250X"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100", "H100 SXM"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("MI210", "MI210"),
    ],
)
def test_published_ceilings_match_real_names(name: str, device: str) -> None:
    c = published_ceilings(name)
    assert c is not None and c.source == "published"
    assert c.device == (device if device != "MI250X" else "MI250X (one of 2 GCDs)")


def test_a_package_of_two_gcds_gets_each_gcds_share() -> None:
    # rocm-smi / amd-smi / torch each show an MI250X as 2 devices of 110 CUs and 64 GB; the
    # data sheet's 383 TF / 3.2 TB/s are the package's: one device reaches half of them
    c = published_ceilings("AMD Instinct MI250X/MI250")
    assert c is not None
    assert c.peak_flops("float16") == pytest.approx(383.0e12 / 2)
    assert c.bytes_per_s == pytest.approx(3.2e12 / 2)
    assert c.details["compute_units"] == 110 and c.details["gcds"] == 2


@pytest.mark.parametrize(
    "name",
    # other parts with other peaks: no entry may lend them its figures
    ["Radeon 780M", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA GH200 480GB",
     "NVIDIA H200 NVL", "NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB", "AMD Instinct MI300A"],
)  # fmt: skip
def test_unknown_device_has_no_ceiling(name: str) -> None:
    assert published_ceilings(name) is None


def test_peak_flops_dtype_mapping() -> None:
    c = published_ceilings("NVIDIA H100 80GB HBM3")
    assert c is not None
    # float16: the matrix peak is the roof
    assert c.peak_flops("float16") == 989.4e12
    # ONNX spells float32 "float"; with the instruction unknown an FP32 operator may have
    # run on TF32 tensor cores (494.7 TF dense): the highest roof it could have used
    assert c.peak_flops("float") == 494.7e12
    assert c.peak_flops("float32_vector") == 66.9e12  # a SIMT sgemm (from its name)
    # H100's FP32-input tensor-core path is TF32 (no "Matrix FP32" figure as on AMD)
    assert c.peak_flops("float32_matrix") == 494.7e12
    assert c.peak_flops("tfloat32") == c.peak_flops("tfloat32_matrix") == 494.7e12
    assert c.peak_flops("double") == 66.9e12  # float64 matrix 66.9 > vector 33.5
    assert c.peak_flops("float16_matrix") == 989.4e12
    assert c.peak_flops("int64") is None and c.peak_flops(None) is None
    assert c.ridge("float16") == pytest.approx(989.4e12 / 3.35e12)
    assert normalize_dtype("torch.bfloat16") == "bfloat16"
    # a CPU calibration's int8 GEMM figure is the roof of quantized operators, whose
    # heaviest input ONNX spells uint8 or int8 (ConvInteger, QLinearConv, DynamicQuantize*)
    cpu = Ceilings("cpu", "calibrated", {"float32": 1.6e11, "int8": 2.6e11}, 1.6e10)
    assert cpu.peak_flops("uint8") == cpu.peak_flops("int8") == 2.6e11
    assert cpu.peak_flops("int32") is None  # shape arithmetic: no ceiling, bound unknown


def test_store_round_trip_and_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AACO_CALIBRATION_DIR", str(tmp_path))
    fp = hardware_fingerprint(ENV)
    # nothing stored: the GPU's published peaks for a GPU backend, nothing for the CPU
    got = session_ceilings(ENV, "cuda", "NVIDIA H100 80GB HBM3")
    assert got is not None and got.source == "published"
    assert session_ceilings(ENV, "cpu", None) is None
    cal = Ceilings(device="Test CPU", source="calibrated", flops_per_s={"float32": 1e11},
                   bytes_per_s=2e10, fingerprint=fp, backend="cpu")  # fmt: skip
    path = save_calibration(cal, "cpu")
    assert path == tmp_path / f"{fp}-cpu.json" and load_calibration(fp, "cpu") == cal
    assert load_calibration(fp, "cuda") is None  # one file per (fingerprint, backend)
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


def _q(mode: str | None, contention: str | None, **details: object) -> Ceilings:
    return Ceilings(device="Test CPU", source="calibrated",
                    flops_per_s={"float32": 1e11, "int8": 2e11},
                    bytes_per_s=2e10, fingerprint="f", backend="cpu", mode=mode,
                    contention=contention, details=dict(details))  # fmt: skip


def test_quality_ranks_quiet_first_then_full() -> None:
    order = [_q("full", "quiet"), _q("quick", "quiet"), _q("full", None), _q(None, None),
             _q("quick", None), _q("full", "disturbed"), _q("quick", "disturbed")]  # fmt: skip
    ranks = [quality_rank(c) for c in order]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == len(ranks)
    assert quality_label(order[1]) == "quick, quiet"
    assert quality_label(order[3]) == "unknown quality"


def test_reuse_and_replacement_never_prefer_a_rougher_calibration() -> None:
    full, quick = _q("full", "quiet"), _q("quick", "quiet")
    busy_full = _q("full", "disturbed")
    # `aaco calibrate` keeps only a full quiet one; --quick keeps any quiet one
    assert reusable(full, quick=False) and reusable(full, quick=True)
    assert not reusable(quick, quick=False) and reusable(quick, quick=True)
    assert not reusable(busy_full, quick=True) and not reusable(_q(None, None), quick=True)
    # a new one replaces an equal or worse one only
    assert replaces(full, quick) and replaces(quick, quick) and not replaces(quick, full)
    assert replaces(quick, busy_full) and not replaces(busy_full, quick)
    assert replaces(busy_full, None)
    # a CPU calibration from before the int8 roof is measured again
    old = Ceilings(**{**full.to_json(), "flops_per_s": {"float32": 1e11}})
    assert not reusable(old, quick=True)


def test_a_file_from_before_quality_loads_and_ranks_by_what_it_recorded() -> None:
    # written by the previous format on a machine 85 % busy with other processes (--quick):
    # no mode or contention fields; details.quick and details.other_cpu_share tell
    raw = json.loads((FIXTURES / "calibration_before_quality_busy.json").read_text())
    assert "mode" not in raw and "contention" not in raw and "memory_levels" not in raw
    c = Ceilings.from_json(raw)
    assert c.mode is None and c.contention is None and c.memory_levels == ()
    assert quality_label(c) == "quick, disturbed"
    assert quality_rank(c) == quality_rank(_q("quick", "disturbed"))
    # its only roof is DRAM's, and the level is unknown
    assert c.memory_roof(1024.0) == (None, c.bytes_per_s)
    # the same file measured quietly would rank as unknown contention
    raw["details"]["other_cpu_share"] = 0.02
    assert quality_label(Ceilings.from_json(raw)) == "quick, contention unknown"


def test_memory_roof_picks_the_nearest_level_that_holds_the_working_set() -> None:
    c = Ceilings(device="cpu", source="calibrated", flops_per_s={}, bytes_per_s=2e10,
                 memory_levels=(MemoryLevel("L1", 65536, 3e11), MemoryLevel("L2", 2**20, 2e11),
                                MemoryLevel("L3", 32 * 2**20, 8e10),
                                MemoryLevel("DRAM", None, 2e10)))  # fmt: skip
    assert c.memory_roof(0.0) == ("L1", 3e11)
    assert c.memory_roof(65536.0) == ("L1", 3e11)  # at capacity: still fits
    assert c.memory_roof(65537.0) == ("L2", 2e11)
    assert c.memory_roof(32.0 * 2**20) == ("L3", 8e10)
    assert c.memory_roof(32.0 * 2**20 + 1) == ("DRAM", 2e10)
    assert c.memory_roof(None) == (None, 2e10)  # unknown working set: unknown level
    # round trip through the stored JSON
    back = Ceilings.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c
