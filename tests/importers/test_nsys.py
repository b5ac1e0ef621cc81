"""Nsight Systems SQLite importer, on the fixtures of fixtures/nsys/ (built from NVIDIA's schema
reference by scripts/make_nsys_fixture.py: every value checked here is known by construction).

Two export schema versions: 3.28.1 (nsys 2026.4: event syncs carry ``eventSyncId``) and 3.16.1
(nsys 2024.6: they do not, the link to the event record comes from ``eventId`` and order); both
must give the same tables. Variants (odd values, missing tables, corrupt pages, other
processes) are made by SQL on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.importers.test_rocpd import DATA, SCHEMA

from aaco.errors import AacoError, InputError
from aaco.importers.base import TABLE_FIELDS, TraceTables, read_head
from aaco.importers.nsys import NsysSqliteImporter, read_nsys
from aaco.importers.registry import detect, import_paths
from aaco.session.bundle import Session

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"
NEW = FIXTURES / "nsys_2026_4.sqlite"  # schema 3.28.1
OLD = FIXTURES / "nsys_2024_6.sqlite"  # schema 3.16.1
BOTH = [pytest.param(NEW, id="schema-3.28.1"), pytest.param(OLD, id="schema-3.16.1")]

PID, MAIN, SIDE = 4242, 4243, 4250
GLOBAL_PID = (1 << 48) | (PID << 24)


def _read(path: Path) -> TraceTables:
    tables = NsysSqliteImporter().read(path)
    for name, spec in TABLE_FIELDS.items():
        spec.conform(getattr(tables, name))
    json.dumps(tables.meta, allow_nan=False)
    return tables


def _rows(table: pa.Table, *columns: str) -> list[tuple[Any, ...]]:
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


@pytest.fixture
def copy(tmp_path: Path) -> Iterator[Path]:
    """A writable copy of the newer fixture."""
    path = tmp_path / "report.sqlite"
    shutil.copyfile(NEW, path)
    yield path


def _sql(path: Path, script: str) -> None:
    with closing(sqlite3.connect(path)) as con:
        con.executescript(script)
        con.commit()


# --------------------------------------------------------------------------- sniffing


@pytest.mark.parametrize("path", BOTH)
def test_fixture_is_sniffed_and_detected(path: Path) -> None:
    assert NsysSqliteImporter.sniff(path, read_head(path))
    assert detect(path) is NsysSqliteImporter


def test_sqlite_that_is_not_nsys_is_not_sniffed(tmp_path: Path) -> None:
    rocpd = tmp_path / "900_results.db"
    _sql(rocpd, SCHEMA + DATA)
    other = tmp_path / "other.sqlite"
    # a StringIds table alone does not make an nsys export
    _sql(other, "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);")
    empty = tmp_path / "empty.sqlite"
    _sql(empty, "CREATE TABLE t (x INTEGER); DROP TABLE t;")
    for path in (rocpd, other, empty):
        assert not NsysSqliteImporter.sniff(path, read_head(path)), path
        with pytest.raises(InputError, match="no Nsight Systems tables") as err:
            read_nsys(path)
        assert "\n" not in str(err.value) and path.name in str(err.value)
    assert detect(rocpd) is not NsysSqliteImporter
    assert detect(NEW) is NsysSqliteImporter


def test_not_sqlite_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    path.write_bytes(b"hello, world\n" * 100)
    assert not NsysSqliteImporter.sniff(path, read_head(path))
    with pytest.raises(InputError, match="not an SQLite database"):
        read_nsys(path)


# --------------------------------------------------------------------------- tables


@pytest.mark.parametrize("path", BOTH)
def test_kernels(path: Path) -> None:
    k = _read(path).kernels
    assert k.num_rows == 3
    assert k.column("name").to_pylist() == [
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char *, 1>>(int, at::native::FillFunctor<float>, "
        "at::detail::Array<char *, 1>)",
        "ampere_sgemm_128x64_nn",
        "triton_poi_fused_add_0",
    ]
    cols = ("start_ns", "end_ns", "dur_ns", "device", "stream", "correlation_id",
            "process_id", "thread_id")  # fmt: skip
    assert _rows(k, *cols) == [
        (6_500, 9_500, 3_000, 0, 7, 102, PID, MAIN),
        (14_000, 20_000, 6_000, 0, 13, 105, PID, MAIN),
        # launched by cuLaunchKernel on the second thread
        (32_000, 33_000, 1_000, 0, 7, 111, PID, SIDE),
    ]
    dims = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers",
            "shared_bytes")  # fmt: skip
    assert _rows(k, *dims) == [
        (128, 1, 1, 256, 1, 1, 16, 0),
        (8, 16, 1, 128, 1, 1, 122, 16_384 + 4_096),
        (64, 1, 1, 128, 1, 1, 32, 0),
    ]
    assert set(k.column("source").to_pylist()) == {"nsys"}
    assert k.column("time_is_gpu").to_pylist() == [True] * 3
    # classified at import (aaco.analysis.kernels.classify_table), as for Kineto
    assert k.column("short_name").null_count == 3


@pytest.mark.parametrize("path", BOTH)
def test_runtime_and_driver_calls(path: Path) -> None:
    api = _read(path).api_calls
    host = api.filter(pc.is_null(api.column("stream")))
    # 16 RUNTIME rows, one of them a backtrace record repeating corr 102: 15 calls
    assert host.num_rows == 15
    assert host.column("correlation_id").to_pylist() == [100, 101, 102, *range(103, 115)]
    by_corr = {r["correlation_id"]: r for r in host.to_pylist()}
    assert by_corr[102]["name"] == "cudaLaunchKernel"  # CUPTI's _v7000 dropped
    assert (by_corr[102]["start_ns"], by_corr[102]["end_ns"]) == (5_000, 6_000)
    assert {c: by_corr[c]["kind"] for c in (100, 101, 102, 103, 104, 108, 110, 111)} == {
        100: "memcpy",
        101: "memset",
        102: "launch",
        103: "other",
        104: "sync",
        108: "sync",
        110: "sync",
        111: "launch",
    }
    assert by_corr[111]["name"] == "cuLaunchKernel"
    assert by_corr[111]["domain"] == "cuda_driver"
    assert {r["domain"] for c, r in by_corr.items() if c != 111} == {"cuda_runtime"}
    assert (by_corr[111]["process_id"], by_corr[111]["thread_id"]) == (PID, SIDE)
    assert {(r["process_id"], r["thread_id"]) for c, r in by_corr.items() if c != 111} == {
        (PID, MAIN)
    }
    assert host.column("device").null_count == host.num_rows


@pytest.mark.parametrize("path", BOTH)
def test_device_side_syncs_and_event_links(path: Path) -> None:
    tables = _read(path)
    api = tables.api_calls
    syncs = api.filter(pc.equal(api.column("domain"), "cuda_sync"))
    cols = ("name", "kind", "correlation_id", "device", "stream", "wait_stream",
            "wait_correlation_id", "start_ns", "end_ns")  # fmt: skip
    assert _rows(syncs, *cols) == [
        # stream 13 waits on event 1, recorded on stream 7 by corr 103
        ("Stream Wait Event", "sync", 104, 0, 13, 7, 103, 11_000, 11_200),
        # event 1 was recorded again (stream 13, corr 107) before this sync: that record
        ("Event Sync", "sync", 108, 0, -1, 13, 107, 21_000, 25_000),
        ("Stream Sync", "sync", 109, 0, 7, None, None, 26_000, 27_000),
        ("Context Sync", "sync", 110, 0, -1, None, None, 28_000, 30_000),
        # event 3 was never recorded: not derivable
        ("Event Sync", "sync", 112, 0, -1, None, None, 34_000, 34_100),
    ]
    assert set(syncs.column("process_id").to_pylist()) == {PID}
    assert syncs.column("thread_id").null_count == syncs.num_rows


def test_both_schema_versions_give_the_same_tables() -> None:
    new, old = _read(NEW), _read(OLD)
    for name in TABLE_FIELDS:
        assert getattr(new, name).equals(getattr(old, name)), name
    assert (new.meta["schema_version"], old.meta["schema_version"]) == ("3.28.1", "3.16.1")


@pytest.mark.parametrize("path", BOTH)
def test_copies_and_memsets(path: Path) -> None:
    m = _read(path).memcpy
    cols = ("name", "kind", "bytes", "start_ns", "end_ns", "device", "stream", "src_device",
            "dst_device", "correlation_id")  # fmt: skip
    assert _rows(m, *cols) == [
        ("Memcpy HtoD (Pageable -> Device)", "HtoD", 4_096, 2_000, 4_000, 0, 7, None, None, 100),
        ("Memcpy PtoP (Device -> Device)", "PtoP", 8_192, 36_000, 37_000, 0, 7, 0, 1, 113),
        ("Memcpy DtoH (Device -> Pageable)", "DtoH", 4_096, 39_000, 40_000, 0, 7, None, None, 114),
        ("Memset (Device)", "memset", 1_024, 4_100, 4_200, 0, 7, None, None, 101),
    ]


@pytest.mark.parametrize("path", BOTH)
def test_nvtx_ranges(path: Path) -> None:
    a = _read(path).annotations
    cols = ("kind", "name", "process_id", "thread_id", "start_ns", "dur_ns", "step")
    # the push/pop range by its text, the start/end range by its registered string; the mark
    # (eventType 34) is no range
    assert _rows(a, *cols) == [
        ("user", "forward", PID, MAIN, 500, 40_500, None),
        ("user", "data_load", PID, MAIN, 900, 3_600, None),
    ]


def test_meta() -> None:
    meta = _read(NEW).meta
    assert meta["tool"] == "nsys" and meta["format"] == "nsys-sqlite"
    assert meta["product_version"] == "2026.4.1.100"
    assert meta["clock"]["unit"] == "ns"
    assert meta["clock"]["session_start_utc_ns"] == 1_717_000_000_000_000_000
    assert [(d["id"], d["name"], d["numSms"]) for d in meta["devices"]] == [
        (0, "NVIDIA H100 80GB HBM3", 132),
        (1, "NVIDIA H100 80GB HBM3", 132),
    ]
    assert meta["backtrace_records_skipped"] == {"CUPTI_ACTIVITY_KIND_RUNTIME": 1}
    assert len(meta["enums_from_file"]) == 5
    assert (meta["odd_values"], meta["dropped_rows"]) == ({}, {})


# --------------------------------------------------------------------------- variants


def test_documented_enum_values_when_the_export_lacks_the_enum_tables(copy: Path) -> None:
    _sql(copy, "".join(f"DROP TABLE {t};" for t in _read(NEW).meta["enums_from_file"]))
    tables = _read(copy)
    full = _read(NEW)
    assert tables.meta["enums_from_file"] == []
    for name in TABLE_FIELDS:
        assert getattr(tables, name).equals(getattr(full, name)), name


def test_optional_tables_absent(copy: Path) -> None:
    _sql(
        copy,
        "DROP TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT; DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET;"
        "DROP TABLE NVTX_EVENTS; DROP TABLE TARGET_INFO_GPU;",
    )
    tables = _read(copy)
    api = tables.api_calls
    syncs = api.filter(pc.equal(api.column("domain"), "cuda_sync"))
    assert syncs.num_rows == 5
    # without the event records no wait is derivable
    assert syncs.column("wait_stream").null_count == 5
    assert syncs.column("wait_correlation_id").null_count == 5
    assert tables.memcpy.column("kind").to_pylist() == ["HtoD", "PtoP", "DtoH"]
    assert tables.annotations.num_rows == 0
    assert tables.meta["devices"] == []
    assert tables.kernels.num_rows == 3


def test_only_kernels(tmp_path: Path) -> None:
    path = tmp_path / "k.sqlite"
    _sql(
        path,
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO StringIds VALUES (1, 'k');"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, shortName INTEGER NOT NULL);"
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 30, 1, 7, 1);",
    )
    tables = _read(path)
    assert _rows(tables.kernels, "name", "dur_ns", "device", "stream", "grid_x") == [
        ("k", 20, 1, 7, None)
    ]
    assert tables.api_calls.num_rows == tables.memcpy.num_rows == 0


def test_event_sync_links_stay_within_a_process(copy: Path) -> None:
    # another process records its own event 1 (eventIds are per process) after corr 107
    other = (1 << 48) | (5000 << 24)
    _sql(
        copy,
        "INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT (deviceId, contextId, streamId, "
        f"correlationId, globalPid, eventId, eventSyncId) VALUES (0, 2, 99, 107, {other}, 1, "
        "NULL); UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET eventSyncId = NULL;",
    )
    api = _read(copy).api_calls
    syncs = api.filter(pc.equal(api.column("domain"), "cuda_sync"))
    assert _rows(syncs, "correlation_id", "wait_stream", "wait_correlation_id")[:2] == [
        (104, 7, 103),
        (108, 13, 107),
    ]


def test_event_sync_id_wins_over_order(copy: Path) -> None:
    # eventSyncId names the record the sync waited on, whatever the correlation ids say
    _sql(copy, "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET eventSyncId = 900 "
               "WHERE correlationId = 108;")  # fmt: skip
    api = _read(copy).api_calls
    sync = [r for r in api.to_pylist() if r["domain"] == "cuda_sync" and r["correlation_id"] == 108]
    assert (sync[0]["wait_stream"], sync[0]["wait_correlation_id"]) == (7, 103)


def test_odd_values_are_null_and_counted(copy: Path) -> None:
    _sql(
        copy,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'grid(512,)', registersPerThread = 1.5,"
        " streamId = X'00ff' WHERE correlationId = 102;"
        # numeric text and integral floats are read
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridY = '16', blockX = 128.0"
        " WHERE correlationId = 105;"
        # no usable start: left out
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 'soon' WHERE correlationId = 101;"
        # end before start: left out
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET end = 1 WHERE correlationId = 114;"
        # a name id that names no string: the next name column is used
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999 WHERE correlationId = 111;"
        # an unknown copy kind and sync type
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 77 WHERE correlationId = 113;"
        "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET syncType = 9 WHERE correlationId = 109;"
        # an NVTX range that never ended
        "UPDATE NVTX_EVENTS SET end = NULL WHERE text = 'forward';",
    )
    tables = _read(copy)
    k = {r["correlation_id"]: r for r in tables.kernels.to_pylist()}
    assert (k[102]["grid_x"], k[102]["registers"], k[102]["stream"]) == (None, None, None)
    assert (k[102]["grid_y"], k[102]["block_x"]) == (1, 256)  # the rest of the row is kept
    assert (k[105]["grid_y"], k[105]["block_x"]) == (16, 128)
    assert k[111]["name"] == "triton_poi_fused_add_0"
    assert 101 not in tables.api_calls.column("correlation_id").to_pylist()
    assert tables.memcpy.num_rows == 3
    m = {r["correlation_id"]: r for r in tables.memcpy.to_pylist()}
    assert (m[113]["kind"], m[113]["name"]) == ("unknown", "Memcpy Unknown (Device -> Device)")
    api = tables.api_calls
    names = api.filter(pc.equal(api.column("domain"), "cuda_sync")).column("name").to_pylist()
    assert "Unknown Sync" in names
    assert tables.annotations.column("name").to_pylist() == ["data_load"]
    assert tables.meta["odd_values"] == {
        "CUPTI_ACTIVITY_KIND_KERNEL.demangledName": 1,
        "CUPTI_ACTIVITY_KIND_KERNEL.gridX": 1,
        "CUPTI_ACTIVITY_KIND_KERNEL.registersPerThread": 1,
        "CUPTI_ACTIVITY_KIND_KERNEL.streamId": 1,
    }
    assert tables.meta["dropped_rows"] == {
        "CUPTI_ACTIVITY_KIND_MEMCPY: end before start": 1,
        "CUPTI_ACTIVITY_KIND_RUNTIME: start/end missing or not a number": 1,
        "NVTX_EVENTS: range without an end": 1,
    }


def test_a_row_without_any_name_is_left_out(copy: Path) -> None:
    _sql(
        copy,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 998, shortName = 998,"
        " mangledName = NULL WHERE correlationId = 105;"
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 997 WHERE correlationId = 109;",
    )
    tables = _read(copy)
    assert tables.kernels.column("correlation_id").to_pylist() == [102, 111]
    assert tables.meta["dropped_rows"] == {
        "CUPTI_ACTIVITY_KIND_KERNEL: name missing": 1,
        "CUPTI_ACTIVITY_KIND_RUNTIME: name missing": 1,
    }


# --------------------------------------------------------------------------- broken files


def test_corrupt_pages_give_one_line(copy: Path) -> None:
    data = bytearray(copy.read_bytes())
    page = 4096
    # garble every page after the schema page: the first query that reads one fails
    for at in range(2 * page, len(data), page):
        data[at : at + 64] = b"\xa5" * 64
    copy.write_bytes(bytes(data))
    with pytest.raises(InputError) as err:
        read_nsys(copy)
    msg = str(err.value)
    assert "\n" not in msg and copy.name in msg and "corrupt" in msg


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_file_is_an_error_or_fewer_rows(copy: Path, fraction: float) -> None:
    data = copy.read_bytes()
    copy.write_bytes(data[: int(len(data) * fraction)])
    full = _read(NEW)
    try:
        tables = NsysSqliteImporter().read(copy)
    except AacoError as exc:
        assert "\n" not in str(exc) and copy.name in str(exc)
        return
    for name, spec in TABLE_FIELDS.items():
        spec.conform(getattr(tables, name))
        assert getattr(tables, name).num_rows <= getattr(full, name).num_rows


# --------------------------------------------------------------------------- .nsys-rep


def _fake_nsys(bin_dir: Path, body: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nsys"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def test_report_without_nsys_says_how_to_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00QDSTRM-ish container\x01" * 10)
    assert NsysSqliteImporter.sniff(report, read_head(report))
    with pytest.raises(InputError) as err:
        read_nsys(report)
    msg = str(err.value)
    assert "\n" not in msg and "nsys export --type sqlite" in msg and report.name in msg


def test_report_is_exported_with_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nsys(
        tmp_path / "bin",
        f'[ "$1" = export ] || exit 3\nfor a in "$@"; do case "$a" in --output=*) '
        f'out="${{a#--output=}}";; esac; done\ncp "{NEW}" "$out"\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "run.qdrep"
    report.write_bytes(b"\x00report\x00" * 10)
    tables = _read(report)
    assert tables.kernels.num_rows == 3
    assert tables.meta["files"] == [str(report)]
    assert tables.meta["exported_with"][1:3] == ["export", "--type=sqlite"]


def test_failed_export_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nsys(tmp_path / "bin", 'echo "Importer error: unsupported report version" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00report\x00" * 10)
    with pytest.raises(InputError, match="unsupported report version") as err:
        read_nsys(report)
    assert "\n" not in str(err.value) and report.name in str(err.value)


def test_a_folder_with_report_and_export_is_imported_once(tmp_path: Path) -> None:
    out = tmp_path / "profiler" / "nsys"
    out.mkdir(parents=True)
    shutil.copyfile(NEW, out / "report.sqlite")
    (out / "report.nsys-rep").write_bytes(b"\x00report\x00" * 10)
    assert not NsysSqliteImporter.sniff(out / "report.nsys-rep", b"\x00report")
    tables = import_paths([out])
    assert tables.kernels.num_rows == 3
    assert tables.meta["skipped"] == [str(out / "report.nsys-rep")]


# --------------------------------------------------------------------------- aaco import


def test_aaco_import_end_to_end(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    proc = aaco("import", str(NEW), "--output", str(root), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("imported into ")
    report = json.loads(proc.stdout)
    session = Session.load(root / "latest")
    assert report["session"]["id"] == session.session_id
    assert report["metrics"]["kernel_count"] == 3
    families = {k["name"]: k["family"] for k in report["top_kernels"]}
    assert families["ampere_sgemm_128x64_nn"] == "gemm"
    record = json.loads((session.path / "profiler" / "import.json").read_text())
    assert record["importers"] == ["nsys"]
    kernels = session.table("kernels")
    assert kernels is not None and kernels.num_rows == 3
    api = session.table("api_calls")
    assert api is not None
    assert api.column("wait_correlation_id").to_pylist().count(107) == 1
    # the report of the bundle renders again from the bundle alone
    again = aaco("report", "--session", str(session.path), "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["metrics"]["kernel_count"] == 3


def test_aaco_import_of_a_corrupt_export_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    data = bytearray(NEW.read_bytes())
    for at in range(2 * 4096, len(data), 4096):
        data[at : at + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))
    proc = aaco("import", str(path), "--output", str(tmp_path / "s"), "--format", "none")
    assert_one_line_error(proc, 2, path.name)
