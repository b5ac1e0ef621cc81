"""Share of profiled operator time with known work, per bundle (issue #14, item 6).

For every bundle under the given folders (a folder holding ``session.json``, or any folder
below one; symlinks such as ``latest`` are skipped), prints the share of operator time
whose work (FLOPs) is known two ways: from the original graph's nodes alone (what the
roofline does without the executed nodes' own costs; the roofline's per-iteration times, in
which a Loop's time includes its body's), and with the nodes ORT executed costed as
themselves (``executed_node_costs``; exclusive time, ``work_coverage``). Then the op types
still without work, summed over bundles by time share.

Usage::

    python bench/work_coverage.py SESSIONS_ROOT [...] [--json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from aaco.analysis.cost import executed_node_costs, node_costs, work_coverage
from aaco.analysis.graph import load_model_proto
from aaco.analysis.roofline import node_roofline
from aaco.runners.spec import OPTIMIZED_MODEL
from aaco.session.bundle import Session


def _bundles(roots: list[Path]) -> list[tuple[Path, str]]:
    """(bundle, its path under the root, for display)."""
    found: list[tuple[Path, str]] = []
    for root in roots:
        for meta in sorted(root.rglob("session.json")):
            rel = meta.parent.relative_to(root)
            if not any(
                (root / Path(*rel.parts[: i + 1])).is_symlink() for i in range(len(rel.parts))
            ):
                found.append((meta.parent, str(rel)))
    return found


def _share(rows: list[dict[str, Any]]) -> float | None:
    total = sum(r["time_ns"] or 0.0 for r in rows)
    known = sum(r["time_ns"] or 0.0 for r in rows if r["flops"] is not None)
    return known / total if total else None


def measure(bundle: Path, label: str) -> dict[str, Any] | None:
    s = Session.load(bundle)
    ops, nodes, edges = s.ops(), s.table("graph_nodes"), s.table("graph_edges")
    if ops is None or not ops.num_rows or nodes is None:
        return None
    optimized = bundle / OPTIMIZED_MODEL
    model = load_model_proto(optimized) if optimized.is_file() else None
    costs = node_costs(nodes, edges)
    before = node_roofline(ops, costs, nodes, edges, None).to_pylist()
    executed = executed_node_costs(ops, nodes, model, edges)
    after = node_roofline(ops, costs, nodes, edges, None, executed=executed)
    cov = work_coverage(ops, after)
    return {
        "bundle": str(bundle),
        "label": label,
        "share_original_nodes": _share(before),
        "share_known": cov["share_known"],
        "unknown_op_types": cov["unknown_op_types"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true", help="Print the measurements as JSON.")
    a = ap.parse_args()
    results = [r for b, label in _bundles(a.roots) if (r := measure(b, label)) is not None]
    if a.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'bundle':40s} {'original nodes':>15s} {'executed nodes':>15s}  still unknown")
    unknown: Counter[str] = Counter()
    for r in results:
        gaps = ", ".join(f"{u['op_type']} {u['time_share']:.0%}" for u in r["unknown_op_types"][:3])
        before, after = r["share_original_nodes"], r["share_known"]
        print(f"{r['label'][:40]:40s} "
              f"{'-' if before is None else f'{before:.1%}':>15s} "
              f"{'-' if after is None else f'{after:.1%}':>15s}  {gaps}")  # fmt: skip
        for u in r["unknown_op_types"]:
            unknown[u["op_type"]] += u["time_share"] or 0.0
    n = len(results)
    if n:
        shares = [r["share_known"] or 0.0 for r in results]
        befores = [r["share_original_nodes"] or 0.0 for r in results]
        print(f"\n{n} bundles; mean share with known work: original nodes "
              f"{sum(befores) / n:.1%} ({sum(b >= 0.95 for b in befores)} at >= 95 %), "
              f"executed nodes {sum(shares) / n:.1%} ({sum(s >= 0.95 for s in shares)} at "
              f">= 95 %, lowest {min(shares):.1%})")  # fmt: skip
        print("op types without work (summed time shares):",
              ", ".join(f"{k} {v:.2f}" for k, v in unknown.most_common(15)) or "none")  # fmt: skip


if __name__ == "__main__":
    main()
