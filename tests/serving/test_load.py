"""Load shapes: arrival schedules, sweeps, option checks."""

from __future__ import annotations

import numpy as np
import pytest

from aaco.errors import UsageError
from aaco.serving.load import Load, arrival_offsets, loads_for_sweep, sweep_values


def _gaps(offsets: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    return np.diff(offsets) / 1e9


def test_constant_arrivals_are_exact() -> None:
    off = arrival_offsets(50.0, 6, "constant", 1.0, 0)
    assert off.tolist() == [0, 20_000_000, 40_000_000, 60_000_000, 80_000_000, 100_000_000]


def test_poisson_arrivals_have_the_rate_and_unit_cv() -> None:
    g = _gaps(arrival_offsets(500.0, 20001, "poisson", 1.0, 7))
    assert g.mean() == pytest.approx(1 / 500, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("k", [0.25, 4.0])
def test_gamma_burstiness_sets_the_cv(k: float) -> None:
    g = _gaps(arrival_offsets(100.0, 20001, "gamma", k, 3))
    assert g.mean() == pytest.approx(1 / 100, rel=0.05)
    # gamma of shape k: cv = 1 / sqrt(k)
    assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(k), rel=0.08)


def test_schedule_is_seeded() -> None:
    a = arrival_offsets(10.0, 50, "poisson", 1.0, 1)
    b = arrival_offsets(10.0, 50, "poisson", 1.0, 1)
    c = arrival_offsets(10.0, 50, "poisson", 1.0, 2)
    assert a.tolist() == b.tolist() != c.tolist()


def test_sweep_values() -> None:
    assert sweep_values("concurrency=1,2,4") == ("concurrency", [1.0, 2.0, 4.0])
    assert sweep_values("rate=0.5, 2") == ("rate", [0.5, 2.0])
    for bad in ("batch=1,2", "concurrency=1.5", "rate=", "rate=a", "rate=-1"):
        with pytest.raises(UsageError):
            sweep_values(bad)


def test_loads_for_sweep_keep_the_rest() -> None:
    base = Load(concurrency=1, requests=30, warmup_requests=3)
    loads = loads_for_sweep(base, "rate", [5.0, 10.0])
    assert [ld.rate for ld in loads] == [5.0, 10.0]
    assert all(ld.concurrency is None and ld.requests == 30 for ld in loads)
    assert all(ld.warmup_requests == 3 for ld in loads)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"concurrency": 1, "rate": 1.0},
        {"concurrency": 0},
        {"rate": 0.0},
        {"rate": float("inf")},
        {"rate": 1.0, "arrival": "weibull"},
        {"rate": 1.0, "burstiness": 0.0},
    ],
)
def test_bad_loads_are_usage_errors(kw: dict[str, object]) -> None:
    kw = {"requests": 10, **kw}
    with pytest.raises(UsageError):
        Load(**kw)  # type: ignore[arg-type]


def test_load_needs_a_length() -> None:
    with pytest.raises(UsageError, match="--requests"):
        Load(concurrency=1)
