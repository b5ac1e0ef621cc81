from __future__ import annotations

import pytest

from aaco.analysis.telemetry import summarize_system
from aaco.session.schema import SYSTEM_EVENTS


def _events() -> object:
    rows = []
    for i in range(11):  # 0..10 s, one sample a second
        rows.append(
            {
                "ts_ns": i * 1_000_000_000,
                "proc_cpu_pct": None if i == 0 else 50.0 + i,
                "proc_rss_bytes": 1000 + i * 10,
                "proc_threads": 4,
                "proc_ctx_voluntary": 100 * i,
                "proc_ctx_involuntary": 10 * i,
                "proc_minor_faults": 5 * i,
                "proc_major_faults": 0,
                "sys_cpu_pct": None if i == 0 else 25.0,
                "sys_cpu_pct_per_core": None,
                "load_1m": 1.0 + i / 10,
                "cpu_freq_mhz": None,
            }
        )
    return SYSTEM_EVENTS.from_rows(rows)


def test_rates_and_means_known_by_construction() -> None:
    s = summarize_system(_events())
    assert s["samples"] == 11
    assert s["ctx_switches_voluntary_per_s"] == pytest.approx(100.0)
    assert s["ctx_switches_involuntary_per_s"] == pytest.approx(10.0)
    assert s["ctx_switches_per_s"] == pytest.approx(110.0)
    assert s["minor_faults_per_s"] == pytest.approx(5.0)
    assert s["major_faults_per_s"] == pytest.approx(0.0)
    assert s["proc_cpu_pct_mean"] == pytest.approx(55.5)  # mean of 51..60, first sample null
    assert s["proc_rss_peak_bytes"] == 1100
    assert s["cpu_freq_mhz_mean"] is None  # never readable -> unknown, not 0


def test_window_restricts_rates_but_not_rss_peak() -> None:
    s = summarize_system(_events(), window=(2_000_000_000, 4_000_000_000))
    assert s["samples"] == 3
    assert s["proc_cpu_pct_mean"] == pytest.approx(53.0)
    assert s["proc_rss_peak_bytes"] == 1100


def test_short_window_falls_back_to_the_whole_run() -> None:
    s = summarize_system(_events(), window=(99_000_000_000, 100_000_000_000))
    assert s["scope"] == "run" and s["samples"] == 11
    assert s["ctx_switches_per_s"] == pytest.approx(110.0)
    assert summarize_system(_events(), window=(2_000_000_000, 4_000_000_000))["scope"] == "window"


def test_no_samples_is_unknown() -> None:
    s = summarize_system(SYSTEM_EVENTS.empty())
    assert s["samples"] == 0 and s["ctx_switches_per_s"] is None and s["proc_cpu_pct_mean"] is None


def test_cpu_contention_known_values() -> None:
    from aaco.analysis.telemetry import cpu_contention

    # 4 cores 60 % busy, the worker uses one whole core (100 %): others 0.6 - 0.25 = 0.35
    assert cpu_contention(60.0, 100.0, 4) == pytest.approx(0.35)
    # a worker busier than the system sample (sampling jitter) is no negative contention
    assert cpu_contention(20.0, 100.0, 4) == 0.0


def test_a_counter_reset_is_not_a_negative_rate() -> None:
    """Two processes one after the other (aaco profile --repeat): the second one's counts
    start again near 0. The rate adds what each accrued (Prometheus's rate()), never < 0."""
    rows = []
    for i in range(6):  # 0..5 s; a new process from 3 s, its counts restarting
        count = 100 * i if i < 3 else 100 * (i - 3) + 40
        rows.append(
            {
                "ts_ns": i * 1_000_000_000,
                "proc_cpu_pct": None,
                "proc_rss_bytes": None,
                "proc_threads": None,
                "proc_ctx_voluntary": count,
                "proc_ctx_involuntary": 0,
                "proc_minor_faults": None,
                "proc_major_faults": None,
                "sys_cpu_pct": None,
                "sys_cpu_pct_per_core": None,
                "load_1m": None,
                "cpu_freq_mhz": None,
            }
        )
    s = summarize_system(SYSTEM_EVENTS.from_rows(rows))
    # 0->100->200, reset to 40 (40 accrued), ->140->240: 200 + 40 + 200 = 440 over 5 s
    assert s["ctx_switches_voluntary_per_s"] == pytest.approx(88.0)
    assert s["ctx_switches_per_s"] == pytest.approx(88.0)
