"""``aaco.session.catalog.list_sessions``: the listing of a sessions root, and its cache.

The listing reads a bundle's ``session.json`` once and leaves to ``Session.load`` whatever it
would refuse; its rows must be exactly those of the reference (``iter_sessions`` +
``Session.load`` + ``session_row``, the listing as it was), whatever the root holds. Its cache
(``ROOT/.catalog.json``) must never show a row whose files changed since.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from aaco.errors import BundleError
from aaco.session import bundle, paths
from aaco.session.bundle import Session, atomic_write_json, iter_sessions
from aaco.session.catalog import CATALOG_CACHE_FILE, list_sessions, session_row

BUNDLE_V1 = Path(__file__).parent / "fixtures" / "bundle_v1"


def reference(root: Path) -> list[dict[str, Any]]:
    """The listing as ``aaco ls`` made it before: every bundle loaded by ``Session.load``."""
    rows: list[dict[str, Any]] = []
    for path in iter_sessions(root):
        try:
            rows.append(session_row(Session.load(path)))
        except BundleError as exc:
            rows.append(
                {"id": path.name, "path": str(path), "status": "unreadable", "error": str(exc)}
            )
    return rows


def _bundle(root: Path, day: str, bundle_id: str, **meta: Any) -> Path:
    dst = root / day / bundle_id
    shutil.copytree(BUNDLE_V1, dst)
    data = json.loads((dst / "session.json").read_text())
    data.update(session_id=bundle_id, **meta)
    atomic_write_json(dst / "session.json", data)
    return dst


def _edit(path: Path, **meta: Any) -> None:
    data = json.loads(path.read_text())
    data.update(meta)
    atomic_write_json(path, data)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root with what a real one may hold besides bundles, and bundles that cannot be
    read for every reason Session.load gives."""
    root = tmp_path / "sessions"
    _bundle(root, "2026-01-01", "20260101_000000_aaaaaa", tag="first")
    _bundle(root, "2026-01-01", "20260101_000001_bbbbbb", tag=None, status="failed")
    _bundle(root, "2026-01-02", "20260102_000000_cccccc", model={"name": "other"})
    bad = {
        "20260103_000000_notjson": None,
        "20260103_000001_version": {"format_version": 99},
        "20260103_000002_noversion": {"format_version": None},
        "20260103_000003_model": {"model": "text"},
        "20260103_000004_tag": {"tag": 7},
    }
    for bundle_id, edit in bad.items():
        b = _bundle(root, "2026-01-03", bundle_id)
        if edit is None:
            (b / "session.json").write_text("{not json")
        elif edit == {"format_version": None}:
            data = json.loads((b / "session.json").read_text())
            del data["format_version"]
            (b / "session.json").write_text(json.dumps(data))
        else:
            _edit(b / "session.json", **edit)
    summary = _bundle(root, "2026-01-03", "20260103_000005_summary")
    (summary / "metrics" / "inference_summary.json").write_text('{"latency_ms": [1]}')
    serving = _bundle(root, "2026-01-04", "20260104_000000_serving", kind="serving")
    (serving / "metrics" / "serving_summary.json").write_text(
        json.dumps(
            {
                "points": [
                    {
                        "ttft_ms": {"p50": 12.5, "p99": 40.0},
                        "throughput": {"output_tokens_per_s": 900.0},
                    }
                ]
            }
        )
    )
    # not bundles: hidden and staging folders, a folder without session.json, files, a
    # baselines folder, the latest pointer
    (root / "2026-01-04" / ".20260104_000001_ffffff.partial").mkdir()
    (root / "2026-01-04" / "20260104_000002_empty").mkdir()
    (root / "2026-01-04" / "notes.txt").write_text("x")
    (root / ".hidden").mkdir()
    (root / "baselines").mkdir()
    (root / "baselines" / "main.json").write_text("{}")
    (root / "README").write_text("x")
    (root / "latest").symlink_to("2026-01-04/20260104_000000_serving")
    # a bundle reached through a symlink inside the root is listed; one outside is not
    (root / "2026-01-05").mkdir()
    (root / "2026-01-05" / "20260105_000000_linked").symlink_to(
        root / "2026-01-01" / "20260101_000000_aaaaaa"
    )
    outside = _bundle(tmp_path / "elsewhere", "d", "20260105_000001_outside")
    (root / "2026-01-05" / "20260105_000001_outside").symlink_to(outside)
    (root / "2026-01-06").symlink_to(root / "2026-01-02")
    return root


def test_rows_are_the_reference_rows(root: Path) -> None:
    want = reference(root)
    assert [r["status"] for r in want].count("unreadable") == 6
    assert list_sessions(root) == want  # cold: every bundle read
    assert (root / CATALOG_CACHE_FILE).is_file()
    assert list_sessions(root) == want  # warm: from the cache
    assert reference(root) == want  # the cache file is no bundle


