"""`aaco import` and `aaco export perfetto` end to end: real subprocesses, real fixture files."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from tests.cli.test_cli import aaco, assert_one_line_error

from aaco.session.bundle import Session, iter_sessions

FIXTURES = Path(__file__).resolve().parents[1] / "importers" / "fixtures"
ORT_CUDA = FIXTURES / "ort" / "cuda_ep_profile.json"
KINETO_CPU = FIXTURES / "kineto" / "cpu_mlp.json.gz"
ROCPROF_DIR = FIXTURES / "rocprof" / "v3" / "run"


def _imported(root: Path, *paths: Path) -> Session:
    proc = aaco("import", *map(str, paths), "--output", str(root), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("imported into ")
    report = json.loads(proc.stdout)
    session = Session.load(root / "latest")
    assert report["session"]["id"] == session.session_id
    return session


def test_import_ort_profile_reports_kernels_families_attribution(tmp_path: Path) -> None:
    session = _imported(tmp_path / "s", ORT_CUDA)
    assert session.status == "completed"
    assert session.meta["kind"] == "import"
    report = json.loads((session.path / "report" / "report.json").read_text())
    m = report["metrics"]
    assert m["kernel_count"] == 8
    assert m["gpu_active_ratio"] is None  # ORT kernel starts are not GPU times: unknown
    assert m["microkernel_pct"] == pytest.approx(75.0)
    top = report["top_kernels"][0]
    assert top["name"].startswith("_Z23implicit_convolve_sgemm")  # as ORT reports it
    assert top["short_name"] == "implicit_convolve_sgemm"
    assert (top["family"], top["calls"]) == ("conv", 2)
    assert top["total_ms"] == pytest.approx(0.062)
    assert top["avg_us"] == pytest.approx(31.0)
    assert top["pct"] == pytest.approx(62 / 92 * 100)
    families = {f["family"]: f["calls"] for f in report["kernel_families"]}
    assert families == {"conv": 2, "gemm": 2, "elementwise": 4}
    assert report["attribution"]["kernels_attributed_fraction"] == 1.0
    groups = {g["op_name"]: g for g in report["top_op_kernels"]}
    assert groups["fc"]["kernel_count"] == 4 and groups["fc"]["op_calls"] == 2
    for rel in (
        "profiler/kernels.parquet",
        "profiler/memcpy.parquet",
        "attribution/op_to_kernel_map.parquet",
        "attribution/kernel_groups.parquet",
        "metrics/derived_metrics.json",
        "profiler/import.json",
        "report/report.txt",
    ):
        assert (session.path / rel).is_file(), rel
    record = json.loads((session.path / "profiler" / "import.json").read_text())
    assert record["importers"] == ["onnxruntime"]
    assert record["files"][0]["path"] == str(ORT_CUDA.resolve())


def test_import_rocprofv3_directory_and_terminal_report(tmp_path: Path) -> None:
    root = tmp_path / "s"
    proc = aaco("import", str(ROCPROF_DIR), "--output", str(root))
    assert proc.returncode == 0, proc.stderr
    assert "Top kernels" in proc.stdout
    assert "gemm_fp64_kernel" in proc.stdout
    assert "GPU 0 time" in proc.stdout
    kernels = Session.load(root / "latest").table("kernels")
    assert kernels is not None
    assert sorted(kernels.column("source").to_pylist()) == ["rocprofv3-csv"] * 2


def test_import_cpu_kineto_trace_ranks_top_level_ops(tmp_path: Path) -> None:
    session = _imported(tmp_path / "s", KINETO_CPU)
    report = json.loads((session.path / "report" / "report.json").read_text())
    names = [op["name"] for op in report["top_ops"]]
    assert names == ["aten::linear", "aten::relu"]  # nested aten::addmm is not double counted
    assert sum(op["pct"] for op in report["top_ops"]) == pytest.approx(100.0)
    assert report["metrics"]["kernel_count"] == 0
    assert report["top_kernels"] == []


def test_import_into_existing_bundle_then_replace(tmp_path: Path) -> None:
    base = _imported(tmp_path / "s", KINETO_CPU)
    ops_before = base.ops()
    assert ops_before is not None
    proc = aaco("import", str(ROCPROF_DIR), "--session", str(base.path), "--format", "none")
    assert_one_line_error(proc, 2, "already holds an imported trace", "--replace")
    for _ in range(2):  # replacing twice must not pile up rows
        proc = aaco(
            "import", str(ORT_CUDA), "--session", str(base.path), "--replace", "--format", "none"
        )
        assert proc.returncode == 0, proc.stderr
        s = Session.load(base.path)
        kernels, ops = s.table("kernels"), s.ops()
        assert kernels is not None and ops is not None
        assert kernels.num_rows == 8
        assert ops.num_rows == 10  # the ORT profile's node rows; the Kineto rows were replaced
    assert len(s.meta["imports"]) == 1


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (lambda d: d / "missing.json", ("missing.json", "no such file")),
        (lambda d: _write(d / "notes.txt", b"hello\n"), ("notes.txt", "not a recognised trace")),
        (lambda d: _write(d / "empty.json", b""), ("empty.json", "empty")),
        (
            lambda d: _write(d / "cut.json.gz", gzip.decompress(KINETO_CPU.read_bytes())[:900]),
            ("cut.json.gz",),
        ),
    ],
    ids=["missing", "unrecognised", "empty", "truncated"],
)
def test_bad_trace_is_one_line_and_leaves_no_bundle(
    tmp_path: Path, make: object, fragments: tuple[str, ...]
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    root = tmp_path / "sessions"
    proc = aaco("import", str(path), "--output", str(root))
    assert_one_line_error(proc, 2, *fragments)
    assert list(iter_sessions(root)) == [] if root.exists() else True
    if root.exists():
        leftovers = [p for p in root.rglob("*") if p.name.endswith(".partial")]
        assert leftovers == []


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_import_options_conflict(tmp_path: Path) -> None:
    proc = aaco("import", str(ORT_CUDA), "--session", str(tmp_path), "--output", str(tmp_path))
    assert_one_line_error(proc, 2, "either --session")
    proc = aaco("import", str(ORT_CUDA), "--replace", "--output", str(tmp_path))
    assert_one_line_error(proc, 2, "--replace only applies with --session")
    proc = aaco("import", str(ORT_CUDA), "--session", str(tmp_path / "nope"))
    assert_one_line_error(proc, 2, "no such session bundle")


def test_export_perfetto_of_an_import(tmp_path: Path) -> None:
    session = _imported(tmp_path / "s", ORT_CUDA)
    out = tmp_path / "trace.json.gz"
    proc = aaco("export", "perfetto", "--session", str(session.path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "ui.perfetto.dev" in proc.stderr
    trace = json.loads(gzip.decompress(out.read_bytes()))
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e["name"] == "implicit_convolve_sgemm"]
    assert len(kernels) == 2
    starts = {e["id"] for e in events if e.get("ph") == "s"}
    ends = {e["id"] for e in events if e.get("ph") == "f"}
    assert starts == ends and len(starts) == 8  # one arrow per attributed kernel
    # `aaco report -f perfetto -o X.gz` writes the same trace, compressed as well
    again = tmp_path / "report.json.gz"
    proc = aaco("report", "-s", str(session.path), "-f", "perfetto", "-o", str(again))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(gzip.decompress(again.read_bytes())) == trace


def test_export_perfetto_plain_json_and_bad_session(tmp_path: Path) -> None:
    session = _imported(tmp_path / "s", KINETO_CPU)
    out = tmp_path / "t.json"
    proc = aaco("export", "perfetto", "-s", str(session.path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["traceEvents"]
    proc = aaco("export", "perfetto", "-s", str(tmp_path / "none"), "-o", str(out))
    assert_one_line_error(proc, 2, "no such session bundle")
    shutil.rmtree(session.path / "profiler")
    proc = aaco("export", "perfetto", "-s", str(session.path), "-o", str(tmp_path / "x.json"))
    assert proc.returncode == 0, proc.stderr  # a bundle without trace tables still exports


def test_import_timings_name_every_stage(tmp_path: Path) -> None:
    proc = aaco("import", str(KINETO_CPU), "--output", str(tmp_path / "s"), "--timings")
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "timings (wall s; peak RSS so far, MiB):" in err
    lines = err[err.index("timings") :].splitlines()[1:]
    names = [ln.split()[0] for ln in lines]
    for name in ("ingest", "read", "attribution", "write", "analyses", "reports", "total"):
        assert name in names, (name, err)
    assert any(n.startswith("analysis:") for n in names) and "report:html" in names
    total = float(lines[-1].split()[-2])
    ingest = float(next(ln for ln in lines if ln.split()[0] == "ingest").split()[-4])
    assert 0 < ingest <= total
    # without the flag: nothing
    proc = aaco("import", str(KINETO_CPU), "--output", str(tmp_path / "t"), "--format", "none")
    assert "timings (wall s" not in proc.stderr


def test_import_prints_the_report_it_rendered_for_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off a terminal (110 columns, no colour) the printed report is the bundle's copy, and
    it is rendered once: printing it renders nothing again."""
    from aaco.cli._common import print_report
    from aaco.ingest import import_new
    from aaco.report import terminal

    session = import_new([KINETO_CPU], tmp_path / "s")

    def no_second_render(*args: object, **kwargs: object) -> str:
        raise AssertionError("the terminal report was rendered twice")

    monkeypatch.setattr(terminal, "render_report", no_second_render)
    capsys.readouterr()
    print_report(session, "terminal")
    printed = capsys.readouterr().out
    assert printed == (session.path / "report" / "report.txt").read_text()
    assert "AACO session" in printed


