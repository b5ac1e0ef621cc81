"""What the GPUs did over the measured window: energy, power, clocks, throttling, from the
``gpu_telemetry`` table (:data:`~aaco.session.schema.GPU_TELEMETRY`).

Pure: a table in, a dict out. Cumulative counters (energy, violation time, XGMI bytes) are
differenced between the window's ends, each end's value interpolated linearly between the
two samples that bracket it, never integrated from power snapshots; a counter that goes
down has wrapped, and the wrap width (``energy_wrap_j``) is added back when the source
knows it. docs/metrics.md defines every figure.

Example::

    summary = summarize_gpu(session.table("gpu_telemetry"), window=(t0, t1), inferences=500)
    summary["joules_per_inference"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["summarize_gpu"]

_F = np.ndarray[Any, np.dtype[np.float64]]
_I = np.ndarray[Any, np.dtype[np.int64]]

_MEANS = (
    ("util_gpu_pct_mean", "util_gpu_pct"),
    ("util_mem_pct_mean", "util_mem_pct"),
    ("mem_clock_mhz_mean", "mem_clock_mhz"),
    ("pcie_tx_bytes_per_s_mean", "pcie_tx_bytes_per_s"),
    ("pcie_rx_bytes_per_s_mean", "pcie_rx_bytes_per_s"),
    ("gpm_sm_activity_pct_mean", "gpm_sm_activity_pct"),
    ("gpm_sm_occupancy_pct_mean", "gpm_sm_occupancy_pct"),
    ("gpm_tensor_activity_pct_mean", "gpm_tensor_activity_pct"),
    ("gpm_dram_bw_util_pct_mean", "gpm_dram_bw_util_pct"),
)
_MAXES = (
    ("temp_c_max", "temp_c"),
    ("temp_hotspot_c_max", "temp_hotspot_c"),
    ("temp_mem_c_max", "temp_mem_c"),
)


# the order of each device's keys in the summary (docs/metrics.md lists them the same way)
_DEVICE_KEYS = (
    "device",
    "name",
    "used",
    "samples",
    "util_gpu_pct_mean",
    "util_mem_pct_mean",
    "sm_clock_mhz_mean",
    "sm_clock_mhz_min",
    "sm_clock_mhz_max",
    "sm_clock_max_mhz",
    "sm_clock_ratio",
    "mem_clock_mhz_mean",
    "mem_clock_max_mhz",
    "power_w_mean",
    "power_w_max",
    "power_limit_w",
    "energy_j",
    "avg_power_w",
    "energy_scope",
    "energy_span_s",
    "temp_c_max",
    "temp_hotspot_c_max",
    "temp_mem_c_max",
    "mem_used_bytes_max",
    "pcie_tx_bytes_per_s_mean",
    "pcie_rx_bytes_per_s_mean",
    "xgmi_read_bytes",
    "xgmi_write_bytes",
    "throttle_share",
    "throttled_share",
    "violation_power_s",
    "violation_thermal_s",
    "violation_share",
    "gpm_sm_activity_pct_mean",
    "gpm_sm_occupancy_pct_mean",
    "gpm_tensor_activity_pct_mean",
    "gpm_dram_bw_util_pct_mean",
)


@dataclass(frozen=True)
class _Delta:
    """A counter's increase over [start_ns, end_ns]; ``value`` None with ``reason``."""

    value: float | None
    start_ns: int | None = None
    end_ns: int | None = None
    bracketed: bool = False
    reason: str | None = None


def _floats(t: pa.Table, col: str) -> _F:
    """A column as float64, null as NaN."""
    arr = t.column(col)
    if arr.null_count == len(arr):
        return np.full(len(arr), np.nan)
    return np.asarray(arr.cast(pa.float64()).fill_null(np.nan).to_numpy(), dtype=np.float64)


def _counter_delta(
    ts: _I, values: _F, wraps: _F, lo: int, hi: int, scope_is_window: bool
) -> _Delta:
    """How much a cumulative counter rose over [lo, hi].

    Each end's value is interpolated between the two readings that bracket it; an end no
    reading brackets moves to the first (last) reading inside, and the delta is then over
    that shorter span (``bracketed`` False). A decrease between two readings is a wrap:
    the wrap width is added back, and when it is unknown any span crossing that interval
    has no known delta.
    """
    ok = ~np.isnan(values)
    ts, values, wraps = ts[ok], values[ok], wraps[ok]
    if len(ts) < 2:
        return _Delta(None, reason="fewer than two readings")
    steps = np.diff(values)
    width = np.where(np.isnan(wraps[1:]), wraps[:-1], wraps[1:])
    down = steps < 0
    known = down & ~np.isnan(width)
    steps[known] += width[known]
    broken = down & np.isnan(width)
    cum = np.concatenate(([0.0], np.cumsum(steps)))

    a, b = max(lo, int(ts[0])), min(hi, int(ts[-1]))
    bracketed = lo >= ts[0] and hi <= ts[-1]
    if a >= b:
        where = "inside the window" if scope_is_window else "in the run"
        return _Delta(None, reason=f"fewer than two readings {where}")
    # intervals i (between reading i and i + 1) that overlap (a, b)
    first = max(0, int(np.searchsorted(ts, a, side="right")) - 1)
    last = min(len(ts) - 2, int(np.searchsorted(ts, b, side="left")) - 1)
    if broken[first : last + 1].any():
        i = first + int(np.argmax(broken[first : last + 1]))
        return _Delta(
            None,
            reason=(
                f"counter went down between readings at {int(ts[i])} and {int(ts[i + 1])} ns "
                "and its wrap width is unknown"
            ),
        )

    def at(t: int) -> float:
        i = min(max(0, int(np.searchsorted(ts, t, side="right")) - 1), len(ts) - 2)
        span = int(ts[i + 1] - ts[i])
        frac = (t - int(ts[i])) / span if span > 0 else 1.0
        return float(cum[i] + (cum[i + 1] - cum[i]) * frac)

    return _Delta(at(b) - at(a), a, b, bracketed and scope_is_window)


