"""rocprofv3 JSON (rocprofiler-sdk-tool) importer."""

from __future__ import annotations

from pathlib import Path

import pytest

from aaco.errors import InputError
from aaco.importers.base import read_head
from aaco.importers.rocprofv3_json import Rocprofv3JsonImporter, read_rocprofv3_json

FIX = Path(__file__).parent / "fixtures" / "rocprof" / "json" / "5150_results.json"


def test_kernel_dispatch_with_symbols_and_agents() -> None:
    assert Rocprofv3JsonImporter.sniff(FIX, read_head(FIX))
    t = read_rocprofv3_json(FIX)
    k = t.kernels.to_pylist()[0]
    assert k["name"] == "vecAdd(float*, float*, float*, int)"
    assert (k["start_ns"], k["end_ns"], k["dur_ns"]) == (7000000000100, 7000000002600, 2500)
    assert (k["device"], k["queue"], k["correlation_id"], k["dispatch_id"]) == (0, 3, 12, 1)
    assert (k["grid_x"], k["block_x"], k["registers"], k["sgpr"]) == (4, 256, 12, 24)
    assert (k["process_id"], k["thread_id"], k["shared_bytes"]) == (5150, 5151, 512)
    assert t.meta["devices"][0]["product"] == "AMD Instinct MI250X"
    assert t.meta["api_records_not_tabled"] == 1


def test_memory_copy() -> None:
    m = read_rocprofv3_json(FIX).memcpy.to_pylist()[0]
    assert (m["kind"], m["bytes"], m["dur_ns"], m["src_device"], m["dst_device"]) == (
        "HtoD",
        4000,
        90,
        None,
        0,
    )


def test_truncated_and_empty(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(FIX.read_bytes()[:300])
    with pytest.raises(InputError, match="truncated or malformed JSON"):
        read_rocprofv3_json(p)
    p.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        read_rocprofv3_json(p)


def test_not_sniffed_for_other_json(tmp_path: Path) -> None:
    p = tmp_path / "k.json"
    p.write_text('{"traceEvents": []}')
    assert not Rocprofv3JsonImporter.sniff(p, read_head(p))
