"""Evidence helpers: movers, scalar deltas with unknowns, nested differences."""

from __future__ import annotations

import pytest

from aaco.analysis.evidence import dict_differences, movers, scalar_delta


def test_movers_rank_by_absolute_change_and_flag_added_and_removed() -> None:
    out = movers({"a": 1.0, "b": 2.0, "gone": 0.5}, {"a": 1.1, "b": 1.0, "new": 0.3}, top=10)
    names = [r["name"] for r in out["top_movers"]]
    assert names == ["b", "gone", "new", "a"]
    by = {r["name"]: r for r in out["top_movers"]}
    assert by["b"]["delta_ms"] == pytest.approx(-1.0) and by["b"]["delta_pct"] == -50.0
    assert by["gone"]["status"] == "removed" and by["gone"]["session_ms"] is None
    assert by["new"]["status"] == "added" and by["new"]["delta_pct"] is None
    assert out["added"] == ["new"] and out["removed"] == ["gone"]
    assert out["delta_total_ms"] == pytest.approx(2.4 - 3.5)
    assert len(movers({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}, top=1)["top_movers"]) == 1


def test_scalar_delta_says_unknown_instead_of_zero() -> None:
    d = scalar_delta(2.0, 3.0, "ms", "x")
    assert (d["delta"], d["delta_pct"]) == (1.0, 50.0)
    for a, b in ((None, 1.0), (1.0, None)):
        u = scalar_delta(a, b, "ms", "x")
        assert u["delta"] is None and u["delta_pct"] is None
    assert scalar_delta(0.0, 1.0, "", "x")["delta_pct"] is None


def test_dict_differences_walks_nested_objects() -> None:
    a = {"x": 1, "pkg": {"ort": "1.18", "numpy": "2.0"}, "only_a": True}
    b = {"x": 1, "pkg": {"ort": "1.19", "numpy": "2.0"}}
    assert dict_differences(a, b) == [
        {"key": "only_a", "baseline": True, "session": None},
        {"key": "pkg.ort", "baseline": "1.18", "session": "1.19"},
    ]
    assert dict_differences(None, None) == []
