"""Whether the worker waited for a CPU: run-queue wait over a time window, from the
``sched_threads`` and ``sched_system`` tables of the ``sched`` collector.

Example::

    summary = summarize_sched(threads, system, window=(t0_ns, t1_ns), pid=worker_pid)
    contention_evidence(summary)
    # 'the worker waited 48 % of its runnable time for a CPU (main thread: 47 % of wall
    #  time); other tasks used 0.5 cores of its 1 allowed CPU; PSI cpu some 49 %'
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["TOP_THREADS", "WAIT_SHARE_CONTENDED", "contention_evidence", "summarize_sched"]

#: wait_share from which :func:`contention_evidence` calls the worker CPU-starved. On an
#: idle machine (this 2-core VM, kernel 6.18, a pinned Python busy loop over 1.5 s, nine
#: runs) wait_share was 0.0000 to 0.0071: the kernel's own threads and timer wakeups only.
#: One equal-priority busy loop pinned beside it gives ~0.5 (the scheduler shares the CPU
#: fairly, so each waits while the other runs). 0.10 is more than ten times the idle noise
#: and still catches a neighbour that takes a fifth of the worker's CPU.
WAIT_SHARE_CONTENDED = 0.10
#: how many threads ``top_threads`` lists
TOP_THREADS = 5
#: the least share of the differenced interval the measured phase must fill for the figures
#: to be evidence about it (aaco.analysis.bottleneck, aaco.regress)
MIN_COVERAGE = 0.5
#: the hypervisor's share of the worker's CPUs (steal, %) from which the timing is suspect:
#: a vCPU that loses that much of its time runs the model that much slower, in bursts
STEAL_PCT_CONTENDED = 5.0

_PSI_KEYS = tuple(f"{r}_{k}" for r in ("cpu", "memory", "io") for k in ("some", "full"))


def _ends(ts: np.ndarray[Any, Any], window: tuple[int, int] | None) -> tuple[int, int, str] | None:
    """The two sample times a window's differences are taken between, and how they were
    chosen: ``bracketing`` (the last sample at or before the start and the first at or after
    the end), ``inside`` (the first and last inside), ``mixed`` (one end of each), ``run``
    (no window: the first and last sample). None when no two distinct samples qualify."""
    if ts.size < 2:
        return None
    if window is None:
        return int(ts[0]), int(ts[-1]), "run"
    w0, w1 = window
    before = ts[ts <= w0]
    after = ts[ts >= w1]
    inside = ts[(ts >= w0) & (ts <= w1)]
    if before.size:
        t0, k0 = int(before[-1]), True
    elif inside.size:
        t0, k0 = int(inside[0]), False
    else:
        return None
    if after.size:
        t1, k1 = int(after[0]), True
    elif inside.size:
        t1, k1 = int(inside[-1]), False
    else:
        return None
    if t1 <= t0:
        return None
    return t0, t1, "bracketing" if k0 and k1 else "inside" if not (k0 or k1) else "mixed"


def _column(table: pa.Table, name: str) -> np.ndarray[Any, Any]:
    """A numeric column as float64 with NaN for null."""
    col = table.column(name)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def _thread_deltas(
    tid: np.ndarray[Any, Any], ts: np.ndarray[Any, Any], v: np.ndarray[Any, Any], t0: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Per thread (rows sorted by tid, then ts, starting group ids ``tid``): how much a
    cumulative counter grew, and whether the thread had any value at all.

    A thread first seen after ``t0`` was born inside the window and counts from 0. A value
    that goes down is a new thread under a reused tid: its value counts from 0 again.
    """
    groups = int(tid.max()) + 1 if tid.size else 0
    valid = ~np.isnan(v)
    inc = np.zeros_like(v)
    if v.size > 1:
        same = tid[1:] == tid[:-1]
        diff = v[1:] - v[:-1]
        step = np.where(diff >= 0, diff, v[1:])
        inc[1:] = np.where(same, step, 0.0)
    first = np.ones(v.size, dtype=bool)
    if v.size > 1:
        first[1:] = tid[1:] != tid[:-1]
    born = first & (ts > t0)
    inc[born] = v[born]
    inc[np.isnan(inc)] = 0.0
    total = np.bincount(tid, weights=inc, minlength=groups)
    has = np.bincount(tid, weights=valid.astype(np.float64), minlength=groups) > 0
    return total, has


def _time_weighted_mean(
    ts: np.ndarray[Any, Any], v: np.ndarray[Any, Any], t0: int, t1: int
) -> float | None:
    """Mean of a since-the-previous-sample rate over the rows in (t0, t1], each weighted by
    the interval it covers."""
    if ts.size < 2:
        return None
    dt = np.diff(ts).astype(np.float64)
    vals = v[1:]
    keep = (ts[1:] > t0) & (ts[1:] <= t1) & ~np.isnan(vals) & (dt > 0)
    if not keep.any():
        return None
    return float(np.sum(vals[keep] * dt[keep]) / np.sum(dt[keep]))


