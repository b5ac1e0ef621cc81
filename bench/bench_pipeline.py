"""Whole ``aaco run`` commands before and after a change, interleaved, on one machine.

Issue #16 moved ``aaco run`` onto one pipeline and one worker harness; it must cost the user
nothing. This runs the same command with two source trees (``--before SRC`` on PYTHONPATH,
e.g. a ``git worktree`` of the previous commit, and this checkout), alternating which goes
first in each round, and reports per side the medians of: the command's wall time, the
worker's wall time, the aaco process's and the worker's peak RSS, and the measured p50
latency (the timing loop itself). Real runs of a built-in model; calibration is off so both
sides see the same (absent) ceilings.

    git worktree add /tmp/before f9a9957
    python bench/bench_pipeline.py --before /tmp/before/src [--rounds 8] [--model mlp]
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

HERE = Path(__file__).resolve().parents[1] / "src"


def run_once(src: Path, model: str, iterations: int, out: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "AACO_AUTO_CALIBRATE": "0",
        "AACO_CALIBRATION_DIR": str(out / "calibration"),
    }
    cmd = [sys.executable, "-m", "aaco", "run", "--model", model, "--iterations", str(iterations)]
    cmd += ["--report", "none", "-o", str(out / "sessions")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{src}: aaco run failed: {proc.stderr.strip()[-400:]}")
    bundle = (out / "sessions" / "latest").resolve()
    meta = json.loads((bundle / "session.json").read_text())
    summary = json.loads((bundle / "metrics" / "inference_summary.json").read_text())
    return {
        "command_s": wall,
        "worker_s": meta["worker"]["wall_s"],
        "aaco_rss_mib": ((meta.get("aaco_process") or {}).get("max_rss_bytes") or 0) / 2**20,
        "worker_rss_mib": ((summary["worker"] or {}).get("max_rss_bytes") or 0) / 2**20,
        "p50_ms": summary["latency_ms"]["p50"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="src/ of the earlier tree")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--iterations", type=int, default=300)
    args = ap.parse_args()
    sides = {"before": args.before.resolve(), "after": HERE}
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds + 1):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                got = run_once(sides[side], args.model, args.iterations, Path(tmp) / side)
                if r:  # round 0 warms the model cache and the page cache
                    rows[side].append(got)
    keys = ["command_s", "worker_s", "aaco_rss_mib", "worker_rss_mib", "p50_ms"]
    print(f"model {args.model}, {args.iterations} iterations, {args.rounds} rounds (medians)")
    print("| side | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for side, got in rows.items():
        med = [statistics.median(g[k] for g in got) for k in keys]
        print(f"| {side} | " + " | ".join(f"{v:.3f}" for v in med) + " |")


if __name__ == "__main__":
    main()
