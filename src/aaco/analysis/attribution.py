"""Tie every GPU kernel to the operator that launched it, and sum kernels per operator.

:func:`attribute_kernels` returns one OP_KERNEL_MAP row per kernel row. Methods are tried in
this order; a kernel keeps the first that answers:

``parent_node``
    ONNX Runtime ``Kernel`` events (``source`` ``onnxruntime``). The ORT reader gives each
    kernel the ``iteration``, ``thread_id`` and ``start_ns`` of its parent node (see
    :mod:`aaco.importers.ort_profile`), so the op is the ORT ops row with that same key.
    When two nodes share the key (a node shorter than ORT's microsecond clock), the later
    row wins, as in ORT's own matching (its correlation id is the node's start time).
``external_id``
    Kineto: a kernel's ``External id`` is that of the ``cpu_op`` that launched it, i.e. the
    innermost framework op active at the launch (the ATen leaf such as ``aten::addmm``, not
    ``aten::linear`` around it). The op is the ops row with the same ``(process_id,
    external_id)``; should several rows share it, the innermost (latest-starting) one.
    :func:`outermost_ops` gives the top-level op (``aten::linear``) of any op row.
``correlation`` / ``time_window``
    The kernel's launch call (same correlation id, :func:`aaco.analysis.launches.
    match_launches`) started on some thread at time t; the op is the innermost op on that
    thread whose ``[start_ns, start_ns + dur_ns]`` contains t (CPU-op nesting). The method is
    ``correlation`` when that op came from the same trace as the launch (it carries a
    process id or an External id, as Kineto ops do) and ``time_window`` when it came from
    another profile on the same clock (ONNX Runtime node events next to a rocprofv3 trace).
``marker``
    The innermost roctx/NVTX/``record_function`` range (annotations of kind ``marker`` or
    ``user``) on the launching thread that contains the launch call. ``op_row`` and
    ``op_type`` stay null (a range is not an ops row); ``op_name`` is the range's name.

Anything else is unattributed: null op columns and null method, counted as such by
:func:`attribution_summary`. Everything is vectorized (numpy sorts, binary searches and a
sparse table for interval stabbing), so millions of kernels take seconds, not minutes.

Example::

    op_map = attribute_kernels(s.table("kernels"), s.table("ops"), s.table("api_calls"))
    groups = kernel_groups(op_map, s.table("ops"), s.table("api_calls"))
    attribution_summary(op_map)["gpu_time_attributed_share"]
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.launches import match_launches
from aaco.analysis.ops import distinct_codes
from aaco.session.schema import KERNEL_GROUPS, OP_KERNEL_MAP

__all__ = [
    "METHODS",
    "attribute_kernels",
    "attribution_summary",
    "kernel_groups",
    "outermost_ops",
]

#: attribution methods in the order they are tried
METHODS = ("parent_node", "external_id", "correlation", "time_window", "marker")
_PARENT, _EXTERNAL, _CORRELATION, _TIME_WINDOW, _MARKER = range(len(METHODS))
_ORT = "onnxruntime"
_MARKER_KINDS = ("marker", "user")
_NONE = -1  # "no row" in the int64 row arrays below


# --------------------------------------------------------------------------- column helpers


def _ints(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with nulls as 0, validity) of a column; all-invalid when it is absent."""
    n = table.num_rows
    if name not in table.column_names:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    col = table.column(name)
    valid = (
        np.ones(n, dtype=bool)
        if col.null_count == 0
        else pc.is_valid(col).to_numpy(zero_copy_only=False)
    )
    values = pc.fill_null(col, 0).cast(pa.int64()).to_numpy()
    return np.asarray(values, dtype=np.int64), np.asarray(valid, dtype=bool)


def _equals(table: pa.Table, name: str, value: str) -> np.ndarray:
    if name not in table.column_names or table.num_rows == 0:
        return np.zeros(table.num_rows, dtype=bool)
    eq = pc.fill_null(pc.equal(table.column(name), value), False)
    return np.asarray(eq.to_numpy(zero_copy_only=False), dtype=bool)


# --------------------------------------------------------------------------- key matching


