"""The innermost-interval index of the op -> kernel attribution (``_Intervals``) against its
earlier form (int64 end times in the sparse table; now int32 ranks of the ends): the same
answers on random nested, overlapping and touching intervals, equal ends, and queries on,
before and after every boundary."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aaco.analysis.attribution import _Intervals

_NONE = -1


class _OldIntervals:
    """The index as it was before the int32 ranks (kept verbatim as the reference)."""

    def __init__(self, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        order = np.lexsort((-end, start, group))
        self.order = order
        self.group = group[order]
        self.start = start[order]
        self.end = end[order]
        # Ranks of start times: (group, rank) packs into one sortable int64 key.
        self.times = np.unique(self.start)
        self.span = len(self.times) + 1
        self.keys = self.group * self.span + np.searchsorted(self.times, self.start)
        levels = [self.end]
        step = 1
        while step < len(self.end):
            prev = levels[-1]
            nxt = prev.copy()
            np.maximum(prev[step:], prev[:-step], out=nxt[step:])
            levels.append(nxt)
            step *= 2
        self.levels = levels

    def innermost(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Row (in the caller's order) of the innermost interval of ``group`` holding ``t``."""
        n = len(t)
        out = np.full(n, _NONE, dtype=np.int64)
        if n == 0 or len(self.end) == 0:
            return out
        rank = np.searchsorted(self.times, t, side="right") - 1
        pos = np.searchsorted(self.keys, group * self.span + rank, side="right") - 1
        for p in range(len(self.levels) - 1, -1, -1):
            live = pos >= 0
            block_max = np.where(live, self.levels[p][np.maximum(pos, 0)], t)
            skip = live & (block_max < t)
            pos = np.where(skip, pos - (1 << p), pos)
        found = pos >= 0
        safe = np.maximum(pos, 0)
        found &= self.group[safe] == group
        found &= self.start[safe] <= t
        found &= self.end[safe] >= t
        out[found] = self.order[pos[found]]
        return out


@st.composite
def _case(draw: Any) -> tuple[np.ndarray, ...]:
    n = draw(st.integers(0, 60))
    groups = draw(st.integers(1, 4))
    g = np.array(draw(st.lists(st.integers(0, groups - 1), min_size=n, max_size=n)), np.int64)
    start = np.array(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)), np.int64)
    dur = np.array(draw(st.lists(st.integers(0, 80), min_size=n, max_size=n)), np.int64)
    q = draw(st.integers(0, 60))
    qg = np.array(draw(st.lists(st.integers(0, groups), min_size=q, max_size=q)), np.int64)
    qt = np.array(draw(st.lists(st.integers(-5, 300), min_size=q, max_size=q)), np.int64)
    return g, start, start + dur, qg, qt


@settings(max_examples=400, deadline=None)
@given(_case())
def test_same_innermost_interval_as_before(case: tuple[np.ndarray, ...]) -> None:
    g, start, end, qg, qt = case
    new = _Intervals(g, start, end).innermost(qg, qt)
    old = _OldIntervals(g, start, end).innermost(qg, qt)
    assert new.tolist() == old.tolist()


def test_every_boundary_of_a_large_random_set() -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    g = rng.integers(0, 8, n)
    start = rng.integers(0, 10**15, n) + 1_700_000_000_000_000_000
    end = start + rng.integers(0, 10**9, n)
    qt = np.concatenate([start, end, start - 1, end + 1, rng.integers(start.min(), end.max(), n)])
    qg = np.concatenate([g, g, g, g, rng.integers(0, 9, n)])
    new = _Intervals(g, start, end)
    assert new.levels[-1].dtype == np.int32  # ranks, not times
    assert new.innermost(qg, qt).tolist() == _OldIntervals(g, start, end).innermost(qg, qt).tolist()