def test_relative_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root.parent)
    assert list_sessions(Path("sessions")) == reference(Path("sessions"))
    assert list_sessions(Path("sessions")) == reference(Path("sessions"))


def test_the_latest_pointer_has_one_name() -> None:
    """catalog reads the pointer's name from paths (it imports no bundle code): the name the
    bundle module writes."""
    assert paths.LATEST == bundle.LATEST


def test_no_root_and_empty_root(tmp_path: Path) -> None:
    assert list_sessions(tmp_path / "missing") == []
    (tmp_path / "empty").mkdir()
    assert list_sessions(tmp_path / "empty") == []
    assert not (tmp_path / "empty" / CATALOG_CACHE_FILE).exists()


def test_a_changed_bundle_is_read_again(root: Path) -> None:
    list_sessions(root)
    first = root / "2026-01-01" / "20260101_000000_aaaaaa"
    _edit(first / "session.json", tag="renamed")
    summary = json.loads((first / "metrics" / "inference_summary.json").read_text())
    summary["latency_ms"]["p50"] = 123.0
    atomic_write_json(first / "metrics" / "inference_summary.json", summary)
    serving = root / "2026-01-04" / "20260104_000000_serving" / "metrics"
    (serving / "serving_summary.json").write_text(
        json.dumps({"points": [{"ttft_ms": {"p50": 1.0, "p99": 2.0}}]})
    )
    fixed = root / "2026-01-03" / "20260103_000004_tag"
    _edit(fixed / "session.json", tag="fine now")
    rows = {r["id"]: r for r in list_sessions(root)}
    assert rows["20260101_000000_aaaaaa"]["tag"] == "renamed"
    assert rows["20260101_000000_aaaaaa"]["p50_ms"] == 123.0
    assert rows["20260104_000000_serving"]["ttft_p50_ms"] == 1.0
    assert rows["20260103_000004_tag"]["status"] == "completed"
    assert list_sessions(root) == reference(root)


def test_added_and_removed_bundles(root: Path) -> None:
    list_sessions(root)
    shutil.rmtree(root / "2026-01-02" / "20260102_000000_cccccc")
    _bundle(root, "2026-01-07", "20260107_000000_dddddd", tag="new")
    rows = list_sessions(root)
    assert rows == reference(root)
    ids = [r["id"] for r in rows]
    assert "20260102_000000_cccccc" not in ids and ids[-1] == "20260107_000000_dddddd"
    cached = json.loads((root / CATALOG_CACHE_FILE).read_text())["rows"]
    assert "2026-01-02/20260102_000000_cccccc" not in cached


def test_the_cache_is_used_and_only_where_it_holds(root: Path, tmp_path: Path) -> None:
    """A cached row is what the listing shows while the bundle's files keep their stamps (so
    the cache is really read); a cache of another root or other code is not read at all."""
    list_sessions(root)
    cache = root / CATALOG_CACHE_FILE
    data = json.loads(cache.read_text())
    data["rows"]["2026-01-01/20260101_000000_aaaaaa"]["row"]["tag"] = "from the cache"
    cache.write_text(json.dumps(data))
    rows = {r["id"]: r for r in list_sessions(root)}
    assert rows["20260101_000000_aaaaaa"]["tag"] == "from the cache"
    for field, value in (("code", "another aaco"), ("root", str(tmp_path)), ("format", 0)):
        cache.write_text(json.dumps({**data, field: value}))
        assert list_sessions(root) == reference(root)
    cache.write_text("{garbage")
    assert list_sessions(root) == reference(root)
    assert json.loads(cache.read_text())["format"] == 1  # written anew


def test_a_moved_root_is_read_anew(root: Path, tmp_path: Path) -> None:
    list_sessions(root)
    moved = tmp_path / "moved"
    shutil.move(str(root), moved)
    rows = list_sessions(moved)
    assert rows == reference(moved)
    assert all(r["path"].startswith(str(moved.resolve())) for r in rows if "error" not in r)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_root_is_listed_without_a_cache(root: Path) -> None:
    root.chmod(0o555)
    try:
        assert list_sessions(root) == reference(root)
        assert not (root / CATALOG_CACHE_FILE).exists()
    finally:
        root.chmod(0o755)


def test_the_cache_keeps_one_row_per_bundle(root: Path) -> None:
    """Keyed by the bundle's real folder (a symlink to a bundle shares its row); unreadable
    bundles are read each time."""
    list_sessions(root)
    cached = json.loads((root / CATALOG_CACHE_FILE).read_text())["rows"]
    readable = {
        f"{Path(r['path']).parent.name}/{Path(r['path']).name}"
        for r in reference(root)
        if r["status"] != "unreadable"
    }
    assert set(cached) == readable
