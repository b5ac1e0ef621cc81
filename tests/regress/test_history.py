"""`aaco history`: grouping, listing and a step injected into a history of sessions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.sessions_fixtures import Sessions, derived_session

from aaco.regress.history import history


def _history(tmp_path: Path, source: Path, levels: list[float]) -> Path:
    rng = np.random.default_rng(0)
    root = tmp_path / "sessions"
    for i, level in enumerate(levels):
        derived_session(
            source, root, f"20260102_{i // 60:02d}{i % 60:02d}00_{i:06x}",
            rng.normal(level, level * 0.02, 100),
            created_utc=f"2026-01-02T{i // 60:02d}:{i % 60:02d}:00.000Z",
        )  # fmt: skip
    return root


def test_injected_step_is_found_where_it_was_put(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    # 30 sessions whose medians wander by ~0.5 %, then a 10 % slowdown from session 18 on
    levels = list(2.0 * np.exp(rng.normal(0, 0.005, 30)))
    levels[18:] = [v * 1.10 for v in levels[18:]]
    root = _history(tmp_path, regress_sessions.base, levels)
    groups = history(root)
    assert len(groups) == 1
    g = groups[0]
    assert len(g["sessions"]) == 30
    p50 = [c for c in g["change_points"] if c["metric"] == "p50"]
    assert [c["index"] for c in p50] == [18]
    assert p50[0]["session_id"] == g["sessions"][18]["id"]
    assert 7 < p50[0]["magnitude_pct"] < 13 and p50[0]["p_value"] < 0.001

    proc = aaco("history", "--sessions", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [c["index"] for c in data[0]["change_points"] if c["metric"] == "p50"] == [18]
    text = aaco("history", "--sessions", str(root)).stdout
    assert "change point (p50) at #18" in text


def test_flat_history_has_no_change_points_and_filters_work(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    root = _history(tmp_path, regress_sessions.base, list(2.0 * np.exp(rng.normal(0, 0.01, 25))))
    g = history(root)[0]
    assert g["change_points"] == []
    assert history(root, model="nosuchmodel") == []
    assert history(root, backend="cpu")[0]["backend"] == "cpu"
    assert history(root, tag="nosuchtag") == []
    assert "no change points" in aaco("history", "--sessions", str(root)).stdout


def test_real_sessions_are_grouped_by_configuration(regress_sessions: Sessions) -> None:
    groups = history(regress_sessions.root)
    assert sum(len(g["sessions"]) for g in groups) == 3
    assert all(g["fingerprint"] for g in groups)


def test_history_bad_input(tmp_path: Path) -> None:
    assert_one_line_error(aaco("history", "--sessions", str(tmp_path / "none")), 2, "no such")
    assert_one_line_error(
        aaco("history", "--sessions", str(tmp_path), "--window", "2"), 2, "window"
    )


def test_run_settings_split_groups_and_every_change_point_is_shown(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    levels = list(2.0 * np.exp(rng.normal(0, 0.005, 24)))
    levels[12:] = [v * 1.15 for v in levels[12:]]  # p50 and p90 both step at #12
    root = _history(tmp_path, regress_sessions.base, levels)
    g = history(root)[0]
    assert sorted(c["metric"] for c in g["change_points"] if c["index"] == 12) == ["p50", "p90"]
    text = aaco("history", "--sessions", str(root)).stdout
    row = next(line for line in text.splitlines() if " 12 " in line and "│" in line)
    following = text.splitlines()[text.splitlines().index(row) + 1]
    assert "p50 +15%" in row and "p90 +15%" in following  # one change point a line
    assert "change point (p50) at #12" in text and "change point (p90) at #12" in text
    assert "p90 ms" in text
    # the same model run with other threads is another configuration, not a change point
    last = sorted(root.glob("*/*"))[-1]
    meta = json.loads((last / "session.json").read_text())
    threads = meta["run"]["threads"]
    meta["run"]["threads"] = 7
    (last / "session.json").write_text(json.dumps(meta))
    groups = history(root)
    assert sorted(len(x["sessions"]) for x in groups) == [1, 23]
    assert {x["threads"] for x in groups} == {threads, 7}


def test_sessions_of_other_input_shapes_are_another_configuration(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    root = _history(tmp_path, regress_sessions.base, [2.0] * 6)
    for bundle in sorted(root.glob("*/*"))[:3]:
        meta = json.loads((bundle / "session.json").read_text())
        meta["run"]["inputs"] = [{"name": "x", "shape": [8, 3, 224, 224]}]
        (bundle / "session.json").write_text(json.dumps(meta))
    assert sorted(len(g["sessions"]) for g in history(root)) == [3, 3]
