"""Launch matching: kernels and copies tied to their host API calls by correlation id."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from aaco.analysis.launches import LAUNCH_MATCH_SCHEMA, match_copies, match_launches
from aaco.session.schema import API_CALLS, KERNELS, MEMCPY


def _kernel(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"source": "test", "name": "k", "time_is_gpu": True}
    row.update(kw)
    row.setdefault("dur_ns", row["end_ns"] - row["start_ns"])
    return row


def _api(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"source": "test", "domain": "hip"}
    row.update(kw)
    row.setdefault("dur_ns", row["end_ns"] - row["start_ns"])
    return row


def test_match_prefers_launch_kind_and_separates_processes() -> None:
    kernels = KERNELS.from_rows(
        [
            _kernel(start_ns=100, end_ns=200, correlation_id=5, process_id=1),
            _kernel(start_ns=300, end_ns=400, correlation_id=5, process_id=2),
            _kernel(start_ns=500, end_ns=600, correlation_id=None, process_id=2),
            _kernel(start_ns=700, end_ns=800, correlation_id=99, process_id=1),
        ]
    )
    api = API_CALLS.from_rows(
        [
            # Same correlation as kernel 0, not a launch: must lose to row 1.
            _api(name="hsa_signal_store", kind="other", start_ns=10, end_ns=20,
                 correlation_id=5, process_id=1, thread_id=3),
            _api(name="hipLaunchKernel", kind="launch", start_ns=30, end_ns=50,
                 correlation_id=5, process_id=1, thread_id=7),
            # Same correlation id in another process: only kernel 1 may take it.
            _api(name="hipExtModuleLaunchKernel", kind="launch", start_ns=60, end_ns=75,
                 correlation_id=5, process_id=2, thread_id=8),
        ]
    )  # fmt: skip
    m = match_launches(kernels, api)
    assert m.schema == LAUNCH_MATCH_SCHEMA
    assert m.to_pydict() == {
        "kernel_row": [0, 1, 2, 3],
        "launch_row": [1, 2, None, None],
        "launch_start_ns": [30, 60, None, None],
        "launch_end_ns": [50, 75, None, None],
        "launch_dur_ns": [20, 15, None, None],
        "launch_delay_ns": [50, 225, None, None],
        "launch_thread_id": [7, 8, None, None],
    }


def test_without_process_ids_correlation_alone_links() -> None:
    kernels = KERNELS.from_rows([_kernel(start_ns=1_000, end_ns=2_000, correlation_id=42)])
    api = API_CALLS.from_rows(
        [
            _api(name="cudaLaunchKernel", kind="launch", start_ns=900, end_ns=990,
                 correlation_id=42, process_id=77),
        ]
    )  # fmt: skip
    m = match_launches(kernels, api)
    assert m.column("launch_row").to_pylist() == [0]
    assert m.column("launch_delay_ns").to_pylist() == [10]


def test_non_launch_row_used_only_when_no_launch_shares_the_id() -> None:
    kernels = KERNELS.from_rows([_kernel(start_ns=100, end_ns=110, correlation_id=1)])
    api = API_CALLS.from_rows(
        [
            _api(name="cuGraphLaunchSomething", kind="other", start_ns=40, end_ns=60,
                 correlation_id=1),
        ]
    )  # fmt: skip
    assert match_launches(kernels, api).column("launch_delay_ns").to_pylist() == [40]


def test_empty_inputs() -> None:
    kernels = KERNELS.from_rows([_kernel(start_ns=0, end_ns=5, correlation_id=1)])
    m = match_launches(kernels, API_CALLS.empty())
    assert m.column("launch_row").to_pylist() == [None]
    assert match_launches(KERNELS.empty(), API_CALLS.empty()).num_rows == 0


def test_large_ids_are_factorized_not_overflowed() -> None:
    # Correlation ids spread over more than 2**31 force the factorized path.
    corr = [3, 2**40, 2**50 + 1]
    kernels = KERNELS.from_rows(
        [_kernel(start_ns=100 * i, end_ns=100 * i + 50, correlation_id=c, process_id=4_000_000)
         for i, c in enumerate(corr)]
    )  # fmt: skip
    api = API_CALLS.from_rows(
        [_api(name="hipLaunchKernel", kind="launch", start_ns=100 * i - 20, end_ns=100 * i - 5,
              correlation_id=c, process_id=4_000_000 if i else 1)
         for i, c in reversed(list(enumerate(corr)))]
    )  # fmt: skip
    m = match_launches(kernels, api)
    # api rows are reversed; kernel 0's launch is in another process.
    assert m.column("launch_row").to_pylist() == [None, 1, 0]
    assert m.column("launch_delay_ns").to_pylist() == [None, 5, 5]


def test_many_rows_vectorized_shuffle() -> None:
    rng = np.random.default_rng(0)
    n = 200_000
    corr = rng.permutation(n).astype(np.int64) + 10
    start = np.arange(n, dtype=np.int64) * 1_000
    kernels = KERNELS.from_columns(
        {c.name: pa.nulls(n, c.type) for c in KERNELS.columns}
        | {
            "source": pa.array(["t"] * n),
            "name": pa.array(["k"] * n),
            "start_ns": start,
            "end_ns": start + 500,
            "dur_ns": np.full(n, 500, dtype=np.int64),
            "time_is_gpu": np.ones(n, dtype=bool),
            "correlation_id": corr,
        }
    )
    order = rng.permutation(n)
    api_end = start - 7
    api = API_CALLS.from_columns(
        {c.name: pa.nulls(n, c.type) for c in API_CALLS.columns}
        | {
            "source": pa.array(["t"] * n),
            "domain": pa.array(["hip"] * n),
            "name": pa.array(["hipLaunchKernel"] * n),
            "kind": pa.array(["launch"] * n),
            "start_ns": (api_end - 3)[order],
            "end_ns": api_end[order],
            "dur_ns": np.full(n, 3, dtype=np.int64),
            "correlation_id": corr[order],
        }
    )
    m = match_launches(kernels, api)
    assert np.array_equal(m.column("launch_row").to_numpy(), np.argsort(order))
    assert set(m.column("launch_delay_ns").to_pylist()) == {7}


def test_match_copies_prefers_memcpy_call() -> None:
    memcpy = MEMCPY.from_rows(
        [
            {"source": "test", "name": "Memcpy HtoD", "kind": "HtoD", "start_ns": 500,
             "end_ns": 600, "dur_ns": 100, "correlation_id": 9},
        ]
    )  # fmt: skip
    api = API_CALLS.from_rows(
        [
            _api(name="hipLaunchKernel", kind="launch", start_ns=10, end_ns=20,
                 correlation_id=9),
            _api(name="hipMemcpyAsync", kind="memcpy", start_ns=100, end_ns=150,
                 correlation_id=9, thread_id=2),
        ]
    )  # fmt: skip
    m = match_copies(memcpy, api)
    assert m.column_names[0] == "copy_row"
    assert m.column("launch_row").to_pylist() == [1]
    assert m.column("launch_delay_ns").to_pylist() == [350]
    assert m.column("launch_thread_id").to_pylist() == [2]
