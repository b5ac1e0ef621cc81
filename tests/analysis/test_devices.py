"""One device identity for a GPU's ceilings, whatever framework or tool named it."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from aaco.analysis.ceilings import session_ceilings
from aaco.collectors.calibrate import _gpu, _Settings, gpu_identity
from aaco.errors import UsageError
from aaco.session.calibration import GPU_BACKEND, Ceilings, save_calibration
from aaco.session.devices import env_gpu, identify, trace_gpus
from aaco.session.fingerprint import hardware_fingerprint

CPU = {"model": "Test CPU", "architecture": "x86_64", "physical_cores": 2, "logical_cores": 2}


def _env(vendor: str, name: str, memory: int | None = None) -> dict[str, Any]:
    gpu = {"vendor": vendor, "index": 0, "name": name, "memory_bytes": memory}
    return {"cpu": CPU, "memory": {"total_bytes": 2**34}, "gpus": {"devices": [gpu]}}


@pytest.mark.parametrize(
    ("name", "kw", "entry", "by"),
    [
        # amd-smi / torch on ROCm / rocprofv3 agent info name an MI300X alike
        ("AMD Instinct MI300X", {}, "MI300X", "name"),
        ("AMD Instinct MI300X", {"arch": "gfx942:sramecc+:xnack-", "compute_units": 304},
         "MI300X", "name"),
        # ROCm's generic name: CUs (and memory) tell an MI250 GCD / MI210 (104 CUs, 64 GB)
        ("AMD Radeon Graphics", {"compute_units": 104, "memory_bytes": 68_702_699_520},
         "MI210", "architecture"),
        # ... and one GCD of an MI250X (110 of its 220 CUs)
        ("AMD Radeon Graphics", {"compute_units": 110, "arch": "gfx90a"}, "MI250X",
         "architecture"),
        ("NVIDIA H100 80GB HBM3", {"memory_bytes": 85_520_809_984}, "H100 SXM", "name"),
        # same SM count and architecture: memory tells H200 from H100
        ("", {"vendor": "NVIDIA", "arch": "sm_90", "compute_units": 132,
              "memory_bytes": 150_754_820_096}, "H200", "architecture"),
    ],
)  # fmt: skip
def test_identify_resolves_every_spelling(
    name: str, kw: dict[str, Any], entry: str, by: str
) -> None:
    ident = identify(name, **kw)
    assert ident is not None and (ident.entry, ident.matched_by) == (entry, by)


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        # Kineto deviceProperties of real traces (tests/importers/fixtures/kineto): an A100
        # with 40 GB is not the 80 GB part (1.56 vs 2.04 TB/s), an H100 with 95 GiB is not
        # the 80 GB SXM: no entry lends them its peaks
        ("NVIDIA A100-PG509-200", {"compute_units": 108, "memory_bytes": 42_297_524_224}),
        ("NVIDIA H100", {"compute_units": 132, "memory_bytes": 102_085_492_736}),
        ("Radeon 780M", {}),
        # a partition (MI300X CPX: 38 of 304 CUs; a MIG slice) is not the whole device
        ("AMD Instinct MI300X", {"compute_units": 38}),
        ("NVIDIA H100 80GB HBM3", {"compute_units": 16}),
        # named parts the table lacks, with the CUs and architecture of one it has
        (
            "NVIDIA A100 80GB PCIe",
            {"compute_units": 108, "arch": "sm_80", "memory_bytes": 85_899_345_920},
        ),
        ("NVIDIA H800", {"compute_units": 132, "arch": "sm_90", "memory_bytes": 85_520_809_984}),
        ("NVIDIA H200 NVL", {"compute_units": 132, "memory_bytes": 150_754_820_096}),
    ],
)
def test_identify_never_borrows_another_parts_figures(name: str, kw: dict[str, Any]) -> None:
    ident = identify(name, **kw)
    assert ident is not None and ident.entry is None
    assert session_ceilings(None, "cuda", identity=ident) is None


def test_one_calibration_serves_torch_rocm_ort_migraphx_and_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AACO_CALIBRATION_DIR", str(tmp_path))
    # what `aaco calibrate --backend cuda` stores from a HIP build of torch on an MI300X
    details = {"build": "hip 6.2.41133", "arch": "gfx942:sramecc+:xnack-",
               "compute_units": 304, "memory_bytes": 205_822_885_888}  # fmt: skip
    ident = gpu_identity("AMD Instinct MI300X", details)
    assert ident.key == "gpu-amd-mi300x"
    cal = Ceilings("AMD Instinct MI300X", "calibrated", {"float16_matrix": 7.0e14}, 4.1e12,
                   fingerprint=ident.key, backend=GPU_BACKEND)  # fmt: skip
    assert save_calibration(cal) == tmp_path / "gpu-amd-mi300x.json"
    # a torch run on ROCm (backend "cuda": torch's device name), an ORT MIGraphX session
    # (backend "rocm") on another host with the same GPU, and an imported rocprofv3 trace
    host_a = _env("amd", "AMD Instinct MI300X", 205_822_885_888)
    host_b = {**_env("amd", "AMD Instinct MI300X"), "cpu": {**CPU, "model": "Other CPU"}}
    assert hardware_fingerprint(host_a) != hardware_fingerprint(host_b)
    assert session_ceilings(host_a, "cuda") == cal
    assert session_ceilings(host_b, "rocm") == cal
    agents = [{"index": 0, "product": "AMD Instinct MI300X", "gfx_target": "gfx942",
               "cu_count": 304}]  # fmt: skip
    (traced,) = trace_gpus([{"devices": agents}]).values()
    assert session_ceilings(None, "gpu", identity=traced) == cal
    # an NVIDIA session does not get it
    assert session_ceilings(_env("nvidia", "NVIDIA H100 80GB HBM3"), "cuda") != cal


def test_a_calibration_stored_before_device_identities_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AACO_CALIBRATION_DIR", str(tmp_path))
    env = _env("nvidia", "NVIDIA H100 80GB HBM3")
    old = Ceilings("NVIDIA H100 80GB HBM3", "calibrated", {"float32": 5e13}, 3e12,
                   fingerprint=hardware_fingerprint(env), backend="cuda")  # fmt: skip
    save_calibration(old)
    assert session_ceilings(env, "cuda") == old
    assert env_gpu(env) is not None


def _fake_torch(hip: str | None, cuda: str | None) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.__version__ = "2.5.0"  # type: ignore[attr-defined]
    torch.version = types.SimpleNamespace(hip=hip, cuda=cuda)  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)  # type: ignore[attr-defined]
    return torch


@pytest.mark.parametrize(
    ("backend", "hip", "cuda", "message"),
    [
        # a HIP build passes the build check for cuda, rocm and gpu: it sees no GPU here
        ("cuda", "6.2.41133", None, "sees no GPU"),
        ("rocm", "6.2.41133", None, "sees no GPU"),
        ("gpu", "6.2.41133", None, "sees no GPU"),
        ("cuda", None, "12.4", "sees no GPU"),
        # a CUDA build cannot measure a ROCm GPU; a CPU-only build measures nothing
        ("rocm", None, "12.4", "is not a ROCm build"),
        ("cuda", None, None, "is not a CUDA or ROCm build"),
    ],
)
def test_any_torch_gpu_build_is_accepted_for_the_gpu_it_drives(
    monkeypatch: pytest.MonkeyPatch, backend: str, hip: str | None, cuda: str | None, message: str
) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(hip, cuda))
    settings = _Settings.make(True, None, 0.1, False, 2)
    with pytest.raises(UsageError, match=message):
        _gpu(backend, settings)


def test_a_part_the_table_lacks_has_one_key_from_torch_and_from_the_vendor_tools() -> None:
    by_torch = identify("NVIDIA A100 80GB PCIe", vendor="nvidia", arch="sm_80",
                        compute_units=108, memory_bytes=85_899_345_920)  # fmt: skip
    by_smi = identify("NVIDIA A100 80GB PCIe", vendor="nvidia", memory_bytes=85_899_345_920)
    assert by_torch is not None and by_smi is not None
    assert by_torch.key == by_smi.key == "gpu-nvidia-nvidia-a100-80gb-pcie"
    # two generic names with other CUs do not share one
    a = identify("AMD Radeon Graphics", vendor="amd", compute_units=60)
    b = identify("AMD Radeon Graphics", vendor="amd", compute_units=80)
    assert a is not None and b is not None and a.key != b.key
