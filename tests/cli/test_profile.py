"""`aaco profile -- CMD` end to end: real subprocesses, a real PyTorch program, and a stand-in
`rocprofv3` on PATH that writes the rocprofv3 CSVs recorded in tests/importers/fixtures."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from tests.cli.test_cli import AACO, assert_one_line_error

from aaco.session.bundle import Session, iter_sessions

ROCPROF_RUN = Path(__file__).resolve().parents[1] / "importers" / "fixtures" / "rocprof" / "v3"
ROCPROF_NODE = ROCPROF_RUN / "run" / "node1"
PY = sys.executable


def profile(
    root: Path, *args: str, env: dict[str, str] | None = None, module: bool = False
) -> subprocess.CompletedProcess[str]:
    """``aaco profile -o ROOT ARGS...`` in a subprocess, its output captured."""
    cmd = [PY, "-m", "aaco"] if module else [AACO]
    full_env = dict(os.environ, NO_COLOR="1", COLUMNS="120", **(env or {}))
    return subprocess.run(
        [*cmd, "profile", "-o", str(root), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def only_bundle(root: Path) -> Session:
    bundles = list(iter_sessions(root))
    assert len(bundles) == 1, bundles
    return Session.load(bundles[0])


def test_profiles_a_python_program_into_a_completed_bundle(tmp_path: Path) -> None:
    root = tmp_path / "s"
    program = "import sys; print('out-line'); print('err-line', file=sys.stderr); sum(range(10**5))"
    proc = profile(root, "--", PY, "-c", program)
    assert proc.returncode == 0, proc.stderr
    # the command's own output passes through, then the report, then the bundle line
    assert proc.stdout.startswith("out-line\n")
    assert "err-line" in proc.stderr
    assert "AACO session" in proc.stdout and "Latency (ms)" in proc.stdout
    session = only_bundle(root)
    assert proc.stderr.rstrip().endswith(f"bundle: {session.path}")
    meta = session.meta
    assert (meta["kind"], meta["status"], meta["error"]) == ("profile", "completed", None)
    prof = meta["profile"]
    assert prof["command"] == [PY, "-c", program]
    assert prof["exit_status"] == 0 and prof["exit_statuses"] == [0]
    tracer = prof["tracer"]
    assert tracer["requested"] == "auto"
    if importlib.util.find_spec("torch") is not None:
        # this interpreter has torch: auto picks the torch tracer and says why; the program
        # never imports torch, so there is no trace, and the bundle says that too
        assert tracer["name"] == "torch" and "can import torch" in tracer["reason"]
        assert tracer["status"] == "failed" and "imported torch" in tracer["error"]
        assert any(
            "imported torch" in w
            for w in session.summary["warnings"] + [f["error"] for f in meta["failures"]]
        )
    else:
        assert tracer["name"] == "none" and "cannot" not in tracer["reason"]
    iters = session.iters()
    assert iters is not None and iters.column("phase").to_pylist() == ["measured"]
    wall = prof["runs"][0]["wall_s"]
    assert iters.column("latency_ns")[0].as_py() == pytest.approx(wall * 1e9, abs=1)
    assert (session.path / prof["runs"][0]["stdout_tail"]).read_text() == "out-line\n"
    assert "err-line" in (session.path / prof["runs"][0]["stderr_tail"]).read_text()
    analysis = json.loads((session.path / "analysis.json").read_text())
    assert analysis["session"]["id"] == session.session_id
    assert analysis["exit_status"] == 0
    assert analysis["wall_time_s"]["median"] == pytest.approx(wall)
    assert analysis["tracer"]["name"] == tracer["name"]
    assert analysis["dominant_kernels"] is None  # no trace: unknown, not "none"
    # telemetry watched the command's process tree
    assert meta["telemetry"]["scope"] == "process_tree"


def test_repeat_records_one_iteration_row_per_run(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc = profile(root, "--repeat", "3", "--tracer", "none", "-f", "json", "--", "sh", "-c", ":")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["latency_ms"]["count"] == 3
    session = only_bundle(root)
    iters = session.iters()
    assert iters is not None
    assert iters.column("phase").to_pylist() == ["measured"] * 3
    assert iters.column("iteration").to_pylist() == [0, 1, 2]
    runs = session.meta["profile"]["runs"]
    assert [r["run"] for r in runs] == [1, 2, 3] and not any(r["traced"] for r in runs)
    assert session.meta["run"]["iterations"] == 3
    analysis = json.loads((session.path / "analysis.json").read_text())
    wall = analysis["wall_time_s"]
    assert wall["runs"] == 3 and wall["min"] <= wall["median"] <= wall["max"]
    assert wall["cov"] is not None
    assert analysis["exit_statuses"] == [0, 0, 0]


def test_failing_command_is_a_failed_bundle_and_its_exit_status(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc = profile(root, "--repeat", "2", "--", "sh", "-c", "echo broken >&2; exit 3")
    assert "broken" in proc.stderr
    proc_err = subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout, proc.stderr.replace("broken\n", "", 1)
    )
    assert_one_line_error(proc_err, 3, "exited with status 3", "failed bundle:")
    session = only_bundle(root)
    assert str(session.path) in proc.stderr
    assert session.status == "failed"
    assert session.error is not None
    assert session.error["message"].startswith("run 1 of 2: exited with status 3: broken")
    assert "1 more run(s) skipped" in session.error["message"]
    assert session.meta["profile"]["exit_status"] == 3
    assert session.meta["profile"]["exit_statuses"] == [3]  # the second run never started
    assert (session.path / "analysis.json").is_file()
    # the bundle reads like any other
    shown = subprocess.run(
        [AACO, "report", "-s", str(session.path)], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and "exited with status 3" in shown.stdout


def test_missing_command_exits_127_with_a_failed_bundle(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc = profile(root, "--", "no-such-command-aaco", "--flag")
    assert_one_line_error(proc, 127, "command not found: no-such-command-aaco")
    session = only_bundle(root)
    assert session.status == "failed"
    assert session.meta["profile"]["exit_status"] == 127
    assert session.meta["profile"]["tracer"]["name"] == "none"
    assert session.iters() is None  # nothing ran: no wall time to report


def test_command_killed_by_a_signal_exits_128_plus_the_signal(tmp_path: Path) -> None:
    proc = profile(tmp_path / "s", "--tracer", "none", "--", "sh", "-c", "kill -TERM $$")
    assert_one_line_error(proc, 128 + signal.SIGTERM, "killed by SIGTERM")


def test_unknown_tracer_is_a_one_line_error_listing_the_valid_names(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc = profile(root, "--tracer", "perfx", "--", "true")
    assert_one_line_error(proc, 2, "unknown --tracer 'perfx'", "auto", "none", "rocprofv3", "torch")
    assert not list(iter_sessions(root))  # a usage error makes no bundle


def test_interrupt_is_forwarded_to_the_command_and_leaves_a_failed_bundle(tmp_path: Path) -> None:
    root = tmp_path / "s"
    program = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('child got SIGINT', flush=True), "
        "sys.exit(5)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.Popen(
        [
            AACO,
            "profile",
            "-o",
            str(root),
            "--tracer",
            "none",
            "-f",
            "none",
            "--",
            PY,
            "-c",
            program,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "child got SIGINT" in out  # exactly one SIGINT reached the command
    assert "Traceback" not in err
    session = only_bundle(root)
    assert session.status == "failed"
    assert session.meta["profile"]["runs"][0]["interrupted_by"] == "SIGINT"
    assert "interrupted: SIGINT was forwarded" in session.error["message"]  # type: ignore[index]
    assert "exited with status 5" in session.error["message"]  # type: ignore[index]
    assert (session.path / "analysis.json").is_file()


TORCH_PROGRAM = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
x = torch.randn(4, 32)
with torch.no_grad():
    for _ in range(5):
        model(x)
print("trained")
"""


