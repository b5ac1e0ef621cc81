"""Roofline: where each operator (and kernel) sits against the machine's ceilings.

Per executed node: its median time per iteration (ORT profile), its work and memory traffic
from the graph's cost model (:mod:`aaco.analysis.cost`; nodes ORT fused are costed as the
group of original nodes they stand for, traffic counted at the group's boundary), and the
ceilings (:mod:`aaco.analysis.ceilings`: calibrated on this machine, else published). Per
kernel, when rocprofv3 counters were imported: FLOPs and HBM / L2 / LDS bytes with the
rocprof-compute formulas for MI200 and MI300 (docs/metrics.md, "Roofline").

Cache-aware: with per-level bandwidths (a calibrated CPU), a node's bytes per call (its
working set) pick the nearest memory level that holds them, and that level's bandwidth
is its memory roof (``memory_level``). A row whose achieved FLOP/s or bytes/s exceeds its
roof by more than ``ABOVE_ROOF_TOLERANCE`` is flagged ``above_roof``: the ceilings are too
low for it, and its efficiency is no evidence.

Everything unknown stays None: no ceiling, no bound; no cost, no intensity.

Example::

    table = node_roofline(ops, costs, nodes, edges, ceilings)
    summary = roofline_summary(table, ceilings)
"""

from __future__ import annotations

import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.kernels import classify_kernel, math_unit
from aaco.analysis.ops import per_iteration_medians
from aaco.session.calibration import normalize_dtype
from aaco.session.schema import ROOFLINE

__all__ = [
    "ABOVE_ROOF_TOLERANCE",
    "CeilingsLike",
    "GraphIndex",
    "counter_work",
    "group_traffic",
    "kernel_roofline",
    "node_instructions",
    "node_roofline",
    "roof_flops",
    "roofline_row",
    "roofline_summary",
]


