"""Where the time went, operator by operator: aggregates of the profiled pass and coverage."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def op_aggregates(ops: pa.Table, by: str = "node_name") -> pa.Table:
    """Per node (``by="node_name"``) or per op type (``by="op_type"``) time totals.

    Columns: ``node_name`` (node level only), ``op_type``, ``provider``, ``calls``
    (executions over all profiled iterations), ``total_ns`` (summed duration), ``mean_ns``
    (per call), ``ns_per_iter`` (total / profiled iterations), ``pct`` (share of all node
    time, 0-100); sorted by ``total_ns`` descending.
    """
    if by not in ("node_name", "op_type"):
        raise ValueError(f"op_aggregates: by must be node_name or op_type, not {by!r}")
    keys = ["node_name", "op_type", "provider"] if by == "node_name" else ["op_type", "provider"]
    n_iters = max(1, len(pc.unique(ops.column("iteration")).drop_null())) if ops.num_rows else 1
    grouped = ops.group_by(keys).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    total = grouped.column("dur_ns_sum").cast(pa.float64())
    calls = grouped.column("dur_ns_count").cast(pa.int64())
    total_all = pc.sum(total).as_py() or 0.0
    out = grouped.select(keys)
    out = out.append_column("calls", calls)
    out = out.append_column("total_ns", grouped.column("dur_ns_sum").cast(pa.int64()))
    out = out.append_column("mean_ns", pc.divide(total, calls.cast(pa.float64())))
    out = out.append_column("ns_per_iter", pc.divide(total, float(n_iters)))
    pct = pc.multiply(pc.divide(total, total_all), 100.0) if total_all else pc.multiply(total, 0.0)
    out = out.append_column("pct", pct)
    return out.sort_by([("total_ns", "descending")])


def profile_coverage(
    ops: pa.Table,
    runs: pa.Table | None,
    measured_mean_ms: float | None,
    measured_p50_ms: float | None = None,
) -> dict[str, Any]:
    """How much of the measured latency the operator times account for.

    - ``node_ms_per_iter``: summed node durations per profiled iteration (mean);
    - ``node_ms_per_iter_p50``: median over profiled iterations of their summed node time;
    - ``ort_run_ms_per_iter`` / ``ort_run_ms_p50``: mean / median ``model_run`` duration
      inside ORT (profiled pass);
    - ``coverage``: node_ms_per_iter_p50 / measured p50 latency (unprofiled pass), a
      fraction; medians, because one slow profiled iteration out of ten would otherwise
      move the figure by tens of percent;
    - ``node_share_of_ort_run``: node_ms_per_iter_p50 / ort_run_ms_p50, within the profiled
      pass alone;
    - ``profiled_wall_ms_p50``: median wall time of the profiled runs' ``session.run`` calls,
      timed exactly like the measured iterations (null when not recorded);
    - ``coverage_same_pass``: median over profiled runs of node time / that run's wall time:
      the share of the latency operators account for, immune to the machine changing speed
      between the two passes;
    - ``profiler_inflation``: profiled wall p50 (else ORT run p50) / measured p50: how much
      slower the profiled pass ran than the measured one (ORT's profiler costs a few µs per
      node; a busy machine moves it either way); far from 1, ``coverage`` is unreliable;
    - ``overhead_ms``: measured mean - node_ms_per_iter, the time no operator accounts for
      (session.run binding, input/output copies, executor scheduling, thread hand-offs);
    - ``ort_internal_overhead_ms``: ort_run_ms_per_iter - node_ms_per_iter.
    Values that cannot be computed are None.
    """
    n_iters = len(pc.unique(ops.column("iteration")).drop_null()) if ops.num_rows else 0
    node_ms = (pc.sum(ops.column("dur_ns")).as_py() or 0) / 1e6 / n_iters if n_iters else None
    ort_ms = ort_p50 = None
    if runs is not None and runs.num_rows:
        durs = runs.column("dur_ns").to_numpy().astype(np.float64) / 1e6
        ort_ms, ort_p50 = float(durs.mean()), float(np.median(durs))
    node_p50 = None
    if n_iters:
        per_iter = ops.group_by("iteration").aggregate([("dur_ns", "sum")]).column("dur_ns_sum")
        node_p50 = float(np.median(per_iter.to_numpy())) / 1e6
    p50 = measured_p50_ms if measured_p50_ms is not None else measured_mean_ms
    wall_p50 = same_pass = None
    if n_iters and runs is not None and runs.num_rows and runs.column("wall_ns").null_count == 0:
        wall = runs.column("wall_ns").to_numpy().astype(np.float64)
        node = runs.column("node_ns").to_numpy().astype(np.float64)
        wall_p50 = float(np.median(wall)) / 1e6
        same_pass = float(np.median(node / np.maximum(wall, 1.0)))

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    def diff(a: float | None, b: float | None) -> float | None:
        return a - b if a is not None and b is not None else None

    return {
        "profiled_iterations": n_iters,
        "node_ms_per_iter": node_ms,
        "node_ms_per_iter_p50": node_p50,
        "ort_run_ms_per_iter": ort_ms,
        "ort_run_ms_p50": ort_p50,
        "measured_mean_ms": measured_mean_ms,
        "measured_p50_ms": measured_p50_ms,
        "profiled_wall_ms_p50": wall_p50,
        "coverage": ratio(node_p50, p50),
        "coverage_same_pass": same_pass,
        "node_share_of_ort_run": ratio(node_p50, ort_p50),
        "profiler_inflation": ratio(wall_p50 if wall_p50 is not None else ort_p50, p50),
        "overhead_ms": diff(measured_mean_ms, node_ms),
        "ort_internal_overhead_ms": diff(ort_ms, node_ms),
    }


def _sorted_in_groups(
    groups: np.ndarray[Any, Any], values: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(groups, values) sorted by group, then by value, as ``np.lexsort((values, groups))``
    orders them (whole values sorted as ints come out the same).

    Whole non-negative values (durations in ns) and group ids that fit one int64 together
    are sorted as one key; otherwise group ids that fit 16 bits take a radix sort after one
    sort of the values; both several times faster than the two-key lexsort."""
    n = len(groups)
    if n and int(groups.min()) >= 0:
        g_bits = int(groups.max()).bit_length()
        v_max = float(values.max())
        whole = (
            values.dtype == np.float64
            and v_max < 2.0**53
            and int(values.view(np.int64).min()) >= 0  # no sign bit: no negative, no -0.0
            and bool(np.array_equal(values, np.floor(values)))  # (no NaN either)
        )
        if whole:
            v_bits = int(v_max).bit_length()
            if g_bits + v_bits < 63:
                key = np.sort((groups.astype(np.int64) << v_bits) | values.astype(np.int64))
                mask = (1 << v_bits) - 1
                return key >> v_bits, (key & mask).astype(np.float64)
        if g_bits <= 16:
            by_value = np.argsort(values, kind="stable")  # lexsort's order exactly
            order = by_value[np.argsort(groups[by_value].astype(np.uint16), kind="stable")]
            return groups[order], values[order]
    order = np.lexsort((values, groups))
    return groups[order], values[order]


