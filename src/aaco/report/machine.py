"""What the machine did during a run, in words and series for every renderer: the GPU
(``inference_summary.json`` ``gpu``, ``telemetry/gpu.parquet``), the scheduler (``sched``,
``telemetry/sched_*.parquet``) and the measurement capsule of ``aaco run --isolate``
(``session.json`` ``capsule``).

Rows are (label, text) pairs that the terminal prints as lines and the HTML page as table
rows, so both say the same thing. A figure that is unknown (null) reads "unknown", never 0.
Every function reads its input defensively: a key may be missing, a file hand-edited.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from aaco.report.generation import TextTable
from aaco.session.bundle import Session

#: the report keys this module adds (each present only when the bundle records it)
MACHINE_KEYS = ("gpu", "sched", "capsule")
#: top threads listed in a contended run's table
TOP_THREADS = 5


@dataclass(frozen=True)
class Row:
    """One line of a section: a short label, its text, and whether it warns."""

    label: str
    text: str
    warn: bool = False


def machine_keys(session: Session) -> dict[str, Any]:
    """``gpu`` and ``sched`` of the run's summary and ``capsule`` of ``session.json``, each
    only when the bundle has the key (a bundle written before them renders as before)."""
    summary = session.summary or {}
    out: dict[str, Any] = {}
    for key in ("gpu", "sched"):
        if key in summary:
            out[key] = _finite_only(summary[key]) if isinstance(summary[key], dict) else None
    if "capsule" in session.meta:
        capsule = session.meta["capsule"]
        out["capsule"] = _finite_only(capsule) if isinstance(capsule, dict) else None
    return out


def _finite_only(v: Any) -> Any:
    """``v`` with every NaN or infinity replaced by None (unknown): JSON has no NaN, and a
    hand-edited bundle must not make the JSON report fail."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite_only(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite_only(x) for x in v]
    return v


# -- numbers in words -------------------------------------------------------------------------


def number(v: Any) -> float | None:
    """``v`` as a finite float, or None (null, a string, a bool, NaN)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def fnum(v: Any, fmt: str = ".1f", unit: str = "") -> str:
    """A figure with its unit, "unknown" when it is not known."""
    f = number(v)
    return "unknown" if f is None else format(f, fmt) + unit


def share(v: Any, decimals: int = 1) -> str:
    """A fraction (0-1) as a percentage, "unknown" when it is not known."""
    f = number(v)
    return "unknown" if f is None else f"{f * 100:.{decimals}f}%"


def pct(v: Any, decimals: int = 1) -> str:
    """A percentage (0-100), "unknown" when it is not known."""
    f = number(v)
    return "unknown" if f is None else f"{f:.{decimals}f}%"


def size(v: Any, per_s: bool = False) -> str:
    """Bytes (or bytes/s) in binary units, "unknown" when not known."""
    f = number(v)
    if f is None:
        return "unknown"
    suffix = "/s" if per_s else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(f) < 1024 or unit == "TiB":
            return (f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}") + suffix
        f /= 1024
    return f"{f:.1f} TiB{suffix}"  # pragma: no cover - the loop returns


def cpu_list(cpus: Any) -> str:
    """CPU numbers as ranges (``[0, 1, 2, 3, 6]`` -> ``0-3,6``); a string is kept as it is."""
    if isinstance(cpus, str):
        return cpus
    if not isinstance(cpus, list | tuple):
        return "unknown"
    nums = sorted({int(c) for c in cpus if isinstance(c, int) and not isinstance(c, bool)})
    if not nums:
        return "none"
    parts: list[str] = []
    start = prev = nums[0]
    for c in [*nums[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


def _scope(d: Mapping[str, Any]) -> str:
    where = "measured phase" if d.get("scope") == "window" else "whole run"
    w = number(d.get("window_s"))
    return where if w is None else f"{where}, {w:.3g} s"


def _dicts(v: Any) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


# -- GPU ----------------------------------------------------------------------------------------


def shown_devices(gpu: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The devices a report details: those the worker used; when the source cannot tell
    (``used`` null), every device of unknown use; none when all are known unused."""
    devices = _dicts(gpu.get("devices"))
    used = [d for d in devices if d.get("used") is True]
    return used or [d for d in devices if d.get("used") is None]


