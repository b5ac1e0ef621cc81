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

    - ``node_ms_per_iter``: summed node durations per profiled iteration;
    - ``ort_run_ms_per_iter``: mean ``model_run`` duration inside ORT (profiled pass);
    - ``node_ms_per_iter_p50``: median over profiled iterations of their summed node time;
    - ``coverage``: node_ms_per_iter_p50 / measured p50 latency (unprofiled pass), a
      fraction; medians, because one slow profiled iteration out of ten would otherwise
      move the figure by tens of percent;
    - ``overhead_ms``: measured mean - node_ms_per_iter, the time no operator accounts for
      (session.run binding, input/output copies, executor scheduling, thread hand-offs);
    - ``ort_internal_overhead_ms``: ort_run_ms_per_iter - node_ms_per_iter.
    Values that cannot be computed are None.
    """
    n_iters = len(pc.unique(ops.column("iteration")).drop_null()) if ops.num_rows else 0
    node_ms = (pc.sum(ops.column("dur_ns")).as_py() or 0) / 1e6 / n_iters if n_iters else None
    ort_ms = None
    if runs is not None and runs.num_rows:
        ort_ms = float(pc.mean(runs.column("dur_ns")).as_py()) / 1e6
    node_p50 = None
    if n_iters:
        per_iter = ops.group_by("iteration").aggregate([("dur_ns", "sum")]).column("dur_ns_sum")
        node_p50 = float(np.median(per_iter.to_numpy())) / 1e6
    p50 = measured_p50_ms if measured_p50_ms is not None else measured_mean_ms
    coverage = node_p50 / p50 if node_p50 is not None and p50 else None
    return {
        "profiled_iterations": n_iters,
        "node_ms_per_iter": node_ms,
        "node_ms_per_iter_p50": node_p50,
        "measured_p50_ms": measured_p50_ms,
        "ort_run_ms_per_iter": ort_ms,
        "measured_mean_ms": measured_mean_ms,
        "coverage": coverage,
        "overhead_ms": measured_mean_ms - node_ms if node_ms is not None and measured_mean_ms else None,
        "ort_internal_overhead_ms": ort_ms - node_ms if ort_ms is not None and node_ms is not None else None,
    }