def test_replace_with_a_trace_without_ops_drops_the_old_ops(tmp_path: Path) -> None:
    """--replace by a trace that has no framework ops (rocprofv3) leaves none of the replaced
    trace's ops, and the bundle is named after the trace it now holds."""
    session = _imported(tmp_path / "s", KINETO_CPU)
    assert session.ops() is not None and session.ops().num_rows  # type: ignore[union-attr]
    proc = aaco("import", "-s", str(session.path), "--replace", str(ROCPROF_DIR), "-f", "none")
    assert proc.returncode == 0, proc.stderr
    after = Session.load(session.path)
    assert after.ops() is None
    assert after.meta["model"]["name"] == ROCPROF_DIR.name
    assert after.meta["backend"]["name"] != session.meta["backend"]["name"]
    assert after.table("kernels") is not None and after.table("kernels").num_rows  # type: ignore[union-attr]


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    once = _imported(tmp_path / "a", KINETO_CPU)
    proc = aaco("import", str(KINETO_CPU), str(KINETO_CPU), "-o", str(tmp_path / "b"), "-f", "none")
    assert proc.returncode == 0, proc.stderr
    assert "1 file named more than once, read once" in proc.stderr
    twice = Session.load(tmp_path / "b" / "latest")
    assert twice.ops().num_rows == once.ops().num_rows  # type: ignore[union-attr]
    record = json.loads((twice.path / "profiler" / "import.json").read_text())
    assert record["repeated"] == [str(KINETO_CPU)]


