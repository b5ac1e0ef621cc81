"""The shipped test doubles do what they say: make_bundle's numbers are known by
construction and every renderer reads its bundle; FakeClock steps; bundle_shape describes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aaco.session.bundle import Session
from aaco.testing import FakeClock, bundle_shape, make_bundle


def test_fake_clock() -> None:
    clock = FakeClock(start_ns=5, step_ns=3)
    assert [clock(), clock()] == [5, 8]
    clock.advance(100)
    assert clock() == 111
    assert clock.readings == 3


def test_make_bundle_latencies_are_known(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [1.0, 2.0, 3.0, 4.0, 5.0], warmup_ms=[9.0], batch=4, tag="t")
    assert s.status == "completed"
    lat = s.summary["latency_ms"]
    assert lat["count"] == 5
    assert lat["p50"] == pytest.approx(3.0)
    assert lat["mean"] == pytest.approx(3.0)
    assert lat["min"] == pytest.approx(1.0) and lat["max"] == pytest.approx(5.0)
    # 5 iterations in 15 ms, 4 items each
    assert s.summary["throughput"]["items_per_s"] == pytest.approx(4 * 1000 / 3.0, rel=1e-6)
    assert s.meta["tag"] == "t" and s.meta["run"]["warmup"] == 1
    assert Session.load(s.path).meta["session_id"] == s.meta["session_id"]


def test_make_bundle_renders_reports(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [2.0] * 10, reports=True)
    report = json.loads((s.path / "report" / "report.json").read_text())
    assert report["summary"]["latency_ms"]["p50"] == pytest.approx(2.0)
    assert (s.path / "report" / "report.html").is_file()


def test_failed_bundle(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [1.0], status="failed", error="worker killed by SIGKILL")
    assert s.status == "failed"
    assert s.meta["error"]["message"] == "worker killed by SIGKILL"


def test_bundle_shape(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [1.0, 2.0])
    shape = bundle_shape(s.path)
    assert shape["metrics/inference_iters.parquet"]["latency_ns"] == "int64"
    assert ".run.batch" in shape["session.json"]
    assert ".latency_ms.p50" in shape["metrics/inference_summary.json"]
