"""End-to-end tests of the command line: real subprocesses, real ONNX Runtime sessions."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import psutil
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper
from tests.onnx_models import make_matmul_chain

from aaco.session.bundle import Session, iter_sessions

AACO = shutil.which("aaco", path=str(Path(sys.executable).parent)) or "aaco"


def aaco(
    *args: str, cwd: Path | None = None, module: bool = False, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "aaco", *args] if module else [AACO, *args]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str], code: int, *fragments: str
) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("bundle: ")]
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.fixture(scope="module")
def mlp_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("cli") / "sessions"
    proc = aaco(
        "run",
        "--model",
        "mlp",
        "--warmup",
        "5",
        "--iterations",
        "40",
        "--profile-iterations",
        "3",
        "--tag",
        "ci <b>",
        "-o",
        str(root),
    )
    return root, proc


def test_run_writes_a_complete_bundle(
    mlp_session: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, proc = mlp_session
    assert proc.returncode == 0, proc.stderr
    assert "Latency (ms)" in proc.stdout and "Top operators" in proc.stdout
    bundles = list(iter_sessions(root))
    assert len(bundles) == 1
    b = bundles[0]
    for rel in (
        "session.json",
        "env.json",
        "model/model_meta.json",
        "model/graph_nodes.parquet",
        "model/graph_edges.parquet",
        "runtime/ort_config.json",
        "telemetry/system_events.parquet",
        "profiler/ops.parquet",
        "profiler/ort_runs.parquet",
        "metrics/inference_iters.parquet",
        "metrics/inference_summary.json",
    ):
        assert (b / rel).is_file(), rel
    assert list((b / "profiler" / "ort_profile_raw").glob("*.json"))
    assert not list(b.rglob("*.tmp")), "temporary files left behind"
    s = Session.load(root / "latest")
    assert s.status == "completed" and s.meta["tag"] == "ci <b>"
    iters = s.iters()
    assert iters is not None
    phases = iters.column("phase").to_pylist()
    assert phases.count("warmup") == 5 and phases.count("measured") == 40
    lat = s.summary["latency_ms"] if s.summary else {}
    assert lat["count"] == 40 and 0 < lat["p50"] <= lat["p99"]
    ops = s.ops()
    assert ops is not None and ops.num_rows > 0
    assert sorted(set(ops.column("iteration").to_pylist())) == [0, 1, 2]
    # every profiled node name exists in the optimized graph ORT ran
    nodes = s.table("graph_nodes")
    assert nodes is not None
    optimized = {r["node_name"] for r in nodes.to_pylist() if r["graph"] == "optimized"}
    assert set(ops.column("node_name").to_pylist()) <= optimized
    ev = s.system_events()
    assert ev is not None and ev.num_rows >= 2
    ts = ev.column("ts_ns").to_pylist()
    starts = iters.column("start_ns").to_pylist()
    # same clock: samples and iterations lie within seconds of each other (an epoch clock
    # would be decades away), samples are ordered and spaced at about 1 / 10 Hz
    assert abs(min(ts) - min(starts)) < 10e9
    assert ts == sorted(ts)
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    assert all(0.05e9 < g < 0.5e9 for g in gaps[:-1]), gaps
    # the worker's own peak RSS (its VmHWM) is known, and above any sampled value; aaco's
    # own peak is recorded beside it
    worker = s.summary["worker"] if s.summary else None
    assert worker and worker["max_rss_source"] == "worker"
    assert worker["max_rss_bytes"] >= max(ev.column("proc_rss_bytes").to_pylist())
    assert s.meta["aaco_process"]["max_rss_bytes"] > 0
    assert worker["cpu_user_s"] > 0
    # files are readable by others (umask), the optimized graph is kept without its weights
    assert (b / "session.json").stat().st_mode & 0o044
    assert not (b / "model" / "optimized.weights").exists()
    env = json.loads((b / "env.json").read_text())
    assert env["fingerprint"] and "onnxruntime" in env


def test_report_json_is_stable_and_same_via_module(
    mlp_session: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, _ = mlp_session
    a = aaco("report", "--sessions", str(root), "--format", "json")
    b = aaco("report", "--session", str(root / "latest"), "--format", "json", module=True)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    r = json.loads(a.stdout)
    assert {
        "session",
        "model",
        "backend",
        "status",
        "summary",
        "top_ops",
        "telemetry",
        "warnings",
    } <= set(r)
    assert set(r["summary"]["latency_ms"]) >= {
        "mean",
        "std",
        "min",
        "max",
        "p50",
        "p90",
        "p95",
        "p99",
        "cov",
    }
    assert r["summary"]["throughput"] == pytest.approx(
        1000 / r["summary"]["latency_ms"]["mean"]
    )  # batch 1
    assert r["top_ops"] and {"name", "op_type", "total_ms", "pct", "calls"} <= set(r["top_ops"][0])
    assert sum(op["pct"] for op in r["top_op_types"]) == pytest.approx(100.0)
    assert r["model"]["parameter_count"] == 399_370


def test_report_to_file_and_terminal(
    mlp_session: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    root, _ = mlp_session
    out = tmp_path / "r.json"
    p = aaco("report", "--sessions", str(root), "-f", "json", "-o", str(out))
    assert p.returncode == 0 and json.loads(out.read_text())["status"] == "completed"
    t = aaco("report", "--sessions", str(root))
    assert t.returncode == 0 and "telemetry" in t.stdout and "mlp" in t.stdout


def test_ls_lists_sessions(mlp_session: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    root, _ = mlp_session
    p = aaco("ls", "--sessions", str(root))
    assert p.returncode == 0 and "mlp" in p.stdout and "completed" in p.stdout
    j = aaco("ls", "--sessions", str(root), "--json")
    row = json.loads(j.stdout.splitlines()[0])
    assert row["model"] == "mlp" and row["p50_ms"] > 0


def test_info_and_models_list() -> None:
    p = aaco("info", "--json")
    assert p.returncode == 0
    desc = json.loads(p.stdout)
    assert "CPUExecutionProvider" in desc["onnxruntime"]["available_providers"]
    assert "rocprofv3" in desc["tools"]
    m = aaco("models", "list", "--json")
    rows = {r["name"]: r for r in json.loads(m.stdout)}
    assert rows["resnet50"]["parameter_count"] == 25_610_152
    assert rows["bert-base"]["parameter_count"] == 109_482_240
    v = aaco("--version")
    assert v.returncode == 0 and v.stdout.startswith("aaco ")


def test_duration_mode_and_user_file_with_dynamic_batch(tmp_path: Path) -> None:
    model = make_matmul_chain(tmp_path / "chain.onnx")
    root = tmp_path / "s"
    p = aaco(
        "run",
        "--model",
        str(model),
        "--batch",
        "4",
        "--duration",
        "0.5",
        "--no-profile",
        "--no-telemetry",
        "--report",
        "json",
        "-o",
        str(root),
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["backend"]["batch"] == 4
    assert r["summary"]["latency_ms"]["count"] > 10
    assert r["summary"]["throughput"] == pytest.approx(4 * r["summary"]["iterations_per_s"])
    assert r["top_ops"] == [] and r["telemetry"] is None
    s = Session.load(root / "latest")
    assert s.ops() is None and s.system_events() is None
    assert s.meta["run"]["inputs"][0]["shape"] == [4, 64]


# -- bad input: one line, the right exit code, nothing half-written ------------------------------


def _not_onnx(tmp: Path) -> Path:
    p = tmp / "notes.onnx"
    p.write_text("this is not a model\n")
    return p


def _external(tmp: Path) -> Path:
    """A model saved with external weights, whose weights file is then lost."""
    folder = tmp / "ext"
    folder.mkdir()
    m = onnx.load(str(make_matmul_chain(tmp / "ext_src.onnx", width=32)))
    onnx.save(
        m,
        str(folder / "m.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    (folder / "weights.bin").unlink()
    return folder / "m.onnx"


def _rejected(tmp: Path) -> Path:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    p = tmp / "rejected.onnx"
    onnx.save(m, str(p))
    return p


@pytest.mark.parametrize(
    ("case", "code", "fragments"),
    [
        ("missing_model", 2, ["model file not found"]),
        ("not_onnx", 2, ["notes.onnx", "not an ONNX model"]),
        ("unknown_model", 2, ["unknown model 'nosuch'", "resnet50"]),
        ("unknown_backend", 2, ["unknown backend 'quantum'"]),
        (
            "unavailable_provider",
            2,
            ["MIGraphXExecutionProvider", "available: ", "CPUExecutionProvider"],
        ),
        ("malformed_shape", 2, ["malformed --shape 'x=1xQ'"]),
        ("unknown_input", 2, ["'nope'", "its inputs are: x"]),
        ("unknown_dim", 2, ["input 'x': dimension 1", "--shape x="]),
        ("both_iterations_and_duration", 2, ["--iterations or --duration"]),
        ("bad_option", 2, ["No such option"]),
        ("batch_without_effect", 2, ["--batch 8 has no effect"]),
        ("nan_duration", 2, ["--duration must be a finite number > 0"]),
        ("negative_seed", 2, ["--seed must be >= 0"]),
        ("sample_rate_too_high", 2, ["--sample-hz must be <= 1000"]),
        ("duration_over_timeout", 2, ["must be shorter than --timeout"]),
        ("missing_external_data", 2, ["external weights file", "missing"]),
        ("unwritable_output", 2, ["cannot write sessions"]),
    ],
)
def test_bad_input(tmp_path: Path, case: str, code: int, fragments: list[str]) -> None:
    chain = make_matmul_chain(tmp_path / "chain.onnx")
    dyn = make_matmul_chain(tmp_path / "dyn.onnx", width=8, batch="b")
    # a model whose second dim is symbolic too
    m = onnx.load(str(dyn))
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    onnx.save(m, str(dyn))
    root = tmp_path / "sessions"
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    args = {
        "missing_model": ["--model", str(tmp_path / "absent.onnx")],
        "not_onnx": ["--model", str(_not_onnx(tmp_path))],
        "unknown_model": ["--model", "nosuch"],
        "unknown_backend": ["--model", str(chain), "--backend", "quantum"],
        "unavailable_provider": ["--model", str(chain), "--backend", "migraphx"],
        "malformed_shape": ["--model", str(chain), "--shape", "x=1xQ"],
        "unknown_input": ["--model", str(chain), "--shape", "nope=1x64"],
        "unknown_dim": ["--model", str(dyn)],
        "both_iterations_and_duration": [
            "--model",
            str(chain),
            "--iterations",
            "3",
            "--duration",
            "1",
        ],
        "bad_option": ["--model", str(chain), "--frobnicate"],
        "batch_without_effect": ["--model", str(chain), "--shape", "x=2x64", "--batch", "8"],
        "nan_duration": ["--model", str(chain), "--duration", "nan"],
        "negative_seed": ["--model", str(chain), "--seed", "-1"],
        "sample_rate_too_high": ["--model", str(chain), "--sample-hz", "1e6"],
        "duration_over_timeout": ["--model", str(chain), "--duration", "10", "--timeout", "5"],
        "missing_external_data": ["--model", str(_external(tmp_path))],
        "unwritable_output": ["--model", str(chain)],
    }[case]
    out = blocker / "sessions" if case == "unwritable_output" else root
    p = aaco("run", *args, "-o", str(out), "--warmup", "1")
    assert_one_line_error(p, code, *fragments)
    assert not root.exists() or not list(iter_sessions(root)), (
        "a usage error must not leave a bundle"
    )


def test_model_onnxruntime_rejects_is_a_failed_bundle(tmp_path: Path) -> None:
    root = tmp_path / "s"
    p = aaco("run", "--model", str(_rejected(tmp_path)), "-o", str(root), "--iterations", "3")
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert "onnxruntime rejected the model" in p.stderr and "NoSuchOp" in p.stderr
    s = Session.load(root / "latest")
    assert s.status == "failed"
    assert s.error is not None and "NoSuchOp" in s.error["message"] and s.error["stage"] == "load"
    assert s.iters() is None and s.summary is not None and s.summary["latency_ms"] is None
    r = aaco("report", "--sessions", str(root), "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "failed"


def test_timeout_is_recorded(tmp_path: Path) -> None:
    root = tmp_path / "s"
    p = aaco("run", "--model", "mlp", "--iterations", "10000000", "--timeout", "3", "-o", str(root))
    assert p.returncode == 1 and "timeout" in p.stderr
    s = Session.load(root / "latest")
    assert s.status == "timeout" and "3 s timeout" in (s.error or {}).get("message", "")
    assert s.system_events() is not None  # telemetry up to the kill is kept


def _start_long_run(root: Path) -> tuple[subprocess.Popen[str], psutil.Process]:
    """Start a 60 s run and return it with its worker, once the worker is measuring."""
    proc = subprocess.Popen(
        [AACO, "run", "--model", "mlp", "--duration", "60", "-o", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
    )
    parent = psutil.Process(proc.pid)
    deadline = time.time() + 30
    while time.time() < deadline:
        kids = [c for c in parent.children() if "aaco.runners.harness" in " ".join(c.cmdline())]
        progress = list(root.rglob("worker_progress.jsonl")) if root.exists() else []
        if kids and progress and '"measure"' in progress[0].read_text():
            return proc, kids[0]
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the worker never reached the measured phase")


def test_worker_killed_is_recorded(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc, worker = _start_long_run(root)
    os.kill(worker.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "killed by SIGKILL during stage 'measure'" in err
    assert Session.load(root / "latest").status == "failed"


def test_report_on_a_path_that_is_not_a_bundle(tmp_path: Path) -> None:
    assert_one_line_error(aaco("report", "--session", str(tmp_path)), 2, "not a session bundle")
    assert_one_line_error(
        aaco("report", "--sessions", str(tmp_path / "none")), 2, "no such session bundle"
    )


def test_debug_shows_traceback(tmp_path: Path) -> None:
    p = aaco("--debug", "report", "--session", str(tmp_path))
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_parameters_of_the_built_bundle_are_readable_with_pyarrow(
    mlp_session: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, _ = mlp_session
    b = next(iter_sessions(root))
    t = pq.read_table(b / "metrics" / "inference_iters.parquet")
    assert t.schema.field("latency_ns").type == "int64"


def test_sigterm_publishes_a_failed_bundle_and_kills_the_worker(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc, worker = _start_long_run(root)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    s = Session.load(root / "latest")
    assert s.status == "failed" and "interrupted" in (s.error or {}).get("message", "")
    time.sleep(0.5)
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE


def test_every_command_is_listed_with_its_own_help_without_loading_it() -> None:
    """`aaco --help` lists the commands from aaco.cli.COMMANDS without importing their
    modules: each listed line must be the start of the command's real short help, and every
    command the table names must load."""
    import importlib

    import click

    from aaco.cli import COMMANDS, app

    for name, (module, attr, listed) in COMMANDS.items():
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), name
        real = command.get_short_help_str(limit=1000)
        assert real.startswith(listed.removesuffix("...")), (name, listed, real)
        assert app.get_command(click.Context(app), name) is command
    proc = aaco("--help")
    assert proc.returncode == 0
    assert all(name in proc.stdout for name in COMMANDS)


def test_help_and_version_import_no_heavy_module() -> None:
    code = (
        "import sys; from aaco.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('pyarrow', 'numpy', 'onnx', 'scipy', 'jinja2', 'onnxruntime') "
        "if m in sys.modules]\nprint(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[]"), proc.stdout
