"""The column-wise kernel roofline against the per-dispatch loop over counter_work it
replaced (kept below as the reference): same rows, same details, floats bit for bit."""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aaco.analysis.roofline as roofline
from aaco.analysis.roofline import (
    _shares,
    counter_work,
    kernel_roofline,
    roof_flops,
    roofline_row,
)
from aaco.session.schema import KERNEL_COUNTERS, KERNELS, ROOFLINE


def reference_kernel_roofline(
    kernels: pa.Table, counters: pa.Table, ceilings: Any
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """kernel_roofline as it was: a Python loop over the dispatches, counter_work each."""
    if counters is None or not counters.num_rows or kernels is None or not kernels.num_rows:
        return ROOFLINE.empty(), []
    per_dispatch: dict[tuple[Any, ...], dict[str, float]] = defaultdict(dict)
    names: dict[tuple[Any, ...], str] = {}
    for r in counters.select(
        ["device", "dispatch_id", "correlation_id", "kernel_name", "counter", "value"]
    ).to_pylist():
        k = (r.get("device"), r.get("dispatch_id"), r.get("correlation_id"))
        per_dispatch[k][r["counter"]] = per_dispatch[k].get(r["counter"], 0.0) + r["value"]
        names[k] = r["kernel_name"]
    by_dispatch: dict[Any, float] = {}
    by_corr: dict[Any, float] = {}
    for row in kernels.select(["dispatch_id", "correlation_id", "dur_ns"]).to_pylist():
        if row["dispatch_id"] is not None:
            by_dispatch[row["dispatch_id"]] = row["dur_ns"]
        if row["correlation_id"] is not None:
            by_corr[row["correlation_id"]] = row["dur_ns"]
    iters = kernels.column("iteration").drop_null() if "iteration" in kernels.column_names else []
    n_iter = max(1, len(pc.unique(iters))) if len(iters) else 1
    agg: dict[str, dict[str, Any]] = {}
    for k, values in per_dispatch.items():
        _, dispatch, corr = k
        dur = by_dispatch.get(dispatch) if dispatch is not None else None
        if dur is None and corr is not None:
            dur = by_corr.get(corr)
        if dur is None:
            continue
        w = counter_work(values)
        a = agg.setdefault(
            names[k],
            {"time": 0.0, "flops": 0.0, "hbm": 0.0, "l2": 0.0, "lds": 0.0, "n": 0,
             "flops_ok": True, "hbm_ok": True, "l2_ok": True, "lds_ok": True,
             "by_dtype": defaultdict(float), "arch": w["arch"]},
        )  # fmt: skip
        a["time"] += dur
        a["n"] += 1
        for key, src in (("flops", "flops"), ("hbm", "hbm_bytes"), ("l2", "l2_bytes"),
                         ("lds", "lds_bytes")):  # fmt: skip
            if w[src] is None:
                a[f"{key}_ok"] = False
            else:
                a[key] += w[src]
        for dt, f in w["flops_by_dtype"].items():
            a["by_dtype"][dt] += f
    rows, details = [], []
    pb = ceilings.bytes_per_s if ceilings is not None else None
    for name, a in agg.items():
        dtype = max(a["by_dtype"], key=a["by_dtype"].get) if a["by_dtype"] else None
        flops = a["flops"] / n_iter if a["flops_ok"] else None
        hbm = a["hbm"] / n_iter if a["hbm_ok"] else None
        rows.append(
            roofline_row(
                level="kernel",
                name=name,
                op_type=None,
                dtype=dtype,
                calls_per_iter=a["n"] / n_iter,
                time_ns=a["time"] / n_iter,
                flops=flops,
                nbytes=hbm,
                peak_flops=roof_flops(
                    ceilings,
                    dtype.removesuffix("_matrix") if dtype else None,
                    "matrix" if dtype and dtype.endswith("_matrix") else "vector",
                ),
                peak_bytes=pb,
                source="counters+" + ceilings.source if ceilings is not None else None,
            )
        )
        details.append(
            {
                "name": name,
                "arch": a["arch"],
                "dispatches": a["n"],
                "l2_bytes_per_iter": a["l2"] / n_iter if a["l2_ok"] else None,
                "lds_bytes_per_iter": a["lds"] / n_iter if a["lds_ok"] else None,
                "flops_by_dtype": {k: v / n_iter for k, v in a["by_dtype"].items()},
            }
        )
    _shares(rows)
    rows.sort(key=lambda r: -(r["time_ns"] or 0))
    return ROOFLINE.from_rows(rows), details


@dataclass
class FakeCeilings:
    device: str = "test-device"
    source: str = "calibrated"
    bytes_per_s: float | None = 1.3e11
    flops_per_s: dict[str, float] = field(
        default_factory=lambda: {
            "float32": 2.1e12, "float16_matrix": 3.3e14, "float64": 7.7e12,
            "float16": 4.4e12, "int8_matrix": 9.9e14, "bfloat16_matrix": 3.1e14,
        }
    )  # fmt: skip

    def peak_flops(self, dtype: str | None) -> float | None:
        return self.flops_per_s.get(dtype or "")


def _bits(v: Any) -> Any:
    """Floats as their bits (NaN payloads and -0.0 included), containers walked."""
    if isinstance(v, float):
        return ("f", struct.pack("<d", v))
    if isinstance(v, dict):
        return ("d", [(k, _bits(x)) for k, x in v.items()])
    if isinstance(v, (list, tuple)):
        return ("l", [_bits(x) for x in v])
    return (type(v).__name__, v)


def assert_same(kernels: pa.Table, counters: pa.Table, ceilings: Any = None) -> None:
    want_t, want_d = reference_kernel_roofline(kernels, counters, ceilings)
    got_t, got_d = kernel_roofline(kernels, counters, ceilings)
    assert got_t.schema == want_t.schema
    assert _bits(got_t.to_pylist()) == _bits(want_t.to_pylist())
    assert _bits(got_d) == _bits(want_d)


# --- counters -----------------------------------------------------------------------------

_FLOP = [c for c, _, _ in roofline._FLOP_TERMS]
_MI300 = ["TCC_BUBBLE", "TCC_EA0_RDREQ_32B", "TCC_EA0_RDREQ", "TCC_EA0_WRREQ", "TCC_EA0_WRREQ_64B"]
_MI200 = ["TCC_EA_RDREQ_32B", "TCC_EA_RDREQ", "TCC_EA_WRREQ", "TCC_EA_WRREQ_64B"]
_OTHER = [
    "TCP_TCC_READ_REQ", "TCP_TCC_WRITE_REQ", "TCP_TCC_ATOMIC_WITH_RET_REQ",
    "TCP_TCC_ATOMIC_WITHOUT_RET_REQ", "SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT",
]  # fmt: skip
_BASES = _FLOP + _MI300 + _MI200 + _OTHER
_NAMES = [*_BASES, *(b + "_sum" for b in _BASES), "SQ_WAVES", "GRBM_COUNT", "TCC_BUBBLE_sum_sum"]


def test_counter_lists_cover_counter_work() -> None:
    assert set(_BASES) == set(roofline._WORK_COUNTERS)
    assert roofline._DTYPE_KEYS == (
        "float16", "float32", "float64", "float16_matrix", "bfloat16_matrix",
        "float32_matrix", "float64_matrix", "int8_matrix",
    )  # fmt: skip


_Row = tuple[Any, Any, Any, str, str, float]


def _counters(rows: list[_Row]) -> pa.Table:
    return KERNEL_COUNTERS.from_rows(
        [
            {"source": "rocprofv3", "device": dev, "dispatch_id": d, "correlation_id": c,
             "kernel_name": k, "counter": n, "value": v}
            for dev, d, c, k, n, v in rows
        ]
    )  # fmt: skip


def _kernels(rows: list[tuple[Any, Any, int, Any]]) -> pa.Table:
    return KERNELS.from_rows(
        [
            {"source": "rocprofv3", "name": "k", "start_ns": 0, "end_ns": dur, "dur_ns": dur,
             "time_is_gpu": True, "dispatch_id": d, "correlation_id": c, "iteration": it}
            for d, c, dur, it in rows
        ]
    )  # fmt: skip


# --- cases worked out ---------------------------------------------------------------------


def test_both_spellings_the_later_one_counts() -> None:
    full = [("TCC_EA_RDREQ_32B", 10.0), ("TCC_EA_WRREQ", 7.0), ("TCC_EA_WRREQ_64B", 3.0)]
    rows: list[_Row] = [(0, 1, None, "k", c, v) for c, v in full]
    # dispatch 1: plain first, then _sum -> the _sum value wins; dispatch 2: the reverse
    rows += [(0, 1, None, "k", "TCC_EA_RDREQ", 100.0), (0, 1, None, "k", "TCC_EA_RDREQ_sum", 1.0)]
    rows += [(0, 2, None, "k", c, v) for c, v in full]
    rows += [(0, 2, None, "k", "TCC_EA_RDREQ_sum", 1.0), (0, 2, None, "k", "TCC_EA_RDREQ", 100.0)]
    # a repeat of the earlier spelling later does not move it
    rows += [(0, 1, None, "k", "TCC_EA_RDREQ", 5.0)]
    counters = _counters(rows)
    kernels = _kernels([(1, None, 10, None), (2, None, 20, None)])
    assert_same(kernels, counters)
    w1 = counter_work({"TCC_EA_RDREQ": 105.0, "TCC_EA_RDREQ_sum": 1.0, **dict(full)})
    w2 = counter_work({"TCC_EA_RDREQ_sum": 1.0, "TCC_EA_RDREQ": 100.0, **dict(full)})
    (row,) = kernel_roofline(kernels, counters, None)[0].to_pylist()
    assert row["bytes"] == w1["hbm_bytes"] + w2["hbm_bytes"]


def test_duplicate_rows_sum_and_missing_counters_are_unknown() -> None:
    rows: list[_Row] = [(0, 1, 5, "a", "SQ_INSTS_VALU_FMA_F32", 0.1)] * 3
    rows += [(0, 2, 6, "a", "SQ_LDS_IDX_ACTIVE", 9.0), (0, 2, 6, "a", "SQ_LDS_BANK_CONFLICT", 1.0)]
    kernels = _kernels([(1, None, 3, 0), (None, 6, 4, 1)])
    counters = _counters(rows)
    assert_same(kernels, counters)
    (d,) = kernel_roofline(kernels, counters, None)[1]
    # dispatch 1 has no LDS counters, dispatch 2 no FLOP ones: both sums unknown
    assert d["lds_bytes_per_iter"] is None and d["dispatches"] == 2


def test_matching_last_kernel_row_wins_and_correlation_fallback() -> None:
    kernels = _kernels(
        [(1, 10, 100, None), (1, 11, 300, None), (None, 12, 7, None), (2, 12, 9, None)]
    )
    rows: list[_Row] = [(0, 1, None, "a", "SQ_WAVES", 1.0), (1, 1, None, "a", "SQ_WAVES", 1.0)]
    rows += [(0, 99, 12, "b", "SQ_WAVES", 1.0), (0, None, 12, "b", "SQ_WAVES", 1.0)]
    rows += [(0, None, None, "c", "SQ_WAVES", 1.0), (0, 50, 60, "c", "SQ_WAVES", 1.0)]
    assert_same(kernels, _counters(rows))
    rows_out = kernel_roofline(kernels, _counters(rows), None)[0].to_pylist()
    # two devices -> two dispatches of dispatch id 1, each the last kernel row's 300 ns
    assert {r["name"]: r["time_ns"] for r in rows_out} == {"a": 600.0, "b": 18.0}


def test_name_is_the_last_rows_and_dtype_ties_go_to_the_first() -> None:
    rows: list[_Row] = [(0, 1, None, "x", "SQ_INSTS_VALU_ADD_F64", 2.0),
            (0, 1, None, "y", "SQ_INSTS_VALU_ADD_F16", 2.0),
            (0, 2, None, "x", "SQ_INSTS_VALU_MFMA_MOPS_I8", 1.0),
            (0, 2, None, "x", "SQ_INSTS_VALU_ADD_F32", 8.0)]  # fmt: skip
    kernels = _kernels([(1, None, 5, None), (2, None, 5, None)])
    assert_same(kernels, _counters(rows), FakeCeilings())
    t, d = kernel_roofline(kernels, _counters(rows), None)
    assert [r["name"] for r in t.to_pylist()] == ["y", "x"]
    assert d[0]["flops_by_dtype"] == {"float16": 128.0, "float64": 128.0}
    assert t.to_pylist()[0]["dtype"] == "float16"
    assert list(d[1]["flops_by_dtype"]) == ["float32", "int8_matrix"]


def test_no_match_and_empty_inputs() -> None:
    counters = _counters([(0, 1, None, "a", "SQ_WAVES", 1.0)])
    assert_same(_kernels([(2, None, 5, None)]), counters)
    assert_same(KERNELS.empty(), counters)
    assert_same(_kernels([(2, None, 5, None)]), KERNEL_COUNTERS.empty())


def test_huge_ids_take_the_hashed_paths() -> None:
    big = 1 << 56
    rows: list[_Row] = [
        (dev, big * i if i else None, (big - i) if i % 2 else None, f"k{i % 3}", n, float(i))
        for i in range(40)
        for dev in (0, 1)
        for n in ("SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT_sum")
    ]
    kernels = _kernels([(big * i, big - i, i + 1, i % 2) for i in range(0, 40, 3)])
    kernels = pa.concat_tables([kernels, _kernels([(-big, None, 3, None)])])
    assert_same(kernels, _counters(rows))


def test_errors_match_on_nulls_the_schema_forbids() -> None:
    kernels = _kernels([(1, None, 5, None)])
    base = _counters([(0, 1, None, "a", "SQ_WAVES", 1.0)]).to_pydict()
    for col, exc in (("value", TypeError), ("counter", AttributeError)):
        bad = {**base, col: [None]}
        table = pa.table(bad)
        with pytest.raises(exc):
            reference_kernel_roofline(kernels, table, None)
        with pytest.raises(exc):
            kernel_roofline(kernels, table, None)


def test_many_dispatches_realistic() -> None:
    rng = np.random.default_rng(7)
    n = 3000
    names = [f"kern_{i}" for i in range(17)]
    rows: list[_Row] = []
    arch_sets: tuple[list[str], ...] = (_MI300, _MI200, [])
    for d in range(n):
        name = names[int(rng.integers(0, len(names)))]
        arch = arch_sets[int(rng.integers(0, 3))]
        for c in [*_FLOP, *arch, *_OTHER]:
            if rng.random() < 0.9:
                spelled = c + "_sum" if rng.random() < 0.5 else c
                rows.append((d % 4, d, d + 7, name, spelled, float(rng.random() * 1e7)))
    kernels = _kernels([(d, d + 7, int(rng.integers(1, 10**9)), d % 5) for d in range(0, n, 1)])
    assert_same(kernels, _counters(rows), FakeCeilings())


# --- builtin sum, both algorithms ---------------------------------------------------------


def _cpython_sum(xs: list[float], compensated: bool) -> float:
    """builtin sum(xs) (int 0 start) as CPython computes it before / from 3.12."""
    if not xs:
        return 0.0
    hi, lo = 0 + xs[0], 0.0
    for x in xs[1:]:
        if not compensated:
            hi += x
            continue
        t = hi + x
        lo += (hi - t) + x if abs(hi) >= abs(x) else (x - t) + hi
        hi = t
    if compensated and lo and math.isfinite(lo):
        hi += lo
    return hi


_any_float = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e16, 1.0, -1e16, 1e-16, 3.0, 1e308]),
)


