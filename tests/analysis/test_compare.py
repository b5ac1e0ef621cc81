"""The diff statistics on synthetic series whose answer is known by construction."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from aaco.analysis.compare import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    block_length,
    compare,
    holm,
    is_bimodal,
    mode_count,
    noise_floor,
    welch_flags_regression,
)


def ar1(n: int, phi: float, rng: np.random.Generator, mu: float = 1.0, sd: float = 0.02) -> Any:
    """AR(1) latencies around ``mu`` with marginal relative sd ``sd``."""
    e = rng.normal(0.0, sd * math.sqrt(1 - phi * phi), n)
    x = np.empty(n)
    x[0] = rng.normal(0.0, sd)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return mu * (1.0 + x)


def test_identical_distributions_are_no_change() -> None:
    rng = np.random.default_rng(1)
    c = compare(rng.normal(10, 0.3, 400), rng.normal(10, 0.3, 400), delta=0.03)
    assert c.verdict == NO_CHANGE
    lo, hi = c.primary.ci_pct
    assert -3 < lo <= 0 <= hi < 3


@pytest.mark.parametrize(("shift", "verdict"), [(1.10, REGRESSION), (0.90, IMPROVEMENT)])
def test_a_shift_is_found_and_its_interval_covers_it(shift: float, verdict: str) -> None:
    rng = np.random.default_rng(2)
    base = rng.normal(10, 0.3, 400)
    c = compare(base, rng.normal(10 * shift, 0.3 * shift, 400), delta=0.03)
    assert c.verdict == verdict
    lo, hi = c.primary.ci
    assert lo < shift < hi
    assert abs(c.primary.ratio - shift) < 0.01


def test_a_shift_equal_to_the_margin_is_inconclusive() -> None:
    # the true ratio sits on the margin: the interval must straddle it
    rng = np.random.default_rng(3)
    c = compare(rng.normal(10, 0.2, 2000), rng.normal(10.5, 0.21, 2000), delta=0.05)
    assert c.verdict == INCONCLUSIVE
    lo, hi = c.primary.ci
    assert lo < 1.05 < hi


def test_block_length_grows_with_autocorrelation() -> None:
    rng = np.random.default_rng(4)
    assert block_length(rng.normal(1, 0.02, 400)) <= 3
    assert block_length(ar1(400, 0.9, rng)) >= 8
    assert block_length([1.0] * 50) == 1
    assert block_length([1.0, 2.0]) == 1


def test_autocorrelated_a_a_pairs_false_alarm_less_than_welch() -> None:
    # AR(1) with phi 0.7: effective sample size ~ n/5.7; Welch assumes n and cries wolf.
    rng = np.random.default_rng(5)
    ours = welch = 0
    pairs = 150
    for _ in range(pairs):
        a, b = ar1(200, 0.7, rng), ar1(200, 0.7, rng)
        ours += compare(a, b, delta=0.0, resamples=500).verdict == REGRESSION
        welch += welch_flags_regression(a, b)
    # nominal one-sided rate 2.5 %; block bootstrap of a median at n=200 runs a little above
    assert ours / pairs <= 0.08
    assert welch / pairs >= 0.15
    assert welch > 2 * ours


def test_bimodal_distribution_is_detected_and_warned() -> None:
    rng = np.random.default_rng(6)
    bimodal = np.r_[rng.normal(1.0, 0.02, 150), rng.normal(1.3, 0.02, 150)]
    rng.shuffle(bimodal)
    assert mode_count(bimodal) == 2
    assert not is_bimodal(rng.lognormal(0, 0.1, 300))  # skewed, one mode
    assert not is_bimodal(np.r_[rng.normal(1, 0.02, 291), rng.normal(2, 0.02, 9)])  # outliers
    assert not is_bimodal(rng.normal(1, 0.02, 300))
    c = compare(rng.normal(1.0, 0.02, 300), bimodal, delta=0.03)
    assert c.bimodal == (False, True)
    assert any("bimodal" in w for w in c.warnings)
    # the quantile shifts tell the story the median cannot: p10 unchanged, p90 +30 %
    assert abs(c.metrics["p10"].delta_pct) < 3
    assert c.metrics["p90"].delta_pct > 25


def test_holm_adjustment_known_values() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
    assert holm([0.001, 0.9]) == pytest.approx([0.002, 0.9])


def test_several_gates_are_holm_corrected() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(10, 0.3, 300)
    c = compare(base, rng.normal(11, 0.33, 300), delta=0.03, gates=("p50", "p90", "p99"))
    assert c.verdict == REGRESSION
    for g in c.gates:
        m = c.metrics[g]
        assert m.p_regression_holm is not None and m.p_regression_holm >= m.p_regression
    assert c.to_json()["method"]["multiple_testing"] == "Holm"


def test_noise_floor_known_value() -> None:
    # log values 0, .01, -.01, .02, -.02: consecutive differences .01, -.02, .03, -.04,
    # median -.005, absolute deviations .015 .015 .035 .035 -> MAD .025
    medians = [math.exp(v) for v in (0.0, 0.01, -0.01, 0.02, -0.02)]
    assert noise_floor(medians) == pytest.approx(math.expm1(3 * 1.4826 * 0.025))
    assert noise_floor(medians[:4]) is None


def test_noise_floor_ignores_a_level_shift_in_the_history() -> None:
    # 20 sessions wandering by 0.5 %, then a +20 % step that stayed: the spread of the levels
    # would make a 30 % floor; consecutive differences see one jump and the 0.5 % noise
    rng = np.random.default_rng(16)
    logs = rng.normal(0, 0.005, 20)
    logs[10:] += math.log(1.2)
    floor = noise_floor(np.exp(logs).tolist())
    assert floor is not None and floor < 0.05


@pytest.mark.parametrize(
    ("a", "b", "msg"),
    [
        ([1.0] * 5, [1.0] * 20, "at least"),
        ([1.0] * 20, [1.0] * 19 + [0.0], "positive"),
        ([1.0] * 20, [1.0] * 19 + [float("nan")], "finite"),
    ],
)
def test_bad_series_are_refused(a: list[float], b: list[float], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        compare(a, b, delta=0.03)


def test_unknown_gate_is_refused() -> None:
    with pytest.raises(ValueError, match="gate"):
        compare([1.0] * 20, [1.0] * 20, delta=0.03, gates=("p42",))


def test_result_is_deterministic() -> None:
    rng = np.random.default_rng(8)
    a, b = rng.normal(5, 0.2, 100), rng.normal(5.1, 0.2, 100)
    assert compare(a, b, delta=0.01).to_json() == compare(a, b, delta=0.01).to_json()


def test_several_runs_per_side_put_run_to_run_variation_into_the_interval() -> None:
    rng = np.random.default_rng(9)
    # three runs per side whose levels differ by +-3 % (a new process, a new memory layout)
    levels_a, levels_b = (0.97, 1.0, 1.03), (1.03, 0.97, 1.0)
    runs_a = [rng.normal(10 * m, 0.1, 200) for m in levels_a]
    runs_b = [rng.normal(10 * m, 0.1, 200) for m in levels_b]
    grouped = compare(runs_a, runs_b, delta=0.01)
    pooled = compare(np.concatenate(runs_a), np.concatenate(runs_b), delta=0.01)
    width = grouped.primary.ci[1] - grouped.primary.ci[0]
    assert width > 2 * (pooled.primary.ci[1] - pooled.primary.ci[0])
    assert grouped.runs == (3, 3) and grouped.n == (600, 600)
    assert grouped.to_json()["runs"] == {"baseline": 3, "session": 3}
    # a real 10 % shift still clears the wider interval
    shifted = compare(runs_a, [x * 1.10 for x in runs_b], delta=0.01)
    assert shifted.verdict == REGRESSION


def test_one_run_given_as_a_list_of_runs_is_the_single_series_method() -> None:
    rng = np.random.default_rng(10)
    a, b = rng.normal(5, 0.2, 100), rng.normal(5.2, 0.2, 100)
    assert compare([a], [b], delta=0.01).to_json() == compare(a, b, delta=0.01).to_json()
    with pytest.raises(ValueError, match="run of 5"):
        compare([a, a[:5]], b, delta=0.01)


def _two_modes(rng: np.random.Generator, slow_share: float) -> np.ndarray:  # type: ignore[type-arg]
    """300 latencies: a fast mode at 1 ms and ``slow_share`` of them at 2 ms, shuffled."""
    n_slow = int(300 * slow_share)
    x = np.r_[rng.normal(1.0, 0.01, 300 - n_slow), rng.normal(2.0, 0.02, n_slow)]
    rng.shuffle(x)
    return x


def test_bimodal_mass_moving_to_the_slow_mode_is_a_regression() -> None:
    # the fast mode (and so p10) stays put while half of the iterations more take the slow
    # path: the median doubles; p10 alone would call this NO CHANGE
    rng = np.random.default_rng(11)

    c = compare(_two_modes(rng, 0.2), _two_modes(rng, 0.7), delta=0.03)
    assert c.bimodal == (True, True)
    assert abs(c.metrics["p10"].delta_pct) < 3
    assert c.metrics["p50"].delta_pct > 90
    assert c.verdict == REGRESSION
    assert c.gates == ("p10", "p25", "p50", "p75") and c.requested_gates == ("p10",)
    assert c.metrics["p50"].verdict == REGRESSION
    assert c.metrics["p10"].verdict == NO_CHANGE
    assert c.to_json()["method"]["multiple_testing"] == "Holm"


def test_a_median_that_moves_while_the_gate_does_not_is_inconclusive() -> None:
    # one mode, stretched above its p10 (x -> x + 3 (x - p10)): p10 unchanged, p50 ~ +7 %
    rng = np.random.default_rng(12)
    base = 1.0 + rng.gamma(2.0, 0.02, 400)
    other = 1.0 + rng.gamma(2.0, 0.02, 400)
    p10 = float(np.quantile(other, 0.1))
    slow = other + 3.0 * np.maximum(other - p10, 0.0)
    c = compare(base, slow, delta=0.03)
    assert c.bimodal == (False, False)
    assert c.metrics["p10"].verdict == NO_CHANGE
    assert c.metrics["p50"].verdict is None  # it did not gate ...
    assert c.metrics["p50"].ci[0] > 1.03  # ... but it clearly moved
    assert c.verdict == INCONCLUSIVE
    assert any("median disagrees with the gate" in w for w in c.warnings)


def test_quantiles_that_do_not_gate_have_no_verdict() -> None:
    rng = np.random.default_rng(13)
    c = compare(rng.normal(5, 0.1, 200), rng.normal(5, 0.1, 200), delta=0.03, gates=("p50",))
    data = c.to_json()["metrics"]
    assert data["p50"]["verdict"] == NO_CHANGE
    assert {data[k]["verdict"] for k in ("p10", "p25", "p75", "p90", "p99")} == {None}
    assert data["p50"]["p_improvement_holm"] == data["p50"]["p_improvement"]  # one gate


def test_judging_at_another_margin_equals_a_fresh_comparison() -> None:
    rng = np.random.default_rng(14)
    a, b = rng.normal(10, 0.2, 300), rng.normal(10.4, 0.2, 300)  # +4 %
    c0 = compare(a, b, delta=0.0)
    for delta in (0.0, 0.02, 0.04, 0.06, 0.2):
        fresh = compare(a, b, delta=delta)
        again = c0.at_margin(delta)
        assert again.verdict == fresh.verdict
        assert again.to_json() == fresh.to_json()
    assert c0.at_margin(0.02).verdict == REGRESSION
    assert c0.at_margin(0.2).verdict == NO_CHANGE


def test_the_headline_is_the_gate_that_decided() -> None:
    rng = np.random.default_rng(15)

    c = compare(_two_modes(rng, 0.2), _two_modes(rng, 0.7), delta=0.03)
    assert c.verdict == REGRESSION
    assert c.primary.name in ("p25", "p50", "p75") and c.primary.verdict == REGRESSION
    assert c.primary.delta_pct > 50
    assert c.to_json()["primary"] == c.primary.name
    # without a deciding gate the headline is the first one asked for
    same = compare(rng.normal(1, 0.01, 300), rng.normal(1, 0.01, 300), delta=0.03)
    assert same.primary.name == "p10"
