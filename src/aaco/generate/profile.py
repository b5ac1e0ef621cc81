"""Split the operator profile of one generation into its prefill and decode phases.

An ONNX Runtime profile (:func:`aaco.importers.ort_profile.parse_ort_profile`) numbers the
``model_run`` windows it kept; the generation loop knows which phase each window was (the
first run of a generation is the prefill, the others decode steps), so a node event's phase
is the phase of the run that encloses it. These functions are pure: OPS tables in, rows out.

Example::

    prof = parse_ort_profile(path, skip_runs=runs_per_generation)
    phases = split_phases(prof.ops, ["prefill"] + ["decode"] * (output_tokens - 1))
    rows = op_split(phases)
    top_ops(rows, n=5)["decode"]  # the operators that dominate a decode step
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.session.schema import OPS

__all__ = ["PHASES", "op_split", "phase_op_ns", "split_phases", "top_ops"]

#: the phases of a generation, in the order they run
PHASES = ("prefill", "decode")


def split_phases(ops: pa.Table, run_phases: Sequence[str]) -> dict[str, pa.Table]:
    """OPS rows of each phase: the row of run ``i`` (its ``iteration``) goes to
    ``run_phases[i]`` and is renumbered within that phase (the first decode step is decode
    iteration 0). Rows of runs beyond ``run_phases`` are dropped. Every phase named in
    ``run_phases`` gets a table, empty when the profile had no node of it.
    """
    iterations = ops.column("iteration").fill_null(-1).to_numpy()
    out: dict[str, pa.Table] = {}
    for phase in dict.fromkeys(run_phases):
        runs = np.array([i for i, p in enumerate(run_phases) if p == phase], dtype=np.int64)
        # position of each run among its phase's runs, by run index
        renumber = np.full(len(run_phases), -1, dtype=np.int64)
        renumber[runs] = np.arange(len(runs))
        mask = np.isin(iterations, runs)
        table = ops.filter(pa.array(mask))
        if table.num_rows:
            new = renumber[iterations[mask]].astype(np.int32)
            idx = table.schema.get_field_index("iteration")
            table = table.set_column(idx, table.schema.field(idx), pa.array(new, pa.int32()))
        out[phase] = table if table.num_rows else OPS.empty()
    return out


def phase_op_ns(phase_ops: Mapping[str, pa.Table]) -> dict[str, int]:
    """Summed operator time (ns) of each phase."""
    return {phase: _sum_ns(ops) for phase, ops in phase_ops.items()}


def op_split(phase_ops: Mapping[str, pa.Table]) -> list[dict[str, Any]]:
    """One row per phase and node: ``phase``, ``op_type``, ``node``, ``calls``, ``total_us``
    and ``share`` (of the phase's operator time; None when the phase has none), the most
    expensive node first within each phase, phases in the order given."""
    rows: list[dict[str, Any]] = []
    for phase, ops in phase_ops.items():
        if not ops.num_rows:
            continue
        total = _sum_ns(ops)
        groups = ops.group_by(["op_type", "node_name"], use_threads=False).aggregate(
            [("dur_ns", "sum"), ("dur_ns", "count")]
        )
        found = [
            {
                "phase": phase,
                "op_type": op_type,
                "node": node,
                "calls": int(calls),
                "total_us": ns / 1000.0,
                "share": ns / total if total else None,
            }
            for op_type, node, ns, calls in zip(
                groups.column("op_type").to_pylist(),
                groups.column("node_name").to_pylist(),
                groups.column("dur_ns_sum").to_pylist(),
                groups.column("dur_ns_count").to_pylist(),
                strict=True,
            )
        ]
        found.sort(key=lambda r: (-r["total_us"], str(r["op_type"]), str(r["node"])))
        rows.extend(found)
    return rows


def top_ops(
    rows: Sequence[Mapping[str, Any]], n: int = 5, by: str = "op_type"
) -> dict[str, list[dict[str, Any]]]:
    """The ``n`` largest groups of :func:`op_split` rows per phase, grouped by ``by``
    (``op_type`` or ``node``): ``{phase: [{by, calls, nodes, total_us, share}, ...]}``."""
    if by not in ("op_type", "node"):
        raise ValueError(f"by must be 'op_type' or 'node', got {by!r}")
    groups: dict[str, dict[Any, dict[str, Any]]] = {}
    for row in rows:
        phase = groups.setdefault(row["phase"], {})
        key = row[by]
        g = phase.setdefault(key, {by: key, "calls": 0, "nodes": 0, "total_us": 0.0, "share": 0.0})
        g["calls"] += row["calls"]
        g["nodes"] += 1
        g["total_us"] += row["total_us"]
        g["share"] = (
            None if row["share"] is None or g["share"] is None else g["share"] + row["share"]
        )
    return {
        phase: sorted(found.values(), key=lambda g: (-g["total_us"], str(g[by])))[:n]
        for phase, found in groups.items()
    }


def _sum_ns(ops: pa.Table) -> int:
    if not ops.num_rows:
        return 0
    value = pc.sum(ops.column("dur_ns")).as_py()
    return int(value) if value is not None else 0
