"""The roofline's ceilings in words (every renderer) and the cache-aware roofline chart."""

from __future__ import annotations

import re
from typing import Any

from aaco.report.model import ceilings_lines
from aaco.report.svg import roofline

LEVELS = [
    {"name": "L1", "capacity_bytes": 65536, "bytes_per_s": 1.2e11, "measured": True},
    {"name": "L2", "capacity_bytes": 2**20, "bytes_per_s": 9e10, "measured": True},
    {"name": "L3", "capacity_bytes": 2**25, "bytes_per_s": 6e10, "measured": True},
    {"name": "DRAM", "capacity_bytes": None, "bytes_per_s": 1.5e10, "measured": True},
]


def _summary(**kw: Any) -> dict[str, Any]:
    ceil = {"device": "AMD EPYC", "source": "calibrated", "bytes_per_s": 1.5e10,
            "flops_per_s": {"float32": 1.7e11, "float64": 8e10}, "memory_levels": LEVELS,
            "mode": "quick", "contention": "quiet"}  # fmt: skip
    return {"ceilings": ceil, "ceilings_note": None, "above_roof": {"message": None}, **kw}


def test_ceilings_headline_names_quality_and_every_level() -> None:
    head, notes = ceilings_lines(_summary())
    assert head == (
        "calibrated, quick, quiet (AMD EPYC): float32 170.0 GFLOP/s, memory roofs L1 120.0, "
        "L2 90.0, L3 60.0, DRAM 15.0 GB/s"
    )
    assert notes == []
    # published peaks: no quality, no levels
    pub = {"ceilings": {"device": "H100 SXM", "source": "published", "bytes_per_s": 3.35e12,
                        "flops_per_s": {"float32": 6.69e13}}}  # fmt: skip
    head, _ = ceilings_lines(pub)
    assert head == "published (H100 SXM): float32 66,900.0 GFLOP/s, memory 3,350.0 GB/s"


def test_ceilings_notes_say_how_they_were_got_and_what_is_wrong() -> None:
    note = "quick calibration measured now, 9.1 s (stored); run `aaco calibrate` for a full one"
    warn = "2 operators run above the measured roof: the calibration is too low"
    head, notes = ceilings_lines(_summary(ceilings_note=note, above_roof={"message": warn}))
    assert head is not None and notes == [note, warn]
    refused = "no ceilings: the quick calibration was refused, other processes used 80 %"
    head, notes = ceilings_lines({"ceilings": None, "ceilings_note": refused})
    assert head is None and notes == [refused]
    assert ceilings_lines(None) == (None, [])


def test_chart_draws_a_roof_per_cache_level_and_hollow_points_above_theirs() -> None:
    points = [
        {"name": "gemm", "op_type": "MatMul", "intensity": 85.0, "achieved_flops_per_s": 1.2e11,
         "time_share": 0.7, "bound": "compute", "memory_level": "L3", "above_roof": False},
        {"name": "add", "op_type": "Add", "intensity": 0.1, "achieved_flops_per_s": 2e10,
         "time_share": 0.3, "bound": "memory", "memory_level": "L1", "above_roof": True},
    ]  # fmt: skip
    levels = [(x["name"], x["bytes_per_s"]) for x in LEVELS[:3]]
    svg = roofline("r", points, 1.7e11, 1.5e10, "roofline", levels)
    # the DRAM roof (solid) and one dashed roof per cache level, each named
    assert svg.count('class="roof"') == 1 and svg.count('class="roof level"') == 3
    for name, bw in levels:
        assert f"<title>{name} roof: {bw / 1e9:g} GB/s" in svg.replace(".0 GB/s", " GB/s")
    assert re.search(r'class="pt above"[^>]*data-name="add"', svg)
    assert "above its roof: a calibration problem" in svg and "data in L3" in svg
    # without levels: as before, one roof
    plain = roofline("r", points, 1.7e11, 1.5e10, "roofline")
    assert 'class="roof level"' not in plain and plain.count('class="roof"') == 1
