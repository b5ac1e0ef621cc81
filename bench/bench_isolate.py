"""Run-to-run spread of ``aaco run`` with and without ``--isolate`` (issue 18, the capsule).

Runs ``aaco run`` on one model ``--runs`` times in each mode, alternating the modes so that a
drift of the machine over the minutes the bench takes falls on both alike, each run a fresh
process writing its own bundle, and compares the spread of the runs' median latencies:

* ``default``: ``aaco run`` as it is (ONNX Runtime's own thread count, no pinning);
* ``isolate``: ``aaco run --isolate`` (pinned CPUs, one thread per CPU, noise sentinel);
* ``threads`` (with ``--threads-control``): unpinned, with the thread count ``--isolate``
  chose, to tell the pinning's effect from the thread count's.

Per mode: the mean of the medians, their CoV (sample std / mean) and max/min, the median of
the runs' own CoV, and for ``isolate`` how many runs the sentinel flagged (``speed_changed``)
and the range of its after-vs-before drift. Telemetry stays on (as a user runs it); the
operator-profile pass is skipped (it runs after the measured phase and would only lengthen
the bench), and so is the first-run calibration.

Usage::

    python bench/bench_isolate.py [--model bert-tiny] [--runs 10] [--duration 1.5]
        [--threads-control] [--cpus LIST] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def aaco_run(model: str, duration: float, root: Path, extra: list[str]) -> dict[str, Any]:
    """One ``aaco run`` into ``root``; its p50 and CoV, the capsule's threads and sentinel."""
    cmd = [sys.executable, "-m", "aaco", "run", "--model", model, "--duration", str(duration),
           "--no-profile", "--report", "none", "-o", str(root), *extra]  # fmt: skip
    env = dict(os.environ, AACO_AUTO_CALIBRATE="0")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"aaco run failed ({' '.join(cmd)}): {proc.stderr.strip()}")
    bundle = (root / "latest").resolve()
    summary = json.loads((bundle / "metrics" / "inference_summary.json").read_text())
    meta = json.loads((bundle / "session.json").read_text())
    lat = summary["latency_ms"]
    capsule = meta.get("capsule") or {}
    sentinel = capsule.get("sentinel") or {}
    return {
        "p50_ms": lat["p50"],
        "cov": lat["cov"],
        "count": lat["count"],
        "wall_s": wall,
        "cpus": capsule.get("cpus"),
        "threads": capsule.get("threads"),
        "speed_changed": sentinel.get("speed_changed"),
        "drift_pct": sentinel.get("drift_pct"),
        "sentinel_cost_s": (sentinel.get("cost_ns") or 0) / 1e9,
    }


def spread(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians = [r["p50_ms"] for r in runs]
    mean = statistics.fmean(medians)
    out: dict[str, Any] = {
        "runs": len(runs),
        "mean_p50_ms": mean,
        "cov_of_medians": statistics.stdev(medians) / mean if len(medians) > 1 else None,
        "max_over_min": max(medians) / min(medians),
        "median_within_run_cov": statistics.median(r["cov"] for r in runs),
        "mean_wall_s": statistics.fmean(r["wall_s"] for r in runs),
    }
    drifts = [r["drift_pct"] for r in runs if r["drift_pct"] is not None]
    if drifts:
        out["sentinel_flagged"] = sum(bool(r["speed_changed"]) for r in runs)
        out["drift_pct_range"] = [min(drifts), max(drifts)]
        out["sentinel_cost_s"] = statistics.fmean(r["sentinel_cost_s"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert-tiny")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--duration", type=float, default=1.5)
    ap.add_argument("--threads-control", action="store_true")
    ap.add_argument("--cpus", help="pass --cpus LIST to the isolate mode (default: it picks)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    modes: dict[str, list[str]] = {
        "default": [],
        "isolate": ["--isolate", *(["--cpus", args.cpus] if args.cpus else [])],
    }
    if args.threads_control:
        from aaco.runners.capsule import pick_cpus

        modes["threads"] = ["--threads", str(len(pick_cpus(None)[0]))]
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench_isolate_") as tmp:
        for i in range(args.runs):
            for mode, extra in modes.items():
                run = aaco_run(args.model, args.duration, Path(tmp) / mode, extra)
                results[mode].append(run)
            print(
                f"round {i + 1}/{args.runs}: "
                + ", ".join(f"{m} p50 {r[-1]['p50_ms']:.4f} ms" for m, r in results.items()),
                file=sys.stderr,
            )

    table = {mode: spread(runs) for mode, runs in results.items()}
    iso = results["isolate"][0]
    print(f"model {args.model}, {args.runs} runs per mode of {args.duration:g} s, alternating; "
          f"--isolate pinned to CPU {iso['cpus']} with {iso['threads']} thread(s)")  # fmt: skip
    head = f"{'mode':<10}{'mean p50 ms':>12}{'CoV medians':>13}{'max/min':>9}{'in-run CoV':>12}"
    print(head + f"{'sentinel flagged':>18}{'drift % range':>18}")
    for mode, s in table.items():
        flagged = f"{s['sentinel_flagged']}/{s['runs']}" if "sentinel_flagged" in s else "-"
        drift = (
            f"{s['drift_pct_range'][0]:+.1f}..{s['drift_pct_range'][1]:+.1f}"
            if "drift_pct_range" in s
            else "-"
        )
        print(
            f"{mode:<10}{s['mean_p50_ms']:>12.4f}{s['cov_of_medians']:>12.2%}"
            f"{s['max_over_min']:>9.3f}{s['median_within_run_cov']:>12.2%}{flagged:>18}{drift:>18}"
        )
    if args.json:
        args.json.write_text(json.dumps({"summary": table, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
