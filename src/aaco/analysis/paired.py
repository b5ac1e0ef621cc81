"""Paired, sequential comparison of two configurations run alternately (``aaco ab``).

Pure functions over per-run latency series. An interleaved experiment runs A and B in
pairs, the order within each pair drawn at random, so that the machine's drift (its speed
changing from minute to minute) hits both sides of a pair alike and cancels in the pair's
ratio. The method (docs/methodology.md, "Interleaved A/B"):

* each run is summarised by its gating quantile (p10 by default, as ``aaco diff``); each
  pair by the log ratio ``d = ln(q_B / q_A)``;
* the effect is the **median pair ratio** ``exp(median d)``, with an exact, distribution-free
  interval: the **sign-test interval** (order statistics of ``d``; it assumes only that the
  pairs are independent, not that ``d`` is normal or symmetric). On the machines this was
  built on a process lands in one of two speed modes (about 35 % apart), so a few pairs
  compare a fast run with a slow one: their ratios are outliers that a mean (and a
  bootstrap of it) follows and a median ignores (BENCHMARKS.md §25). ``signed-rank``
  (Hodges-Lehmann estimate, Wilcoxon interval; assumes symmetry) and ``bootstrap`` (mean of
  ``d``, hierarchical bootstrap over pairs and iterations within runs, Student-t interval)
  are the alternatives;
* **sequential looks**: the verdict is evaluated after ``looks(...)`` pairs (a geometric
  schedule from ``min_pairs`` to ``max_pairs``) and the error rate ``alpha`` is split over
  the scheduled looks (Bonferroni): each look's interval has level ``1 - alpha / K``, so the
  chance that *any* look's interval misses the true effect is at most ``alpha``, however
  early the experiment stops. A group-sequential design, conservative but valid for every
  stopping time on the schedule;
* the verdict is the interval rule of ``aaco diff`` against the margin ``delta``:
  REGRESSION when the interval lies wholly above ``1 + delta``, IMPROVEMENT wholly below
  ``1 - delta``, NO CHANGE wholly inside; else the experiment goes on, and a budget spent
  before a decision is INCONCLUSIVE.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from aaco.analysis.compare import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    QUANTILES,
    REGRESSION,
    block_bootstrap_quantiles,
)

__all__ = [
    "DEFAULT_MAX_PAIRS",
    "DEFAULT_MIN_PAIRS",
    "DEFAULT_THRESHOLD",
    "METHODS",
    "PairedLook",
    "bootstrap_interval",
    "evaluate",
    "look_alpha",
    "looks",
    "pair_log_ratios",
    "sign_interval",
    "signed_rank_interval",
]

#: the default interval method (see the module's docstring)
METHODS: tuple[str, ...] = ("sign", "signed-rank", "bootstrap")
#: the first look: with alpha 0.05 split over the default schedule's eight looks (12 ... 160)
#: the sign test's interval is bounded from 12 pairs (P(Bin(12, 1/2) = 0) = 0.00024 <=
#: alpha / K / 2 = 0.0031); earlier looks would spend error rate on intervals that can
#: hardly decide
DEFAULT_MIN_PAIRS = 12
#: on this project's VM a +5 % change needs about 90 pairs (BENCHMARKS.md §25)
DEFAULT_MAX_PAIRS = 160
#: the default margin: interleaving cancels the drift that makes ``aaco diff`` need 3 %, and
#: a 5 % change must be resolvable within the default budget on a noisy VM (BENCHMARKS.md §25)
DEFAULT_THRESHOLD = 0.01
#: the schedule's growth between looks
LOOK_GROWTH = 1.5
BOOTSTRAP_RESAMPLES = 2000


def looks(min_pairs: int, max_pairs: int, growth: float = LOOK_GROWTH) -> list[int]:
    """The pair counts at which the verdict is evaluated: ``min_pairs``, then each about
    ``growth`` times the last, ending at ``max_pairs``."""
    if min_pairs < 2:
        raise ValueError("min_pairs must be at least 2")
    if max_pairs < min_pairs:
        raise ValueError("max_pairs must be at least min_pairs")
    out = [min_pairs]
    while out[-1] < max_pairs:
        nxt = max(out[-1] + 1, math.ceil(out[-1] * growth))
        out.append(min(nxt, max_pairs))
    return out


def look_alpha(alpha: float, schedule: Sequence[int]) -> float:
    """Each look's two-sided error rate: ``alpha`` split evenly over the scheduled looks."""
    return alpha / len(schedule)