class CeilingsLike(Protocol):
    """What the roofline needs of a ceilings object (:class:`aaco.session.calibration.Ceilings`)."""

    @property
    def device(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def bytes_per_s(self) -> float | None: ...

    def peak_flops(self, dtype: str | None) -> float | None: ...


#: achieved above a roof by more than this (10 %) is flagged as a ceiling problem, not
#: measurement noise: a stable calibration figure varies by < 3 % (CV of its last 5
#: repetitions) and a node's time is a median over the profiled iterations; 10 % is over
#: three such CVs. (Between calibrations minutes apart a shared VM drifts more: the
#: classifier's use of flagged rows is ``bottleneck.ABOVE_ROOF_AS_SATURATED``.)
ABOVE_ROOF_TOLERANCE = 0.10


def _pos(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x > 0 else None


def _memory_roof(
    ceilings: CeilingsLike | None, working_set: float | None
) -> tuple[str | None, float | None]:
    """(memory level, bandwidth roof) for a working set (bytes per call); ceilings without
    levels (published peaks, older calibrations): (None, their DRAM roof)."""
    if ceilings is None:
        return None, None
    pick = getattr(ceilings, "memory_roof", None)
    if pick is None:
        return None, ceilings.bytes_per_s
    level, bw = pick(working_set)
    return (str(level) if level is not None else None), bw


def roofline_row(
    *,
    level: str,
    name: str,
    op_type: str | None,
    dtype: str | None,
    calls_per_iter: float | None,
    time_ns: float | None,
    flops: float | None,
    nbytes: float | None,
    peak_flops: float | None,
    peak_bytes: float | None,
    source: str | None,
    memory_level: str | None = None,
) -> dict[str, Any]:
    """One ROOFLINE row from time, work and ceilings (formulas in docs/metrics.md).

    ``peak_bytes``: the bandwidth roof of ``memory_level`` (the level the row's working set
    fits in), or the DRAM roof when levels are unknown."""
    t_s = time_ns / 1e9 if time_ns is not None and time_ns > 0 else None
    intensity = flops / nbytes if flops is not None and nbytes else None
    ach_f = flops / t_s if flops is not None and t_s else None
    ach_b = nbytes / t_s if nbytes is not None and t_s else None
    pf, pb = _pos(peak_flops), _pos(peak_bytes)
    ridge = pf / pb if pf and pb else None
    attainable = bound = efficiency = headroom = None
    # intensity 0 with work done (bytes counted as infinite: odd counters) has no roof
    if pf and pb and flops and intensity and ach_f:
        attainable = min(pf, intensity * pb)
        bound = "memory" if ridge is not None and intensity < ridge else "compute"
        efficiency = ach_f / attainable
        headroom = max(1.0, attainable / ach_f)
    elif pb and flops == 0 and nbytes and ach_b:
        # pure data movement: only the bandwidth roof applies
        bound = "memory"
        efficiency = ach_b / pb
        headroom = max(1.0, pb / ach_b)
    above: bool | None = None
    if (pf and ach_f is not None) or (pb and ach_b is not None):
        limit = 1.0 + ABOVE_ROOF_TOLERANCE
        above = bool(
            (pf is not None and ach_f is not None and ach_f > pf * limit)
            or (pb is not None and ach_b is not None and ach_b > pb * limit)
        )
    return {
        "level": level,
        "name": name,
        "op_type": op_type,
        "dtype": dtype,
        "calls_per_iter": calls_per_iter,
        "time_ns": time_ns,
        "time_share": None,
        "flops": flops,
        "bytes": nbytes,
        "intensity": intensity,
        "achieved_flops_per_s": ach_f,
        "achieved_bytes_per_s": ach_b,
        "peak_flops_per_s": pf,
        "peak_bytes_per_s": pb,
        "ridge_intensity": ridge,
        "attainable_flops_per_s": attainable,
        "bound": bound,
        "efficiency": efficiency,
        "headroom": headroom,
        "ceiling_source": source if (pf or pb) else None,
        "memory_level": memory_level if pb else None,
        "above_roof": above,
    }


#: control-flow nodes whose own time is bookkeeping (their bodies run as nodes of their own);
#: not BeamSearch & co., whose own time includes logits processing and top-k
_BRANCHING = frozenset({"If", "Loop", "Scan"})


def _no_work(r: Mapping[str, Any]) -> bool:
    """A row known to do no arithmetic and move no data of its own: metadata-only operators
    (Reshape, Squeeze... 0 FLOPs, 0 bytes) and control-flow nodes (If/Loop/Scan: 0 FLOPs of
    their own, their bodies' nodes being rows of their own). Their time is dispatch and
    bookkeeping: known to be neither memory- nor compute-bound, so not "unknown"."""
    if r.get("flops") != 0 or r.get("bound") is not None:
        return False
    return r.get("bytes") == 0 or (r.get("bytes") is None and r.get("op_type") in _BRANCHING)


def _shares(rows: list[dict[str, Any]]) -> None:
    total = sum(r["time_ns"] or 0.0 for r in rows)
    for r in rows:
        r["time_share"] = (r["time_ns"] or 0.0) / total if total else None


# --- node level ---------------------------------------------------------------------------


class GraphIndex:
    """The original graph's node inputs/outputs, tensor sizes and consumers, for traffic."""

    def __init__(self, nodes: pa.Table, edges: pa.Table | None) -> None:
        orig = nodes.filter(pc.equal(nodes.column("graph"), "original"))
        self.io: dict[str, tuple[list[str], list[str]]] = {
            r["node_name"]: (r["inputs"] or [], r["outputs"] or [])
            for r in orig.select(["node_name", "inputs", "outputs"]).to_pylist()
        }
        self.sizes = _tensor_bytes(edges)
        self.consumers = _consumers(edges)


def group_traffic(members: Iterable[str], index: GraphIndex) -> tuple[float | None, bool]:
    """Bytes crossing the boundary of a group of original nodes (each tensor once).

    Inputs produced outside the group (activations, weights, graph inputs) are read;
    outputs consumed outside it or leaving the graph are written; tensors passed between
    members stay inside. Returns (bytes, or None when a tensor's size is unknown; found),
    ``found`` being False when no member is in the graph.
    """
    member_set = set(members)
    io = [index.io[m] for m in member_set if m in index.io]
    if not io:
        return None, False
    produced = {o for _, outs in io for o in outs if o}
    total = 0.0
    unknown = False
    seen: set[str] = set()
    for ins, outs in io:
        for t in ins:
            if not t or t in produced or t in seen:
                continue
            seen.add(t)
            b = index.sizes.get(t)
            unknown |= b is None
            total += b or 0
        for t in outs:
            if not t or t in seen:
                continue
            inside = index.consumers.get(t)
            if inside is not None and inside and inside <= member_set:
                continue  # consumed only inside the group
            seen.add(t)
            b = index.sizes.get(t)
            unknown |= b is None
            total += b or 0
    return (None if unknown else total), True


def _tensor_bytes(edges: pa.Table | None) -> dict[str, int | None]:
    if edges is None or not edges.num_rows:
        return {}
    out: dict[str, int | None] = {}
    for t, b in zip(
        edges.column("tensor").to_pylist(), edges.column("bytes").to_pylist(), strict=True
    ):
        out[t] = b
    return out


def _consumers(edges: pa.Table | None) -> dict[str, set[str] | None]:
    """tensor -> consumer nodes; None marks a tensor that leaves the graph."""
    out: dict[str, set[str] | None] = {}
    if edges is None or not edges.num_rows:
        return out
    for t, c, kind in zip(
        edges.column("tensor").to_pylist(),
        edges.column("consumer").to_pylist(),
        edges.column("kind").to_pylist(),
        strict=True,
    ):
        if c is None or kind == "graph_output":
            out[t] = None
            continue
        cur = out.setdefault(t, set())
        if cur is not None:
            cur.add(c)
    return out


def _first_rows(col: pa.ChunkedArray) -> pa.Array:
    """The index of the first row of each distinct value of ``col`` (a null being one), in
    the order of those rows."""
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    codes = pc.dictionary_encode(arr, null_encoding="encode").indices
    codes_np = np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64)
    first = np.full(int(codes_np.max()) + 1 if len(codes_np) else 0, len(codes_np), np.int64)
    np.minimum.at(first, codes_np, np.arange(len(codes_np), dtype=np.int64))
    return pa.array(np.sort(first))


def node_roofline(
    ops: pa.Table,
    costs: pa.Table | None,
    nodes: pa.Table | None,
    edges: pa.Table | None,
    ceilings: CeilingsLike | None,
    gpu_ns_per_iter: Mapping[str, float] | None = None,
    executed: pa.Table | None = None,
    *,
    device_time: bool = False,
    instruction: Mapping[str, str] | None = None,
) -> pa.Table:
    """ROOFLINE rows (level ``node``) for the executed nodes of an ORT profile.

    ``gpu_ns_per_iter``: GPU time per iteration of the kernels attributed to each node
    (from ``attribution/kernel_groups.parquet``). ``device_time``: the ceilings are a GPU's
    and the profile's node durations are host-side launch times, which are no measure of
    the work: a node's time is then its attributed kernel time alone, and a node without
    one has an unknown time (no achieved figures, no bound), never its host time.
    ``instruction``: node -> ``matrix`` / ``vector`` / ``tf32``, what its kernels' names tell
    of the units they ran on (:func:`node_instructions`); the node's compute roof is then
    that unit's peak for its dtype (:func:`roof_flops`), else the highest for its dtype.

    A node's work is the sum of the FLOPs of the original nodes it stands for
    (``original_nodes``; itself when null), None when any of them has no formula; its
    traffic is the group's boundary traffic (:func:`group_traffic`), or the node's own
    bytes when it is not fused. ``executed``: OP_COSTS rows of the executed nodes
    themselves (:func:`aaco.analysis.cost.executed_node_costs`); a node's own row gives
    what the original nodes cannot (no mapping, a member without a formula or shape, or
    traffic the graph's symbolic shapes leave unknown while the profile recorded the
    shapes), and wins when the mapping is unknown. Sorted by time, longest first.
    """
    if ops is None or not ops.num_rows or "iteration" not in ops.column_names:
        return ROOFLINE.empty()
    times = per_iteration_medians(ops, ("node_name", "op_type"))
    if not times:
        return ROOFLINE.empty()
    cost_by_name: dict[str, dict[str, Any]] = {}
    if costs is not None and costs.num_rows:
        for r in costs.to_pylist():
            cost_by_name[r["node_name"]] = r
    own: dict[str, dict[str, Any]] = {}
    if executed is not None and executed.num_rows:
        own = {r["node_name"]: r for r in executed.to_pylist()}
    # each node's original nodes, from its first row
    originals: dict[str, list[str]] = {}
    mapped: set[str] = set()
    first = _first_rows(ops.column("node_name"))
    for n, o in zip(
        ops.column("node_name").take(first).to_pylist(),
        ops.column("original_nodes").take(first).to_pylist(),
        strict=True,
    ):
        originals[n] = list(o) if o else [n]
        if o:
            mapped.add(n)
    index = GraphIndex(nodes, edges) if nodes is not None and nodes.num_rows else None
    rows = []
    for (name, op_type), (host_ns, calls) in times.items():
        t_ns: float | None = host_ns
        if gpu_ns_per_iter and name in gpu_ns_per_iter:
            t_ns = gpu_ns_per_iter[name]
        elif device_time:
            t_ns = None
        members = [m for m in originals.get(name, [name]) if m]
        found = [cost_by_name[m] for m in members if m in cost_by_name]
        flops: float | None = None
        nbytes: float | None = None
        dtype = None
        if found and len(found) == len(members):
            if all(c["flops"] is not None for c in found):
                flops = float(sum(c["flops"] for c in found)) * calls
            heaviest = max(found, key=lambda c: c["flops"] or 0)
            dtype = heaviest["dtype"]
            if len(members) == 1:
                b = found[0]["bytes"]
                nbytes = float(b) * calls if b is not None else None
            elif index is not None:
                gb, ok = group_traffic(members, index)
                nbytes = gb * calls if ok and gb is not None else None
        if any(c["cost_model"] == "control_flow" and c["op_type"] != op_type for c in found):
            # a node standing for an If/Loop/Scan (a branch ORT inlined) does its branch's
            # work, which the control-flow node's own cost (0) does not hold
            flops = None
        mine = own.get(name)
        if mine is not None and (flops is None or name not in mapped):
            if mine["flops"] is not None or flops is None:
                flops = float(mine["flops"]) * calls if mine["flops"] is not None else None
                dtype = mine["dtype"]
            if mine["bytes"] is not None or nbytes is None:
                nbytes = float(mine["bytes"]) * calls if mine["bytes"] is not None else None
        elif mine is not None and nbytes is None and mine["bytes"] is not None:
            # the originals' work is known but not their traffic (a dimension the graph
            # left symbolic, e.g. an RNN's initial_h): the shapes the profile recorded
            nbytes = float(mine["bytes"]) * calls
        unit = instruction.get(name) if instruction else None
        if unit is None and op_type and not _MATRIX_CAPABLE.search(op_type):
            unit = "vector"  # an elementwise / norm / pooling op never runs on matrix units
        pf = roof_flops(ceilings, dtype, unit)
        # the working set: what one call moves (bytes per iteration / calls per iteration)
        per_call = nbytes / calls if nbytes is not None and calls else None
        mem_level, pb = _memory_roof(ceilings, per_call)
        rows.append(
            roofline_row(
                level="node",
                name=name,
                op_type=op_type,
                dtype=dtype,
                calls_per_iter=calls,
                time_ns=t_ns,
                flops=flops,
                nbytes=nbytes,
                peak_flops=pf,
                peak_bytes=pb,
                source=ceilings.source if ceilings is not None else None,
                memory_level=mem_level,
            )
        )
    _shares(rows)
    rows.sort(key=lambda r: -(r["time_ns"] or 0))
    return ROOFLINE.from_rows(rows)


def roof_flops(ceilings: CeilingsLike | None, dtype: str | None, unit: str | None) -> float | None:
    """The compute roof of work in ``dtype`` on ``unit`` (``matrix``, ``vector``, ``tf32``;
    None: unknown, the highest roof of the dtype). A unit without a figure of its own for
    the dtype (no FP16 vector peak in a data sheet) falls back to the dtype's highest."""
    if ceilings is None:
        return None
    if unit == "tf32" and normalize_dtype(dtype) in ("float32", "tfloat32_matrix"):
        return ceilings.peak_flops("tfloat32") or ceilings.peak_flops(dtype)
    if unit in ("matrix", "vector") and dtype:
        return ceilings.peak_flops(f"{dtype}_{unit}") or ceilings.peak_flops(dtype)
    return ceilings.peak_flops(dtype)


#: operator types that can run on matrix / tensor cores (ONNX, ORT contrib, torch): any
#: other operator's compute roof is the vector one
_MATRIX_CAPABLE = re.compile(
    r"matmul|gemm|conv|attention|einsum|lstm|gru|rnn|linear|addmm|bmm|(?<![a-z])mm\b"
    r"|scaled_dot_product|sdpa|flash",
    re.IGNORECASE,
)
#: kernel families whose instruction type decides an operator's compute roof
_COMPUTE_FAMILIES = frozenset({"gemm", "conv", "attention"})


def node_instructions(op_map: pa.Table | None) -> dict[str, str]:
    """node -> the unit its GEMM / convolution / attention kernels ran on, by their names
    (:func:`aaco.analysis.kernels.math_unit`): ``tf32`` when any is a TF32 kernel, else
    ``matrix`` when any ran on matrix / tensor cores, ``vector`` when every one is known to
    be a SIMT / VALU kernel; a node whose kernels leave it open is left out (unknown)."""
    if op_map is None or not op_map.num_rows:
        return {}
    units: dict[str, set[str | None]] = defaultdict(set)
    for op, name, family in zip(
        op_map.column("op_name").to_pylist(),
        op_map.column("kernel_name").to_pylist(),
        op_map.column("family").to_pylist(),
        strict=True,
    ):
        if op is None or not name:
            continue
        fam = family or classify_kernel(name).family
        if fam not in _COMPUTE_FAMILIES:
            continue
        units[op].add(math_unit(name))
    out: dict[str, str] = {}
    for op, seen in units.items():
        if "tf32" in seen:
            out[op] = "tf32"
        elif "matrix" in seen:
            out[op] = "matrix"
        elif seen == {"vector"}:
            out[op] = "vector"
    return out


# --- kernel level (rocprofv3 counters, rocprof-compute formulas) ---------------------------

_VALU_OPS = {"ADD": 1, "MUL": 1, "FMA": 2, "TRANS": 1}
_VALU_DTYPES = {"F16": "float16", "F32": "float32", "F64": "float64"}
_MFMA_DTYPES = {
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "I8": "int8",
}


def counter_work(values: Mapping[str, float]) -> dict[str, Any]:
    """FLOPs and bytes of one dispatch from its counters (names with or without ``_sum``).

    rocprof-compute's formulas: VALU FLOPs = 64 x (ADD + MUL + 2 x FMA + TRANS) per dtype,
    MFMA FLOPs = 512 x MFMA_MOPS per dtype; HBM bytes for MI200 (``TCC_EA_*``) or MI300
    (``TCC_EA0_*`` + ``TCC_BUBBLE``); L2 bytes = 64 x (TCP->TCC read + write + atomic
    requests); LDS bytes = (LDS_IDX_ACTIVE - LDS_BANK_CONFLICT) x 4 x 32. A quantity whose
    counters are absent is None. ``flops_by_dtype`` tells which ceiling applies.
    """
    v = {k.removesuffix("_sum"): float(x) for k, x in values.items()}
    by_dtype: dict[str, float] = defaultdict(float)
    seen_flop_counter = False
    for suffix, dtype in _VALU_DTYPES.items():
        for op, mult in _VALU_OPS.items():
            x = v.get(f"SQ_INSTS_VALU_{op}_{suffix}")
            if x is not None:
                seen_flop_counter = True
                by_dtype[dtype] += 64.0 * mult * x
    for suffix, dtype in _MFMA_DTYPES.items():
        x = v.get(f"SQ_INSTS_VALU_MFMA_MOPS_{suffix}")
        if x is not None:
            seen_flop_counter = True
            by_dtype[dtype + "_matrix"] += 512.0 * x
    flops = sum(by_dtype.values()) if seen_flop_counter else None

    hbm: float | None = None
    arch = None
    if "TCC_EA0_RDREQ" in v and "TCC_EA0_WRREQ" in v:
        arch = "mi300"
        bubble = v.get("TCC_BUBBLE")
        rd32, rd = v.get("TCC_EA0_RDREQ_32B"), v["TCC_EA0_RDREQ"]
        wr64, wr = v.get("TCC_EA0_WRREQ_64B"), v["TCC_EA0_WRREQ"]
        if bubble is not None and rd32 is not None and wr64 is not None:
            hbm = (
                128 * bubble + 32 * rd32 + 64 * (rd - bubble - rd32) + 32 * (wr - wr64) + 64 * wr64
            )
    elif "TCC_EA_RDREQ" in v and "TCC_EA_WRREQ" in v:
        arch = "mi200"
        rd32, rd = v.get("TCC_EA_RDREQ_32B"), v["TCC_EA_RDREQ"]
        wr64, wr = v.get("TCC_EA_WRREQ_64B"), v["TCC_EA_WRREQ"]
        if rd32 is not None and wr64 is not None:
            hbm = 32 * rd32 + 64 * (rd - rd32) + 64 * wr64 + 32 * (wr - wr64)
    l2: float | None = None
    if "TCP_TCC_READ_REQ" in v and "TCP_TCC_WRITE_REQ" in v:
        atomics = v.get("TCP_TCC_ATOMIC_WITH_RET_REQ", 0.0) + v.get(
            "TCP_TCC_ATOMIC_WITHOUT_RET_REQ", 0.0
        )
        l2 = 64 * (v["TCP_TCC_READ_REQ"] + v["TCP_TCC_WRITE_REQ"] + atomics)
    lds: float | None = None
    if "SQ_LDS_IDX_ACTIVE" in v and "SQ_LDS_BANK_CONFLICT" in v:
        lds = (v["SQ_LDS_IDX_ACTIVE"] - v["SQ_LDS_BANK_CONFLICT"]) * 4 * 32
    return {
        "flops": flops,
        "flops_by_dtype": dict(by_dtype),
        "hbm_bytes": hbm,
        "l2_bytes": l2,
        "lds_bytes": lds,
        "arch": arch,
    }


# The vectorised kernel roofline below computes exactly (bit for bit) what a loop of
# counter_work over the dispatches gives, summed per kernel name in dispatch order; the
# reference loop is kept in tests/analysis/test_kernel_roofline_vectorised.py.

_I64 = npt.NDArray[np.int64]
_F64 = npt.NDArray[np.float64]
_BOOL = npt.NDArray[np.bool_]

#: FLOP terms in counter_work's order: (counter, by_dtype key, multiplier)
_FLOP_TERMS: tuple[tuple[str, str, float], ...] = tuple(
    [
        (f"SQ_INSTS_VALU_{op}_{suffix}", dtype, 64.0 * mult)
        for suffix, dtype in _VALU_DTYPES.items()
        for op, mult in _VALU_OPS.items()
    ]
    + [(f"SQ_INSTS_VALU_MFMA_MOPS_{s}", d + "_matrix", 512.0) for s, d in _MFMA_DTYPES.items()]
)
#: by_dtype keys in the order a dispatch's counter_work inserts them
_DTYPE_KEYS: tuple[str, ...] = tuple(dict.fromkeys(key for _, key, _ in _FLOP_TERMS))
#: every counter counter_work reads (after ``_sum`` is dropped)
_WORK_COUNTERS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [c for c, _, _ in _FLOP_TERMS]
        + ["TCC_EA0_RDREQ", "TCC_EA0_WRREQ", "TCC_BUBBLE", "TCC_EA0_RDREQ_32B"]
        + ["TCC_EA0_WRREQ_64B", "TCC_EA_RDREQ", "TCC_EA_WRREQ", "TCC_EA_RDREQ_32B"]
        + ["TCC_EA_WRREQ_64B", "TCP_TCC_READ_REQ", "TCP_TCC_WRITE_REQ"]
        + ["TCP_TCC_ATOMIC_WITH_RET_REQ", "TCP_TCC_ATOMIC_WITHOUT_RET_REQ"]
        + ["SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT"]
    )
)
_ARCHS: tuple[str | None, ...] = (None, "mi300", "mi200")
#: builtin sum() of floats: compensated (Neumaier) from Python 3.12, plain before
_COMPENSATED_SUM = sys.version_info >= (3, 12)
#: a key span up to this many times the row count is addressed directly (no hashing)
_DIRECT_SPAN = 4


