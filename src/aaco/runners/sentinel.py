"""The noise sentinel: a fixed CPU loop timed before, between and after the measured phases,
which says whether the CPU's speed changed while the model ran.

The loop is pure Python integer arithmetic (a linear congruential generator kept below
2**31, so every step does the same work and the loop keeps nothing alive), run in the
worker's main thread, on the pinned CPU when the run is isolated. It is calibrated once per
run to take about :data:`TARGET_NS` (10 ms), then timed :data:`REPEATS` (5) times at each of
three points: ``before`` the warmup, ``between`` warmup and the measured phase, ``after`` the
measured phase. Its cost is about 0.2 s a run.

The same loop taking longer after than before means the CPU ran it slower (frequency
scaling, thermal throttling, a neighbour on the core), and so it may have run the model
slower part way through. ``drift_pct`` is (after − before) / before × 100 (and
``drift_between_pct`` the same for between); ``speed_changed`` when a drift exceeds
max(3 %, 3 × the larger relative spread of the two points compared), the spread being the
median absolute deviation of the point's 5 timings over their median.

>>> s = Sentinel.calibrated()                  # doctest: +SKIP
>>> before = s.point(); after = s.point()      # doctest: +SKIP
>>> report({"before": before, "after": after}, s)["speed_changed"]   # doctest: +SKIP
False
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MIN_THRESHOLD_PCT",
    "POINTS",
    "REPEATS",
    "SPREAD_FACTOR",
    "TARGET_NS",
    "Point",
    "Sentinel",
    "Watch",
    "report",
    "spin",
]

#: how long one timing of the loop should take
TARGET_NS = 10_000_000
#: timings per point (their median is the point's value)
REPEATS = 5
#: where the harness times it, in order
POINTS = ("before", "between", "after")
#: a drift below this is never a change of speed
MIN_THRESHOLD_PCT = 3.0
#: ... nor below this many times the sentinel's own spread
SPREAD_FACTOR = 3.0
#: the first calibration guess (about 1 ms on a 2020s CPU)
_FIRST_GUESS = 20_000


def spin(n: int) -> int:
    """``n`` steps of a linear congruential generator: deterministic integer work whose
    values stay below 2**31 (no growing int, no container)."""
    x = 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


@dataclass(frozen=True)
class Point:
    """One point's timings (ns), their median and relative spread (MAD / median, %)."""

    samples_ns: tuple[int, ...]

    @property
    def median_ns(self) -> float:
        return float(statistics.median(self.samples_ns))

    @property
    def spread_pct(self) -> float:
        med = self.median_ns
        if med <= 0:
            return 0.0
        mad = statistics.median(abs(s - med) for s in self.samples_ns)
        return float(mad / med * 100.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "median_ns": self.median_ns,
            "spread_pct": round(self.spread_pct, 3),
            "samples_ns": list(self.samples_ns),
        }


@dataclass(frozen=True)
class Sentinel:
    """The calibrated loop: ``iterations`` steps of ``work``, timed on ``clock``.

    ``clock`` and ``work`` are injectable for tests; ``scale`` multiplies the work of every
    timing (a test's known slowdown).
    """

    iterations: int
    calibration_ns: int = 0
    clock: Callable[[], int] = time.perf_counter_ns
    work: Callable[[int], Any] = spin

    @classmethod
    def calibrated(
        cls,
        target_ns: int = TARGET_NS,
        clock: Callable[[], int] = time.perf_counter_ns,
        work: Callable[[int], Any] = spin,
    ) -> Sentinel:
        """The loop sized to take about ``target_ns``: one short timing to guess the step's
        cost, one at the guessed size to correct it (about 1.1 × the target in all)."""
        t0 = clock()
        n = _FIRST_GUESS
        for _ in range(2):
            start = clock()
            work(n)
            took = max(clock() - start, 1)
            n = max(1, round(n * target_ns / took))
        return cls(n, clock() - t0, clock, work)

    def time_once(self, scale: float = 1.0) -> int:
        n = max(1, round(self.iterations * scale))
        start = self.clock()
        self.work(n)
        return self.clock() - start

    def point(self, repeats: int = REPEATS, scale: float = 1.0) -> Point:
        """Time the loop ``repeats`` times."""
        return Point(tuple(self.time_once(scale) for _ in range(repeats)))


def _drift(a: Point, b: Point) -> tuple[float | None, float]:
    """(b − a) / a in %, and the threshold it is judged against."""
    threshold = max(MIN_THRESHOLD_PCT, SPREAD_FACTOR * max(a.spread_pct, b.spread_pct))
    if a.median_ns <= 0:
        return None, threshold
    return (b.median_ns - a.median_ns) / a.median_ns * 100.0, threshold


def report(points: Mapping[str, Point], sentinel: Sentinel) -> dict[str, Any]:
    """The sentinel's record (``capsule.sentinel`` in ``session.json``): each point, the
    drifts from ``before``, their thresholds and ``speed_changed``. A point missing (the run
    failed before it) leaves its drift None."""
    out: dict[str, Any] = {
        "loop": "lcg-int",
        "iterations": sentinel.iterations,
        "target_ns": TARGET_NS,
        "repeats": REPEATS,
        "calibration_ns": sentinel.calibration_ns,
        "points": {name: p.to_json() for name, p in points.items()},
        "drift_pct": None,
        "drift_between_pct": None,
        "threshold_pct": None,
        "threshold_between_pct": None,
        "speed_changed": False,
    }
    before = points.get("before")
    if before is None:
        return out
    changed = False
    for name, key in (("after", "drift_pct"), ("between", "drift_between_pct")):
        other = points.get(name)
        if other is None:
            continue
        drift, threshold = _drift(before, other)
        out[key] = drift
        out[key.replace("drift", "threshold")] = threshold
        changed = changed or (drift is not None and abs(drift) > threshold)
    out["speed_changed"] = changed
    return out


class Watch:
    """The sentinel as the harness runs it: calibrated on creation, then :meth:`at` each
    point; :meth:`report` at any time (a failed run keeps the points it reached), with
    ``cost_ns``, the time the sentinel took from the run, calibration included."""

    def __init__(self, sentinel: Sentinel | None = None) -> None:
        t0 = time.perf_counter_ns()
        self.sentinel = sentinel if sentinel is not None else Sentinel.calibrated()
        self.points: dict[str, Point] = {}
        self.cost_ns = time.perf_counter_ns() - t0

    def at(self, name: str) -> dict[str, Any]:
        """Time the point ``name``; returns the report so far."""
        t0 = time.perf_counter_ns()
        self.points[name] = self.sentinel.point()
        self.cost_ns += time.perf_counter_ns() - t0
        return self.report()

    def report(self) -> dict[str, Any]:
        return {**report(self.points, self.sentinel), "cost_ns": self.cost_ns}
