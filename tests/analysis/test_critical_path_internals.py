"""The vectorised machinery of aaco.analysis.critical_path against plain references.

The module computes the critical path with numpy and scipy instead of Python loops; these
tests hold each piece to the loop it replaced (kept here, or in the module as its fallback):

* ``_LongestPaths``: longest paths on DAGs worked out by hand (parallel edges, zero-weight
  edges, nodes S does not reach, weights above the observed time), and on random DAGs, by
  both of its engines (the programme on the contracted graph, scipy's Dijkstra), against
  ``_forward_loop`` / ``_backward_loop`` / ``_walk``;
* ``_stab_max`` against a brute force, ``_host_chains`` against the stack sweep;
* ``_Segments`` (the path's lazy segments) against the tuple it stands for;
* ``_lexsort`` against ``np.lexsort``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aaco.analysis.critical_path import (
    _E_CHAIN,
    _EK,
    _H_OP,
    _H_RUNTIME,
    _H_SYNC,
    _H_USER,
    _NULL,
    _R_HOST,
    PathSegment,
    _backward_loop,
    _binding_pred,
    _Builder,
    _forward_loop,
    _Gpu,
    _Graph,
    _Host,
    _host_chains,
    _lexsort,
    _LongestPaths,
    _Segments,
    _stab_max,
    _Strs,
    _walk,
)

_PROPERTY = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: both engines: the programme on the contracted graph, and Dijkstra for any size
ENGINES = (10**9, 0)


def _graph(
    t: list[int], edges: list[tuple[int, int, int]], rank: list[int] | None = None
) -> _Graph:
    """A DAG whose node 0 is S and last node T; edges (u, v, weight)."""
    n = len(t)
    ranks = np.asarray(rank if rank is not None else [0] * n, dtype=np.int8)
    times = np.asarray(t, dtype=np.int64)
    u = np.asarray([e[0] for e in edges], dtype=np.int32)
    v = np.asarray([e[1] for e in edges], dtype=np.int32)
    m = len(edges)
    g = _Graph(
        t=times, rank=ranks, u=u, v=v, etype=np.zeros(m, dtype=np.int8),
        ekind=np.zeros(m, dtype=np.int8), w=np.asarray([e[2] for e in edges], dtype=np.int64),
        ref_host=np.full(m, -1, dtype=np.int32), ref_gpu=np.full(m, -1, dtype=np.int32),
        unexplained=np.zeros(m, dtype=bool), thread=np.full(m, _NULL, dtype=np.int64), s=0,
        end_node=n - 1, stats={},
    )  # fmt: skip
    g.stats["_order"] = np.lexsort((np.arange(n), ranks, times))
    return g


def _same_as_loops(g: _Graph, w: np.ndarray, f: int = 1) -> None:
    """Both engines give what the plain programme over all edges gives."""
    est = _forward_loop(g, w)
    for loop_max in ENGINES:
        lp = _LongestPaths(g, loop_max_runs=loop_max)
        assert lp.length(w, f) == int(est[g.end_node] - est[g.s])
        if f == 1:
            assert np.array_equal(lp.forward(w), est)
            end = int(est[g.end_node])
            assert np.array_equal(lp.backward(w, end), _backward_loop(g, w, end))
            pred = _binding_pred(g, est, lp.one_in)
            assert np.array_equal(lp.path(pred), _walk(g, pred))


# -- longest paths -----------------------------------------------------------------------------


def test_longest_path_by_hand() -> None:
    # S=0 (t 0) -> a=1 (t 10) -> b=2 (t 30) -> T=4 (t 50); S -> c=3 (t 20) -> b; c -> T
    #   S-a 10, a-b 20: b at 30; S-c 5, c-b 4: 9; c-T 0, b-T 0: T at 30
    g = _graph([0, 10, 30, 20, 50], [(0, 1, 10), (1, 2, 20), (0, 3, 5), (3, 2, 4), (3, 4, 0),
                                     (2, 4, 0)])  # fmt: skip
    for loop_max in ENGINES:
        lp = _LongestPaths(g, loop_max_runs=loop_max)
        assert lp.length(g.w) == 30
        assert lp.forward(g.w).tolist() == [0, 10, 30, 5, 30]
        # latest times that keep T at 30: c may slip to 26 (c-b 4), a has no slack
        assert lp.backward(g.w, 30).tolist() == [0, 10, 30, 26, 30]
    _same_as_loops(g, g.w)


def test_parallel_edges_keep_the_heaviest() -> None:
    # three edges S -> a with weights 2, 9 and 5, and two series runs S -> x -> T, S -> y -> T
    # (x and y have one edge in and one out: contracted into parallel S -> T edges)
    g = _graph([0, 10, 4, 6, 20], [(0, 1, 2), (0, 1, 9), (0, 1, 5), (1, 4, 3), (0, 2, 4),
                                   (2, 4, 1), (0, 3, 6), (3, 4, 8)])  # fmt: skip
    for loop_max in ENGINES:
        lp = _LongestPaths(g, loop_max_runs=loop_max)
        assert lp.length(g.w) == 14  # S -6-> y -8-> T beats S -9-> a -3-> T (12)
    _same_as_loops(g, g.w)


def test_zero_weight_edges_are_edges() -> None:
    # the only way to T is through zero-weight edges (reduced cost 0 on most of them): scipy
    # must keep explicit zeros as edges
    g = _graph([0, 0, 5, 5, 9], [(0, 1, 0), (1, 2, 5), (2, 3, 0), (3, 4, 0)], [0, 1, 0, 1, 0])
    for loop_max in ENGINES:
        assert _LongestPaths(g, loop_max_runs=loop_max).length(g.w) == 5
    _same_as_loops(g, g.w)


def test_weights_above_the_observed_time() -> None:
    # a what-if that makes an edge take 3x its time (f = 3): potentials 3 * t stay feasible
    g = _graph([0, 10, 20, 30], [(0, 1, 10), (1, 3, 20), (0, 2, 20), (2, 3, 10)])
    w = np.array([30, 20, 20, 10], dtype=np.int64)
    for loop_max in ENGINES:
        assert _LongestPaths(g, loop_max_runs=loop_max).length(w, 3) == 50
    _same_as_loops(g, w, f=3)


def test_a_node_that_s_does_not_reach_keeps_the_loop_values() -> None:
    # node 2 has no edge in: the plain programme gives it (and what it feeds) its own values
    g = _graph([0, 10, 12, 20, 30], [(0, 1, 10), (2, 3, 8), (1, 3, 2), (3, 4, 0)])
    _same_as_loops(g, g.w)


@st.composite
def _random_dag(draw: st.DrawFn) -> tuple[_Graph, np.ndarray, int]:
    """S, T and up to 30 nodes at random times; edges forward in (time, rank, id) order with
    weights up to f times their observed time; some nodes without an edge in or out."""
    n = draw(st.integers(1, 30))
    times = sorted(draw(st.lists(st.integers(1, 100), min_size=n, max_size=n)))
    t = [0, *times, 101]
    rank = [0] + [draw(st.integers(0, 2)) for _ in times] + [0]
    order = np.lexsort((np.arange(n + 2), np.array(rank), np.array(t))).tolist()
    pos = {node: i for i, node in enumerate(order)}
    f = draw(st.sampled_from([1, 1, 2, 5]))
    edges = []
    for _ in range(draw(st.integers(0, 3 * n + 4))):
        a, b = draw(st.integers(0, n + 1)), draw(st.integers(0, n + 1))
        if pos[a] < pos[b]:
            edges.append((a, b, draw(st.integers(0, f * (t[b] - t[a])))))
    if draw(st.booleans()):  # a chain through every node: all reach T
        edges += [(order[i], order[i + 1], t[order[i + 1]] - t[order[i]]) for i in range(n + 1)]
    if not edges:
        edges = [(0, n + 1, 0)]
    g = _graph(t, edges, rank)
    return g, g.w, f


@_PROPERTY
@given(_random_dag())
def test_random_dags_match_the_plain_programme(case: tuple[_Graph, np.ndarray, int]) -> None:
    g, w, f = case
    _same_as_loops(g, w, f)


# -- the innermost open event ------------------------------------------------------------------


def _brute_stab_max(lo: list[int], hi: list[int], val: list[int], n: int) -> list[int]:
    return [max((x for a, b, x in zip(lo, hi, val, strict=True) if a <= p < b), default=-1)
            for p in range(n)]  # fmt: skip


@_PROPERTY
@given(st.integers(1, 40).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n), st.integers(0, n)),
                                             max_size=30))))  # fmt: skip
def test_stab_max(case: tuple[int, list[tuple[int, int]]]) -> None:
    n, spans = case
    lo, hi = [a for a, _ in spans], [b for _, b in spans]
    val = list(range(len(spans)))
    got = _stab_max(np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64),
                    np.array(val, dtype=np.int64), n)  # fmt: skip
    assert got.tolist() == _brute_stab_max(lo, hi, val, n)


def _host(events: list[tuple[int, int, int, int]]) -> _Host:
    """Host events (thread, start, end, class)."""
    n = len(events)
    col = [np.array([e[i] for e in events], dtype=np.int64) for i in range(3)]
    return _Host(
        pid=np.full(n, 1, dtype=np.int64), tid=col[0], start=col[1], end=col[2],
        cls=np.array([e[3] for e in events], dtype=np.int8),
        name=_Strs(np.arange(n, dtype=np.int32), [f"e{i}" for i in range(n)]),
        corr=np.full(n, _NULL, dtype=np.int64), ext=np.full(n, _NULL, dtype=np.int64),
        api_kind=_Strs(np.full(n, -1, dtype=np.int32), []),
    )  # fmt: skip


def _sweep(host: _Host, idx: np.ndarray) -> tuple[list[int], list[int], int]:
    """The stack sweep the module used: per thread in order, each segment's innermost open
    event (its label) and its chain kind, and the improperly nested pushes."""
    labels: list[int] = []
    kinds: list[int] = []
    repaired = 0
    kind_of = {_H_OP: _EK["cpu_op"], _H_RUNTIME: _EK["runtime"], _H_SYNC: _EK["sync_wait"],
               _H_USER: _EK["user_range"]}  # fmt: skip
    tids = host.tid[idx]
    order = np.lexsort((host.start[idx], tids))
    idx, tids = idx[order], tids[order]
    for part in np.split(idx, np.flatnonzero(np.diff(tids)) + 1):
        s = host.start[part]
        e = np.maximum(host.end[part], s)
        times = np.unique(np.concatenate([s, e])).tolist()
        ev = np.lexsort((-e, s))
        s_l, e_l, ev_l = s[ev].tolist(), e[ev].tolist(), part[ev].tolist()
        stack: list[int] = []
        j = 0
        for t in times[:-1]:
            while stack and e_l[stack[-1]] <= t:
                stack.pop()
            while j < len(s_l) and s_l[j] <= t:
                if e_l[j] > t:
                    if stack and e_l[stack[-1]] < e_l[j]:
                        repaired += 1
                    stack.append(j)
                j += 1
            label = ev_l[stack[-1]] if stack else -1
            labels.append(label)
            kinds.append(kind_of[int(host.cls[label])] if label >= 0 else _EK["idle_gap"])
    return labels, kinds, repaired


#: (thread, start, end, class): ends before starts and zero-length events included
_EVENTS = st.lists(
    st.tuples(st.sampled_from([1, 2, 7]), st.integers(0, 30), st.integers(-5, 30),
              st.sampled_from([_H_OP, _H_RUNTIME, _H_SYNC, _H_USER])),
    min_size=1, max_size=25,
).map(lambda evs: [(tid, s, s + d, c) for tid, s, d, c in evs])  # fmt: skip


@_PROPERTY
@given(_EVENTS)
def test_host_chains_label_the_innermost_open_event(
    events: list[tuple[int, int, int, int]],
) -> None:
    # ties in start and end, zero-length events, ends before starts, improper nesting
    host = _host(events)
    idx = np.arange(len(events))
    b = _Builder()
    stats: dict[str, Any] = {}
    firsts, lasts, start_node, end_node, _ = _host_chains(b, host, idx, stats)
    labels, kinds, repaired = _sweep(host, idx)
    chain = [i for i, x in enumerate(b.e["etype"]) if int(x[0]) == _E_CHAIN]
    got_labels = [int(x) for i in chain for x in b.e["ref_host"][i]]
    got_kinds = [int(x) for i in chain for x in b.e["ekind"][i]]
    assert got_labels == labels
    assert got_kinds == kinds
    assert stats["repaired_nesting"] == repaired
    # every event's instants are nodes of its thread's chain, at its times
    arr = b.arrays()
    assert (arr["rank"] == _R_HOST).all()
    assert np.array_equal(arr["t"][start_node], host.start)
    assert np.array_equal(arr["t"][end_node], np.maximum(host.end, host.start))
    assert len(firsts) == len(lasts) == len(set(host.tid.tolist()))


# -- the path's segments -----------------------------------------------------------------------


def _segments(durations: list[int]) -> tuple[_Segments, tuple[PathSegment, ...]]:
    n = len(durations)
    start = np.cumsum([0, *durations], dtype=np.int64)[:-1]
    end = start + np.asarray(durations, dtype=np.int64)
    gpu = _Gpu(
        pid=np.zeros(1, dtype=np.int64), device=np.array([0]), stream=np.array([_NULL]),
        start=np.zeros(1, dtype=np.int64), end=np.zeros(1, dtype=np.int64),
        is_copy=np.zeros(1, dtype=bool), name=_Strs(np.zeros(1, dtype=np.int32), ["k"]),
        corr=np.zeros(1, dtype=np.int64), ext=np.zeros(1, dtype=np.int64),
        kernel_row=np.zeros(1, dtype=np.int64), family=_Strs(np.zeros(1, dtype=np.int32), []),
        full=_Strs(np.zeros(1, dtype=np.int32), []),
    )  # fmt: skip
    kinds = [_EK["gpu_compute"], _EK["idle_gap"], _EK["runtime"], _EK["idle_gap"]]
    segs = _Segments(
        start=start, end=end, kind=np.array([kinds[i % 4] for i in range(n)], dtype=np.int8),
        name=np.array([i % 3 - 1 for i in range(n)], dtype=np.int32),
        op=np.array([(i + 1) % 3 - 1 for i in range(n)], dtype=np.int32),
        where=np.array([i % 4 for i in range(n)], dtype=np.int8),
        where_id=np.zeros(n, dtype=np.int64), unexplained=np.arange(n) % 2 == 0,
        strings=["a", "b"], gpu=gpu,
    )  # fmt: skip
    if n > 1:
        segs.meanwhile[1] = "thread 2 busy 50%: x"
    places = ["thread 0", "host", "device 0 stream ?", "region"]
    kind_names = ["gpu_compute", "idle_gap", "runtime", "idle_gap"]
    category = {"gpu_compute": "gpu_compute", "idle_gap": "idle_gap", "runtime": "runtime"}
    names: list[str | None] = [None, "a", "b"]
    want = tuple(
        PathSegment(kind_names[i % 4], category[kind_names[i % 4]], int(start[i]), int(end[i]),
                    names[i % 3], names[(i + 1) % 3], places[i % 4], i % 2 == 0,
                    "thread 2 busy 50%: x" if i == 1 else None)
        for i in range(n)
    )  # fmt: skip
    return segs, want


@_PROPERTY
@given(st.lists(st.integers(1, 5), max_size=12), st.integers(-15, 15))
def test_segments_read_as_the_tuple(durations: list[int], k: int) -> None:
    segs, want = _segments(durations)
    assert len(segs) == len(want)
    assert tuple(segs) == want
    assert segs == want and want == segs
    assert segs[1:4] == want[1:4] and segs[::-2] == want[::-2]
    if want:
        assert segs[-1] == want[-1] and segs[0] == want[0]
    with pytest.raises(IndexError):
        segs[len(want)]
    # the longest k as CriticalPath.to_dict picks them: a stable sort by length, then by start
    picked = sorted(want, key=lambda s: -s.dur_ns)[:k]
    picked.sort(key=lambda s: s.start_ns)
    assert [segs[i] for i in segs.longest(k)] == picked


# -- sorting -------------------------------------------------------------------------------------


@_PROPERTY
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 10**6),
                          st.sampled_from([0, 1, _NULL])), max_size=40))  # fmt: skip
def test_lexsort_is_np_lexsort(rows: list[tuple[int, int, int]]) -> None:
    keys = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
    if not rows:
        return
    # packed into one key when the ranges fit, np.lexsort itself when they do not (_NULL)
    assert np.array_equal(_lexsort(keys[:2]), np.lexsort(keys[:2]))
    assert np.array_equal(_lexsort(keys), np.lexsort(keys))
