"""Tie each GPU kernel (and memory copy) to the host runtime call that launched it.

The link is the runtime correlation id (CUPTI / roctracer / rocprofiler), which is unique
only within one process: the match is on ``(process_id, correlation_id)`` when both tables
know the process, else on the correlation id alone. Everything is vectorized with numpy
(a sort of the API keys and one binary search per kernel), so it runs on millions of rows.

Example::

    m = match_launches(session.table("kernels"), session.table("api_calls"))
    m.column("launch_delay_ns")  # kernel start - launch call end, null when unmatched
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["LAUNCH_MATCH_SCHEMA", "match_copies", "match_launches"]

LAUNCH_MATCH_SCHEMA = pa.schema(
    [
        pa.field("kernel_row", pa.int64(), nullable=False),
        pa.field("launch_row", pa.int64()),
        pa.field("launch_start_ns", pa.int64()),
        pa.field("launch_end_ns", pa.int64()),
        pa.field("launch_dur_ns", pa.int64()),
        pa.field("launch_delay_ns", pa.int64()),
        pa.field("launch_thread_id", pa.int64()),
    ]
)

# Several API rows can share one correlation id (a HIP call and the HSA calls it made in
# some tools, or a runtime call and its driver call). The launch call is what we want for a
# kernel; for a copy, the memcpy/memset call. Lower rank wins; ties go to the earliest row.
_KERNEL_RANK = {"launch": 0}
_COPY_RANK = {"memcpy": 0, "memset": 0, "launch": 1}
_OTHER_RANK = 9


def _int_column(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64 with nulls as 0, validity mask) of one column."""
    col = table.column(name)
    if col.null_count == 0:
        return col.to_numpy().astype(np.int64, copy=False), np.ones(len(col), dtype=bool)
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    values = pc.fill_null(col, 0).to_numpy().astype(np.int64, copy=False)
    return values, valid


def _has_values(table: pa.Table, name: str) -> bool:
    return name in table.column_names and table.num_rows > table.column(name).null_count


