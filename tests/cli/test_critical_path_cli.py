"""`aaco analyze critical-path` and the critical path in imported bundles: real
subprocesses over the real CUDA traces recorded on an H100 (tests/analysis/fixtures/cuda)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import aaco, assert_one_line_error

from aaco.session.bundle import Session

CUDA = Path(__file__).resolve().parents[1] / "analysis" / "fixtures" / "cuda"
SYNC = CUDA / "cuda_sync_streams.json.gz"
KINETO_CPU = (
    Path(__file__).resolve().parents[1] / "importers" / "fixtures" / "kineto" / "cpu_mlp.json.gz"
)


def test_critical_path_of_a_trace_file_text_and_json() -> None:
    proc = aaco("analyze", "critical-path", str(SYNC), "--what-if", "kernel~sgemm:0.5")
    assert proc.returncode == 0, proc.stderr
    assert "critical path" in proc.stdout and "by category:" in proc.stdout
    assert "kernel~sgemm:0.5" in proc.stdout
    proc = aaco("analyze", "critical-path", str(SYNC), "--json", "--what-if", "kernel~sgemm:0.5")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    p = data["primary"]
    assert p["length_ns"] == p["wall_ns"]
    assert sum(v["ns"] for v in p["by_category"].values()) == p["length_ns"]
    user = [w for w in p["what_if"] if w["spec"] == "kernel~sgemm:0.5"]
    assert user and 0 < user[0]["saved_ns"] <= user[0]["amdahl_saved_ns"]


def test_imported_trace_has_the_critical_path_in_its_reports(tmp_path: Path) -> None:
    proc = aaco("import", str(SYNC), "--output", str(tmp_path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    cp = report["critical_path"]
    assert cp["length_ns"] == cp["wall_ns"] and cp["process_id"] == 504
    s = Session.load(tmp_path / "latest")
    assert (s.path / "metrics" / "critical_path.json").exists()
    assert "critical path" in (s.path / "report" / "report.txt").read_text()
    assert "Critical path" in (s.path / "report" / "report.html").read_text()
    recs = json.loads((s.path / "metrics" / "recommendations.json").read_text())
    assert any(r["class"] == "critical-path" for r in recs)
    # the bundle, by session, with a user what-if
    proc = aaco("analyze", "critical-path", "-s", str(s.path), "--what-if", "cpu:0")
    assert proc.returncode == 0, proc.stderr
    assert "cpu:0" in proc.stdout
    # aaco analyze --what-if writes it into the bundle's analysis
    proc = aaco("analyze", "-s", str(s.path), "--what-if", "gpu:0", "--format", "none")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((s.path / "metrics" / "critical_path.json").read_text())
    assert data["user_what_if"] == ["gpu:0"]


def test_bad_what_if_and_no_gpu_trace_are_one_line_errors(tmp_path: Path) -> None:
    proc = aaco("analyze", "critical-path", str(SYNC), "--what-if", "warp~x:0.5")
    assert_one_line_error(proc, 2)
    assert "unknown target" in proc.stderr
    proc = aaco("analyze", "critical-path", str(SYNC), "--what-if", "kernel:-1")
    assert_one_line_error(proc, 2)
    proc = aaco("analyze", "critical-path", str(KINETO_CPU))
    assert proc.returncode != 0 and "no GPU kernel" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = aaco("analyze", "critical-path", str(tmp_path / "missing.json"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    proc = aaco("analyze", "critical-path", str(SYNC), "--process", "12345")
    assert_one_line_error(proc, 2)


def test_perfetto_export_has_the_critical_path_track(tmp_path: Path) -> None:
    proc = aaco("import", str(SYNC), "--output", str(tmp_path), "--format", "none")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "t.json"
    proc = aaco("export", "perfetto", "-s", str(tmp_path / "latest"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    path = [e for e in events if e.get("cat") == "critical_path"]
    cp = json.loads((tmp_path / "latest" / "metrics" / "critical_path.json").read_text())
    total_ns = sum(round(float(e["dur"]) * 1000) for e in path)
    assert abs(total_ns - cp["primary"]["length_ns"]) <= len(path)  # µs with 3 decimals
    assert len({(e["pid"], e["tid"]) for e in path}) == 1  # one track: slices never overlap
