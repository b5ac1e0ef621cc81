"""The PyTorch runner: real worker processes running small nn.Modules on the CPU."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.compute as pc
import pytest

from aaco.errors import InputError, UsageError
from aaco.importers.kineto import KinetoImporter
from aaco.pipeline import RunOptions, run_model
from aaco.runners.spec import TORCH_TRACE, TorchRunSpec
from aaco.runners.torch import resolve_torch_model
from aaco.runners.torch_worker import _check_compile, load_model

# AACO's own modules above are imported unconditionally: their failure is an error. Only
# PyTorch itself, the optional aaco[torch] extra, may be absent (a broken torch install, or
# one missing a dependency of its own, is an error too).
try:
    import torch
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
    pytest.skip("PyTorch (optional extra aaco[torch]) is not installed", allow_module_level=True)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "torch_models.py"


def _opts(tmp_path: Path, model: str, **kw: object) -> RunOptions:
    base: dict[str, object] = {
        "model": model,
        "framework": "torch",
        "warmup": 2,
        "iterations": 7,
        "profile_iterations": 3,
        "telemetry": False,
        "output": tmp_path / "sessions",
    }
    base.update(kw)
    return RunOptions(**base)  # type: ignore[arg-type]


def test_function_model_measured_and_profiled(tmp_path: Path) -> None:
    s = run_model(_opts(tmp_path, f"{FIXTURES}:tiny_mlp"))
    assert s.status == "completed", s.error
    iters = s.iters()
    assert iters is not None
    phases = iters.column("phase").to_pylist()
    assert phases.count("warmup") == 2 and phases.count("measured") == 7
    assert pc.all(pc.greater(iters.column("latency_ns"), 0)).as_py()
    run = s.meta["run"]
    assert run["framework"] == "torch" and run["device"] == "cpu" and run["compile"] is False
    assert run["torch"]["torch_version"] == torch.__version__
    assert run["inputs"] == [{"name": "arg0", "shape": [4, 16], "dtype": "float32"}]
    assert run["batch"] == 4 and run["batch_source"] == "inputs"
    assert s.meta["model"]["source"] == "torch-function"
    assert s.meta["backend"] == {"name": "torch", "provider": "cpu"}
    assert s.summary["latency_ms"]["count"] == 7

    # The trace: gzip JSON, exactly the 3 active steps, 2 linear layers per step.
    trace = s.path / TORCH_TRACE
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    steps = sorted(
        e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    )
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    tables = KinetoImporter().read(trace)
    names = tables.ops.column("node_name").to_pylist()
    assert names.count("aten::linear") == 6
    assert names.count("aten::relu") == 3
    assert tables.kernels.num_rows == 0  # CPU only: no GPU kernels
    # the ORT-only parts did not run
    assert not (s.path / "model" / "graph_nodes.parquet").exists()
    assert not (s.path / "profiler" / "ort_runs.parquet").exists()
    assert (s.path / "report" / "report.txt").is_file()
    # The trace ingest, end to end: AACO's importers and analysis must run; any failure of
    # theirs (an ImportError included) is recorded under trace_ingest and fails here.
    assert [f for f in s.meta["failures"] if f["stage"] == "trace_ingest"] == []
    ops = s.table("ops")
    assert ops is not None
    assert set(ops.column("source").to_pylist()) == {"pytorch"}
    assert ops.column("node_name").to_pylist().count("aten::linear") == 6


def test_kwargs_inputs_and_batch_argument(tmp_path: Path) -> None:
    s = run_model(_opts(tmp_path, f"{FIXTURES}:kwargs_model", profile=False, iterations=3))
    assert s.status == "completed", s.error
    assert [i["name"] for i in s.meta["run"]["inputs"]] == ["x", "y"]
    assert s.meta["run"]["batch"] == 3
    assert not (s.path / TORCH_TRACE).exists()

    s2 = run_model(_opts(tmp_path, f"{FIXTURES}:tiny_mlp", profile=False, batch=6))
    assert s2.status == "completed", s2.error
    assert s2.meta["run"]["inputs"][0]["shape"] == [6, 16]
    assert s2.meta["run"]["batch"] == 6 and s2.meta["run"]["batch_source"] == "--batch"


def test_module_function_spec_imports_from_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_models_h6.py").write_text(
        "import torch\ndef build():\n    return torch.nn.Linear(3, 1), (torch.ones(2, 3),)\n"
    )
    monkeypatch.chdir(tmp_path)
    ref = resolve_torch_model("my_models_h6:build")
    assert (ref.kind, ref.target, ref.name) == ("function", "my_models_h6:build", "build")
    s = run_model(_opts(tmp_path, "my_models_h6:build", profile=False, iterations=2))
    assert s.status == "completed", s.error
    assert s.meta["run"]["inputs"][0]["shape"] == [2, 3]


def test_exported_program(tmp_path: Path) -> None:
    from tests.fixtures.torch_models import save_exported_mlp

    pt2 = save_exported_mlp(tmp_path / "mlp.pt2", batch=2)
    s = run_model(_opts(tmp_path, str(pt2), iterations=3, profile_iterations=1))
    assert s.status == "completed", s.error
    assert s.meta["model"]["source"] == "torch-export"
    assert s.meta["run"]["inputs"][0]["shape"] == [2, 16]
    tables = KinetoImporter().read(s.path / TORCH_TRACE)
    assert tables.ops.column("node_name").to_pylist().count("aten::linear") == 2
    with pytest.raises(UsageError, match="--batch does not apply"):
        run_model(_opts(tmp_path, str(pt2), batch=3))


def test_compile_time_measured_apart(tmp_path: Path) -> None:
    s = run_model(
        _opts(tmp_path, f"{FIXTURES}:tiny_mlp", compile=True, iterations=3, profile=False)
    )
    assert s.status == "completed", s.error
    compile_ms = s.meta["run"]["compile_ms"]
    assert compile_ms is not None and compile_ms > 0
    start, end = s.meta["phases"]["compile"]
    assert (end - start) / 1e6 == pytest.approx(compile_ms)
    # the compiling call is before, and not part of, warmup or measured iterations
    assert end <= s.meta["phases"]["warmup"][0]
    assert s.iters().num_rows == 2 + 3  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("model", "error", "fragment"),
    [
        ("nosuch_module_h6:build", InputError, "cannot import module 'nosuch_module_h6'"),
        (f"{FIXTURES}:missing", InputError, "has no attribute 'missing'"),
        (f"{FIXTURES}:module_only", InputError, "must return (nn.Module, example_inputs)"),
        (f"{FIXTURES}:not_a_module", InputError, "must return an nn.Module first, got str"),
        (f"{FIXTURES}:raises", InputError, "raises() raised ValueError: weights missing"),
        ("nofile_h6.py:build", InputError, "file not found: nofile_h6.py"),
        ("just_a_name", UsageError, "give module:function"),
    ],
)
def test_bad_model_is_a_usage_error_and_leaves_no_bundle(
    tmp_path: Path, model: str, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as info:
        run_model(_opts(tmp_path, model))
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
    # the staging bundle was discarded: nothing published, nothing half-written left
    assert not list((tmp_path / "sessions").rglob("session.json"))


def test_bad_options(tmp_path: Path) -> None:
    m = f"{FIXTURES}:tiny_mlp"
    with pytest.raises(UsageError, match="no GPU available to torch"):
        run_model(_opts(tmp_path, m, device="cuda"))
    with pytest.raises(UsageError, match="expected cpu, cuda or cuda:N"):
        run_model(_opts(tmp_path, m, device="tpu"))
    with pytest.raises(UsageError, match="use --device"):
        run_model(_opts(tmp_path, m, backend="cuda"))
    with pytest.raises(UsageError, match="--shape does not apply"):
        run_model(_opts(tmp_path, m, shapes={"x": [1, 2]}))
    with pytest.raises(UsageError, match="--device cpu runs none"):
        run_model(_opts(tmp_path, m, profile_mode="kernels"))
    with pytest.raises(UsageError, match="--compile applies to --framework torch"):
        run_model(RunOptions(model="mlp", compile=True, output=tmp_path))
    with pytest.raises(UsageError, match="--device applies to --framework torch"):
        run_model(RunOptions(model="mlp", device="cuda", output=tmp_path))
    assert not list(tmp_path.rglob("session.json"))


def test_torch_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # find_spec reports a module set to None in sys.modules as absent, like an uninstalled one
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UsageError) as info:
        run_model(_opts(tmp_path, f"{FIXTURES}:tiny_mlp"))
    assert str(info.value) == "PyTorch is not installed; install it with pip install 'aaco[torch]'"


def test_compile_needs_dynamo() -> None:
    no_compile = SimpleNamespace(__version__="1.13.1")
    with pytest.raises(UsageError, match=r"torch 1\.13\.1 lacks it"):
        _check_compile(no_compile)
    _check_compile(torch)  # the installed torch has it


def test_load_model_moves_nothing_it_cannot(tmp_path: Path) -> None:
    loaded = load_model(f"{FIXTURES}:tiny_mlp", "function", "cpu", batch=5)
    assert loaded.batch() == 5
    assert loaded.describe_inputs() == [{"name": "arg0", "shape": [5, 16], "dtype": "float32"}]
    out = loaded.module(*loaded.args)
    assert tuple(out.shape) == (5, 8)


def test_spec_round_trips() -> None:
    spec = TorchRunSpec(
        model="m:f",
        model_kind="function",
        device="cpu",
        compile=True,
        batch=None,
        warmup=1,
        iterations=None,
        duration_s=0.5,
        threads=2,
        seed=3,
        profile=True,
        profile_warmup=2,
        profile_iterations=4,
        bundle_dir="/x",
        sys_path=("/a", "/b"),
    )
    assert TorchRunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_worker_timeout_is_recorded(tmp_path: Path) -> None:
    s = run_model(_opts(tmp_path, f"{FIXTURES}:sleepy", timeout_s=4.0))
    assert s.status == "timeout"
    assert "exceeded the 4 s timeout during stage 'load'" in s.error["message"]  # type: ignore[index]
