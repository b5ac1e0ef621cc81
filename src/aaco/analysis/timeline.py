"""Timeline and launch metrics derived from the kernel, memcpy and API tables.

GPU active ratio, HTA's temporal and idle-time breakdowns, kernel launch statistics, kernel
summaries, KAR and the launch tax score: pure functions, vectorized with numpy, documented
with their formulas in docs/metrics.md. Unknown values are None, never a default.

Example::

    metrics = derived_metrics(kernels, api_calls, memcpy, annotations, graph_node_count=120)
    metrics["gpu_active_ratio"]  # fraction of the measured window some kernel ran
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.kernels import classify_kernel, short_name
from aaco.analysis.launches import match_copies, match_launches

__all__ = [
    "CONSECUTIVE_KERNEL_DELAY_NS",
    "LAUNCH_DELAY_CUTOFF_NS",
    "MICROKERNEL_THRESHOLD_NS",
    "RUNTIME_CUTOFF_NS",
    "derived_metrics",
    "gpu_active_ratio",
    "hta_is_compute",
    "hta_selection",
    "hta_temporal_breakdown",
    "idle_breakdown",
    "kernel_summary",
    "launch_metrics",
    "launch_stats",
    "measured_window",
    "merge_intervals",
    "select_gpu_events",
    "temporal_breakdown",
    "union_ns",
]

# HTA's get_idle_time_breakdown default is `consecutive_kernel_delay=30`, compared with
# Kineto timestamps in microseconds: 30 us in effect (its docstring says ns).
CONSECUTIVE_KERNEL_DELAY_NS = 30_000
# HTA's get_cuda_kernel_launch_stats defaults: runtime_cutoff 50 us, launch_delay_cutoff 100 us.
RUNTIME_CUTOFF_NS = 50_000
LAUNCH_DELAY_CUTOFF_NS = 100_000
MICROKERNEL_THRESHOLD_NS = 10_000
# Kernel families HTA counts as non-compute in its temporal breakdown (memcpy/memset and
# NCCL kernels); copies of the memcpy table are non-compute too.
NON_COMPUTE_FAMILIES = ("memcpy", "communication")


# --- intervals ---------------------------------------------------------------------------


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering the union of ``[starts, ends)``.

    Touching intervals (one starts where another ends) merge, as in HTA's
    ``merge_kernel_intervals``.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.size == 0:
        return s.copy(), e.copy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    starts_idx = np.flatnonzero(new)
    ends_idx = np.append(starts_idx[1:] - 1, s.size - 1)
    return s[starts_idx], reach[ends_idx]


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals ``[starts, ends)``, ns."""
    ms, me = merge_intervals(starts, ends)
    return int((me - ms).sum())


# --- helpers -----------------------------------------------------------------------------


def _np(table: pa.Table, name: str, fill: int = 0) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=np.int64)


