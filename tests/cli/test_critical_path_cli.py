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


def test_one_profiler_step(tmp_path: Path) -> None:
    proc = aaco("analyze", "critical-path", str(SYNC), "--step", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    whole = json.loads(aaco("analyze", "critical-path", str(SYNC), "--json").stdout)
    one = json.loads(proc.stdout)
    assert one["step"] == 3
    p = one["primary"]
    assert p["length_ns"] == p["wall_ns"] < whole["primary"]["wall_ns"] / 2
    proc = aaco("analyze", "critical-path", str(SYNC), "--step", "99")
    assert_one_line_error(proc, 2, "no ProfilerStep#99", "steps: 2, 3, 4")


TRANSFORMER = CUDA / "cuda_transformer_infer.json.gz"
ALEXNET = (
    Path(__file__).resolve().parents[1] / "analysis" / "fixtures" / "hta" / "cuda_alexnet.json.gz"
)


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    proc = aaco("analyze", "critical-path", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_what_if_patterns_match_kernel_families_and_operators() -> None:
    """cuBLASLt's `nvjet_*` kernels are GEMMs by family: `kernel~gemm` must find them; `op~`
    re-times an operator's host time and the kernels it launched alike."""
    p = _json(str(TRANSFORMER), "--what-if", "kernel~gemm:0.5", "--what-if",
              "op~aten::linear:0", "--what-if", "cpu_op~aten::linear:0")["primary"]  # fmt: skip
    by = {w["spec"]: w for w in p["what_if"]}
    assert by["kernel~gemm:0.5"]["matched"] > 0
    whole, host_only = by["op~aten::linear:0"], by["cpu_op~aten::linear:0"]
    assert whole["matched_ns"] > host_only["matched_ns"] > 0
    assert whole["saved_ns"] >= host_only["saved_ns"]


def test_steps_are_counted_whole_and_gains_are_per_step(tmp_path: Path) -> None:
    proc = aaco("import", str(SYNC), "--output", str(tmp_path), "--format", "none")
    assert proc.returncode == 0, proc.stderr
    cp = json.loads((tmp_path / "latest" / "metrics" / "critical_path.json").read_text())
    assert cp["primary"]["steps"] == 3  # ProfilerStep#2..#4
    recs = json.loads((tmp_path / "latest" / "metrics" / "recommendations.json").read_text())
    rec = next(r for r in recs if r["class"] == "critical-path")
    w = next(w for w in cp["primary"]["what_if"] if w["spec"] == rec["target"][0])
    assert rec["gain_ms"] == round(w["saved_ns"] / 3 / 1e6, 6)
    assert "per step (3 steps)" in rec["gain_kind"]


def test_runtime_advice_names_the_calls_and_amdahl_is_capped(tmp_path: Path) -> None:
    """AlexNet's trace: the runtime time on the path is CUDA context set-up and frees, not
    launches: the advice says so instead of offering CUDA graphs."""
    p = _json(str(ALEXNET), "--what-if", "cpu:0", "--what-if", "runtime:0")["primary"]
    assert p["runtime_calls"][0]["name"] == "cudaDeviceGetStreamPriorityRange"
    for w in p["what_if"]:
        assert w["amdahl_saved_ns"] <= w["length_ns"]
    proc = aaco("import", str(ALEXNET), "--output", str(tmp_path), "--format", "none")
    assert proc.returncode == 0, proc.stderr
    recs = json.loads((tmp_path / "latest" / "metrics" / "recommendations.json").read_text())
    rt = next(r for r in recs if r["target"] == ["runtime:0.5"])
    assert "cudaDeviceGetStreamPriorityRange" in rt["action"] and "not launches" in rt["action"]
