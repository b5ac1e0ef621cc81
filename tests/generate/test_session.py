"""``aaco llm run`` end to end: a real generation into a serving bundle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aaco", *args], capture_output=True, text=True, timeout=300
    )


def test_llm_run_writes_a_serving_bundle(tmp_path: Path) -> None:
    r = _cli(
        "llm",
        "run",
        "--model",
        "gpt2-tiny",
        "--prompt-tokens",
        "16",
        "--output-tokens",
        "6",
        "--batch",
        "2",
        "--iterations",
        "2",
        "-o",
        str(tmp_path),
        "--report",
        "json",
    )
    assert r.returncode == 0, r.stderr
    bundle = Path(r.stderr.strip().splitlines()[-1].split("bundle: ", 1)[1])
    meta = json.loads((bundle / "session.json").read_text())
    assert meta["kind"] == "serving" and meta["status"] == "completed"
    assert meta["run"]["framework"] == "onnxruntime-generate"
    req = pq.read_table(bundle / "serving/requests.parquet")
    measured = [p for p in req.column("phase").to_pylist() if p == "measured"]
    assert len(measured) == 2 * 2  # iterations x batch
    assert set(req.column("output_tokens").to_pylist()) == {6}
    summary = json.loads((bundle / "metrics/serving_summary.json").read_text())
    point = summary["points"][0]
    assert point["ttft_ms"]["count"] == 4 and point["tpot_ms"]["count"] == 4
    # TTFT is the prefill: the first chunk comes at the prefill's end
    chunks = pq.read_table(bundle / "serving/chunks.parquet")
    assert chunks.num_rows == req.num_rows * 6  # one chunk per generated token
    gen = json.loads((bundle / "metrics/generation.json").read_text())
    assert set(gen["top_ops"]) == {"prefill", "decode"}
    assert gen["phase_totals"]["decode"]["runs_per_generation"] == 5
    assert {row["phase"] for row in gen["op_split"]} == {"prefill", "decode"}
    # the in-process loop is the watched process
    assert meta["telemetry"]["process"] == "generate" and meta["telemetry"]["samples"] >= 1
    assert (bundle / "telemetry/system_events.parquet").is_file()


def test_llm_run_bad_model_is_one_line(tmp_path: Path) -> None:
    r = _cli("llm", "run", "--model", "resnet50", "-o", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("aaco: error")]
    assert not any(tmp_path.iterdir())  # no bundle