def _mean(x: _F) -> float | None:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else None


def _max(x: _F) -> float | None:
    x = x[~np.isnan(x)]
    return float(x.max()) if x.size else None


def _min(x: _F) -> float | None:
    x = x[~np.isnan(x)]
    return float(x.min()) if x.size else None


def _int_or_none(x: float | None) -> int | None:
    return None if x is None else round(x)


def _device(t: pa.Table, lo: int, hi: int, scope_is_window: bool) -> dict[str, Any]:
    """One device's figures; ``t`` holds its rows sorted by time."""
    device = int(t.column("device")[0].as_py())
    ts = np.asarray(t.column("ts_ns").to_numpy(), dtype=np.int64)
    inside = (ts >= lo) & (ts <= hi)
    s = t.filter(pa.array(inside))
    names = [n for n in t.column("name").to_pylist() if n]
    flags = [f for f in t.column("has_watched_process").to_pylist() if f is not None]
    out: dict[str, Any] = {
        "device": device,
        "name": names[-1] if names else None,
        "used": any(flags) if flags else None,
        "samples": s.num_rows,
    }
    for key, col in _MEANS:
        out[key] = _mean(_floats(s, col))
    sm = _floats(s, "sm_clock_mhz")
    out["sm_clock_mhz_mean"] = _mean(sm)
    out["sm_clock_mhz_min"] = _min(sm)
    out["sm_clock_mhz_max"] = _max(sm)
    # rated maxima are static: any row of the device will do
    out["sm_clock_max_mhz"] = _max(_floats(t, "sm_clock_max_mhz"))
    out["mem_clock_max_mhz"] = _max(_floats(t, "mem_clock_max_mhz"))
    ratio = None
    if out["sm_clock_mhz_mean"] is not None and out["sm_clock_max_mhz"]:
        ratio = out["sm_clock_mhz_mean"] / out["sm_clock_max_mhz"]
    out["sm_clock_ratio"] = ratio
    # "power_w" is the instantaneous reading; where a source has only the driver's average
    # (NVML on Ampere and later without the instant field), that is the power there is
    power = _floats(s, "power_w")
    if np.isnan(power).all():
        power = _floats(s, "power_avg_w")
    out["power_w_mean"] = _mean(power)
    out["power_w_max"] = _max(power)
    out["power_limit_w"] = _min(_floats(s, "power_limit_w"))

    energy = _counter_delta(
        ts, _floats(t, "energy_j"), _floats(t, "energy_wrap_j"), lo, hi, scope_is_window
    )
    out["energy_j"] = energy.value
    span_s = (
        (energy.end_ns - energy.start_ns) / 1e9
        if energy.start_ns is not None and energy.end_ns is not None
        else None
    )
    out["energy_span_s"] = span_s
    out["energy_scope"] = (
        None
        if energy.value is None
        else ("window" if energy.bracketed else "samples_inside")
        if scope_is_window
        else "run"
    )
    out["avg_power_w"] = energy.value / span_s if energy.value is not None and span_s else None
    if energy.reason is not None:
        out["energy_unknown"] = energy.reason

    for key, col in _MAXES:
        out[key] = _max(_floats(s, col))
    out["mem_used_bytes_max"] = _int_or_none(_max(_floats(s, "mem_used_bytes")))

    nowrap = np.full(len(ts), np.nan)
    for key, col in (
        ("xgmi_read_bytes", "xgmi_read_bytes"),
        ("xgmi_write_bytes", "xgmi_write_bytes"),
    ):
        d = _counter_delta(ts, _floats(t, col), nowrap, lo, hi, scope_is_window)
        out[key] = _int_or_none(d.value)

    lists = [x for x in s.column("throttle_names").to_pylist() if x is not None]
    if lists:
        counts: dict[str, int] = {}
        for names_ in lists:
            for n in set(names_):
                counts[n] = counts.get(n, 0) + 1
        out["throttle_share"] = {n: c / len(lists) for n, c in sorted(counts.items())}
        out["throttled_share"] = sum(1 for x in lists if x) / len(lists)
    else:
        out["throttle_share"] = {}
        out["throttled_share"] = None

    vp = _counter_delta(ts, _floats(t, "violation_power_ns"), nowrap, lo, hi, scope_is_window)
    vt = _counter_delta(ts, _floats(t, "violation_thermal_ns"), nowrap, lo, hi, scope_is_window)
    out["violation_power_s"] = None if vp.value is None else vp.value / 1e9
    out["violation_thermal_s"] = None if vt.value is None else vt.value / 1e9
    share = None
    if vp.value is not None and vt.value is not None and vp.start_ns is not None:
        assert vp.end_ns is not None
        span = (vp.end_ns - vp.start_ns) / 1e9
        share = (vp.value + vt.value) / 1e9 / span if span > 0 else None
    out["violation_share"] = share
    ordered = {k: out[k] for k in _DEVICE_KEYS}
    ordered.update((k, v) for k, v in out.items() if k not in ordered)
    return ordered


