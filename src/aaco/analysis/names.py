"""Names users recognise: each executed node named by the original ONNX node it stands for.

ONNX Runtime profiles the graph it optimized, whose nodes carry its own names
(``/layer4/layer4.2/relu/Relu_1_output_0_nchwc`` for ResNet-50's
``/layer4/layer4.2/conv2/Conv`` with its BatchNormalization and Relu folded in).
``ops.original_nodes`` maps each one to the original nodes it stands for
(:func:`aaco.analysis.graph.map_optimized_to_original`); this module turns that into the
one label every table, chart and recommendation shows (docs/metrics.md, "Operator names"):

- a node that stands for one original node of another name is shown by that name;
- a fused node by its *lead* original node, with ``+N fused`` for the others: the member
  with the most FLOPs (``metrics/op_costs.parquet``) when every member's FLOPs are known,
  the earlier in graph order on a tie, else the first member in graph order;
- a node no original node is known for (a layout or copy node ORT inserted, or a fusion
  the mapping could not resolve) keeps ORT's name, marked ``(ORT node)``;
- without any mapping (an imported Kineto trace, a torch run, an ORT profile imported with
  no model) names stay as they are.

Example::

    names = op_names(ops, costs)
    names.label("/layer4/layer4.2/relu/Relu_1_output_0_nchwc")
    # '/layer4/layer4.2/conv2/Conv +2 fused'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["UNMAPPED_MARK", "OpName", "OpNames", "op_name", "op_names", "pick_original"]

#: appended to the ORT name of a node that no original node is known for
UNMAPPED_MARK = " (ORT node)"


@dataclass(frozen=True)
class OpName:
    """How one executed node is named for a user.

    ``name``: the node as profiled (ORT's optimized name; the key of ``ops.parquet``,
    ``roofline.parquet`` and the report's ``name`` fields); ``label``: what is shown;
    ``original``: the original node the label names, None when none is known; ``fused``:
    how many further original nodes the node stands for.
    """

    name: str
    label: str
    original: str | None
    fused: int = 0

    @property
    def renamed(self) -> bool:
        """Whether the label differs from the profiled name (then show both)."""
        return self.label != self.name

    def to_json(self) -> dict[str, Any]:
        """The keys operator rows of the JSON report carry (docs/report-json.md)."""
        return {"label": self.label, "original_name": self.original}


def pick_original(
    originals: Sequence[str], flops: Mapping[str, int | float | None] | None = None
) -> str:
    """The lead of a fused group (``originals`` in graph order, not empty): the member with
    the most FLOPs when every member's FLOPs are known (a Conv, not the BatchNormalization,
    Add or Relu folded into it), the earlier one on a tie; else the first member."""
    if flops is not None and len(originals) > 1:
        work = [flops.get(m) for m in originals]
        if all(w is not None for w in work):
            known = [float(w or 0) for w in work]
            return originals[max(range(len(known)), key=lambda i: (known[i], -i))]
    return originals[0]


def op_name(
    name: str,
    originals: Sequence[str] | None,
    flops: Mapping[str, int | float | None] | None = None,
    mapped: bool = True,
) -> OpName:
    """The name of the executed node ``name`` standing for ``originals`` (graph order).

    ``mapped``: whether its source maps executed nodes to original ones at all; when it
    does, a node without originals (None or empty) is marked as ORT's own.
    """
    if not originals:
        return OpName(name, name + UNMAPPED_MARK if mapped else name, None)
    lead = pick_original(originals, flops)
    fused = len(originals) - 1
    return OpName(name, f"{lead} +{fused} fused" if fused else lead, lead, fused)


@dataclass(frozen=True)
class OpNames:
    """The :class:`OpName` of every node of a profile; a name it does not hold (a kernel, a
    node of a trace without a mapping, a bundle from before the mapping) stands for itself."""

    by_node: Mapping[str, OpName] = field(default_factory=dict)

    def get(self, name: str) -> OpName:
        found = self.by_node.get(name)
        return found if found is not None else OpName(name, name, None)

    def label(self, name: str) -> str:
        return self.get(name).label


def op_names(ops: pa.Table | None, costs: pa.Table | None = None) -> OpNames:
    """:class:`OpNames` of the nodes of ``ops`` (an OPS table) that a mapping names.

    A source (``ops.source``) maps its nodes when any of its rows carries
    ``original_nodes``; nodes of other sources keep their names. ``costs`` (OP_COSTS rows
    of the original graph) gives the FLOPs that pick a fused group's lead. One pass over
    the distinct node names, whatever the table's size.
    """
    if ops is None or not ops.num_rows or "original_nodes" not in ops.column_names:
        return OpNames()
    ops = ops.select(
        [c for c in ("source", "node_name", "original_nodes") if c in ops.column_names]
    )
    known = pc.is_valid(ops.column("original_nodes"))
    if not pc.any(known).as_py():
        return OpNames()
    if "source" in ops.column_names:
        source = pc.fill_null(ops.column("source"), "")
        mapped = pc.unique(pc.filter(source, known))
        if len(mapped) < len(pc.unique(source)):
            ops = ops.filter(pc.is_in(source, mapped))
    # the first row of each node: a node's mapping is one per profile
    codes = pc.dictionary_encode(ops.column("node_name").combine_chunks()).indices
    codes_np = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False)
    _, first = np.unique(codes_np, return_index=True)
    rows = ops.select(["node_name", "original_nodes"]).take(pa.array(first, pa.int64()))
    flops: dict[str, int | float | None] | None = None
    if costs is not None and costs.num_rows:
        flops = dict(
            zip(
                costs.column("node_name").to_pylist(),
                costs.column("flops").to_pylist(),
                strict=True,
            )
        )
    out: dict[str, OpName] = {}
    for name, originals in zip(
        rows.column("node_name").to_pylist(), rows.column("original_nodes").to_pylist(), strict=True
    ):
        if name is not None:
            out[name] = op_name(name, originals, flops)
    return OpNames(out)
