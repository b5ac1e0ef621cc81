"""Which error class a failure lands in: a malformed bundle is bad input (exit 2), found where
the bundle is read; an exception out of a renderer or an analysis on a bundle that loaded
fine is AACO's own bug (exit 4, one line, the traceback only with --debug)."""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.onnx_models import make_matmul_chain

from aaco.cli import main
from aaco.session.bundle import BundleWriter, Session

BUNDLE = Path(__file__).resolve().parents[1] / "session" / "fixtures" / "bundle_v1"

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    """``aaco ARGS`` through the real entry point, in this process (so that a test can
    plant a bug with monkeypatch): (exit code, stdout, stderr)."""
    before = signal.getsignal(signal.SIGTERM)  # main() installs its own handler

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            main(list(args))
        out, err = capsys.readouterr()
        code = stop.value.code
        return (code if isinstance(code, int) else 1), out, err

    yield run
    signal.signal(signal.SIGTERM, before)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A copy of a real, valid bundle (format 1)."""
    return Path(shutil.copytree(BUNDLE, tmp_path / "bundle"))


def _raise(exc: BaseException) -> Callable[..., NoReturn]:
    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise exc

    return fail


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("aaco: error: "), err
    return lines[0]


def test_the_fixture_bundle_reports(cli: Cli, bundle: Path) -> None:
    code, out, err = cli("report", "--session", str(bundle), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["model"]["name"] == "tiny-convnet"


@pytest.mark.parametrize(
    ("fmt", "renderer"),
    [
        ("terminal", "aaco.report.terminal.TerminalRenderer"),
        ("json", "aaco.report.json.JsonRenderer"),
        ("html", "aaco.report.html.HtmlRenderer"),
    ],
)
def test_a_renderer_bug_is_an_internal_error_not_a_malformed_bundle(
    cli: Cli, bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, renderer: str
) -> None:
    monkeypatch.setattr(f"{renderer}.render", _raise(KeyError("latency_ms")))
    out_file = tmp_path / "out"
    code, out, err = cli("report", "--session", str(bundle), "--format", fmt, "-o", str(out_file))
    assert code == 4, err
    line = _error_line(err)
    assert "Traceback" not in err
    assert "internal error, a bug in AACO: KeyError: 'latency_ms'" in line
    assert "'aaco --debug report ...'" in line and "report it" in line
    assert "malformed" not in line
    assert not out and not out_file.exists()


def test_debug_shows_the_traceback_and_keeps_the_exit_code(
    cli: Cli, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("aaco.report.json.JsonRenderer.render", _raise(KeyError("latency_ms")))
    code, _, err = cli("--debug", "report", "--session", str(bundle), "--format", "json")
    assert code == 4
    assert "Traceback (most recent call last)" in err and "KeyError: 'latency_ms'" in err
    assert err.splitlines()[-1].startswith("aaco: error: internal error, a bug in AACO")


def test_an_export_bug_is_an_internal_error(
    cli: Cli, bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("aaco.report.perfetto.export_perfetto", _raise(TypeError("bad operand")))
    out_file = tmp_path / "trace.json"
    code, _, err = cli("export", "perfetto", "--session", str(bundle), "-o", str(out_file))
    assert code == 4
    line = _error_line(err)
    assert "a bug in AACO: TypeError: bad operand" in line and "'aaco --debug export ...'" in line
    assert not out_file.exists()


def test_an_analysis_bug_is_an_internal_error(
    cli: Cli, bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sla = tmp_path / "sla.yaml"
    sla.write_text("rules:\n  - p99_ms <= 1000\n")
    assert cli("check", "--session", str(bundle), "--sla", str(sla))[0] == 0
    monkeypatch.setattr("aaco.regress.sla.check", _raise(ValueError("no quantile")))
    code, _, err = cli("check", "--session", str(bundle), "--sla", str(sla))
    assert code == 4
    assert "a bug in AACO: ValueError: no quantile" in _error_line(err)


def test_a_multi_line_exception_message_stays_one_line(
    cli: Cli, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "aaco.report.json.JsonRenderer.render", _raise(RuntimeError("first\nsecond\n"))
    )
    code, _, err = cli("report", "--session", str(bundle), "--format", "json")
    assert code == 4 and "RuntimeError: first second;" in _error_line(err)


def _edit_json(rel: str, change: Callable[[Any], Any]) -> Callable[[Path], None]:
    def edit(b: Path) -> None:
        f = b / rel
        f.write_text(json.dumps(change(json.loads(f.read_text()))))

    return edit


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def edit(b: Path) -> None:
        (b / rel).write_text(text)

    return edit


def _drop_column(rel: str, name: str) -> Callable[[Path], None]:
    def edit(b: Path) -> None:
        t = pq.read_table(b / rel)
        pq.write_table(t.drop_columns([name]), b / rel)

    return edit


def _retype_column(rel: str, name: str) -> Callable[[Path], None]:
    """The column as text that no number reads from."""

    def edit(b: Path) -> None:
        t = pq.read_table(b / rel)
        i = t.schema.get_field_index(name)
        pq.write_table(t.set_column(i, name, pa.array(["x"] * t.num_rows)), b / rel)

    return edit


def _set(key: str, value: Any) -> Callable[[Any], Any]:
    return lambda data: {**data, key: value}


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (_write("profiler/ops.parquet", "PAR1 junk"), "unreadable Parquet"),
        (lambda b: (b / "session.json").unlink(), "not a session bundle"),
        (_write("metrics/inference_summary.json", "{x"), "unreadable JSON"),
        (_edit_json("session.json", _set("model", "a string")), "field 'model' is not an object"),
        (_edit_json("session.json", _set("status", 3)), "field 'status' is not a string"),
        (_edit_json("session.json", _set("format_version", 99)), "format_version 99"),
        (_edit_json("metrics/inference_summary.json", lambda _: [1, 2]), "not a JSON object"),
        (_drop_column("profiler/ops.parquet", "node_name"), "lacks columns ['node_name']"),
        (_retype_column("profiler/ops.parquet", "iteration"), "column of the wrong type"),
        (_edit_json("metrics/inference_summary.json", _set("latency_ms", "fast")),
         "field 'latency_ms' is not an object"),
        (_edit_json("metrics/inference_summary.json",
                    lambda d: {**d, "latency_ms": {**d["latency_ms"], "p50": "1 ms"}}),
         "latency_ms.p50 is not a number"),
        (_edit_json("metrics/inference_summary.json", _set("throughput", [1])),
         "field 'throughput' is not an object"),
    ],
    ids=[
        "corrupt_parquet",
        "no_session_json",
        "summary_not_json",
        "model_not_object",
        "status_not_string",
        "unknown_format",
        "summary_not_object",
        "ops_lacks_column",
        "ops_column_type",
        "latency_not_object",
        "p50_not_number",
        "throughput_not_object",
    ],
)  # fmt: skip
@pytest.mark.parametrize("fmt", ["terminal", "json", "html"])
def test_a_malformed_bundle_is_still_bad_input(
    cli: Cli, bundle: Path, tmp_path: Path, damage: Callable[[Path], None], fragment: str, fmt: str
) -> None:
    damage(bundle)
    out_file = tmp_path / "out"
    code, _, err = cli("report", "--session", str(bundle), "--format", fmt, "-o", str(out_file))
    assert code == 2, err
    line = _error_line(err)
    assert fragment in line and "bug" not in line
    assert "Traceback" not in err


def test_the_installed_command_reports_a_bug_in_one_line(bundle: Path) -> None:
    """The same through a real process: exit status 4 and one line, no traceback."""
    plant = (
        "import sys, aaco.report.json as j\n"
        "def boom(self, session):\n"
        "    raise KeyError('latency_ms')\n"
        "j.JsonRenderer.render = boom\n"
        "from aaco.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    args = ["report", "--session", str(bundle), "--format", "json"]
    proc = subprocess.run(
        [sys.executable, "-c", plant, *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr and "--debug" in _error_line(proc.stderr)
    proc = subprocess.run(
        [sys.executable, "-c", plant, "--debug", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 4 and "Traceback" in proc.stderr


# --- a failed run whose bundle cannot be published -------------------------------------


def test_a_bundle_that_cannot_be_salvaged_is_named_and_kept(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_matmul_chain(tmp_path / "m.onnx", batch=1)
    root = tmp_path / "sessions"
    monkeypatch.setattr("aaco.pipeline._run_into", _raise(RuntimeError("planted bug")))
    monkeypatch.setattr(
        BundleWriter, "publish", _raise(OSError(errno.ENOSPC, "No space left on device"))
    )
    code, _, err = cli("run", "--model", str(model), "-o", str(root), "--no-calibrate")
    assert code == 4
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 2, err
    warning, error = lines
    assert error.startswith("aaco: error: internal error, a bug in AACO: RuntimeError: planted")
    (partial,) = root.glob("*/.*.partial")
    assert warning.startswith("aaco: warning: could not publish the failed run's bundle")
    assert "No space left on device" in warning and str(partial) in warning
    # the data is still there, marked failed, with the traceback of the bug
    meta = json.loads((partial / "session.json").read_text())
    assert meta["status"] == "failed" and "planted bug" in meta["error"]["message"]
    assert "RuntimeError: planted bug" in (partial / "runtime" / "aaco_traceback.txt").read_text()


def test_a_salvaged_bundle_prints_no_warning(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_matmul_chain(tmp_path / "m.onnx", batch=1)
    root = tmp_path / "sessions"
    monkeypatch.setattr("aaco.pipeline._run_into", _raise(RuntimeError("planted bug")))
    code, _, err = cli("run", "--model", str(model), "-o", str(root), "--no-calibrate")
    assert code == 4 and "warning" not in err
    _error_line(err)
    assert not list(root.glob("*/.*.partial"))
    assert Session.load(root / "latest").status == "failed"


def test_an_odd_env_section_reads_as_unknown(cli: Cli, bundle: Path, tmp_path: Path) -> None:
    # env.json describes the machine: one odd section is unknown, not a reason to refuse the
    # bundle nor a crash of the HTML report (the only renderer that reads it)
    _edit_json("env.json", _set("cpu", "x86"))(bundle)
    code, _, err = cli("report", "--session", str(bundle), "--format", "html", "-o",
                       str(tmp_path / "r.html"))  # fmt: skip
    assert code == 0, err
    assert Session.load(bundle).env is not None
    assert (Session.load(bundle).env or {})["cpu"] is None