def _int_column(col: pa.ChunkedArray) -> tuple[_I64, _BOOL]:
    """(values with nulls as 0, validity) of an integer column."""
    col = pc.cast(col, pa.int64())
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    values = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return values, valid


def _string_codes(col: pa.ChunkedArray) -> tuple[_I64, list[str | None]]:
    """Per row a code of its string (null one of them), and the strings by code."""
    index: dict[str | None, int] = {}
    parts = [np.zeros(0, dtype=np.int64)]
    for chunk in col.chunks:
        enc = pc.dictionary_encode(chunk, null_encoding="encode")
        local = [index.setdefault(s, len(index)) for s in enc.dictionary.to_pylist()]
        parts.append(np.asarray(local, dtype=np.int64)[enc.indices.to_numpy()])
    return np.concatenate(parts), list(index)


def _renumber(codes: _I64) -> tuple[_I64, int]:
    """Dense codes (0..n-1, by first appearance) of int64 codes, and n."""
    enc = pc.dictionary_encode(pa.array(codes, type=pa.int64()))
    return np.asarray(enc.indices.to_numpy(), dtype=np.int64), len(enc.dictionary)


def _key_codes(col: pa.ChunkedArray) -> tuple[_I64, int]:
    """Codes of one key column, null its own value, and their span (codes < span)."""
    values, valid = _int_column(col)
    if not valid.any():
        return np.zeros(len(values), dtype=np.int64), 1
    lo, hi = int(values[valid].min()), int(values[valid].max())
    if hi - lo <= _DIRECT_SPAN * len(values) + 1024:
        return np.where(valid, values - lo + 1, 0), hi - lo + 2
    codes, n = _renumber(np.where(valid, values, 0))
    return np.where(valid, codes + 1, 0), n + 1


