"""The example runner of docs/architecture.md, taken from the page as written, registered and
run end to end: adding a runner is one module plus its registration."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from aaco.errors import UsageError
from aaco.pipeline import RunOptions, run_model
from aaco.runners.base import RUNNERS

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def example_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    found = [b for b in blocks if "class NumpyRunner" in b]
    assert len(found) == 1, "docs/architecture.md must hold one example runner"
    return found[0]


def test_example_runner_is_short() -> None:
    code = [ln for ln in example_source().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(code) <= 36, len(code)


def test_example_runner_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "example_runner.py").write_text(example_source())
    # the worker is a new interpreter: it finds the module the way a user's would
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    with RUNNERS.registered("numpy", "example_runner:NumpyRunner"):
        assert "numpy" in RUNNERS.names()
        s = run_model(
            RunOptions(
                model="matmul:64",
                framework="numpy",
                iterations=30,
                warmup=2,
                output=tmp_path / "sessions",
                auto_calibrate=False,
            )
        )
    assert s.status == "completed", s.error
    assert s.meta["run"]["framework"] == "numpy"
    assert s.meta["model"]["name"] == "matmul:64"
    iters = s.table("inference_iters")
    assert iters is not None
    measured = iters.filter(pc.equal(iters.column("phase"), "measured"))
    assert measured.num_rows == 30
    assert pc.min(measured.column("latency_ns")).as_py() > 0
    assert s.summary["latency_ms"]["count"] == 30
    assert s.summary["throughput"]["items_per_s"] is not None  # batch 1
    # the pipeline's own parts ran for it: environment, telemetry, reports
    assert (s.path / "env.json").is_file()
    assert s.table("system_events") is not None
    assert (s.path / "report" / "report.json").is_file()


def test_unknown_framework_lists_the_runners(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        run_model(RunOptions(model="mlp", framework="tensorflow", output=tmp_path))
    assert str(info.value) == "unknown --framework 'tensorflow'; valid: onnxruntime, torch"
    assert not (tmp_path / "latest").exists()
