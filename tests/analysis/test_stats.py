from __future__ import annotations

import math

import numpy as np
import pytest

from aaco.analysis.stats import latency_stats, summarize_iterations, trend
from aaco.session.schema import INFERENCE_ITERS


def _iters(warm_ms: list[float], meas_ms: list[float]) -> object:
    lat = [round(v * 1e6) for v in warm_ms + meas_ms]
    starts, t = [], 0
    for v in lat:
        starts.append(t)
        t += v + 1000
    return INFERENCE_ITERS.from_columns(
        {
            "phase": ["warmup"] * len(warm_ms) + ["measured"] * len(meas_ms),
            "iteration": list(range(len(warm_ms))) + list(range(len(meas_ms))),
            "start_ns": starts,
            "end_ns": [s + v for s, v in zip(starts, lat, strict=True)],
            "latency_ns": lat,
            "preprocess_ns": [None] * len(lat),
        }
    )


def test_latency_stats_known_values() -> None:
    # 1..100 ms: mean 50.5, linear-interpolated percentiles p50 = 50.5, p90 = 90.1, p99 = 99.01
    s = latency_stats(np.arange(1, 101, dtype=float))
    assert s is not None
    assert s.count == 100
    assert s.mean == pytest.approx(50.5)
    assert s.p50 == pytest.approx(50.5)
    assert s.p90 == pytest.approx(90.1)
    assert s.p95 == pytest.approx(95.05)
    assert s.p99 == pytest.approx(99.01)
    assert s.min == 1 and s.max == 100
    assert s.iqr == pytest.approx(75.25 - 25.75)
    # squared deviations of 1..n from their mean sum to n(n^2 - 1)/12; over n - 1 (the
    # documented ddof = 1) that is n(n + 1)/12 = 10100/12
    assert s.std == pytest.approx(math.sqrt(10100 / 12))  # 29.0115
    assert s.cov == pytest.approx(math.sqrt(10100 / 12) / 50.5)  # 0.574485
    assert s.outliers == 0


def test_std_is_the_sample_std_and_cov_its_ratio_to_the_mean() -> None:
    # mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32: population std sqrt(32/8) = 2,
    # sample std (ddof = 1, docs/metrics.md) sqrt(32/7)
    s = latency_stats([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert s is not None
    assert s.mean == 5.0
    assert s.std == pytest.approx(math.sqrt(32 / 7))  # 2.138090, not 2.0
    assert s.cov == pytest.approx(math.sqrt(32 / 7) / 5)  # 0.427618
    # two samples: deviations +-1 from the mean 3, sample variance 2 / 1
    two = latency_stats([2.0, 4.0])
    assert two is not None
    assert two.std == pytest.approx(math.sqrt(2)) and two.cov == pytest.approx(math.sqrt(2) / 3)


def test_latency_stats_empty_is_unknown_not_zero() -> None:
    assert latency_stats([]) is None


def test_single_sample() -> None:
    # one iteration: std 0 (documented, not NaN from ddof = 1), so CoV 0 / 2 = 0
    s = latency_stats([2.0])
    assert s is not None and s.std == 0.0 and s.p99 == 2.0
    assert s.cov == 0.0


def test_zero_mean_has_no_cov() -> None:
    # CoV is null when the mean is 0 (docs/metrics.md), never a division by zero or inf
    s = latency_stats([0.0, 0.0, 0.0])
    assert s is not None and s.std == 0.0 and s.mean == 0.0
    assert s.cov is None
    one = latency_stats([0.0])
    assert one is not None and one.std == 0.0 and one.cov is None


def test_outlier_count() -> None:
    x = [1.0] * 50 + [1.1] * 49 + [50.0]
    s = latency_stats(x)
    assert s is not None and s.outliers == 1


def test_trend_detected_on_ramp_not_on_noise() -> None:
    rng = np.random.default_rng(1)
    flat = 10 + rng.normal(0, 0.2, 400)
    ramp = np.linspace(10, 13, 400) + rng.normal(0, 0.2, 400)
    t_flat = trend(flat)
    t_ramp = trend(ramp)
    assert t_flat is not None and not t_flat.detected
    assert t_ramp is not None and t_ramp.detected and t_ramp.shift > 0.2
    assert trend(np.ones(10)) is None  # too few samples
    const = trend(np.ones(100))
    assert const is not None and not const.detected


def test_summary_warmup_throughput_noise() -> None:
    iters = _iters([30.0, 12.0], [10.0] * 50 + [12.0] * 50)
    s = summarize_iterations(iters, batch=4)
    lat = s["latency_ms"]
    assert lat["count"] == 100 and lat["mean"] == pytest.approx(11.0)
    assert s["throughput"]["iterations_per_s"] == pytest.approx(1000 / 11.0)
    assert s["throughput"]["items_per_s"] == pytest.approx(4 * 1000 / 11.0)
    assert s["warmup"]["first_iteration_ms"] == pytest.approx(30.0)
    assert s["warmup"]["effect_pct"] == pytest.approx((21.0 - 11.0) / 11.0 * 100)
    # a step from 10 to 12 ms halfway is a trend worth a warning; CoV ~9 % is below 10 %
    assert s["noise"]["noisy"] is False
    assert s["noise"]["trend"]["detected"] is True
    assert any("trend" in w for w in s["warnings"])


def test_summary_unknown_batch_gives_no_items_per_s() -> None:
    s = summarize_iterations(_iters([], [1.0, 2.0, 30.0]), batch=None)
    assert s["throughput"]["items_per_s"] is None
    assert s["warmup"] is None
    assert s["noise"]["noisy"] is True
    assert any("only 3 measured" in w for w in s["warnings"])
