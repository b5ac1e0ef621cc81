"""Critical-path speed on a real Kineto trace and on that trace repeated for scale.

    python bench/bench_critical_path.py [TRACE.json.gz] [--copies 1,2] [--repeat 5]

Default trace: HTA's real 108,936-event CUDA training trace
(../shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz).
``--copies N`` concatenates the trace with itself N times, each copy shifted in time past
the previous one and its correlation / external ids offset (a real trace made longer, not a
generated one). For each size: events, the Kineto import, `critical_paths` (graph, longest
path, slack, 8 what-ifs: the analysis `aaco analyze` runs) and the check that the path's
length equals the region's wall time. Medians of ``--repeat`` runs, one process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parents[2] / (
    "shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz"
)


def _concat(src: Path, copies: int, out: Path) -> int:
    with gzip.open(src) as f:
        data = json.loads(f.read())
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    ts = [float(e["ts"]) for e in events if isinstance(e.get("ts"), int | float)]
    span = max(ts) + max(float(e.get("dur") or 0) for e in events) - min(ts) + 1000.0
    all_ev: list[dict[str, Any]] = []
    for c in range(copies):
        for e in events:
            e2 = dict(e)
            if isinstance(e2.get("ts"), int | float) and e2.get("ph") != "M":
                e2["ts"] = e2["ts"] + c * span
            args = e2.get("args")
            if c and isinstance(args, dict):
                args = dict(args)
                for k in ("correlation", "External id"):
                    if isinstance(args.get(k), int) and args[k] > 0:
                        args[k] = args[k] + c * 10_000_000
                e2["args"] = args
            if c and e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                e2["id"] = e2["id"] + c * 10_000_000
            if c and e2.get("ph") == "M":
                continue
            all_ev.append(e2)
    data["traceEvents"] = all_ev
    with gzip.open(out, "wt") as f:
        json.dump(data, f)
    return len(all_ev)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    p.add_argument("--copies", default="1,2")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    from aaco.analysis.critical_path import auto_what_ifs, critical_paths
    from aaco.importers.registry import import_paths

    print(f"trace: {args.trace}")
    with tempfile.TemporaryDirectory() as tmp:
        for copies in [int(x) for x in args.copies.split(",")]:
            path = Path(tmp) / f"x{copies}.json.gz"
            n_events = _concat(args.trace, copies, path)
            imp, cp = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                tt = import_paths([path])
                t1 = time.perf_counter()
                tables = {"kernels": tt.kernels, "api_calls": tt.api_calls, "memcpy": tt.memcpy,
                          "ops": tt.ops, "annotations": tt.annotations}  # fmt: skip
                res = critical_paths(tables, what_if=auto_what_ifs(tables))
                t2 = time.perf_counter()
                imp.append(t1 - t0)
                cp.append(t2 - t1)
            worst = max(abs(r.length_ns - r.wall_ns) for r in res)
            stats = res[0].stats
            print(
                f"x{copies}: {n_events:,} events ({stats['nodes']:,} nodes, {stats['edges']:,} "
                f"edges); import median {statistics.median(imp):.3f} s; critical path + slack + "
                f"{len(auto_what_ifs(tables))} what-ifs median {statistics.median(cp):.3f} s "
                f"(min {min(cp):.3f}); |length - wall| max {worst} ns"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
