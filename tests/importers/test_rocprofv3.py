"""rocprofv3 CSV importer: kernel-trace generations, API/marker/copy/counter files, run dirs."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from aaco.errors import InputError
from aaco.importers.base import read_head
from aaco.importers.rocprofv3 import (
    Rocprofv3CsvImporter,
    Rocprofv3DirImporter,
    read_rocprofv3_csv,
    read_rocprofv3_dir,
)
from aaco.session.schema import KERNELS

FIX = Path(__file__).parent / "fixtures" / "rocprof" / "v3"
RUN = FIX / "run"
NODE = RUN / "node1"


def test_oldest_generation_grid_in_workgroups() -> None:
    t = read_rocprofv3_csv(FIX / "gen1_kernel_trace.csv")
    k = t.kernels.to_pylist()
    assert [r["dur_ns"] for r in k] == [48744, 8819330200223721 - 8819330200120456]
    assert k[0]["start_ns"] == 8819330200067564  # int64 all the way, no float rounding
    # 1024 work-items / 64 per group = 16 groups; 1000 / 256 -> ceil = 4
    assert (k[0]["grid_x"], k[0]["grid_y"], k[0]["grid_z"]) == (16, 1024, 1)
    assert (k[1]["grid_x"], k[1]["block_x"]) == (4, 256)
    assert (k[1]["shared_bytes"], k[1]["scratch_bytes"]) == (2048, 16)
    assert k[1]["stream"] is None and k[1]["registers"] is None
    assert (k[0]["device"], k[0]["queue"], k[0]["correlation_id"]) == (1, 1, 1451)
    assert k[0]["process_id"] is None  # no <pid>_ prefix
    assert "no agent_info" in t.meta["device_ids"]
    assert KERNELS.conform(t.kernels).num_rows == 2


def test_stream_id_generation() -> None:
    k = read_rocprofv3_csv(FIX / "gen2_kernel_trace.csv").kernels.to_pylist()[0]
    assert (k["stream"], k["queue"], k["device"], k["dispatch_id"]) == (7, 3, 2, 11)
    assert (k["grid_x"], k["grid_y"], k["shared_bytes"]) == (256, 4, 8192)


def test_rocpd_convert_variant_with_guid_and_agent_label() -> None:
    k = read_rocprofv3_csv(FIX / "rocpd_convert_kernel_trace.csv").kernels.to_pylist()[0]
    assert k["device"] == 3  # "Agent 3", no agent info: the agent id as reported
    assert (k["registers"], k["accum_vgpr"], k["sgpr"]) == (24, 4, 32)
    assert (k["shared_bytes"], k["scratch_bytes"]) == (512, 64)
    assert (k["grid_x"], k["grid_y"], k["block_x"], k["block_y"]) == (3, 2, 128, 2)


def test_current_generation_uses_sibling_agent_info() -> None:
    t = read_rocprofv3_csv(NODE / "4242_kernel_trace.csv")
    k = t.kernels.to_pylist()
    # Agent 1 and Agent 2 are the two GPUs (logical node ids 1, 2) -> GPU 0 and 1
    assert [r["device"] for r in k] == [0, 1]
    assert [r["process_id"] for r in k] == [4242, 4242]
    assert (k[0]["registers"], k[0]["accum_vgpr"], k[0]["sgpr"]) == (64, 8, 32)
    assert (k[0]["grid_x"], k[0]["grid_y"], k[0]["block_x"]) == (64, 64, 256)
    assert [d["product"] for d in t.meta["devices"]] == ["AMD Instinct MI300X"] * 2


def test_api_trace_domains_and_kinds() -> None:
    t = read_rocprofv3_csv(NODE / "4242_hip_api_trace.csv")
    rows = t.api_calls.to_pylist()
    assert [r["kind"] for r in rows] == ["alloc", "memcpy", "launch", "sync", "launch", "other"]
    assert {r["domain"] for r in rows} == {"hip"}
    assert rows[2]["dur_ns"] == 50000 and rows[2]["correlation_id"] == 5
    assert rows[4]["thread_id"] == 4243
    hsa = read_rocprofv3_csv(NODE / "4242_hsa_api_trace.csv").api_calls.to_pylist()
    assert (hsa[0]["domain"], hsa[0]["kind"]) == ("hsa", "other")


def test_marker_trace_becomes_annotations() -> None:
    t = read_rocprofv3_csv(NODE / "4242_marker_api_trace.csv")
    assert t.api_calls.num_rows == 0
    a = t.annotations.to_pylist()
    assert a == [
        {
            "source": "rocprofv3-csv",
            "kind": "marker",
            "name": "iteration 0",
            "process_id": 4242,
            "thread_id": 4242,
            "device": None,
            "stream": None,
            "start_ns": 1191916548300000,
            "dur_ns": 900000,
            "step": None,
        }
    ]


def test_memory_copy() -> None:
    m = read_rocprofv3_csv(NODE / "4242_memory_copy_trace.csv").memcpy.to_pylist()
    assert [r["kind"] for r in m] == ["HtoD", "DtoH"]
    assert [r["bytes"] for r in m] == [None, None]
    assert [(r["src_device"], r["dst_device"], r["device"]) for r in m] == [
        (None, 0, 0),
        (1, None, 1),
    ]
    assert m[0]["dur_ns"] == 1191916547800000 - 1191915691500000


def test_counter_collection_without_accum_or_timestamps() -> None:
    t = read_rocprofv3_csv(FIX / "counter_collection_noaccum.csv")
    c = t.kernel_counters.to_pylist()
    assert [(r["dispatch_id"], r["counter"], r["value"]) for r in c] == [
        (1, "SQ_WAVES", 16384.0),
        (1, "GRBM_COUNT", 2500.5),
        (2, "SQ_WAVES", 64.0),
    ]
    assert t.kernels.num_rows == 0  # no timestamps: nothing to place on a timeline


def test_counter_collection_with_timestamps_gives_kernels() -> None:
    t = read_rocprofv3_csv(NODE / "4242_counter_collection.csv")
    assert t.kernel_counters.num_rows == 3
    k = t.kernels.to_pylist()
    assert [(r["dispatch_id"], r["dur_ns"], r["device"]) for r in k] == [
        (1, 444520, 0),
        (2, 12345, 1),
    ]
    assert k[0]["accum_vgpr"] == 8 and k[0]["grid_x"] is None  # totals only in this file


def test_directory_import() -> None:
    assert Rocprofv3DirImporter.sniff(RUN, b"")
    t = read_rocprofv3_dir(RUN)
    # the counter file's dispatches duplicate the kernel trace's: kept once
    assert t.kernels.num_rows == 2
    assert [r["device"] for r in t.kernels.to_pylist()] == [0, 1]
    assert t.api_calls.num_rows == 7 and t.annotations.num_rows == 1
    assert t.memcpy.num_rows == 2 and t.kernel_counters.num_rows == 3
    assert [d["index"] for d in t.meta["devices"]] == [0, 1]
    assert t.meta["memory_allocation_events"] == 2
    assert t.meta["stats"]["4242_kernel_stats"][0]["total_ns"] == 444520
    assert t.meta["device_ids"] == ["GPU index 0..n-1 in agent order, from 4242_agent_info.csv"]


def test_sniff_recognises_by_content_not_name(tmp_path: Path) -> None:
    p = tmp_path / "whatever.txt"
    shutil.copy(FIX / "gen2_kernel_trace.csv", p)
    assert Rocprofv3CsvImporter.sniff(p, read_head(p))
    legacy = Path(__file__).parent / "fixtures" / "rocprof" / "legacy" / "results_v2.csv"
    assert not Rocprofv3CsvImporter.sniff(legacy, read_head(legacy))
    assert read_rocprofv3_csv(p).kernels.num_rows == 1


def test_gzip(tmp_path: Path) -> None:
    p = tmp_path / "1_kernel_trace.csv.gz"
    p.write_bytes(gzip.compress((FIX / "gen1_kernel_trace.csv").read_bytes()))
    assert Rocprofv3CsvImporter.sniff(p, read_head(p))
    t = read_rocprofv3_csv(p)
    assert t.kernels["dur_ns"].to_pylist() == [48744, 103265]
    assert t.kernels["process_id"].to_pylist() == [1, 1]


def _write(tmp_path: Path, text: str, name: str = "9_kernel_trace.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


HEAD = (FIX / "gen2_kernel_trace.csv").read_text().splitlines()[0]
ROW = (FIX / "gen2_kernel_trace.csv").read_text().splitlines()[1]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty file"),
        (HEAD + "\n" + ROW + "\n" + ROW[:60] + "\n", "truncated or malformed"),
        ("a,b,c\n1,2,3\n", "matches no known domain"),
        ("\x00\x01binary", "not a CSV"),
    ],
)
def test_bad_input(tmp_path: Path, text: str, match: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(InputError, match=match) as exc:
        read_rocprofv3_csv(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("end", "reason", "odd"),
    [
        ("12x4", "start/end timestamp missing or not a number", {"End_Timestamp": 1}),
        ("", "start/end timestamp missing or not a number", {}),
        ("999", "end timestamp before start", {}),
    ],
)
def test_row_with_odd_timestamp_is_dropped_and_counted(
    tmp_path: Path, end: str, reason: str, odd: dict[str, int]
) -> None:
    """One odd timestamp costs its row (counted), never the file."""
    p = _write(tmp_path, HEAD + "\n" + ROW + "\n" + ROW.replace("1000000000050000", end) + "\n")
    t = Rocprofv3CsvImporter().read(p)
    assert t.kernels.num_rows == 1
    assert t.meta["dropped_rows"] == {reason: 1} and t.meta["odd_values"] == odd


def test_missing_required_column_is_named(tmp_path: Path) -> None:
    head = HEAD.replace('"End_Timestamp",', "")
    row = ROW.replace("1000000000050000,", "")
    p = _write(tmp_path, head + "\n" + row + "\n")
    # without End_Timestamp the header is not a kernel trace at all
    with pytest.raises(InputError, match="matches no known domain"):
        read_rocprofv3_csv(p)
    head2 = HEAD.replace('"Agent_Id",', "")
    p2 = _write(tmp_path, head2 + "\n" + ROW.replace("2,3,7", "3,7", 1) + "\n", "8_x.csv")
    with pytest.raises(InputError):
        read_rocprofv3_csv(p2)


def test_directory_with_truncated_file_fails_whole(tmp_path: Path) -> None:
    run = tmp_path / "run" / "host"
    shutil.copytree(NODE, run)
    text = (run / "4242_kernel_trace.csv").read_text()
    (run / "4242_kernel_trace.csv").write_text(text[:-40])
    with pytest.raises(InputError, match=r"4242_kernel_trace\.csv"):
        read_rocprofv3_dir(tmp_path / "run")


def test_directory_lists_foreign_csv_as_skipped(tmp_path: Path) -> None:
    shutil.copytree(NODE, tmp_path / "h")
    (tmp_path / "h" / "notes.csv").write_text("x,y\n1,2\n")
    t = read_rocprofv3_dir(tmp_path)
    assert t.meta["skipped"] == [str(tmp_path / "h" / "notes.csv")]
    # a mixed folder is left to the per-file importers, so nothing is silently ignored
    assert not Rocprofv3DirImporter.sniff(tmp_path, b"")
    assert not Rocprofv3DirImporter.sniff(FIX.parent, b"")
    assert not Rocprofv3DirImporter.sniff(FIX.parent / "legacy", b"")
