"""Legacy rocprof v1 results.csv / results.stats.csv and v2 CSV importers."""

from __future__ import annotations

from pathlib import Path

import pytest

from aaco.errors import InputError
from aaco.importers.base import read_head
from aaco.importers.rocprof_legacy import (
    RocprofV1Importer,
    RocprofV2Importer,
    read_rocprof_v1,
    read_rocprof_v2,
)

FIX = Path(__file__).parent / "fixtures" / "rocprof" / "legacy"


def test_v1_kernels_strip_clone_suffix_and_keep_int_times() -> None:
    t = read_rocprof_v1(FIX / "results.csv")
    k = t.kernels.to_pylist()
    assert [r["name"] for r in k] == [
        "Cijk_Ailk_Bljk_SB_MT64x64x16_SN",
        "void at::native::elementwise_kernel<128, 4>(int)",
    ]
    assert [(r["start_ns"], r["end_ns"], r["dur_ns"]) for r in k] == [
        (5000000000200, 5000000010200, 10000),
        (5000000010500, 5000000011000, 500),
    ]
    r = k[0]
    assert (r["device"], r["queue"], r["dispatch_id"], r["process_id"], r["thread_id"]) == (
        0,
        0,
        0,
        31337,
        31340,
    )
    assert (r["registers"], r["accum_vgpr"], r["sgpr"], r["shared_bytes"]) == (128, 4, 48, 4096)
    assert r["grid_x"] is None and r["block_x"] is None  # grd/wgr are totals, not per axis


def test_v1_counters_long_format() -> None:
    c = read_rocprof_v1(FIX / "results.csv").kernel_counters.to_pylist()
    assert [(r["dispatch_id"], r["counter"], r["value"]) for r in c] == [
        (0, "SQ_WAVES", 256.0),
        (1, "SQ_WAVES", 16.0),
        (0, "GRBM_GUI_ACTIVE", 20000.0),
        (1, "GRBM_GUI_ACTIVE", 1500.5),
    ]


def test_v1_stats_into_meta() -> None:
    t = read_rocprof_v1(FIX / "results.stats.csv")
    assert t.event_count == 0
    rows = t.meta["stats"]["results.stats"]
    assert [(r["calls"], r["total_ns"]) for r in rows] == [(1, 10000), (1, 500)]


def test_v2() -> None:
    k = read_rocprof_v2(FIX / "results_v2.csv").kernels.to_pylist()
    assert [(r["dispatch_id"], r["dur_ns"], r["correlation_id"]) for r in k] == [
        (1, 750, 3),
        (2, 100, 4),
    ]
    assert (k[0]["shared_bytes"], k[1]["scratch_bytes"], k[1]["accum_vgpr"]) == (2048, 8, 4)


def test_sniffing() -> None:
    for name, v1, v2 in (
        ("results.csv", True, False),
        ("results.stats.csv", True, False),
        ("results_v2.csv", False, True),
    ):
        p = FIX / name
        assert RocprofV1Importer.sniff(p, read_head(p)) is v1
        assert RocprofV2Importer.sniff(p, read_head(p)) is v2


def test_v1_without_timestamps_gives_counters_only(tmp_path: Path) -> None:
    p = tmp_path / "results.csv"
    p.write_text('"Index","KernelName","gpu-id","queue-id","SQ_WAVES"\n0,"k [clone .kd]",0,0,8\n')
    t = read_rocprof_v1(p)
    assert t.kernels.num_rows == 0
    assert t.kernel_counters.to_pylist()[0]["kernel_name"] == "k"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty file"),
        ("x,y\n1,2\n", "not a rocprof v1"),
        (None, "truncated or malformed"),
    ],
)
def test_v1_bad_input(tmp_path: Path, text: str | None, match: str) -> None:
    lines = (FIX / "results.csv").read_text().splitlines()
    if text is None:
        text = "\n".join([*lines[:2], lines[2][:50]]) + "\n"
    p = tmp_path / "results.csv"
    p.write_text(text)
    with pytest.raises(InputError, match=match) as exc:
        read_rocprof_v1(p)
    assert str(p) in str(exc.value)


def test_v1_reversed_times_and_odd_counter_cost_their_rows(tmp_path: Path) -> None:
    lines = (FIX / "results.csv").read_text().splitlines()
    lines[1] = lines[1].replace("5000000010200", "5000000000000")  # ends before it begins
    lines[2] = lines[2].replace(",16,1500.5", ",many,1500.5")  # SQ_WAVES is not a number
    p = tmp_path / "results.csv"
    p.write_text("\n".join(lines) + "\n")
    t = RocprofV1Importer().read(p)
    assert t.kernels.num_rows == 1
    assert t.meta["dropped_rows"] == {
        "end timestamp before start": 1,
        "counter SQ_WAVES: empty or not a number": 1,
    }
    assert t.meta["odd_values"] == {"SQ_WAVES": 1}
    c = t.kernel_counters.to_pylist()
    assert [(r["counter"], r["value"]) for r in c] == [("GRBM_GUI_ACTIVE", 1500.5)]


def test_v2_non_numeric_timestamp_drops_that_row(tmp_path: Path) -> None:
    text = (FIX / "results_v2.csv").read_text().replace("2000000000750", "soon")
    p = tmp_path / "v2.csv"
    p.write_text(text)
    t = RocprofV2Importer().read(p)
    assert t.kernels["name"].to_pylist() == ["MIOpenBatchNormFwdInferSpatialEst"]
    assert t.meta["odd_values"] == {"End_Timestamp": 1}
    assert t.meta["dropped_rows"] == {"start/end timestamp missing or not a number": 1}