@pytest.mark.parametrize("compensated", [False, True])
@settings(max_examples=300, deadline=None)
@given(terms=st.lists(st.lists(st.tuples(_any_float, st.booleans()), min_size=3, max_size=3),
                      min_size=1, max_size=8))  # fmt: skip
def test_float_sum_is_builtin_sum(compensated: bool, terms: list[list[tuple[float, bool]]]) -> None:
    cols = [
        (np.array([x for x, _ in t]), np.array([p for _, p in t], dtype=np.bool_)) for t in terms
    ]
    with pytest.MonkeyPatch.context() as mp, np.errstate(all="ignore"):
        mp.setattr(roofline, "_COMPENSATED_SUM", compensated)
        got = roofline._float_sum(cols, 3)
    for i in range(3):
        xs = [t[i][0] for t in terms if t[i][1]]
        want = _cpython_sum(xs, compensated)
        assert struct.pack("<d", got[i]) == struct.pack("<d", want) or (
            math.isnan(want) and math.isnan(got[i])
        )


def test_cpython_sum_model_is_this_interpreters_sum() -> None:
    import sys

    rng = np.random.default_rng(3)
    for _ in range(2000):
        xs = (rng.random(int(rng.integers(1, 9))) * 10.0 ** rng.integers(-5, 17, 1)).tolist()
        xs = [x if rng.random() < 0.8 else -x for x in xs]
        assert _cpython_sum(xs, sys.version_info >= (3, 12)) == sum(xs)