def _throttle_text(d: Mapping[str, Any]) -> str:
    reasons = d.get("throttle_share")
    reasons = reasons if isinstance(reasons, dict) else {}
    known = sorted(
        ((str(k), f) for k, v in reasons.items() if (f := number(v)) is not None and f > 0),
        key=lambda kv: -kv[1],
    )
    total = number(d.get("throttled_share"))
    if known:
        text = ", ".join(f"{k} {share(v)}" for k, v in known) + " of the window"
        text += f" (throttled {share(total)})"
    elif total is None:
        text = "unknown"
    elif total == 0:
        text = "none"
    else:
        text = f"throttled {share(total)} of the window"
    vp, vt = d.get("violation_power_s"), d.get("violation_thermal_s")
    if number(vp) is not None or number(vt) is not None:
        text += (
            f"; held down by power {fnum(vp, '.3g', ' s')}, thermal {fnum(vt, '.3g', ' s')}"
            f" ({share(d.get('violation_share'))} of the window)"
        )
    return text


def _device_rows(d: Mapping[str, Any]) -> list[Row]:
    dev = d.get("device")
    name = d.get("name") or "name unknown"
    used = {True: "", False: ", not used by the worker", None: ", use unknown"}.get(
        d.get("used"), ""
    )
    rows = [Row(f"GPU {dev}", f"{name}, {d.get('samples', 'unknown')} samples{used}")]
    rows.append(
        Row(
            "  util",
            f"GPU busy {pct(d.get('util_gpu_pct_mean'))} mean, memory controller "
            f"{pct(d.get('util_mem_pct_mean'))}",
        )
    )
    ratio = number(d.get("sm_clock_ratio"))
    rows.append(
        Row(
            "  clocks",
            f"SM mean {fnum(d.get('sm_clock_mhz_mean'), '.0f', ' MHz')} "
            f"(min {fnum(d.get('sm_clock_mhz_min'), '.0f')}, "
            f"max {fnum(d.get('sm_clock_mhz_max'), '.0f')}) of "
            f"{fnum(d.get('sm_clock_max_mhz'), '.0f', ' MHz')} max: "
            f"{share(ratio)} of max; memory {fnum(d.get('mem_clock_mhz_mean'), '.0f', ' MHz')} "
            f"of {fnum(d.get('mem_clock_max_mhz'), '.0f', ' MHz')}",
            warn=ratio is not None and ratio < 0.9,
        )
    )
    rows.append(
        Row(
            "  power",
            f"mean {fnum(d.get('power_w_mean'), '.1f', ' W')}, max "
            f"{fnum(d.get('power_w_max'), '.1f', ' W')}, limit "
            f"{fnum(d.get('power_limit_w'), '.0f', ' W')}; energy "
            f"{fnum(d.get('energy_j'), '.1f', ' J')} "
            f"(average {fnum(d.get('avg_power_w'), '.1f', ' W')})",
        )
    )
    temps = f"max {fnum(d.get('temp_c_max'), '.0f', ' °C')}"
    for key, what in (("temp_hotspot_c_max", "hotspot"), ("temp_mem_c_max", "memory")):
        if number(d.get(key)) is not None:
            temps += f", {what} {fnum(d.get(key), '.0f', ' °C')}"
    rows.append(Row("  temp", temps))
    mem = f"used max {size(d.get('mem_used_bytes_max'))}"
    tx, rx = d.get("pcie_tx_bytes_per_s_mean"), d.get("pcie_rx_bytes_per_s_mean")
    if number(tx) is not None or number(rx) is not None:
        mem += f"; PCIe tx {size(tx, True)}, rx {size(rx, True)} mean"
    xr, xw = d.get("xgmi_read_bytes"), d.get("xgmi_write_bytes")
    if number(xr) is not None or number(xw) is not None:
        mem += f"; XGMI read {size(xr)}, written {size(xw)}"
    rows.append(Row("  memory", mem))
    throttle = _throttle_text(d)
    rows.append(Row("  throttle", throttle, warn=throttle not in ("none", "unknown")))
    gpm = (
        ("SM activity", "gpm_sm_activity_pct_mean"),
        ("SM occupancy", "gpm_sm_occupancy_pct_mean"),
        ("tensor activity", "gpm_tensor_activity_pct_mean"),
        ("DRAM bandwidth", "gpm_dram_bw_util_pct_mean"),
    )
    if any(number(d.get(k)) is not None for _, k in gpm):
        rows.append(Row("  GPM", ", ".join(f"{what} {pct(d.get(k))}" for what, k in gpm)))
    return rows