def _composite_keys(
    left: list[np.ndarray], right: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per row from one or two int64 key columns, the same on both sides.

    Offsets make the key dense when the ranges allow (the usual case, no sort needed);
    otherwise the values are factorized over both sides first.
    """
    if len(left) == 1:
        return left[0], right[0]
    parts_l: list[np.ndarray] = []
    parts_r: list[np.ndarray] = []
    spans: list[int] = []
    for lv, rv in zip(left, right, strict=True):
        both = np.concatenate([lv, rv])
        if both.size == 0:
            lo, hi = 0, 0
        else:
            lo, hi = int(both.min()), int(both.max())
        span = hi - lo + 1
        if span > 2**31:
            _, inv = np.unique(both, return_inverse=True)
            inv = inv.astype(np.int64)
            parts_l.append(inv[: lv.size])
            parts_r.append(inv[lv.size :])
            spans.append(int(inv.max()) + 1 if inv.size else 1)
        else:
            parts_l.append(lv - lo)
            parts_r.append(rv - lo)
            spans.append(span)
    # Two parts of at most 2**31 values each fit in int64.
    return parts_l[0] * spans[1] + parts_l[1], parts_r[0] * spans[1] + parts_r[1]


def _match(
    events: pa.Table, api_calls: pa.Table, rank: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(api row per event, found mask) for the best-ranked API call of the same key."""
    n = events.num_rows
    if n == 0 or api_calls.num_rows == 0:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    e_corr, e_valid = _int_column(events, "correlation_id")
    a_corr, a_valid = _int_column(api_calls, "correlation_id")
    e_keys, a_keys = [e_corr], [a_corr]
    if _has_values(events, "process_id") and _has_values(api_calls, "process_id"):
        # A null process id is its own value (-1 never is an OS pid): unknown matches unknown.
        e_pid = pc.fill_null(events.column("process_id"), -1).to_numpy().astype(np.int64)
        a_pid = pc.fill_null(api_calls.column("process_id"), -1).to_numpy().astype(np.int64)
        e_keys, a_keys = [e_pid, e_corr], [a_pid, a_corr]
    e_key, a_key = _composite_keys(e_keys, a_keys)

    kinds = api_calls.column("kind").combine_chunks().dictionary_encode()
    kind_rank = np.array(
        [rank.get(str(k), _OTHER_RANK) for k in kinds.dictionary.to_pylist()] or [_OTHER_RANK],
        dtype=np.int64,
    )
    prio = kind_rank[pc.fill_null(kinds.indices, 0).to_numpy().astype(np.int64)]

    rows = np.flatnonzero(a_valid).astype(np.int64)
    keys = a_key[rows]
    order = np.lexsort((rows, prio[rows], keys))
    keys, rows = keys[order], rows[order]
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    uniq, uniq_rows = keys[first], rows[first]

    pos = np.searchsorted(uniq, e_key)
    pos_c = np.minimum(pos, max(uniq.size - 1, 0))
    found = e_valid & (pos < uniq.size)
    if uniq.size:
        found &= uniq[pos_c] == e_key
    api_row = np.where(found, uniq_rows[pos_c] if uniq.size else 0, 0)
    return api_row, found


def _take_int(table: pa.Table, name: str, rows: np.ndarray, found: np.ndarray) -> pa.Array:
    """``table[name][rows]`` as int64, null where ``found`` is false."""
    if table.num_rows == 0:
        return pa.nulls(rows.size, pa.int64())
    taken = table.column(name).combine_chunks().take(pa.array(rows)).cast(pa.int64())
    return pc.if_else(pa.array(found), taken, pa.scalar(None, pa.int64()))


def _build(events: pa.Table, api_calls: pa.Table, rank: dict[str, int], row_name: str) -> pa.Table:
    schema = LAUNCH_MATCH_SCHEMA.set(0, pa.field(row_name, pa.int64(), nullable=False))
    n = events.num_rows
    if n == 0:
        return schema.empty_table()
    api_row, found = _match(events, api_calls, rank)
    end = _take_int(api_calls, "end_ns", api_row, found)
    ev_start = events.column("start_ns").combine_chunks().cast(pa.int64())
    cols = [
        pa.array(np.arange(n, dtype=np.int64)),
        pa.array(api_row, mask=~found),
        _take_int(api_calls, "start_ns", api_row, found),
        end,
        _take_int(api_calls, "dur_ns", api_row, found),
        pc.subtract(ev_start, end),
        _take_int(api_calls, "thread_id", api_row, found),
    ]
    return pa.Table.from_arrays(cols, schema=schema)


def match_launches(kernels: pa.Table, api_calls: pa.Table) -> pa.Table:
    """One row per kernel row: the host launch call that shares its correlation id.

    Columns (all int64, nanoseconds for times): ``kernel_row`` (row in ``kernels``),
    ``launch_row`` (row in ``api_calls``), ``launch_start_ns``, ``launch_end_ns``,
    ``launch_dur_ns``, ``launch_delay_ns`` (kernel start - launch call end: queueing time
    on the device side, negative only when clocks disagree), ``launch_thread_id``. All but
    ``kernel_row`` are null when no API call shares the kernel's correlation id.

    When several API rows share the key, one of kind ``launch`` wins, then the earliest
    row; a row of another kind is taken only when no launch call has the key (a launch API
    the importer did not recognise as one).
    """
    return _build(kernels, api_calls, _KERNEL_RANK, "kernel_row")


def match_copies(memcpy: pa.Table, api_calls: pa.Table) -> pa.Table:
    """Like :func:`match_launches` for rows of the memcpy table (first column ``copy_row``).

    The preferred API call is a ``memcpy``/``memset`` one, then a ``launch``, then any other.
    """
    return _build(memcpy, api_calls, _COPY_RANK, "copy_row")
