"""rocpd SQLite importer, on a small database built here: uuid-suffixed tables + the views.

The tables are a reduced version of rocpd schema 3 (only what the views below need); the views
have the column names of rocprofiler-sdk's data views (`kernels`, `memory_copies`, `regions`,
`kernel_pmc_events`), which is all the importer reads.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from aaco.errors import InputError
from aaco.importers.base import read_head
from aaco.importers.rocpd import RocpdImporter, read_rocpd

U = "_0195ad3e7c1a7d028a512f1a6c9b0e77"

SCHEMA = f"""
CREATE TABLE rocpd_info_agent{U} (id INTEGER PRIMARY KEY, guid TEXT, type TEXT,
    absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, name TEXT);
CREATE TABLE rocpd_kernel_dispatch{U} (id INTEGER PRIMARY KEY, guid TEXT, pid INTEGER,
    tid INTEGER, agent_id INTEGER, kernel_id INTEGER, dispatch_id INTEGER, queue_id INTEGER,
    stream_id INTEGER, name TEXT, start INTEGER, "end" INTEGER,
    grid_size_x INTEGER, grid_size_y INTEGER, grid_size_z INTEGER,
    workgroup_size_x INTEGER, workgroup_size_y INTEGER, workgroup_size_z INTEGER,
    group_segment_size INTEGER, private_segment_size INTEGER, sgpr_count INTEGER,
    arch_vgpr_count INTEGER, accum_vgpr_count INTEGER, correlation_id INTEGER);
CREATE TABLE rocpd_memory_copy{U} (id INTEGER PRIMARY KEY, guid TEXT, pid INTEGER,
    tid INTEGER, name TEXT, start INTEGER, "end" INTEGER, size INTEGER, stream_id INTEGER,
    src_agent_id INTEGER, dst_agent_id INTEGER, correlation_id INTEGER);
CREATE TABLE rocpd_region{U} (id INTEGER PRIMARY KEY, guid TEXT, category TEXT, name TEXT,
    pid INTEGER, tid INTEGER, start INTEGER, "end" INTEGER, correlation_id INTEGER);
CREATE TABLE rocpd_pmc_event{U} (id INTEGER PRIMARY KEY, guid TEXT, kernel INTEGER,
    name TEXT, value REAL);
CREATE VIEW rocpd_info_agent AS SELECT * FROM rocpd_info_agent{U};
CREATE VIEW kernels AS SELECT K.id, K.guid, 0 AS nid, K.pid, K.tid,
    'KERNEL_DISPATCH' AS category, 'region' AS region, K.name, K.agent_id,
    A.absolute_index AS agent_absolute_index, A.logical_index AS agent_logical_index,
    A.type_index AS agent_type_index, A.type AS agent_type, K.kernel_id, K.dispatch_id,
    K.queue_id, K.stream_id, K.start, K."end", (K."end" - K.start) AS duration,
    K.grid_size_x AS grid_x, K.grid_size_y AS grid_y, K.grid_size_z AS grid_z,
    K.workgroup_size_x AS workgroup_x, K.workgroup_size_y AS workgroup_y,
    K.workgroup_size_z AS workgroup_z,
    (K.grid_size_x / K.workgroup_size_x) AS grid_size_x,
    (K.grid_size_y / K.workgroup_size_y) AS grid_size_y,
    (K.grid_size_z / K.workgroup_size_z) AS grid_size_z,
    K.group_segment_size AS lds_size, K.private_segment_size AS scratch_size,
    K.sgpr_count, K.arch_vgpr_count, K.accum_vgpr_count, K.correlation_id, '{{}}' AS extdata
    FROM rocpd_kernel_dispatch{U} K JOIN rocpd_info_agent{U} A ON A.id = K.agent_id;
CREATE VIEW memory_copies AS SELECT M.id, M.guid, M.pid, M.tid, M.name, M.start, M."end",
    (M."end" - M.start) AS duration, M.stream_id, M.size,
    D.name AS dst_device, D.logical_index AS dst_agent_logical_index,
    D.type_index AS dst_agent_type_index, D.type AS dst_agent_type,
    S.name AS src_device, S.logical_index AS src_agent_logical_index,
    S.type_index AS src_agent_type_index, S.type AS src_agent_type, M.correlation_id
    FROM rocpd_memory_copy{U} M JOIN rocpd_info_agent{U} D ON D.id = M.dst_agent_id
    JOIN rocpd_info_agent{U} S ON S.id = M.src_agent_id;
CREATE VIEW regions AS SELECT id, guid, category, name, 0 AS nid, pid, tid, start, "end",
    ("end" - start) AS duration, correlation_id, '{{}}' AS extdata FROM rocpd_region{U};
CREATE VIEW kernel_pmc_events AS SELECT K.*, E.name AS pmc_name, E.value AS pmc_value
    FROM kernels K JOIN rocpd_pmc_event{U} E ON E.kernel = K.id;
"""

DATA = f"""
INSERT INTO rocpd_info_agent{U} VALUES (1, 'g', 'CPU', 0, 0, 0, 'EPYC'),
    (2, 'g', 'GPU', 1, 1, 0, 'gfx942'), (3, 'g', 'GPU', 2, 2, 1, 'gfx942');
