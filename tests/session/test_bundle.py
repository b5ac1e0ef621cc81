from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from aaco.errors import BundleError, InputError
from aaco.session.bundle import (
    FORMAT_VERSION,
    BundleWriter,
    Session,
    atomic_write_json,
    iter_sessions,
)
from aaco.session.schema import INFERENCE_ITERS


def _publish(root: Path, status: str = "completed") -> Path:
    w = BundleWriter(root)
    w.write_json(
        "session.json",
        {"format_version": FORMAT_VERSION, "session_id": w.session_id, "status": status},
    )
    w.write_table(
        "inference_iters",
        INFERENCE_ITERS.from_columns(
            {
                "phase": ["measured"] * 3,
                "iteration": [0, 1, 2],
                "start_ns": [0, 10, 20],
                "end_ns": [5, 16, 27],
                "latency_ns": [5, 6, 7],
                "preprocess_ns": [None] * 3,
            }
        ),
    )
    return w.publish()


def test_round_trip_and_latest_pointer(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    first = _publish(root)
    second = _publish(root)
    assert (root / "latest").resolve() == second.resolve()
    s = Session.load(root / "latest")
    assert s.path == second.resolve()
    assert s.status == "completed"
    iters = s.iters()
    assert iters is not None and iters.column("latency_ns").to_pylist() == [5, 6, 7]
    assert s.ops() is None  # absent table -> None, never an empty stand-in
    assert [p.name for p in iter_sessions(root)] == sorted([first.name, second.name])
    assert Session.load(root).path == second.resolve()  # a root loads its latest


def test_staging_folder_is_hidden_until_published(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    w = BundleWriter(root)
    w.write_json("session.json", {"format_version": FORMAT_VERSION})
    assert w.path.name.startswith(".") and w.path.name.endswith(".partial")
    assert list(iter_sessions(root)) == []
    w.publish()
    assert len(list(iter_sessions(root))) == 1


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert os.listdir(tmp_path) == ["a.json"]
    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "b.json", {"x": float("nan")})
    assert os.listdir(tmp_path) == ["a.json"]


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such session bundle"):
        Session.load(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(BundleError, match="not a session bundle"):
        Session.load(tmp_path / "plain")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "session.json").write_text("{not json")
    with pytest.raises(BundleError, match="unreadable JSON"):
        Session.load(bad)
    future = tmp_path / "future"
    future.mkdir()
    (future / "session.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(BundleError, match="format_version 99 is not supported"):
        Session.load(future)
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "session.json").write_text(json.dumps({"format_version": 1, "model": "justastring"}))
    with pytest.raises(BundleError, match="field 'model' is not an object"):
        Session.load(odd)
    (odd / "session.json").write_text(json.dumps({"format_version": 1, "tag": ["a"]}))
    with pytest.raises(BundleError, match="field 'tag' is not a string"):
        Session.load(odd)
    (odd / "session.json").write_text(json.dumps({"format_version": 1}))
    (odd / "metrics").mkdir()
    (odd / "metrics" / "inference_summary.json").write_text("[1, 2]")
    with pytest.raises(BundleError, match="not a JSON object"):
        _ = Session.load(odd).summary


def test_corrupt_table_is_a_bundle_error(tmp_path: Path) -> None:
    path = _publish(tmp_path / "s")
    (path / INFERENCE_ITERS.path).write_bytes(b"PAR1garbage")
    with pytest.raises(BundleError, match="unreadable Parquet"):
        Session.load(path).iters()


def test_unwritable_root_is_an_input_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write sessions"):
        BundleWriter(blocker / "sessions")


def test_version1_fixture_still_loads() -> None:
    fixture = Path(__file__).parent / "fixtures" / "bundle_v1"
    s = Session.load(fixture)
    assert s.meta["format_version"] == 1
    assert s.summary is not None and s.summary["latency_ms"]["count"] > 0
    for name in (
        "inference_iters",
        "ops",
        "ort_runs",
        "graph_nodes",
        "graph_edges",
        "system_events",
    ):
        assert s.table(name) is not None, name


def test_bundle_files_honour_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        import aaco.session.bundle as bundle

        target = tmp_path / "x.json"
        mode = bundle._file_mode()
        atomic_write_json(target, {"a": 1})
        assert mode == 0o644
        assert (target.stat().st_mode & 0o777) == bundle._FILE_MODE
    finally:
        os.umask(old)


def test_table_handoff_skips_the_parquet_read_back(tmp_path: Path, monkeypatch: Any) -> None:
    """Inside table_handoff a table written is handed to a Session reading it back (also
    after publishing renames the folder); outside, or once the file changed, it is read."""
    import pyarrow.parquet as pq

    from aaco.session import bundle as bundle_mod

    reads: list[str] = []
    real_read = pq.read_table

    def counting_read(source: Any, *a: Any, **k: Any) -> Any:
        reads.append(str(source))
        return real_read(source, *a, **k)

    monkeypatch.setattr(pq, "read_table", counting_read)
    root = tmp_path / "sessions"
    with bundle_mod.table_handoff():
        with bundle_mod.table_handoff():  # nested: one scope, the outer one
            path = _publish(root)
        first = Session.load(path).iters()
        assert reads == []  # handed over, not decoded again
        assert first is not None and first.column("latency_ns").to_pylist() == [5, 6, 7]
        # the file replaced behind AACO's back (another writer): read from disk
        f = path / INFERENCE_ITERS.path
        table = real_read(f)
        os.unlink(f)
        pq.write_table(table.slice(0, 2), f)
        second = Session.load(path).iters()
        assert len(reads) == 1 and second is not None and second.num_rows == 2
    # the scope ended: its tables are released and every read decodes the file
    assert bundle_mod._HANDOFF.get() is None
    third = Session.load(_publish(root)).iters()
    assert len(reads) == 2 and third is not None and third.num_rows == 3


def test_rewriting_a_table_in_the_handoff_keeps_only_the_newest(tmp_path: Path) -> None:
    from aaco.session import bundle as bundle_mod

    t = INFERENCE_ITERS.from_columns(
        {
            "phase": ["measured"],
            "iteration": [0],
            "start_ns": [0],
            "end_ns": [5],
            "latency_ns": [5],
            "preprocess_ns": [None],
        }
    )
    f = tmp_path / "t.parquet"
    with bundle_mod.table_handoff():
        bundle_mod.write_table(f, t)
        bundle_mod.write_table(f, t.slice(0, 0))
        kept = bundle_mod._HANDOFF.get()
        assert kept is not None and [x[1].num_rows for x in kept.values()] == [0]
