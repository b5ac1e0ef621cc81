"""The vectorised analyses (issue #20, fast on 1-2 M-event traces) give exactly what their
per-row predecessors gave: each test runs the old implementation, copied here as it was,
and the current one on random tables (hypothesis) and compares them bit for bit."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aaco.analysis import ops as ops_mod
from aaco.analysis.bottleneck import small_grid_share
from aaco.analysis.ops import exclusive_ns, group_medians, per_iteration_medians
from aaco.analysis.roofline import _first_rows
from aaco.session.schema import KERNELS, OPS

_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- the implementations before the vectorisation, verbatim ------------------------------


def _old_codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray[Any, Any], list[Any]]:
    enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    codes = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, enc.dictionary.to_pylist()


def _old_exclusive_ns(ops: pa.Table) -> np.ndarray[Any, Any]:
    n = ops.num_rows
    dur = pc.fill_null(ops.column("dur_ns"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    excl = dur.copy()
    if n < 2:
        return np.asarray(excl)
    start_col = ops.column("start_ns")
    valid = np.asarray(pc.is_valid(start_col).to_numpy(zero_copy_only=False))
    if "nested_ns" in ops.column_names:
        done = np.asarray(pc.is_valid(ops.column("nested_ns")).to_numpy(zero_copy_only=False))
        valid = valid & ~done
    start = pc.fill_null(start_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    keys = []
    for c in ("source", "iteration", "thread_id"):
        if c in ops.column_names:
            codes, _ = _old_codes(ops.column(c))
            nulls = np.asarray(pc.is_null(ops.column(c)).to_numpy(zero_copy_only=False))
            keys.append(np.where(nulls, -1, codes))
    group = np.zeros(n, dtype=np.int64)
    for k in keys:
        group = group * (int(k.max()) + 2) + (k + 1)
    order = np.lexsort((-dur, start, group))
    order = order[valid[order]]
    idx_l = order.tolist()
    grp_l = group[order].tolist()
    st_l = start[order].tolist()
    dur_l = dur[order].tolist()
    en_l = (start + dur)[order].tolist()
    sub = [0] * len(idx_l)
    stack: list[int] = []
    last_group = None
    for p in range(len(idx_l)):
        g = grp_l[p]
        if g != last_group:
            stack.clear()
            last_group = g
        s = st_l[p]
        while stack and s >= en_l[stack[-1]]:
            stack.pop()
        if stack and en_l[p] <= en_l[stack[-1]] + 1000:
            sub[stack[-1]] += dur_l[p]
        stack.append(p)
    if len(order):
        excl[order] -= np.asarray(sub, dtype=np.int64)
    return np.asarray(np.maximum(excl, 0))


def _old_group_medians(
    groups: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    n: int,
    size: int | np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
    starts = np.searchsorted(g, np.arange(n), side="left")
    count = np.searchsorted(g, np.arange(n), side="right") - starts
    total = count if size is None else np.broadcast_to(np.asarray(size, dtype=np.int64), (n,))
    pad = total - count

    def at(pos: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        idx = np.minimum(starts + np.maximum(pos - pad, 0), len(v) - 1)
        return np.where(pos < pad, 0.0, v[idx])

    return np.asarray((at((total - 1) // 2) + at(total // 2)) / 2.0)


def _old_per_iteration_medians(
    ops: pa.Table, by: tuple[str, ...] = ("node_name",)
) -> dict[tuple[Any, ...], tuple[float, float]]:
    ops = ops.filter(pc.is_valid(ops.column("iteration")))
    if not ops.num_rows:
        return {}
    src, _ = _old_codes(pc.fill_null(ops.column("source"), ""))
    n_src = int(src.max()) + 1
    it = ops.column("iteration").to_numpy(zero_copy_only=False).astype(np.int64)
    it = it - it.min()
    span = int(it.max()) + 1
    universes, it_idx = np.unique(src * span + it, return_inverse=True)
    it_idx = it_idx.reshape(-1)
    iters_of_src = np.bincount(universes // span, minlength=n_src)
    key = np.zeros(ops.num_rows, dtype=np.int64)
    for c in by:
        codes, values = _old_codes(ops.column(c))
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
    medians = _old_group_medians(cells // n_univ, sums, n_pairs, size=size)
    calls = np.bincount(pair, minlength=n_pairs)
    best: dict[int, int] = {}
    for i, k in enumerate((pairs // n_src).tolist()):
        if k not in best or calls[i] > calls[best[k]]:
            best[k] = i
    return {
        names[k]: (float(medians[i]), float(calls[i]) / float(size[i])) for k, i in best.items()
    }


def _old_small_grid_share(
    kernels: pa.Table | None, compute_units: int | float | None
) -> tuple[float | None, str | None]:
    if kernels is None or not kernels.num_rows:
        return None, "no GPU kernels"
    if not compute_units:
        return None, "the GPU's compute-unit count is unknown (not in configs/devices.yaml)"
    cols = ["source", "dur_ns", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    total = small = 0.0
    for r in kernels.select(cols).to_pylist():
        grid = [r["grid_x"], r["grid_y"], r["grid_z"]]
        if any(g is None or g <= 0 for g in grid):
            continue
        if r["source"] in ("rocprofv3", "rocpd", "rocprof"):
            block = [r["block_x"], r["block_y"], r["block_z"]]
            if any(b is None or b <= 0 for b in block):
                continue
            groups = math.prod(-(-g // b) for g, b in zip(grid, block, strict=True))
        else:
            groups = math.prod(grid)
        total += r["dur_ns"]
        if groups < compute_units:
            small += r["dur_ns"]
    if not total:
        return None, "no kernel carries its grid size"
    return small / total, None


# --- bitwise comparison ----------------------------------------------------------------


def _bits(x: Any) -> Any:
    """Floats as their bit patterns, recursively, so that == compares bit for bit."""
    if isinstance(x, float):
        return ("f", struct.pack("<d", x))
    if isinstance(x, dict):
        return [(_bits(k), _bits(v)) for k, v in x.items()]  # insertion order counts
    if isinstance(x, list | tuple):
        return [_bits(v) for v in x]
    return x


# --- exclusive_ns ------------------------------------------------------------------------

# starts and durations around the 1 µs slack: equal starts, ends 999/1000/1001 ns apart
_TIMES = st.one_of(
    st.integers(0, 40).map(lambda k: k * 500),
    st.integers(0, 20_000),
    st.sampled_from([999, 1000, 1001, 1999, 2000, 2001]),
)


@st.composite
def _op_rows(draw: Any, max_rows: int = 60) -> pa.Table:
    n = draw(st.integers(0, max_rows))
    rows = []
    for _ in range(n):
        rows.append(
            {
                "source": draw(st.sampled_from(["kineto", "onnxruntime", "kineto"])),
                "iteration": draw(st.one_of(st.none(), st.integers(0, 2))),
                "node_name": draw(st.sampled_from(["a", "b", "c", "", None])),
                "op_type": draw(st.sampled_from(["MatMul", "Relu", None])),
                "thread_id": draw(st.one_of(st.none(), st.sampled_from([1, 2, 10**15]))),
                "start_ns": draw(st.one_of(_TIMES, _TIMES, _TIMES, st.none())),
                "dur_ns": draw(st.one_of(_TIMES, st.just(0))),
                "nested_ns": draw(st.sampled_from([None, None, None, None, 0, 500])),
            }
        )
    if not rows:
        return OPS.empty()
    return OPS.from_rows(rows)


@_SETTINGS
@given(_op_rows())
def test_exclusive_ns_matches_the_stack_sweep(ops: pa.Table) -> None:
    old, new = _old_exclusive_ns(ops), exclusive_ns(ops)
    assert new.dtype == old.dtype and new.tolist() == old.tolist()


@_SETTINGS
@given(_op_rows(max_rows=40), st.integers(0, 3))
def test_exclusive_ns_walk_after_few_jump_rounds(ops: pa.Table, rounds: int) -> None:
    # the rows still unresolved after the pointer-jumping rounds are walked in order
    saved = ops_mod._JUMP_ROUNDS
    ops_mod._JUMP_ROUNDS = rounds
    try:
        assert exclusive_ns(ops).tolist() == _old_exclusive_ns(ops).tolist()
    finally:
        ops_mod._JUMP_ROUNDS = saved


@_SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000)), min_size=2, max_size=80),
    st.booleans(),
)
def test_exclusive_ns_without_group_columns(spans: list[tuple[int, int]], nest: bool) -> None:
    # no source / iteration / thread_id: one group; dense nesting, partial overlaps
    cols: dict[str, Any] = {
        "start_ns": pa.array([s for s, _ in spans], pa.int64()),
        "dur_ns": pa.array([d * (3 if nest else 1) for _, d in spans], pa.int64()),
    }
    ops = pa.table(cols)
    assert exclusive_ns(ops).tolist() == _old_exclusive_ns(ops).tolist()


def _staircase(n: int) -> pa.Table:
    """Each row overlaps the previous one partly (never nested), then rows after them all:
    the longest chains of still-running rows a sweep can meet."""
    starts = [i * 10 for i in range(n)] + [n * 10 + 5000 + i for i in range(n)]
    durs = [5000 + 15 * i for i in range(n)] + [1] * n
    return pa.table(
        {"start_ns": pa.array(starts, pa.int64()), "dur_ns": pa.array(durs, pa.int64())}
    )


def test_exclusive_ns_staircase_and_equal_starts() -> None:
    ops = _staircase(2000)
    assert exclusive_ns(ops).tolist() == _old_exclusive_ns(ops).tolist()
    # equal starts: the longer row first, then row order
    ties = pa.table(
        {
            "start_ns": pa.array([0, 0, 0, 0, 5, 5], pa.int64()),
            "dur_ns": pa.array([10, 50, 50, 3, 2, 2], pa.int64()),
        }
    )
    assert exclusive_ns(ties).tolist() == _old_exclusive_ns(ties).tolist()


def test_exclusive_ns_wide_starts_take_the_lexsort() -> None:
    # group x start span beyond one int64 key: the lexsort path
    starts = [0, 2**61, 2**61 + 5, 3, 2**61 + 1]
    ops = pa.table(
        {
            "source": ["a", "b", "a", "b", "c"],
            "start_ns": pa.array(starts, pa.int64()),
            "dur_ns": pa.array([10, 10, 1, 1, 1], pa.int64()),
        }
    )
    assert exclusive_ns(ops).tolist() == _old_exclusive_ns(ops).tolist()


# --- per-iteration medians ------------------------------------------------------------


@_SETTINGS
@given(
    _op_rows(max_rows=80), st.sampled_from([("node_name",), ("op_type",), ("node_name", "op_type")])
)
def test_per_iteration_medians_match(ops: pa.Table, by: tuple[str, ...]) -> None:
    assert _bits(per_iteration_medians(ops, by)) == _bits(_old_per_iteration_medians(ops, by))


def test_per_iteration_medians_sparse_codes_take_np_unique() -> None:
    # iterations far apart: the codes' range is far beyond the rows, np.unique ranks them
    rows = [
        {"source": s, "iteration": it, "node_name": n, "dur_ns": d}
        for s, it, n, d in [("x", 0, "a", 5), ("x", 10**7, "a", 7), ("y", 3, "b", 1),
                            ("x", 10**7, "b", 2), ("y", 2 * 10**7, "a", 9)]
    ]  # fmt: skip
    ops = OPS.from_rows(rows)
    for by in (("node_name",), ("node_name", "op_type")):
        assert _bits(per_iteration_medians(ops, by)) == _bits(_old_per_iteration_medians(ops, by))


_VALUES = st.one_of(
    st.integers(0, 10**6).map(float),  # whole: sorted as int keys
    st.floats(0, 1e6, allow_nan=False),  # fractions: radix or lexsort path
    st.sampled_from([0.0, 2.0**53, 2.0**60]),
)


@_SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 5), _VALUES), max_size=60),
    st.integers(0, 3),
    st.booleans(),
)
def test_group_medians_match(rows: list[tuple[int, float]], extra: int, big: bool) -> None:
    n = (max((g for g, _ in rows), default=-1) + 1) + extra
    if not rows or not n:
        return
    groups = np.asarray([g for g, _ in rows], dtype=np.int64)
    if big:
        groups = groups * 70_000  # beyond 16 bits: the lexsort path
        n = int(groups.max()) + 1
    values = np.asarray([v for _, v in rows], dtype=np.float64)
    size = np.bincount(groups, minlength=n) + 2
    for sz in (None, size):
        new = group_medians(groups, values, n, size=sz)
        old = _old_group_medians(groups, values, n, size=sz)
        assert new.tobytes() == old.tobytes()


# --- small grids ------------------------------------------------------------------------

_DIM = st.one_of(st.none(), st.integers(-1, 300), st.just(2**31 - 1))


@_SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["kineto", "rocprofv3", "rocpd", "rocprof", "onnxruntime"]),
            st.integers(0, 10**9),
            st.tuples(_DIM, _DIM, _DIM),
            st.tuples(_DIM, _DIM, _DIM),
        ),
        max_size=40,
    ),
    st.sampled_from([1, 80, 132, 304.0, 132.5, 2**22]),
)
def test_small_grid_share_matches(rows: list[Any], cus: int | float) -> None:
    kernels = KERNELS.from_rows(
        [
            {"source": s, "name": "k", "start_ns": 0, "end_ns": d, "dur_ns": d,
             "time_is_gpu": True, "grid_x": g[0], "grid_y": g[1], "grid_z": g[2],
             "block_x": b[0], "block_y": b[1], "block_z": b[2]}
            for s, d, g, b in rows
        ]
    ) if rows else KERNELS.empty()  # fmt: skip
    assert _bits(small_grid_share(kernels, cus)) == _bits(_old_small_grid_share(kernels, cus))  # type: ignore[arg-type]


# --- a node's first row (node_roofline's original nodes) ------------------------------------


@_SETTINGS
@given(st.lists(st.sampled_from(["a", "b", "", None, "é"]), max_size=30), st.integers(1, 3))
def test_first_rows(names: list[str | None], chunks: int) -> None:
    arr = pa.array(names, pa.string())
    step = max(1, len(names) // chunks)
    col = pa.chunked_array([arr[i : i + step] for i in range(0, len(names), step)] or [arr])
    want: dict[Any, int] = {}
    for i, n in enumerate(names):
        want.setdefault(n, i)
    assert _first_rows(col).to_pylist() == list(want.values())
