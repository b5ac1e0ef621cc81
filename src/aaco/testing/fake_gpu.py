"""Stand-ins for the GPU vendor libraries and tools, built from recorded real outputs, for
the GPU collectors' tests and benchmarks on machines without a GPU.

* :class:`FakePynvml`: a ``pynvml`` module whose devices answer with the values of a
  recorded ``nvidia-smi -q -x`` document (:func:`nvml_records_from_xml`);
* :class:`FakeAmdSmi`: an ``amdsmi`` module whose devices answer with the values of a
  recorded ``amd-smi metric --csv`` (:func:`amd_records_from_metric_csv`);
* :func:`amd_smi_metric_json`: an ``amd-smi metric --json`` document in either shape seen
  in the wild, reconstructed from the same CSV; :class:`FakeCli`: a command runner that
  prints given outputs.

What a recording lacks, a fake answers NOT_SUPPORTED for (or ``"N/A"`` where the real
library does), never with an invented value. Two things no recording holds are
synthesized, and say so: cumulative counters advance with time at the recorded power
(energy) or at a given share (violation time), and GPM metrics are given by the test.
Failures are injected per call: ``errors`` (every call fails with a code), ``error_every``
(every n-th call fails), ``init_error``; :func:`write_broken_module` makes an import fail
the way amdsmi's does without ROCm. ``calls`` counts the calls.

Example::

    nvml = FakePynvml(nvml_records_from_xml(Path("tesla-t4.xml").read_text()))
    with NvmlCollector(hz=50, nvml=nvml) as c:
        time.sleep(0.3)
    c.table()   # the T4's recorded clocks, power, temperature on every row
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from aaco.collectors.gpu.amd import CliRun

__all__ = [
    "AmdRecord",
    "FakeAmdSmi",
    "FakeCli",
    "FakePynvml",
    "NvmlRecord",
    "amd_records_from_metric_csv",
    "amd_smi_metric_json",
    "nvml_records_from_xml",
    "write_broken_module",
]


def write_broken_module(folder: Path, name: str, exc: str) -> Path:
    """Write a package ``name`` into ``folder`` whose import raises ``exc`` (the Python
    source of an exception), and return the package's folder.

    This is how amdsmi fails on a machine without ROCm: its import loads
    ``libamd_smi.so`` and raises OSError, or KeyError on a missing ``ROCM_PATH``, not
    ImportError. To import it, put ``folder`` first on ``sys.path`` and drop ``name`` from
    ``sys.modules`` (pytest: ``monkeypatch.syspath_prepend``, ``monkeypatch.delitem``).
    Example: ``write_broken_module(tmp, "amdsmi", "OSError('libamd_smi.so: cannot open')")``.
    """
    pkg = folder / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"raise {exc}\n")
    return pkg


# -- NVML --------------------------------------------------------------------------------

_NUM = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _xml_num(node: ET.Element | None, path: str) -> float | None:
    if node is None:
        return None
    el = node.find(path)
    if el is None or el.text is None:
        return None
    m = _NUM.match(el.text.strip())
    return float(m.group()) if m else None


# nvidia-smi's <clocks_event_reason_*> / <clocks_throttle_reason_*> tags and NVML's bits
_REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
# NVML_DEVICE_ARCH_* by product name: nvidia-smi -q does not print the architecture
_ARCH_BY_NAME = (
    ("Blackwell", 10),
    ("H100", 9),
    ("H200", 9),
    ("Tesla T4", 6),
    ("A100", 7),
    ("RTX A", 7),
    ("V100", 5),
)


@dataclass
class NvmlRecord:
    """What one ``<gpu>`` of ``nvidia-smi -q -x`` says, in NVML's units (None: N/A or not
    in the document). ``reasons_api`` is ``event`` for drivers with the clocks-event call
    (the ``<clocks_event_reasons>`` element, R535+), ``throttle`` for older ones."""

    name: str
    arch: int | None
    util_gpu: float | None
    util_mem: float | None
    sm_clock: float | None
    mem_clock: float | None
    sm_clock_max: float | None
    mem_clock_max: float | None
    power_draw_w: float | None
    power_instant_w: float | None
    power_average_w: float | None
    power_limit_w: float | None
    temp_c: float | None
    mem_temp_c: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    pcie_tx_kbs: float | None
    pcie_rx_kbs: float | None
    reasons: int | None
    reasons_api: str
    violation_power_us: float | None
    violation_thermal_us: float | None
    processes: list[tuple[int, str]] = field(default_factory=list)


def nvml_records_from_xml(text: str) -> list[NvmlRecord]:
    """One record per ``<gpu>`` of a ``nvidia-smi -q -x`` document (DTD v11, v12, v13)."""
    root = ET.fromstring(text)
    records = []
    for gpu in root.findall("gpu"):
        name = (gpu.findtext("product_name") or "").strip()
        arch = next((a for key, a in _ARCH_BY_NAME if key in name), None)
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")  # DTD v11
        limit = _xml_num(power, "current_power_limit")
        if limit is None:
            limit = _xml_num(power, "enforced_power_limit")
        reasons: int | None = None
        api = "event"
        block = gpu.find("clocks_event_reasons")
        prefix = "clocks_event_reason_"
        if block is None:
            block = gpu.find("clocks_throttle_reasons")
            prefix = "clocks_throttle_reason_"
            api = "throttle"
        if block is not None:
            reasons = 0
            for el in block:
                tag = el.tag.removeprefix(prefix)
                if (el.text or "").strip() == "Active":
                    reasons |= _REASON_BITS.get(tag, 0)
        counters = gpu.find("clocks_event_reasons_counters")
        viol_power = viol_thermal = None
        if counters is not None:
            viol_power = _xml_num(counters, "clocks_event_reasons_counters_sw_power_cap")
            sw = _xml_num(counters, "clocks_event_reasons_counters_sw_therm_slowdown")
            hw = _xml_num(counters, "clocks_event_reasons_counters_hw_therm_slowdown")
            viol_thermal = None if sw is None or hw is None else sw + hw
        used = _xml_num(gpu, "fb_memory_usage/used")
        total = _xml_num(gpu, "fb_memory_usage/total")
        procs = []
        for p in gpu.findall("processes/process_info"):
            pid = _xml_num(p, "pid")
            if pid is not None:
                procs.append((int(pid), (p.findtext("type") or "C").strip()))
        records.append(
            NvmlRecord(
                name=name,
                arch=arch,
                util_gpu=_xml_num(gpu, "utilization/gpu_util"),
                util_mem=_xml_num(gpu, "utilization/memory_util"),
                sm_clock=_xml_num(gpu, "clocks/sm_clock"),
                mem_clock=_xml_num(gpu, "clocks/mem_clock"),
                sm_clock_max=_xml_num(gpu, "max_clocks/sm_clock"),
                mem_clock_max=_xml_num(gpu, "max_clocks/mem_clock"),
                power_draw_w=_xml_num(power, "power_draw"),
                power_instant_w=_xml_num(power, "instant_power_draw"),
                power_average_w=_xml_num(power, "average_power_draw"),
                power_limit_w=limit,
                temp_c=_xml_num(gpu, "temperature/gpu_temp"),
                mem_temp_c=_xml_num(gpu, "temperature/memory_temp"),
                mem_used_bytes=None if used is None else int(used) << 20,  # MiB
                mem_total_bytes=None if total is None else int(total) << 20,
                pcie_tx_kbs=_xml_num(gpu, "pci/tx_util"),
                pcie_rx_kbs=_xml_num(gpu, "pci/rx_util"),
                reasons=reasons,
                reasons_api=api,
                violation_power_us=viol_power,
                violation_thermal_us=viol_thermal,
                processes=procs,
            )
        )
    return records


class _NVMLError(Exception):
    """pynvml's NVMLError: the NVML return code in ``value``."""

    _TEXT: ClassVar[dict[int, str]] = {
        2: "Invalid Argument",
        3: "Not Supported",
        4: "Insufficient Permissions",
        9: "Driver Not Loaded",
        12: "NVML Shared Library Not Found",
        13: "Function Not Found",
        15: "GPU is lost",
        999: "Unknown Error",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._TEXT.get(self.value, f"NVML error {self.value}")


class _FakeGpmMetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(32)]