def gpu_rows(gpu: Mapping[str, Any] | None) -> list[Row]:
    """The GPU section: the window's energy and efficiency, then each device the worker
    used: utilisation, clocks against their maximum, power against its limit, energy,
    temperatures, memory, throttle reasons and their share of the window, GPM figures."""
    if not isinstance(gpu, Mapping):
        return []
    head = (
        f"{gpu.get('source') or 'source unknown'}, {_scope(gpu)}: energy "
        f"{fnum(gpu.get('energy_j'), '.1f', ' J')} (average "
        f"{fnum(gpu.get('avg_power_w'), '.1f', ' W')}), "
        f"{fnum(gpu.get('joules_per_inference'), '.4g', ' J/inference')}, "
        f"{fnum(gpu.get('inferences_per_joule'), '.4g', ' inferences/J')}; SM clock at "
        f"{share(gpu.get('clock_ratio'))} of max, throttled {share(gpu.get('throttled_share'))}"
        " of the window"
    )
    rows = [Row("GPU", head)]
    devices = _dicts(gpu.get("devices"))
    shown = shown_devices(gpu)
    for d in shown:
        rows += _device_rows(d)
    others = [d for d in devices if d not in shown]
    if others:
        ids = ", ".join(str(d.get("device")) for d in others)
        what = "not used by the worker" if shown else "sampled, none used by the worker"
        rows.append(Row("  other", f"GPU {ids} {what}"))
    if not devices:
        rows.append(Row("  devices", "none sampled"))
    unknown = [str(u) for u in gpu.get("unknown") or [] if u is not None]
    if unknown:
        rows.append(Row("  unknown", "; ".join(unknown)))
    return rows


# -- scheduler -----------------------------------------------------------------------------


def contention(sched: Mapping[str, Any]) -> str | None:
    """The analysis's sentence when the worker waited for a CPU a notable share of its
    runnable time (:func:`aaco.analysis.sched.contention_evidence`), else None."""
    from aaco.analysis.sched import contention_evidence

    return contention_evidence(dict(sched))


def _psi(psi: Any) -> str:
    if not isinstance(psi, dict):
        return "unknown (no /proc/pressure)"
    return "; ".join(
        f"{key} some {pct(psi.get(f'{key}_some_pct'), 2)}, "
        f"full {pct(psi.get(f'{key}_full_pct'), 2)}"
        for key in ("cpu", "memory", "io")
    )


def _cpus(sched: Mapping[str, Any]) -> str:
    aff = sched.get("affinity")
    n = f" ({len(aff)})" if isinstance(aff, list) else ""
    return (
        f"worker's CPUs {cpu_list(aff)}{n}: busy {pct(sched.get('affinity_busy_pct_mean'))}, "
        f"other tasks {pct(sched.get('other_cpu_pct_mean'))} of one CPU"
    )


def sched_rows(sched: Mapping[str, Any] | None, evidence: str | None) -> list[Row]:
    """The scheduler section: one line for a quiet run; for a contended one (``evidence``:
    the analysis's sentence) the sentence, the waits, switches, PSI and the CPUs."""
    if not isinstance(sched, Mapping):
        return []
    wait = (
        f"worker waited {share(sched.get('wait_share'))} of its runnable time (main thread "
        f"{share(sched.get('main_wait_share_of_wall'))} of wall)"
    )
    switches = f"{fnum(sched.get('involuntary_switches_per_s'), '.0f')} involuntary switches/s"
    psi = sched.get("psi")
    cpu_some = (
        pct(psi.get("cpu_some_pct"), 2) if isinstance(psi, dict) else "unknown (no /proc/pressure)"
    )
    # the hypervisor's share, shown where it is known and not nil (a VM's steal time)
    steal = number(sched.get("steal_pct_mean"))
    stolen = f"; steal {pct(steal)}" if steal is not None and steal >= 0.5 else ""
    if evidence is None:
        aff = sched.get("affinity")
        cpus = f"CPUs {cpu_list(aff)}" if isinstance(aff, list) else "its CPUs"
        return [
            Row(
                "scheduler",
                f"{wait}, {switches}, PSI cpu some {cpu_some}; other tasks on {cpus} "
                f"{pct(sched.get('other_cpu_pct_mean'))} of one CPU{stolen}",
            )
        ]
    return [
        Row("scheduler", evidence, warn=True),
        Row(
            "  waiting",
            f"{share(sched.get('wait_share'))} of runnable time (run "
            f"{fnum(sched.get('run_s'), '.3g', ' s')}, "
            f"wait {fnum(sched.get('wait_s'), '.3g', ' s')} "
            f"over {sched.get('threads', 'unknown')} threads, {_scope(sched)}); main thread "
            f"{share(sched.get('main_wait_share_of_wall'))} of wall, the worst thread "
            f"{share(sched.get('max_thread_wait_share_of_wall'))}",
        ),
        Row(
            "  switches",
            f"{switches}, {fnum(sched.get('timeslices_per_s'), '.0f')} timeslices/s",
        ),
        Row("  PSI", _psi(psi)),
        Row(
            "  CPUs",
            f"{_cpus(sched)}; up to {fnum(sched.get('procs_running_max'), '.0f')} runnable "
            "tasks on the machine",
        ),
    ]