def summarize_sched(
    threads: pa.Table,
    system: pa.Table | None = None,
    window: tuple[int, int] | None = None,
    pid: int | None = None,
) -> dict[str, Any] | None:
    """Run-queue wait of the watched process over ``window`` (monotonic ns), or over the run.

    Counters are differenced between the last sample at or before the window's start and
    the first at or after its end where they exist, else the first / last inside
    (``bounds`` says which); ``scope`` is ``run`` when there is no window or no two
    samples qualify. ``window_s`` is the time between those two samples, the denominator of
    every rate. ``wait_share`` is Δwait / (Δrun + Δwait) summed over threads: the share of
    the worker's runnable time spent waiting for a CPU. ``pid`` picks the main thread (tid
    == pid; default: the table's ``pid`` column). None when the table has fewer than two
    samples; a figure no column could give is None.
    """
    if threads.num_rows == 0:
        return None
    all_ts = np.unique(threads.column("ts_ns").to_numpy())
    ends = _ends(all_ts, window)
    scope = "window"
    if ends is None or window is None:
        ends = _ends(all_ts, None)
        scope = "run"
    if ends is None:
        return None
    t0, t1, bounds = ends
    window_s = (t1 - t0) / 1e9
    if pid is None:
        pid = int(threads.column("pid")[0].as_py())

    ts_all = threads.column("ts_ns").to_numpy()
    keep = (ts_all >= t0) & (ts_all <= t1)
    tids_all = threads.column("tid").to_numpy()
    order = np.lexsort((ts_all, tids_all))
    order = order[keep[order]]
    ts = ts_all[order]
    uniq, gid = np.unique(tids_all[order], return_inverse=True)
    comms = threads.column("comm").to_pylist()
    last_comm: dict[int, str | None] = {}
    for i in order:  # sorted by tid then ts: the last write is the latest name
        last_comm[int(tids_all[i])] = comms[i]

    deltas: dict[str, np.ndarray[Any, Any] | None] = {}
    for name in ("run_ns", "wait_ns", "timeslices", "ctx_involuntary"):
        total, has = _thread_deltas(gid, ts, _column(threads, name)[order], t0)
        deltas[name] = np.where(has, total, np.nan) if has.any() else None

    def total_of(name: str, scale: float = 1.0) -> float | None:
        d = deltas[name]
        return float(np.nansum(d)) / scale if d is not None else None

    run_s = total_of("run_ns", 1e9)
    wait_s = total_of("wait_ns", 1e9)
    runnable = (run_s or 0.0) + (wait_s or 0.0)
    wait = deltas["wait_ns"]
    run = deltas["run_ns"]
    invol = deltas["ctx_involuntary"]
    main = np.flatnonzero(uniq == pid)
    main_wait = (
        float(wait[main[0]]) / 1e9
        if wait is not None and main.size and not np.isnan(wait[main[0]])
        else None
    )

    top: list[dict[str, Any]] = []
    if wait is not None:
        ranked = sorted(
            (i for i in range(uniq.size) if not np.isnan(wait[i])),
            key=lambda i: (-wait[i], int(uniq[i])),
        )
        for i in ranked[:TOP_THREADS]:
            r = float(run[i]) / 1e9 if run is not None and not np.isnan(run[i]) else None
            w = float(wait[i]) / 1e9
            top.append(
                {
                    "tid": int(uniq[i]),
                    "comm": last_comm.get(int(uniq[i])),
                    "run_s": r,
                    "wait_s": w,
                    "wait_share": w / (r + w) if r is not None and r + w > 0 else None,
                    "involuntary": (
                        int(invol[i]) if invol is not None and not np.isnan(invol[i]) else None
                    ),
                }
            )

    timeslices = total_of("timeslices")
    involuntary = total_of("ctx_involuntary")
    out: dict[str, Any] = {
        "scope": scope,
        "bounds": bounds,
        "window_s": window_s,
        "measured_s": (window[1] - window[0]) / 1e9 if window is not None else None,
        # the share of the differenced interval the measured phase fills: a phase shorter
        # than the sampling period is a small part of the interval around it (start-up,
        # warmup, the profiled pass), whose figures then describe the run, not the phase
        "coverage": (
            max(0, min(t1, window[1]) - max(t0, window[0])) / (t1 - t0)
            if scope == "window" and window is not None
            else None
        ),
        "samples": int(np.unique(ts).size),
        "pid": pid,
        "threads": int(uniq.size),
        "run_s": run_s,
        "wait_s": wait_s,
        "wait_share": wait_s / runnable if wait_s is not None and runnable > 0 else None,
        "main_wait_share_of_wall": main_wait / window_s if main_wait is not None else None,
        "max_thread_wait_share_of_wall": (
            float(np.nanmax(wait)) / 1e9 / window_s
            if wait is not None and not np.all(np.isnan(wait))
            else None
        ),
        "timeslices_per_s": timeslices / window_s if timeslices is not None else None,
        "involuntary_switches_per_s": involuntary / window_s if involuntary is not None else None,
        "psi": None,
        "affinity": None,
        "affinity_busy_pct_mean": None,
        "other_cpu_pct_mean": None,
        "steal_pct_mean": None,
        "procs_running_max": None,
        "top_threads": top,
    }
    if system is not None and system.num_rows:
        out.update(_system_part(system, window if scope == "window" else None))
    return out


