"""AMD GPUs through the amdsmi Python library, or failing that the ``amd-smi`` or ``rocm-smi``
command: one row per device per sample of :data:`~aaco.session.schema.GPU_TELEMETRY`.

The library is read call by call like NVML (:mod:`aaco.collectors.gpu.nvml`). The commands
print JSON whose shape and keys changed across ROCm releases; :func:`parse_amd_smi_metric`
and :func:`parse_rocm_smi` read every variant recorded in tests/collectors/fixtures/smi/.
A command costs a Python interpreter start per run (a large share of a core for a second),
so it is run no more often than ``cli_max_duty`` of the time: the sampling rate adapts to
the command's measured run time and :meth:`~AmdSmiCollector.info` gives the rate achieved.

Install the library with ``pip install aaco[amd]`` (it needs ROCm's ``libamd_smi.so``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import math
import os
import re
import selectors
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aaco.collectors.gpu.common import (
    THROTTLE_VOCABULARY,
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

__all__ = [
    "AMD_INDEP_THROTTLE_BITS",
    "AmdSmiCliSource",
    "AmdSmiCollector",
    "AmdSmiSource",
    "CliRun",
    "CliSource",
    "RocmSmiCliSource",
    "load_amdsmi",
    "open_amd_smi_cli",
    "open_amdsmi",
    "open_rocm_smi_cli",
    "parse_amd_smi_metric",
    "parse_rocm_smi",
    "run_command",
]

# amdgpu's ASIC-independent throttler bits (SMU_THROTTLER_*_BIT of the kernel's
# amdgpu_smu.h, reported as gpu_metrics indep_throttle_status) -> vocabulary.
AMD_INDEP_THROTTLE_BITS: tuple[tuple[int, str | None], ...] = (
    *((1 << b, "power_cap") for b in range(0, 8)),  # PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    *((1 << b, "sw_power") for b in range(16, 24)),  # TDC GFX/SOC/MEM/VDD/CVIP, EDC, APCC
    *((1 << b, "sw_thermal") for b in range(32, 44)),  # TEMP_GPU ... TEMP_LIQUID1
    (1 << 44, "hw_thermal"),  # VRHOT0
    (1 << 45, "hw_thermal"),  # VRHOT1
    (1 << 46, "prochot"),  # PROCHOT_CPU
    (1 << 47, "prochot"),  # PROCHOT_GFX
)

# amdsmi_status_t values (amdsmi_wrapper.AMDSMI_STATUS_*)
_NOT_SUPPORTED = (2, 3)  # NOT_SUPPORTED, NOT_YET_IMPLEMENTED
_NO_PERM = 10
# amdsmi reports VRAM in MB and XGMI data in KB; amd-smi's MB and KB are binary (it divides
# bytes by 1024 * 1024), and so are the kernel's KB
_MIB = 1 << 20
_KIB = 1 << 10
_U64 = 1 << 64
_CLI_TIMEOUT_S = 10.0
_RUN_COST_EMA = 0.3


def load_amdsmi() -> Any:
    """The ``amdsmi`` module, or :class:`SourceUnavailable` saying why it cannot be had.

    Importing amdsmi loads ROCm's ``libamd_smi.so`` at import time, so a machine without
    ROCm raises OSError or KeyError (a missing ``ROCM_PATH``), not ImportError: any
    exception is caught and reported.
    """
    try:
        return importlib.import_module("amdsmi")
    except ModuleNotFoundError as exc:
        if exc.name == "amdsmi":
            raise SourceUnavailable("amdsmi not installed") from exc
        raise SourceUnavailable(f"amdsmi not importable ({exc!r})") from exc
    except Exception as exc:
        raise SourceUnavailable(f"amdsmi not importable ({exc!r})") from exc


# -- values as the tools print them ------------------------------------------------------

_NA = frozenset({"n/a", "na", "", "none", "not supported", "unknown", "unsupported"})
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SCALE = {
    "%": 1.0,
    "c": 1.0,
    "°c": 1.0,
    "degc": 1.0,
    "mhz": 1.0,
    "ghz": 1000.0,
    "khz": 1e-3,
    "w": 1.0,
    "mw": 1e-3,
    "uw": 1e-6,
    "µw": 1e-6,
    "j": 1.0,
    "kj": 1e3,
    "mj": 1e-3,
    "uj": 1e-6,
    "µj": 1e-6,
    "b": 1.0,
    "kb": float(_KIB),
    "kib": float(_KIB),
    "mb": float(_MIB),
    "mib": float(_MIB),
    "gb": float(1 << 30),
    "gib": float(1 << 30),
    "b/s": 1.0,
    "kb/s": float(_KIB),
    "mb/s": float(_MIB),
    "gb/s": float(1 << 30),
}


def _quantity(raw: Any) -> tuple[float | None, str]:
    """A number and its unit from ``75``, ``"75"``, ``"75 W"``, ``"(1502Mhz)"`` or
    ``{"value": 75, "unit": "W"}``; ``"N/A"`` and the like are None."""
    unit = ""
    if isinstance(raw, dict):
        unit = str(raw.get("unit") or "")
        raw = raw.get("value")
    if raw is None or isinstance(raw, bool):
        return None, unit
    if isinstance(raw, (int, float)):
        return (float(raw) if math.isfinite(raw) else None), unit
    if not isinstance(raw, str):
        return None, unit
    text = raw.strip()
    if text.lower() in _NA:
        return None, unit
    m = _NUMBER.search(text)
    if m is None:
        return None, unit
    rest = (text[: m.start()] + text[m.end() :]).strip(" ()")
    return float(m.group()), unit or rest


def _value(raw: Any, default_unit: str) -> float | None:
    """``raw`` in the unit ``default_unit`` names (its scale 1), converting a stated unit;
    None for N/A and for a unit not known here (a guess would be a made-up number)."""
    x, unit = _quantity(raw)
    if x is None:
        return None
    key = (unit or default_unit).strip().lower().replace(" ", "")
    scale = _SCALE.get(key)
    return None if scale is None else x * scale


def _int(x: float | None) -> int | None:
    return None if x is None else round(x)


def _sub(d: dict[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d:
            return d[k]
    return None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _throttle_text(raw: Any) -> list[str] | None:
    """amd-smi's ``THROTTLED`` / ``UNTHROTTLED``: whether, not why."""
    if not isinstance(raw, str):
        return None
    text = raw.strip().upper()
    if text == "THROTTLED":
        return ["other"]
    if text == "UNTHROTTLED":
        return []
    return None


