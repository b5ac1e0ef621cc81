"""``aaco ls`` over a sessions root of 1 000 bundles: the whole command, start-up included.

Makes two real bundles with AACO's own command line, once: ``aaco import`` of a small real
Kineto trace (tests/importers/fixtures/kineto/cpu_mlp.json.gz, recorded with torch.profiler)
and ``aaco run`` of a small third-party model (tests/fixtures/onnx/ort_logreg_iris.onnx,
from the onnxruntime wheel: scikit-learn logistic regression), so the root holds both an
import bundle and a run bundle with its inference summary. Then copies them, alternately,
into ``--bundles`` bundles spread over 30 days of folders, the layout ``aaco`` writes
(``ROOT/<day>/<id>/``), each with its own id, timestamps and tag rewritten in
``session.json`` (the other files hard-linked, as they are only read), and the ``latest``
link on the newest.

Times ``python -m aaco ls --sessions ROOT`` (the default table of the newest 20),
``--limit 0`` (all of them) and ``--json --limit 0``, each as a whole command in a fresh
process, median of ``--repeat``; prints the commands' output digests so runs before and
after a change can be compared. ``aaco ls`` keeps the rows of a root in ``ROOT/.catalog.json``
(re-reading only the bundles changed since): ``--cold`` deletes it before every command, to
time a listing that reads every bundle. Usage::

    python bench/bench_ls.py [--bundles 1000] [--repeat 5] [--root DIR] [--cold] [--show]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "importers" / "fixtures" / "kineto" / "cpu_mlp.json.gz"
MODEL = ROOT / "tests" / "fixtures" / "onnx" / "ort_logreg_iris.onnx"
CACHE = ".catalog.json"  # aaco.session.catalog.CATALOG_CACHE_FILE (not imported: run as is)


def _aaco(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aaco", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def seed_bundles(work: Path) -> list[Path]:
    """The two real bundles the root is made of (made by aaco itself)."""
    seed = work / "seed"
    if seed.is_dir():
        found = sorted(p.parent for p in seed.glob("*/*/session.json"))
        if len(found) >= 2:
            return found
    for args in (
        ("import", str(TRACE), "-o", str(seed), "-f", "none"),
        ("run", "-m", str(MODEL), "--warmup", "2", "--iterations", "50", "-o", str(seed),
         "--report", "none"),
    ):  # fmt: skip
        p = _aaco(*args, env={"AACO_AUTO_CALIBRATE": "0"})
        if p.returncode != 0:
            raise SystemExit(f"aaco {args[0]} failed: {p.stderr.strip()[-500:]}")
    return sorted(p.parent for p in seed.glob("*/*/session.json"))


def make_root(root: Path, seeds: list[Path], n: int) -> None:
    """``n`` bundles copied from ``seeds`` into ``root``, each with its own id and times."""
    start = datetime(2026, 10, 1, tzinfo=timezone.utc)
    span = timedelta(days=30)
    newest = ""
    for i in range(n):
        src = seeds[i % len(seeds)]
        created = start + span * i / n
        bundle_id = created.strftime("%Y%m%d_%H%M%S_") + f"{i:06x}"
        day = root / created.strftime("%Y-%m-%d")
        dst = day / bundle_id
        shutil.copytree(
            src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("session.json")
        )
        meta = json.loads((src / "session.json").read_text())
        meta["session_id"] = bundle_id
        meta["created_utc"] = created.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if meta.get("finished_utc"):
            done = created + timedelta(seconds=3)
            meta["finished_utc"] = done.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        meta["tag"] = f"bench-{i % 7}" if i % 3 else None
        (dst / "session.json").write_text(json.dumps(meta, indent=2) + "\n")
        newest = f"{day.name}/{bundle_id}"
    (root / "latest").symlink_to(newest)


def _timed(args: list[str], cold: Path | None = None) -> tuple[float, str]:
    if cold is not None:
        cold.unlink(missing_ok=True)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "aaco", *args], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"aaco {' '.join(args)} failed: {p.stderr.strip()[-500:]}")
    return dt, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--root", type=Path, help="make (or reuse) the sessions root here")
    ap.add_argument("--show", action="store_true", help="print each command's output once")
    ap.add_argument(
        "--cold",
        action="store_true",
        help=f"delete the listing cache (ROOT/{CACHE}) before every command",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.root or Path(tmp)
        root = work / f"sessions_{a.bundles}"
        if not root.is_dir():
            seeds = seed_bundles(work)
            make_root(root, seeds, a.bundles)
        count = sum(1 for _ in root.glob("*/*/session.json"))
        print(f"sessions root {root}: {count} bundles")
        commands = {
            "aaco ls": ["ls", "--sessions", str(root)],
            "aaco ls --limit 0": ["ls", "--sessions", str(root), "--limit", "0"],
            "aaco ls --json --limit 0": ["ls", "--sessions", str(root), "--json", "--limit", "0"],
        }
        print("| command | wall s (runs) | median s | output lines | output sha256 |")
        print("|---|---|---|---|---|")
        for label, args in commands.items():
            runs = [_timed(args, root / CACHE if a.cold else None) for _ in range(a.repeat)]
            secs = [dt for dt, _ in runs]
            text = runs[0][1]
            assert all(t == text for _, t in runs), "output changed between runs"
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            print(
                f"| `{label}` | {', '.join(f'{s:.2f}' for s in secs)} | "
                f"{statistics.median(secs):.2f} | {text.count(chr(10))} | {digest} |"
            )
            if a.show:
                print(text)
        startup = [_timed(["--version"])[0] for _ in range(a.repeat)]
        print(f"`aaco --version` (start-up alone): median {statistics.median(startup):.2f} s")
        print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