def _system_part(system: pa.Table, window: tuple[int, int] | None) -> dict[str, Any]:
    sysd = system.sort_by("ts_ns")
    ts = sysd.column("ts_ns").to_numpy()
    ends = _ends(np.unique(ts), window) or _ends(np.unique(ts), None)
    if ends is None:
        return {}
    s0, s1, _ = ends
    i0 = int(np.flatnonzero(ts == s0)[-1])
    i1 = int(np.flatnonzero(ts == s1)[0])
    span_us = (s1 - s0) / 1e3
    psi: dict[str, float | None] = {}
    for key in _PSI_KEYS:
        col = sysd.column(f"psi_{key}_us")
        a, b = col[i0].as_py(), col[i1].as_py()
        psi[f"{key}_pct"] = (
            max(0.0, 100.0 * (b - a) / span_us) if a is not None and b is not None else None
        )
    rows = sysd.slice(i0, i1 - i0 + 1)
    affinity = next((a for a in reversed(rows.column("affinity").to_pylist()) if a), None)
    running = [v for v in rows.column("procs_running").to_pylist() if v is not None]
    return {
        "psi": psi if any(v is not None for v in psi.values()) else None,
        "affinity": affinity,
        "affinity_busy_pct_mean": _time_weighted_mean(
            ts, _column(sysd, "affinity_busy_pct"), s0, s1
        ),
        "other_cpu_pct_mean": _time_weighted_mean(ts, _column(sysd, "other_cpu_pct"), s0, s1),
        "steal_pct_mean": (
            _time_weighted_mean(ts, _column(sysd, "steal_pct"), s0, s1)
            if "steal_pct" in sysd.column_names
            else None
        ),
        "procs_running_max": max(running) if running else None,
    }


def _pct(share: float) -> str:
    return f"{100.0 * share:.0f} %"


def not_evidence(summary: dict[str, Any] | None) -> str | None:
    """Why a summary's figures cannot judge the measured phase (None when they can): no
    summary, no window (``scope`` run), or a measured phase filling less than
    :data:`MIN_COVERAGE` of the interval the counters were differenced over."""
    if not summary or not isinstance(summary, dict):
        return "no scheduler telemetry (/proc/PID/task/*/schedstat)"
    if summary.get("scope") != "window":
        return "the scheduler figures cover the whole run, not the measured phase"
    cov = _finite(summary.get("coverage"))
    if cov is not None and cov < MIN_COVERAGE:
        measured = summary.get("measured_s")
        span = summary.get("window_s")
        what = (
            f"the measured phase ({1e3 * measured:.0f} ms) fills {cov:.0%} of the "
            f"{1e3 * span:.0f} ms between the samples around it"
            if isinstance(measured, int | float) and isinstance(span, int | float)
            else f"the measured phase fills {cov:.0%} of the interval sampled around it"
        )
        return (
            f"{what}: its figures describe the run around it; measure longer (--duration, "
            "--iterations) or sample faster (--sample-hz)"
        )
    return None


def contention_evidence(summary: dict[str, Any] | None) -> str | None:
    """One sentence of evidence that the worker was kept off the CPU, or None when its
    ``wait_share`` is under :data:`WAIT_SHARE_CONTENDED` (or unknown), or the summary does
    not describe the measured phase (:func:`not_evidence`)."""
    if not isinstance(summary, dict) or not_evidence(summary):
        return None
    share = _finite(summary.get("wait_share"))
    if share is None or share < WAIT_SHARE_CONTENDED:
        return None
    head = f"the worker waited {_pct(share)} of its runnable time for a CPU"
    main = _finite(summary.get("main_wait_share_of_wall"))
    if main is not None:
        head += f" (main thread: {_pct(main)} of wall time)"
    parts = [head]
    other = _finite(summary.get("other_cpu_pct_mean"))
    affinity = summary.get("affinity") if isinstance(summary.get("affinity"), list) else None
    if other is not None:
        cores = f"{other / 100.0:.1f} cores"
        if affinity:
            n = len(affinity)
            parts.append(f"other tasks used {cores} of its {n} allowed CPU{'s' if n != 1 else ''}")
        else:
            parts.append(f"other tasks used {cores} of its CPUs")
    steal = _finite(summary.get("steal_pct_mean"))
    if steal is not None and steal >= 1.0:
        parts.append(f"the hypervisor took {steal:.0f} % of its CPUs' time (steal)")
    psi = summary.get("psi")
    some = _finite(psi.get("cpu_some_pct")) if isinstance(psi, dict) else None
    if some is not None:
        parts.append(f"PSI cpu some {some:.0f} %")
    return "; ".join(parts)


def _finite(v: Any) -> float | None:
    """A finite number, else None: a hand-edited summary must not break a report."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)
