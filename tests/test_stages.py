"""Stage timings (``aaco.stages``): names, nesting, order and times known by construction."""

from __future__ import annotations

import time

from aaco.stages import recording, stage


def test_stages_nest_and_time_what_they_wrap() -> None:
    with recording() as rec:
        with stage("outer"):
            with stage("a"):
                time.sleep(0.03)
            with stage("b"):
                pass
        with stage("after"):
            pass
    assert [s.name for s in rec.stages] == ["outer/a", "outer/b", "outer", "after"]
    assert [s.name for s in rec.in_start_order()] == ["outer", "outer/a", "outer/b", "after"]
    by = {s.name: s for s in rec.stages}
    assert by["outer/a"].seconds >= 0.03 and by["outer/a"].depth == 1
    assert by["outer"].seconds >= by["outer/a"].seconds + by["outer/b"].seconds
    assert by["outer"].depth == 0 and by["outer/a"].start_s >= by["outer"].start_s
    assert rec.total_s is not None and rec.total_s >= by["outer"].seconds + by["after"].seconds
    # peak RSS so far: never falls
    peaks = [s.peak_rss_mib for s in rec.stages]
    assert peaks == sorted(peaks) and peaks[0] > 0


def test_a_stage_outside_a_recording_does_nothing_and_errors_still_record() -> None:
    with stage("unrecorded"):
        pass
    with recording() as rec:
        try:
            with stage("fails"):
                raise ValueError("x")
        except ValueError:
            pass
        with stage("next"):
            pass
    assert [s.name for s in rec.stages] == ["fails", "next"]  # the failed stage was not left open
