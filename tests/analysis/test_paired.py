"""The paired, sequential comparison of ``aaco ab``: intervals whose answers are known by
construction (tables, order statistics), their coverage, and the error rate of the whole
sequential rule on simulated A/A experiments shaped like this VM's pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aaco.analysis.compare import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION
from aaco.analysis.paired import (
    _signed_rank_cdf,
    bootstrap_interval,
    evaluate,
    interval_verdict,
    look_alpha,
    looks,
    pair_log_ratios,
    sign_interval,
    signed_rank_interval,
)


def test_look_schedule_is_geometric_and_ends_at_the_budget() -> None:
    assert looks(8, 40) == [8, 12, 18, 27, 40]
    assert looks(8, 60) == [8, 12, 18, 27, 41, 60]
    assert looks(5, 5) == [5]
    assert looks(2, 4) == [2, 3, 4]
    assert look_alpha(0.05, looks(8, 40)) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        looks(1, 4)
    with pytest.raises(ValueError):
        looks(8, 4)


def test_sign_interval_is_the_order_statistics_the_binomial_gives() -> None:
    d = np.arange(1.0, 13.0)  # 1..12, shuffled below
    rng = np.random.default_rng(0)
    rng.shuffle(d)
    # n = 12, alpha 0.05: P(Bin(12, 1/2) <= 2) = 0.0193 <= 0.025 < P(<= 3) = 0.073 -> k = 3
    est, lo, hi = sign_interval(d, 0.05)
    assert est == 6.5 and (lo, hi) == (3.0, 10.0)
    # n = 8 at alpha 0.01: only 2 / 256 = 0.0078 is small enough: the extremes
    est, lo, hi = sign_interval(np.arange(8.0), 0.01)
    assert (lo, hi) == (0.0, 7.0)
    # too few pairs for the level: unbounded
    _, lo, hi = sign_interval(np.arange(5.0), 0.01)
    assert math.isinf(lo) and math.isinf(hi)


def test_signed_rank_null_distribution_matches_the_tables() -> None:
    cdf = _signed_rank_cdf(10)
    # Hollander & Wolfe table A.4: n = 10, P(W+ <= 8) = 0.0244, P(W+ <= 10) = 0.0420
    assert cdf[8] == pytest.approx(0.02441, abs=1e-5)
    assert cdf[10] == pytest.approx(0.04199, abs=1e-5)
    assert cdf[-1] == pytest.approx(1.0)
    # n = 10, alpha 0.05: C = 9, the interval is the 9th smallest and 9th largest of the
    # 55 Walsh averages
    x = np.array([0.5, 1.1, 1.9, 2.3, 2.8, 3.3, 4.0, 4.6, 5.2, 6.1])
    i, j = np.triu_indices(10)
    walsh = np.sort((x[i] + x[j]) / 2)
    est, lo, hi = signed_rank_interval(x, 0.05)
    assert (lo, hi) == (walsh[8], walsh[-9])
    assert est == pytest.approx(float(np.median(walsh)))


@pytest.mark.parametrize("method", ["sign", "signed-rank"])
def test_intervals_cover_the_true_shift_at_least_at_their_level(method: str) -> None:
    """Exact methods: over 2 000 samples of 12 pairs from a symmetric heavy-tailed law (a
    quarter of the pairs compare a fast-mode run with a slow-mode one, +-35 %), the 95 %
    interval misses the true shift in at most 5 % (+ Monte Carlo slack)."""
    rng = np.random.default_rng(7)
    fn = sign_interval if method == "sign" else signed_rank_interval
    shift, misses, n_sims = 0.05, 0, 2000
    for _ in range(n_sims):
        core = rng.normal(0, 0.03, 12)
        outlier = rng.random(12) < 0.25
        core[outlier] += rng.choice([-0.35, 0.35], outlier.sum())
        _, lo, hi = fn(core + shift, 0.05)
        misses += not (lo <= shift <= hi)
    assert misses / n_sims <= 0.05 + 0.012


def test_pair_log_ratios_and_bootstrap_on_a_known_shift() -> None:
    rng = np.random.default_rng(3)
    a = [rng.normal(10, 0.2, 50) for _ in range(10)]
    b = [x * 1.10 for x in a]  # every pair exactly 10 % slower, iteration by iteration
    d = pair_log_ratios(a, b, 0.5)
    assert np.allclose(d, math.log(1.1))
    est, lo, hi = bootstrap_interval(a, b, 0.5, 0.05, resamples=500, seed=1)
    assert est == pytest.approx(math.log(1.1))
    # the iterations are resampled within each run, A and B apart: the width holds their noise
    assert lo <= math.log(1.1) <= hi and hi - lo < 0.02
    with pytest.raises(ValueError):
        pair_log_ratios(a, b[:3], 0.5)


def test_interval_rule() -> None:
    assert interval_verdict(1.04, 1.2, 0.03) == REGRESSION
    assert interval_verdict(0.8, 0.96, 0.03) == IMPROVEMENT
    assert interval_verdict(0.98, 1.02, 0.03) == NO_CHANGE
    assert interval_verdict(0.99, 1.05, 0.03) == INCONCLUSIVE
    assert interval_verdict(-math.inf, math.inf, 0.03) == INCONCLUSIVE


@pytest.mark.parametrize("method", ["sign", "signed-rank", "bootstrap"])
def test_evaluate_decides_clear_cases(method: str) -> None:
    rng = np.random.default_rng(11)
    sched = looks(8, 40)
    a = [rng.normal(5.0, 0.05, 40) for _ in range(8)]
    slow = [x * rng.uniform(1.18, 1.22) for x in a]
    look = evaluate(a, slow, gate="p50", delta=0.03, alpha=0.05, schedule=sched, method=method)
    assert look.verdict == REGRESSION and look.decided and look.pairs == 8
    assert 1.15 < look.ratio < 1.25 and look.ci[0] > 1.03
    assert look.level == pytest.approx(0.99)
    same = [x * rng.uniform(0.998, 1.002) for x in a]
    look = evaluate(a, same, gate="p50", delta=0.03, alpha=0.05, schedule=sched, method=method)
    assert look.verdict == NO_CHANGE
    # too few pairs for the level: nothing decided
    look = evaluate(a[:4], slow[:4], gate="p50", delta=0.03, alpha=0.05, schedule=sched,
                    method="sign")  # fmt: skip
    assert look.verdict == INCONCLUSIVE and not look.decided
    with pytest.raises(ValueError):
        evaluate(a, slow, gate="p42", delta=0.03, alpha=0.05, schedule=sched)


def _simulate(method: str, shift: float, n_exp: int, seed: int) -> list[tuple[str, int]]:
    """Sequential experiments on pair log ratios like this VM's: a core N(0, 4 %) and a
    quarter of the pairs off by +-35 % (a run in the other speed mode)."""
    rng = np.random.default_rng(seed)
    sched = looks(8, 40)
    out = []
    for _ in range(n_exp):
        d = rng.normal(shift, 0.04, 40)
        off = rng.random(40) < 0.25
        d[off] += rng.choice([-0.35, 0.35], off.sum())
        # runs whose p50 ratio is exp(d): one-iteration "series" of constant runs
        a = [np.full(10, 1.0) for _ in d]
        b = [np.full(10, math.exp(v)) for v in d]
        verdict, used = INCONCLUSIVE, 40
        for n in sched:
            look = evaluate(a[:n], b[:n], gate="p50", delta=0.01, alpha=0.05, schedule=sched,
                            method=method)  # fmt: skip
            if look.decided:
                verdict, used = look.verdict, n
                break
        out.append((verdict, used))
    return out


@pytest.mark.parametrize("method", ["sign", "signed-rank"])
def test_sequential_rule_keeps_its_false_alarm_rate(method: str) -> None:
    """A/A by construction (shift 0): over 400 experiments with up to five looks, a
    REGRESSION or IMPROVEMENT is called in at most 1 % (the design promises <= 5 % in all,
    Bonferroni over the looks; the 1 % margin makes it far rarer); a +20 % shift is found
    in 95 % of them."""
    aa = _simulate(method, 0.0, 400, seed=5)
    alarms = sum(v in (REGRESSION, IMPROVEMENT) for v, _ in aa)
    assert alarms / len(aa) <= 0.01
    slow = _simulate(method, math.log(1.20), 100, seed=6)
    assert sum(v == REGRESSION for v, _ in slow) >= 95
