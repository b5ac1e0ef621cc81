"""GpuCollector picks the first source that works: NVML, the amdsmi library, ``amd-smi``,
``rocm-smi``; with none it still runs and says why."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aaco.analysis.gpu import summarize_gpu
from aaco.collectors.base import COLLECTORS
from aaco.collectors.gpu import GpuCollector
from aaco.session.schema import GPU_TELEMETRY
from aaco.testing.fake_gpu import (
    FakeAmdSmi,
    FakeCli,
    FakePynvml,
    amd_records_from_metric_csv,
    amd_smi_metric_json,
    nvml_records_from_xml,
    write_broken_module,
)

FIXTURES = Path(__file__).parent / "fixtures" / "smi"
MI300X_CSV = (FIXTURES / "metric-8xMI300X.csv").read_text()
OSERROR = "libamd_smi.so: cannot open shared object file: No such file or directory"


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No vendor library importable (amdsmi present but broken, as without ROCm), and a
    PATH with neither command on it; returns that PATH's one folder."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    broken = tmp_path / "site"
    write_broken_module(broken, "amdsmi", f"OSError({OSERROR!r})")
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.syspath_prepend(str(broken))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def nvml() -> FakePynvml:
    return FakePynvml(nvml_records_from_xml((FIXTURES / "tesla-t4.xml").read_text()))


def amdsmi() -> FakeAmdSmi:
    return FakeAmdSmi(amd_records_from_metric_csv(MI300X_CSV)[:2])


def run(**kw: Any) -> GpuCollector:
    c = GpuCollector(os.getpid(), hz=20, **kw)
    with c:
        time.sleep(0.15)
    return c


def test_nvml_first(bare: Path) -> None:
    c = run(nvml=nvml(), amdsmi=amdsmi())
    assert c.info()["source"] == "nvml"
    assert c.info()["tried"] == {}
    assert set(c.table().column("source").to_pylist()) == {"nvml"}


def test_then_the_amdsmi_library(bare: Path) -> None:
    c = run(amdsmi=amdsmi())
    info = c.info()
    assert info["source"] == "amdsmi"
    assert info["tried"] == {"nvml": "nvidia-ml-py not installed"}
    assert info["devices"] == 2


def test_nvml_without_devices_moves_on(bare: Path) -> None:
    c = run(nvml=FakePynvml([]), amdsmi=amdsmi())
    assert c.info()["source"] == "amdsmi"
    assert c.info()["tried"] == {"nvml": "NVML found no devices"}


def test_then_amd_smi(bare: Path) -> None:
    cli = FakeCli({"metric": amd_smi_metric_json(MI300X_CSV, "gpu_data")})
    c = run(cli_runner=cli, which=lambda tool: f"/usr/bin/{tool}")
    info = c.info()
    assert info["source"] == "amd-smi"
    assert info["tried"] == {
        "nvml": "nvidia-ml-py not installed",
        "amdsmi": f"amdsmi not importable (OSError({OSERROR!r}))",
    }


def test_then_rocm_smi(bare: Path) -> None:
    cli = FakeCli({"--showid": (FIXTURES / "mi100_rocm571.json").read_bytes()})
    c = run(cli_runner=cli, which={"rocm-smi": "/usr/bin/rocm-smi"}.get)
    assert c.info()["source"] == "rocm-smi"
    assert c.info()["tried"]["amd-smi"] == "amd-smi not on PATH"
    assert sorted(set(c.table().column("device").to_pylist())) == [0, 1, 2, 3, 4, 5]


def test_none_available_still_works_and_says_why(bare: Path) -> None:
    c = GpuCollector.for_process(os.getpid(), 10.0)
    assert GpuCollector.available() == (True, "")
    with c:
        time.sleep(0.05)
    table = c.table()
    assert table.num_rows == 0
    assert table.schema == GPU_TELEMETRY.schema
    info = c.info()
    assert info["source"] is None
    assert info["stopped_reason"] == "unavailable"
    assert info["unavailable"] == (
        "no GPU telemetry source: nvidia-ml-py not installed, "
        f"amdsmi not importable (OSError({OSERROR!r})), amd-smi/rocm-smi not on PATH"
    )
    assert summarize_gpu(table, None, None) is None


def test_a_source_that_raises_while_opening_is_skipped(bare: Path) -> None:
    class Broken(FakePynvml):
        def nvmlDeviceGetCount(self) -> int:
            raise ZeroDivisionError("driver bug")

    c = run(nvml=Broken([]), amdsmi=amdsmi())
    assert c.info()["source"] == "amdsmi"
    assert c.info()["tried"]["nvml"] == "NVML device listing failed (driver bug)"


def test_registry() -> None:
    cls = COLLECTORS.get("gpu")
    assert cls is GpuCollector
    c = cls.for_process(7, 3.0)
    assert isinstance(c, GpuCollector)
    assert (c.pid, c.hz, c.name, c.table_name) == (7, 3.0, "gpu", "gpu_telemetry")
    assert c.meta_key is None  # info() goes to session.json collectors.gpu


def test_whole_run_summary_from_the_collected_table(bare: Path) -> None:
    nv = FakePynvml(
        nvml_records_from_xml((FIXTURES / "tesla-t4.xml").read_text()), pids={0: [os.getpid()]}
    )
    c = GpuCollector(os.getpid(), hz=50, nvml=nv)
    with c:
        time.sleep(0.4)
    table = c.table()
    ts = table.column("ts_ns").to_pylist()
    window = (ts[2], ts[-3])
    s = summarize_gpu(table, window, 100)
    assert s is not None
    assert s["source"] == "nvml"
    dev = s["devices"][0]
    assert dev["used"] is True
    assert dev["name"] == "Tesla T4"
    assert dev["sm_clock_ratio"] == pytest.approx(585 / 1590)
    assert dev["power_w_mean"] == pytest.approx(26.78)
    assert dev["energy_scope"] == "window"
    # the fake's counter rises at the recorded 26.78 W (in whole mJ)
    assert s["avg_power_w"] == pytest.approx(26.78, rel=0.05)
    assert s["joules_per_inference"] == pytest.approx(s["energy_j"] / 100, rel=1e-6)
    assert s["throttled_share"] == 0.0
    assert s["clock_drop"] == 0.0