def _first_appearance_ids(codes: _I64, span: int) -> tuple[_I64, _I64]:
    """Per row the id of its code (codes < span), ids numbered by first appearance (0, 1,
    ...), and each id's first row."""
    n = len(codes)
    if span > _DIRECT_SPAN * n + 1024:
        codes, span = _renumber(codes)
    rows = np.arange(n, dtype=np.int64)
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, codes, rows)
    first_rows = np.flatnonzero(first[codes] == rows)
    del first, rows
    ids = np.full(span, -1, dtype=np.int64)
    ids[codes[first_rows]] = np.arange(len(first_rows), dtype=np.int64)
    return ids[codes], first_rows


def _dispatch_groups(counters: pa.Table) -> tuple[_I64, _I64]:
    """The counter rows' dispatches, by (device, dispatch id, correlation id) with nulls as
    values: per row its dispatch, numbered by first appearance, and each one's first row."""
    code, span = _key_codes(counters.column("device"))
    for name in ("dispatch_id", "correlation_id"):
        c, s = _key_codes(counters.column(name))
        if span * s >= 1 << 62:
            code, span = _renumber(code)
        if span * s >= 1 << 62:
            c, s = _renumber(c)
        code, span = code * s + c, span * s
    return _first_appearance_ids(code, span)