def pair_log_ratios(
    a_runs: Sequence[np.ndarray[Any, Any]], b_runs: Sequence[np.ndarray[Any, Any]], q: float
) -> np.ndarray[Any, Any]:
    """``ln(quantile_q(B_i) / quantile_q(A_i))`` for each pair ``i``."""
    if len(a_runs) != len(b_runs):
        raise ValueError("as many A runs as B runs are needed")
    qa = np.array([np.quantile(x, q) for x in a_runs], dtype=np.float64)
    qb = np.array([np.quantile(x, q) for x in b_runs], dtype=np.float64)
    if np.any(~np.isfinite(qa)) or np.any(~np.isfinite(qb)) or np.any(qa <= 0) or np.any(qb <= 0):
        raise ValueError("latencies must be finite and positive")
    out: np.ndarray[Any, Any] = np.log(qb / qa)
    return out


# -- intervals (all on the log scale) ----------------------------------------------------------
@cache
def _binom_cdf_half(n: int) -> tuple[float, ...]:
    """P(Bin(n, 1/2) <= k) for k = 0..n."""
    pmf = [math.comb(n, k) / 2.0**n for k in range(n + 1)]
    acc, out = 0.0, []
    for p in pmf:
        acc += p
        out.append(acc)
    return tuple(out)


def sign_interval(d: np.ndarray[Any, Any], alpha: float) -> tuple[float, float, float]:
    """(estimate, lo, hi): the median of ``d`` and its exact sign-test interval of level at
    least ``1 - alpha`` (the k-th smallest and k-th largest ``d``, k the largest with
    P(Bin(n, 1/2) <= k - 1) <= alpha / 2). Infinite bounds when ``n`` is too small."""
    x = np.sort(np.asarray(d, dtype=np.float64))
    n = x.size
    est = float(np.median(x))
    cdf = _binom_cdf_half(n)
    k = 0
    while k < n and cdf[k] <= alpha / 2:
        k += 1
    if k == 0:
        return est, -math.inf, math.inf
    return est, float(x[k - 1]), float(x[n - k])


