"""Bottleneck classifier accuracy on the labeled workload zoo (issue #4).

Calibrates this machine once (``aaco calibrate``, into a temporary calibration folder unless
``--calibration-dir`` is given), then runs every ``zoo-*`` model of the registry ``--repeat``
times with ``aaco run`` and compares the verdict of ``metrics/bottleneck.json`` with the
model's ``expected_bottleneck``. Prints one line per run and the accuracy table.

With ``--first-run`` nothing is calibrated beforehand: the calibration folder starts empty
and ``aaco run`` alone measures its quick calibration on the first run (issue #14's "a
fresh machine gets verdicts with ``aaco run`` alone"); each run's ``ceilings_note`` is
printed when it has one.

Usage::

    python bench/bench_zoo.py [--repeat 3] [--calibration-dir DIR] [--quick-calibration]
    python bench/bench_zoo.py --first-run [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _aaco(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aaco", *args], capture_output=True, text=True, env=env, check=False
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calibration-dir", type=Path)
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--first-run", action="store_true", help="no calibration beforehand")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["AACO_CALIBRATION_DIR"] = str(a.calibration_dir or Path(tmp) / "calibration")
        if a.first_run:
            env["AACO_AUTO_CALIBRATE"] = "1"
            folder = Path(env["AACO_CALIBRATION_DIR"])
            if folder.is_dir() and any(folder.iterdir()):
                sys.exit(f"--first-run needs an empty calibration folder: {folder}")
        else:
            t0 = time.perf_counter()
            args = ["calibrate", "--json"] + (["--quick"] if a.quick_calibration else [])
            cal = _aaco(args, env)
            if cal.returncode != 0:
                sys.exit(f"calibration failed: {cal.stderr.strip()}")
            print(f"calibration: {time.perf_counter() - t0:.1f} s")
        models = json.loads(_aaco(["models", "list", "--json"], env).stdout)
        zoo = [m for m in models if m.get("expected_bottleneck")]
        results: list[dict[str, Any]] = []
        for m in zoo:
            for i in range(a.repeat):
                out = Path(tmp) / "sessions"
                p = _aaco(["run", "--model", m["name"], "--report", "none", "-o", str(out)], env)
                if p.returncode != 0:
                    print(f"{m['name']} run {i}: failed: {p.stderr.strip()}")
                    results.append({"model": m["name"], "expected": m["expected_bottleneck"],
                                    "got": "run failed", "confidence": None})  # fmt: skip
                    continue
                v = json.loads((out / "latest" / "metrics" / "bottleneck.json").read_text())
                roof = json.loads((out / "latest" / "metrics" / "roofline.json").read_text())
                if roof.get("ceilings_note"):
                    print(f"    {m['name']} run {i}: {roof['ceilings_note']}")
                r = {
                    "model": m["name"],
                    "expected": m["expected_bottleneck"],
                    "got": v["bottleneck_class"],
                    "confidence": v["confidence"],
                    "secondary": [s["class"] for s in v.get("secondary", [])],
                }
                results.append(r)
                ok = "ok " if r["got"] == r["expected"] else "BAD"
                print(f"{ok} {m['name']:12} run {i}: {r['got']:20} confidence "
                      f"{r['confidence']} secondary {r['secondary']}")  # fmt: skip
        print()
        print("| workload | expected | runs | correct | verdicts (confidence) |")
        print("|---|---|---|---|---|")
        for m in zoo:
            rs = [r for r in results if r["model"] == m["name"]]
            good = sum(r["got"] == r["expected"] for r in rs)
            verdicts = ", ".join(f"{r['got']} ({r['confidence']})" for r in rs)
            print(f"| {m['name']} | {m['expected_bottleneck']} | {len(rs)} | {good} | "
                  f"{verdicts} |")  # fmt: skip
        total = sum(r["got"] == r["expected"] for r in results)
        print(f"\naccuracy: {total}/{len(results)}")


if __name__ == "__main__":
    main()
