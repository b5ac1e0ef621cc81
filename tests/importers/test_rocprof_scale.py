"""The rocprof importers give the same tables as before their vectorised rewrite (golden
files written by the previous code) and stay right on many records: real records replicated
N times (times shifted, ids offset), with odd records among them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from tests.importers.test_rocpd import make_db

from aaco.importers.rocpd import read_rocpd
from aaco.importers.rocprofv3_json import read_rocprofv3_json

FIX = Path(__file__).parent / "fixtures" / "rocprof"
GOLDEN = FIX / "golden"
JSON = FIX / "json" / "5150_results.json"
TABLES = ("kernels", "memcpy", "api_calls", "annotations", "kernel_counters")


def _dump(t: Any) -> dict[str, Any]:
    d = {n: getattr(t, n).to_pylist() for n in TABLES}
    d["meta"] = {k: v for k, v in t.meta.items() if k != "files"}
    out: dict[str, Any] = json.loads(json.dumps(d, sort_keys=True))
    return out


@pytest.mark.parametrize(
    ("golden", "read"),
    [
        ("rocprofv3_json_5150.json", lambda tmp: read_rocprofv3_json(JSON)),
        ("rocpd_hand_schema.json", lambda tmp: read_rocpd(make_db(tmp / "h.db"))),
    ],
)
def test_same_tables_as_before(golden: str, read: Any, tmp_path: Path) -> None:
    assert _dump(read(tmp_path)) == json.loads((GOLDEN / golden).read_text())


def _replicated(copies: int) -> dict[str, Any]:
    doc = json.loads(JSON.read_text())
    buf = doc["rocprofiler-sdk-tool"][0]["buffer_records"]
    out: dict[str, list[Any]] = {k: [] for k in buf}
    for c in range(copies):
        for key, records in buf.items():
            for r in records:
                r = copy.deepcopy(r)
                r["start_timestamp"] += c * 10_000
                r["end_timestamp"] += c * 10_000
                r["correlation_id"]["internal"] += c * 100
                if "dispatch_info" in r:
                    r["dispatch_info"]["dispatch_id"] += c * 100
                out[key].append(r)
    doc["rocprofiler-sdk-tool"][0]["buffer_records"] = out
    result: dict[str, Any] = doc
    return result


def test_json_replicated_records(tmp_path: Path) -> None:
    n = 3000
    p = tmp_path / "big.json"
    p.write_text(json.dumps(_replicated(n)))
    one = read_rocprofv3_json(JSON)
    t = read_rocprofv3_json(p)
    assert t.kernels.num_rows == n and t.memcpy.num_rows == n
    assert t.meta["api_records_not_tabled"] == n
    k = t.kernels.to_pylist()
    first = one.kernels.to_pylist()[0]
    for c in (0, 1, n - 1):
        row = k[c]
        assert row["start_ns"] == first["start_ns"] + c * 10_000
        assert row["correlation_id"] == first["correlation_id"] + c * 100
        same = {key: v for key, v in row.items()
                if key not in ("start_ns", "end_ns", "correlation_id", "dispatch_id")}  # fmt: skip
        assert same == {key: first[key] for key in same}
    assert set(t.memcpy["kind"].to_pylist()) == {"HtoD"}
    assert t.meta["dropped_rows"] == {} and t.meta["odd_values"] == {}


def test_json_odd_records_among_many(tmp_path: Path) -> None:
    """One record of each kind of trouble, among thousands: only it is affected."""
    doc = _replicated(2000)
    disp = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    disp[10]["dispatch_info"]["kernel_id"] = 99  # no symbol: dropped
    disp[20]["end_timestamp"] = disp[20]["start_timestamp"] - 1  # reversed: dropped
    disp[30]["dispatch_info"]["workgroup_size"]["x"] = 0  # grid unknown
    disp[40]["thread_id"] = "main"  # not a number: null, counted
    disp[50]["start_timestamp"], disp[50]["end_timestamp"] = 2**63, 2**63 + 5  # beyond int64
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc))
    t = read_rocprofv3_json(p)
    assert t.kernels.num_rows == 1997
    assert t.meta["dropped_rows"] == {
        "kernel_dispatch: end before start": 1,
        "kernel_dispatch: kernel_id without a kernel_symbols name": 1,
        "kernel_dispatch: start/end beyond int64": 1,
    }
    assert t.meta["odd_values"] == {"kernel_dispatch.thread_id": 1}
    assert t.kernels["grid_x"].null_count == 1
    assert t.kernels["thread_id"].null_count == 1
    assert t.memcpy.num_rows == 2000