# -- amd-smi metric --json ---------------------------------------------------------------


def _gpu_list(doc: Any) -> list[Any]:
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        return list(doc["gpu_data"])
    if isinstance(doc, list):
        return doc
    raise ValueError("not amd-smi JSON: neither a list of GPUs nor a dict with gpu_data")


def parse_amd_smi_metric(doc: Any) -> list[dict[str, Any]]:
    """Rows (``device`` and the measured columns) from ``amd-smi metric --json``.

    Both shapes seen in the wild: a bare list of per-GPU dicts (bare numbers, ROCm 6.0 /
    6.1) and ``{"gpu_data": [...]}`` whose leaves are ``{"value": ..., "unit": ...}``
    (ROCm 6.2 and later). On MI300 the graphics clock is listed per XCD (``gfx_0`` ...
    ``gfx_7``): ``sm_clock_mhz`` is their mean and ``sm_clock_max_mhz`` their maximum.
    MB and KB are amd-smi's binary units; energy is in J.
    """
    rows: list[dict[str, Any]] = []
    for g in _gpu_list(doc):
        if not isinstance(g, dict) or "gpu" not in g:
            continue
        usage, power, clock = _sub(g, "usage"), _sub(g, "power"), _sub(g, "clock")
        temp, pcie, energy, mem = (
            _sub(g, "temperature"),
            _sub(g, "pcie"),
            _sub(g, "energy"),
            _sub(g, "mem_usage"),
        )
        gfx = [
            v for k, v in clock.items() if re.fullmatch(r"gfx(_\d+)?", k) and isinstance(v, dict)
        ]
        mems = [
            v for k, v in clock.items() if re.fullmatch(r"mem(_\d+)?", k) and isinstance(v, dict)
        ]
        gfx_cur = [x for c in gfx if (x := _value(_first(c, "clk", "cur_clk"), "MHz")) is not None]
        gfx_max = [x for c in gfx if (x := _value(c.get("max_clk"), "MHz")) is not None]
        mem0 = mems[0] if mems else {}
        row: dict[str, Any] = {
            "device": int(g["gpu"]),
            "util_gpu_pct": _value(usage.get("gfx_activity"), "%"),
            "util_mem_pct": _value(usage.get("umc_activity"), "%"),
            "sm_clock_mhz": _mean(gfx_cur),
            "sm_clock_max_mhz": max(gfx_max) if gfx_max else None,
            "mem_clock_mhz": _value(_first(mem0, "clk", "cur_clk"), "MHz"),
            "mem_clock_max_mhz": _value(mem0.get("max_clk"), "MHz"),
            "power_w": _value(
                _first_valid(power, "socket_power", "current_socket_power", "current_power"), "W"
            ),
            "power_avg_w": _value(
                _first_valid(power, "average_socket_power", "average_power"), "W"
            ),
            "power_limit_w": _value(power.get("power_limit"), "W"),
            "temp_c": _value(temp.get("edge"), "C"),
            "temp_hotspot_c": _value(temp.get("hotspot"), "C"),
            "temp_mem_c": _value(temp.get("mem"), "C"),
            "energy_j": _value(energy.get("total_energy_consumption"), "J"),
            "mem_used_bytes": _int(_value(mem.get("used_vram"), "MB")),
            "mem_total_bytes": _int(_value(mem.get("total_vram"), "MB")),
            "pcie_tx_bytes_per_s": _value(pcie.get("current_bandwidth_sent"), "B/s"),
            "pcie_rx_bytes_per_s": _value(pcie.get("current_bandwidth_received"), "B/s"),
            "throttle_names": _throttle_text(power.get("throttle_status")),
        }
        rows.append(row)
    return rows


