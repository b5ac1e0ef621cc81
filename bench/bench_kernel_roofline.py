"""Speed and memory of ``kernel_roofline`` (issue 20): per-dispatch counters to per-kernel
roofline rows, on an imported bundle or on synthetic MI300 counters.

    python bench/bench_kernel_roofline.py [INPUT ...] [--baseline-src DIR] [--repeat 3]

INPUT: a bundle folder (its ``profiler/kernels.parquet`` and ``kernel_counters.parquet``,
e.g. ``aaco import /tmp/rocprof_bench/v1_1000000_results.csv --output B``, then
``B/latest``), or ``synthetic:N``: N dispatches with a full MI300 roofline counter set
(FLOP, HBM, L2, LDS counters, some spelled ``_sum``, 2 devices, 12 kernel names).

Each run is a fresh process that loads the tables, then times one ``kernel_roofline`` call
(wall) and the growth of its peak RSS during the call; the median over ``--repeat``
processes is printed. ``--baseline-src`` (a ``src`` folder of another revision, e.g.
``git archive REV src | tar -x -C /tmp/base``, then ``/tmp/base/src``) runs side by side,
alternating, and the outputs of both are compared (repr of the table rows and details:
floats bit for bit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_MI300 = [
    "SQ_INSTS_VALU_ADD_F32", "SQ_INSTS_VALU_MUL_F32", "SQ_INSTS_VALU_FMA_F32",
    "SQ_INSTS_VALU_TRANS_F32", "SQ_INSTS_VALU_FMA_F16", "SQ_INSTS_VALU_FMA_F64",
    "SQ_INSTS_VALU_MFMA_MOPS_F16", "SQ_INSTS_VALU_MFMA_MOPS_BF16",
    "SQ_INSTS_VALU_MFMA_MOPS_F32", "TCC_BUBBLE_sum", "TCC_EA0_RDREQ_32B_sum",
    "TCC_EA0_RDREQ_sum", "TCC_EA0_WRREQ_sum", "TCC_EA0_WRREQ_64B_sum",
    "TCP_TCC_READ_REQ_sum", "TCP_TCC_WRITE_REQ_sum", "TCP_TCC_ATOMIC_WITH_RET_REQ_sum",
    "SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT", "SQ_WAVES", "GRBM_GUI_ACTIVE",
]  # fmt: skip


def synthetic(n: int, seed: int = 20) -> tuple[Any, Any]:
    """(kernels, counters) of n dispatches with the MI300 counters above."""
    import numpy as np
    import pyarrow as pa

    from aaco.session.schema import KERNEL_COUNTERS, KERNELS

    rng = np.random.default_rng(seed)
    names = np.array([f"kernel_{i}" for i in range(12)])
    which = rng.integers(0, len(names), n)
    dur = rng.integers(1_000, 5_000_000, n)
    kernels = KERNELS.conform(
        pa.table(
            {
                "source": pa.array(["rocprofv3"] * n),
                "name": pa.array(names[which]),
                "start_ns": pa.array(np.zeros(n, dtype=np.int64)),
                "end_ns": pa.array(dur),
                "dur_ns": pa.array(dur),
                "time_is_gpu": pa.array(np.ones(n, dtype=bool)),
                "dispatch_id": pa.array(np.arange(1, n + 1)),
                "correlation_id": pa.array(np.arange(1, n + 1)),
            }
        )
    )
    c = len(_MI300)
    disp = np.repeat(np.arange(1, n + 1), c)
    values = np.floor(rng.random(n * c) * rng.choice([1e3, 1e6, 1e9], n * c))
    values[rng.random(n * c) < 0.3] += 0.5
    counters = KERNEL_COUNTERS.conform(
        pa.table(
            {
                "source": pa.array(["rocprofv3"] * (n * c)),
                "correlation_id": pa.array(disp),
                "dispatch_id": pa.array(disp),
                "device": pa.array((disp % 2).astype(np.int32)),
                "kernel_name": pa.array(np.repeat(names[which], c)),
                "counter": pa.array(np.tile(np.array(_MI300), n)),
                "value": pa.array(values),
            }
        )
    )
    return kernels, counters


def _load(inp: str) -> tuple[Any, Any]:
    import pyarrow.parquet as pq

    if inp.startswith("synthetic:"):
        return synthetic(int(inp.split(":", 1)[1]))
    prof = Path(inp) / "profiler"
    return pq.read_table(prof / "kernels.parquet"), pq.read_table(prof / "kernel_counters.parquet")


def child(inp: str) -> None:
    import resource
    import time

    from aaco.analysis.roofline import kernel_roofline

    kernels, counters = _load(inp)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    table, details = kernel_roofline(kernels, counters, None)
    wall = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    digest = hashlib.sha256(repr((table.to_pylist(), details)).encode()).hexdigest()
    print(
        json.dumps(
            {
                "wall_s": wall,
                "peak_rss_growth_mib": (rss1 - rss0) / 1024,
                "rows": table.num_rows,
                "dispatch_rows": counters.num_rows,
                "digest": digest,
            }
        )
    )


def _run(src: Path, inp: str) -> dict[str, Any]:
    env = {"PYTHONPATH": str(src)}
    import os

    out = subprocess.run(
        [sys.executable, __file__, "--child", inp],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="*", default=["synthetic:100000"])
    ap.add_argument("--baseline-src", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return 0
    impls = {"this tree": ROOT / "src"}
    if args.baseline_src:
        impls = {"baseline": args.baseline_src, **impls}
    status = 0
    for inp in args.inputs:
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in impls}
        for _ in range(args.repeat):
            for name, src in impls.items():
                runs[name].append(_run(src, inp))
        digests = {r["digest"] for rs in runs.values() for r in rs}
        for name, rs in runs.items():
            wall = statistics.median(r["wall_s"] for r in rs)
            rss = statistics.median(r["peak_rss_growth_mib"] for r in rs)
            print(
                f"{inp:>40}  {name:>9}: {wall:8.3f} s  peak RSS +{rss:7.0f} MiB  "
                f"({rs[0]['dispatch_rows']:,} counter rows, {rs[0]['rows']} kernel rows)"
            )
        same = len(digests) == 1
        print(f"{'':>40}  outputs identical: {same}")
        status |= not same
    return status


if __name__ == "__main__":
    sys.exit(main())
