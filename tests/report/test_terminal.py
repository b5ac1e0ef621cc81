"""Tests of aaco.report.terminal: the memory line names the process each peak belongs to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aaco.report.model import build_report
from aaco.report.terminal import _memory, render_report
from aaco.session.bundle import Session

FIXTURE_V1 = Path(__file__).parents[1] / "session" / "fixtures" / "bundle_v1"
MIB = 2**20


def _line(report: dict[str, Any]) -> str:
    return _memory(report).plain


def test_worker_and_parent_peaks_are_labelled_with_their_process() -> None:
    report = {
        "worker": {"max_rss_bytes": 300 * MIB, "max_rss_source": "worker"},
        "aaco_process": {"max_rss_bytes": 120 * MIB},
        "telemetry": {"proc_rss_peak_bytes": 290 * MIB},
    }
    assert _line(report) == (
        "memory     worker peak RSS 300.0 MiB, aaco (parent) peak RSS 120.0 MiB"
    )


def test_unknown_worker_peak_falls_back_to_the_sampled_one() -> None:
    report: dict[str, Any] = {
        "worker": {"max_rss_bytes": None, "max_rss_source": None},
        "aaco_process": {"max_rss_bytes": 120 * MIB},
        "telemetry": {"proc_rss_peak_bytes": 290 * MIB},
    }
    assert _line(report) == (
        "memory     worker peak RSS 290.0 MiB (sampled), aaco (parent) peak RSS 120.0 MiB"
    )
    report["telemetry"] = None
    assert _line(report) == ("memory     worker peak RSS unknown, aaco (parent) peak RSS 120.0 MiB")


def test_no_processes_no_line() -> None:
    assert _line({"worker": None, "telemetry": None}) == ""


def test_version1_bundle_shows_the_sampled_worker_peak_not_wait4() -> None:
    # Its worker.max_rss_bytes (121.3 MiB) came from wait4 before max_rss_source existed,
    # when it could have been the parent's: the sampled peak is the one known to be the
    # worker's.
    report = build_report(Session.load(FIXTURE_V1))
    assert report["aaco_process"] is None
    assert _line(report) == "memory     worker peak RSS 116.2 MiB (sampled)"
    text = render_report(report, width=200)
    assert "worker peak RSS 116.2 MiB (sampled)" in text
    assert "RSS peak" not in text
