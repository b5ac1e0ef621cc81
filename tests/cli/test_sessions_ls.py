"""``aaco ls`` through the command line: the same output whether its listing cache is cold,
warm or stale, and the rows of the listing as ``Session.load`` reads each bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from aaco.errors import BundleError
from aaco.session.bundle import Session, atomic_write_json, iter_sessions
from aaco.session.catalog import CATALOG_CACHE_FILE, session_row

BUNDLE_V1 = Path(__file__).resolve().parents[1] / "session" / "fixtures" / "bundle_v1"


def aaco(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "aaco", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _root(tmp_path: Path, n: int) -> Path:
    root = tmp_path / "sessions"
    for i in range(n):
        bundle_id = f"20260101_0000{i:02d}_{i:06x}"
        dst = root / f"2026-01-0{1 + i % 3}" / bundle_id
        shutil.copytree(BUNDLE_V1, dst)
        meta = json.loads((dst / "session.json").read_text())
        meta.update(session_id=bundle_id, tag=f"t{i}" if i % 2 else None)
        atomic_write_json(dst / "session.json", meta)
    broken = root / "2026-01-04" / "20260104_000000_broken"
    broken.mkdir(parents=True)
    (broken / "session.json").write_text("{")
    return root


def test_ls_output_is_the_same_cold_warm_and_after_a_change(tmp_path: Path) -> None:
    root = _root(tmp_path, 25)
    commands = (
        ("ls", "--sessions", str(root)),
        ("ls", "--sessions", str(root), "--limit", "0"),
        ("ls", "--sessions", str(root), "--json", "--limit", "0"),
    )
    cold = [aaco(*c) for c in commands]
    assert all(p.returncode == 0 for p in cold), [p.stderr for p in cold]
    assert (root / CATALOG_CACHE_FILE).is_file()
    warm = [aaco(*c) for c in commands]
    assert [p.stdout for p in warm] == [p.stdout for p in cold]
    want = []
    for path in iter_sessions(root):
        try:
            want.append(session_row(Session.load(path)))
        except BundleError as exc:  # the broken bundle: listed, not hidden
            want.append({"id": path.name, "path": str(path), "status": "unreadable",
                         "error": str(exc)})  # fmt: skip
    assert [json.loads(line) for line in cold[2].stdout.splitlines()] == want
    # a bundle changed since the cache was written shows its new state
    first = root / "2026-01-01" / "20260101_000000_000000" / "session.json"
    meta = json.loads(first.read_text())
    meta["tag"] = "changed"
    atomic_write_json(first, meta)
    rows = [json.loads(line) for line in aaco(*commands[2]).stdout.splitlines()]
    assert rows[0]["tag"] == "changed"
    assert "changed" in aaco(*commands[1]).stdout