def top_threads_table(sched: Mapping[str, Any] | None) -> TextTable | None:
    """The threads that waited most (a contended run's table), or None."""
    rows = _dicts((sched or {}).get("top_threads"))[:TOP_THREADS]
    if not rows:
        return None
    return TextTable(
        key="top_threads",
        title="Threads by run-queue wait",
        headers=["tid", "thread", "run s", "wait s", "wait share", "involuntary"],
        numeric=[True, False, True, True, True, True],
        rows=[
            [
                str(t.get("tid", "?")),
                str(t.get("comm") or "?"),
                fnum(t.get("run_s"), ".3g"),
                fnum(t.get("wait_s"), ".3g"),
                share(t.get("wait_share")),
                fnum(t.get("involuntary"), ".0f"),
            ]
            for t in rows
        ],
    )


# -- capsule -------------------------------------------------------------------------------


def _ms(point: Any) -> str:
    ns = number(point.get("median_ns")) if isinstance(point, dict) else None
    return "unknown" if ns is None else f"{ns / 1e6:.4g} ms"


def capsule_rows(capsule: Mapping[str, Any] | None) -> list[Row]:
    """The measurement capsule: pinned CPUs and threads, the sentinel's drift across the
    run and whether the machine's speed changed, and each machine check that is not ok
    with its fix."""
    if not isinstance(capsule, Mapping):
        return []
    text = f"pinned CPUs {cpu_list(capsule.get('cpus'))}"
    if capsule.get("threads") is not None:
        text += f", {capsule['threads']} threads"
    sentinel = capsule.get("sentinel")
    changed = False
    if isinstance(sentinel, dict):
        points = sentinel.get("points")
        points = points if isinstance(points, dict) else {}
        drift = number(sentinel.get("drift_pct"))
        changed = sentinel.get("speed_changed") is True
        speed = (
            "speed CHANGED"
            if changed
            else "speed unchanged"
            if sentinel.get("speed_changed") is False
            else "speed change unknown"
        )
        text += (
            f"; sentinel drift {'unknown' if drift is None else f'{drift:+.1f}%'}, {speed} "
            f"(median before {_ms(points.get('before'))}, between "
            f"{_ms(points.get('between'))}, after {_ms(points.get('after'))})"
        )
    else:
        text += "; no sentinel"
    rows = [Row("capsule", text, warn=changed)]
    for c in _dicts(capsule.get("checks")):
        state = str(c.get("state") or "unknown")
        if state == "ok":
            continue
        value = c.get("value")
        fix = c.get("fix")
        rows.append(
            Row(
                "  check",
                f"{c.get('name') or '?'} {state}"
                + (f": {value}" if value is not None else "")
                + (f"; fix: {fix}" if fix else ""),
                warn=True,
            )
        )
    return rows


# -- series for the timelines -------------------------------------------------------------


def _sorted(table: pa.Table, keys: Iterable[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys])


def thread_wait_rates(
    threads: pa.Table | None,
) -> dict[int, tuple[str, list[tuple[int, float]]]]:
    """Per thread: its name and its run-queue wait rate (ns waited per ns, Δwait_ns/Δts
    between two of its samples, placed at the later one)."""
    out: dict[int, tuple[str, list[tuple[int, float]]]] = {}
    if threads is None or not threads.num_rows:
        return out
    t = _sorted(threads, ("tid", "ts_ns"))
    prev: dict[int, tuple[int, int]] = {}
    for tid, comm, ts, wait in zip(
        *(t.column(c).to_pylist() for c in ("tid", "comm", "ts_ns", "wait_ns")), strict=True
    ):
        _, samples = out.setdefault(tid, (str(comm or tid), []))
        if wait is None:
            continue
        p = prev.get(tid)
        prev[tid] = (ts, wait)
        # a counter that went back (a reused tid) starts over: no rate for that step
        if p is not None and ts > p[0] and wait >= p[1]:
            samples.append((ts, (wait - p[1]) / (ts - p[0])))
    return out


