"""What the machine was doing meanwhile: a summary of the system telemetry over a time window."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _valid(table: pa.Table, col: str) -> np.ndarray[Any, Any]:
    arr = table.column(col).drop_null().to_numpy(zero_copy_only=False)
    return np.asarray(arr, dtype=np.float64)


def _rate(table: pa.Table, col: str) -> float | None:
    """Per-second rate of a cumulative counter between its first and last non-null sample.

    A count lower than the one before is a counter reset (a new process: ``aaco profile``'s
    runs, each a process of its own): as Prometheus's ``rate()`` does, the new count is
    taken as what accrued since the reset, so a rate is never negative."""
    mask = pc.is_valid(table.column(col))
    sub = table.filter(mask)
    if sub.num_rows < 2:
        return None
    ts = sub.column("ts_ns").to_numpy()
    vals = sub.column(col).to_numpy()
    dt = (ts[-1] - ts[0]) / 1e9
    if dt <= 0:
        return None
    steps = np.diff(vals)
    grown = np.where(steps >= 0, steps, vals[1:])
    return float(grown.sum()) / float(dt)


def summarize_system(
    events: pa.Table, window: tuple[int, int] | None = None, min_samples: int = 2
) -> dict[str, Any]:
    """Summary over ``window`` (monotonic ns, inclusive), or over all samples.

    When the window holds fewer than ``min_samples`` samples (a measured phase shorter than
    the sampling period) the summary covers the whole run instead; ``scope`` says which
    (``window`` or ``run``). Rates are (last - first) / elapsed over the samples in scope;
    means are over the samples that carry a value. A figure no sample could give is None.
    """
    t = events
    scope = "run"
    if window is not None:
        ts = t.column("ts_ns")
        inside = t.filter(pc.and_(pc.greater_equal(ts, window[0]), pc.less_equal(ts, window[1])))
        if inside.num_rows >= min_samples:
            t, scope = inside, "window"
    out: dict[str, Any] = {
        "samples": t.num_rows,
        "scope": scope,
        "window_ns": list(window) if window else None,
        "proc_cpu_pct_mean": None,
        "proc_cpu_pct_max": None,
        "proc_rss_peak_bytes": None,
        "proc_threads_max": None,
        "ctx_switches_voluntary_per_s": None,
        "ctx_switches_involuntary_per_s": None,
        "ctx_switches_per_s": None,
        "minor_faults_per_s": None,
        "major_faults_per_s": None,
        "sys_cpu_pct_mean": None,
        "load_1m_max": None,
        "cpu_freq_mhz_mean": None,
        "cpu_freq_mhz_min": None,
        "cpu_freq_mhz_max": None,
    }
    if t.num_rows == 0:
        return out
    cpu = _valid(t, "proc_cpu_pct")
    if cpu.size:
        out["proc_cpu_pct_mean"] = float(cpu.mean())
        out["proc_cpu_pct_max"] = float(cpu.max())
    rss = _valid(events, "proc_rss_bytes")  # peak over the whole run, not only the window
    if rss.size:
        out["proc_rss_peak_bytes"] = int(rss.max())
    thr = _valid(t, "proc_threads")
    if thr.size:
        out["proc_threads_max"] = int(thr.max())
    vol = _rate(t, "proc_ctx_voluntary")
    inv = _rate(t, "proc_ctx_involuntary")
    out["ctx_switches_voluntary_per_s"] = vol
    out["ctx_switches_involuntary_per_s"] = inv
    out["ctx_switches_per_s"] = vol + inv if vol is not None and inv is not None else None
    out["minor_faults_per_s"] = _rate(t, "proc_minor_faults")
    out["major_faults_per_s"] = _rate(t, "proc_major_faults")
    sys_cpu = _valid(t, "sys_cpu_pct")
    if sys_cpu.size:
        out["sys_cpu_pct_mean"] = float(sys_cpu.mean())
    load = _valid(t, "load_1m")
    if load.size:
        out["load_1m_max"] = float(load.max())
    freq = _valid(t, "cpu_freq_mhz")
    if freq.size:
        out["cpu_freq_mhz_mean"] = float(freq.mean())
        out["cpu_freq_mhz_min"] = float(freq.min())
        out["cpu_freq_mhz_max"] = float(freq.max())
    return out


def cpu_contention(sys_cpu_pct: float, proc_cpu_pct: float, cores: float) -> float:
    """Other processes' share of the machine's CPU (0-1): the system's busy share (``%`` of
    all cores) minus the worker's own (``%`` of one core, over ``cores`` logical CPUs)."""
    return max(0.0, sys_cpu_pct / 100.0 - proc_cpu_pct / 100.0 / cores)
