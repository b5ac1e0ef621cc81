"""summarize_sched and contention_evidence over hand-built tables whose differences are known."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from aaco.analysis.sched import (
    TOP_THREADS,
    WAIT_SHARE_CONTENDED,
    contention_evidence,
    summarize_sched,
)
from aaco.session.schema import SCHED_SYSTEM, SCHED_THREADS

S = 1_000_000_000  # ns per second
PID = 100

SPEC_KEYS = {
    "scope",
    "window_s",
    "threads",
    "run_s",
    "wait_s",
    "wait_share",
    "main_wait_share_of_wall",
    "max_thread_wait_share_of_wall",
    "timeslices_per_s",
    "involuntary_switches_per_s",
    "psi",
    "affinity",
    "affinity_busy_pct_mean",
    "other_cpu_pct_mean",
    "steal_pct_mean",
    "procs_running_max",
    "top_threads",
}


def _row(
    t: float,
    tid: int,
    run_s: float | None,
    wait_s: float | None,
    slices: int | None = 0,
    invol: int | None = 0,
    comm: str = "worker",
) -> dict[str, Any]:
    return {
        "ts_ns": round(t * S),
        "pid": PID,
        "tid": tid,
        "comm": comm,
        "run_ns": None if run_s is None else round(run_s * S),
        "wait_ns": None if wait_s is None else round(wait_s * S),
        "timeslices": slices,
        "ctx_voluntary": 0,
        "ctx_involuntary": invol,
        "last_cpu": 0,
    }


def _threads(rows: list[dict[str, Any]]) -> pa.Table:
    return SCHED_THREADS.from_rows(rows)


def _main_only() -> pa.Table:
    """The main thread, one sample a second for 5 s: from 1 s to 2 s it runs 0.6 s and
    waits 0.4 s; otherwise it runs all the time."""
    cum = [(0.0, 0.0), (1.0, 0.0), (1.6, 0.4), (2.6, 0.4), (3.6, 0.4)]
    return _threads(
        [_row(t, PID, r, w, slices=10 * t, invol=5 * t) for t, (r, w) in enumerate(cum)]
    )


def _system(rows: list[dict[str, Any]]) -> pa.Table:
    full = []
    for r in rows:
        base: dict[str, Any] = dict.fromkeys(SCHED_SYSTEM.column_names)
        base.update(r)
        full.append(base)
    return SCHED_SYSTEM.from_rows(full)


def test_known_wait_share_in_a_bracketed_window() -> None:
    s = summarize_sched(_main_only(), None, (1 * S, 2 * S), PID)
    assert s is not None
    assert s["scope"] == "window" and s["bounds"] == "bracketing"
    assert s["window_s"] == pytest.approx(1.0)
    assert s["run_s"] == pytest.approx(0.6) and s["wait_s"] == pytest.approx(0.4)
    assert s["wait_share"] == pytest.approx(0.4)
    assert s["main_wait_share_of_wall"] == pytest.approx(0.4)
    assert s["max_thread_wait_share_of_wall"] == pytest.approx(0.4)
    assert s["timeslices_per_s"] == pytest.approx(10.0)
    assert s["involuntary_switches_per_s"] == pytest.approx(5.0)
    assert s["threads"] == 1 and s["samples"] == 2
    # no system table: its figures are unknown, not zero
    assert s["psi"] is None and s["affinity"] is None and s["other_cpu_pct_mean"] is None
    assert s.keys() >= SPEC_KEYS


def test_bounds_bracket_then_fall_inside() -> None:
    t = _main_only()
    # between samples: the last one before and the first one after
    s = summarize_sched(t, None, (int(1.5 * S), int(2.5 * S)), PID)
    assert s is not None and s["bounds"] == "bracketing"
    assert s["window_s"] == pytest.approx(2.0) and s["wait_s"] == pytest.approx(0.4)
    # a window wider than the samples: the first and last inside
    s = summarize_sched(t, None, (-5 * S, 50 * S), PID)
    assert s is not None and (s["scope"], s["bounds"]) == ("window", "inside")
    assert s["window_s"] == pytest.approx(4.0) and s["run_s"] == pytest.approx(3.6)
    # one end of each
    s = summarize_sched(t, None, (int(0.5 * S), 50 * S), PID)
    assert s is not None and s["bounds"] == "mixed" and s["window_s"] == pytest.approx(4.0)


def test_no_window_or_a_window_without_samples_is_the_run() -> None:
    t = _main_only()
    for window in (None, (90 * S, 99 * S)):
        s = summarize_sched(t, None, window, PID)
        assert s is not None and (s["scope"], s["bounds"]) == ("run", "run")
        assert s["window_s"] == pytest.approx(4.0)
        assert s["wait_share"] == pytest.approx(0.4 / 4.0)


def test_nothing_to_difference_is_none() -> None:
    assert summarize_sched(SCHED_THREADS.empty(), None, None, PID) is None
    assert summarize_sched(_threads([_row(0, PID, 1.0, 0.1)]), None, None, PID) is None
    assert contention_evidence(None) is None


def test_threads_born_exited_and_reused_inside_the_window() -> None:
    rows = [_row(t, PID, float(t), 0.0) for t in range(5)]
    rows += [_row(3, 101, 0.5, 0.25, comm="born")]  # born after the window's start
    rows += [_row(t, 102, 0.1 * t, 0.1 * t, comm="exits") for t in range(3)]  # exits at ~2 s
    rows += [_row(0, 103, 9.0, 9.0, comm="gone")]  # exited before the window
    # tid 104 ends and a new thread gets its tid at 3 s: its counters restart from 0
    rows += [_row(t, 104, 1.0 + t, 0.0, comm="old") for t in range(3)]
    rows += [_row(t, 104, 0.2 * (t - 2), 0.0, comm="new") for t in range(3, 5)]
    s = summarize_sched(_threads(rows), None, (1 * S, 4 * S), PID)
    assert s is not None
    assert s["threads"] == 4  # 103 ended before the window
    # main 3.0 + born 0.5 + exits 0.1 + (old 1.0, then new 0.2 + 0.2)
    assert s["run_s"] == pytest.approx(3.0 + 0.5 + 0.1 + 1.0 + 0.4)
    assert s["wait_s"] == pytest.approx(0.25 + 0.1)
    names = {t["tid"]: t["comm"] for t in s["top_threads"]}
    assert names[104] == "new"  # the latest name
    assert s["main_wait_share_of_wall"] == pytest.approx(0.0)
    assert s["max_thread_wait_share_of_wall"] == pytest.approx(0.25 / 3.0)


def test_top_threads_most_waiting_first_and_at_most_five() -> None:
    rows = []
    for i, wait in enumerate([0.1, 0.7, 0.3, 0.0, 0.5, 0.2, 0.3]):
        tid = PID + i
        rows += [_row(0, tid, 0.0, 0.0, invol=0), _row(1, tid, 1.0 - wait, wait, invol=i)]
    s = summarize_sched(_threads(rows), None, None, PID)
    assert s is not None
    top = s["top_threads"]
    assert len(top) == TOP_THREADS
    assert [t["tid"] for t in top] == [101, 104, 102, 106, 105]  # ties: lower tid first
    assert top[0] == {
        "tid": 101,
        "comm": "worker",
        "run_s": pytest.approx(0.3),
        "wait_s": pytest.approx(0.7),
        "wait_share": pytest.approx(0.7),
        "involuntary": 1,
    }
    assert s["max_thread_wait_share_of_wall"] == pytest.approx(0.7)


def test_no_schedstat_values_are_unknown() -> None:
    rows = [_row(t, PID, None, None, slices=None, invol=3 * t) for t in range(3)]
    s = summarize_sched(_threads(rows), None, None, PID)
    assert s is not None
    assert s["run_s"] is None and s["wait_s"] is None and s["wait_share"] is None
    assert s["main_wait_share_of_wall"] is None and s["max_thread_wait_share_of_wall"] is None
    assert s["timeslices_per_s"] is None and s["top_threads"] == []
    assert s["involuntary_switches_per_s"] == pytest.approx(3.0)
    assert contention_evidence(s) is None


def test_system_table_psi_affinity_and_time_weighted_means() -> None:
    sys_rows = [
        {
            "ts_ns": t * S,
            "psi_cpu_some_us": 400_000 * t,  # 0.4 s of stall per second: 40 %
            "psi_cpu_full_us": None,
            "psi_memory_some_us": 7,
            "psi_memory_full_us": 7,
            "psi_io_some_us": 50_000 * t,
            "psi_io_full_us": 0,
            "procs_running": [1, 3, 9, 2, 2][t],
            "procs_blocked": 0,
            "affinity": [0] if t < 4 else [0, 1],
            "affinity_busy_pct": [None, 100.0, 50.0, 50.0, 90.0][t],
            "other_cpu_pct": [None, 10.0, 40.0, 40.0, 100.0][t],
            "steal_pct": [None, 0.0, 12.0, 12.0, 0.0][t],
        }
        for t in range(5)
    ]
    # samples 1 s apart, but drop the one at 2 s: the 40 % row then covers 2 s
    del sys_rows[2]
    s = summarize_sched(_main_only(), _system(sys_rows), (1 * S, 3 * S), PID)
    assert s is not None and s["bounds"] == "bracketing"
    assert s["psi"] == {
        "cpu_some_pct": pytest.approx(40.0),
        "cpu_full_pct": None,
        "memory_some_pct": pytest.approx(0.0),
        "memory_full_pct": pytest.approx(0.0),
        "io_some_pct": pytest.approx(5.0),
        "io_full_pct": pytest.approx(0.0),
    }
    assert s["affinity"] == [0]
    assert s["other_cpu_pct_mean"] == pytest.approx(40.0)  # only the row at 3 s is inside
    assert s["affinity_busy_pct_mean"] == pytest.approx(50.0)
    assert s["steal_pct_mean"] == pytest.approx(12.0)
    assert s["procs_running_max"] == 3  # rows at 1 s and 3 s
    # over the run, rows weigh by the interval they cover: (10x1 + 40x2 + 100x1) / 4
    s = summarize_sched(_main_only(), _system(sys_rows), None, PID)
    assert s is not None
    assert s["other_cpu_pct_mean"] == pytest.approx(47.5)
    assert s["affinity"] == [0, 1] and s["procs_running_max"] == 3


def test_psi_absent_is_none() -> None:
    rows = [{"ts_ns": t * S, "procs_running": 1} for t in range(5)]
    s = summarize_sched(_main_only(), _system(rows), None, PID)
    assert s is not None and s["psi"] is None and s["procs_running_max"] == 1


def _summary(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scope": "window",
        "coverage": 1.0,
        "wait_share": 0.38,
        "main_wait_share_of_wall": 0.35,
        "other_cpu_pct_mean": 90.0,
        "affinity": [3],
        "psi": {"cpu_some_pct": 41.2},
    }
    base.update(kw)
    return base


def test_evidence_sentence_and_threshold() -> None:
    assert contention_evidence(_summary()) == (
        "the worker waited 38 % of its runnable time for a CPU (main thread: 35 % of wall "
        "time); other tasks used 0.9 cores of its 1 allowed CPU; PSI cpu some 41 %"
    )
    assert contention_evidence(_summary(wait_share=WAIT_SHARE_CONTENDED)) is not None
    assert contention_evidence(_summary(wait_share=0.099)) is None
    assert contention_evidence(_summary(wait_share=None)) is None
    bare = _summary(main_wait_share_of_wall=None, other_cpu_pct_mean=None, psi=None)
    assert contention_evidence(bare) == "the worker waited 38 % of its runnable time for a CPU"
    two = contention_evidence(_summary(affinity=[0, 1], psi={"cpu_some_pct": None}))
    assert two is not None and two.endswith("other tasks used 0.9 cores of its 2 allowed CPUs")
    # figures of the run around a too-short measured phase are no evidence about it
    assert contention_evidence(_summary(coverage=0.2)) is None
    assert contention_evidence(_summary(scope="run")) is None


def test_coverage_is_the_measured_phases_share_of_the_differenced_interval() -> None:
    # samples every second; a window of 0.25 s inside [1 s, 2 s]: bracketing samples 1 s
    # apart, the window fills a quarter of that interval
    s = summarize_sched(_main_only(), None, (int(1.25 * S), int(1.5 * S)), PID)
    assert s is not None and s["bounds"] == "bracketing"
    assert s["measured_s"] == pytest.approx(0.25)
    assert s["coverage"] == pytest.approx(0.25)
    s = summarize_sched(_main_only(), None, (1 * S, 2 * S), PID)
    assert s is not None and s["coverage"] == pytest.approx(1.0)


def test_evidence_from_a_computed_summary() -> None:
    s = summarize_sched(_main_only(), None, (1 * S, 2 * S), PID)
    assert contention_evidence(s) == (
        "the worker waited 40 % of its runnable time for a CPU (main thread: 40 % of wall time)"
    )


@pytest.mark.parametrize(
    "odd",
    [
        {"wait_share": "high"},
        {"wait_share": float("nan")},
        {"other_cpu_pct_mean": "x"},
        {"affinity": 3},
        {"psi": [1]},
        {"psi": {"cpu_some_pct": "x"}},
        {"coverage": "full"},
    ],
)
def test_a_hand_edited_summary_gives_a_sentence_or_none_never_an_error(
    odd: dict[str, Any],
) -> None:
    out = contention_evidence(_summary(**odd))
    assert out is None or out.startswith("the worker waited 38 %")


def test_steal_is_named_in_the_evidence() -> None:
    out = contention_evidence(_summary(steal_pct_mean=12.0))
    assert out is not None and out.endswith(
        "the hypervisor took 12 % of its CPUs' time (steal); PSI cpu some 41 %"
    )
    assert "steal" not in (contention_evidence(_summary(steal_pct_mean=0.2)) or "")
