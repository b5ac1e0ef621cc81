"""``aaco tune`` as a user runs it, on the models the issue names: one whole command per
model, its result summarised (what won, the A/B's gain and interval, what verification
rejected, wall time).

Usage::

    python bench/bench_tune.py [--budget 8m] [--allow-numerics int8] [--json out.json] MODEL...

A MODEL is a registry name (resnet50, bert-base) or an .onnx path (a model from the
foreign corpus, e.g. tests/fixtures/onnx/paddle_ppocr_mobile_v2_cls.onnx); ``NAME=SHAPE``
after it (``path.onnx:x=1x3x48x192``) fixes an open input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def tune_one(spec: str, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    model, _, shape = spec.partition(":")
    cmd = [sys.executable, "-m", "aaco", "tune", "--model", model, "--budget", a.budget,
           "-o", str(root), "-f", "json", *a.extra]  # fmt: skip
    if shape:
        cmd += ["--shape", shape]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t
    if p.returncode != 0:
        return {"model": spec, "error": p.stderr.strip()[-400:], "wall_s": wall}
    r = json.loads(p.stdout)
    judged = [t for t in r["trials"] if t["ab"]]
    ab = [
        {
            "name": t["name"],
            "against": t["ab"]["against"],
            "verdict": t["ab"]["verdict"],
            "stopped": t["ab"]["stopped"],
            "delta_pct": (t["ab"]["effect"] or {}).get("delta_pct"),
            "ci_pct": (t["ab"]["effect"] or {}).get("ci_pct"),
            "pairs": (t["ab"]["effect"] or {}).get("pairs"),
        }
        for t in judged
    ]
    best = r["best"]
    return {
        "model": spec,
        "wall_s": wall,
        "summary": r["summary"],
        "found": r["found"],
        "gain": r["gain"],
        "best": None if best is None else {k: best[k] for k in ("name", "settings", "batch")},
        "candidates": len(r["trials"]),
        "rejected": r["rejected"],
        "ab": ab,
        "path": r["path"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--budget", default="8m")
    ap.add_argument("--json")
    ap.add_argument("--root", help="sessions root (default: a temporary folder)")
    ap.add_argument("--allow-numerics", default="", help="passed to aaco tune")
    a = ap.parse_args()
    a.extra = ["--allow-numerics", a.allow_numerics] if a.allow_numerics else []
    root = Path(a.root) if a.root else Path(tempfile.mkdtemp(prefix="bench_tune_"))
    rows = [tune_one(m, a, root) for m in a.models]
    text = json.dumps(rows, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