@cache
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(W+ <= w) for w = 0..n(n+1)/2 under the null of the signed-rank test."""
    top = n * (n + 1) // 2
    dist = np.zeros(top + 1)
    dist[0] = 1.0
    for r in range(1, n + 1):
        shifted = np.zeros_like(dist)
        shifted[r:] = dist[:-r]
        dist = 0.5 * (dist + shifted)
    return tuple(np.cumsum(dist).tolist())


def signed_rank_interval(d: np.ndarray[Any, Any], alpha: float) -> tuple[float, float, float]:
    """(estimate, lo, hi): the Hodges-Lehmann estimate (median of the Walsh averages) and the
    exact Wilcoxon signed-rank interval of level at least ``1 - alpha`` (Hollander & Wolfe,
    Nonparametric Statistical Methods, 3.3). Assumes ``d`` symmetric about the effect."""
    x = np.asarray(d, dtype=np.float64)
    n = x.size
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2.0)
    est = float(np.median(walsh))
    if n > 300:  # the normal approximation of W+ (exact tables would be needlessly large)
        from statistics import NormalDist

        z = NormalDist().inv_cdf(1 - alpha / 2)
        m = n * (n + 1) / 4
        sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        c = max(math.floor(m - z * sd), 0)
    else:
        cdf = _signed_rank_cdf(n)
        c = 0
        while c < len(cdf) and cdf[c] <= alpha / 2:
            c += 1
    if c == 0:
        return est, -math.inf, math.inf
    return est, float(walsh[c - 1]), float(walsh[walsh.size - c])


def bootstrap_interval(
    a_runs: Sequence[np.ndarray[Any, Any]],
    b_runs: Sequence[np.ndarray[Any, Any]],
    q: float,
    alpha: float,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(estimate, lo, hi): the mean pair log ratio and a Student-t interval whose standard
    error comes from a hierarchical bootstrap (pairs resampled, then each chosen run's
    iterations by a circular block bootstrap), with the small-sample factor sqrt(n/(n-1))."""
    from scipy import stats  # lazy: ~0.5 s

    n = len(a_runs)
    d = pair_log_ratios(a_runs, b_runs, q)
    est = float(d.mean())
    if n < 2:
        return est, -math.inf, math.inf
    rng = np.random.default_rng(seed)

    def draws(runs: Sequence[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        return np.stack(
            [block_bootstrap_quantiles(np.asarray(x), [q], resamples, rng)[0] for x in runs]
        )  # (runs, resamples)

    qa, qb = draws(a_runs), draws(b_runs)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(qb / qa)  # (pairs, resamples)
    pick = rng.integers(0, n, size=(resamples, n))
    means = logs[pick, np.arange(resamples)[:, None]].mean(axis=1)
    se = float(np.std(means)) * math.sqrt(n / (n - 1))
    t = float(stats.t.ppf(1 - alpha / 2, n - 1))
    return est, est - t * se, est + t * se


# -- the sequential verdict -----------------------------------------------------------------
@dataclass(frozen=True)
class PairedLook:
    """The verdict after ``pairs`` valid pairs (ratios B/A, not logs)."""

    pairs: int
    verdict: str
    decided: bool
    ratio: float
    ci: tuple[float, float]
    level: float  # the interval's level, 1 - alpha / K
    method: str
    gate: str

    @property
    def delta_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def ci_pct(self) -> tuple[float, float]:
        return ((self.ci[0] - 1.0) * 100.0, (self.ci[1] - 1.0) * 100.0)

    def to_json(self) -> dict[str, Any]:
        def known(x: float) -> float | None:  # an unbounded or undefined figure: null
            return x if math.isfinite(x) else None

        return {
            "pairs": self.pairs,
            "verdict": self.verdict,
            "decided": self.decided,
            "ratio": known(self.ratio),
            "delta_pct": known(self.delta_pct),
            "ci": [known(x) for x in self.ci],
            "ci_pct": [known(x) for x in self.ci_pct],
            "level": self.level,
            "method": self.method,
            "gate": self.gate,
        }


def interval_verdict(lo: float, hi: float, delta: float) -> str:
    """The interval rule (ratios): REGRESSION above ``1 + delta``, IMPROVEMENT below
    ``1 - delta``, NO CHANGE inside, else INCONCLUSIVE."""
    if lo > 1 + delta:
        return REGRESSION
    if hi < 1 - delta:
        return IMPROVEMENT
    if lo >= 1 - delta and hi <= 1 + delta:
        return NO_CHANGE
    return INCONCLUSIVE


def evaluate(
    a_runs: Sequence[np.ndarray[Any, Any]],
    b_runs: Sequence[np.ndarray[Any, Any]],
    *,
    gate: str,
    delta: float,
    alpha: float,
    schedule: Sequence[int],
    method: str = METHODS[0],
    seed: int = 0,
) -> PairedLook:
    """The verdict at this look (``len(a_runs)`` pairs; a count on ``schedule``)."""
    if gate not in QUANTILES:
        raise ValueError(f"unknown gate {gate!r}; choose from {', '.join(QUANTILES)}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not 0 <= delta < 1:
        raise ValueError("delta must be a fraction in [0, 1)")
    q = QUANTILES[gate]
    a_level = look_alpha(alpha, schedule)
    if method == "bootstrap":
        est, lo, hi = bootstrap_interval(a_runs, b_runs, q, a_level, seed=seed)
    else:
        d = pair_log_ratios(a_runs, b_runs, q)
        fn = sign_interval if method == "sign" else signed_rank_interval
        est, lo, hi = fn(d, a_level)
    # an unbounded side stays infinite (null in JSON), not exp(-inf) = 0 (-100 %)
    ratio_lo = math.exp(lo) if math.isfinite(lo) else -math.inf
    ratio_hi = math.exp(hi) if math.isfinite(hi) else math.inf
    verdict = interval_verdict(ratio_lo, ratio_hi, delta)
    return PairedLook(
        pairs=len(a_runs),
        verdict=verdict,
        decided=verdict != INCONCLUSIVE,
        ratio=math.exp(est),
        ci=(ratio_lo, ratio_hi),
        level=1.0 - a_level,
        method=method,
        gate=gate,
    )
