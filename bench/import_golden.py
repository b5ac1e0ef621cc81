"""Do two AACO source trees import the same traces into the same bundles?

For speed work that must not change any answer: each trace is imported by both trees
(``python -m aaco import TRACE --output DIR --format none`` with ``PYTHONPATH`` set to the
tree's ``src``), then every table (cell by cell) and every JSON file and report copy of the
two bundles are compared, leaving out only what differs between any two imports (session
ids, paths, clock times, the import's own duration).

Usage::

    git worktree add /tmp/base HEAD~1
    python bench/import_golden.py --a /tmp/base/src --b src TRACE [TRACE ...]

Exit status 0 when every bundle pair matches, 1 otherwise (the differing files are listed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

#: JSON keys whose values differ between any two imports of one trace
VOLATILE_KEYS = {
    "session_id",
    "created_utc",
    "finished_utc",
    "imported_utc",
    "command_line",
    "seconds",
    "path",
    "bundle",
    "generated_utc",
    "aaco_version",
    # the second decoding process's own figures (process id, its memory)
    "pid",
    "rss_start_kb",
    "rss_peak_kb",
    "private_kb",
}
_VOLATILE_TEXT = [
    re.compile(r"\d{8}_\d{6}_[0-9a-f]{6}"),  # session ids
    re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?"),
    re.compile(r"/tmp/[^\s\"'<]*"),
]


def _scrub(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _scrub(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [_scrub(v) for v in obj]
    if isinstance(obj, str):
        return _scrub_text(obj)
    return obj


def _scrub_text(text: str) -> str:
    for rx in _VOLATILE_TEXT:
        text = rx.sub("<v>", text)
    return text


def _import(src: Path, trace: Path, out: Path) -> Path:
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "AACO_AUTO_CALIBRATE": "0"}
    cmd = [sys.executable, "-m", "aaco", "import", str(trace), "--output", str(out)]
    proc = subprocess.run(
        [*cmd, "--format", "none"], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{src}: import of {trace} failed: {proc.stderr.strip()[-400:]}")
    bundles = [
        p
        for p in out.glob("[0-9]*-*-*/*")
        if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
    ]
    if len(bundles) != 1:
        raise SystemExit(f"{out}: expected one bundle, found {len(bundles)}")
    return bundles[0]


def compare(a: Path, b: Path) -> list[str]:
    """Relative paths of the files that differ (or exist on one side only)."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    diffs = [f"{f} (only in one)" for f in sorted(files_a ^ files_b)]
    for rel in sorted(files_a & files_b):
        fa, fb = a / rel, b / rel
        if rel.suffix == ".parquet":
            same = pq.read_table(fa).equals(pq.read_table(fb))
        elif rel.suffix == ".json":
            same = _scrub(json.loads(fa.read_text())) == _scrub(json.loads(fb.read_text()))
        else:
            same = _scrub_text(fa.read_text(errors="replace")) == _scrub_text(
                fb.read_text(errors="replace")
            )
        if not same:
            diffs.append(str(rel))
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the first tree's src folder")
    ap.add_argument("--b", type=Path, required=True, help="the second tree's src folder")
    ap.add_argument("traces", nargs="+", type=Path)
    args = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory(prefix="aaco-golden-") as tmp:
        for i, trace in enumerate(args.traces):
            ba = _import(args.a, trace, Path(tmp) / f"a{i}")
            bb = _import(args.b, trace, Path(tmp) / f"b{i}")
            diffs = compare(ba, bb)
            bad += bool(diffs)
            print(
                f"{'same' if not diffs else 'DIFFERENT'}  {trace}"
                + "".join(f"\n    {d}" for d in diffs)
            )
    print(f"{len(args.traces) - bad} of {len(args.traces)} traces give the same bundle")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