def _codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes of an int64 array (the rank of each value among the distinct ones) and
    how many distinct values, by :func:`aaco.analysis.ops.distinct_codes` (a table or a
    sort: with ~10^6 distinct values, hashing them, as Arrow's dictionary encoding does,
    takes ~0.35 µs a row, sorting ~0.05 µs)."""
    uniq, rank, _ = distinct_codes(values.astype(np.int64, copy=False))
    return rank, len(uniq)


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of an integer array, by sorting. NumPy 2.3-2.4's hash-based
    ``np.unique`` (taken when no index or inverse is asked for) needs ~1.2 µs per distinct
    integer: 1.7 s for 1.5 M timestamps, against 25 ms for a sort."""
    ordered: np.ndarray = np.sort(values)
    if ordered.size == 0:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return np.asarray(ordered[keep])


def _factorize(*keys: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """Dense int64 group ids of key tuples (one array per key column), shared by all sides."""
    sizes = [len(k[0]) for k in keys]
    width = len(keys[0])
    code = np.zeros(sum(sizes), dtype=np.int64)
    for c in range(width):
        column = np.concatenate([k[c] for k in keys]).astype(np.int64, copy=False)
        sub, card = _codes(column)
        # Re-encode the pair so codes stay < n and never overflow, however many columns.
        code, _ = _codes(code * card + sub)
    return list(np.split(code, np.cumsum(sizes)[:-1]))


def _exact_lookup(
    target_keys: tuple[np.ndarray, ...],
    target_rank: np.ndarray,
    query_keys: tuple[np.ndarray, ...],
) -> np.ndarray:
    """For each query, the target row with equal keys and the highest rank; -1 when none."""
    n_q = len(query_keys[0])
    if n_q == 0 or len(target_keys[0]) == 0:
        return np.full(n_q, _NONE, dtype=np.int64)
    gid_t, gid_q = _factorize(target_keys, query_keys)
    # Sort targets by (group, rank): the last row of each group is the wanted one.
    order = np.lexsort((target_rank, gid_t))
    g_sorted = gid_t[order]
    last = np.searchsorted(g_sorted, gid_q, side="right") - 1
    ok = last >= 0
    ok[ok] = g_sorted[last[ok]] == gid_q[ok]
    out = np.full(n_q, _NONE, dtype=np.int64)
    out[ok] = order[last[ok]]
    return out


class _Intervals:
    """Intervals grouped by an integer key, for "innermost interval containing t" queries.

    Sorted by (group, start, end descending) so that, among intervals containing t, the
    innermost one is the last one that starts at or before t and ends at or after t. That
    "last index j <= k with end[j] >= t" is found with a sparse table of running maxima of
    ``end``, descending one power of two at a time (all queries at once). The table holds
    the ends' ranks among the distinct ends as int32 (``end >= t`` exactly when the end's
    rank is at least the number of distinct ends below ``t``): half the memory of the
    int64 times, ~90 MB less at a million intervals.
    """

    def __init__(self, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        order = np.lexsort((-end, start, group))
        self.order = order
        self.group = group[order]
        self.start = start[order]
        self.end = end[order]
        # Ranks of start times: (group, rank) packs into one sortable int64 key.
        self.times = _sorted_unique(self.start)
        self.span = len(self.times) + 1
        self.keys = self.group * self.span + np.searchsorted(self.times, self.start)
        self.end_values = _sorted_unique(self.end)
        levels = [np.searchsorted(self.end_values, self.end).astype(np.int32)]
        step = 1
        while step < len(self.end):
            prev = levels[-1]
            nxt = prev.copy()
            np.maximum(prev[step:], prev[:-step], out=nxt[step:])
            levels.append(nxt)
            step *= 2
        self.levels = levels

    def innermost(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Row (in the caller's order) of the innermost interval of ``group`` holding ``t``."""
        n = len(t)
        out = np.full(n, _NONE, dtype=np.int64)
        if n == 0 or len(self.end) == 0:
            return out
        rank = np.searchsorted(self.times, t, side="right") - 1
        pos = np.searchsorted(self.keys, group * self.span + rank, side="right") - 1
        # an end >= t  <=>  its rank >= the number of distinct ends below t
        t_rank = np.searchsorted(self.end_values, t, side="left")
        for p in range(len(self.levels) - 1, -1, -1):
            live = pos >= 0
            block_max = np.where(live, self.levels[p][np.maximum(pos, 0)], t_rank)
            skip = live & (block_max < t_rank)
            pos = np.where(skip, pos - (1 << p), pos)
        found = pos >= 0
        safe = np.maximum(pos, 0)
        found &= self.group[safe] == group
        found &= self.start[safe] <= t
        found &= self.end[safe] >= t
        out[found] = self.order[pos[found]]
        return out


def _thread_groups(
    a_pid: tuple[np.ndarray, np.ndarray],
    a_tid: np.ndarray,
    b_pid: tuple[np.ndarray, np.ndarray],
    b_tid: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Shared thread group ids; the process id takes part only when both sides know it."""
    use_pid = bool(a_pid[1].any() and b_pid[1].any())
    a_keys: tuple[np.ndarray, ...] = (a_tid,)
    b_keys: tuple[np.ndarray, ...] = (b_tid,)
    if use_pid:
        a_keys = (np.where(a_pid[1], a_pid[0], -1), a_tid)
        b_keys = (np.where(b_pid[1], b_pid[0], -1), b_tid)
    ga, gb = _factorize(a_keys, b_keys)
    return ga, gb


# --------------------------------------------------------------------------- the map


def attribute_kernels(
    kernels: pa.Table,
    ops: pa.Table,
    api_calls: pa.Table,
    annotations: pa.Table | None = None,
) -> pa.Table:
    """One OP_KERNEL_MAP row per kernel row: its operator and how it was found.

    ``kernels``, ``ops``, ``api_calls`` and ``annotations`` follow the KERNELS, OPS,
    API_CALLS and ANNOTATIONS schemas and must share one clock for the time-based methods
    (see the module docstring for the methods and their order). ``op_row`` indexes ``ops``
    and ``launch_row`` indexes ``api_calls`` as given.
    """
    n = kernels.num_rows
    if n == 0:
        return OP_KERNEL_MAP.empty()
    op_row = np.full(n, _NONE, dtype=np.int64)
    method = np.full(n, _NONE, dtype=np.int8)  # index into METHODS
    done = np.zeros(n, dtype=bool)
    marker_row = np.full(n, _NONE, dtype=np.int64)  # row in annotations

    k_iter, k_iter_ok = _ints(kernels, "iteration")
    k_tid, k_tid_ok = _ints(kernels, "thread_id")
    k_pid = _ints(kernels, "process_id")
    k_start, _ = _ints(kernels, "start_ns")
    o_iter, o_iter_ok = _ints(ops, "iteration")
    o_tid, o_tid_ok = _ints(ops, "thread_id")
    o_pid = _ints(ops, "process_id")
    o_start, o_start_ok = _ints(ops, "start_ns")
    o_dur, _ = _ints(ops, "dur_ns")
    o_rows = np.arange(ops.num_rows, dtype=np.int64)

    # 1. parent_node: ORT kernel rows carry their parent node's (iteration, thread, start).
    want = _equals(kernels, "source", _ORT) & k_iter_ok & k_tid_ok
    if want.any():
        cand = _equals(ops, "source", _ORT) & o_iter_ok & o_tid_ok & o_start_ok
        hit = _exact_lookup(
            (o_iter[cand], o_tid[cand], o_start[cand]),
            o_rows[cand],
            (k_iter[want], k_tid[want], k_start[want]),
        )
        _assign(op_row, method, want, np.where(hit >= 0, o_rows[cand][hit], _NONE), _PARENT, done)

    # 2. external_id: the op that carries the kernel's External id (innermost if several).
    k_ext, k_ext_ok = _ints(kernels, "external_id")
    o_ext, o_ext_ok = _ints(ops, "external_id")
    want = ~done & k_ext_ok
    if want.any() and o_ext_ok.any():
        cand = o_ext_ok
        use_pid = bool(k_pid[1][want].any() and o_pid[1][cand].any())
        t_keys: tuple[np.ndarray, ...] = (o_ext[cand],)
        q_keys: tuple[np.ndarray, ...] = (k_ext[want],)
        if use_pid:
            t_keys = (np.where(o_pid[1], o_pid[0], -1)[cand], o_ext[cand])
            q_keys = (np.where(k_pid[1], k_pid[0], -1)[want], k_ext[want])
        # rank: latest start, then later row, is the innermost op sharing the id
        rank = np.lexsort((o_rows[cand], o_start[cand]))
        inv = np.empty_like(rank)
        inv[rank] = np.arange(len(rank))
        hit = _exact_lookup(t_keys, inv, q_keys)
        _assign(op_row, method, want, np.where(hit >= 0, o_rows[cand][hit], _NONE), _EXTERNAL, done)

    # 3. launch call -> innermost op on its thread containing it (correlation / time_window)
    launch_row = np.full(n, _NONE, dtype=np.int64)
    launch_delay = np.zeros(n, dtype=np.int64)
    delay_ok = np.zeros(n, dtype=bool)
    l_start = np.zeros(n, dtype=np.int64)
    l_tid = np.zeros(n, dtype=np.int64)
    l_tid_ok = np.zeros(n, dtype=bool)
    if api_calls.num_rows:
        m = match_launches(kernels, api_calls)
        kr, _ = _ints(m, "kernel_row")
        lr, lr_ok = _ints(m, "launch_row")
        ls, _ = _ints(m, "launch_start_ns")
        ld, ld_ok = _ints(m, "launch_delay_ns")
        lt, lt_ok = _ints(m, "launch_thread_id")
        launch_row[kr[lr_ok]] = lr[lr_ok]
        l_start[kr] = ls
        launch_delay[kr] = ld
        delay_ok[kr] = ld_ok & lr_ok
        l_tid[kr] = np.where(lt_ok, lt, k_tid[kr])
        l_tid_ok[kr] = lr_ok & (lt_ok | k_tid_ok[kr])
    has_launch = launch_row != _NONE

    a_pid = _ints(api_calls, "process_id")
    l_pid_v = np.zeros(n, dtype=np.int64)
    l_pid_ok = np.zeros(n, dtype=bool)
    if has_launch.any():
        rows = launch_row[has_launch]
        l_pid_v[has_launch] = a_pid[0][rows]
        l_pid_ok[has_launch] = a_pid[1][rows]

    want = ~done & has_launch & l_tid_ok
    cand = o_tid_ok & o_start_ok
    if want.any() and cand.any():
        g_ops, g_q = _thread_groups(
            (o_pid[0][cand], o_pid[1][cand]),
            o_tid[cand],
            (l_pid_v[want], l_pid_ok[want]),
            l_tid[want],
        )
        iv = _Intervals(g_ops, o_start[cand], o_start[cand] + o_dur[cand])
        hit = iv.innermost(g_q, l_start[want])
        rows = np.where(hit >= 0, o_rows[cand][np.maximum(hit, 0)], _NONE)
        # An op from the launch's own trace carries a process id or an External id.
        same_trace = (o_pid[1] | o_ext_ok)[np.maximum(rows, 0)]
        labels = np.where(same_trace, _CORRELATION, _TIME_WINDOW).astype(np.int8)
        _assign(op_row, method, want, rows, labels, done)

    # 4. marker: innermost marker/user range on the launching thread containing the launch
    want = ~done & has_launch
    if annotations is not None and annotations.num_rows and want.any():
        is_marker = np.asarray(
            pc.fill_null(
                pc.is_in(annotations.column("kind"), pa.array(_MARKER_KINDS)), False
            ).to_numpy(zero_copy_only=False),
            dtype=bool,
        )
        a_rows = np.arange(annotations.num_rows, dtype=np.int64)
        a_start, a_start_ok = _ints(annotations, "start_ns")
        a_dur, _ = _ints(annotations, "dur_ns")
        a_tid, a_tid_ok = _ints(annotations, "thread_id")
        # Ranges with a thread match on it; ranges without one (process-wide) match any.
        for threaded in (True, False):
            sel = is_marker & a_start_ok & (a_tid_ok if threaded else ~a_tid_ok)
            q = want & ~done & (l_tid_ok if threaded else np.ones(n, dtype=bool))
            if not sel.any() or not q.any():
                continue
            if threaded:
                g_a, g_q = _factorize((a_tid[sel],), (l_tid[q],))
            else:
                g_a = np.zeros(int(sel.sum()), dtype=np.int64)
                g_q = np.zeros(int(q.sum()), dtype=np.int64)
            iv = _Intervals(g_a, a_start[sel], a_start[sel] + a_dur[sel])
            hit = iv.innermost(g_q, l_start[q])
            found = hit >= 0
            idx = np.flatnonzero(q)[found]
            marker_row[idx] = a_rows[sel][hit[found]]
            method[idx] = _MARKER
            done[idx] = True

    # The launch delay only means something when the kernel start is a device timestamp.
    gpu_time = np.asarray(
        pc.fill_null(kernels.column("time_is_gpu"), False).to_numpy(zero_copy_only=False),
        dtype=bool,
    )
    delay_ok &= gpu_time

    attributed = op_row != _NONE
    op_rows = pa.array(op_row, mask=~attributed)
    op_name = _take_text(ops, "node_name", op_rows)
    if annotations is not None and (marker_row != _NONE).any():
        marker_rows = pa.array(marker_row, mask=marker_row == _NONE)
        op_name = pc.coalesce(op_name, _take_text(annotations, "name", marker_rows))
    methods = pa.DictionaryArray.from_arrays(
        pa.array(method, mask=method == _NONE), pa.array(METHODS)
    ).cast(pa.string())
    return OP_KERNEL_MAP.from_columns(
        {
            "kernel_row": np.arange(n, dtype=np.int64),
            "kernel_name": kernels.column("name").combine_chunks(),
            "family": kernels.column("family").combine_chunks(),
            "dur_ns": kernels.column("dur_ns").combine_chunks(),
            "op_row": op_rows,
            "op_name": op_name,
            "op_type": _take_text(ops, "op_type", op_rows),
            "method": methods,
            "launch_row": pa.array(launch_row, mask=~has_launch),
            "launch_delay_ns": pa.array(launch_delay, mask=~delay_ok),
        }
    )


def _assign(
    op_row: np.ndarray,
    method: np.ndarray,
    want: np.ndarray,
    rows: np.ndarray,
    label: int | np.ndarray,
    done: np.ndarray,
) -> None:
    """Write the found rows (>= 0) of the ``want`` subset, with their method code(s)."""
    idx = np.flatnonzero(want)
    found = rows >= 0
    op_row[idx[found]] = rows[found]
    method[idx[found]] = label if isinstance(label, int) else label[found]
    done[idx[found]] = True


def _take_text(table: pa.Table, name: str, rows: pa.Array) -> pa.Array:
    """``table[name][rows]`` as one string array (null rows give null)."""
    if table.num_rows == 0 or name not in table.column_names:
        return pa.nulls(len(rows), pa.string())
    col = table.column(name).combine_chunks()
    return pc.take(col, rows).cast(pa.string())


# --------------------------------------------------------------------------- op nesting


def outermost_ops(ops: pa.Table) -> pa.Array:
    """For every ops row, the row of the top-level op that contains it on its thread.

    A top-level op (``aten::linear``) maps to itself; an op nested in it (``aten::addmm``)
    maps to it. Ops without a thread or start map to themselves. Ops on one thread are
    assumed properly nested, as framework op ranges are.
    """
    n = ops.num_rows
    rows = np.arange(n, dtype=np.int64)
    if n == 0:
        return pa.array(rows)
    tid, tid_ok = _ints(ops, "thread_id")
    pid, pid_ok = _ints(ops, "process_id")
    start, start_ok = _ints(ops, "start_ns")
    dur, _ = _ints(ops, "dur_ns")
    ok = tid_ok & start_ok
    out = rows.copy()
    if not ok.any():
        return pa.array(out)
    (group,) = _factorize((np.where(pid_ok, pid, -1)[ok], tid[ok]))
    s, e, r = start[ok], start[ok] + dur[ok], rows[ok]
    order = np.lexsort((-e, s, group))
    g, s, e, r = group[order], s[order], e[order], r[order]
    # Running max of end within each thread: an op is top-level when it starts after every
    # earlier op of its thread has ended (or is the first of its thread).
    first = np.ones(len(g), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    prev_end = np.empty_like(e)
    prev_end[1:] = e[:-1]
    prev_end[first] = np.iinfo(np.int64).min  # nothing of this thread has run yet
    # cumulative max per group via offsetting groups apart is unsafe with big times: do it
    # with maximum.accumulate and a reset at group starts.
    running = _grouped_cummax(prev_end, first)
    top = first | (s >= running)
    top_idx = np.where(top, np.arange(len(g)), 0)
    top_idx = np.maximum.accumulate(top_idx)
    out[r] = r[top_idx]
    return pa.array(out)


def _grouped_cummax(values: np.ndarray, resets: np.ndarray) -> np.ndarray:
    """Cumulative maximum of ``values`` that restarts where ``resets`` is true."""
    out = values.copy()
    starts = np.flatnonzero(resets)
    bounds = np.append(starts, len(values))
    for a, b in itertools.pairwise(bounds):
        # one vectorized accumulate per thread (threads are few)
        np.maximum.accumulate(out[a:b], out=out[a:b])
    return np.asarray(out, dtype=np.int64)


# --------------------------------------------------------------------------- per-op groups


def kernel_groups(
    op_map: pa.Table,
    ops: pa.Table,
    api_calls: pa.Table,
    kernels: pa.Table | None = None,
) -> pa.Table:
    """KERNEL_GROUPS: one row per (op_name, op_type) that has attributed kernels.

    ``op_calls`` and ``cpu_time_ns`` count the ops rows of that name and type (0 for marker
    ranges, which are not ops rows); ``launch_overhead_ns`` sums the durations of the launch
    calls of its kernels, null when none is known; ``top_kernel`` is the kernel with the most
    total time, by ``short_name`` when ``kernels`` is given and has one, else by name.
    Sorted by GPU time, largest first.
    """
    mask = pc.is_valid(op_map.column("op_name"))
    m = op_map.filter(mask)
    if m.num_rows == 0:
        return KERNEL_GROUPS.empty()
    names = m.column("kernel_name")
    if kernels is not None and "short_name" in kernels.column_names:
        short = pc.take(kernels.column("short_name"), m.column("kernel_row"))
        names = pc.coalesce(short, names)
    launch_dur: pa.Array | pa.ChunkedArray = pa.nulls(m.num_rows, pa.int64())
    if api_calls.num_rows:
        lr = m.column("launch_row")
        launch_dur = pc.take(api_calls.column("dur_ns"), lr)
    work = pa.table(
        {
            "op_name": m.column("op_name"),
            "op_type": m.column("op_type"),
            "kname": names,
            "family": m.column("family"),
            "dur_ns": m.column("dur_ns"),
            "launch_dur": launch_dur,
        }
    )
    keys = ["op_name", "op_type"]
    base = work.group_by(keys, use_threads=False).aggregate(
        [("dur_ns", "count"), ("dur_ns", "sum"), ("launch_dur", "sum"), ("launch_dur", "count")]
    )
    top = _top_per_group(work, keys, "kname")
    fam = _ranked_lists(work, keys, "family")

    op_stats = pa.table(
        {
            "op_name": ops.column("node_name") if ops.num_rows else pa.array([], pa.string()),
            "op_type": ops.column("op_type") if ops.num_rows else pa.array([], pa.string()),
            "dur_ns": ops.column("dur_ns") if ops.num_rows else pa.array([], pa.int64()),
        }
    )
    op_stats = op_stats.group_by(keys, use_threads=False).aggregate(
        [("dur_ns", "count"), ("dur_ns", "sum")]
    )
    out = _left_join(base, op_stats, keys, ("op_calls", "cpu_time_ns"))
    out = _left_join(out, top, keys, ("top_kernel",))
    out = _left_join(out, fam, keys, ("families",))

    count = out.column("dur_ns_count").cast(pa.int64())
    calls = pc.fill_null(out.column("op_calls"), 0).cast(pa.int64())
    per_call = pc.if_else(
        pc.greater(calls, 0),
        pc.divide(count.cast(pa.float64()), calls.cast(pa.float64())),
        pa.scalar(None, pa.float64()),
    )
    launch = pc.if_else(
        pc.greater(out.column("launch_dur_count"), 0),
        out.column("launch_dur_sum"),
        pa.scalar(None, pa.int64()),
    )
    table = KERNEL_GROUPS.from_columns(
        {
            "op_name": out.column("op_name"),
            "op_type": out.column("op_type"),
            "op_calls": calls,
            "kernel_count": count,
            "kernels_per_call": per_call,
            "gpu_time_ns": out.column("dur_ns_sum"),
            "cpu_time_ns": pc.fill_null(out.column("cpu_time_ns"), 0),
            "launch_overhead_ns": launch,
            "top_kernel": out.column("top_kernel"),
            # one chunk: pa.array() cannot take a chunked list column holding nulls
            "families": out.column("families").combine_chunks(),
        }
    )
    order = pc.sort_indices(
        table, [("gpu_time_ns", "descending"), ("op_name", "ascending"), ("op_type", "ascending")]
    )
    return table.take(order)


def _key_struct(table: pa.Table, keys: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(table.column(k).to_pylist() for k in keys), strict=True))


def _left_join(left: pa.Table, right: pa.Table, keys: list[str], take: tuple[str, ...]) -> pa.Table:
    """Add columns of ``right`` (unique on ``keys``) to ``left``, null keys matching nulls.

    Group tables are small (one row per operator), so a dict lookup is plenty fast and,
    unlike Arrow's hash join, treats a null op_type as a key value.
    """
    index = {k: i for i, k in enumerate(_key_struct(right, keys))}
    rows = [index.get(k) for k in _key_struct(left, keys)]
    idx = pa.array(rows, type=pa.int64())
    value_cols = [c for c in right.column_names if c not in keys]
    for new_name, col in zip(take, value_cols, strict=True):
        left = left.append_column(new_name, pc.take(right.column(col), idx))
    return left


def _top_per_group(work: pa.Table, keys: list[str], col: str) -> pa.Table:
    """Per group, the value of ``col`` with the most total ``dur_ns`` (ties: smallest)."""
    t = work.group_by([*keys, col], use_threads=False).aggregate([("dur_ns", "sum")])
    t = t.take(
        pc.sort_indices(
            t,
            [*((k, "ascending") for k in keys), ("dur_ns_sum", "descending"), (col, "ascending")],
        )
    )
    seen: dict[tuple[Any, ...], Any] = {}
    for key, value in zip(_key_struct(t, keys), t.column(col).to_pylist(), strict=True):
        seen.setdefault(key, value)
    return pa.table(
        {
            keys[0]: pa.array([k[0] for k in seen], pa.string()),
            keys[1]: pa.array([k[1] for k in seen], pa.string()),
            "top": pa.array(list(seen.values()), pa.string()),
        }
    )


def _ranked_lists(work: pa.Table, keys: list[str], col: str) -> pa.Table:
    """Per group, the non-null values of ``col`` ordered by total ``dur_ns``, largest first."""
    t = work.filter(pc.is_valid(work.column(col)))
    t = t.group_by([*keys, col], use_threads=False).aggregate([("dur_ns", "sum")])
    t = t.take(
        pc.sort_indices(
            t,
            [*((k, "ascending") for k in keys), ("dur_ns_sum", "descending"), (col, "ascending")],
        )
    )
    lists: dict[tuple[Any, ...], list[str]] = {}
    for key, value in zip(_key_struct(t, keys), t.column(col).to_pylist(), strict=True):
        lists.setdefault(key, []).append(value)
    return pa.table(
        {
            keys[0]: pa.array([k[0] for k in lists], pa.string()),
            keys[1]: pa.array([k[1] for k in lists], pa.string()),
            "families": pa.array(list(lists.values()), pa.list_(pa.string())),
        }
    )


# --------------------------------------------------------------------------- summary


def attribution_summary(op_map: pa.Table) -> dict[str, Any]:
    """How much was attributed, in kernels and in GPU time, overall and by method.

    Shares are null when there is nothing to share (no kernels, or zero GPU time).
    """
    n = op_map.num_rows
    dur, _ = _ints(op_map, "dur_ns")
    methods = op_map.column("method")
    attributed = np.asarray(pc.is_valid(methods).to_numpy(zero_copy_only=False), dtype=bool)
    total = int(dur.sum())
    done = int(dur[attributed].sum())
    by_method: dict[str, dict[str, Any]] = {}
    for name in METHODS:
        sel = _equals(op_map, "method", name)
        if sel.any():
            t = int(dur[sel].sum())
            by_method[name] = {
                "kernels": int(sel.sum()),
                "gpu_time_ns": t,
                "gpu_time_share": t / total if total else None,
            }
    k_attr = int(attributed.sum())
    return {
        "kernels": n,
        "kernels_attributed": k_attr,
        "kernels_unattributed": n - k_attr,
        "kernels_attributed_fraction": k_attr / n if n else None,
        "gpu_time_ns": total,
        "gpu_time_attributed_ns": done,
        "gpu_time_attributed_share": done / total if total else None,
        "gpu_time_unattributed_share": (total - done) / total if total else None,
        "by_method": by_method,
    }