def _first_valid(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if _quantity(d.get(k))[0] is not None:
            return d[k]
    return None


def parse_amd_smi_names(doc: Any) -> dict[int, str]:
    """Device index -> market name from ``amd-smi static --asic --json``."""
    names: dict[int, str] = {}
    for g in _gpu_list(doc):
        if isinstance(g, dict) and "gpu" in g:
            name = _sub(g, "asic").get("market_name")
            if isinstance(name, str) and name.strip() and name.strip().lower() not in _NA:
                names[int(g["gpu"])] = name.strip()
    return names


# -- rocm-smi --json ---------------------------------------------------------------------

# Each column's keys, in the order tried: rocm-smi renamed several across ROCm releases.
_ROCM_KEYS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("util_gpu_pct", ("GPU use (%)",), "%"),
    # "GPU memory use (%)" (ROCm <= 6.0) is the memory controller's busy share, renamed
    # "GPU Memory Read/Write Activity (%)" in 6.1; "GPU Memory Allocated (VRAM%)" is not
    # activity but the share of VRAM allocated, and is not used
    ("util_mem_pct", ("GPU Memory Read/Write Activity (%)", "GPU memory use (%)"), "%"),
    ("sm_clock_mhz", ("sclk clock speed:",), "MHz"),
    ("mem_clock_mhz", ("mclk clock speed:",), "MHz"),
    (
        "power_w",
        ("Current Socket Graphics Package Power (W)", "Current Socket Power (W)"),
        "W",
    ),
    ("power_avg_w", ("Average Graphics Package Power (W)", "Average Socket Power (W)"), "W"),
    ("power_limit_w", ("Max Graphics Package Power (W)",), "W"),
    ("temp_c", ("Temperature (Sensor edge) (C)",), "C"),
    ("temp_hotspot_c", ("Temperature (Sensor junction) (C)",), "C"),
    ("temp_mem_c", ("Temperature (Sensor memory) (C)", "Temperature (Sensor HBM 0) (C)"), "C"),
    ("energy_j", ("Accumulated Energy (uJ)",), "uJ"),
)
_ROCM_NAME_KEYS = ("Device Name", "Card Series", "Card series", "Card SKU")


def parse_rocm_smi(doc: Any, pids: frozenset[int] | None = None) -> list[dict[str, Any]]:
    """Rows (``device`` and the measured columns) from ``rocm-smi ... --json``.

    Devices are the ``cardN`` entries. Key variants of ROCm 5.7 to 6.1 are read (see
    ``_ROCM_KEYS``); rocm-smi gives no maximum clocks (its numbered clock levels collide
    across clock domains in JSON), no PCIe throughput and no throttle state: those are
    null. ``has_watched_process``, from the ``PIDnnn`` entries of ``system`` (``--showpids``):
    False on every device when none of ``pids`` is listed; True when one is and there is
    a single device; otherwise null, since rocm-smi does not say which device a process
    uses.
    """
    if not isinstance(doc, dict):
        raise ValueError("not rocm-smi JSON: not an object")
    cards: list[tuple[int, dict[str, Any]]] = []
    for key, val in doc.items():
        m = re.fullmatch(r"card(\d+)", key)
        if m and isinstance(val, dict):
            cards.append((int(m.group(1)), val))
    cards.sort()
    system = _sub(doc, "system")
    listed = {int(k[3:]) for k in system if k.startswith("PID") and k[3:].isdigit()}
    watched: bool | None = None
    if pids is not None:
        if not listed & pids:
            watched = False
        elif len(cards) == 1:
            watched = True
    rows: list[dict[str, Any]] = []
    for index, card in cards:
        row: dict[str, Any] = {"device": index, "has_watched_process": watched}
        name = _first(card, *_ROCM_NAME_KEYS)
        row["name"] = name.strip() if isinstance(name, str) and name.strip() else None
        for column, keys, unit in _ROCM_KEYS:
            row[column] = _value(_first(card, *keys), unit)
        row["mem_used_bytes"] = _int(_value(card.get("VRAM Total Used Memory (B)"), "B"))
        row["mem_total_bytes"] = _int(_value(card.get("VRAM Total Memory (B)"), "B"))
        rows.append(row)
    return rows


