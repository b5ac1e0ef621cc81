"""NvmlCollector's real sampler thread against FakePynvml devices built from recorded
``nvidia-smi -q -x`` documents (tests/collectors/fixtures/smi/, see its README)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from aaco.collectors.base import COLLECTORS
from aaco.collectors.gpu import nvml as nvml_mod
from aaco.collectors.gpu.common import SourceUnavailable
from aaco.collectors.gpu.nvml import NvmlCollector
from aaco.errors import UsageError
from aaco.session.schema import GPU_TELEMETRY
from aaco.testing.fake_gpu import FakePynvml, nvml_records_from_xml, write_broken_module

FIXTURES = Path(__file__).parent / "fixtures" / "smi"
MIB = 1 << 20


def fake(xml: str, **kw: Any) -> FakePynvml:
    return FakePynvml(nvml_records_from_xml((FIXTURES / xml).read_text()), **kw)


def run(
    nv: Any, *, hz: float = 50.0, seconds: float = 0.3, pid: int | None = None
) -> NvmlCollector:
    c = NvmlCollector(pid, hz=hz, nvml=nv)
    with c:
        time.sleep(seconds)
    return c


def rows(c: NvmlCollector, device: int = 0) -> list[dict[str, Any]]:
    return [r for r in c.table().to_pylist() if r["device"] == device]


def assert_all(rs: list[dict[str, Any]], **expected: Any) -> None:
    for col, want in expected.items():
        got = {r[col] if not isinstance(r[col], list) else tuple(r[col]) for r in rs}
        want = tuple(want) if isinstance(want, list) else want
        assert got == {want}, f"{col}: {got} != {want}"


def assert_energy_rate(rs: list[dict[str, Any]], watts: float) -> None:
    e = [(r["ts_ns"], r["energy_j"]) for r in rs if r["energy_j"] is not None]
    (t0, e0), (t1, e1) = e[0], e[-1]
    assert e1 > e0
    assert (e1 - e0) / ((t1 - t0) / 1e9) == pytest.approx(watts, rel=0.05)


# -- recorded values ---------------------------------------------------------------------


def test_tesla_t4_dtd_v11() -> None:
    c = run(fake("tesla-t4.xml"))
    rs = rows(c)
    assert len(rs) >= 10
    assert_all(
        rs,
        source="nvml",
        name="Tesla T4",
        util_gpu_pct=0.0,
        util_mem_pct=0.0,
        sm_clock_mhz=585.0,
        sm_clock_max_mhz=1590.0,
        mem_clock_mhz=5000.0,
        mem_clock_max_mhz=5001.0,
        power_w=26.78,  # Turing: nvmlDeviceGetPowerUsage is instantaneous
        power_avg_w=None,
        power_limit_w=70.0,
        temp_c=40.0,
        temp_hotspot_c=None,
        temp_mem_c=None,  # N/A in the recording
        mem_used_bytes=1032 * MIB,
        mem_total_bytes=15360 * MIB,
        pcie_tx_bytes_per_s=0.0,
        pcie_rx_bytes_per_s=0.0,
        throttle_reasons=0,
        throttle_names=[],
        violation_power_ns=None,
        violation_thermal_ns=None,
        gpm_sm_activity_pct=None,
        energy_wrap_j=None,
        has_watched_process=None,  # no process watched
    )
    assert_energy_rate(rs, 26.78)
    info = c.info()
    assert info["source"] == "nvml"
    assert info["device_names"] == ["Tesla T4"]
    assert info["power_usage"] == {"0": "instant"}
    assert info["unsupported"]["0"] == {
        "power_fields": "not supported",
        "clocks_event_reasons": "not in this driver",
        "violation_power": "not supported",
        "violation_thermal": "not supported",
    }
    assert info["errors"] == {}


def test_a100_mig_dtd_v12() -> None:
    c = run(fake("a100-sxm4-v12.xml"))
    rs = rows(c)
    assert_all(
        rs,
        name="NVIDIA A100-SXM4-80GB",
        util_gpu_pct=None,  # N/A under MIG
        util_mem_pct=None,
        sm_clock_mhz=1275.0,
        sm_clock_max_mhz=1410.0,
        mem_clock_mhz=1593.0,
        mem_clock_max_mhz=1593.0,
        power_w=67.03,  # GA100: nvmlDeviceGetPowerUsage is instantaneous
        power_avg_w=None,
        power_limit_w=500.0,
        temp_c=27.0,
        temp_mem_c=44.0,
        mem_used_bytes=50 * MIB,
        mem_total_bytes=81920 * MIB,
        pcie_tx_bytes_per_s=4000 * 1024.0,
        pcie_rx_bytes_per_s=0.0,
        throttle_reasons=0,
        throttle_names=[],
    )
    assert_energy_rate(rs, 67.03)


def test_blackwell_dtd_v13_with_power_fields_violation_counters_and_gpm() -> None:
    gpm = {"sm_util": 61.5, "sm_occupancy": 33.0, "tensor_util": 12.25, "dram_bw_util": 47.0}
    nv = fake("pro-6000-maxq-blackwell-v13.xml", gpm={0: gpm})
    c = run(nv)
    rs = rows(c)
    assert_all(
        rs,
        name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        util_gpu_pct=0.0,
        util_mem_pct=0.0,
        sm_clock_mhz=180.0,
        sm_clock_max_mhz=3090.0,
        mem_clock_mhz=405.0,
        mem_clock_max_mhz=14001.0,
        power_w=3.99,
        power_avg_w=3.97,
        power_limit_w=300.0,
        temp_c=24.0,
        temp_mem_c=None,
        mem_used_bytes=65720 * MIB,
        mem_total_bytes=97887 * MIB,
        pcie_tx_bytes_per_s=528 * 1024.0,
        pcie_rx_bytes_per_s=485 * 1024.0,
        throttle_reasons=0,
        throttle_names=[],
        violation_power_ns=25483012608 * 1000,
        violation_thermal_ns=0,
    )
    # GPM compares consecutive samples: nothing to compare on the first row
    assert rs[0]["gpm_sm_activity_pct"] is None
    assert_all(
        rs[1:],
        gpm_sm_activity_pct=61.5,
        gpm_sm_occupancy_pct=33.0,
        gpm_tensor_activity_pct=12.25,
        gpm_dram_bw_util_pct=47.0,
    )
    assert c.info()["unsupported"] == {}
    assert c.info()["power_usage"] == {"0": "average"}
    # the power fields are read, not the older power call
    assert nv.calls["nvmlDeviceGetPowerUsage"] == 0
    assert nv.calls["nvmlGpmSampleFree"] == 2
    assert nv.shutdowns == 1


def test_dual_a5000_two_devices_idle_is_not_throttling() -> None:
    c = run(fake("dual_a5000-v13.xml"))
    r0, r1 = rows(c, 0), rows(c, 1)
    assert len(r0) == len(r1) >= 10
    assert_all(r0, power_w=6.52, power_avg_w=6.41, mem_used_bytes=22437 * MIB)
    assert_all(r1, power_w=13.59, power_avg_w=13.6, mem_used_bytes=17253 * MIB)
    for rs in (r0, r1):
        assert_all(
            rs,
            name="NVIDIA RTX A5000",
            sm_clock_mhz=210.0,
            sm_clock_max_mhz=2100.0,
            mem_total_bytes=24564 * MIB,
            power_limit_w=230.0,
            throttle_reasons=1,  # GpuIdle: clocks low on purpose
            throttle_names=[],
        )
    assert_all(r0, temp_c=13.0, pcie_tx_bytes_per_s=488 * 1024.0, pcie_rx_bytes_per_s=439 * 1024.0)
    assert_all(r1, temp_c=15.0, pcie_tx_bytes_per_s=439 * 1024.0, pcie_rx_bytes_per_s=488 * 1024.0)
    # one timestamp per device reading, each device's rows in time order
    assert [r["ts_ns"] for r in r0] == sorted(r["ts_ns"] for r in r0)
    assert GPU_TELEMETRY.conform(c.table()).num_rows == len(r0) * 2


# -- errors ------------------------------------------------------------------------------


def test_not_supported_is_asked_once() -> None:
    nv = fake("tesla-t4.xml")
    c = run(nv)
    n = c.sample_count
    assert n >= 10
    assert nv.calls["nvmlDeviceGetFieldValues"] == 1
    assert nv.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert nv.calls["nvmlDeviceGetViolationStatus"] == 2
    # the fallbacks took over from the first sample on
    assert nv.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == n
    assert nv.calls["nvmlDeviceGetPowerUsage"] == n
    nv = fake("a100-sxm4-v12.xml")
    run(nv)
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == 1


def test_other_errors_null_that_row_and_are_counted() -> None:
    nv = fake(
        "tesla-t4.xml",
        error_every={"nvmlDeviceGetTemperature": (2, FakePynvml.NVML_ERROR_UNKNOWN)},
        errors={"nvmlDeviceGetTotalEnergyConsumption": FakePynvml.NVML_ERROR_GPU_IS_LOST},
    )
    c = run(nv)
    rs = rows(c)
    temps = [r["temp_c"] for r in rs]
    assert temps[0] == 40.0 and temps[1] is None and temps[2] == 40.0
    assert temps.count(None) == len(rs) // 2
    info = c.info()
    assert info["errors"]["temperature"] == temps.count(None)
    assert info["error_examples"]["temperature"] == "_NVMLError: Unknown Error"
    # a lost GPU is asked again on every sample: it may come back
    assert info["errors"]["energy"] == len(rs)
    assert nv.calls["nvmlDeviceGetTotalEnergyConsumption"] == len(rs)
    assert_all(rs, energy_j=None, sm_clock_mhz=585.0, power_w=26.78)
    assert "temperature" not in info["unsupported"].get("0", {})


def test_init_failure_gives_an_empty_table_and_says_why() -> None:
    nv = fake("tesla-t4.xml", init_error=FakePynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    c = run(nv, seconds=0.05)
    assert c.table().num_rows == 0
    assert c.table().schema == GPU_TELEMETRY.schema
    info = c.info()
    assert info["source"] is None
    assert info["stopped_reason"] == "unavailable"
    assert info["unavailable"] == "no GPU telemetry source: NVML init failed (Driver Not Loaded)"


def test_no_devices() -> None:
    nv = FakePynvml([])
    c = run(nv, seconds=0.05)
    assert c.table().num_rows == 0
    assert c.info()["tried"] == {"nvml": "NVML found no devices"}
    assert nv.shutdowns == 1


def test_init_once_shutdown_at_stop() -> None:
    nv = fake("dual_a5000-v13.xml")
    c = run(nv, seconds=0.1)
    assert nv.calls["nvmlInit"] == 1
    assert nv.calls["nvmlDeviceGetHandleByIndex"] == 2
    assert nv.calls["nvmlDeviceGetMaxClockInfo"] == 4  # static: read at open only
    assert nv.shutdowns == 1
    assert c.info()["stopped_reason"] == "stopped"


class _Hide:
    """A pynvml without some calls (an older nvidia-ml-py)."""

    def __init__(self, inner: FakePynvml, *hidden: str) -> None:
        self._inner = inner
        self._hidden = set(hidden)

    def __getattr__(self, name: str) -> Any:
        if name in self._hidden:
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_an_older_binding_falls_back_to_the_throttle_reasons_call() -> None:
    inner = fake("a100-sxm4-v12.xml")
    c = run(_Hide(inner, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlGpmQueryDeviceSupport"))
    assert_all(rows(c), throttle_reasons=0, throttle_names=[])
    assert c.info()["unsupported"]["0"]["clocks_event_reasons"] == "not in this nvidia-ml-py"
    assert inner.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == c.sample_count


def test_without_power_fields_the_power_call_is_the_average_on_newer_gpus() -> None:
    nv = fake(
        "pro-6000-maxq-blackwell-v13.xml",
        errors={"nvmlDeviceGetFieldValues": FakePynvml.NVML_ERROR_NOT_SUPPORTED},
    )
    c = run(nv)
    assert_all(rows(c), power_w=None, power_avg_w=3.97, temp_mem_c=None)
    assert nv.calls["nvmlDeviceGetFieldValues"] == 1


def test_slow_pcie_reads_are_spaced_out() -> None:
    class SlowPcie(FakePynvml):
        def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
            time.sleep(0.02)  # NVML counts bytes over 20 ms
            return super().nvmlDeviceGetPcieThroughput(h, counter)

    nv = SlowPcie(nvml_records_from_xml((FIXTURES / "tesla-t4.xml").read_text()))
    c = run(nv, hz=20.0, seconds=1.0)
    tx = [r["pcie_tx_bytes_per_s"] for r in rows(c)]
    # 40 ms of PCIe reads per 50 ms period: read on every 4th sample or so, null between
    assert c.info()["pcie_stride"]["0"] >= 3
    assert 0 < sum(x is not None for x in tx) < len(tx) / 2
    assert c.info()["achieved_hz"] == pytest.approx(20.0, rel=0.2)


# -- the watched process -----------------------------------------------------------------


def test_has_watched_process_includes_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        nv = fake("dual_a5000-v13.xml", pids={1: [child.pid]})
        c = run(nv, pid=os.getpid(), seconds=0.2)
    finally:
        child.kill()
        child.wait()
    assert_all(rows(c, 0), has_watched_process=False)  # llama-server's, not ours
    assert_all(rows(c, 1), has_watched_process=True)


def test_has_watched_process_sees_the_pid_itself() -> None:
    nv = fake("tesla-t4.xml")
    pid = nv.records[0].processes[1][0]  # the recorded compute process ("python", 5762)
    c = run(nv, pid=pid, seconds=0.1)
    assert_all(rows(c), has_watched_process=True)


# -- import, registry, rate --------------------------------------------------------------


def test_load_pynvml_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(SourceUnavailable, match=r"^nvidia-ml-py not installed$"):
        nvml_mod.load_pynvml()
    c = NvmlCollector(hz=10)
    with c:
        pass
    assert c.info()["unavailable"] == "no GPU telemetry source: nvidia-ml-py not installed"


def test_load_pynvml_broken_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write_broken_module(
        tmp_path, "pynvml", "OSError('libnvidia-ml.so.1: cannot open shared object')"
    )
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SourceUnavailable, match=r"pynvml not importable \(OSError\("):
        nvml_mod.load_pynvml()


def test_registry_and_for_process() -> None:
    cls = COLLECTORS.get("nvml")
    assert cls is NvmlCollector
    c = cls.for_process(1234, 5.0)
    assert isinstance(c, NvmlCollector)
    assert (c.pid, c.hz, c.table_name) == (1234, 5.0, "gpu_telemetry")


@pytest.mark.parametrize("hz", [0, -1.0, math.nan, math.inf, True, "10"])
def test_bad_rate(hz: Any) -> None:
    with pytest.raises(UsageError, match="positive number of Hz"):
        NvmlCollector(hz=hz)


def test_table_only_after_stop() -> None:
    c = NvmlCollector(hz=10, nvml=fake("tesla-t4.xml"))
    with pytest.raises(RuntimeError, match="only valid after stop"):
        c.table()
    c.start()
    c.stop()
    assert isinstance(c.table(), pa.Table)


def test_sampler_cost_at_10_hz() -> None:
    # two devices at the production rate; the 1 % budget is checked by the bench, this
    # bound only catches a sampler that has gone badly wrong
    c = run(fake("dual_a5000-v13.xml"), hz=10.0, seconds=1.0)
    info = c.info()
    assert info["samples"] >= 9
    assert info["achieved_hz"] == pytest.approx(10.0, rel=0.15)
    assert info["cpu_share"] is not None
    assert 0 < info["cpu_share"] < 0.05
    assert info["sampler_cpu_s"] >= info["open_cpu_s"]
