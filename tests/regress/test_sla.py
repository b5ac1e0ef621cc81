"""`aaco check --sla`: rules pass, fail, unknown; malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.sessions_fixtures import Sessions

from aaco.errors import UsageError
from aaco.regress.sla import check, load_rules, parse_rule
from aaco.session.bundle import Session


def test_rules_against_known_values(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = Session.load(regress_sessions.base)
    lat = s.summary["latency_ms"]  # type: ignore[index]
    thr = s.summary["throughput"]["items_per_s"]  # type: ignore[index]
    rules = [
        parse_rule(f"p99_ms <= {lat['p99'] * 1.01}"),
        parse_rule(f"throughput >= {thr * 0.99}"),
        parse_rule(f"p50_ms < {lat['p50'] * 0.5}"),
        parse_rule("gpu_active_ratio >= 0.7"),
    ]
    result = check(s, rules)
    assert [r["status"] for r in result["results"]] == ["pass", "pass", "fail", "unknown"]
    assert result["passed"] is False and result["failed"] == 2
    assert check(s, rules[:2])["passed"] is True
    assert check(s, [rules[0], rules[3]], allow_unknown=True)["passed"] is True


def test_cli_exit_codes_and_messages(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = Session.load(regress_sessions.base)
    p50 = s.summary["latency_ms"]["p50"]  # type: ignore[index]
    ok = tmp_path / "ok.yaml"
    ok.write_text(f"rules:\n  - p50_ms <= {p50 * 2}\n  - cov < 10\n")
    proc = aaco("check", "-s", str(s.path), "--sla", str(ok))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SLA met" in proc.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"p50_ms: '<= {p50 / 10}'\nthroughput: '>= 1'\n")
    proc = aaco("check", "-s", str(s.path), "--sla", str(bad), "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert [r["status"] for r in data["results"]] == ["fail", "pass"]
    text = aaco("check", "-s", str(s.path), "--sla", str(bad)).stdout
    assert "FAIL    p50_ms <=" in text and "SLA VIOLATED" in text


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("rules:\n  - p99 <= 12\n", "unknown metric"),
        ("rules:\n  - p99_ms about 12\n", "expected"),
        ("rules: []\n", "no rules"),
        ("42\n", "expected a list"),
        ("rules: [\n", "unreadable"),
        ("p99_ms: twelve\n", "must look like"),
    ],
)
def test_malformed_sla_files(
    regress_sessions: Sessions, tmp_path: Path, content: str, fragment: str
) -> None:
    f = tmp_path / "sla.yaml"
    f.write_text(content)
    proc = aaco("check", "-s", str(regress_sessions.base), "--sla", str(f))
    assert_one_line_error(proc, 2, fragment)


def test_missing_sla_file_and_parse_errors(regress_sessions: Sessions, tmp_path: Path) -> None:
    proc = aaco("check", "-s", str(regress_sessions.base), "--sla", str(tmp_path / "none.yaml"))
    assert_one_line_error(proc, 2, "no such SLA file")
    with pytest.raises(UsageError):
        load_rules(Path(__file__))  # a Python file is not a rules file


def test_rules_list_and_mapping_rules_beside_it_both_count(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    f = tmp_path / "both.yaml"
    f.write_text('rules:\n  - p99_ms <= 1\nthroughput: ">= 200"\n')
    assert [r.text for r in load_rules(f)] == ["p99_ms <= 1", "throughput >= 200"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: p99_ms <= 1\n")
    with pytest.raises(Exception, match="must be a list"):
        load_rules(bad)
