"""Calibration microbenchmarks: the stability loop on known sequences, and a real quick run."""

from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import time

import pytest

from aaco.collectors.calibrate import (
    ContentionProbe,
    Measurement,
    best_of_stable,
    calibrate,
    llc_bytes,
    measure_until_stable,
)
from aaco.errors import UsageError


class FakeTime:
    """A clock that only moves when the measured function runs: each call takes the next
    of ``durations`` seconds."""

    def __init__(self, durations: list[float]) -> None:
        self.t = 0.0
        self.durations = iter(durations)

    def clock(self) -> float:
        return self.t

    def call(self) -> None:
        self.t += next(self.durations)


def test_stops_when_the_window_is_stable() -> None:
    # rates 100/2, 100/1.5, then five calls of 1 s: the last five rates are all 100 (CV 0)
    ft = FakeTime([2.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0])
    m = measure_until_stable(ft.call, 100.0, window=5, cv_target=0.03, clock=ft.clock)
    assert m.stable and m.repeats == 7 and m.value == 100.0 and m.cv == 0.0
    assert m.rates[:2] == [50.0, 100.0 / 1.5]


def test_gives_up_at_the_budget_and_says_so() -> None:
    # alternating 1 s / 2 s never gets a CV under 3 %; after the 7th call 10 s have passed
    # (1+2+1+2+1+2+1) but the budget check needs more than 10 s: the 8th call (2 s) ends it
    ft = FakeTime([1.0, 2.0] * 20)
    m = measure_until_stable(ft.call, 10.0, window=5, budget_s=10.0, clock=ft.clock)
    assert not m.stable and m.repeats == 8
    # the last window: rates 5, 10, 5, 10, 5 -> median 5
    assert m.value == 5.0 and m.cv > 0.03


def _m(value: float, stable: bool) -> Measurement:
    return Measurement("x", "FLOP/s", value, 0.0, 5, stable, "", [value] * 5)


def test_best_of_stable_prefers_stable_figures() -> None:
    # an unstable 300 loses to the stable 200 and 100; with nothing stable, the max wins
    assert best_of_stable([_m(100, True), _m(300, False), _m(200, True)]) == 200
    assert best_of_stable([_m(100, False), _m(300, False)]) == 300


def test_quick_cpu_calibration_is_real_and_sane() -> None:
    c = calibrate("cpu", quick=True)
    assert c.source == "calibrated" and c.backend == "cpu" and c.fingerprint
    assert c.flops_per_s["float32"] > 1e9  # any CPU of this decade does > 1 GFLOP/s
    assert c.flops_per_s["float64"] > 0.5e9
    assert c.bytes_per_s is not None and 0.5e9 < c.bytes_per_s < 5e11
    by = {m["name"]: m for m in c.details["measurements"]}
    assert set(by) == {
        "numpy_gemm_float32", "onnxruntime_gemm_float32", "numpy_gemm_float64",
        "onnxruntime_gemm_float64", "numpy_copy_bandwidth", "numpy_add_bandwidth",
        "onnxruntime_add_bandwidth",
    }  # fmt: skip
    for m in by.values():
        assert m["repeats"] >= 2 and math.isfinite(m["value"]) and m["value"] > 0
        assert m["cv"] >= 0 and isinstance(m["stable"], bool) and m["size"]
        # a stable figure had its last 5 rates within 3 % CV
        assert not m["stable"] or (m["repeats"] >= 5 and m["cv"] < 0.03)
    # each ceiling is one of its engines' figures, and no stable figure beats it
    for dt in ("float32", "float64"):
        engines = [by[f"numpy_gemm_{dt}"], by[f"onnxruntime_gemm_{dt}"]]
        assert c.flops_per_s[dt] in [m["value"] for m in engines]
        assert all(c.flops_per_s[dt] >= m["value"] for m in engines if m["stable"])
    bandwidths = [m for k, m in by.items() if k.endswith("_bandwidth")]
    assert c.bytes_per_s in [m["value"] for m in bandwidths]
    assert all(c.bytes_per_s >= m["value"] for m in bandwidths if m["stable"])
    assert c.details["seconds"] > 0 and c.details["quick"] is True
    assert 0.0 <= c.details["other_cpu_share"] <= 1.0


def test_llc_size_is_read_or_unknown() -> None:
    size = llc_bytes()
    assert size is None or size >= 64 * 1024


def test_gpu_backend_without_a_gpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--backend cuda"):
        calibrate("cuda", quick=True)
    with pytest.raises(UsageError, match="unknown --backend"):
        calibrate("tpu")


def test_contention_probe_counts_other_processes() -> None:
    # a child process spinning ~0.6 s of CPU while we sleep: the probe's "others" share is at
    # least that child's CPU time / (wall x logical CPUs); other load can only add to it
    probe = ContentionProbe()
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    share = probe.other_share()
    wall = time.perf_counter() - t0
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert child >= 0.6 and share is not None and share <= 1.0
    # 0.05: /proc/stat counts in 10 ms ticks
    assert share >= child / (wall * (os.cpu_count() or 1)) - 0.05