INSERT INTO rocpd_kernel_dispatch{U} VALUES
    (1, 'g', 900, 901, 3, 7, 1, 4, 2, 'gemm_kernel', 1500000000001000, 1500000000005000,
     1024, 64, 1, 256, 1, 1, 8192, 0, 40, 96, 16, 11),
    (2, 'g', 900, 901, 2, 8, 2, 4, 2, 'relu_kernel', 1500000000006000, 1500000000006500,
     4096, 1, 1, 64, 1, 1, 0, 32, 16, 24, 0, 12);
INSERT INTO rocpd_memory_copy{U} VALUES
    (1, 'g', 900, 901, 'MEMORY_COPY_HOST_TO_DEVICE', 1500000000000000, 1500000000000800,
     65536, 2, 1, 3, 10);
INSERT INTO rocpd_region{U} VALUES
    (1, 'g', 'HIP_RUNTIME_API', 'hipLaunchKernel', 900, 901, 1500000000000900,
     1500000000000990, 11),
    (2, 'g', 'MARKER_CORE_API', 'step 0', 900, 901, 1500000000000100, 1500000000007000, 0);
INSERT INTO rocpd_pmc_event{U} VALUES (1, 'g', 1, 'SQ_WAVES', 16), (2, 'g', 2, 'SQ_WAVES', 64);
"""


def make_db(path: Path, data: str = DATA) -> Path:
    con = sqlite3.connect(path)
    con.executescript(SCHEMA + data)
    con.commit()
    con.close()
    return path


def test_kernels_view(tmp_path: Path) -> None:
    db = make_db(tmp_path / "900_results.db")
    assert RocpdImporter.sniff(db, read_head(db))
    t = read_rocpd(db)
    k = t.kernels.to_pylist()
    assert [r["name"] for r in k] == ["gemm_kernel", "relu_kernel"]
    g = k[0]
    assert (g["start_ns"], g["dur_ns"], g["device"], g["queue"], g["stream"]) == (
        1500000000001000,
        4000,
        1,
        4,
        2,
    )
    # grid_size_* of the view are workgroups: 1024/256, 64/1
    assert (g["grid_x"], g["grid_y"], g["grid_z"], g["block_x"]) == (4, 64, 1, 256)
    assert (g["registers"], g["accum_vgpr"], g["sgpr"], g["shared_bytes"]) == (96, 16, 40, 8192)
    assert (g["correlation_id"], g["process_id"], g["thread_id"]) == (11, 900, 901)
    assert k[1]["device"] == 0 and k[1]["scratch_bytes"] == 32


def test_memcpy_regions_counters(tmp_path: Path) -> None:
    t = read_rocpd(make_db(tmp_path / "r.db"))
    m = t.memcpy.to_pylist()[0]
    assert (m["kind"], m["bytes"], m["dur_ns"], m["src_device"], m["dst_device"]) == (
        "HtoD",
        65536,
        800,
        None,
        1,
    )
    a = t.api_calls.to_pylist()
    assert [(r["domain"], r["name"], r["kind"], r["dur_ns"]) for r in a] == [
        ("hip", "hipLaunchKernel", "launch", 90)
    ]
    assert [(r["kind"], r["name"]) for r in t.annotations.to_pylist()] == [("marker", "step 0")]
    c = t.kernel_counters.to_pylist()
    assert [(r["kernel_name"], r["counter"], r["value"], r["device"]) for r in c] == [
        ("gemm_kernel", "SQ_WAVES", 16.0, 1),
        ("relu_kernel", "SQ_WAVES", 64.0, 0),
    ]


def test_bad_databases(tmp_path: Path) -> None:
    plain = tmp_path / "plain.db"
    con = sqlite3.connect(plain)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    assert not RocpdImporter.sniff(plain, read_head(plain))
    with pytest.raises(InputError, match="no kernels/regions views"):
        read_rocpd(plain)
    db = make_db(tmp_path / "trunc.db")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"trunc\.db"):
        read_rocpd(db)
    txt = tmp_path / "x.db"
    txt.write_text("hello")
    with pytest.raises(InputError, match="not an SQLite database"):
        read_rocpd(txt)


def test_reversed_times_and_odd_values_cost_only_their_rows(tmp_path: Path) -> None:
    """SQLite columns are untyped: text where numbers belong, ends before starts."""
    bad = DATA.replace("1500000000006500", "1500000000000001")  # relu ends before it starts
    bad = bad.replace("'g', 1, 'SQ_WAVES', 16", "'g', 1, 'SQ_WAVES', 'many'")
    bad = bad.replace("65536, 2, 1, 3, 10", "'64 KiB', 2, 1, 3, 10")  # copy size as text
    t = read_rocpd(make_db(tmp_path / "r.db", bad))
    assert t.kernels["name"].to_pylist() == ["gemm_kernel"]
    assert t.memcpy["bytes"].to_pylist() == [None]
    # gemm's counter value is text; relu's counter needs no times
    c = t.kernel_counters.to_pylist()
    assert [(r["kernel_name"], r["value"]) for r in c] == [("relu_kernel", 64.0)]
    assert t.meta["dropped_rows"] == {
        "kernels: end before start": 1,
        "kernel_pmc_events: pmc_value missing or not a number": 1,
    }
    assert t.meta["odd_values"] == {"memory_copies.size": 1}
