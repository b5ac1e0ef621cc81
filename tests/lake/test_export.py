"""The lake: export of real bundles (ONNX Runtime runs, a real H100 torch bundle, a serving
bundle), read back by DuckDB and Polars; idempotent and incremental re-export; a kill at
every step of a commit leaves a readable lake that the next export completes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.sessions_fixtures import Sessions

from aaco.errors import InputError
from aaco.lake.export import export_lake, open_lake
from aaco.lake.layout import LAKE_FILE, STAGING
from aaco.lake.query import run_query
from aaco.lake.read import history_rows, lake_rows
from aaco.regress.history import history, history_from_rows
from aaco.session.bundle import Session, iter_sessions
from aaco.testing import make_serving_bundle, scripted_results

H100 = Path(__file__).parents[1] / "fixtures" / "bundles" / "h100_torch_cuda"


@pytest.fixture(scope="module")
def root(regress_sessions: Sessions, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real ONNX Runtime runs, the real H100 torch bundle and a serving bundle."""
    tmp = tmp_path_factory.mktemp("lake-src")
    root = tmp / "sessions"
    shutil.copytree(regress_sessions.root, root, symlinks=True)
    shutil.copytree(H100, root / "2026-11-27" / "h100_torch_cuda")
    make_serving_bundle(root, scripted_results(12, ttft_ms=25.0, itl_ms=4.0))
    return root


def _copy(root: Path, tmp: Path) -> Path:
    dst = tmp / "sessions"
    shutil.copytree(root, dst, symlinks=True)
    return dst