def _last_row_lookup(col: pa.ChunkedArray, query: pa.ChunkedArray, skip: _BOOL) -> _I64:
    """Per query value the last row of ``col`` that holds it (a dict filled in row order),
    -1 for none, a null or a skipped query."""
    keys, keys_valid = _int_column(col)
    q, q_valid = _int_column(query)
    q_valid &= ~skip
    out = np.full(len(q), -1, dtype=np.int64)
    rows = np.flatnonzero(keys_valid)
    if not len(rows) or not q_valid.any():
        return out
    k = keys[rows]
    lo, hi = int(k.min()), int(k.max())
    if hi - lo <= _DIRECT_SPAN * (len(k) + len(q)) + 1024:
        table = np.full(hi - lo + 1, -1, dtype=np.int64)
        np.maximum.at(table, k - lo, rows)
        inside = q_valid & (q >= lo) & (q <= hi)
        out[inside] = table[q[inside] - lo]
        return out
    rev = rows[::-1]
    idx = pc.index_in(pa.array(q[q_valid]), value_set=pa.array(keys[rev]))
    pos = np.asarray(pc.fill_null(idx, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    out[q_valid] = np.where(pos >= 0, rev[pos], -1)
    return out


def _float_sum(terms: list[tuple[_F64, _BOOL]], n: int) -> _F64:
    """builtin ``sum`` (int 0 start) of each dispatch's present terms, in order."""
    hi = np.zeros(n)
    lo = np.zeros(n)
    started = np.zeros(n, dtype=np.bool_)
    for x, present in terms:
        if not _COMPENSATED_SUM:
            hi = np.where(present, hi + x, hi)
            continue
        new, cont = present & ~started, present & started
        t = hi + x
        comp = np.where(np.abs(hi) >= np.abs(x), (hi - t) + x, (x - t) + hi)
        lo = np.where(cont, lo + comp, lo)
        hi = np.where(new, 0.0 + x, np.where(cont, t, hi))
        started |= present
    if _COMPENSATED_SUM:
        hi = np.where((lo != 0) & np.isfinite(lo), hi + lo, hi)
    return hi


class _DispatchCounters:
    """The counters counter_work reads, summed per matched dispatch (rows in order), as
    counter_work sees them: ``X`` and ``X_sum`` are one counter, the spelling that came
    later in a dispatch's rows winning."""

    def __init__(self, counters: pa.Table, dispatch: _I64, slot: _I64, n: int) -> None:
        self.n = n
        self.zero = np.zeros(n)
        self.absent = np.zeros(n, dtype=np.bool_)
        # matched rows of counters counter_work reads, grouped by counter in row order
        rows = np.flatnonzero((slot >= 0) & (dispatch >= 0))
        # few counters: a stable radix sort of small ints keeps the row order within each
        order = np.argsort(slot[rows].astype(np.int16), kind="stable")
        self.rows = rows[order]
        self.dispatch = dispatch[self.rows]
        self.bounds = np.searchsorted(slot[self.rows], np.arange(2 * len(_WORK_COUNTERS) + 1))
        values = counters.column("value")
        self.values = (
            np.asarray(values.to_numpy(), dtype=np.float64)[self.rows]
            if len(self.rows)
            else self.zero[:0]
        )

    def _spelling(self, s: int) -> tuple[_F64, _BOOL, _I64] | None:
        a, b = self.bounds[s], self.bounds[s + 1]
        if a == b:
            return None
        d = self.dispatch[a:b]
        total = np.zeros(self.n)
        np.add.at(total, d, self.values[a:b])
        none = np.iinfo(np.int64).max
        first = np.full(self.n, none, dtype=np.int64)
        np.minimum.at(first, d, self.rows[a:b])
        return total, first < none, first

    def get(self, name: str) -> tuple[_F64, _BOOL]:
        """(value, present) per dispatch; absent: 0.0 (shared arrays, not to be written)."""
        s = 2 * _WORK_COUNTERS.index(name)
        plain, summed = self._spelling(s), self._spelling(s + 1)
        if plain is None and summed is None:
            return self.zero, self.absent
        if plain is None or summed is None:
            got = plain if summed is None else summed
            assert got is not None
            return got[0], got[1]
        # both spellings: counter_work's dict keeps the one inserted later
        use_sum = summed[1] & (~plain[1] | (summed[2] > plain[2]))
        return np.where(use_sum, summed[0], plain[0]), plain[1] | summed[1]


def _dispatch_work(c: _DispatchCounters) -> dict[str, Any]:
    """counter_work for every dispatch at once: (value, present) arrays per quantity, the
    FLOPs by dtype (only dtypes some dispatch has) and the arch (index in _ARCHS)."""
    by_dtype: dict[str, tuple[_F64, _BOOL]] = {}
    for counter, key, mult in _FLOP_TERMS:
        x, present = c.get(counter)
        if present.any():
            acc, seen = by_dtype.get(key, (c.zero, c.absent))
            by_dtype[key] = (np.where(present, acc + mult * x, acc), seen | present)
    flop_seen = c.absent
    for _, seen in by_dtype.values():
        flop_seen = flop_seen | seen
    flops = _float_sum(list(by_dtype.values()), c.n) if by_dtype else c.zero

    rd3, rd3_ok = c.get("TCC_EA0_RDREQ")
    wr3, wr3_ok = c.get("TCC_EA0_WRREQ")
    rd2, rd2_ok = c.get("TCC_EA_RDREQ")
    wr2, wr2_ok = c.get("TCC_EA_WRREQ")
    is300 = rd3_ok & wr3_ok
    is200 = ~is300 & rd2_ok & wr2_ok
    hbm, hbm_ok = c.zero, c.absent
    if is300.any():
        bubble, bubble_ok = c.get("TCC_BUBBLE")
        rd32, rd32_ok = c.get("TCC_EA0_RDREQ_32B")
        wr64, wr64_ok = c.get("TCC_EA0_WRREQ_64B")
        hbm_ok = is300 & bubble_ok & rd32_ok & wr64_ok
        hbm = 128 * bubble + 32 * rd32 + 64 * (rd3 - bubble - rd32) + 32 * (wr3 - wr64) + 64 * wr64
    if is200.any():
        rd32, rd32_ok = c.get("TCC_EA_RDREQ_32B")
        wr64, wr64_ok = c.get("TCC_EA_WRREQ_64B")
        ok200 = is200 & rd32_ok & wr64_ok
        hbm200 = 32 * rd32 + 64 * (rd2 - rd32) + 64 * wr64 + 32 * (wr2 - wr64)
        hbm, hbm_ok = np.where(ok200, hbm200, hbm), hbm_ok | ok200

    rd, rd_ok = c.get("TCP_TCC_READ_REQ")
    wr, wr_ok = c.get("TCP_TCC_WRITE_REQ")
    l2, l2_ok = c.zero, rd_ok & wr_ok
    if l2_ok.any():
        atomics = (
            c.get("TCP_TCC_ATOMIC_WITH_RET_REQ")[0] + c.get("TCP_TCC_ATOMIC_WITHOUT_RET_REQ")[0]
        )
        l2 = 64 * (rd + wr + atomics)
    idx, idx_ok = c.get("SQ_LDS_IDX_ACTIVE")
    conflict, conflict_ok = c.get("SQ_LDS_BANK_CONFLICT")
    lds, lds_ok = c.zero, idx_ok & conflict_ok
    if lds_ok.any():
        lds = (idx - conflict) * 4 * 32
    return {
        "flops": (flops, flop_seen),
        "hbm": (hbm, hbm_ok),
        "l2": (l2, l2_ok),
        "lds": (lds, lds_ok),
        "by_dtype": by_dtype,
        "arch": np.where(is300, 1, np.where(is200, 2, 0)),
    }


def _sum_by(ids: _I64, n: int, values: _F64, present: _BOOL) -> tuple[list[float], list[bool]]:
    """Per id: the sum of its present values in order (0.0 start), and whether all were."""
    total = np.zeros(n)
    if present.any():
        np.add.at(total, ids[present], values[present])
    missing = np.bincount(ids[~present], minlength=n)
    return total.tolist(), (missing == 0).tolist()


def _kernel_aggregates(kernels: pa.Table, counters: pa.Table) -> dict[str, dict[str, Any]]:
    """Per kernel name (in order of its first matched dispatch) what the dispatch loop sums:
    time, dispatches, FLOPs / HBM / L2 / LDS bytes with their ``*_ok`` flags, FLOPs by dtype
    and the first dispatch's arch."""
    if counters.column("value").null_count:
        raise TypeError("unsupported operand type(s) for +: 'float' and 'NoneType'")
    gid, first_rows = _dispatch_groups(counters)
    # duration per dispatch: by dispatch id, else correlation id (the last kernel row wins)
    dur_col = kernels.column("dur_ns")
    dur_ok = np.asarray(dur_col.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    no = np.zeros(len(first_rows), dtype=np.bool_)
    row = _last_row_lookup(
        kernels.column("dispatch_id"), counters.column("dispatch_id").take(first_rows), no
    )
    got = (row >= 0) & dur_ok[np.maximum(row, 0)]
    by_corr = _last_row_lookup(
        kernels.column("correlation_id"), counters.column("correlation_id").take(first_rows), got
    )
    row = np.where(got, row, by_corr)
    matched = np.flatnonzero((row >= 0) & dur_ok[np.maximum(row, 0)])
    if not len(matched):
        return {}
    n = len(matched)
    # an int duration becomes a float as in Python's float + int (rounded to nearest)
    dur = np.asarray(
        pc.fill_null(dur_col.take(row[matched]), 0).to_numpy(zero_copy_only=False),
        dtype=np.float64,
    )
    # per row its matched dispatch (numbered in dispatch order), -1 for none
    m_of_group = np.full(len(first_rows), -1, dtype=np.int64)
    m_of_group[matched] = np.arange(n, dtype=np.int64)
    m_row = m_of_group[gid]
    del m_of_group
    raw, raw_names = _string_codes(counters.column("counter"))
    slot_of = np.full(len(raw_names), -1, dtype=np.int64)
    for i, name in enumerate(raw_names):
        base = name.removesuffix("_sum") if name is not None else None
        if base in _WORK_COUNTERS:
            slot_of[i] = 2 * _WORK_COUNTERS.index(base) + (base != name)
    if None in raw_names and (m_row[raw == raw_names.index(None)] >= 0).any():
        raise AttributeError("'NoneType' object has no attribute 'removesuffix'")
    work = _dispatch_work(_DispatchCounters(counters, m_row, slot_of[raw], n))
    del raw, m_row
    # kernel name per dispatch: its last counter row's; names in order of first dispatch
    last = np.zeros(len(first_rows), dtype=np.int64)
    np.maximum.at(last, gid, np.arange(len(gid), dtype=np.int64))
    del gid
    kcode, kstrings = _string_codes(counters.column("kernel_name"))
    codes = kcode[last[matched]]
    del kcode, last
    nid, first_m = _first_appearance_ids(codes, len(kstrings))
    # (a null name, which the schema rules out, is passed on as the dispatch loop did)
    names = [cast(str, kstrings[c]) for c in codes[first_m].tolist()]
    n_names = len(names)
    time, _ = _sum_by(nid, n_names, dur, np.ones(n, dtype=np.bool_))
    count = np.bincount(nid, minlength=n_names).tolist()
    arch = work["arch"][first_m].tolist()
    sums = {q: _sum_by(nid, n_names, *work[q]) for q in ("flops", "hbm", "l2", "lds")}
    dtypes: list[list[tuple[int, int, str, float]]] = [[] for _ in names]
    for key, (values, seen) in work["by_dtype"].items():
        total, _ = _sum_by(nid, n_names, values, seen)
        first = np.full(n_names, n, dtype=np.int64)
        np.minimum.at(first, nid[seen], np.flatnonzero(seen))
        rank = _DTYPE_KEYS.index(key)
        for i in np.flatnonzero(first < n).tolist():
            dtypes[i].append((int(first[i]), rank, key, total[i]))
    agg: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(names):
        a: dict[str, Any] = {"time": time[i], "n": count[i], "arch": _ARCHS[arch[i]]}
        for q, (total, ok) in sums.items():
            a[q], a[f"{q}_ok"] = total[i], ok[i]
        # a dtype enters a name's dict at its first dispatch, in counter_work's key order
        a["by_dtype"] = {key: f for _, _, key, f in sorted(dtypes[i])}
        agg[name] = a
    return agg


def kernel_roofline(
    kernels: pa.Table, counters: pa.Table, ceilings: CeilingsLike | None
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """ROOFLINE rows (level ``kernel``, one per kernel name) from counter-derived work.

    Dispatches are matched to kernels by (dispatch id, else correlation id); a kernel name's
    time, FLOPs and HBM bytes are summed over its matched dispatches and divided by the
    number of iterations (1 when kernels carry no iteration). Also returns per-name
    details (L2 and LDS bytes, arch, dispatches matched).

    Column-wise: what :func:`counter_work` gives per dispatch, summed per name in dispatch
    order, bit for bit (duplicate counter rows of a dispatch summed in row order).
    """
    if counters is None or not counters.num_rows or kernels is None or not kernels.num_rows:
        return ROOFLINE.empty(), []
    with np.errstate(all="ignore"):  # inf - inf is NaN, quietly, as in Python
        agg = _kernel_aggregates(kernels, counters)
    iters = kernels.column("iteration").drop_null() if "iteration" in kernels.column_names else []
    n_iter = max(1, len(pc.unique(iters))) if len(iters) else 1
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
                # counters tell the unit: MFMA work is <dtype>_matrix, VALU work the vector
                # roof alone (never the matrix peak it cannot reach)
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


# --- summary ------------------------------------------------------------------------------


_POINT_KEYS = ("level", "name", "op_type", "intensity", "achieved_flops_per_s", "time_share",
               "bound", "efficiency", "memory_level", "above_roof")  # fmt: skip


def _above_message(n: int, source: str | None) -> str | None:
    """The report's words for rows above their roof (roofline.json ``above_roof.message``)."""
    if not n:
        return None
    ops = f"{n} operator{'' if n == 1 else 's'}"
    if source == "published":
        return (
            f"{ops} run above the published roof: this device reaches more than its "
            "datasheet figure for them; their efficiency is not used"
        )
    return (
        f"{ops} run above the measured roof: the calibration is too low — re-run "
        "`aaco calibrate` on a quiet machine"
    )


def _share_where(rows: list[dict[str, Any]], pred: Any) -> float:
    return float(sum(r["time_share"] or 0.0 for r in rows if pred(r)))


def roofline_summary(
    table: pa.Table, ceilings: CeilingsLike | None, top_n: int = 10
) -> dict[str, Any]:
    """``metrics/roofline.json``: the ceilings used, time shares by bound, plottable points.

    ``time_share_memory_bound`` / ``_compute_bound`` / ``_no_work`` / ``_unknown``: shares
    of operator time (0-1; no work: :func:`_no_work`); ``weighted_efficiency``:
    time-weighted mean efficiency over rows where it is known (None when none); ``points``:
    every row with a known intensity and achieved FLOP/s (for the HTML plot);
    ``top_headroom``: rows with the most time recoverable under the roof (time x
    (1 - 1/headroom)).
    """
    rows = table.to_pylist()
    # each level's time_share sums to 1 on its own: the shares come from one level, the
    # operators' when there are any, else the kernels' (a trace imported alone)
    shared = [r for r in rows if r["level"] == "node"] or rows
    timed = sum(1 for r in shared if r["time_ns"])
    # a row above its roof has no meaningful efficiency: the roof, not the row, is wrong
    known_eff = [
        r
        for r in shared
        if r["efficiency"] is not None and r["time_share"] and not r.get("above_roof")
    ]
    weight = sum(r["time_share"] for r in known_eff)
    weighted = (
        sum(r["efficiency"] * r["time_share"] for r in known_eff) / weight if weight else None
    )
    recoverable = []
    for r in rows:
        if r["headroom"] and r["time_ns"]:
            gain = r["time_ns"] * (1.0 - 1.0 / r["headroom"])
            recoverable.append({"name": r["name"], "op_type": r["op_type"], "level": r["level"],
                                "bound": r["bound"], "time_ns": r["time_ns"],
                                "headroom": r["headroom"], "recoverable_ns": gain})  # fmt: skip
    recoverable.sort(key=lambda x: -x["recoverable_ns"])
    ceil: dict[str, Any] | None = None
    if ceilings is not None:
        levels = getattr(ceilings, "memory_levels", None) or ()
        ceil = {
            "device": ceilings.device,
            "source": ceilings.source,
            "bytes_per_s": ceilings.bytes_per_s,
            "flops_per_s": getattr(ceilings, "flops_per_s", None),
            "memory_levels": [
                {
                    "name": lv.name,
                    "capacity_bytes": lv.capacity_bytes,
                    "bytes_per_s": lv.bytes_per_s,
                    "measured": lv.measured,
                }
                for lv in levels
            ],
            "mode": getattr(ceilings, "mode", None),
            "contention": getattr(ceilings, "contention", None),
            "measured_utc": getattr(ceilings, "measured_utc", None),
        }
    above = [r for r in rows if r.get("above_roof")]
    by_level: dict[str, float] = defaultdict(float)
    for r in shared:
        if r.get("memory_level"):
            by_level[r["memory_level"]] += r["time_share"] or 0.0
    return {
        "ceilings": ceil,
        "rows": len(rows),
        "rows_with_work": sum(1 for r in rows if r["flops"] is not None),
        "time_share_memory_bound": _share_where(shared, lambda r: r["bound"] == "memory"),
        "time_share_compute_bound": _share_where(shared, lambda r: r["bound"] == "compute"),
        # rows whose time is unknown (a GPU session without kernel times) leave all of the
        # operator time of unknown bound
        "time_share_unknown": (
            _share_where(shared, lambda r: r["bound"] is None and not _no_work(r))
            if timed or not shared
            else 1.0
        ),
        "rows_timed": timed,
        "rows_untimed": len(shared) - timed,
        "time_share_no_work": _share_where(shared, _no_work),
        "weighted_efficiency": weighted,
        "points": [
            {k: r[k] for k in _POINT_KEYS}
            for r in rows
            if r["intensity"] is not None and r["achieved_flops_per_s"] is not None
        ],
        "top_headroom": recoverable[:top_n],
        "time_share_by_memory_level": dict(by_level),
        "above_roof": {
            "rows": len(above),
            "time_share": _share_where(shared, lambda r: bool(r.get("above_roof"))),
            "names": [r["name"] for r in above[:top_n]],
            "tolerance": ABOVE_ROOF_TOLERANCE,
            "message": _above_message(len(above), ceil["source"] if ceil else None),
        },
    }
