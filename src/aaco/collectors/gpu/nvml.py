"""NVIDIA GPUs through NVML (``pynvml``, from the ``nvidia-ml-py`` package): one row per
device per sample of :data:`~aaco.session.schema.GPU_TELEMETRY`.

Install with ``pip install aaco[nvidia]``. Tests run it against
:class:`aaco.testing.fake_gpu.FakePynvml`, a stand-in module built from recorded
``nvidia-smi -q -x`` output.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import time
from typing import Any, ClassVar

from aaco.collectors.gpu.common import (
    GpuSamplerBase,
    Opener,
    Probe,
    ProbeRunner,
    Source,
    SourceUnavailable,
    WatchedPids,
    names_from_mask,
    new_row,
)

__all__ = ["NVML_THROTTLE_BITS", "NvmlCollector", "NvmlSource", "load_pynvml", "open_nvml"]

# nvmlClocksEventReason* (same bits as the older nvmlClocksThrottleReason*) -> vocabulary.
# Idle and the application / display clock settings lower clocks on purpose: not throttling.
NVML_THROTTLE_BITS: tuple[tuple[int, str | None], ...] = (
    (0x1, None),  # GpuIdle
    (0x2, None),  # ApplicationsClocksSetting
    (0x4, "power_cap"),  # SwPowerCap
    (0x8, "hw_slowdown"),  # HwSlowdown (thermal or power brake, reported together)
    (0x10, "sync_boost"),  # SyncBoost
    (0x20, "sw_thermal"),  # SwThermalSlowdown
    (0x40, "hw_thermal"),  # HwThermalSlowdown
    (0x80, "hw_power_brake"),  # HwPowerBrakeSlowdown
    (0x100, None),  # DisplayClockSetting
)

# NVML constants, with the values of nvidia-ml-py 12/13 for bindings that lack a name.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_FUNCTION_NOT_FOUND = 13
_FI_POWER_AVERAGE = 185
_FI_POWER_INSTANT = 186
_FI_MEMORY_TEMP = 82
_ARCH_AMPERE = 7
_GPM_METRICS = (
    ("NVML_GPM_METRIC_SM_UTIL", 2, "gpm_sm_activity_pct"),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", 3, "gpm_sm_occupancy_pct"),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5, "gpm_tensor_activity_pct"),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10, "gpm_dram_bw_util_pct"),
)
# NVML's PCIe throughput call counts bytes over a 20 ms interval and blocks meanwhile; it is
# read on every k-th sample only, so that the two calls take at most this share of a period.
_PCIE_WALL_SHARE = 0.25
# GA100 (A100, A30, A800) is the one Ampere chip whose nvmlDeviceGetPowerUsage is
# instantaneous; on the other Ampere chips and later it is a 1 s average.
_GA100_NAMES = ("A100", "A30", "A800")


def load_pynvml() -> Any:
    """The ``pynvml`` module, or :class:`SourceUnavailable` saying why it cannot be had."""
    try:
        return importlib.import_module("pynvml")
    except ModuleNotFoundError as exc:
        if exc.name == "pynvml":
            raise SourceUnavailable("nvidia-ml-py not installed") from exc
        raise SourceUnavailable(f"pynvml not importable ({exc!r})") from exc
    except Exception as exc:  # a broken install raises whatever its import raises
        raise SourceUnavailable(f"pynvml not importable ({exc!r})") from exc


def _code(nv: Any, name: str, default: int) -> int:
    value = getattr(nv, name, default)
    return value if isinstance(value, int) else default


def _field_value(fv: Any, nv: Any) -> float | None:
    """The number an ``nvmlFieldValue_t`` holds, read from its union by its type."""
    vt = fv.valueType
    v = fv.value
    if vt == _code(nv, "NVML_VALUE_TYPE_DOUBLE", 0):
        return float(v.dVal)
    attr = {
        _code(nv, "NVML_VALUE_TYPE_UNSIGNED_INT", 1): "uiVal",
        _code(nv, "NVML_VALUE_TYPE_UNSIGNED_LONG", 2): "ulVal",
        _code(nv, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): "ullVal",
        _code(nv, "NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): "sllVal",
        _code(nv, "NVML_VALUE_TYPE_SIGNED_INT", 5): "siVal",
        _code(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6): "usVal",
    }.get(vt)
    return None if attr is None else float(getattr(v, attr))


class _Device:
    __slots__ = (
        "handle",
        "index",
        "name",
        "pcie",
        "pcie_cost_ns",
        "pcie_stride",
        "probes",
        "static",
    )

    def __init__(self, index: int, handle: Any, name: str | None) -> None:
        self.index = index
        self.handle = handle
        self.name = name
        self.static: dict[str, Any] = {}
        self.probes: list[Probe] = []
        self.pcie: list[Probe] = []
        self.pcie_stride = 1
        self.pcie_cost_ns: float | None = None


class NvmlSource(Source):
    """NVML opened once (``nvmlInit``), device handles got once, one row per device per
    :meth:`read`; ``nvmlShutdown`` at :meth:`close`.

    Every NVML call is its own probe (:class:`~aaco.collectors.gpu.common.Probe`): one that
    answers NOT_SUPPORTED (or NO_PERMISSION, or that the installed binding lacks) is not
    asked again for the rest of the run and its columns stay null; any other error nulls
    that row's columns and is counted in :meth:`info`.
    """

    name: ClassVar[str] = "nvml"

    def __init__(self, nvml: Any, watched: WatchedPids) -> None:
        super().__init__()
        self._nv = nvml
        self._watched = watched
        self._runner = ProbeRunner(self._classify)
        self._gpm_samples: list[Any] = []
        self._power_usage: dict[str, str] = {}
        self._index = 0
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise SourceUnavailable(f"NVML init failed ({exc})") from exc
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count <= 0:
                raise SourceUnavailable("NVML found no devices")
            self._devices = [self._open_device(i) for i in range(count)]
        except BaseException as exc:
            self._shutdown()
            if isinstance(exc, SourceUnavailable):
                raise
            if isinstance(exc, Exception):
                raise SourceUnavailable(f"NVML device listing failed ({exc})") from exc
            raise
        self.device_names = [d.name for d in self._devices]

    # -- opening -----------------------------------------------------------------------

    def _classify(self, exc: BaseException) -> str | None:
        nv = self._nv
        if isinstance(exc, _AllFieldsUnsupported):
            return "not supported"
        if isinstance(exc, AttributeError):
            return "not in this nvidia-ml-py"
        err = getattr(nv, "NVMLError", None)
        if isinstance(err, type) and isinstance(exc, err):
            value = getattr(exc, "value", None)
            if value == _code(nv, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED):
                return "not supported"
            if value == _code(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND):
                return "not in this driver"
            if value == _code(nv, "NVML_ERROR_NO_PERMISSION", _NO_PERMISSION):
                return "no permission"
        return None

    def _static(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            return None

    def _open_device(self, index: int) -> _Device:
        nv = self._nv
        h = nv.nvmlDeviceGetHandleByIndex(index)
        raw = self._static(nv.nvmlDeviceGetName, h)
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        dev = _Device(index, h, name if isinstance(name, str) else None)
        clock_sm = _code(nv, "NVML_CLOCK_SM", 1)
        clock_mem = _code(nv, "NVML_CLOCK_MEM", 2)
        sm_max = self._static(nv.nvmlDeviceGetMaxClockInfo, h, clock_sm)
        mem_max = self._static(nv.nvmlDeviceGetMaxClockInfo, h, clock_mem)
        dev.static = {
            "sm_clock_max_mhz": None if sm_max is None else float(sm_max),
            "mem_clock_max_mhz": None if mem_max is None else float(mem_max),
        }
        dev.probes = self._probes(dev, clock_sm, clock_mem)
        dev.pcie = self._pcie_probes(h)
        return dev

    def _probes(self, dev: _Device, clock_sm: int, clock_mem: int) -> list[Probe]:
        nv = self._nv
        h = dev.handle

        # First, so that the row's timestamp is closest to the energy reading.
        def energy(row: dict[str, Any]) -> None:
            row["energy_j"] = nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0

        instant = self._power_usage_is_instant(h, dev.name)
        column = "power_w" if instant else "power_avg_w"
        self._power_usage[str(dev.index)] = "instant" if instant else "average"

        def power_usage(row: dict[str, Any]) -> None:
            row[column] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0

        usage = Probe("power_usage", power_usage, enabled=False)
        fields = _FieldProbe(nv, h, usage)

        def util(row: dict[str, Any]) -> None:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            row["util_gpu_pct"] = float(u.gpu)
            row["util_mem_pct"] = float(u.memory)

        def sm_clock(row: dict[str, Any]) -> None:
            row["sm_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, clock_sm))

        def mem_clock(row: dict[str, Any]) -> None:
            row["mem_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, clock_mem))

        temp_gpu = _code(nv, "NVML_TEMPERATURE_GPU", 0)

        def temp(row: dict[str, Any]) -> None:
            row["temp_c"] = float(nv.nvmlDeviceGetTemperature(h, temp_gpu))

        def memory(row: dict[str, Any]) -> None:
            m = nv.nvmlDeviceGetMemoryInfo(h)
            row["mem_used_bytes"] = int(m.used)
            row["mem_total_bytes"] = int(m.total)

        def power_limit(row: dict[str, Any]) -> None:
            row["power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0

        def events(row: dict[str, Any]) -> None:
            _throttle(row, int(nv.nvmlDeviceGetCurrentClocksEventReasons(h)))

        def throttle(row: dict[str, Any]) -> None:
            _throttle(row, int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)))

        older = Probe("throttle_reasons", throttle, enabled=False)
        policy_power = _code(nv, "NVML_PERF_POLICY_POWER", 0)
        policy_thermal = _code(nv, "NVML_PERF_POLICY_THERMAL", 1)

        def viol_power(row: dict[str, Any]) -> None:
            v = nv.nvmlDeviceGetViolationStatus(h, policy_power)
            row["violation_power_ns"] = int(v.violationTime)

        def viol_thermal(row: dict[str, Any]) -> None:
            v = nv.nvmlDeviceGetViolationStatus(h, policy_thermal)
            row["violation_thermal_ns"] = int(v.violationTime)

        probes = [
            Probe("energy", energy),
            Probe("power_fields", fields.read, fallback=usage),
            usage,
            Probe("power_limit", power_limit),
            Probe("utilization", util),
            Probe("sm_clock", sm_clock),
            Probe("mem_clock", mem_clock),
            Probe("temperature", temp),
            Probe("memory", memory),
            Probe("clocks_event_reasons", events, fallback=older),
            older,
            Probe("violation_power", viol_power),
            Probe("violation_thermal", viol_thermal),
        ]
        gpm = self._gpm_probe(dev)
        if gpm is not None:
            probes.append(gpm)
        probes.extend(self._process_probes(h))
        return probes

    def _power_usage_is_instant(self, h: Any, name: str | None) -> bool:
        arch = self._static(getattr(self._nv, "nvmlDeviceGetArchitecture", None) or _none, h)
        if not isinstance(arch, int) or arch <= 0 or arch > 1000:
            return False  # unknown: newer GPUs average, and the brief is to say so
        if arch < _code(self._nv, "NVML_DEVICE_ARCH_AMPERE", _ARCH_AMPERE):
            return True
        if arch == _code(self._nv, "NVML_DEVICE_ARCH_AMPERE", _ARCH_AMPERE):
            return name is not None and any(n in name for n in _GA100_NAMES)
        return False

    def _gpm_probe(self, dev: _Device) -> Probe | None:
        nv = self._nv
        try:
            support = nv.nvmlGpmQueryDeviceSupport(dev.handle)
            if not int(support.isSupportedDevice):
                return None
            samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
        except Exception:
            return None
        self._gpm_samples.extend(samples)
        return Probe("gpm", _GpmProbe(nv, dev.handle, samples).read)

    def _process_probes(self, h: Any) -> list[Probe]:
        nv = self._nv
        watched = self._watched

        def listed(fn: Any, row: dict[str, Any]) -> None:
            pids = watched.pids()
            if pids is None:
                return
            seen = any(p.pid in pids for p in fn(h))
            row["has_watched_process"] = bool(row["has_watched_process"]) or seen

        def compute(row: dict[str, Any]) -> None:
            listed(nv.nvmlDeviceGetComputeRunningProcesses, row)

        def graphics(row: dict[str, Any]) -> None:
            listed(nv.nvmlDeviceGetGraphicsRunningProcesses, row)

        return [Probe("compute_processes", compute), Probe("graphics_processes", graphics)]

    def _pcie_probes(self, h: Any) -> list[Probe]:
        nv = self._nv
        tx = _code(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)
        rx = _code(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)

        # NVML reports KB/s; NVML's KB is 1024 bytes
        def pcie_tx(row: dict[str, Any]) -> None:
            row["pcie_tx_bytes_per_s"] = nv.nvmlDeviceGetPcieThroughput(h, tx) * 1024.0

        def pcie_rx(row: dict[str, Any]) -> None:
            row["pcie_rx_bytes_per_s"] = nv.nvmlDeviceGetPcieThroughput(h, rx) * 1024.0

        return [Probe("pcie_tx", pcie_tx), Probe("pcie_rx", pcie_rx)]

    # -- sampling ----------------------------------------------------------------------

    def read(self, out: list[dict[str, Any]], period_ns: int) -> None:
        perf_ns = time.perf_counter_ns
        run = self._runner.run
        index = self._index
        self._index += 1
        for dev in self._devices:
            row = new_row(perf_ns(), dev.index, "nvml", dev.name)
            row.update(dev.static)
            run(dev.index, dev.probes, row)
            if index % dev.pcie_stride == 0 and any(p.enabled for p in dev.pcie):
                t0 = perf_ns()
                run(dev.index, dev.pcie, row)
                cost = perf_ns() - t0
                # the first reading pays for cold caches; later ones are averaged
                if index > 0:
                    dev.pcie_cost_ns = (
                        cost if dev.pcie_cost_ns is None else 0.75 * dev.pcie_cost_ns + 0.25 * cost
                    )
                    dev.pcie_stride = max(
                        1, math.ceil(dev.pcie_cost_ns / (_PCIE_WALL_SHARE * period_ns))
                    )
            out.append(row)

    def close(self) -> None:
        for sample in self._gpm_samples:
            with contextlib.suppress(Exception):
                self._nv.nvmlGpmSampleFree(sample)
        self._gpm_samples = []
        self._shutdown()

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()

    def info(self) -> dict[str, Any]:
        return {
            **self._runner.info(),
            "power_usage": dict(self._power_usage),
            "pcie_stride": {str(d.index): d.pcie_stride for d in self._devices},
        }


def _none(*_: Any) -> None:
    return None


def _throttle(row: dict[str, Any], mask: int) -> None:
    row["throttle_reasons"] = mask
    row["throttle_names"] = names_from_mask(mask, NVML_THROTTLE_BITS)


class _FieldProbe:
    """Instant power, averaged power and memory temperature in one nvmlDeviceGetFieldValues
    call. Fields the device answers NOT_SUPPORTED for are dropped from later calls; when
    neither power field is supported, nvmlDeviceGetPowerUsage (``usage``) is switched on
    (also when the whole call is unsupported: the probe's fallback)."""

    def __init__(self, nv: Any, handle: Any, usage: Probe) -> None:
        self._nv = nv
        self._h = handle
        self._usage = usage
        self._fields: dict[int, str] = {
            _code(nv, "NVML_FI_DEV_POWER_INSTANT", _FI_POWER_INSTANT): "power_w",
            _code(nv, "NVML_FI_DEV_POWER_AVERAGE", _FI_POWER_AVERAGE): "power_avg_w",
            _code(nv, "NVML_FI_DEV_MEMORY_TEMP", _FI_MEMORY_TEMP): "temp_mem_c",
        }
        self._checked = False
        self._ok = _code(nv, "NVML_SUCCESS", 0)
        self._unsupported = {
            _code(nv, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
            _code(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
            _code(nv, "NVML_ERROR_INVALID_ARGUMENT", 2),  # a field id the driver does not know
        }

    def read(self, row: dict[str, Any]) -> None:
        values = self._nv.nvmlDeviceGetFieldValues(self._h, list(self._fields))
        got: dict[str, float] = {}
        for fv in values:
            column = self._fields.get(int(fv.fieldId))
            if column is None:
                continue
            ret = int(fv.nvmlReturn)
            if ret == self._ok:
                value = _field_value(fv, self._nv)
                if value is not None:
                    got[column] = value
            elif ret in self._unsupported:
                del self._fields[int(fv.fieldId)]
        if not self._checked:
            self._checked = True
            if not set(self._fields.values()) & {"power_w", "power_avg_w"}:
                self._usage.enabled = True
        for column, value in got.items():
            # power fields are in mW, the memory temperature in degrees C
            row[column] = value / 1000.0 if column.startswith("power") else value
        if not self._fields:
            raise _AllFieldsUnsupported("no field of the request is supported")


class _AllFieldsUnsupported(Exception):
    """No field of the request is supported: the probe is switched off."""


class _GpmProbe:
    """GPM metrics between consecutive samples (Hopper and later): each read takes a new
    GPM sample and computes the metrics between it and the previous one; the first read
    has nothing to compare with and leaves the columns null."""

    def __init__(self, nv: Any, handle: Any, samples: list[Any]) -> None:
        self._nv = nv
        self._h = handle
        self._prev, self._cur = samples
        self._have_prev = False
        self._metrics = [(_code(nv, attr, default), col) for attr, default, col in _GPM_METRICS]

    def read(self, row: dict[str, Any]) -> None:
        nv = self._nv
        nv.nvmlGpmSampleGet(self._h, self._cur)
        if self._have_prev:
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = _code(nv, "NVML_GPM_METRICS_GET_VERSION", 1)
            mg.numMetrics = len(self._metrics)
            mg.sample1 = self._prev
            mg.sample2 = self._cur
            for i, (metric_id, _) in enumerate(self._metrics):
                mg.metrics[i].metricId = metric_id
            nv.nvmlGpmMetricsGet(mg)
            ok = _code(nv, "NVML_SUCCESS", 0)
            for i, (_, col) in enumerate(self._metrics):
                m = mg.metrics[i]
                if int(m.nvmlReturn) == ok:
                    row[col] = float(m.value)
        self._prev, self._cur = self._cur, self._prev
        self._have_prev = True


def open_nvml(nvml: Any | None = None) -> Opener:
    """An opener for :class:`NvmlSource` over ``nvml`` (the ``pynvml`` module when None)."""

    def opener(watched: WatchedPids) -> Source:
        return NvmlSource(nvml if nvml is not None else load_pynvml(), watched)

    return opener


class NvmlCollector(GpuSamplerBase):
    """Every NVIDIA GPU NVML lists, sampled at ``hz``: see docs/metrics.md for each column.

    ``nvml`` replaces the ``pynvml`` module (a test double such as
    :class:`aaco.testing.fake_gpu.FakePynvml`). Example::

        with NvmlCollector(pid=os.getpid(), hz=10) as c:
            run_inference()
        table = c.table()
    """

    name: ClassVar[str] = "nvml"
    requires: ClassVar[tuple[str, ...]] = ("pynvml",)

    def __init__(self, pid: int | None = None, hz: float = 10.0, *, nvml: Any = None) -> None:
        super().__init__(pid, hz)
        self._nvml = nvml

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, _why = super().available()
        return (ok, "") if ok else (False, "nvidia-ml-py not installed")

    def openers(self) -> list[tuple[str, Opener]]:
        return [("nvml", open_nvml(self._nvml))]