def test_torch_tracer_profiles_an_unmodified_pytorch_program(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    prog = tmp_path / "prog.py"
    prog.write_text(TORCH_PROGRAM)
    root = tmp_path / "s"
    proc = profile(root, "--tracer", "torch", "--", PY, str(prog))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("trained\n")
    session = only_bundle(root)
    tracer = session.meta["profile"]["tracer"]
    assert (tracer["name"], tracer["reason"], tracer["status"]) == (
        "torch",
        "--tracer torch",
        "completed",
    )
    (trace,) = tracer["files"]
    assert trace == f"profiler/torch_traces/{session.meta['profile']['runs'][0]['pid']}.json"
    ops = session.ops()
    assert ops is not None and ops.num_rows > 0
    names = set(ops.column("node_name").to_pylist())
    assert {"aten::linear", "aten::relu"} <= names
    assert pc.all(pc.equal(ops.column("source"), "pytorch")).as_py()
    assert session.meta["imports"][0]["importers"] == ["kineto"]
    analysis = json.loads((session.path / "analysis.json").read_text())
    top = [o["name"] for o in analysis["dominant_ops"]]
    assert "aten::linear" in top
    assert sum(o["share"] for o in analysis["dominant_ops"]) <= 1.0 + 1e-9
    assert "aten::linear" in proc.stdout  # the report printed after the run
    # every other command reads the bundle
    for args in (["report", "-s", str(session.path)], ["ls", "--sessions", str(root)]):
        shown = subprocess.run([AACO, *args], capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
    listed = subprocess.run(
        [AACO, "ls", "--sessions", str(root), "--json"], capture_output=True, text=True
    )
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]  # JSON lines
    assert (row["kind"], row["backend"], row["status"]) == ("profile", "torch tracer", "completed")


def _fake_rocprofv3(bin_dir: Path) -> Path:
    """A stand-in ``rocprofv3``: runs the command after ``--``, then writes the recorded
    rocprofv3 CSVs where rocprofv3 would (``-d DIR``, ``-o %hostname%/%pid%``), the counter
    file only when asked for counters (``--pmc``), as rocprofv3 does."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "rocprofv3"
    script.write_text(
        f"#!{PY}\n"
        + textwrap.dedent(
            f"""
            import json, os, shutil, socket, subprocess, sys
            args = sys.argv[1:]
            cut = args.index("--")
            opts, cmd = args[:cut], args[cut + 1:]
            with open(os.environ["FAKE_ROCPROFV3_LOG"], "w") as fh:
                json.dump(opts, fh)
            rc = subprocess.call(cmd)
            dest = os.path.join(opts[opts.index("-d") + 1], socket.gethostname())
            os.makedirs(dest, exist_ok=True)
            node = {str(ROCPROF_NODE)!r}
            for name in sorted(os.listdir(node)):
                if name.endswith("_counter_collection.csv") and "--pmc" not in opts:
                    continue
                if name.endswith(".csv"):
                    shutil.copy(os.path.join(node, name), dest)
            sys.exit(rc)
            """
        )
    )
    script.chmod(0o755)
    return script


def test_rocprofv3_tracer_end_to_end_with_counters(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_rocprofv3(bin_dir)
    log = tmp_path / "rocprofv3_args.json"
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_ROCPROFV3_LOG": str(log)}
    root = tmp_path / "s"
    proc = profile(
        root,
        "--counters",
        "SQ_WAVES,SQ_INSTS_VALU",
        "--",
        "sh",
        "-c",
        "echo app-ran",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("app-ran\n")
    opts = json.loads(log.read_text())
    assert opts[:3] == ["--kernel-trace", "--hip-trace", "--memory-copy-trace"]
    assert opts[opts.index("--pmc") + 1] == "SQ_WAVES,SQ_INSTS_VALU"
    session = only_bundle(root)
    tracer = session.meta["profile"]["tracer"]
    # auto: rocprofv3 is on PATH
    assert tracer["name"] == "rocprofv3" and "rocprofv3 is on PATH" in tracer["reason"]
    assert tracer["status"] == "completed" and tracer["counters"] == ["SQ_WAVES", "SQ_INSTS_VALU"]
    assert session.meta["backend"]["name"] == "rocprofv3 tracer"
    kernels = session.table("kernels")
    assert kernels is not None
    assert sorted(kernels.column("name").to_pylist()) == [
        "gemm_fp64_kernel(double*, double*, int)",
        "scale_kernel(double*, int)",
    ]
    counters = session.table("kernel_counters")
    assert counters is not None and counters.num_rows > 0
    assert "GPU 0 time" in proc.stdout and "gemm_fp64_kernel" in proc.stdout
    analysis = json.loads((session.path / "analysis.json").read_text())
    top = analysis["dominant_kernels"]
    assert top[0]["name"].startswith("gemm_fp64_kernel")
    assert top[0]["share"] == pytest.approx(444520 / (444520 + 12345))
    assert analysis["roofline"] is not None  # counters were collected
    assert analysis["roofline"]["kernel_counters"]
    assert analysis["tracer"]["name"] == "rocprofv3"
    # the recorded trace has HIP API calls and GPU activity: a critical path over them
    path = analysis["critical_path"]
    assert path is not None and path["length_ms"] > 0 and path["by_category"]
    assert analysis["bottleneck"] is not None and analysis["what_to_fix_first"] is not None


def test_python_dash_m_aaco_profile_matches(tmp_path: Path) -> None:
    proc = profile(tmp_path / "s", "--tracer", "none", "-f", "none", "--", "true", module=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("bundle: ")


def test_timeout_kills_the_command_and_exits_124(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = profile(tmp_path / "s", "--tracer", "none", "--timeout", "0.5", "--", "sleep", "30")
    assert time.monotonic() - start < 25
    assert_one_line_error(proc, 124, "timed out after 0.5 s")
    assert only_bundle(tmp_path / "s").status == "timeout"
