"""`aaco diff` end to end on real sessions, and on bundles with latencies known by
construction for the verdicts real runs cannot produce on demand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.sessions_fixtures import Sessions, derived_session

from aaco.errors import BundleError, UsageError
from aaco.regress.diff import diff_sessions
from aaco.session.bundle import Session


def test_identical_configuration_is_no_change(regress_sessions: Sessions) -> None:
    s = regress_sessions
    # a generous threshold: this asserts the path, not the power (bench/bench_regress.py)
    proc = aaco("diff", "-b", str(s.base), "-s", str(s.same), "--threshold", "25%", "--no-history")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("NO CHANGE")
    verdict = json.loads((s.same / "regress" / "verdict.json").read_text())
    assert verdict["verdict"] == "NO CHANGE" and verdict["regression"] is False
    assert verdict["exit_code"] == 0
    assert verdict["suspected_cause"] is None


def test_slower_model_variant_is_a_regression(regress_sessions: Sessions) -> None:
    s = regress_sessions
    proc = aaco("diff", "-b", str(s.base), "-s", str(s.slow), "--threshold", "25%")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("REGRESSION +") and "p10" in first and "confidence" in first
    assert "suspected cause: model change" in first
    verdict = json.loads((s.slow / "regress" / "verdict.json").read_text())
    assert verdict["regression"] is True
    assert verdict["latency_delta_pct"] > 100  # 4x the layers
    assert verdict["median_delta_pct"] > 100 and verdict["metric"] == "p10"
    lo, hi = verdict["ci_pct"]
    assert 25 < lo <= verdict["latency_delta_pct"] <= hi
    assert verdict["severity"] == "high"
    assert verdict["p_value"] < 0.025 and 0 <= verdict["welch_p_value"] < 0.05
    diff = json.loads((s.slow / "regress" / "diff.json").read_text())
    ops = diff["evidence"]["operators"]
    # 18 extra layers; ONNX Runtime executes each MatMul + Add + Relu as one fused node
    assert len(ops["added"]) == 18
    assert all("layer" in name for name in ops["added"])
    assert ops["top_movers"][0]["status"] in ("added", "changed")
    assert diff["evidence"]["model"]["same_file"] is False
    ref = json.loads((s.slow / "regress" / "baseline_ref.json").read_text())
    assert ref["session_id"] == Session.load(s.base).session_id
    assert ref["fingerprint"] == Session.load(s.base).meta["fingerprint"]


def test_json_and_markdown_formats(regress_sessions: Sessions) -> None:
    s = regress_sessions
    proc = aaco("diff", "-b", str(s.base), "-s", str(s.slow), "-t", "25", "-f", "json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert set(data["verdict"]) >= {
        "regression", "verdict", "severity", "confidence", "latency_delta_pct", "ci_pct",
        "p_value", "suspected_cause", "evidence", "recommendation",
    }  # fmt: skip
    assert data["comparison"]["method"]["block_length"]["baseline"] >= 1
    md = aaco("diff", "-b", str(s.base), "-s", str(s.slow), "-t", "25", "-f", "markdown")
    assert md.returncode == 1
    assert md.stdout.startswith("### ")
    assert "| p50 |" in md.stdout and "|---|" in md.stdout


def _synthetic(tmp_path: Path, source: Path, shift: float, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    root = tmp_path / "sessions"
    a = derived_session(source, root, "20260101_000000_aaaaaa", rng.normal(2.0, 0.04, 300))
    b = derived_session(
        source, root, "20260101_000100_bbbbbb", rng.normal(2.0 * shift, 0.04 * shift, 300)
    )
    return a, b


@pytest.mark.parametrize(
    ("shift", "threshold", "code", "verdict"),
    [(1.0, "3%", 0, "NO CHANGE"), (0.8, "3%", 0, "IMPROVEMENT"), (1.03, "3%", 3, "INCONCLUSIVE")],
)
def test_exit_codes_follow_the_verdict(
    regress_sessions: Sessions,
    tmp_path: Path,
    shift: float,
    threshold: str,
    code: int,
    verdict: str,
) -> None:
    a, b = _synthetic(tmp_path, regress_sessions.base, shift)
    proc = aaco("diff", "-b", str(a), "-s", str(b), "-t", threshold, "--no-history")
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stdout.startswith(verdict)


def test_noise_floor_from_history_widens_the_margin(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    rng = np.random.default_rng(1)
    root = tmp_path / "sessions"
    # six past sessions whose medians wander by ~5 %: floor = 3 x 1.4826 x MAD of log medians
    levels = [2.0, 2.1, 1.9, 2.05, 1.95, 2.0]
    paths = [
        derived_session(
            regress_sessions.base, root, f"20260101_00000{i}_00000{i}", rng.normal(m, 0.01, 200),
            created_utc=f"2026-01-01T00:00:0{i}.000Z",
        )
        for i, m in enumerate(levels)
    ]  # fmt: skip
    new = derived_session(
        regress_sessions.base, root, "20260101_000100_ffffff", rng.normal(2.1, 0.01, 200),
        created_utc="2026-01-01T00:01:00.000Z",
    )  # fmt: skip
    with_history = diff_sessions(Session.load(paths[-1]), Session.load(new), threshold=0.03)
    floor = with_history["verdict"]["noise_floor_pct"]
    assert floor is not None and floor > 5
    assert with_history["verdict"]["margin_pct"] == pytest.approx(floor)
    assert with_history["noise_floor"]["history_sessions"] == 6
    assert with_history["verdict"]["verdict"] != "REGRESSION"
    without = diff_sessions(
        Session.load(paths[-1]), Session.load(new), threshold=0.03, use_history=False
    )
    assert without["verdict"]["verdict"] == "REGRESSION"


def test_fingerprint_mismatch_warns_loudly(regress_sessions: Sessions, tmp_path: Path) -> None:
    a, b = _synthetic(tmp_path, regress_sessions.base, 1.0)
    meta = json.loads((b / "session.json").read_text())
    meta["fingerprint"] = "0000000000000000"
    (b / "session.json").write_text(json.dumps(meta))
    env = json.loads((b / "env.json").read_text())
    env["fingerprint_fields"]["onnxruntime_version"] = "0.0.1"
    (b / "env.json").write_text(json.dumps(env))
    proc = aaco("diff", "-b", str(a), "-s", str(b), "--no-history")
    assert "DIFFERENT HARDWARE/SOFTWARE FINGERPRINT" in proc.stderr
    assert "onnxruntime_version" in proc.stderr and "0.0.1" in proc.stderr
    verdict = json.loads((b / "regress" / "verdict.json").read_text())
    assert verdict["warnings"][0].startswith("DIFFERENT HARDWARE")


def test_bad_inputs_get_one_line_errors(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = regress_sessions
    assert_one_line_error(
        aaco("diff", "-b", "nosuchbaseline", "-s", str(s.same), "--sessions", str(s.root)),
        2,
        "nosuchbaseline",
    )
    assert_one_line_error(aaco("diff", "-b", str(tmp_path / "nope"), "-s", str(s.same)), 2, "nope")
    assert_one_line_error(
        aaco("diff", "-b", str(s.base), "-s", str(s.same), "-t", "abc"), 2, "threshold"
    )
    assert_one_line_error(
        aaco("diff", "-b", str(s.base), "-s", str(s.same), "--gate", "p42"), 2, "gate"
    )
    assert_one_line_error(aaco("diff", "-b", str(s.base), "-s", str(s.base)), 2, "same bundle")

    other = tmp_path / "other"
    shutil.copytree(s.same, other)
    meta = json.loads((other / "session.json").read_text())
    meta["model"]["name"] = "resnet50"
    (other / "session.json").write_text(json.dumps(meta))
    assert_one_line_error(aaco("diff", "-b", str(s.base), "-s", str(other)), 2, "different models")

    failed = tmp_path / "failed"
    shutil.copytree(s.same, failed)
    meta = json.loads((failed / "session.json").read_text())
    meta["status"] = "failed"
    meta["error"] = {"message": "worker crashed"}
    (failed / "session.json").write_text(json.dumps(meta))
    assert_one_line_error(aaco("diff", "-b", str(s.base), "-s", str(failed)), 2, "failed")

    empty = tmp_path / "empty"
    shutil.copytree(s.same, empty)
    summary = json.loads((empty / "metrics" / "inference_summary.json").read_text())
    summary["latency_ms"] = None
    (empty / "metrics" / "inference_summary.json").write_text(json.dumps(summary))
    assert_one_line_error(aaco("diff", "-b", str(empty), "-s", str(s.same)), 2, "no measured")


def test_api_errors_are_typed(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = Session.load(regress_sessions.base)
    with pytest.raises(UsageError, match="same bundle"):
        diff_sessions(s, s)
    short = derived_session(
        regress_sessions.base, tmp_path / "sessions", "20260101_000000_cccccc", np.full(5, 2.0)
    )
    with pytest.raises(UsageError, match="at least"):
        diff_sessions(s, Session.load(short), use_history=False)
    failed = Session.load(regress_sessions.base)
    failed.meta["status"] = "failed"
    with pytest.raises(BundleError, match="only completed"):
        diff_sessions(failed, Session.load(regress_sessions.same))


def test_several_runs_per_side(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = regress_sessions
    proc = aaco(
        "diff", "-b", str(s.base), "-b", str(s.same), "-s", str(s.slow), "-t", "25%", "-f", "json"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["comparison"]["runs"] == {"baseline": 2, "session": 1}
    assert len(data["verdict"]["baseline"]["runs"]) == 2
    assert data["summary"].startswith("REGRESSION")
    other = tmp_path / "other"
    shutil.copytree(s.same, other)
    meta = json.loads((other / "session.json").read_text())
    meta["run"]["batch"] = 7
    (other / "session.json").write_text(json.dumps(meta))
    proc = aaco("diff", "-b", str(s.base), "-b", str(other), "-s", str(s.slow))
    assert_one_line_error(proc, 2, "different configurations")
    proc = aaco("diff", "-b", str(s.base), "-b", str(s.base), "-s", str(s.slow))
    assert_one_line_error(proc, 2, "twice")


def test_run_repeat_makes_runs_to_pool(tmp_path: Path) -> None:
    from aaco.session.bundle import iter_sessions

    root = tmp_path / "sessions"
    proc = aaco(
        "run", "--model", "mlp", "--repeat", "2", "--warmup", "2", "--iterations", "20",
        "--no-profile", "--no-telemetry", "--report", "none", "-o", str(root),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bundles = list(iter_sessions(root))
    assert len(bundles) == 2
    assert proc.stderr.count("bundle: ") == 2
    assert aaco("diff", "-b", str(bundles[0]), "-s", str(bundles[1]), "-t", "90%").returncode in (
        0,
        3,
    )
