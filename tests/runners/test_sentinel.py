"""The noise sentinel: a known slowdown on an injected clock is a change of speed, a small one
is not; the real loop is calibrated to ~10 ms; the harness times it at its three points, and
a worker pinned by launch_worker runs pinned, its threads too."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aaco.runners.harness import WORKER_MODULE, Workload, run_worker
from aaco.runners.launch import launch_worker
from aaco.runners.sentinel import (
    MIN_THRESHOLD_PCT,
    POINTS,
    TARGET_NS,
    Point,
    Sentinel,
    Watch,
    report,
    spin,
)
from aaco.runners.spec import SPEC_FILE
from aaco.testing import FakeClock


class Machine:
    """A CPU on an injected clock: each step of the loop takes ``ns_per_step``."""

    def __init__(self, ns_per_step: float = 100.0) -> None:
        self.clock = FakeClock(start_ns=0, step_ns=0)
        self.ns_per_step = ns_per_step

    def work(self, n: int) -> None:
        self.clock.advance(round(n * self.ns_per_step))


def test_calibration_sizes_the_loop_to_the_target() -> None:
    m = Machine(ns_per_step=100.0)
    s = Sentinel.calibrated(clock=m.clock, work=m.work)
    assert s.iterations == TARGET_NS // 100
    assert s.time_once() == TARGET_NS
    assert s.time_once(scale=1.5) == TARGET_NS * 3 // 2


def test_a_known_slowdown_is_a_change_of_speed() -> None:
    m = Machine(ns_per_step=100.0)
    s = Sentinel.calibrated(clock=m.clock, work=m.work)
    before, between = s.point(), s.point()
    m.ns_per_step = 110.0  # the CPU runs 10 % slower after the measured phase
    after = s.point()
    r = report({"before": before, "between": between, "after": after}, s)
    assert r["drift_pct"] == pytest.approx(10.0)
    assert r["drift_between_pct"] == pytest.approx(0.0)
    assert r["threshold_pct"] == MIN_THRESHOLD_PCT  # no spread: the floor
    assert r["speed_changed"] is True
    assert set(r["points"]) == {"before", "between", "after"}
    assert r["points"]["after"]["median_ns"] == pytest.approx(1.1 * TARGET_NS)


def test_a_small_drift_is_not_a_change_of_speed() -> None:
    m = Machine(ns_per_step=100.0)
    s = Sentinel.calibrated(clock=m.clock, work=m.work)
    before = s.point()
    m.ns_per_step = 102.0
    r = report({"before": before, "after": s.point()}, s)
    assert r["drift_pct"] == pytest.approx(2.0)
    assert r["speed_changed"] is False
    assert r["drift_between_pct"] is None  # not measured


def test_the_threshold_grows_with_the_sentinels_own_spread() -> None:
    s = Sentinel(1000)
    noisy = Point((100, 80, 120, 100, 90))  # MAD 10 of median 100: 10 %
    later = Point((115, 115, 115, 115, 115))
    assert noisy.spread_pct == pytest.approx(10.0)
    r = report({"before": noisy, "after": later}, s)
    assert r["threshold_pct"] == pytest.approx(30.0)
    assert r["drift_pct"] == pytest.approx(15.0)
    assert r["speed_changed"] is False
    faster = Point((60, 60, 60, 60, 60))
    assert report({"before": noisy, "after": faster}, s)["speed_changed"] is True


def test_no_before_point_means_no_drift() -> None:
    r = report({}, Sentinel(10))
    assert r["drift_pct"] is None and r["speed_changed"] is False


def test_the_real_loop_is_deterministic_and_sees_more_work() -> None:
    assert spin(1000) == spin(1000) and spin(1000) != spin(1001)
    s = Sentinel.calibrated()
    assert 1 < s.time_once() / 1e6 < 100  # ~10 ms, loosely: the machine may be busy
    before = s.point()
    r = report({"before": before, "after": s.point(scale=4.0)}, s)
    assert r["drift_pct"] > 50.0 and r["speed_changed"] is True


def test_watch_costs_a_fraction_of_a_second() -> None:
    w = Watch()
    for name in POINTS:
        w.at(name)
    r = w.report()
    assert set(r["points"]) == set(POINTS)
    # 16 timings of ~10 ms (calibration included), ~0.17 s on a quiet machine
    assert r["cost_ns"] < 0.6e9


# -- in the harness ------------------------------------------------------------------------------


class EnvWorkload(Workload):
    """A trivial iteration; records the thread-count variable the worker was started with."""

    def prepare(self, purpose: str) -> Callable[[], Any]:
        self.ctx.result.extra["omp"] = os.environ.get("OMP_NUM_THREADS")
        return lambda: spin(100)


def _spec(bundle: Path, **kw: Any) -> None:
    spec = {
        "workload": f"{__name__}:EnvWorkload",
        "warmup": 2,
        "iterations": 5,
        "duration_s": None,
        "profile": False,
        "profile_warmup": 0,
        "profile_iterations": 0,
        **kw,
    }
    (bundle / SPEC_FILE).parent.mkdir(parents=True, exist_ok=True)
    (bundle / SPEC_FILE).write_text(json.dumps(spec))


def test_harness_times_the_sentinel_at_its_three_points_when_asked(tmp_path: Path) -> None:
    _spec(tmp_path / "on", sentinel=True)
    result = run_worker(tmp_path / "on")
    assert result.status == "completed", result.error
    assert result.sentinel is not None
    assert list(result.sentinel["points"]) == list(POINTS)
    for point in result.sentinel["points"].values():
        assert point["median_ns"] > 0 and len(point["samples_ns"]) == 5
    assert isinstance(result.sentinel["speed_changed"], bool)
    assert result.affinity is not None
    assert result.affinity["process"] == sorted(os.sched_getaffinity(0))
    _spec(tmp_path / "off")
    assert run_worker(tmp_path / "off").sentinel is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_launch_pins_the_worker_and_its_threads(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    _spec(tmp_path, sentinel=True)
    here = str(Path(__file__).resolve().parent)
    outcome = launch_worker(
        tmp_path, WORKER_MODULE, 120, env={"OMP_NUM_THREADS": "1", "PYTHONPATH": here}, cpus={cpu}
    )
    assert outcome.status == "completed", outcome.error
    result = outcome.result
    assert result is not None and result.affinity is not None
    # the process and every thread it started (numpy's BLAS pool included) on that CPU alone
    assert result.affinity["process"] == [cpu]
    assert result.affinity["threads"] == [cpu]
    assert result.get("omp") == "1"
    assert result.sentinel is not None and set(result.sentinel["points"]) == set(POINTS)