class FakePynvml:
    """A ``pynvml`` module over :class:`NvmlRecord` devices.

    The recorded values are returned on every call, except the energy counter (absent from
    ``nvidia-smi -q``; synthesized: ``energy_start_mj`` plus the recorded power times the
    time since the fake was made, as NVML's millijoule count) and the violation counters
    (the v13 ``clocks_event_reasons_counters``, constant; NOT_SUPPORTED without them).
    Power fields (instant / average) exist only where the document has them (DTD v13), as
    on the drivers that wrote v11 / v12. ``gpm`` gives per-device GPM metric values
    (``sm_util``, ``sm_occupancy``, ``tensor_util``, ``dram_bw_util``); without it GPM is
    unsupported. ``pids`` adds compute processes per device index.
    """

    NVMLError = _NVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_FI_DEV_POWER_AVERAGE = 185
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_DEVICE_ARCH_AMPERE = 7
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    c_nvmlGpmMetricsGet_t = _FakeGpmMetricsGet

    def __init__(
        self,
        records: Sequence[NvmlRecord],
        *,
        energy_start_mj: int = 123_456_789,
        gpm: Mapping[int, Mapping[str, float]] | None = None,
        pids: Mapping[int, Sequence[int]] | None = None,
        errors: Mapping[str, int] | None = None,
        error_every: Mapping[str, tuple[int, int]] | None = None,
        init_error: int | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.records = list(records)
        self.energy_start_mj = energy_start_mj
        self.gpm = dict(gpm or {})
        self.pids = {k: list(v) for k, v in (pids or {}).items()}
        self.errors = dict(errors or {})
        self.error_every = dict(error_every or {})
        self.init_error = init_error
        self.clock = clock
        self.calls: Counter[str] = Counter()
        self.initialized = False
        self.shutdowns = 0
        self._t0 = clock()

    # -- plumbing --------------------------------------------------------------------

    def _call(self, fn: str) -> None:
        self.calls[fn] += 1
        if fn in self.errors:
            raise _NVMLError(self.errors[fn])
        every = self.error_every.get(fn)
        if every is not None and self.calls[fn] % every[0] == 0:
            raise _NVMLError(every[1])

    def _rec(self, handle: int) -> NvmlRecord:
        return self.records[handle]

    @staticmethod
    def _need(value: float | None) -> float:
        if value is None:
            raise _NVMLError(3)
        return value

    def _elapsed_s(self) -> float:
        return (self.clock() - self._t0) / 1e9

    # -- the NVML calls the collector makes ------------------------------------------

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        if self.init_error is not None:
            raise _NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.shutdowns += 1
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.records)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.records):
            raise _NVMLError(2)
        return index

    def nvmlDeviceGetName(self, h: int) -> str:
        self._call("nvmlDeviceGetName")
        return self._rec(h).name

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        self._call("nvmlDeviceGetArchitecture")
        arch = self._rec(h).arch
        if arch is None:
            raise _NVMLError(3)
        return arch

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetUtilizationRates")
        r = self._rec(h)
        return SimpleNamespace(gpu=int(self._need(r.util_gpu)), memory=int(self._need(r.util_mem)))

    def _clock(self, r: NvmlRecord, kind: int, top: bool) -> int:
        if kind == self.NVML_CLOCK_SM:
            return int(self._need(r.sm_clock_max if top else r.sm_clock))
        if kind == self.NVML_CLOCK_MEM:
            return int(self._need(r.mem_clock_max if top else r.mem_clock))
        raise _NVMLError(2)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self._call("nvmlDeviceGetClockInfo")
        return self._clock(self._rec(h), kind, False)

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        self._call("nvmlDeviceGetMaxClockInfo")
        return self._clock(self._rec(h), kind, True)

    def nvmlDeviceGetFieldValues(self, h: int, field_ids: Sequence[int]) -> list[SimpleNamespace]:
        self._call("nvmlDeviceGetFieldValues")
        r = self._rec(h)
        known: dict[int, float | None] = {
            self.NVML_FI_DEV_POWER_INSTANT: None
            if r.power_instant_w is None
            else r.power_instant_w * 1000,
            self.NVML_FI_DEV_POWER_AVERAGE: None
            if r.power_average_w is None
            else r.power_average_w * 1000,
            self.NVML_FI_DEV_MEMORY_TEMP: r.mem_temp_c,
        }
        out = []
        for fid in field_ids:
            value = known.get(fid)
            ret = 0 if value is not None else (3 if fid in known else 2)
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    scopeId=0,
                    timestamp=self.clock() // 1000,
                    latencyUsec=0,
                    valueType=self.NVML_VALUE_TYPE_UNSIGNED_INT,
                    nvmlReturn=ret,
                    value=SimpleNamespace(uiVal=round(value or 0), dVal=float(value or 0)),
                )
            )
        return out

    def _power_w(self, r: NvmlRecord) -> float | None:
        for p in (r.power_instant_w, r.power_draw_w, r.power_average_w):
            if p is not None:
                return p
        return None

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        r = self._rec(h)
        # drivers that report the average (v13) return it here; older ones the draw
        p = r.power_average_w if r.power_average_w is not None else r.power_draw_w
        return round(self._need(p) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        return round(self._need(self._rec(h).power_limit_w) * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        power = self._need(self._power_w(self._rec(h)))
        return self.energy_start_mj + int(power * self._elapsed_s() * 1000)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise _NVMLError(2)
        return int(self._need(self._rec(h).temp_c))

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetMemoryInfo")
        r = self._rec(h)
        if r.mem_total_bytes is None or r.mem_used_bytes is None:
            raise _NVMLError(3)
        return SimpleNamespace(
            total=r.mem_total_bytes,
            used=r.mem_used_bytes,
            free=r.mem_total_bytes - r.mem_used_bytes,
        )

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        self._call("nvmlDeviceGetPcieThroughput")
        r = self._rec(h)
        return int(self._need(r.pcie_tx_kbs if counter == 0 else r.pcie_rx_kbs))

    def _reasons(self, r: NvmlRecord) -> int:
        if r.reasons is None:
            raise _NVMLError(3)
        return r.reasons

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        r = self._rec(h)
        if r.reasons_api != "event":  # a driver older than R535 lacks the symbol
            raise _NVMLError(self.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._reasons(r)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._reasons(self._rec(h))

    def nvmlDeviceGetViolationStatus(self, h: int, policy: int) -> SimpleNamespace:
        self._call("nvmlDeviceGetViolationStatus")
        r = self._rec(h)
        us = (
            r.violation_power_us
            if policy == self.NVML_PERF_POLICY_POWER
            else r.violation_thermal_us
        )
        return SimpleNamespace(
            referenceTime=self.clock() // 1000, violationTime=int(self._need(us)) * 1000
        )

    def _procs(self, h: int, kind: str) -> list[SimpleNamespace]:
        r = self._rec(h)
        pids = [pid for pid, t in r.processes if kind in t]
        if kind == "C":
            pids += self.pids.get(h, [])
        return [SimpleNamespace(pid=p, usedGpuMemory=None) for p in pids]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return self._procs(h, "C")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._call("nvmlDeviceGetGraphicsRunningProcesses")
        return self._procs(h, "G")

    # -- GPM -------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: int) -> SimpleNamespace:
        self._call("nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(version=1, isSupportedDevice=int(h in self.gpm))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        self._call("nvmlGpmSampleAlloc")
        return SimpleNamespace(device=None, ts=None, freed=False)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        self._call("nvmlGpmSampleFree")
        sample.freed = True

    def nvmlGpmSampleGet(self, h: int, sample: SimpleNamespace) -> SimpleNamespace:
        self._call("nvmlGpmSampleGet")
        sample.device = h
        sample.ts = self.clock()
        return sample

    def nvmlGpmMetricsGet(self, mg: _FakeGpmMetricsGet) -> _FakeGpmMetricsGet:
        self._call("nvmlGpmMetricsGet")
        h = mg.sample1.device
        if mg.sample2.device != h or mg.sample1.ts is None or mg.sample2.ts is None:
            raise _NVMLError(2)
        values = self.gpm.get(h, {})
        names = {
            self.NVML_GPM_METRIC_SM_UTIL: "sm_util",
            self.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
            self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_util",
            self.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_bw_util",
        }
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            value = values.get(names.get(m.metricId, ""))
            m.nvmlReturn = 0 if value is not None else 3
            m.value = 0.0 if value is None else float(value)
        return mg


# -- AMD ---------------------------------------------------------------------------------


@dataclass
class AmdRecord:
    """What one GPU row of ``amd-smi metric --csv`` says (None: ``N/A``), plus its XGMI
    per-link totals from ``amd-smi xgmi -m --json`` (KB, None for the link to itself)."""

    gpu: int
    name: str | None
    gfx_activity: float | None
    umc_activity: float | None
    socket_power: float | None
    gfx_clks: list[float | None]
    gfx_max_clks: list[float | None]
    mem_clk: float | None
    mem_max_clk: float | None
    edge: float | None
    hotspot: float | None
    mem_temp: float | None
    energy_j: float | None
    used_vram_mb: int | None
    total_vram_mb: int | None
    throttled: bool | None
    xgmi_read_kb: list[float | None] = field(default_factory=list)
    xgmi_write_kb: list[float | None] = field(default_factory=list)
    csv_row: dict[str, str] = field(default_factory=dict)


def _csv_num(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    m = _NUM.fullmatch(text)
    return float(m.group()) if m else None


def amd_records_from_metric_csv(
    text: str, *, name: str | None = None, xgmi_json: str | None = None
) -> list[AmdRecord]:
    """One record per GPU row of ``amd-smi metric --csv``; ``name`` is the product name the
    CSV does not carry; ``xgmi_json`` (``amd-smi xgmi -m --json``) adds the XGMI totals."""
    rows = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))
    xgmi: dict[int, tuple[list[float | None], list[float | None]]] = {}
    if xgmi_json is not None:
        for g in json.loads(xgmi_json):
            links = g["link_metrics"]["links"]
            reads = [_kb(link.get("read")) for link in links]
            writes = [_kb(link.get("write")) for link in links]
            xgmi[int(g["gpu"])] = (reads, writes)
    out = []
    for r in rows:
        gpu = int(r["gpu"])
        n = 0
        gfx: list[float | None] = []
        gfx_max: list[float | None] = []
        while f"gfx_{n}_clk" in r:
            gfx.append(_csv_num(r[f"gfx_{n}_clk"]))
            gfx_max.append(_csv_num(r[f"gfx_{n}_max_clk"]))
            n += 1
        used = _csv_num(r.get("used_vram"))
        total = _csv_num(r.get("total_vram"))
        throttle = (r.get("throttle_status") or "").strip().upper()
        reads, writes = xgmi.get(gpu, ([], []))
        out.append(
            AmdRecord(
                gpu=gpu,
                name=name,
                gfx_activity=_csv_num(r.get("gfx_activity")),
                umc_activity=_csv_num(r.get("umc_activity")),
                socket_power=_csv_num(r.get("socket_power")),
                gfx_clks=gfx,
                gfx_max_clks=gfx_max,
                mem_clk=_csv_num(r.get("mem_0_clk")),
                mem_max_clk=_csv_num(r.get("mem_0_max_clk")),
                edge=_csv_num(r.get("edge")),
                hotspot=_csv_num(r.get("hotspot")),
                mem_temp=_csv_num(r.get("mem")),
                energy_j=_csv_num(r.get("total_energy_consumption")),
                used_vram_mb=None if used is None else int(used),
                total_vram_mb=None if total is None else int(total),
                throttled={"THROTTLED": True, "UNTHROTTLED": False}.get(throttle),
                xgmi_read_kb=reads,
                xgmi_write_kb=writes,
                csv_row=dict(r),
            )
        )
    return out


def _kb(raw: Any) -> float | None:
    if isinstance(raw, dict) and str(raw.get("unit", "")).upper() == "KB":
        v = raw.get("value")
        return float(v) if isinstance(v, (int, float)) else None
    return None


class AmdSmiException(Exception):
    """amdsmi's base exception."""


class AmdSmiLibraryException(AmdSmiException):
    """amdsmi's library error: the amdsmi_status_t in ``err_code``."""

    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = abs(err_code)

    def get_error_code(self) -> int:
        return self.err_code

    def __str__(self) -> str:
        text = {2: "AMDSMI_STATUS_NOT_SUPPORTED", 10: "AMDSMI_STATUS_NO_PERM"}.get(
            self.err_code, f"AMDSMI status {self.err_code}"
        )
        return f"Error code:\n\t{self.err_code} | {text}"


class _ClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


class _TempType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class _TempMetric(IntEnum):
    CURRENT = 0


_NA = "N/A"
_RESOLUTION_UJ = 15.259  # amdsmi's counter_resolution on MI200 / MI300 (µJ per count)


class FakeAmdSmi:
    """An ``amdsmi`` module over :class:`AmdRecord` devices (amdsmi 6.x behaviour:
    ``indep_throttle_status`` an int bitmask; ``throttle_as_bool`` gives amdsmi 7's flag).

    The energy accumulator starts at the recorded ``total_energy_consumption`` (in counts
    of 15.259 µJ) and advances at the recorded socket power; ``energy_wrap_in_s`` starts
    it that many seconds before the 64-bit accumulator wraps instead. ``legacy_energy_key``
    names it ``power`` as amdsmi before 6.4 did. ``violation`` = (PPT share, thermal
    share) adds amdsmi_get_violation_status with accumulators advancing one tick per ms
    at those shares (none was recorded); ``residency`` does the same for gpu_metrics'
    ``ppt_residency_acc`` / ``socket_thm_residency_acc`` (MI300 firmware without the
    violation call). ``pids`` lists processes per device index.
    """

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiClkType = _ClkType
    AmdSmiTemperatureType = _TempType
    AmdSmiTemperatureMetric = _TempMetric

    def __init__(
        self,
        records: Sequence[AmdRecord],
        *,
        pids: Mapping[int, Sequence[int]] | None = None,
        violation: tuple[float, float] | None = None,
        residency: tuple[float, float] | None = None,
        energy_wrap_in_s: float | None = None,
        legacy_energy_key: bool = False,
        throttle_as_bool: bool = False,
        errors: Mapping[str, int] | None = None,
        error_every: Mapping[str, tuple[int, int]] | None = None,
        init_error: int | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.records = list(records)
        self.pids = {k: list(v) for k, v in (pids or {}).items()}
        self.violation = violation
        self.residency = residency
        self.legacy_energy_key = legacy_energy_key
        self.throttle_as_bool = throttle_as_bool
        self.errors = dict(errors or {})
        self.error_every = dict(error_every or {})
        self.init_error = init_error
        self.clock = clock
        self.calls: Counter[str] = Counter()
        self.shutdowns = 0
        self._t0 = clock()
        self._acc0: list[int] = []
        for r in self.records:
            if energy_wrap_in_s is not None and r.socket_power is not None:
                counts = r.socket_power * energy_wrap_in_s * 1e6 / _RESOLUTION_UJ
                self._acc0.append((1 << 64) - int(counts))
            else:
                self._acc0.append(int((r.energy_j or 0.0) * 1e6 / _RESOLUTION_UJ))
        if violation is not None:
            self.amdsmi_get_violation_status = self._violation_status

    def _call(self, fn: str) -> None:
        self.calls[fn] += 1
        if fn in self.errors:
            raise AmdSmiLibraryException(self.errors[fn])
        every = self.error_every.get(fn)
        if every is not None and self.calls[fn] % every[0] == 0:
            raise AmdSmiLibraryException(every[1])

    def _rec(self, h: SimpleNamespace) -> AmdRecord:
        index: int = h.index
        return self.records[index]

    def _elapsed_s(self) -> float:
        return (self.clock() - self._t0) / 1e9

    def amdsmi_init(self, flag: int = 2) -> None:
        self._call("amdsmi_init")
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)

    def amdsmi_shut_down(self) -> None:
        self._call("amdsmi_shut_down")
        self.shutdowns += 1

    def amdsmi_get_processor_handles(self) -> list[SimpleNamespace]:
        self._call("amdsmi_get_processor_handles")
        return [SimpleNamespace(index=i) for i in range(len(self.records))]

    def amdsmi_get_gpu_asic_info(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_gpu_asic_info")
        name = self._rec(h).name
        return {"market_name": name if name is not None else _NA, "vendor_id": 0x1002}

    def amdsmi_get_gpu_activity(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_gpu_activity")
        r = self._rec(h)
        return {
            "gfx_activity": _na(r.gfx_activity),
            "umc_activity": _na(r.umc_activity),
            "mm_activity": _NA,
        }

    def amdsmi_get_clock_info(self, h: SimpleNamespace, kind: _ClkType) -> dict[str, Any]:
        self._call("amdsmi_get_clock_info")
        r = self._rec(h)
        if kind == _ClkType.GFX:
            cur = r.gfx_clks[0] if r.gfx_clks else None
            top = r.gfx_max_clks[0] if r.gfx_max_clks else None
        elif kind == _ClkType.MEM:
            cur, top = r.mem_clk, r.mem_max_clk
        else:
            raise AmdSmiLibraryException(2)
        if cur is None:
            raise AmdSmiLibraryException(2)
        return {"clk": _na(cur), "min_clk": _NA, "max_clk": _na(top), "clk_locked": _NA}

    def amdsmi_get_power_info(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_power_info")
        p = _na(self._rec(h).socket_power)
        return {
            "socket_power": p,
            "current_socket_power": p,
            "average_socket_power": _NA,
            "gfx_voltage": _NA,
            "soc_voltage": _NA,
            "mem_voltage": _NA,
            "power_limit": _NA,  # not in the recording
        }

    def amdsmi_get_energy_count(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_energy_count")
        r = self._rec(h)
        if r.socket_power is None:
            raise AmdSmiLibraryException(2)
        counts = int(r.socket_power * self._elapsed_s() * 1e6 / _RESOLUTION_UJ)
        acc = (self._acc0[h.index] + counts) % (1 << 64)
        key = "power" if self.legacy_energy_key else "energy_accumulator"
        return {key: acc, "counter_resolution": _RESOLUTION_UJ, "timestamp": self.clock()}

    def amdsmi_get_temp_metric(
        self, h: SimpleNamespace, kind: _TempType, metric: _TempMetric
    ) -> int:
        self._call("amdsmi_get_temp_metric")
        r = self._rec(h)
        value = {_TempType.EDGE: r.edge, _TempType.HOTSPOT: r.hotspot, _TempType.VRAM: r.mem_temp}[
            kind
        ]
        if value is None:
            raise AmdSmiLibraryException(2)
        return int(value)

    def amdsmi_get_gpu_vram_usage(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_gpu_vram_usage")
        r = self._rec(h)
        if r.used_vram_mb is None or r.total_vram_mb is None:
            raise AmdSmiLibraryException(2)
        return {"vram_total": r.total_vram_mb, "vram_used": r.used_vram_mb}

    def amdsmi_get_gpu_metrics_info(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_gpu_metrics_info")
        r = self._rec(h)
        throttled = bool(r.throttled)
        status: Any = throttled if self.throttle_as_bool else int(throttled)
        return {
            "temperature_edge": _na(r.edge),
            "temperature_hotspot": _na(r.hotspot),
            "average_gfx_activity": _na(r.gfx_activity),
            "current_gfxclks": [_na(c) for c in r.gfx_clks] or _NA,
            "throttle_status": status,
            # the recording says whether, not why: no independent bit can be set from it
            "indep_throttle_status": _NA if throttled else (False if self.throttle_as_bool else 0),
            "xgmi_read_data_acc": [_na(x) for x in r.xgmi_read_kb] or _NA,
            "xgmi_write_data_acc": [_na(x) for x in r.xgmi_write_kb] or _NA,
            **self._residencies(),
        }

    def _residencies(self) -> dict[str, Any]:
        if self.residency is None:
            return {
                "accumulation_counter": _NA,
                "ppt_residency_acc": _NA,
                "socket_thm_residency_acc": _NA,
            }
        ppt, thermal = self.residency
        ticks = int(self._elapsed_s() * 1000)  # one tick per ms
        return {
            "accumulation_counter": ticks,
            "ppt_residency_acc": int(ticks * ppt),
            "socket_thm_residency_acc": int(ticks * thermal),
        }

    def _violation_status(self, h: SimpleNamespace) -> dict[str, Any]:
        self._call("amdsmi_get_violation_status")
        assert self.violation is not None
        ppt, thermal = self.violation
        ticks = int(self._elapsed_s() * 1000)  # one tick per ms
        return {
            "acc_counter": ticks,
            "acc_ppt_pwr": int(ticks * ppt),
            "acc_socket_thrm": int(ticks * thermal),
            "acc_prochot_thrm": 0,
            "active_ppt_pwr": ppt > 0,
            "active_socket_thrm": thermal > 0,
            "active_prochot_thrm": False,
            "active_vr_thrm": False,
            "active_hbm_thrm": False,
        }

    def amdsmi_get_gpu_process_list(self, h: SimpleNamespace) -> list[dict[str, Any]]:
        self._call("amdsmi_get_gpu_process_list")
        return [{"name": "python", "pid": p, "mem": 0} for p in self.pids.get(h.index, [])]


def _na(value: float | None) -> Any:
    if value is None:
        return _NA
    return int(value) if float(value).is_integer() else value


# -- amd-smi metric --json reconstructed from the CSV ------------------------------------

_UNITS = (
    (re.compile(r"^(gfx|umc|mm)_activity$"), "%"),
    (re.compile(r"^socket_power$"), "W"),
    (re.compile(r"_voltage$"), "mV"),
    (re.compile(r"^(clk|min_clk|max_clk)$"), "MHz"),
    (re.compile(r"^(edge|hotspot|mem)$"), "C"),
    (re.compile(r"^speed$"), "GT/s"),
    (re.compile(r"^bandwidth$"), "Mb/s"),
    (re.compile(r"^total_energy_consumption$"), "J"),
    (re.compile(r"_(vram|gtt)$"), "MB"),
)


def _json_value(key: str, raw: str, with_units: bool) -> Any:
    text = raw.strip()
    if text.startswith("["):
        return json.loads(text)
    num = _csv_num(text)
    if num is None:
        return text
    value: Any = int(num) if num.is_integer() and "." not in text else num
    if with_units:
        unit = next((u for pat, u in _UNITS if pat.search(key)), None)
        if unit is not None:
            return {"value": value, "unit": unit}
    return value


def amd_smi_metric_json(csv_text: str, shape: str = "gpu_data") -> str:
    """An ``amd-smi metric --json`` document rebuilt from ``amd-smi metric --csv`` output.

    No JSON of that command was recorded; the CSV is its flattening, and this nests its
    columns back into the sections amd-smi prints (usage, power, clock.gfx_N, temperature,
    pcie, energy, mem_usage). ``shape="list"``: a bare list of GPUs with bare numbers
    (amd-smi of ROCm 6.0 / 6.1); ``"gpu_data"``: ``{"gpu_data": [...]}`` with
    ``{"value", "unit"}`` leaves (ROCm 6.2 and later).
    """
    if shape not in ("list", "gpu_data"):
        raise ValueError(f"shape must be 'list' or 'gpu_data', got {shape!r}")
    units = shape == "gpu_data"
    sections = {
        "usage": ("gfx_activity", "umc_activity", "mm_activity", "vcn_activity", "jpeg_activity"),
        "power": (
            "socket_power",
            "gfx_voltage",
            "soc_voltage",
            "mem_voltage",
            "power_management",
            "throttle_status",
        ),
        "temperature": ("edge", "hotspot", "mem"),
        "pcie": (
            "width",
            "speed",
            "bandwidth",
            "replay_count",
            "l0_to_recovery_count",
            "replay_roll_over_count",
            "nak_sent_count",
            "nak_received_count",
            "current_bandwidth_sent",
            "current_bandwidth_received",
            "max_packet_size",
        ),
        "energy": ("total_energy_consumption",),
        "mem_usage": (
            "total_vram",
            "used_vram",
            "free_vram",
            "total_visible_vram",
            "used_visible_vram",
            "free_visible_vram",
            "total_gtt",
            "used_gtt",
            "free_gtt",
        ),
    }
    gpus = []
    for r in csv.DictReader(io.StringIO(csv_text.lstrip("\ufeff"))):
        g: dict[str, Any] = {"gpu": int(r["gpu"])}
        for section, keys in sections.items():
            g[section] = {k: _json_value(k, r[k], units) for k in keys if k in r}
        clock: dict[str, Any] = {}
        for key, raw in r.items():
            m = re.fullmatch(
                r"((?:gfx|mem|vclk|dclk)_\d+)_(clk|min_clk|max_clk|clk_locked|deep_sleep)", key
            )
            if m:
                clock.setdefault(m.group(1), {})[m.group(2)] = _json_value(m.group(2), raw, units)
        g["clock"] = clock
        for key in ("perf_level", "xgmi_err"):
            if key in r:
                g[key] = r[key]
        gpus.append(g)
    doc: Any = {"gpu_data": gpus} if units else gpus
    return json.dumps(doc, indent=4)


# -- commands ----------------------------------------------------------------------------


class FakeCli:
    """A command runner (``run_command``'s signature) printing given outputs.

    ``outputs`` maps the first argument after the tool (``"metric"``, ``"static"``,
    ``"--showid"``, ``"-a"``) to what the command prints; an argument not in it exits 2
    with no output. Every run takes ``wall_s`` (slept, so that rate limiting sees it) and
    reports ``cpu_s`` of CPU. ``calls`` lists the argvs.
    """

    def __init__(
        self, outputs: Mapping[str, str | bytes], *, wall_s: float = 0.0, cpu_s: float = 0.0
    ) -> None:
        self.outputs = {k: v.encode() if isinstance(v, str) else v for k, v in outputs.items()}
        self.wall_s = wall_s
        self.cpu_s = cpu_s
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CliRun:
        self.calls.append(list(argv))
        if self.wall_s:
            time.sleep(self.wall_s)
        key = argv[1] if len(argv) > 1 else ""
        out = self.outputs.get(key)
        if out is None:
            return CliRun(b"", 2, self.wall_s, self.cpu_s)
        return CliRun(out, 0, self.wall_s, self.cpu_s)
