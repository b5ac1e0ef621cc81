"""Cost model totals and time on the built-in reference models (BENCHMARKS.md §9).

For each registry model, builds it (cached, random weights; untimed), then times
:func:`aaco.analysis.cost.model_costs` once (shape inference + every node's FLOPs and bytes)
and prints nodes, MACs, FLOPs and nodes whose work is unknown. The references are checked by
``tests/analysis/test_cost.py`` (ResNet-50 within 5 % of torchvision's 4.09 G MACs; BERT-base
equal to the analytic count in that test's docstring).

Usage::

    python bench/bench_cost_model.py [--models resnet50,bert-base,gpt2]
"""

from __future__ import annotations

import argparse
import time

from aaco.analysis.cost import cost_summary, model_costs
from aaco.config import load_registry
from aaco.models.registry import build_cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,bert-base,gpt2")
    a = ap.parse_args()
    registry = load_registry(None)
    print("| model | input shapes | nodes | MACs | FLOPs | nodes with unknown FLOPs | time |")
    print("|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        entry = registry.models[name]
        path = build_cached(entry.builder or "", entry.params)
        shapes = {k: list(v) for k, v in entry.input_shapes.items()}
        t0 = time.perf_counter()
        table = model_costs(path, shapes)
        dt = time.perf_counter() - t0
        s = cost_summary(table)
        dims = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in shapes.items())
        print(
            f"| {name} | {dims} | {table.num_rows} | {s['macs']:,} | {s['flops']:,} | "
            f"{s['nodes_flops_unknown']} | {dt:.2f} s |"
        )


if __name__ == "__main__":
    main()
