"""Windowed e-divisive change points on series with known steps."""

from __future__ import annotations

import numpy as np
import pytest

from aaco.analysis.changepoint import change_points, energy_split, segment_p_value


def test_energy_split_finds_a_clean_step() -> None:
    x = np.array([0.0] * 5 + [1.0] * 5)
    found = energy_split(x)
    assert found is not None and found[0] == 5
    assert energy_split(np.array([1.0, 2.0, 3.0])) is None


def test_single_step_is_located() -> None:
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0, 0.01, 30), rng.normal(0.1, 0.01, 30)]
    cps = change_points(x)
    assert [c.index for c in cps] == [30]
    assert cps[0].p_value < 1e-10
    assert cps[0].shift == pytest.approx(0.1, abs=0.01)


def test_two_steps_and_a_step_beyond_the_first_window() -> None:
    rng = np.random.default_rng(1)
    x = np.r_[rng.normal(0, 0.01, 80), rng.normal(0.05, 0.01, 70), rng.normal(0.02, 0.01, 60)]
    assert [c.index for c in change_points(x, window=50)] == [80, 150]


def test_constant_levels_give_exact_answers() -> None:
    cps = change_points([1.0] * 10 + [2.0] * 10)
    assert [(c.index, c.p_value) for c in cps] == [(10, 0.0)]
    assert change_points([1.0] * 30) == []
    assert segment_p_value(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 1.0


def test_noise_alone_rarely_makes_change_points() -> None:
    rng = np.random.default_rng(2)
    false = sum(bool(change_points(rng.normal(0, 0.01, 60))) for _ in range(100))
    assert false <= 3


def test_short_series_and_bad_window() -> None:
    assert change_points([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError):
        change_points(list(range(20)), window=4)
