"""A/A diffs with a CPU hog pinned onto the worker's CPU for one of the two runs (issue 18).

Each pair runs the same model twice, both pinned to one CPU (``taskset -c CPU aaco run``: the
worker inherits the affinity), with a busy-loop process pinned onto that CPU during one of
the two runs (alternately the baseline's and the session's, so that both a would-be
REGRESSION and a would-be IMPROVEMENT are exercised), then ``aaco diff --json``. Identical
runs: any REGRESSION or IMPROVEMENT is a false verdict. A control series runs the same pairs
without the hog.

    python bench/bench_contention.py --pairs 20 --control 5 [--model bert-tiny] [--cpu 1]
        [--duration 2]

Prints one line per pair (verdict, the statistics' own verdict, the p50 change, the
run-queue wait share of each side, the reason) and a table of verdict counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

AACO = [sys.executable, "-m", "aaco"]


def _run(model: str, cpu: int, root: Path, tag: str, duration: float) -> Path:
    cmd = [
        "taskset", "-c", str(cpu), *AACO, "run", "--model", model, "--threads", "1",
        "--warmup", "20", "--duration", str(duration), "--no-profile", "--no-calibrate",
        "--report", "none", "--tag", tag, "-o", str(root),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return (root / "latest").resolve()


def _hog(cpu: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_share(bundle: Path) -> float | None:
    summary = json.loads((bundle / "metrics" / "inference_summary.json").read_text())
    sched = summary.get("sched") or {}
    v = sched.get("wait_share")
    return float(v) if isinstance(v, (int, float)) else None


def _pair(
    model: str, cpu: int, root: Path, hog_side: str | None, duration: float
) -> dict[str, Any]:
    sides: dict[str, Path] = {}
    for side in ("baseline", "session"):
        hog = _hog(cpu) if hog_side == side else None
        try:
            if hog is not None:
                time.sleep(0.2)  # let the hog take its share before the run starts
            sides[side] = _run(model, cpu, root, side, duration)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    proc = subprocess.run(
        [
            *AACO,
            "diff",
            "-b",
            str(sides["baseline"]),
            "-s",
            str(sides["session"]),
            "--sessions",
            str(root),
            "--no-history",
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    d = json.loads(proc.stdout)
    v = d["verdict"]
    reason = next((w for w in v["warnings"] if w.startswith("MEASUREMENT NOT VALID")), "")
    return {
        "hog": hog_side or "none",
        "verdict": v["verdict"],
        "statistical": v["statistical_verdict"],
        "p50_delta_pct": v["median_delta_pct"],
        "wait_baseline": _wait_share(sides["baseline"]),
        "wait_session": _wait_share(sides["session"]),
        "exit": proc.returncode,
        "reason": reason,
    }


def _fmt(x: float | None) -> str:
    return "   -" if x is None else f"{x:4.0%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--control", type=int, default=5, help="pairs without a hog")
    ap.add_argument("--model", default="bert-tiny")
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--duration", type=float, default=2.0, help="measured seconds per run")
    args = ap.parse_args()
    if shutil.which("taskset") is None:
        print("taskset not found (util-linux)", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sessions"
        plan: list[str | None] = [
            "session" if i % 2 == 0 else "baseline" for i in range(args.pairs)
        ] + [None] * args.control
        for i, hog_side in enumerate(plan):
            r = _pair(args.model, args.cpu, root, hog_side, args.duration)
            rows.append(r)
            print(
                f"{i + 1:3d} hog={r['hog']:<8} verdict={r['verdict']:<12} "
                f"stat={r['statistical']:<12} p50 {r['p50_delta_pct']:+7.1f} %  "
                f"wait {_fmt(r['wait_baseline'])} -> {_fmt(r['wait_session'])}  "
                f"exit {r['exit']}",
                flush=True,
            )
            if r["reason"]:
                print(f"      {r['reason'][:200]}", flush=True)
    print()
    for label, sel in (("hog on one side", [r for r in rows if r["hog"] != "none"]),
                       ("no hog (control)", [r for r in rows if r["hog"] == "none"])):  # fmt: skip
        if not sel:
            continue
        final = Counter(r["verdict"] for r in sel)
        stat = Counter(r["statistical"] for r in sel)
        false = sum(r["verdict"] in ("REGRESSION", "IMPROVEMENT") for r in sel)
        print(f"{label}: {len(sel)} pairs; verdicts {dict(final)}; statistics alone {dict(stat)}")
        print(f"  false REGRESSION/IMPROVEMENT verdicts: {false}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