def _q(source: Path, sql: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = run_query(source, sql).to_pylist()
    return rows


def test_export_holds_every_session_and_table(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    result = export_lake(root, lake)
    bundles = [Session.load(p) for p in iter_sessions(root)]
    assert result.added == len(bundles) == 5
    assert (result.replaced, result.unchanged, result.unreadable) == (0, 0, [])
    assert json.loads((lake / LAKE_FILE).read_text())["format"] == "aaco-lake"
    assert not list((lake / STAGING).iterdir())
    sessions = {r["session_id"]: r for r in _q(lake, "SELECT * FROM sessions")}
    assert set(sessions) == {s.session_id for s in bundles}
    h100 = sessions["h100_torch_cuda"]
    assert (h100["vendor"], h100["arch"], str(h100["date"])) == ("nvidia", "sm_90", "2026-11-27")
    assert h100["device"] == "NVIDIA H100 80GB HBM3" and h100["driver"] == "580.159.04"
    assert {r["vendor"] for r in sessions.values()} == {"cpu", "nvidia"}
    # every table holds each bundle's rows, once
    for s in bundles:
        for lake_table, bundle_table in (
            ("iterations", "inference_iters"),
            ("kernels", "kernels"),
            ("gpu_telemetry", "gpu_telemetry"),
            ("requests", "serving_requests"),
        ):
            t = s.table(bundle_table)
            n = _q(lake, f"SELECT count(*) AS n FROM {lake_table} WHERE session_id = "
                   f"'{s.session_id}'")[0]["n"]  # fmt: skip
            assert n == (0 if t is None else t.num_rows), (s.session_id, lake_table)
    assert _q(lake, "SELECT count(*) AS n FROM serving_points")[0]["n"] == 1
    # a p99 from the lake's iterations is the bundle's own (same linear interpolation)
    for s in bundles:
        if s.summary is None or s.meta.get("kind") == "serving":
            continue
        (row,) = _q(
            lake,
            "SELECT quantile_cont(latency_ns, 0.99) / 1e6 AS p99 FROM iterations "
            f"WHERE session_id = '{s.session_id}' AND phase = 'measured'",
        )
        assert row["p99"] == pytest.approx(s.summary["latency_ms"]["p99"], rel=1e-9)


def test_hive_partitions_are_on_disk(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    export_lake(root, lake)
    parts = sorted(p.relative_to(lake).parent.as_posix() for p in lake.glob("kernels/**/*.parquet"))
    assert parts == ["kernels/vendor=nvidia/arch=sm_90/date=2026-11-27"]
    # partition keys live in the path, not in the files (Hive's convention)
    f = next(lake.glob("sessions/**/*.parquet"))
    assert not {"vendor", "arch", "date"} & set(pq.read_schema(f).names)


def test_polars_reads_the_lake(root: Path, tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    lake = tmp_path / "lake"
    export_lake(root, lake)
    frame = pl.scan_parquet(str(lake / "sessions" / "**" / "*.parquet"), hive_partitioning=True)
    got = frame.select("session_id", "vendor", "arch").collect()
    duck = _q(lake, "SELECT session_id, vendor, arch FROM sessions")
    assert sorted(got.rows()) == sorted(tuple(r.values()) for r in duck)
    iters = pl.scan_parquet(str(lake / "iterations" / "**" / "*.parquet"), hive_partitioning=True)
    n = iters.select(pl.len()).collect().item()
    assert n == _q(lake, "SELECT count(*) AS n FROM iterations")[0]["n"]


def test_reexport_adds_nothing_and_changes_are_replaced(root: Path, tmp_path: Path) -> None:
    src = _copy(root, tmp_path)
    lake = tmp_path / "lake"
    export_lake(src, lake)
    counts = _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
    again = export_lake(src, lake)
    assert (again.added, again.replaced, again.unchanged) == (0, 0, 5)
    assert again.batches == []
    assert _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1") == (
        counts
    )
    # a bundle changed since (re-tagged): replaced, not duplicated
    bundle = next(p for p in iter_sessions(src) if p.name != "h100_torch_cuda")
    meta = json.loads((bundle / "session.json").read_text())
    meta["tag"] = "retagged"
    (bundle / "session.json").write_text(json.dumps(meta))
    os.utime(bundle / "session.json", ns=(1, 2_000_000_000_000_000_000))
    third = export_lake(src, lake)
    assert (third.added, third.replaced, third.unchanged) == (0, 1, 4)
    rows = _q(lake, f"SELECT tag FROM sessions WHERE session_id = '{bundle.name}'")
    assert rows == [{"tag": "retagged"}]
    assert _q(lake, "SELECT count(*) AS n FROM sessions")[0]["n"] == 5
    assert _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1") == (
        counts
    )
    # a new session: only it is added
    make_serving_bundle(src, scripted_results(4))
    fourth = export_lake(src, lake)
    assert (fourth.added, fourth.replaced, fourth.unchanged) == (1, 0, 5)


def test_unreadable_and_running_bundles_do_not_stop_the_others(root: Path, tmp_path: Path) -> None:
    src = _copy(root, tmp_path)
    bundles = list(iter_sessions(src))
    broken, running = bundles[0], bundles[1]
    (broken / "metrics" / "inference_iters.parquet").write_bytes(b"not parquet")
    meta = json.loads((running / "session.json").read_text())
    meta["status"] = "running"
    (running / "session.json").write_text(json.dumps(meta))
    result = export_lake(src, tmp_path / "lake")
    assert result.added == 3 and result.running == 1
    assert [Path(b).name for b, _ in result.unreadable] == [broken.name]
    assert "unreadable Parquet" in result.unreadable[0][1]
    ids = {r["session_id"] for r in _q(tmp_path / "lake", "SELECT session_id FROM sessions")}
    assert broken.name not in ids and running.name not in ids
    # nothing of the rejected bundle reached any table
    assert not _q(tmp_path / "lake", f"SELECT 1 FROM iterations WHERE session_id = '{broken.name}'")


# A kill at each step of the export: the batch of 5 sessions is written to staging, its
# commit record written (1 os.replace), its 15 files moved in (the sessions file last), the
# staging removed. Killing the process inside the n-th os.replace, and inside the staging.
_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import aaco.lake.export as export

    where, n = sys.argv[3], int(sys.argv[4])
    real = os.replace
    calls = [0]

    def replace(src, dst):
        calls[0] += 1
        if where == "replace" and calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst)

    os.replace = replace
    if where == "staging":
        def add(self, *args, _real=export._Batch.add):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(self, *args)
        export._Batch.add = add
    export.export_lake(Path(sys.argv[1]), Path(sys.argv[2]))
    """
)


@pytest.mark.parametrize(
    ("where", "n"), [("staging", 4), ("replace", 1), ("replace", 2), ("replace", 6), ("replace", 9)]
)
def test_a_kill_leaves_a_readable_lake_that_the_next_export_completes(
    root: Path, tmp_path: Path, where: str, n: int
) -> None:
    lake = tmp_path / "lake"
    reference = tmp_path / "reference"
    export_lake(root, reference)
    expected = _q(
        reference, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1"
    )
    open_lake(lake, create=True)
    proc = subprocess.run(
        [sys.executable, "-c", _KILLER, str(root), str(lake), where, str(n)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    # readable now: every file is whole Parquet, and no session's rows are there twice
    present = _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
    assert all(r in expected for r in present)
    sessions = _q(lake, "SELECT session_id FROM sessions")
    assert len(sessions) == len({r["session_id"] for r in sessions})
    # the next export finishes (or redoes) the batch: the same lake as an uninterrupted one
    result = export_lake(root, lake)
    assert result.recovered or (where == "replace" and n > 16)
    assert (
        _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
        == expected
    )
    assert _q(lake, "SELECT count(*) AS n FROM sessions")[0]["n"] == 5
    assert not list((lake / STAGING).iterdir())


def test_query_over_a_folder_matches_the_lake(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    export_lake(root, lake)
    for sql in (
        "SELECT session_id, count(*) AS n, sum(latency_ns) AS total FROM iterations "
        "GROUP BY 1 ORDER BY 1",
        "SELECT session_id, model, vendor, arch, date, p99_ms FROM sessions ORDER BY 1",
        "SELECT session_id, count(*) AS n FROM kernels GROUP BY 1 ORDER BY 1",
        "SELECT session_id, point, ttft_p50_ms FROM serving_points ORDER BY 1",
    ):
        assert _q(root, sql) == _q(lake, sql), sql


def test_history_from_the_lake_is_the_folders(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    export_lake(root, lake)
    from_folder = history(root)
    from_lake = history_from_rows(history_rows(lake))

    def shape(groups: list[dict[str, object]]) -> list[tuple[object, ...]]:
        return [
            (g["kind"], g["model"], g["fingerprint"], [r["id"] for r in g["sessions"]])  # type: ignore[attr-defined]
            for g in groups
        ]

    assert shape(from_lake) == shape(from_folder)
    assert len(from_lake) >= 3
    by_model = {g["model"]: g for g in from_lake}
    assert by_model["build"]["machine"]["device"] == "NVIDIA H100 80GB HBM3"
    assert {r["session_id"] for r in lake_rows(lake)} == {p.name for p in iter_sessions(root)}


def test_change_points_are_per_machine(tmp_path: Path) -> None:
    """Two identical machines (one fingerprint, two hosts) run one configuration; one of
    them slows down by 20 % half-way: the change point is found in its series only, and
    the other machine's series has none."""
    from aaco.testing import make_bundle

    rng = np.random.default_rng(5)
    root = tmp_path / "sessions"
    for i in range(24):
        for host, cpu in (("node-a", "CPU A"), ("node-b", "CPU B")):
            slow = 1.2 if host == "node-a" and i >= 12 else 1.0
            s = make_bundle(root, list(rng.normal(2.0 * slow, 0.01, 60)), model="m")
            env = {"hostname": host, "cpu": {"model": cpu, "architecture": "x86_64"}}
            (s.path / "env.json").write_text(json.dumps(env))
            meta = json.loads((s.path / "session.json").read_text())
            meta["fingerprint"] = "one-kind-of-machine"  # identical boxes: one fingerprint
            meta["created_utc"] = f"2026-11-01T00:{i:02d}:00.000Z"
            (s.path / "session.json").write_text(json.dumps(meta))
    lake = tmp_path / "lake"
    export_lake(root, lake)
    groups = history_from_rows(history_rows(lake))
    assert sorted(g["machine"]["hostname"] for g in groups) == ["node-a", "node-b"]
    for g in groups:
        p50 = [c for c in g["change_points"] if c["metric"] == "p50"]
        if g["machine"]["hostname"] == "node-a":
            assert [c["index"] for c in p50] == [12]
            assert p50[0]["magnitude_pct"] == pytest.approx(20, abs=2)
        else:
            assert p50 == []


# -- the commands ---------------------------------------------------------------------------


def test_cli_export_and_query(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    proc = aaco("lake", "export", "--sessions", str(root), "--to", str(lake))
    assert proc.returncode == 0, proc.stderr
    assert "5 session(s) added" in proc.stdout
    again = aaco("lake", "export", "--sessions", str(root), "--to", str(lake), "--json")
    assert json.loads(again.stdout)["unchanged"] == 5
    sql = "SELECT vendor, count(*) AS n FROM sessions GROUP BY 1 ORDER BY 1"
    js = aaco("query", sql, "--lake", str(lake), "--format", "json")
    assert js.returncode == 0, js.stderr
    assert [json.loads(x) for x in js.stdout.splitlines()] == [
        {"vendor": "cpu", "n": 4},
        {"vendor": "nvidia", "n": 1},
    ]
    csv = aaco("query", sql, "--lake", str(lake), "-f", "csv")
    assert csv.stdout.splitlines() == ["vendor,n", "cpu,4", "nvidia,1"]
    table = aaco("query", sql, "--lake", str(lake))
    assert "nvidia" in table.stdout and "2 row(s)" in table.stdout
    out = tmp_path / "r.parquet"
    pq_proc = aaco("query", sql, "--sessions", str(root), "-o", str(out))
    assert pq_proc.returncode == 0, pq_proc.stderr
    assert pq.read_table(out).to_pylist() == [
        {"vendor": "cpu", "n": 4},
        {"vendor": "nvidia", "n": 1},
    ]


def test_cli_errors_are_one_line(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    export_lake(root, lake)
    assert_one_line_error(aaco("query", "SELECT * FROM nope", "--lake", str(lake)), 2, "nope")
    assert_one_line_error(aaco("query", "SELEC 1", "--lake", str(lake)), 2, "query failed")
    assert_one_line_error(
        aaco("query", "SELECT 1", "--lake", str(lake), "-f", "parquet"), 2, "--output"
    )
    assert_one_line_error(
        aaco("query", "SELECT 1", "--lake", str(tmp_path / "missing")), 2, "no such"
    )
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("x")
    assert_one_line_error(
        aaco("lake", "export", "--sessions", str(root), "--to", str(other)), 2, "not an AACO lake"
    )


def test_dashboard_and_api_read_the_lake(root: Path, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from aaco.web.app import create_app

    lake = tmp_path / "lake"
    export_lake(root, lake)
    empty = tmp_path / "empty-root"
    empty.mkdir()
    client = TestClient(create_app(empty, lake=lake))
    listing = client.get("/sessions").json()
    assert listing["total"] == 5
    h100 = next(r for r in listing["items"] if r["id"] == "h100_torch_cuda")
    assert (h100["vendor"], h100["device"]) == ("nvidia", "NVIDIA H100 80GB HBM3")
    assert "source_path" not in h100
    groups = client.get("/history").json()
    assert {g["model"] for g in groups} >= {"build", "net"}
    page = client.get("/ui/history")
    assert page.status_code == 200 and "NVIDIA H100" in page.text
    index = client.get("/")
    assert index.status_code == 200 and "h100_torch_cuda" in index.text
    # a folder that is not a lake: refused at once, in one line
    with pytest.raises(Exception, match="not an AACO lake"):
        create_app(empty, lake=empty)


def test_cli_history_from_the_lake(root: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    export_lake(root, lake)
    proc = aaco("history", "--lake", str(lake), "--json")
    assert proc.returncode == 0, proc.stderr
    groups = json.loads(proc.stdout)
    assert any(g["machine"] and g["machine"]["vendor"] == "nvidia" for g in groups)
    text = aaco("history", "--lake", str(lake))
    assert "NVIDIA H100 80GB HBM3" in text.stdout
    assert_one_line_error(aaco("history", "--lake", str(tmp_path)), 2, "not an AACO lake")


FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures"


def test_imported_third_party_traces_land_in_their_gpus_partition(tmp_path: Path) -> None:
    """Real traces recorded elsewhere (HTA's MI250 ROCm Kineto trace, a rocprofv3 kernel
    trace, a CPU Kineto trace), imported: placed by the GPU the trace names, not by the
    importing machine, with their kernels in the lake."""
    root, lake = tmp_path / "sessions", tmp_path / "lake"
    for f in (
        FIXTURES / "kineto" / "hta_mi250_rocm6.2_train.json.gz",
        FIXTURES / "rocprof" / "v3" / "gen2_kernel_trace.csv",
        FIXTURES / "kineto" / "cpu_mlp.json.gz",
    ):
        proc = aaco("import", str(f), "-o", str(root), "--format", "none")
        assert proc.returncode == 0, proc.stderr
    result = export_lake(root, lake)
    assert result.added == 3 and not result.unreadable
    rows = _q(lake, "SELECT model, vendor, arch, hostname FROM sessions ORDER BY model")
    assert rows == [
        {"model": "cpu_mlp.json.gz", "vendor": "cpu", "arch": "unknown", "hostname": None},
        {"model": "gen2_kernel_trace.csv", "vendor": "amd", "arch": "unknown", "hostname": None},
        {
            "model": "hta_mi250_rocm6.2_train.json.gz",
            "vendor": "amd",
            "arch": "gfx90a",
            "hostname": None,
        },
    ]
    for s in (Session.load(p) for p in iter_sessions(root)):
        kernels = s.table("kernels")
        n = _q(lake, f"SELECT count(*) AS n FROM kernels WHERE session_id = '{s.session_id}'")
        assert n[0]["n"] == (0 if kernels is None else kernels.num_rows)
    assert _q(lake, "SELECT count(*) AS n FROM kernels")[0]["n"] > 0


@pytest.mark.parametrize("n", [1, 2, 5, 9, 15])
def test_an_interrupt_after_the_commit_record_finishes_the_batch(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """Ctrl-C (or SIGTERM, which the CLI turns into one) inside the n-th os.replace of an
    export: the lake never holds a session twice, and the next export completes it."""
    lake = tmp_path / "lake"
    open_lake(lake, create=True)
    reference = tmp_path / "reference"
    export_lake(root, reference)
    expected = _q(
        reference, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1"
    )
    real, calls = os.replace, [0]

    def replace(src: object, dst: object) -> None:
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        export_lake(root, lake)
    monkeypatch.setattr(os, "replace", real)
    present = _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
    assert all(r in expected for r in present)
    export_lake(root, lake)
    assert (
        _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
        == expected
    )
    assert _q(lake, "SELECT count(*) AS n FROM sessions")[0]["n"] == 5


def test_an_interrupt_while_replacing_a_changed_session_loses_nothing(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _copy(root, tmp_path)
    lake = tmp_path / "lake"
    export_lake(src, lake)
    expected = _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
    bundle = next(p for p in iter_sessions(src) if p.name != "h100_torch_cuda")
    meta = json.loads((bundle / "session.json").read_text())
    meta["tag"] = "changed"
    (bundle / "session.json").write_text(json.dumps(meta))
    os.utime(bundle / "session.json", ns=(1, 3_000_000_000_000_000_000))
    import aaco.lake.export as export

    real = export._rewrite_without

    def rewrite(path: Path, ids: set[str]) -> None:
        real(path, ids)
        raise KeyboardInterrupt  # after the first old file lost the session's rows

    monkeypatch.setattr(export, "_rewrite_without", rewrite)
    with pytest.raises(KeyboardInterrupt):
        export_lake(src, lake)
    monkeypatch.setattr(export, "_rewrite_without", real)
    export_lake(src, lake)
    assert (
        _q(lake, "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1")
        == expected
    )
    assert _q(lake, f"SELECT tag FROM sessions WHERE session_id = '{bundle.name}'") == [
        {"tag": "changed"}
    ]


def test_many_partitions_are_written_in_several_batches(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open files are capped: sessions over many dates commit a batch whenever the cap is
    reached, and every row still arrives once."""
    import aaco.lake.export as export

    monkeypatch.setattr(export, "MAX_OPEN_FILES", 3)
    lake = tmp_path / "lake"
    result = export_lake(root, lake)
    assert len(result.batches) >= 2 and result.added == 5
    reference = tmp_path / "reference"
    export_lake(root, reference)
    sql = "SELECT session_id, count(*) AS n FROM iterations GROUP BY 1 ORDER BY 1"
    assert _q(lake, sql) == _q(reference, sql)


def test_a_malformed_summary_is_one_unreadable_bundle(root: Path, tmp_path: Path) -> None:
    src = _copy(root, tmp_path)
    serving = next(
        p for p in iter_sessions(src) if (p / "metrics" / "serving_summary.json").is_file()
    )
    summary = json.loads((serving / "metrics" / "serving_summary.json").read_text())
    summary["points"][0]["point"] = "first"
    (serving / "metrics" / "serving_summary.json").write_text(json.dumps(summary))
    result = export_lake(src, tmp_path / "lake")
    assert result.added == 4
    assert [Path(b).name for b, _ in result.unreadable] == [serving.name]
    notes: list[str] = []
    rows = run_query(src, "SELECT count(*) AS n FROM serving_points", notes).to_pylist()
    assert rows == [{"n": 0}] and serving.name in notes[0]


def test_a_corrupt_file_leaves_out_its_bundle_not_the_query(root: Path, tmp_path: Path) -> None:
    src = _copy(root, tmp_path)
    lake = tmp_path / "lake"
    export_lake(src, lake)
    broken = next(p for p in iter_sessions(src) if p.name != "h100_torch_cuda")
    (broken / "metrics" / "inference_iters.parquet").write_bytes(b"PAR1 not really")
    notes: list[str] = []
    rows = run_query(src, "SELECT DISTINCT session_id FROM iterations", notes).to_pylist()
    assert broken.name not in {r["session_id"] for r in rows} and len(rows) == 3
    assert broken.name in notes[0] and "left out" in notes[0]
    proc = aaco("query", "SELECT count(*) AS n FROM iterations", "--sessions", str(src))
    assert proc.returncode == 0 and "warning:" in proc.stderr
    # a damaged file of one lake table does not stop queries of the others
    next(lake.glob("iterations/**/*.parquet")).write_bytes(b"PAR1 not really")
    assert _q(lake, "SELECT count(*) AS n FROM sessions") == [{"n": 5}]
    assert_one_line_error(aaco("query", "SELECT * FROM iterations", "--lake", str(lake)), 2)


def test_readers_refuse_a_folder_that_is_not_a_lake(root: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="not an AACO lake"):
        lake_rows(empty)
    assert_one_line_error(aaco("export", "prometheus", "--lake", str(empty)), 2, "not an AACO lake")
    assert_one_line_error(
        aaco("query", "SELECT 1", "--lake", str(root), "--sessions", str(root)), 2, "exclusive"
    )
