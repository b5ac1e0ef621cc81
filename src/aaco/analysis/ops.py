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


def group_medians(
    groups: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    n: int,
    size: int | np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Median of ``values`` (>= 0) per group id 0..n-1, every id present; with ``size`` (one
    number, or one per group), each group counts as ``size`` values, the missing ones zeros."""
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
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
    ops = ops.filter(pc.is_valid(ops.column("iteration")))
    if not ops.num_rows:
        return {}
    src, _ = _codes(pc.fill_null(ops.column("source"), ""))
    n_src = int(src.max()) + 1
    it = ops.column("iteration").to_numpy(zero_copy_only=False).astype(np.int64)
    it = it - it.min()
    span = int(it.max()) + 1
    universes, it_idx = np.unique(src * span + it, return_inverse=True)
    it_idx = it_idx.reshape(-1)
    iters_of_src = np.bincount(universes // span, minlength=n_src)
    # one code per distinct combination of the ``by`` values (nulls kept as their own
    # value), combined numerically: no separator that a name could contain
    key = np.zeros(ops.num_rows, dtype=np.int64)
    for c in by:
        codes, values = _codes(ops.column(c))
        nulls = np.asarray(pc.is_null(ops.column(c)).to_numpy(zero_copy_only=False))
        codes = np.where(nulls, len(values), codes)
        key = key * (len(values) + 1) + codes
    _, first, key = np.unique(key, return_index=True, return_inverse=True)
    key = key.reshape(-1)
    cols = [ops.column(c).take(pa.array(first)).to_pylist() for c in by]
    names = list(zip(*cols, strict=True))
    pairs, pair = np.unique(key * n_src + src, return_inverse=True)
    pair = pair.reshape(-1)
    n_pairs, n_univ = len(pairs), len(universes)
    dur = ops.column("dur_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    cells, inverse = np.unique(pair * n_univ + it_idx, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=dur)
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
            nulls = np.asarray(pc.is_null(ops.column(c)).to_numpy(zero_copy_only=False))
            keys.append(np.where(nulls, -1, codes))
    group = np.zeros(n, dtype=np.int64)
    for k in keys:
        group = group * (int(k.max()) + 2) + (k + 1)
    # parents before their children: by group, start, then the longer first
    order = np.lexsort((-dur, start, group))
    order = order[valid[order]]
    # the sweep reads plain Python lists (numpy scalar access costs ~10x more per element)
    idx_l = order.tolist()
    grp_l = group[order].tolist()
    st_l = start[order].tolist()
    dur_l = dur[order].tolist()
    en_l = (start + dur)[order].tolist()
    sub = [0] * len(idx_l)  # time taken out of each parent, by position in the sweep
    stack: list[int] = []  # positions
    last_group = None
    for p in range(len(idx_l)):
        g = grp_l[p]
        if g != last_group:
            stack.clear()
            last_group = g
        s = st_l[p]
        while stack and s >= en_l[stack[-1]]:
            stack.pop()
        if stack and en_l[p] <= en_l[stack[-1]] + _NEST_SLACK_NS:
            sub[stack[-1]] += dur_l[p]
        stack.append(p)
    if len(order):
        excl[order] -= np.asarray(sub, dtype=np.int64)
    return np.asarray(np.maximum(excl, 0))
