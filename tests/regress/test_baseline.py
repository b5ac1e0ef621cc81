"""Named baselines: save, list, show, diff by name, bad names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.test_cli import aaco, assert_one_line_error
from tests.sessions_fixtures import Sessions, with_run_setting

from aaco.session.bundle import Session


def test_save_list_show_and_diff_by_name(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = regress_sessions
    root = tmp_path / "sessions"
    shutil.copytree(s.root, root, symlinks=True)
    base = root / s.base.relative_to(s.root)
    same = root / s.same.relative_to(s.root)
    proc = aaco("baseline", "save", "main", "-s", str(base), "--sessions", str(root))
    assert proc.returncode == 0, proc.stderr
    assert (root / "baselines" / "main.json").is_file()
    again = aaco("baseline", "save", "main", "-s", str(base), "--sessions", str(root))
    assert_one_line_error(again, 2, "exists")
    assert (
        aaco(
            "baseline", "save", "main", "-s", str(base), "--sessions", str(root), "--force"
        ).returncode
        == 0
    )

    listing = aaco("baseline", "list", "--sessions", str(root), "--json")
    rows = json.loads(listing.stdout)
    assert [r["name"] for r in rows] == ["main"] and rows[0]["exists"] is True
    text = aaco("baseline", "list", "--sessions", str(root)).stdout
    assert "main" in text and Session.load(base).session_id in text

    show = json.loads(aaco("baseline", "show", "main", "--sessions", str(root)).stdout)
    assert show["session_id"] == Session.load(base).session_id
    assert show["fingerprint"] and show["fingerprint_fields"] and show["packages"]
    assert show["relative_path"] == str(base.relative_to(root))

    # What is tested here is that the name resolves and the diff runs (any verdict: 0, 1 or
    # 3). Whether two runs of one configuration are judged alike is test_diff's, with its
    # noise rules: on a shared 2-core box two such runs once differed by 32 % at p10.
    proc = aaco("diff", "-b", "main", "-s", str(same), "--sessions", str(root), "-t", "25%")
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    ref = json.loads((same / "regress" / "baseline_ref.json").read_text())
    assert ref["name"] == "main"

    # the root moved: the relative path still resolves
    moved = tmp_path / "moved"
    shutil.move(root, moved)
    same2 = moved / same.relative_to(root)
    proc = aaco("diff", "-b", "main", "-s", str(same2), "--sessions", str(moved), "-t", "25%")
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    assert json.loads((same2 / "regress" / "baseline_ref.json").read_text())["name"] == "main"

    # the bundle disappeared: a clear error
    shutil.rmtree(moved / base.relative_to(root))
    proc = aaco("diff", "-b", "main", "-s", str(same2), "--sessions", str(moved))
    assert_one_line_error(proc, 2, "no longer exists")
    assert "bundle missing" in aaco("baseline", "list", "--sessions", str(moved)).stdout


def test_bad_baseline_names_and_sessions(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = regress_sessions
    root = tmp_path / "sessions"
    for bad in ("../escape", "a/b", ".hidden", ""):
        proc = aaco("baseline", "save", bad, "-s", str(s.base), "--sessions", str(root))
        assert_one_line_error(proc, 2)
    assert not (tmp_path / "escape.json").exists()
    assert_one_line_error(aaco("baseline", "show", "nope", "--sessions", str(root)), 2, "nope")
    failed = tmp_path / "failed"
    shutil.copytree(s.base, failed)
    meta = json.loads((failed / "session.json").read_text())
    meta["status"] = "failed"
    (failed / "session.json").write_text(json.dumps(meta))
    proc = aaco("baseline", "save", "x", "-s", str(failed), "--sessions", str(root))
    assert_one_line_error(proc, 2, "failed")
    assert "no baselines" in aaco("baseline", "list", "--sessions", str(root)).stdout


def test_a_baseline_of_several_runs(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = regress_sessions
    root = tmp_path / "sessions"
    shutil.copytree(s.root, root, symlinks=True)
    base = root / s.base.relative_to(s.root)
    same = root / s.same.relative_to(s.root)
    slow = root / s.slow.relative_to(s.root)
    proc = aaco(
        "baseline", "save", "pair", "-s", str(base), "-s", str(same), "--sessions", str(root)
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(aaco("baseline", "show", "pair", "--sessions", str(root)).stdout)
    assert [r["session_id"] for r in record["runs"]] == [
        Session.load(base).session_id,
        Session.load(same).session_id,
    ]
    proc = aaco(
        "diff",
        "-b",
        "pair",
        "-s",
        str(slow),
        "--sessions",
        str(root),
        "-t",
        "25%",
        "-f",
        "json",
        "--allow-contention",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["comparison"]["runs"]["baseline"] == 2


def test_malformed_baseline_record_is_a_usage_error(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    root = tmp_path / "sessions"
    (root / "baselines").mkdir(parents=True)
    (root / "baselines" / "weird.json").write_text(json.dumps({"session_path": 5, "runs": "x"}))
    proc = aaco("diff", "-b", "weird", "-s", str(regress_sessions.same), "--sessions", str(root))
    assert_one_line_error(proc, 2, "not a baseline record")
    listing = aaco("baseline", "list", "--sessions", str(root))
    assert listing.returncode == 0 and "not a baseline record" in listing.stdout


def test_runs_of_other_settings_cannot_make_one_baseline(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    other = with_run_setting(regress_sessions.same, tmp_path / "threads", "threads", 3)
    proc = aaco(
        "baseline", "save", "two", "-s", str(regress_sessions.base), "-s", str(other),
        "--sessions", str(tmp_path / "root"),
    )  # fmt: skip
    assert_one_line_error(proc, 2, "run settings")
