"""Latency statistics of a run: distribution summary, warmup effect, noise and trend checks.

Every figure is defined in docs/metrics.md; this module is the reference implementation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _sps() -> Any:
    """scipy.stats, imported when first needed: it takes ~0.5-1 s to import, and most
    commands never reach a statistical test."""
    from scipy import stats

    return stats


NOISE_COV_THRESHOLD = 0.10
TREND_P_THRESHOLD = 0.001
TREND_MIN_SHIFT = 0.05
OUTLIER_IQR_FACTOR = 3.0
MIN_TREND_SAMPLES = 20


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one phase's latencies, in milliseconds."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float
    cov: float | None
    iqr: float
    outliers: int

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": self.mean,
            "std": self.std,
            "min": self.min,
            "max": self.max,
            "p50": self.p50,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
            "cov": self.cov,
            "iqr": self.iqr,
            "outliers": self.outliers,
        }


def latency_stats(latencies_ms: Sequence[float] | np.ndarray[Any, Any]) -> LatencyStats | None:
    """Distribution summary; None for an empty phase (never zeros standing for 'unknown').

    Percentiles use linear interpolation between order statistics (numpy's default, type 7
    of Hyndman & Fan); ``std`` is the sample standard deviation (ddof=1, 0 for one sample).
    """
    x = np.asarray(latencies_ms, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return None
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    p25, p50, p75, p90, p95, p99 = (float(v) for v in np.percentile(x, [25, 50, 75, 90, 95, 99]))
    iqr = p75 - p25
    outliers = int(np.count_nonzero(x > p75 + OUTLIER_IQR_FACTOR * iqr)) if n >= 4 else 0
    return LatencyStats(
        count=n,
        mean=mean,
        std=std,
        min=float(x.min()),
        max=float(x.max()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        cov=std / mean if mean > 0 else None,
        iqr=iqr,
        outliers=outliers,
    )


@dataclass(frozen=True)
class Trend:
    """Monotonic drift across iterations: Kendall's tau against the iteration index."""

    tau: float
    p_value: float
    shift: float  # (median of last quarter - median of first quarter) / median of first quarter
    detected: bool


def trend(latencies_ms: Sequence[float] | np.ndarray[Any, Any]) -> Trend | None:
    """Trend test (Mann-Kendall via Kendall's tau); None under ``MIN_TREND_SAMPLES`` samples.

    A trend is *detected* when p < ``TREND_P_THRESHOLD`` **and** the first and last quarters'
    medians differ by more than ``TREND_MIN_SHIFT``: the test alone finds negligible drifts
    significant in long runs.
    """
    x = np.asarray(latencies_ms, dtype=np.float64)
    n = int(x.size)
    if n < MIN_TREND_SAMPLES:
        return None
    res = _sps().kendalltau(np.arange(n), x)
    tau = float(res.statistic)
    p = float(res.pvalue)
    q = max(1, n // 4)
    first, last = float(np.median(x[:q])), float(np.median(x[-q:]))
    shift = (last - first) / first if first > 0 else 0.0
    if math.isnan(tau) or math.isnan(p):  # constant series
        return Trend(tau=0.0, p_value=1.0, shift=shift, detected=False)
    return Trend(
        tau=tau,
        p_value=p,
        shift=shift,
        detected=p < TREND_P_THRESHOLD and abs(shift) > TREND_MIN_SHIFT,
    )


def _phase_ms(iters: pa.Table, phase: str) -> np.ndarray[Any, Any]:
    mask = pc.equal(iters.column("phase"), phase)
    filtered = iters.filter(mask).sort_by("iteration")
    out: np.ndarray[Any, Any] = filtered.column("latency_ns").to_numpy().astype(np.float64) / 1e6
    return out


def summarize_iterations(iters: pa.Table, batch: int | None) -> dict[str, Any]:
    """The ``latency_ms``/``throughput``/``warmup``/``noise`` part of inference_summary.json.

    ``batch`` is the number of items one iteration processes; None when unknown, in which
    case items/s is reported as unknown (null) and only iterations/s is given.
    """
    measured = _phase_ms(iters, "measured")
    warmup = _phase_ms(iters, "warmup")
    m = latency_stats(measured)
    w = latency_stats(warmup)
    warnings: list[str] = []
    out: dict[str, Any] = {
        "latency_ms": m.to_json() if m else None,
        "throughput": None,
        "warmup": None,
        "noise": None,
    }
    if m is not None:
        iters_per_s = 1000.0 / m.mean if m.mean > 0 else None
        out["throughput"] = {
            "batch": batch,
            "iterations_per_s": iters_per_s,
            "items_per_s": batch * iters_per_s if (batch and iters_per_s) else None,
        }
        timed = iters.filter(pc.equal(iters.column("phase"), "measured"))
        starts, ends = timed.column("start_ns"), timed.column("end_ns")
        wall_s = (pc.max(ends).as_py() - pc.min(starts).as_py()) / 1e9
        out["measured_wall_s"] = wall_s
        tr = trend(measured)
        noisy = m.cov is not None and m.cov > NOISE_COV_THRESHOLD
        out["noise"] = {
            "cov": m.cov,
            "cov_threshold": NOISE_COV_THRESHOLD,
            "noisy": noisy,
            "trend": None
            if tr is None
            else {
                "kendall_tau": tr.tau,
                "p_value": tr.p_value,
                "first_to_last_quarter_shift": tr.shift,
                "detected": tr.detected,
            },
        }
        if noisy:
            warnings.append(
                f"noisy measurement: CoV {m.cov:.1%} > {NOISE_COV_THRESHOLD:.0%}; "
                "compare medians, add iterations, or quiet the machine"
            )
        if tr is not None and tr.detected:
            direction = "slower" if tr.shift > 0 else "faster"
            warnings.append(
                f"latency trend across iterations: last quarter {abs(tr.shift):.1%} {direction} "
                f"than the first (Kendall tau {tr.tau:+.2f}, p={tr.p_value:.1e}); "
                "thermal throttling, memory growth or too short a warmup?"
            )
        if m.count < 10:
            warnings.append(f"only {m.count} measured iterations: percentiles are rough")
        if m.outliers:
            warnings.append(
                f"{m.outliers} outlier iteration(s) above Q3 + {OUTLIER_IQR_FACTOR:g} x IQR"
            )
    if w is not None:
        first_ms = float(warmup[0])
        out["warmup"] = {
            **w.to_json(),
            "first_iteration_ms": first_ms,
            "effect_pct": (w.mean - m.mean) / m.mean * 100.0 if m and m.mean > 0 else None,
            "first_iteration_vs_p50": first_ms / m.p50 if m and m.p50 > 0 else None,
        }
    out["warnings"] = warnings
    return out