# -- running a command -------------------------------------------------------------------


@dataclass(frozen=True)
class CliRun:
    """One run of a command: its output, exit status, wall time and own CPU time (user +
    system, None where the platform cannot tell)."""

    stdout: bytes
    returncode: int
    wall_s: float
    cpu_s: float | None


#: runs argv with a timeout in seconds
CliRunner = Callable[[Sequence[str], float], CliRun]


def run_command(argv: Sequence[str], timeout_s: float = _CLI_TIMEOUT_S) -> CliRun:
    """Run ``argv``, capture stdout, and reap the child with ``wait4`` for its CPU time.

    The tool's CPU time is the larger part of what a command-line source costs, and
    ``wait4`` is the one place it can be read without mixing in other children (the
    worker is a child of the same process).
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    chunks: list[bytes] = []
    timed_out = False
    try:
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = t0 + timeout_s - time.perf_counter()
                if left <= 0:
                    timed_out = True
                    proc.kill()
                    break
                if not sel.select(left):
                    continue
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                chunks.append(data)
    finally:
        proc.stdout.close()
        cpu = _reap(proc)
    if timed_out:
        raise TimeoutError(f"{argv[0]} did not finish within {timeout_s:g} s")
    assert proc.returncode is not None
    return CliRun(b"".join(chunks), proc.returncode, time.perf_counter() - t0, cpu)


def _reap(proc: subprocess.Popen[bytes]) -> float | None:
    wait4 = getattr(os, "wait4", None)
    if wait4 is None:
        proc.wait()
        return None
    try:
        _, status, usage = wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere
        proc.wait()
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return float(usage.ru_utime + usage.ru_stime)


# -- the command-line sources ------------------------------------------------------------

_AMD_SMI_ARGV = ("metric", "--json")
_AMD_SMI_NAMES_ARGV = ("static", "--asic", "--json")
_ROCM_SMI_ARGVS = (
    (
        "--showid",
        "--showproductname",
        "--showtemp",
        "--showuse",
        "--showmemuse",
        "--showpower",
        "--showmaxpower",
        "--showclocks",
        "--showmeminfo",
        "vram",
        "--showenergycounter",
        "--showpids",
        "--json",
    ),
    ("-a", "--json"),  # an older rocm-smi that lacks one of the flags above
)


class CliSource(Source):
    """A command printing JSON (``amd-smi metric --json``, ``rocm-smi ... --json``), run
    once per sample; the subclass names the tool.

    A run's rows are stamped when its output is complete. The period between runs is at
    least the command's mean run time divided by ``max_duty``, so that the command runs
    at most that share of the time. ``info()`` reports the runs, their mean wall time and
    the commands' own CPU time (``cli_cpu_s``, which the sampler thread's ``cpu_share``
    does not include).
    """

    def __init__(
        self,
        argvs: Sequence[Sequence[str]],
        parse: Callable[[Any, frozenset[int] | None], list[dict[str, Any]]],
        watched: WatchedPids,
        *,
        runner: CliRunner = run_command,
        which: Callable[[str], str | None] = shutil.which,
        max_duty: float = 0.1,
        names_argv: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        tool = self.name
        path = which(tool)
        if path is None:
            raise SourceUnavailable(f"{tool} not on PATH")
        self._path = path
        self._parse = parse
        self._watched = watched
        self._runner = runner
        self._max_duty = max_duty
        self._runs = 0
        self._run_s_total = 0.0
        self._run_s_ema: float | None = None
        self._cpu_s = 0.0
        self._cpu_known = True
        self._failures = 0
        self._last_failure: str | None = None
        self._t0 = time.perf_counter()
        self._names: dict[int, str] = {}
        why = "no output"
        rows: list[dict[str, Any]] | None = None
        for argv in argvs:
            try:
                rows = self._run([path, *argv])
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                continue
            if rows:
                self._argv = [tool, *argv]
                self._pending_ts = time.perf_counter_ns()
                break
            why = "no GPU in its output"
        if not rows:
            raise SourceUnavailable(f"{tool} gave no GPU readings ({why})")
        if names_argv is not None:
            try:
                run = self._runner([path, *names_argv], _CLI_TIMEOUT_S)
                if run.cpu_s is not None:
                    self._cpu_s += run.cpu_s
                self._names = parse_amd_smi_names(json.loads(run.stdout))
            except Exception:
                self._names = {}  # names are a nicety; the metrics already work
        self._pending: list[dict[str, Any]] | None = rows
        self.device_names = [self._name(r) for r in rows]

    def _name(self, row: dict[str, Any]) -> str | None:
        name = row.get("name")
        return name if isinstance(name, str) else self._names.get(int(row["device"]))

    def _run(self, argv: Sequence[str]) -> list[dict[str, Any]]:
        run = self._runner(argv, _CLI_TIMEOUT_S)
        self._runs += 1
        self._run_s_total += run.wall_s
        self._run_s_ema = (
            run.wall_s
            if self._run_s_ema is None
            else self._run_s_ema + _RUN_COST_EMA * (run.wall_s - self._run_s_ema)
        )
        self.min_period_ns = int(self._run_s_ema / self._max_duty * 1e9)
        if run.cpu_s is None:
            self._cpu_known = False
        else:
            self._cpu_s += run.cpu_s
        if run.returncode != 0 and not run.stdout.strip():
            raise RuntimeError(f"exit status {run.returncode} and no output")
        return self._parse(json.loads(run.stdout), self._watched.pids())

    def read(self, out: list[dict[str, Any]], period_ns: int) -> None:
        if self._pending is not None:
            parsed, ts = self._pending, self._pending_ts
            self._pending = None
        else:
            try:
                parsed = self._run([self._path, *self._argv[1:]])
            except Exception as exc:
                self._failures += 1
                self._last_failure = f"{type(exc).__name__}: {exc}"
                raise
            ts = time.perf_counter_ns()
        for p in parsed:
            row = new_row(ts, int(p["device"]), self.name, self._name(p))
            for key, value in p.items():
                if key not in ("device", "name"):
                    row[key] = value
            out.append(row)

    def info(self) -> dict[str, Any]:
        wall = time.perf_counter() - self._t0
        return {
            "command": list(self._argv),
            "cli_runs": self._runs,
            "cli_run_s_mean": self._run_s_total / self._runs if self._runs else None,
            "cli_max_duty": self._max_duty,
            "cli_cpu_s": self._cpu_s if self._cpu_known else None,
            "cli_cpu_share": self._cpu_s / wall if self._cpu_known and wall > 0 else None,
            "cli_failures": self._failures,
            "cli_last_failure": self._last_failure,
        }


class AmdSmiCliSource(CliSource):
    """``amd-smi metric --json``."""

    name: ClassVar[str] = "amd-smi"


class RocmSmiCliSource(CliSource):
    """``rocm-smi ... --json``."""

    name: ClassVar[str] = "rocm-smi"


def _ignore_pids(
    parse: Callable[[Any], list[dict[str, Any]]],
) -> Callable[[Any, frozenset[int] | None], list[dict[str, Any]]]:
    def wrapped(doc: Any, pids: frozenset[int] | None) -> list[dict[str, Any]]:
        return parse(doc)

    return wrapped


def open_amd_smi_cli(
    runner: CliRunner = run_command,
    which: Callable[[str], str | None] = shutil.which,
    max_duty: float = 0.1,
) -> Opener:
    """An opener for ``amd-smi metric --json`` (no process list: ``has_watched_process``
    stays null)."""

    def opener(watched: WatchedPids) -> Source:
        return AmdSmiCliSource(
            [_AMD_SMI_ARGV],
            _ignore_pids(parse_amd_smi_metric),
            watched,
            runner=runner,
            which=which,
            max_duty=max_duty,
            names_argv=_AMD_SMI_NAMES_ARGV,
        )

    return opener


def open_rocm_smi_cli(
    runner: CliRunner = run_command,
    which: Callable[[str], str | None] = shutil.which,
    max_duty: float = 0.1,
) -> Opener:
    """An opener for ``rocm-smi ... --json``."""

    def opener(watched: WatchedPids) -> Source:
        return RocmSmiCliSource(
            _ROCM_SMI_ARGVS,
            parse_rocm_smi,
            watched,
            runner=runner,
            which=which,
            max_duty=max_duty,
        )

    return opener


# -- the amdsmi library ------------------------------------------------------------------


def _num(raw: Any) -> float | None:
    """A library value: a number, or None for ``"N/A"`` (amdsmi's marker for an all-ones
    field) and anything else that is not a number (bools included)."""
    kind = type(raw)  # called dozens of times per device per sample: no isinstance chain
    if kind is int:
        return float(raw)
    if kind is float:
        return raw if math.isfinite(raw) else None
    return None


class _Violation:
    """PPT (power) and socket-thermal violation time, from amdsmi's residency accumulators.

    The firmware counts, per tick of ``acc_counter``, whether the limit was active
    (``acc_ppt_pwr``, ``acc_socket_thrm``); the share of ticks between two readings is the
    share of that interval the clocks were held down. Each interval's share times its
    monotonic duration is added up, so the columns are cumulative nanoseconds since the
    first sample (which reads 0), differenced like NVML's counters.
    """

    def __init__(self) -> None:
        self.prev: tuple[int, float, float | None, float | None] | None = None
        self.power_ns = 0.0
        self.thermal_ns = 0.0

    def update(
        self, ts: int, counter: float | None, ppt: float | None, thrm: float | None
    ) -> tuple[int | None, int | None]:
        if counter is None:
            return None, None
        prev = self.prev
        self.prev = (ts, counter, ppt, thrm)
        if prev is not None:
            t0, c0, p0, h0 = prev
            ticks = counter - c0
            if ticks > 0 and ts > t0:
                if ppt is not None and p0 is not None and ppt >= p0:
                    self.power_ns += (ppt - p0) / ticks * (ts - t0)
                if thrm is not None and h0 is not None and thrm >= h0:
                    self.thermal_ns += (thrm - h0) / ticks * (ts - t0)
        return (
            None if ppt is None else round(self.power_ns),
            None if thrm is None else round(self.thermal_ns),
        )


class AmdSmiSource(Source):
    """The amdsmi library, initialised once (``amdsmi_init``), handles got once, one row per
    GPU per :meth:`read`, ``amdsmi_shut_down`` at :meth:`close`. Calls answering
    NOT_SUPPORTED are switched off; ``"N/A"`` values are null."""

    name: ClassVar[str] = "amdsmi"

    def __init__(self, amdsmi: Any, watched: WatchedPids) -> None:
        super().__init__()
        self._am = amdsmi
        self._watched = watched
        self._runner = ProbeRunner(self._classify)
        try:
            amdsmi.amdsmi_init()
        except Exception as exc:
            raise SourceUnavailable(f"amdsmi init failed ({exc})") from exc
        try:
            handles = list(amdsmi.amdsmi_get_processor_handles())
            if not handles:
                raise SourceUnavailable("amdsmi found no GPUs")
            self._devices = [self._open_device(i, h) for i, h in enumerate(handles)]
        except BaseException as exc:
            self._shutdown()
            if isinstance(exc, SourceUnavailable) or not isinstance(exc, Exception):
                raise
            raise SourceUnavailable(f"amdsmi device listing failed ({exc})") from exc
        self.device_names = [d[1] for d in self._devices]

    def _classify(self, exc: BaseException) -> str | None:
        if isinstance(exc, AttributeError):
            return "not in this amdsmi"
        code = getattr(exc, "err_code", None)
        if isinstance(code, int):
            code = abs(code)
            if code in _NOT_SUPPORTED:
                return "not supported"
            if code == _NO_PERM:
                return "no permission"
        return None

    def _name(self, h: Any) -> str | None:
        am = self._am
        for call, key in (
            ("amdsmi_get_gpu_asic_info", "market_name"),
            ("amdsmi_get_gpu_board_info", "product_name"),
        ):
            try:
                name = getattr(am, call)(h).get(key)
            except Exception:
                continue
            if isinstance(name, str) and name.strip() and name.strip().lower() not in _NA:
                return name.strip()
        return None

    def _open_device(self, index: int, h: Any) -> tuple[int, str | None, list[Probe]]:
        am = self._am
        violation = _Violation()

        def energy(row: dict[str, Any]) -> None:
            e = am.amdsmi_get_energy_count(h)
            # the accumulator was called "power" before amdsmi 6.4
            acc = _num(e.get("energy_accumulator", e.get("power")))
            res = _num(e.get("counter_resolution"))  # µJ per count
            if acc is not None and res is not None and res > 0:
                row["energy_j"] = acc * res / 1e6
                row["energy_wrap_j"] = _U64 * res / 1e6  # a 64-bit accumulator

        def activity(row: dict[str, Any]) -> None:
            a = am.amdsmi_get_gpu_activity(h)
            row["util_gpu_pct"] = _num(a.get("gfx_activity"))
            row["util_mem_pct"] = _num(a.get("umc_activity"))

        def clock(kind: str, cur: str, top: str) -> Callable[[dict[str, Any]], None]:
            clk_type = getattr(am.AmdSmiClkType, kind)

            def fn(row: dict[str, Any]) -> None:
                c = am.amdsmi_get_clock_info(h, clk_type)
                row[cur] = _num(c.get("clk", c.get("cur_clk")))
                row[top] = _num(c.get("max_clk"))

            return fn

        def power(row: dict[str, Any]) -> None:
            p = am.amdsmi_get_power_info(h)
            now = _num(p.get("current_socket_power"))
            row["power_w"] = now if now is not None else _num(p.get("socket_power"))
            row["power_avg_w"] = _num(p.get("average_socket_power"))
            row["power_limit_w"] = _num(p.get("power_limit"))

        def temp(sensor: str, column: str) -> Callable[[dict[str, Any]], None]:
            kinds = am.AmdSmiTemperatureType
            kind = getattr(kinds, sensor, None)
            if kind is None and sensor == "HOTSPOT":
                kind = kinds.JUNCTION
            current = am.AmdSmiTemperatureMetric.CURRENT

            def fn(row: dict[str, Any]) -> None:
                row[column] = _num(am.amdsmi_get_temp_metric(h, kind, current))

            return fn

        def vram(row: dict[str, Any]) -> None:
            v = am.amdsmi_get_gpu_vram_usage(h)  # MB
            used, total = _num(v.get("vram_used")), _num(v.get("vram_total"))
            row["mem_used_bytes"] = None if used is None else int(used) * _MIB
            row["mem_total_bytes"] = None if total is None else int(total) * _MIB

        has_status = hasattr(am, "amdsmi_get_violation_status")

        def metrics(row: dict[str, Any]) -> None:
            m = am.amdsmi_get_gpu_metrics_info(h)
            for key, column in (
                ("xgmi_read_data_acc", "xgmi_read_bytes"),
                ("xgmi_write_data_acc", "xgmi_write_bytes"),
            ):
                links = m.get(key)
                if isinstance(links, list):
                    kb = [x for x in map(_num, links) if x is not None]
                    row[column] = int(sum(kb)) * _KIB if kb else None
            clks = m.get("current_gfxclks")
            if isinstance(clks, list):
                valid = [x for x in map(_num, clks) if x is not None and x > 0]
                if len(valid) > 1:  # one clock per XCD (MI300): their mean
                    row["sm_clock_mhz"] = sum(valid) / len(valid)
            indep = m.get("indep_throttle_status")
            legacy = m.get("throttle_status")
            if isinstance(indep, int) and not isinstance(indep, bool):
                row["throttle_reasons"] = indep
                row["throttle_names"] = names_from_mask(indep, AMD_INDEP_THROTTLE_BITS)
            elif isinstance(legacy, int) and not isinstance(legacy, bool):
                # ASIC-specific bits: whether, not why
                row["throttle_reasons"] = legacy
                row["throttle_names"] = ["other"] if legacy else []
            elif isinstance(legacy, bool):  # amdsmi 7 reduces it to a flag
                row["throttle_names"] = ["other"] if legacy else []
            if not status_probe.enabled:  # no violation status here: the residencies
                p, t = violation.update(
                    row["ts_ns"],
                    _num(m.get("accumulation_counter")),
                    _num(m.get("ppt_residency_acc")),
                    _num(m.get("socket_thm_residency_acc")),
                )
                row["violation_power_ns"], row["violation_thermal_ns"] = p, t

        def status(row: dict[str, Any]) -> None:
            v = am.amdsmi_get_violation_status(h)
            p, t = violation.update(
                row["ts_ns"],
                _num(v.get("acc_counter")),
                _num(v.get("acc_ppt_pwr")),
                _num(v.get("acc_socket_thrm")),
            )
            row["violation_power_ns"], row["violation_thermal_ns"] = p, t
            names = set(row["throttle_names"] or [])
            flags = {
                "active_ppt_pwr": "power_cap",
                "active_socket_thrm": "sw_thermal",
                "active_vr_thrm": "sw_thermal",
                "active_hbm_thrm": "sw_thermal",
                "active_prochot_thrm": "prochot",
            }
            known = False
            for key, name in flags.items():
                flag = v.get(key)
                if isinstance(flag, bool):
                    known = True
                    if flag:
                        names.add(name)
            if known:
                # the flags say why; a bare "throttled" flag adds nothing to them
                if names - {"other"}:
                    names.discard("other")
                row["throttle_names"] = [n for n in THROTTLE_VOCABULARY if n in names]

        def processes(row: dict[str, Any]) -> None:
            pids = self._watched.pids()
            if pids is None:
                return
            found = False
            for item in am.amdsmi_get_gpu_process_list(h):
                pid = item.get("pid") if isinstance(item, dict) else None
                if pid is None:  # before amdsmi 6.1 the list held process handles
                    pid = am.amdsmi_get_gpu_process_info(h, item).get("pid")
                if pid in pids:
                    found = True
            row["has_watched_process"] = found

        probes = [
            Probe("energy", energy),
            Probe("power", power),
            Probe("activity", activity),
            Probe("gfx_clock", clock("GFX", "sm_clock_mhz", "sm_clock_max_mhz")),
            Probe("mem_clock", clock("MEM", "mem_clock_mhz", "mem_clock_max_mhz")),
            Probe("temp_edge", temp("EDGE", "temp_c")),
            Probe("temp_hotspot", temp("HOTSPOT", "temp_hotspot_c")),
            Probe("temp_vram", temp("VRAM", "temp_mem_c")),
            Probe("vram", vram),
            Probe("gpu_metrics", metrics),
        ]
        status_probe = Probe("violation_status", status, enabled=has_status)
        probes.append(status_probe)
        probes.append(Probe("processes", processes))
        return index, self._name(h), probes

    def read(self, out: list[dict[str, Any]], period_ns: int) -> None:
        perf_ns = time.perf_counter_ns
        run = self._runner.run
        for index, name, probes in self._devices:
            row = new_row(perf_ns(), index, "amdsmi", name)
            run(index, probes, row)
            out.append(row)

    def close(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self._am.amdsmi_shut_down()

    def info(self) -> dict[str, Any]:
        return self._runner.info()


def open_amdsmi(amdsmi: Any | None = None) -> Opener:
    """An opener for :class:`AmdSmiSource` over ``amdsmi`` (the module when None)."""

    def opener(watched: WatchedPids) -> Source:
        return AmdSmiSource(amdsmi if amdsmi is not None else load_amdsmi(), watched)

    return opener


def cli_unavailable(tried: dict[str, str]) -> list[str]:
    """The reasons of ``tried`` with the two commands' "not on PATH" said once."""
    reasons = dict(tried)
    if reasons.get("amd-smi") == "amd-smi not on PATH" and (
        reasons.get("rocm-smi") == "rocm-smi not on PATH"
    ):
        reasons["amd-smi"] = "amd-smi/rocm-smi not on PATH"
        del reasons["rocm-smi"]
    return list(reasons.values())