def _valid(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if col.null_count == 0:
        return np.ones(table.num_rows, dtype=bool)
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


def _all_gpu_time(kernels: pa.Table) -> bool:
    """True when every kernel's start/end are device timestamps (not ORT's rewritten ones)."""
    return kernels.num_rows == 0 or bool(pc.all(kernels.column("time_is_gpu")).as_py())


def _families(kernels: pa.Table) -> pa.ChunkedArray | pa.Array:
    """The family column, classified from the name where it is null."""
    fam = kernels.column("family")
    if fam.null_count == 0:
        return fam
    enc = kernels.column("name").combine_chunks().dictionary_encode()
    computed = pa.array([classify_kernel(n).family for n in enc.dictionary.to_pylist()])
    return pc.coalesce(fam.combine_chunks(), computed.take(enc.indices))


def _dist(values: np.ndarray) -> dict[str, float | None]:
    """mean / p50 / p95 / max of a sample; all None when empty."""
    if values.size == 0:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    v = values.astype(np.float64)
    return {
        "mean": float(v.mean()),
        "p50": float(np.percentile(v, 50)),
        "p95": float(np.percentile(v, 95)),
        "max": float(v.max()),
    }


def _devices(table: pa.Table) -> np.ndarray:
    # Unknown device reads -1: one group of its own, reported as device None.
    return _np(table, "device", -1) if table.num_rows else np.zeros(0, dtype=np.int64)


# --- window and active ratio -------------------------------------------------------------


def measured_window(
    kernels: pa.Table,
    memcpy: pa.Table | None = None,
    annotations: pa.Table | None = None,
    window: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The measured window ``{start_ns, end_ns, source}``.

    A passed window wins (``source`` ``argument``), else the span of the ``step``
    annotations (``steps``), else first GPU activity start to last GPU activity end
    (``gpu_activity``); ``start_ns``/``end_ns`` None (``source`` None) when there is none.
    """
    if window is not None:
        return {"start_ns": int(window[0]), "end_ns": int(window[1]), "source": "argument"}
    if annotations is not None and annotations.num_rows:
        steps = annotations.filter(pc.equal(annotations.column("kind"), "step"))
        if steps.num_rows:
            st = _np(steps, "start_ns")
            en = st + _np(steps, "dur_ns")
            return {"start_ns": int(st.min()), "end_ns": int(en.max()), "source": "steps"}
    parts = [t for t in (kernels, memcpy) if t is not None and t.num_rows]
    if not parts or not _all_gpu_time(kernels):
        return {"start_ns": None, "end_ns": None, "source": None}
    start = min(int(pc.min(t.column("start_ns")).as_py()) for t in parts)
    end = max(int(pc.max(t.column("end_ns")).as_py()) for t in parts)
    return {"start_ns": start, "end_ns": end, "source": "gpu_activity"}


def gpu_active_ratio(
    kernels: pa.Table, window_start_ns: int | None, window_end_ns: int | None
) -> dict[str, Any]:
    """Union of kernel busy intervals clipped to the window / window length.

    Returns ``{"overall": float | None, "per_device": {device: float | None}}``; overall
    merges all devices and streams, so on several devices it is the share of the window
    at least one device was busy. None when any kernel's times are not device times
    (``time_is_gpu`` false), when the window is unknown or empty.
    """
    unknown: dict[str, Any] = {"overall": None, "per_device": {}}
    if window_start_ns is None or window_end_ns is None or window_end_ns <= window_start_ns:
        return unknown
    if not _all_gpu_time(kernels):
        return unknown
    length = float(window_end_ns - window_start_ns)
    s = np.clip(_np(kernels, "start_ns"), window_start_ns, window_end_ns)
    e = np.clip(_np(kernels, "end_ns"), window_start_ns, window_end_ns)
    dev = _devices(kernels)
    per_device: dict[int | None, float | None] = {}
    for d in np.unique(dev):
        m = dev == d
        per_device[None if d == -1 else int(d)] = union_ns(s[m], e[m]) / length
    return {"overall": union_ns(s, e) / length, "per_device": per_device}


# --- HTA breakdowns ----------------------------------------------------------------------


def temporal_breakdown(
    kernels: pa.Table, memcpy: pa.Table | None = None, syncs: pa.Table | None = None
) -> list[dict[str, Any]]:
    """HTA's temporal breakdown, per device (HTA: per rank).

    ``total_ns`` = last GPU activity end - first start (kernels, copies and the device-side
    syncs of ``syncs`` that waited on a stream); ``idle_ns`` = total - union of all
    activity; ``compute_ns`` = union of compute kernels (not memcpy / memset /
    communication, never a sync); ``non_compute_ns`` = total - compute - idle; ``*_pct``
    their shares of total (0-100). Empty list when times are not device times or nothing
    ran. :func:`derived_metrics` feeds it HTA's selection of events
    (:func:`hta_selection`); :func:`hta_temporal_breakdown` is HTA's figure exactly.
    """
    if not _all_gpu_time(kernels):
        return []
    starts = [_np(kernels, "start_ns")]
    ends = [_np(kernels, "end_ns")]
    devs = [_devices(kernels)]
    non_compute = (
        pc.is_in(_families(kernels), value_set=pa.array(NON_COMPUTE_FAMILIES))
        if kernels.num_rows
        else pa.array([], pa.bool_())
    )
    compute = [~np.asarray(non_compute.to_numpy(zero_copy_only=False), dtype=bool)]
    for extra in (memcpy, _stream_syncs(syncs)):
        if extra is not None and extra.num_rows:
            starts.append(_np(extra, "start_ns"))
            ends.append(_np(extra, "end_ns"))
            devs.append(_devices(extra))
            compute.append(np.zeros(extra.num_rows, dtype=bool))
    s, e, dev, comp = (np.concatenate(x) for x in (starts, ends, devs, compute))
    out: list[dict[str, Any]] = []
    for d in np.unique(dev):
        m = dev == d
        out.append(_breakdown_row(s[m], e[m], comp[m], None if d == -1 else int(d)))
    return out


def _breakdown_row(
    s: np.ndarray, e: np.ndarray, comp: np.ndarray, device: int | None
) -> dict[str, Any]:
    total = int(e.max() - s.min()) if s.size else 0
    busy = union_ns(s, e)
    compute_ns = union_ns(s[comp], e[comp])
    idle = total - busy
    row: dict[str, Any] = {
        "device": device,
        "idle_ns": idle,
        "compute_ns": compute_ns,
        "non_compute_ns": total - compute_ns - idle,
        "total_ns": total,
    }
    for k in ("idle", "compute", "non_compute"):
        row[f"{k}_pct"] = 100.0 * row[f"{k}_ns"] / total if total else None
    return row


#: Kineto's device-side sync events carry this stream (or -1) when they wait on no stream
NO_STREAM = (-1, 4294967295)


def _stream_syncs(api_calls: pa.Table | None) -> pa.Table | None:
    """The device-side sync events that waited on a stream (``Stream Sync``, ``Stream Wait
    Event``): GPU time the device spent waiting, non-compute."""
    if api_calls is None or not api_calls.num_rows or "stream" not in api_calls.column_names:
        return None
    stream = api_calls.column("stream")
    on_stream = pc.and_(pc.is_valid(stream), pc.invert(pc.is_in(stream, pa.array(NO_STREAM))))
    return api_calls.filter(pc.fill_null(on_stream, False))


def _device_syncs(api_calls: pa.Table | None) -> pa.Table | None:
    """The device-side sync events HTA counts as GPU time: any stream but -1 (HTA reads
    ``args.stream`` with -1 as its missing value; 4294967295 is a stream to it)."""
    if api_calls is None or not api_calls.num_rows or "stream" not in api_calls.column_names:
        return None
    stream = api_calls.column("stream")
    return api_calls.filter(pc.fill_null(pc.not_equal(stream, -1), False))


def _step_cut(annotations: pa.Table | None) -> int | None:
    """HTA's cut for its selection: the start of the last ``ProfilerStep`` (host or GPU
    annotation) when at least two distinct ProfilerStep names exist, else None."""
    if annotations is None or not annotations.num_rows:
        return None
    steps = annotations.filter(pc.match_substring(annotations.column("name"), "ProfilerStep"))
    if len(pc.unique(steps.column("name"))) < 2:
        return None
    return int(pc.max(steps.column("start_ns")).as_py())


def _host_correlations(api_calls: pa.Table | None, cut: int) -> pa.Array:
    """Correlation ids of the host calls that started before ``cut`` (-1 standing for the
    calls that carry none, as in HTA)."""
    if api_calls is None or not api_calls.num_rows:
        return pa.array([], pa.int64())
    host = api_calls
    if "stream" in api_calls.column_names:
        host = api_calls.filter(pc.is_null(api_calls.column("stream")))
    before = host.filter(pc.less(host.column("start_ns"), cut))
    corr = pc.fill_null(before.column("correlation_id"), -1)
    return pc.unique(corr.combine_chunks())


def hta_selection(
    kernels: pa.Table, memcpy: pa.Table, api_calls: pa.Table, annotations: pa.Table
) -> tuple[pa.Table, pa.Table]:
    """The kernels and copies HTA's ``TraceAnalysis`` keeps by default.

    HTA (``Trace._filter_irrelevant_gpu_kernels``, ``include_last_profiler_step=False``)
    keeps a GPU event only when its correlation id matches a host event that starts before
    the last ``ProfilerStep`` starts: the last step's kernels and any kernel whose launch was
    not traced (it started before the profiler did) are dropped. With fewer than two
    ProfilerStep names HTA filters nothing, nor does this.
    """
    k, m, _ = select_gpu_events(kernels, memcpy, None, api_calls, annotations)
    return k, m


def select_gpu_events(
    kernels: pa.Table,
    memcpy: pa.Table | None,
    syncs: pa.Table | None,
    api_calls: pa.Table | None,
    annotations: pa.Table | None,
) -> tuple[pa.Table, pa.Table | None, pa.Table | None]:
    """:func:`hta_selection` of kernels, copies and device-side syncs (API_CALLS rows with a
    stream): ``Event Sync`` and ``Context Sync`` follow the correlation rule as HTA's
    ``GPUKernelFilter`` has them, the other syncs (no correlation: host events to HTA) are
    kept when they start before the cut."""
    cut = _step_cut(annotations)
    if cut is None:
        return kernels, memcpy, syncs
    corr = _host_correlations(api_calls, cut)

    def keep(table: pa.Table | None) -> pa.Table | None:
        if table is None or not table.num_rows:
            return table
        c = pc.fill_null(table.column("correlation_id"), -1)
        return table.filter(pc.is_in(c, value_set=corr))

    kept_syncs = syncs
    if syncs is not None and syncs.num_rows:
        by_corr = pc.is_in(syncs.column("name"), pa.array(["Event Sync", "Context Sync"]))
        c = pc.fill_null(syncs.column("correlation_id"), -1)
        kept = pc.if_else(
            by_corr, pc.is_in(c, value_set=corr), pc.less(syncs.column("start_ns"), cut)
        )
        kept_syncs = syncs.filter(kept)
    k = keep(kernels)
    return (k if k is not None else kernels), keep(memcpy), kept_syncs


# HTA's kernel classes (hta/utils/utils.py get_kernel_type, case-sensitive, re.match):
# communication ^nccl.*Kernel, memory ^Memcpy|^Memset|^dma, else computation unless the name
# matches the "other" pattern (Memcpy anywhere, Memset at the start, Sync anywhere)
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_OTHER = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_is_compute(name: str) -> bool:
    """Whether HTA counts an event of this name as computation in its temporal breakdown.

    >>> hta_is_compute("ampere_sgemm_128x64_nn"), hta_is_compute("Memcpy HtoD (Pageable)")
    (True, False)
    >>> hta_is_compute("Stream Sync"), hta_is_compute("Stream Wait Event")
    (False, True)
    """
    if _HTA_COMM.match(name) or _HTA_MEMORY.match(name):
        return False
    return _HTA_OTHER.match(name) is None


def _round_to_us(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's rounding: start up, end down, to whole microseconds (end may fall before
    start; such an event then covers nothing)."""
    return -((-start) // US_NS) * US_NS, (end // US_NS) * US_NS


US_NS = 1_000


def hta_temporal_breakdown(
    kernels: pa.Table,
    memcpy: pa.Table | None = None,
    api_calls: pa.Table | None = None,
    annotations: pa.Table | None = None,
    *,
    round_us: bool = False,
) -> list[dict[str, Any]]:
    """HTA 0.5's ``get_temporal_breakdown`` figure exactly, for side-by-side checks.

    Differences from :func:`temporal_breakdown` (AACO's, documented in docs/metrics.md):
    every device of the trace pooled in one row (HTA: one row per rank, ``device`` None);
    HTA's name rule for compute (:func:`hta_is_compute`: ROCm blit kernels and RCCL
    kernels not named ``nccl...Kernel`` count as compute, ``Stream Wait Event`` too);
    every device-side sync with a stream, ``Context Sync`` on stream 4294967295 included;
    and with ``round_us`` (the trace wrote a ``ts`` as a JSON float, HTA's trigger) every
    start rounded up and end rounded down to whole microseconds, host calls included,
    before HTA's selection.
    """
    if not _all_gpu_time(kernels):
        return []
    syncs = _device_syncs(api_calls)
    api = api_calls
    if round_us:
        kernels, memcpy, syncs, api, annotations = (
            _rounded(t) for t in (kernels, memcpy, syncs, api_calls, annotations)
        )
    kernels, memcpy, syncs = select_gpu_events(kernels, memcpy, syncs, api, annotations)
    parts = [t for t in (kernels, memcpy, syncs) if t is not None and t.num_rows]
    if not parts:
        return []
    s = np.concatenate([_np(t, "start_ns") for t in parts])
    e = np.concatenate([_np(t, "end_ns") for t in parts])
    comp = np.concatenate([_hta_compute_mask(t) for t in parts])
    e = np.maximum(e, s)  # a rounded-away event covers nothing (HTA's union does the same)
    row = _breakdown_row(s, e, comp, None)
    row["devices"] = sorted({int(d) for t in parts for d in _devices(t).tolist() if d != -1})
    row["rounded_to_us"] = round_us
    return [row]


def _hta_compute_mask(table: pa.Table) -> np.ndarray:
    enc = table.column("name").combine_chunks().dictionary_encode()
    flags = np.array([hta_is_compute(str(n)) for n in enc.dictionary.to_pylist()], dtype=bool)
    idx = enc.indices.to_numpy(zero_copy_only=False)
    return flags[idx] if len(flags) else np.zeros(table.num_rows, dtype=bool)


def _rounded(table: pa.Table | None) -> pa.Table | None:
    if table is None or not table.num_rows:
        return table
    start = _np(table, "start_ns")
    end = (
        start + _np(table, "dur_ns") if "end_ns" not in table.column_names else _np(table, "end_ns")
    )
    rs, re_ = _round_to_us(start, end)
    out = table.set_column(
        table.schema.get_field_index("start_ns"), "start_ns", pa.array(rs, pa.int64())
    )
    if "end_ns" in table.column_names:
        out = out.set_column(
            out.schema.get_field_index("end_ns"), "end_ns", pa.array(re_, pa.int64())
        )
    if "dur_ns" in table.column_names:
        out = out.set_column(
            out.schema.get_field_index("dur_ns"), "dur_ns", pa.array(re_ - rs, pa.int64())
        )
    return out


def idle_breakdown(
    kernels: pa.Table,
    memcpy: pa.Table | None = None,
    launches: pa.Table | None = None,
    copy_launches: pa.Table | None = None,
    consecutive_kernel_delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS,
) -> pa.Table:
    """HTA's idle time breakdown per (device, stream).

    On each stream, events (kernels and copies) are ordered by start; the gap before each
    event (its start - the previous event's end) is ``host_wait`` when its launch call
    started after the previous event ended (the host was late), else ``kernel_wait`` when
    shorter than ``consecutive_kernel_delay_ns``, else ``other``. ``launches`` /
    ``copy_launches`` are :func:`match_launches` / :func:`match_copies` results; an event
    with no known launch is never host_wait. Columns: device, stream, host_wait_ns,
    kernel_wait_ns, other_ns, idle_ns and the three ``*_ratio`` of idle_ns (null when 0).
    """
    if not _all_gpu_time(kernels):
        return _idle_table([], [], [], [], [])
    parts: list[tuple[pa.Table, pa.Table | None]] = [(kernels, launches)]
    if memcpy is not None and memcpy.num_rows:
        parts.append((memcpy, copy_launches))
    s_l, e_l, d_l, st_l, ls_l = [], [], [], [], []
    for table, matched in parts:
        if table.num_rows == 0:
            continue
        s_l.append(_np(table, "start_ns"))
        e_l.append(_np(table, "end_ns"))
        d_l.append(_devices(table))
        st_l.append(_np(table, "stream", -1))
        if matched is not None:
            ls = np.asarray(
                pc.fill_null(matched.column("launch_start_ns"), np.iinfo(np.int64).min)
                .to_numpy()
                .astype(np.int64)
            )
        else:
            ls = np.full(table.num_rows, np.iinfo(np.int64).min, dtype=np.int64)
        ls_l.append(ls)
    if not s_l:
        return _idle_table([], [], [], [], [])
    s, e, dev, stream, launch = (np.concatenate(x) for x in (s_l, e_l, d_l, st_l, ls_l))
    order = np.lexsort((s, stream, dev))
    s, e, dev, stream, launch = s[order], e[order], dev[order], stream[order], launch[order]
    first = np.ones(s.size, dtype=bool)
    first[1:] = (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])
    group = np.cumsum(first) - 1
    prev_end = np.empty_like(e)
    prev_end[1:] = e[:-1]
    gap = np.where(first, 0, s - prev_end)
    host = ~first & (launch > prev_end)
    kernel_wait = ~first & ~host & (gap < consecutive_kernel_delay_ns)
    other = ~first & ~host & ~kernel_wait
    n = int(group[-1]) + 1
    sums = [np.bincount(group, weights=gap * m, minlength=n).astype(np.int64)
            for m in (host, kernel_wait, other)]  # fmt: skip
    heads = np.flatnonzero(first)
    return _idle_table(dev[heads].tolist(), stream[heads].tolist(), *sums)


def _idle_table(dev: list[int], stream: list[int], host: Any, kwait: Any, other: Any) -> pa.Table:
    host, kwait, other = (np.asarray(x, dtype=np.int64) for x in (host, kwait, other))
    idle = host + kwait + other
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = [np.where(idle > 0, x / np.where(idle > 0, idle, 1), np.nan)
                  for x in (host, kwait, other)]  # fmt: skip
    return pa.table(
        {
            "device": pa.array([None if d == -1 else d for d in dev], pa.int32()),
            "stream": pa.array([None if x == -1 else x for x in stream], pa.int64()),
            "host_wait_ns": pa.array(host, pa.int64()),
            "kernel_wait_ns": pa.array(kwait, pa.int64()),
            "other_ns": pa.array(other, pa.int64()),
            "idle_ns": pa.array(idle, pa.int64()),
            "host_wait_ratio": pa.array(ratios[0], pa.float64(), from_pandas=True),
            "kernel_wait_ratio": pa.array(ratios[1], pa.float64(), from_pandas=True),
            "other_ratio": pa.array(ratios[2], pa.float64(), from_pandas=True),
        }
    )


# --- launches ----------------------------------------------------------------------------


def launch_stats(
    kernels: pa.Table,
    api_calls: pa.Table,
    launches: pa.Table | None = None,
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS,
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS,
) -> dict[str, Any]:
    """Kernel launch statistics over kernels whose launch call is known.

    - ``launch_delay_ns``: distribution (mean/p50/p95/max) of kernel start - launch call
      end, negative values clipped to 0 as HTA does;
    - ``cpu_launch_ns``: distribution of launch call durations;
    - ``short_kernels``: kernels whose GPU time < their launch call's CPU time (count and
      ``share`` of matched kernels);
    - ``runtime_outliers``: launch calls longer than ``runtime_cutoff_ns``;
      ``delay_outliers``: launch delays above ``launch_delay_cutoff_ns`` (HTA's cutoffs);
    - ``per_api``: launch-kind API calls per function name (all of them, matched or not);
    - ``matched`` / ``unmatched``: kernels with / without a known launch call.
    """
    m = launches if launches is not None else match_launches(kernels, api_calls)
    found = _valid(m, "launch_row") if m.num_rows else np.zeros(0, dtype=bool)
    delay = np.maximum(_np(m, "launch_delay_ns")[found], 0) if m.num_rows else found[:0]
    cpu = _np(m, "launch_dur_ns")[found] if m.num_rows else found[:0].astype(np.int64)
    gpu = _np(kernels, "dur_ns")[found] if kernels.num_rows else cpu
    matched = int(found.sum())
    short = int((gpu < cpu).sum())
    per_api: dict[str, int] = {}
    if api_calls.num_rows:
        calls = api_calls.filter(pc.equal(api_calls.column("kind"), "launch"))
        counts = calls.group_by("name").aggregate([("name", "count")])
        names = counts.column("name").to_pylist()
        per_api = dict(zip(names, counts.column("name_count").to_pylist(), strict=True))
        per_api = dict(sorted(per_api.items(), key=lambda kv: (-kv[1], kv[0])))
    return {
        "matched": matched,
        "unmatched": int(kernels.num_rows - matched),
        "launch_delay_ns": _dist(delay),
        "cpu_launch_ns": _dist(cpu),
        "short_kernels": {"count": short, "share": short / matched if matched else None},
        "runtime_outliers": int((cpu > runtime_cutoff_ns).sum()),
        "delay_outliers": int((delay > launch_delay_cutoff_ns).sum()),
        "runtime_cutoff_ns": runtime_cutoff_ns,
        "launch_delay_cutoff_ns": launch_delay_cutoff_ns,
        "per_api": per_api,
    }


def kernel_summary(kernels: pa.Table, by: str = "name") -> pa.Table:
    """Per kernel name (``by="name"``) or family (``by="family"``): count, total_ns,
    mean_ns, min_ns, max_ns, std_ns (sample, 0 for one call), share (of all kernel time,
    0-1); sorted by total_ns descending. Per name it also carries short_name and family."""
    if by not in ("name", "family"):
        raise ValueError(f"kernel_summary: by must be name or family, not {by!r}")
    t = kernels.select(["name", "dur_ns"]).append_column("family", _families(kernels))
    aggs = [
        ("dur_ns", "count"),
        ("dur_ns", "sum"),
        ("dur_ns", "mean"),
        ("dur_ns", "min"),
        ("dur_ns", "max"),
        ("dur_ns", "stddev", pc.VarianceOptions(ddof=1)),
    ]
    keys = ["name", "family"] if by == "name" else ["family"]
    g = t.group_by(keys).aggregate(aggs)  # type: ignore[arg-type]
    total = pc.sum(g.column("dur_ns_sum")).as_py() or 0
    std = pc.fill_null(g.column("dur_ns_stddev"), 0.0)
    std = pc.if_else(pc.is_nan(std), 0.0, std)
    cols: dict[str, Any] = {k: g.column(k) for k in keys}
    if by == "name":
        cols["short_name"] = pa.array([short_name(n) for n in g.column("name").to_pylist()])
    cols |= {
        "count": g.column("dur_ns_count").cast(pa.int64()),
        "total_ns": g.column("dur_ns_sum").cast(pa.int64()),
        "mean_ns": g.column("dur_ns_mean").cast(pa.float64()),
        "min_ns": g.column("dur_ns_min").cast(pa.int64()),
        "max_ns": g.column("dur_ns_max").cast(pa.int64()),
        "std_ns": std,
        "share": pc.divide(g.column("dur_ns_sum").cast(pa.float64()), float(total))
        if total
        else pa.nulls(g.num_rows, pa.float64()),
    }
    return pa.table(cols).sort_by([("total_ns", "descending"), (keys[0], "ascending")])


def launch_metrics(
    kernels: pa.Table,
    graph_node_count: int | None,
    iterations: int | None,
    window_ns: int | None,
    microkernel_threshold_ns: int = MICROKERNEL_THRESHOLD_NS,
) -> dict[str, Any]:
    """KAR, microkernel share, launch rate, launch tax score and kernels per iteration.

    - ``kar`` = (kernels / iterations) / graph_node_count;
    - ``microkernel_pct`` = kernels shorter than the threshold / kernels x 100;
    - ``launch_rate_per_s`` = kernels / (window_ns / 1e9);
    - ``launch_tax_score`` = microkernel fraction (0-1) x launch_rate_per_s / 1000;
    - ``kernels_per_iteration`` {mean, std, cv} over the kernels' ``iteration`` values.
    Each is None when an input it needs is unknown (or zero where it divides).
    """
    n = kernels.num_rows
    dur = _np(kernels, "dur_ns") if n else np.zeros(0, dtype=np.int64)
    micro_frac = float((dur < microkernel_threshold_ns).sum()) / n if n else None
    rate = n / (window_ns / 1e9) if window_ns else None
    kar = None
    if graph_node_count and iterations:
        kar = n / iterations / graph_node_count
    per_iter: dict[str, Any] = {"mean": None, "std": None, "cv": None, "iterations": 0}
    if n and kernels.column("iteration").null_count < n:
        it = kernels.column("iteration").drop_null()
        counts = np.asarray(pc.value_counts(it).field("counts").to_numpy(), dtype=np.float64)
        mean = float(counts.mean())
        std = float(counts.std(ddof=1)) if counts.size > 1 else 0.0
        per_iter = {"mean": mean, "std": std, "cv": std / mean, "iterations": int(counts.size)}
    return {
        "kernel_count": n,
        "kar": kar,
        "microkernel_threshold_ns": microkernel_threshold_ns,
        "microkernel_pct": micro_frac * 100.0 if micro_frac is not None else None,
        "launch_rate_per_s": rate,
        "launch_tax_score": micro_frac * rate / 1000.0
        if micro_frac is not None and rate is not None
        else None,
        "kernels_per_iteration": per_iter,
    }


def _rows(table: pa.Table | None) -> int:
    return table.num_rows if table is not None else 0


def derived_metrics(
    kernels: pa.Table,
    api_calls: pa.Table | None = None,
    memcpy: pa.Table | None = None,
    annotations: pa.Table | None = None,
    graph_node_count: int | None = None,
    window: tuple[int, int] | None = None,
    microkernel_threshold_ns: int = MICROKERNEL_THRESHOLD_NS,
    consecutive_kernel_delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS,
    float_timestamps: bool = False,
) -> dict[str, Any]:
    """Everything above as one JSON-ready dict (:data:`aaco.session.paths.DERIVED_METRICS_FILE`).

    Keys: ``gpu_active_ratio`` (fraction), ``gpu_active_ratio_per_device``, ``kar``,
    ``microkernel_pct`` (%), ``launch_rate_per_s`` (1/s), ``launch_tax_score``,
    ``kernel_count``, ``kernels_per_iteration``, ``temporal_breakdown`` (per device, over
    HTA's selection of events, device-side stream syncs included), ``temporal_breakdown_hta``
    (HTA 0.5's figure exactly: :func:`hta_temporal_breakdown`, rounded to µs when
    ``float_timestamps``: the trace wrote a ``ts`` as a JSON float), ``hta_selection``
    (events kept / dropped), ``idle_breakdown`` (over HTA's selection), ``launch_stats``
    (None without API calls), ``window`` {start_ns, end_ns, source}, ``units``. Iterations
    are the distinct ``iteration`` values of the kernels, else the ``step`` annotations.
    """
    win = measured_window(kernels, memcpy, annotations, window)
    ws, we = win["start_ns"], win["end_ns"]
    window_ns = we - ws if ws is not None and we is not None and we > ws else None
    active = gpu_active_ratio(kernels, ws, we)
    iterations: int | None = None
    if kernels.num_rows and kernels.column("iteration").null_count < kernels.num_rows:
        iterations = len(pc.unique(kernels.column("iteration").drop_null()))
    elif annotations is not None and annotations.num_rows:
        n_steps = int(pc.sum(pc.equal(annotations.column("kind"), "step")).as_py() or 0)
        iterations = n_steps or None
    lm = launch_metrics(kernels, graph_node_count, iterations, window_ns, microkernel_threshold_ns)
    has_api = api_calls is not None and api_calls.num_rows > 0
    launches = match_launches(kernels, api_calls) if has_api else None
    copy_launches = (
        match_copies(memcpy, api_calls)
        if has_api and memcpy is not None and memcpy.num_rows
        else None
    )
    syncs = _stream_syncs(api_calls)
    sel_k, sel_m, sel_s = select_gpu_events(kernels, memcpy, syncs, api_calls, annotations)
    if sel_k.num_rows == kernels.num_rows and _rows(sel_m) == _rows(memcpy):
        sel_launches, sel_copies = launches, copy_launches
    else:
        sel_launches = match_launches(sel_k, api_calls) if has_api else None
        sel_copies = (
            match_copies(sel_m, api_calls)
            if has_api and sel_m is not None and sel_m.num_rows
            else None
        )
    idle = idle_breakdown(sel_k, sel_m, sel_launches, sel_copies, consecutive_kernel_delay_ns)
    selection = {
        "kernels_kept": sel_k.num_rows,
        "kernels_dropped": kernels.num_rows - sel_k.num_rows,
        "copies_dropped": _rows(memcpy) - _rows(sel_m),
        "stream_syncs_kept": _rows(sel_s),
        "rule": "GPU events launched before the last ProfilerStep starts (HTA's default)"
        if _step_cut(annotations) is not None
        else "all (fewer than two ProfilerStep annotations)",
    }
    return {
        "gpu_active_ratio": active["overall"],
        "gpu_active_ratio_per_device": {str(k): v for k, v in active["per_device"].items()},
        "kar": lm["kar"],
        "microkernel_pct": lm["microkernel_pct"],
        "microkernel_threshold_ns": microkernel_threshold_ns,
        "launch_rate_per_s": lm["launch_rate_per_s"],
        "launch_tax_score": lm["launch_tax_score"],
        "kernel_count": lm["kernel_count"],
        "iterations": iterations,
        "graph_node_count": graph_node_count,
        "kernels_per_iteration": lm["kernels_per_iteration"],
        "temporal_breakdown": temporal_breakdown(sel_k, sel_m, sel_s),
        "temporal_breakdown_hta": hta_temporal_breakdown(
            kernels, memcpy, api_calls, annotations, round_us=float_timestamps
        ),
        "hta_selection": selection,
        "idle_breakdown": idle.to_pylist(),
        "consecutive_kernel_delay_ns": consecutive_kernel_delay_ns,
        "launch_stats": launch_stats(kernels, api_calls, launches)
        if has_api and api_calls is not None
        else None,
        "window": win,
        "units": {
            "gpu_active_ratio": "fraction",
            "microkernel_pct": "%",
            "launch_rate_per_s": "1/s",
            "launch_tax_score": "",
            "kar": "kernels per graph node",
            "*_ns": "ns",
            "*_pct": "%",
        },
    }