# --- differential, random -----------------------------------------------------------------

_ids = st.one_of(st.none(), st.integers(0, 6), st.integers(0, 3).map(lambda i: i * (1 << 55)))
_values = st.one_of(
    st.integers(0, 10**9).map(float),
    st.floats(0, 1e12),
    st.floats(-1e6, 1e6),
    st.sampled_from([0.0, -0.0, 0.1, 1e300, math.inf, -math.inf, math.nan]),
)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4))
    pool = draw(
        st.sampled_from(
            [_NAMES, [*_MI300, *_FLOP[:4]], [*_MI200, *(c + "_sum" for c in _MI200)],
             [*_OTHER, *(c + "_sum" for c in _OTHER), "SQ_WAVES"]]
        )
    )  # fmt: skip
    n_disp = draw(st.integers(1, 12))
    keys = [(draw(st.sampled_from([None, 0, 1, 2])), draw(_ids), draw(_ids)) for _ in range(n_disp)]
    rows: list[_Row] = []
    for _ in range(draw(st.integers(1, 80))):
        dev, d, c = keys[draw(st.integers(0, n_disp - 1))]
        rows.append((dev, d, c, draw(st.sampled_from(names)), draw(st.sampled_from(pool)),
                     draw(_values)))  # fmt: skip
    krows = [
        (draw(_ids), draw(_ids), draw(st.one_of(st.integers(0, 10**6), st.integers(0, 2**62))),
         draw(st.one_of(st.none(), st.integers(0, 3))))
        for _ in range(draw(st.integers(0, 12)))
    ]  # fmt: skip
    return _kernels(krows), _counters(rows)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables=_tables(), ceilings=st.sampled_from([None, FakeCeilings()]))
def test_vectorised_is_the_dispatch_loop(
    tables: tuple[pa.Table, pa.Table], ceilings: FakeCeilings | None
) -> None:
    assert_same(*tables, ceilings)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables=_tables(), chunks=st.integers(1, 5))
def test_chunked_tables(tables: tuple[pa.Table, pa.Table], chunks: int) -> None:
    kernels, counters = tables
    step = max(1, counters.num_rows // chunks)
    parts = [counters.slice(i, step) for i in range(0, counters.num_rows, step)]
    assert_same(kernels, pa.concat_tables(parts))