class AmdSmiCollector(GpuSamplerBase):
    """Every AMD GPU, through the amdsmi library, else ``amd-smi``, else ``rocm-smi``.

    ``amdsmi`` replaces the amdsmi module (a test double such as
    :class:`aaco.testing.fake_gpu.FakeAmdSmi`); ``cli_runner`` and ``which`` replace how a
    command is run and found; ``cli_max_duty`` is the largest share of the time a command
    may run (0.1: a command taking 0.3 s is run every 3 s at most). Example::

        with AmdSmiCollector(pid=worker_pid, hz=10) as c:
            ...
        c.info()["source"]   # "amdsmi", "amd-smi" or "rocm-smi"
    """

    name: ClassVar[str] = "amdsmi"

    def __init__(
        self,
        pid: int | None = None,
        hz: float = 10.0,
        *,
        amdsmi: Any = None,
        cli_runner: CliRunner = run_command,
        which: Callable[[str], str | None] = shutil.which,
        cli_max_duty: float = 0.1,
    ) -> None:
        super().__init__(pid, hz)
        self._amdsmi = amdsmi
        self._cli_runner = cli_runner
        self._which = which
        self._cli_max_duty = cli_max_duty

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            found = importlib.util.find_spec("amdsmi") is not None
        except (ImportError, ValueError):
            found = False
        if found:
            return True, ""
        if shutil.which("amd-smi") or shutil.which("rocm-smi"):
            return True, ""
        return False, "amdsmi not installed and amd-smi/rocm-smi not on PATH"

    def openers(self) -> list[tuple[str, Opener]]:
        return [
            ("amdsmi", open_amdsmi(self._amdsmi)),
            ("amd-smi", open_amd_smi_cli(self._cli_runner, self._which, self._cli_max_duty)),
            ("rocm-smi", open_rocm_smi_cli(self._cli_runner, self._which, self._cli_max_duty)),
        ]

    def unavailable_message(self, tried: dict[str, str]) -> str:
        return "no AMD GPU telemetry source: " + ", ".join(cli_unavailable(tried))