def worker_wait_series(threads: pa.Table | None) -> list[tuple[int, float]]:
    """The worker's run-queue wait summed over its threads at each sample time, in % of
    one CPU (100 = one thread's worth of waiting all the time)."""
    total: dict[int, float] = {}
    for _, samples in thread_wait_rates(threads).values():
        for ts, rate in samples:
            total[ts] = total.get(ts, 0.0) + rate * 100.0
    return sorted(total.items())


def counter_rate_series(
    table: pa.Table | None, column: str, scale: float = 1.0
) -> list[tuple[int, float]]:
    """Δcolumn/Δts_ns x ``scale`` of a cumulative counter between consecutive samples, at
    the later one; a step with a null or decreasing counter is left out."""
    if table is None or not table.num_rows or column not in table.column_names:
        return []
    t = _sorted(table, ("ts_ns",))
    out: list[tuple[int, float]] = []
    prev: tuple[int, float] | None = None
    for ts, v in zip(t.column("ts_ns").to_pylist(), t.column(column).to_pylist(), strict=True):
        if v is None:
            prev = None
            continue
        if prev is not None and ts > prev[0] and v >= prev[1]:
            out.append((ts, (v - prev[1]) / (ts - prev[0]) * scale))
        prev = (ts, float(v))
    return out


def column_series(table: pa.Table | None, column: str) -> list[tuple[int, float]]:
    """(ts_ns, value) of a column's known, finite values, in time order."""
    if table is None or not table.num_rows or column not in table.column_names:
        return []
    t = _sorted(table, ("ts_ns",))
    return [
        (ts, float(v))
        for ts, v in zip(t.column("ts_ns").to_pylist(), t.column(column).to_pylist(), strict=True)
        if number(v) is not None
    ]


def gpu_devices(gpu: pa.Table | None) -> dict[int, pa.Table]:
    """The telemetry's rows of each device, in time order."""
    if gpu is None or not gpu.num_rows:
        return {}
    t = _sorted(gpu, ("device", "ts_ns"))
    devices = t.column("device").to_pylist()
    out: dict[int, pa.Table] = {}
    for dev in dict.fromkeys(devices):
        idx = [i for i, d in enumerate(devices) if d == dev]
        out[int(dev)] = t.take(pa.array(idx, pa.int64()))
    return out


def used_devices(gpu: pa.Table | None) -> dict[int, pa.Table]:
    """The devices the worker held a context on; when none is known used, those whose
    samples cannot tell (``has_watched_process`` null); none when all are known unused."""
    per = gpu_devices(gpu)
    used = {d: t for d, t in per.items() if True in t.column("has_watched_process").to_pylist()}
    unknown = {
        d: t
        for d, t in per.items()
        if all(v is None for v in t.column("has_watched_process").to_pylist())
    }
    return used or unknown


def energy_series(device: pa.Table) -> list[tuple[int, float]]:
    """The device's energy counter in J since its first sample, unwrapped where the
    counter's wrap is known; a step that goes back without a known wrap restarts the sum
    from that sample (the counter was reset)."""
    out: list[tuple[int, float]] = []
    acc = 0.0
    prev: float | None = None
    cols = (device.column(c).to_pylist() for c in ("ts_ns", "energy_j", "energy_wrap_j"))
    for ts, e, wrap in zip(*cols, strict=True):
        if number(e) is None:
            continue
        if prev is not None:
            step = e - prev
            if step < 0:
                step = step + wrap if number(wrap) is not None and wrap > 0 else 0.0
            acc += max(step, 0.0)
        prev = e
        out.append((ts, acc))
    return out


def throttle_periods(device: pa.Table) -> list[tuple[int, int, str]]:
    """(start_ns, end_ns, reasons) of each run of samples with the same active throttle
    reasons; each sample's reasons hold until the next sample (the last one for the
    sampling period before it). Samples with no reasons or unknown ones end a period."""
    ts = device.column("ts_ns").to_pylist()
    names = device.column("throttle_names").to_pylist()
    out: list[tuple[int, int, str]] = []
    for i, (t, reasons) in enumerate(zip(ts, names, strict=True)):
        if not reasons:
            continue
        # the last sample holds for one sampling period
        end = ts[i + 1] if i + 1 < len(ts) else t + (t - ts[i - 1] if i > 0 else 0)
        label = ", ".join(sorted(str(r) for r in reasons))
        if out and out[-1][2] == label and out[-1][1] == t:
            out[-1] = (out[-1][0], end, label)
        else:
            out.append((t, end, label))
    return out