def test_an_interrupted_import_leaves_no_staging_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aaco.ingest as ingest

    def interrupted(*args: object, **kwargs: object) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest, "analyze", interrupted)
    root = tmp_path / "s"
    with pytest.raises(KeyboardInterrupt):
        ingest.import_new([KINETO_CPU], root)
    assert [p for p in root.rglob("*") if p.name.startswith(".")] == []
    assert list(iter_sessions(root)) == []


def test_a_second_rewrite_of_one_bundle_waits_for_the_first(tmp_path: Path) -> None:
    """`aaco import --session ... --replace` takes the bundle's lock: while another holder
    has it, the command waits, then runs once it is released."""
    import subprocess
    import sys
    import time

    from aaco.session.bundle import bundle_lock

    session = _imported(tmp_path / "s", KINETO_CPU)
    cmd = [sys.executable, "-m", "aaco", "import", "-s", str(session.path), "--replace"]
    with bundle_lock(session.path):
        proc = subprocess.Popen(
            [*cmd, str(ROCPROF_DIR), "-f", "none"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3.0)
        assert proc.poll() is None  # still waiting for the lock
        assert Session.load(session.path).meta["model"]["name"] == KINETO_CPU.name
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert Session.load(session.path).meta["model"]["name"] == ROCPROF_DIR.name


def test_a_trace_without_events_is_an_error_not_an_empty_bundle(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"schemaVersion": 1, "traceEvents": []}')
    root = tmp_path / "s"
    proc = aaco("import", str(empty), "--output", str(root))
    assert_one_line_error(proc, 2, "no events to import")
    assert list(iter_sessions(root)) == [] and not any(root.rglob(".*"))
    # into an existing bundle: refused, the bundle left as it was
    session = _imported(tmp_path / "t", KINETO_CPU)
    before = (session.path / "session.json").read_text()
    proc = aaco("import", "-s", str(session.path), "--replace", str(empty))
    assert_one_line_error(proc, 2, "no events to import")
    assert (session.path / "session.json").read_text() == before