def group_medians(
    groups: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    n: int,
    size: int | np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Median of ``values`` (>= 0) per group id 0..n-1, every id present; with ``size`` (one
    number, or one per group), each group counts as ``size`` values, the missing ones zeros."""
    g, v = _sorted_in_groups(groups, values)
    starts = np.searchsorted(g, np.arange(n), side="left")
    count = np.searchsorted(g, np.arange(n), side="right") - starts
    total = count if size is None else np.broadcast_to(np.asarray(size, dtype=np.int64), (n,))
    pad = total - count  # zeros sort first

    def at(pos: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        idx = np.minimum(starts + np.maximum(pos - pad, 0), len(v) - 1)
        return np.where(pos < pad, 0.0, v[idx])

    return np.asarray((at((total - 1) // 2) + at(total // 2)) / 2.0)


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Dictionary codes of ``col`` (0 where it is null: mask those apart) and its values."""
    enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    codes = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, enc.dictionary.to_pylist()


def distinct_codes(
    x: np.ndarray[Any, Any], first: bool = False
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None]:
    """``np.unique(x, return_index=first, return_inverse=True)`` of non-negative int64 codes,
    as (sorted distinct values, each row's rank among them, the index of each value's first
    row or None).

    Codes of a range not much larger than ``x`` are ranked through a table of that range
    (linear time) instead of a sort."""
    if len(x) and int(x.min()) >= 0 and int(x.max()) < 4 * len(x) + 1024:
        seen = np.zeros(int(x.max()) + 1, dtype=bool)
        seen[x] = True
        uniq = np.flatnonzero(seen)
        rank = np.cumsum(seen, dtype=np.int64) - 1
        firsts = None
        if first:
            at = np.full(len(seen), len(x), dtype=np.int64)
            np.minimum.at(at, x, np.arange(len(x), dtype=np.int64))
            firsts = at[uniq]
        return uniq.astype(np.int64), rank[x], firsts
    if first:
        u, f, inv = np.unique(x, return_index=True, return_inverse=True)
        return u, inv.reshape(-1), f
    u, inv = np.unique(x, return_inverse=True)
    return u, inv.reshape(-1), None


def per_iteration_medians(
    ops: pa.Table, by: tuple[str, ...] = ("node_name",)
) -> dict[tuple[Any, ...], tuple[float, float]]:
    """Per key (the ``by`` columns' values, None for a null): (the median over the profiled
    iterations of its summed time in each iteration, in ns; its executions per iteration).

    An iteration where the key did not run counts as 0. Iterations are counted within each
    ``source``: rows of an ONNX Runtime profile (10 iterations, say) and of an imported
    trace (100) in one table are two passes, so a node of the first is never given 90
    empty iterations of the second. A key seen in several sources is taken from the one
    that recorded it most often. Medians, so that an execution stalled by a preemption in
    one iteration cannot make a node look slow. Rows without an iteration are left out.
    """
    # only the columns read here: filtering the whole table copies every column
    ops = ops.select(list(dict.fromkeys(("source", "iteration", "dur_ns", *by))))
    if ops.column("iteration").null_count:
        ops = ops.filter(pc.is_valid(ops.column("iteration")))
    if not ops.num_rows:
        return {}
    src, _ = _codes(pc.fill_null(ops.column("source"), ""))
    n_src = int(src.max()) + 1
    it = ops.column("iteration").to_numpy(zero_copy_only=False).astype(np.int64)
    it = it - it.min()
    span = int(it.max()) + 1
    universes, it_idx, _ = distinct_codes(src * span + it)
    iters_of_src = np.bincount(universes // span, minlength=n_src)
    # one code per distinct combination of the ``by`` values (nulls kept as their own
    # value), combined numerically: no separator that a name could contain
    key = np.zeros(ops.num_rows, dtype=np.int64)
    for c in by:
        codes, values = _codes(ops.column(c))
        col = ops.column(c)
        if col.null_count:
            nulls = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False))
            codes = np.where(nulls, len(values), codes)
        key = key * (len(values) + 1) + codes
    _, key, first = distinct_codes(key, first=True)
    assert first is not None
    cols = [ops.column(c).take(pa.array(first)).to_pylist() for c in by]
    names = list(zip(*cols, strict=True))
    pairs, pair, _ = distinct_codes(key * n_src + src)
    n_pairs, n_univ = len(pairs), len(universes)
    dur = ops.column("dur_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    cells, inverse, _ = distinct_codes(pair * n_univ + it_idx)
    sums = np.bincount(inverse, weights=dur)
    size = iters_of_src[pairs % n_src]
    medians = group_medians(cells // n_univ, sums, n_pairs, size=size)
    calls = np.bincount(pair, minlength=n_pairs)
    best: dict[int, int] = {}
    for i, k in enumerate((pairs // n_src).tolist()):
        if k not in best or calls[i] > calls[best[k]]:
            best[k] = i
    return {
        names[k]: (float(medians[i]), float(calls[i]) / float(size[i])) for k, i in best.items()
    }


def typical_ns_per_iter(ops: pa.Table, by: str = "node_name") -> dict[str, float]:
    """Per node (or op type): :func:`per_iteration_medians`' median time per iteration, ns.

    Unlike ``op_aggregates``' ``ns_per_iter`` (a mean), one execution stalled in one
    profiled iteration cannot make a node look slow. An empty table gives ``{}``.
    """
    if by not in ("node_name", "op_type"):
        raise ValueError(f"typical_ns_per_iter: by must be node_name or op_type, not {by!r}")
    return {str(k[0] or ""): v[0] for k, v in per_iteration_medians(ops, (by,)).items()}


#: a nested event may end this much after its parent (ORT rounds times to the microsecond)
_NEST_SLACK_NS = 1000


def exclusive_ns(ops: pa.Table) -> np.ndarray[Any, Any]:
    """Each row's duration less the durations of the rows nested directly inside it.

    ONNX Runtime profiles the nodes of an If/Loop/Scan body as their own events, inside the
    time of the node that ran them; a framework trace nests ``aten::addmm`` in
    ``aten::linear``. A row is nested in the innermost open row of the same ``source``,
    ``iteration`` and ``thread_id`` that started no later and ends no earlier (1 µs slack
    for ORT's rounding). Summing exclusive times counts every nanosecond once. Rows
    without a start time are never nested and never parents; rows with a ``nested_ns``
    (ONNX Runtime profiles since the column exists) already hold their own time alone in
    ``dur_ns`` and are taken as they are. Result in ns, >= 0.
    """
    n = ops.num_rows
    dur = pc.fill_null(ops.column("dur_ns"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    excl = dur.copy()
    if n < 2:
        return np.asarray(excl)
    start_col = ops.column("start_ns")
    valid = np.asarray(pc.is_valid(start_col).to_numpy(zero_copy_only=False))
    if "nested_ns" in ops.column_names:
        # rows whose nesting the importer already took out (ONNX Runtime's) are exclusive
        done = np.asarray(pc.is_valid(ops.column("nested_ns")).to_numpy(zero_copy_only=False))
        valid = valid & ~done
    start = pc.fill_null(start_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    keys = []
    for c in ("source", "iteration", "thread_id"):
        if c in ops.column_names:
            codes, _ = _codes(ops.column(c))
            if ops.column(c).null_count:
                nulls = np.asarray(pc.is_null(ops.column(c)).to_numpy(zero_copy_only=False))
                codes = np.where(nulls, -1, codes)
            keys.append(codes)
    group = np.zeros(n, dtype=np.int64)
    for k in keys:
        group = group * (int(k.max()) + 2) + (k + 1)
    # parents before their children: by group, start, then the longer first
    order = _sweep_order(np.flatnonzero(valid), group, start, dur)
    if len(order):
        excl[order] -= _nested_time(group[order], start[order], dur[order])
    return np.asarray(np.maximum(excl, 0))


def _sweep_order(
    rows: np.ndarray[Any, Any],
    group: np.ndarray[Any, Any],
    start: np.ndarray[Any, Any],
    dur: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """``rows`` sorted by group, start, longer first, then row (``np.lexsort((-dur, start,
    group))``, that stable sort's order restricted to ``rows``).

    Group and start make one int64 key when they fit: a stable sort of one key, fast on a
    trace already in time order, and a lexsort of the few rows that share a group and a
    start, by their durations."""
    if not len(rows):
        return rows
    g, st = group[rows], start[rows]
    g = g - int(g.min())
    lo, span = int(st.min()), int(st.max()) - int(st.min()) + 1
    if (int(g.max()) + 1) * span >= 1 << 62:
        return np.asarray(rows[np.lexsort((-dur[rows], st, g))])
    key = g * span + (st - lo)
    perm = np.argsort(key, kind="stable")
    key = key[perm]
    order = rows[perm]
    tied = np.flatnonzero(key[1:] == key[:-1])
    if len(tied):
        pos = np.union1d(tied, tied + 1)  # the runs of equal keys, each contiguous
        sub = order[pos]
        order[pos] = sub[np.lexsort((-dur[sub], key[pos]))]
    return np.asarray(order)


#: pointer-jumping rounds before the rows still unresolved are walked one by one
_JUMP_ROUNDS = 24


def _nested_time(
    grp: np.ndarray[Any, Any], st: np.ndarray[Any, Any], dur: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Time nested directly inside each row of a sweep sorted by group, then start.

    A stack sweep (pop the rows ending by this row's start, nest it in the top one if it
    ends no later than that one plus the slack, push it) makes a row's parent candidate
    the *latest earlier row of its group still running at its start*: a row is popped
    only by a start at or after its end, and starts only grow, so the rows left on the
    stack above that one have all ended. That candidate is found here without the stack:
    each row points at the row before it, and a pointer at a row that ended by the start
    jumps to that row's own pointer (every row it skips ended by that row's start, so by
    this one's too); pointers jump in rounds over all the unresolved rows at once, the
    skipped chains halving each round, and the few rows left after ``_JUMP_ROUNDS``
    (long staircases of partly overlapping rows) are walked in order, as the stack
    would. Exactly the stack's result, in int64."""
    m = len(st)
    # row m: "no parent", running forever so that a pointer at it is resolved
    en = np.empty(m + 1, dtype=np.int64)
    en[:m] = st + dur
    en[m] = np.iinfo(np.int64).max
    ptr = np.arange(-1, m, dtype=np.int64)
    ptr[0] = ptr[m] = m
    ptr[1:m][grp[1:] != grp[:-1]] = m
    todo = np.flatnonzero(en[ptr[:m]] <= st)
    for _ in range(_JUMP_ROUNDS):
        if not len(todo):
            break
        nxt = ptr[ptr[todo]]
        ptr[todo] = nxt
        todo = todo[en[nxt] <= st[todo]]
    if len(todo):
        # in order: every earlier row's pointer is then final (a plain-list walk)
        ptr_l, en_l, st_l = ptr.tolist(), en.tolist(), st.tolist()
        for p in todo.tolist():
            s, c = st_l[p], ptr_l[p]
            while en_l[c] <= s:
                c = ptr_l[c]
            ptr_l[p] = c
        ptr = np.asarray(ptr_l, dtype=np.int64)
    child = np.flatnonzero(ptr[:m] < m)
    parent = ptr[child]
    nested = en[child] <= en[parent] + _NEST_SLACK_NS
    sub = np.zeros(m, dtype=np.int64)
    np.add.at(sub, parent[nested], dur[child[nested]])
    return sub
