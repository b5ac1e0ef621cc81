"""rocpd importer on databases with rocprofiler-sdk's *real* schema-3 DDL and views.

The DDL (tables, indexes, the un-suffixed alias views, and the ``kernels`` /
``memory_copies`` / ``regions`` / ``pmc_events`` / ``counters_collection`` data views) is
reproduced in ``fixtures/rocprof/rocpd/schema3.sql`` from:

* ROCm/rocprofiler-sdk ``source/share/rocprofiler-sdk-rocpd/rocpd_tables.sql``
  @ 50c89cbde07fa1890f7b3167bef29297bdae608e,
  ``rocpd_views.sql`` @ ad31aebb5eb882f23601aedee99ef395eef5e72a,
  ``rocpd_indexes.sql`` @ 19d33bb304b35d94a2a082f6771d918408e0c848;
* ROCm/rocm-systems ``projects/rocprofiler-sdk/source/share/rocprofiler-sdk-rocpd/
  data_views.sql`` @ 5e50e66cddf3cd034b2615123443aa294c6bbbda (schema 3.0.5).

The rows are real recorded rocprofv3 records (ROCm's documented samples and the JSON
fixture; ``fixtures/rocprof/rocpd/build_db.py`` says which), replicated for the larger cases.
In these views the correlation id is ``corr_id``, the logical agent index
``agent_log_index``, ``grid_*`` counts work-items, and counters come from
``counters_collection``: the importer must read all of them.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

import aaco.importers.rocpd as rocpd
from aaco.importers.base import read_head
from aaco.importers.rocpd import RocpdImporter, read_rocpd

FIX = Path(__file__).parent / "fixtures" / "rocprof" / "rocpd"
TABLES = ("kernels", "memcpy", "api_calls", "annotations", "kernel_counters")


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rocpd_build_db", FIX / "build_db.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


build_db = _builder()
U = build_db.UUID


def test_real_schema_one_copy(tmp_path: Path) -> None:
    db = tmp_path / "19396_results.db"
    counts = build_db.build(db)
    assert counts == {"kernels": 8, "regions": 9, "memory_copies": 3, "counters_collection": 7}
    assert RocpdImporter.sniff(db, read_head(db))
    t = read_rocpd(db)
    k = t.kernels.to_pylist()
    assert len(k) == 8
    add = k[0]
    assert add["name"] == build_db.ADD
    assert add["dur_ns"] == 8819330200116308 - 8819330200067564  # kernel_trace.csv row 1
    # corr_id of the schema-3 view; GPU index from agent_type_index
    assert (add["correlation_id"], add["dispatch_id"], add["device"], add["queue"]) == (
        1451, 1, 0, 1,
    )  # fmt: skip
    # grid_x is 1024 work-items in workgroups of 64
    assert (add["grid_x"], add["grid_y"], add["grid_z"]) == (16, 1024, 1)
    assert (add["block_x"], add["block_y"], add["block_z"]) == (64, 1, 1)
    assert (add["registers"], add["sgpr"], add["process_id"], add["thread_id"]) == (
        8, 16, 19396, 69,
    )  # fmt: skip
    vec = k[-1]
    assert (vec["name"], vec["grid_x"], vec["block_x"], vec["shared_bytes"]) == (
        "vecAdd(float*, float*, float*, int)", 4, 256, 512,
    )  # fmt: skip
    m = t.memcpy.to_pylist()
    assert [(r["kind"], r["device"], r["src_device"], r["dst_device"]) for r in m] == [
        ("HtoD", 0, None, 0), ("DtoH", 0, 0, None), ("HtoD", 0, None, 0),
    ]  # fmt: skip
    assert [r["bytes"] for r in m] == [0, 0, 4000] and m[2]["correlation_id"] == 10
    a = t.api_calls.to_pylist()
    assert [r["name"] for r in a][:2] == ["hipGetDevicePropertiesR0600", "hipMalloc"]
    assert {r["domain"] for r in a} == {"hip"} and a[4]["kind"] == "launch"
    assert [r["correlation_id"] for r in a] == list(range(1, 9))
    assert [(r["name"], r["process_id"]) for r in t.annotations.to_pylist()] == [
        ("iteration 0", 4242)
    ]
    c = t.kernel_counters.to_pylist()
    assert len(c) == 7 and {r["counter"] for r in c} == {"SQ_WAVES"}
    assert sorted(r["dispatch_id"] for r in c) == [1, 2, 3, 5, 6, 9, 13]
    assert {(r["value"], r["device"]) for r in c} == {(16384.0, 0)}
    assert t.meta["odd_values"] == {} and t.meta["dropped_rows"] == {}


def test_replicated_copies_and_bounded_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "r.db"
    build_db.build(db, copies=5)
    whole = read_rocpd(db)
    assert whole.kernels.num_rows == 40 and whole.kernel_counters.num_rows == 35
    assert len(set(whole.kernels["correlation_id"].to_pylist())) == 40
    # batches of 3 rows: many Arrow chunks per column, the same tables
    monkeypatch.setattr(rocpd, "BATCH", 3)
    small = read_rocpd(db)
    for name in TABLES:
        assert getattr(small, name).equals(getattr(whole, name)), name
    assert small.meta == whole.meta


def test_one_odd_value_costs_one_value_or_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite is untyped: text in a time, a size, an agent index; a name that is not UTF-8.
    Only those values (or rows) go, in whatever batch they fall."""
    db = tmp_path / "odd.db"
    build_db.build(db, copies=4)
    con = sqlite3.connect(db)
    con.execute(f"UPDATE rocpd_kernel_dispatch{U} SET start = 'soon' WHERE id = 20")
    con.execute(f"UPDATE rocpd_memory_copy{U} SET size = 'big' WHERE id = 7")
    con.execute(f'UPDATE rocpd_region{U} SET "end" = start - 1 WHERE id = 30')
    con.execute(f"UPDATE rocpd_pmc_event{U} SET value = 'lots' WHERE id = 3")  # REAL column
    con.execute(
        f"UPDATE rocpd_info_kernel_symbol{U} SET display_name = CAST(X'6d756cff' AS TEXT) "
        "WHERE id = 18"
    )
    con.commit()
    con.close()
    monkeypatch.setattr(rocpd, "BATCH", 5)
    t = read_rocpd(db)
    assert t.kernels.num_rows == 31
    assert t.memcpy["bytes"].null_count == 1 and t.memcpy.num_rows == 12
    assert t.api_calls.num_rows + t.annotations.num_rows == 35
    # counters_collection SUMs the values: SQLite's SUM reads text as 0, so the row stays
    assert t.kernel_counters.num_rows == 28
    assert sorted(t.kernel_counters["value"].to_pylist())[:2] == [0.0, 16384.0]
    names = set(t.kernels["name"].to_pylist())
    assert "mul\ufffd" in names and build_db.ADD in names
    assert t.meta["dropped_rows"] == {
        "kernels: start/end missing or not a number": 1,
        "regions: end before start": 1,
    }
    assert t.meta["odd_values"] == {"memory_copies.size": 1}


def test_agent_index_not_a_number(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    build_db.build(db)
    con = sqlite3.connect(db)
    con.execute(f"UPDATE rocpd_info_agent{U} SET type_index = 'first' WHERE type = 'GPU'")
    con.commit()
    con.close()
    t = read_rocpd(db)
    assert t.kernels["device"].null_count == 8
    assert t.kernels.num_rows == 8
    # kernels, counters (no prefix) and the copies' destination / source ends
    assert t.meta["odd_values"] == {"agent index": 15, "dst_agent index": 2, "src_agent index": 1}


def test_empty_views(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    con = sqlite3.connect(db)
    schema = (FIX / "schema3.sql").read_text()
    con.executescript(schema.replace("{{uuid}}", U).replace("{{guid}}", build_db.GUID))
    con.close()
    t = read_rocpd(db)
    for name in TABLES:
        assert getattr(t, name).num_rows == 0
        assert isinstance(getattr(t, name), pa.Table)