def _total(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


def summarize_gpu(
    table: pa.Table, window: tuple[int, int] | None, inferences: int | None
) -> dict[str, Any] | None:
    """The GPUs' figures over ``window`` (monotonic ns, inclusive), or over the whole run.

    None for an empty table. ``inferences`` (the measured iterations times the batch)
    gives ``joules_per_inference`` and ``inferences_per_joule``. Totals and worst cases
    are over the devices the watched process used (``used``); over every device when
    that is unknown. A figure that cannot be known is None, and ``unknown`` says why.
    """
    if table.num_rows == 0:
        return None
    t = table.sort_by([("device", "ascending"), ("ts_ns", "ascending")])
    ts_all = t.column("ts_ns")
    first, last = int(pc.min(ts_all).as_py()), int(pc.max(ts_all).as_py())
    if window is not None:
        lo, hi = int(window[0]), int(window[1])
        scope, window_s = "window", (hi - lo) / 1e9
    else:
        lo, hi = first, last
        scope, window_s = "run", (last - first) / 1e9
    sources = sorted({s for s in t.column("source").to_pylist() if s})
    unknown: list[str] = []

    devices = []
    for dev in sorted({int(d) for d in t.column("device").to_pylist()}):
        rows = t.filter(pc.equal(t.column("device"), dev))
        devices.append(_device(rows, lo, hi, scope == "window"))

    used = [d for d in devices if d["used"] is True]
    if not used:
        used = [d for d in devices if d["used"] is None]
        if not used:
            unknown.append(
                "the watched process held no context on any GPU (a CPU run, or a container "
                "whose pids the driver does not list): no totals"
            )

    out: dict[str, Any] = {
        "source": "+".join(sources) if sources else None,
        "scope": scope,
        "window_s": window_s,
        "devices": devices,
        "devices_counted": [d["device"] for d in used],
    }

    energies = [d["energy_j"] for d in used]
    energy = _total(energies)
    for d in used:
        if d["energy_j"] is None:
            unknown.append(
                f"energy_j: device {d['device']}: {d.get('energy_unknown', 'no reading')}"
            )
    out["energy_j"] = energy
    scopes = {d["energy_scope"] for d in used}
    out["energy_scope"] = (
        None if energy is None else "samples_inside" if "samples_inside" in scopes else scope
    )
    avg = _total([d["avg_power_w"] for d in used])
    out["avg_power_w"] = avg
    jpi = ipj = None
    if inferences is not None and inferences > 0 and avg is not None and window_s > 0:
        # the average power over the window (over the span the readings cover, when they
        # do not bracket it) times the window: the energy the inferences took
        joules = avg * window_s if scope == "window" else energy
        if joules is not None:
            jpi = joules / inferences
            ipj = inferences / joules if joules > 0 else None
    elif inferences is None:
        unknown.append("joules_per_inference: the number of inferences is not known")
    out["joules_per_inference"] = jpi
    out["inferences_per_joule"] = ipj

    drops = []
    for d in used:
        lo_c, hi_c = d["sm_clock_mhz_min"], d["sm_clock_mhz_max"]
        if lo_c is not None and hi_c:
            drops.append(1.0 - lo_c / hi_c)
    out["clock_drop"] = max(drops) if drops else None
    ratios = [d["sm_clock_ratio"] for d in used if d["sm_clock_ratio"] is not None]
    out["clock_ratio"] = min(ratios) if ratios else None
    if used and not ratios:
        unknown.append("clock_ratio: no SM clock with a rated maximum in scope")
    shares = [d["throttled_share"] for d in used if d["throttled_share"] is not None]
    out["throttled_share"] = max(shares) if shares else None
    if used and not shares:
        unknown.append("throttled_share: the source reports no throttle reasons")
    viol = [d["violation_share"] for d in used if d["violation_share"] is not None]
    out["violation_share"] = max(viol) if viol else None
    if used and not viol:
        unknown.append("violation_share: the source reports no power and thermal violation time")
    out["unknown"] = unknown
    return out
