"""Change points in a history of per-session figures: windowed e-divisive with a t-test check.

The method follows Apache Otava (formerly Hunter, Fleming et al. 2023), itself derived from
MongoDB's use of E-Divisive means (Matteson & James 2014; Daly et al. 2020):

1. slide a window of ``window`` points (half-overlapping) over the series;
2. inside each window, split recursively at the point that maximises the energy-distance
   statistic of e-divisive, keeping a split only when Student's t-test between the two
   sides gives p < ``max_p`` (Otava replaces e-divisive's permutation test by this check,
   which is deterministic and cheap);
3. re-test every kept change point against its neighbours over the whole series and drop
   the weakest one while any fails, so duplicates from overlapping windows disappear.

Pure functions over a float sequence (AACO feeds log-medians, so magnitudes are ratios).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def _sps() -> Any:
    """scipy.stats, imported when first needed: it takes ~0.5-1 s to import, and most
    commands never reach a statistical test."""
    from scipy import stats

    return stats


DEFAULT_WINDOW = 50
DEFAULT_MAX_P = 0.001
MIN_SEGMENT = 3


@dataclass(frozen=True)
class ChangePoint:
    """A level shift starting at ``index`` (the first point of the new level)."""

    index: int
    p_value: float
    mean_before: float
    mean_after: float

    @property
    def shift(self) -> float:
        return self.mean_after - self.mean_before

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "p_value": self.p_value,
            "mean_before": self.mean_before,
            "mean_after": self.mean_after,
        }


def energy_split(x: np.ndarray[Any, Any], min_size: int = MIN_SEGMENT) -> tuple[int, float] | None:
    """The e-divisive split of ``x``: (index of the first point after it, statistic Q).

    Q(t) = t (n - t) / n x (2 E|a - b| - E|a - a'| - E|b - b'|) with a in x[:t], b in x[t:]
    (alpha = 1). None when ``x`` is too short to hold two segments of ``min_size``.
    """
    n = int(x.size)
    if n < 2 * min_size:
        return None
    d = np.abs(x[:, None] - x[None, :])
    # prefix sums over the distance matrix make every candidate O(1)
    c = np.zeros((n + 1, n + 1))
    c[1:, 1:] = d.cumsum(0).cumsum(1)

    def block(r0: int, r1: int, c0: int, c1: int) -> float:
        return float(c[r1, c1] - c[r0, c1] - c[r1, c0] + c[r0, c0])

    best: tuple[int, float] | None = None
    for t in range(min_size, n - min_size + 1):
        m = n - t
        between = block(0, t, t, n) / (t * m)
        within_a = block(0, t, 0, t) / (t * (t - 1)) if t > 1 else 0.0
        within_b = block(t, n, t, n) / (m * (m - 1)) if m > 1 else 0.0
        q = t * m / n * (2 * between - within_a - within_b)
        if best is None or q > best[1]:
            best = (t, q)
    return best


def segment_p_value(left: np.ndarray[Any, Any], right: np.ndarray[Any, Any]) -> float:
    """Two-sided Student's t-test p between two segments; exact answers for constant ones."""
    if left.size < 2 or right.size < 2:
        return 1.0
    if float(left.std()) == 0.0 and float(right.std()) == 0.0:
        return 1.0 if float(left.mean()) == float(right.mean()) else 0.0
    p = float(_sps().ttest_ind(left, right, equal_var=True).pvalue)
    return 1.0 if math.isnan(p) else p


def _split(
    x: np.ndarray[Any, Any], offset: int, max_p: float, min_size: int, out: set[int]
) -> None:
    found = energy_split(x, min_size)
    if found is None:
        return
    t, _ = found
    if segment_p_value(x[:t], x[t:]) >= max_p:
        return
    out.add(offset + t)
    _split(x[:t], offset, max_p, min_size, out)
    _split(x[t:], offset + t, max_p, min_size, out)


def change_points(
    values: Sequence[float] | np.ndarray[Any, Any],
    window: int = DEFAULT_WINDOW,
    max_p: float = DEFAULT_MAX_P,
    min_size: int = MIN_SEGMENT,
) -> list[ChangePoint]:
    """Change points of ``values`` in order, each with its final p-value and level means."""
    x = np.asarray(values, dtype=np.float64)
    n = int(x.size)
    if n < 2 * min_size:
        return []
    if window < 2 * min_size:
        raise ValueError(f"window must hold two segments of {min_size} points")
    candidates: set[int] = set()
    step = max(1, window // 2)
    start = 0
    while True:
        _split(x[start : start + window], start, max_p, min_size, candidates)
        if start + window >= n:
            break
        start += step
    cps = sorted(candidates)
    while cps:
        bounds = [0, *cps, n]
        ps = [
            segment_p_value(x[bounds[i] : bounds[i + 1]], x[bounds[i + 1] : bounds[i + 2]])
            for i in range(len(cps))
        ]
        worst = int(np.argmax(ps))
        if ps[worst] < max_p:
            return [
                ChangePoint(
                    index=cp,
                    p_value=ps[i],
                    mean_before=float(x[bounds[i] : cp].mean()),
                    mean_after=float(x[cp : bounds[i + 2]].mean()),
                )
                for i, cp in enumerate(cps)
            ]
        del cps[worst]
    return []
