"""Overhead of AACO's timing loop over a bare ``session.run`` loop, on a ~1 ms model.

The two loops run interleaved in rounds (bare, timed, bare, timed, ...) in one process so
machine noise hits both alike; the figure is the ratio of the median per-iteration time of
the timed rounds to that of the bare rounds, with a bootstrap 95 % interval over rounds,
and the median of per-round paired ratios.

Because machine noise on a shared VM is far larger than the effect, the script also measures
the instrument itself: both loops around a no-op callable, whose per-iteration difference is
exactly what the timing loop adds (two clock reads and two list stores), expressed as a
fraction of the model's run time.

    python bench/bench_timing_loop.py [--rounds 40] [--iterations 300] [--target-ms 1.0]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from aaco.runners.harness import timing_loop


def build_model(width: int, layers: int, path: Path) -> None:
    """A MatMul+Relu chain whose cost scales with width^2 x layers."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width), dtype=np.float32) / np.sqrt(width)).astype(
            np.float32
        )
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [16, width])],
        inits,
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
        str(path),
    )


def bare_loop(run: Any, names: list[str], feeds: dict[str, Any], n: int) -> None:
    for _ in range(n):
        run(names, feeds)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--target-ms", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1, help="ORT intra-op threads (1 = quieter)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import tempfile

    tmp = Path(tempfile.mkdtemp())
    # Find a layer count that gives ~target-ms per run on this machine.
    width, layers = 512, 1
    while True:
        path = tmp / f"m{layers}.onnx"
        build_model(width, layers, path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        feeds = {"x": np.random.default_rng(0).standard_normal((16, width), dtype=np.float32)}
        names = [o.name for o in sess.get_outputs()]
        for _ in range(20):
            sess.run(names, feeds)
        per_ms = float("inf")
        for _ in range(3):  # best of three: calibrate on the machine, not on its noise
            t0 = time.perf_counter()
            for _ in range(50):
                sess.run(names, feeds)
            per_ms = min(per_ms, (time.perf_counter() - t0) / 50 * 1000)
        if per_ms >= args.target_ms * 0.9 or layers >= 256:
            break
        layers = max(layers + 1, int(layers * args.target_ms / max(per_ms, 1e-3)))

    bare: list[float] = []
    timed: list[float] = []
    n = args.iterations
    for r in range(args.rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)  # alternate who goes first
        for which in order:
            t0 = time.perf_counter_ns()
            if which == 0:
                bare_loop(sess.run, names, feeds, n)
            else:
                timing_loop(functools.partial(sess.run, names, feeds), n)
            per = (time.perf_counter_ns() - t0) / n / 1e6
            (bare if which == 0 else timed).append(per)

    # The instrument alone: both loops around a no-op, many iterations, best of 7.
    def noop(_names: Any, _feeds: Any) -> None:
        return None

    n_noop = 200_000
    cost_bare = cost_timed = float("inf")
    for _ in range(7):
        t0 = time.perf_counter_ns()
        bare_loop(noop, names, feeds, n_noop)
        cost_bare = min(cost_bare, (time.perf_counter_ns() - t0) / n_noop)
        t0 = time.perf_counter_ns()
        timing_loop(functools.partial(noop, names, feeds), n_noop)
        cost_timed = min(cost_timed, (time.perf_counter_ns() - t0) / n_noop)
    added_ns = cost_timed - cost_bare

    b, t = np.array(bare), np.array(timed)
    ratio = float(np.median(t) / np.median(b))
    rng = np.random.default_rng(0)
    boots = []
    for _ in range(2000):
        i = rng.integers(0, len(b), len(b))
        j = rng.integers(0, len(t), len(t))
        boots.append(np.median(t[j]) / np.median(b[i]))
    lo, hi = (float(v) for v in np.percentile(boots, [2.5, 97.5]))
    # Paired view: each round's timed/bare ratio, which cancels slow drifts.
    paired = [tt / bb for bb, tt in zip(bare, timed, strict=True)]
    result = {
        "model": f"MatMul+Relu chain, width {width}, {layers} layers, batch 16",
        "run_ms_bare_median": float(np.median(b)),
        "run_ms_timed_median": float(np.median(t)),
        "overhead_pct": (ratio - 1) * 100,
        "overhead_ci95_pct": [(lo - 1) * 100, (hi - 1) * 100],
        "paired_overhead_median_pct": (statistics.median(paired) - 1) * 100,
        "instrument_added_ns_per_iteration": added_ns,
        "instrument_overhead_pct": added_ns / (float(np.median(b)) * 1e6) * 100,
        "threads": args.threads,
        "rounds": args.rounds,
        "iterations_per_round": n,
        "onnxruntime": ort.__version__,
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            "| model | bare ms/run | timed ms/run | overhead | 95% CI | paired median "
            "| instrument ns/it | instrument % |"
        )
        print("|---|---|---|---|---|---|---|---|")
        print(
            f"| {result['model']} | {result['run_ms_bare_median']:.4f} | "
            f"{result['run_ms_timed_median']:.4f} | {result['overhead_pct']:+.2f} % | "
            f"[{lo * 100 - 100:+.2f}, {hi * 100 - 100:+.2f}] % | "
            f"{result['paired_overhead_median_pct']:+.2f} % | "
            f"{added_ns:.0f} | {result['instrument_overhead_pct']:.3f} % |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
