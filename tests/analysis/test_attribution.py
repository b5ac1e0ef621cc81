"""Tests of aaco.analysis.attribution on tables whose right answers are known by construction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aaco.analysis.attribution import (
    _Intervals,
    attribute_kernels,
    attribution_summary,
    kernel_groups,
    outermost_ops,
)
from aaco.importers.ort_trace import OrtTraceImporter
from aaco.session.schema import (
    ANNOTATIONS,
    API_CALLS,
    KERNEL_GROUPS,
    KERNELS,
    OP_KERNEL_MAP,
    OPS,
)

FIXTURES = Path(__file__).parent.parent / "importers" / "fixtures" / "ort"


def _kernel(name: str, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"source": "kineto", "name": name, "start_ns": start}
    row["end_ns"] = start + dur
    row.update({"dur_ns": dur, "time_is_gpu": True})
    row.update(kw)
    return row


def _op(name: str, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"source": "pytorch", "node_name": name, "op_type": name}
    row["start_ns"] = start
    row.update({"dur_ns": dur})
    row.update(kw)
    return row


def _api(corr: int, tid: int, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"source": "kineto", "domain": "cuda_runtime"}
    row["name"] = "cudaLaunchKernel"
    row.update({"kind": "launch", "thread_id": tid, "start_ns": start})
    row.update({"end_ns": start + dur, "dur_ns": dur, "correlation_id": corr})
    row.update(kw)
    return row


def _col(table: pa.Table, name: str) -> list[Any]:
    values: list[Any] = table.column(name).to_pylist()
    return values


# --------------------------------------------------------------------------- parent_node


def test_ort_kernels_map_to_their_parent_nodes() -> None:
    tables = OrtTraceImporter().read(FIXTURES / "cuda_ep_profile.json")
    m = attribute_kernels(tables.kernels, tables.ops, tables.api_calls, tables.annotations)
    assert m.schema == OP_KERNEL_MAP.schema
    assert _col(m, "op_name") == ["conv1", "relu1", "fc", "fc"] * 2
    assert _col(m, "op_type") == ["Conv", "Relu", "Gemm", "Gemm"] * 2
    assert _col(m, "method") == ["parent_node"] * 8
    # ops rows: per run X_Memcpy, conv1, relu1, fc, Y_Memcpy; second run starts at row 5
    assert _col(m, "op_row") == [1, 2, 3, 3, 6, 7, 8, 8]
    assert _col(m, "launch_row") == [None] * 8
    assert _col(m, "launch_delay_ns") == [None] * 8


def test_ort_kernels_without_parent_are_unattributed() -> None:
    tables = OrtTraceImporter().read(FIXTURES / "rocm_ep_profile.json")
    m = attribute_kernels(tables.kernels, tables.ops, tables.api_calls, tables.annotations)
    assert _col(m, "op_name") == ["mm", None]
    assert _col(m, "method") == ["parent_node", None]
    s = attribution_summary(m)
    assert s["kernels"] == 2
    assert s["kernels_attributed"] == 1
    assert s["gpu_time_ns"] == 17_000
    assert s["gpu_time_attributed_ns"] == 14_000
    assert s["gpu_time_unattributed_share"] == pytest.approx(3 / 17)


def test_parent_node_needs_same_iteration_and_thread() -> None:
    ops = OPS.from_rows(
        [
            {"source": "onnxruntime", "iteration": 0, "node_name": "a", "op_type": "Add",
             "start_ns": 1000, "dur_ns": 10, "thread_id": 5},
            {"source": "onnxruntime", "iteration": 1, "node_name": "a", "op_type": "Add",
             "start_ns": 1000, "dur_ns": 10, "thread_id": 5},
        ]
    )  # fmt: skip
    kernels = KERNELS.from_rows(
        [
            _kernel("k", 1000, 4, source="onnxruntime", time_is_gpu=False, iteration=1,
                    thread_id=5),
            _kernel("k", 1000, 4, source="onnxruntime", time_is_gpu=False, iteration=0,
                    thread_id=6),
            _kernel("k", 1000, 4, source="onnxruntime", time_is_gpu=False, iteration=2,
                    thread_id=5),
        ]
    )  # fmt: skip
    m = attribute_kernels(kernels, ops, API_CALLS.empty())
    assert _col(m, "op_row") == [1, None, None]


# --------------------------------------------------------------------------- external_id


def _kineto_nested() -> tuple[pa.Table, pa.Table, pa.Table]:
    # thread 7: aten::linear [0, 100] > aten::addmm [10, 60] (ext 2) > cudaLaunchKernel
    # thread 7: aten::relu [120, 160] (ext 3) > cudaLaunchKernel
    ops = OPS.from_rows(
        [
            _op("aten::linear", 0, 100, thread_id=7, process_id=1, external_id=1),
            _op("aten::addmm", 10, 50, thread_id=7, process_id=1, external_id=2),
            _op("aten::relu", 120, 40, thread_id=7, process_id=1, external_id=3),
        ]
    )
    api = API_CALLS.from_rows(
        [
            _api(100, 7, 20, 5, process_id=1, external_id=2),
            _api(101, 7, 130, 5, process_id=1, external_id=3),
        ]
    )
    kernels = KERNELS.from_rows(
        [
            _kernel("sm90_xmma_gemm", 40, 30, correlation_id=100, external_id=2, process_id=1),
            _kernel("elementwise", 150, 3, correlation_id=101, external_id=3, process_id=1),
        ]
    )
    return kernels, ops, api


def test_external_id_gives_the_innermost_op_and_outermost_ops_the_top_level() -> None:
    kernels, ops, api = _kineto_nested()
    m = attribute_kernels(kernels, ops, api)
    assert _col(m, "op_row") == [1, 2]
    assert _col(m, "op_name") == ["aten::addmm", "aten::relu"]
    assert _col(m, "method") == ["external_id", "external_id"]
    assert _col(m, "launch_row") == [0, 1]
    assert _col(m, "launch_delay_ns") == [40 - 25, 150 - 135]
    assert outermost_ops(ops).to_pylist() == [0, 0, 2]


def test_external_id_respects_the_process() -> None:
    _, ops, _ = _kineto_nested()
    other = KERNELS.from_rows([_kernel("k", 40, 30, external_id=2, process_id=99)])
    m = attribute_kernels(other, ops, API_CALLS.empty())
    assert _col(m, "op_row") == [None]
    assert _col(m, "method") == [None]


# --------------------------------------------------------------------------- correlation


def test_correlation_finds_the_innermost_op_on_the_launching_thread() -> None:
    ops = OPS.from_rows(
        [
            _op("outer", 0, 100, thread_id=1, process_id=1),
            _op("inner", 20, 30, thread_id=1, process_id=1),
            _op("other_thread", 0, 100, thread_id=2, process_id=1),
            _op("same_start_outer", 200, 50, thread_id=1, process_id=1),
            _op("same_start_inner", 200, 10, thread_id=1, process_id=1),
        ]
    )
    api = API_CALLS.from_rows(
        [
            _api(1, 1, 30, 2, process_id=1),  # inside inner
            _api(2, 1, 60, 2, process_id=1),  # after inner ended: outer
            _api(3, 2, 30, 2, process_id=1),  # other thread
            _api(4, 1, 205, 2, process_id=1),  # two ops start at 200: the shorter
            _api(5, 1, 230, 2, process_id=1),  # after the shorter one ended
            _api(6, 1, 500, 2, process_id=1),  # after every op
        ]
    )
    kernels = KERNELS.from_rows(
        [_kernel(f"k{c}", 1000 + c, 5, correlation_id=c, process_id=1) for c in range(1, 8)]
    )
    m = attribute_kernels(kernels, ops, api)
    assert _col(m, "op_name") == [
        "inner",
        "outer",
        "other_thread",
        "same_start_inner",
        "same_start_outer",
        None,
        None,  # correlation 7 has no launch call
    ]
    assert _col(m, "method") == ["correlation"] * 5 + [None, None]
    assert _col(m, "launch_row") == [0, 1, 2, 3, 4, 5, None]
    assert _col(m, "launch_delay_ns") == [1001 - 32, 1002 - 62, 1003 - 32, 1004 - 207,
                                          1005 - 232, 1006 - 502, None]  # fmt: skip


def test_time_window_for_ops_of_another_profile() -> None:
    # ONNX Runtime node events next to a rocprofv3 trace on the same clock.
    ops = OPS.from_rows(
        [
            {"source": "onnxruntime", "iteration": 0, "node_name": "conv", "op_type": "Conv",
             "start_ns": 1_000, "dur_ns": 500, "thread_id": 42},
            {"source": "onnxruntime", "iteration": 0, "node_name": "relu", "op_type": "Relu",
             "start_ns": 1_600, "dur_ns": 100, "thread_id": 42},
        ]
    )  # fmt: skip
    api = API_CALLS.from_rows(
        [
            _api(11, 42, 1_100, 20, source="rocprofv3-csv", domain="hip", name="hipLaunchKernel"),
            _api(12, 42, 1_650, 20, source="rocprofv3-csv", domain="hip", name="hipLaunchKernel"),
            _api(13, 42, 1_550, 20, source="rocprofv3-csv", domain="hip", name="hipLaunchKernel"),
        ]
    )
    kernels = KERNELS.from_rows(
        [
            _kernel("Cijk_gemm", 1_200, 300, source="rocprofv3-csv", correlation_id=11),
            _kernel("relu_kernel", 1_700, 20, source="rocprofv3-csv", correlation_id=12),
            _kernel("between", 1_580, 10, source="rocprofv3-csv", correlation_id=13),
        ]
    )
    m = attribute_kernels(kernels, ops, api)
    assert _col(m, "op_row") == [0, 1, None]
    assert _col(m, "method") == ["time_window", "time_window", None]


def test_marker_when_no_op_contains_the_launch() -> None:
    ops = OPS.from_rows([_op("aten::mm", 0, 50, thread_id=1, process_id=1)])
    api = API_CALLS.from_rows(
        [
            _api(1, 1, 10, 2, process_id=1),  # inside aten::mm: correlation wins
            _api(2, 1, 120, 2, process_id=1),  # inside the marker on thread 1
            _api(3, 2, 120, 2, process_id=1),  # thread 2: the process-wide range
            _api(4, 3, 400, 2, process_id=1),  # outside everything
        ]
    )
    ann = ANNOTATIONS.from_rows(
        [
            {"source": "rocprofv3-csv", "kind": "marker", "name": "decode", "thread_id": 1,
             "start_ns": 100, "dur_ns": 100},
            {"source": "rocprofv3-csv", "kind": "marker", "name": "attn", "thread_id": 1,
             "start_ns": 110, "dur_ns": 20},
            {"source": "rocprofv3-csv", "kind": "user", "name": "whole_step",
             "start_ns": 0, "dur_ns": 300},
            {"source": "kineto", "kind": "step", "name": "ProfilerStep#0", "thread_id": 3,
             "start_ns": 0, "dur_ns": 1000, "step": 0},
        ]
    )  # fmt: skip
    kernels = KERNELS.from_rows(
        [_kernel(f"k{c}", 1000, 5, correlation_id=c, process_id=1) for c in range(1, 5)]
    )
    m = attribute_kernels(kernels, ops, api, ann)
    assert _col(m, "method") == ["correlation", "marker", "marker", None]
    assert _col(m, "op_name") == ["aten::mm", "attn", "whole_step", None]
    assert _col(m, "op_row") == [0, None, None, None]
    groups = kernel_groups(m, ops, api)
    marker = {r["op_name"]: r for r in groups.to_pylist()}["attn"]
    assert (marker["op_calls"], marker["kernel_count"], marker["cpu_time_ns"]) == (0, 1, 0)
    assert marker["kernels_per_call"] is None


# --------------------------------------------------------------------------- groups, summary


def test_kernel_groups_sum_per_op() -> None:
    ops = OPS.from_rows(
        [
            _op("aten::addmm", 0, 100, thread_id=1, process_id=1),
            _op("aten::addmm", 200, 80, thread_id=1, process_id=1),
            _op("aten::relu", 300, 10, thread_id=1, process_id=1),
            _op("aten::view", 400, 5, thread_id=1, process_id=1),  # launches nothing
        ]
    )
    api = API_CALLS.from_rows(
        [
            _api(1, 1, 10, 7, process_id=1),
            _api(2, 1, 20, 3, process_id=1),
            _api(3, 1, 210, 6, process_id=1),
        ]
    )
    kernels = KERNELS.from_rows(
        [
            _kernel("gemm_a", 500, 40, correlation_id=1, process_id=1, family="gemm"),
            _kernel("bias", 540, 5, correlation_id=2, process_id=1, family="elementwise"),
            _kernel("gemm_a", 600, 30, correlation_id=3, process_id=1, family="gemm"),
            # relu's kernel has an External id but no launch call
            _kernel("relu_k", 700, 2, family="elementwise"),
            _kernel("orphan", 800, 9, family="other"),
        ]
    )
    ops = ops.set_column(ops.schema.get_field_index("external_id"), "external_id",
                         pa.array([None, None, 77, None], pa.int64()))  # fmt: skip
    kernels = kernels.set_column(kernels.schema.get_field_index("external_id"), "external_id",
                                 pa.array([None, None, None, 77, None], pa.int64()))  # fmt: skip
    m = attribute_kernels(kernels, ops, api)
    assert _col(m, "method") == ["correlation", "correlation", "correlation", "external_id", None]
    g = kernel_groups(m, ops, api)
    assert g.schema == KERNEL_GROUPS.schema
    assert g.to_pylist() == [
        {
            "op_name": "aten::addmm",
            "op_type": "aten::addmm",
            "op_calls": 2,
            "kernel_count": 3,
            "kernels_per_call": 1.5,
            "gpu_time_ns": 75,
            "cpu_time_ns": 180,
            "launch_overhead_ns": 16,
            "top_kernel": "gemm_a",
            "families": ["gemm", "elementwise"],
        },
        {
            "op_name": "aten::relu",
            "op_type": "aten::relu",
            "op_calls": 1,
            "kernel_count": 1,
            "kernels_per_call": 1.0,
            "gpu_time_ns": 2,
            "cpu_time_ns": 10,
            "launch_overhead_ns": None,
            "top_kernel": "relu_k",
            "families": ["elementwise"],
        },
    ]
    short = kernels.set_column(kernels.schema.get_field_index("short_name"), "short_name",
                               pa.array(["gemm", None, "gemm", None, None]))  # fmt: skip
    g2 = kernel_groups(m, ops, api, kernels=short)
    assert _col(g2, "top_kernel") == ["gemm", "relu_k"]

    s = attribution_summary(m)
    assert s == {
        "kernels": 5,
        "kernels_attributed": 4,
        "kernels_unattributed": 1,
        "kernels_attributed_fraction": 0.8,
        "gpu_time_ns": 86,
        "gpu_time_attributed_ns": 77,
        "gpu_time_attributed_share": 77 / 86,
        "gpu_time_unattributed_share": 9 / 86,
        "by_method": {
            "correlation": {"kernels": 3, "gpu_time_ns": 75, "gpu_time_share": 75 / 86},
            "external_id": {"kernels": 1, "gpu_time_ns": 2, "gpu_time_share": 2 / 86},
        },
    }


def test_empty_inputs() -> None:
    m = attribute_kernels(KERNELS.empty(), OPS.empty(), API_CALLS.empty(), ANNOTATIONS.empty())
    assert m.schema == OP_KERNEL_MAP.schema and m.num_rows == 0
    assert kernel_groups(m, OPS.empty(), API_CALLS.empty()).num_rows == 0
    s = attribution_summary(m)
    assert s["kernels"] == 0 and s["kernels_attributed_fraction"] is None
    assert s["gpu_time_attributed_share"] is None and s["by_method"] == {}
    kernels = KERNELS.from_rows([_kernel("k", 0, 5, correlation_id=1)])
    m = attribute_kernels(kernels, OPS.empty(), API_CALLS.empty(), None)
    assert _col(m, "op_row") == [None] and _col(m, "method") == [None]
    assert attribution_summary(m)["gpu_time_unattributed_share"] == 1.0
    assert outermost_ops(OPS.empty()).to_pylist() == []


# --------------------------------------------------------------------------- the stabbing


def test_interval_stabbing_matches_brute_force() -> None:
    rng = np.random.default_rng(3)
    # properly nested intervals per thread: children carved out of parents
    groups: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    for g in range(3):
        stack = [(0, 10_000)]
        while stack and len(starts) < 400 * (g + 1):
            lo, hi = stack.pop()
            if hi - lo < 4:
                continue
            a = int(rng.integers(lo, hi - 2))
            b = int(rng.integers(a + 1, hi))
            groups.append(g)
            starts.append(a)
            ends.append(b)
            stack += [(a, (a + b) // 2), ((a + b) // 2 + 1, b), (b + 1, hi)]
    gs, ss, es = (np.array(x, dtype=np.int64) for x in (groups, starts, ends))
    iv = _Intervals(gs, ss, es)
    qg = rng.integers(0, 4, 3000).astype(np.int64)  # group 3 has no intervals
    qt = rng.integers(-5, 10_005, 3000).astype(np.int64)
    got = iv.innermost(qg, qt)
    for g, t, row in zip(qg, qt, got, strict=True):
        holds = np.flatnonzero((gs == g) & (ss <= t) & (es >= t))
        if len(holds) == 0:
            assert row == -1
        else:
            # innermost: latest start, then earliest end
            best = holds[np.lexsort((es[holds], -ss[holds]))[0]]
            assert (ss[row], es[row]) == (ss[best], es[best])
