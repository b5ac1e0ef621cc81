"""``aaco report``, ``aaco analyze`` and ``aaco export``: a session's report, recomputed
analysis, and timeline for other tools."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from aaco.cli._common import (
    color,
    format_option,
    out,
    print_report,
    renderer_choice,
    session_option,
    session_path,
    sessions_option,
    width,
)
from aaco.errors import InputError, UsageError
from aaco.session.bundle import Session, atomic_write_bytes


def _write(output: Path, data: bytes) -> None:
    try:
        atomic_write_bytes(output, data)
    except OSError as exc:
        raise InputError(f"cannot write {output}: {exc.strerror or exc}") from exc


@click.command()
@session_option()
@click.option(
    "--format",
    "-f",
    "fmt",
    type=renderer_choice(),
    default="terminal",
    show_default=True,
    help="With --output, its extension (.json, .html, .txt) picks the default.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write to this file instead of stdout (html: default report.html in the bundle).",
)
@sessions_option("Sessions root for 'latest'.")
def report(session: str, fmt: str, output: Path | None, sessions: Path | None) -> None:
    """Show a session's report in the terminal, as JSON, or as one self-contained HTML file."""
    # lazy: the registry reads entry points (importlib.metadata)
    from aaco.report.renderers import create_renderer, guess_renderer_from_outfile

    defaulted = click.get_current_context().get_parameter_source("fmt") is ParameterSource.DEFAULT
    if defaulted and output is not None:
        fmt = guess_renderer_from_outfile(output) or fmt
    s = Session.load(session_path(session, sessions))
    renderer = create_renderer(fmt, width=width(), color=output is None and color())
    if fmt == "html" and output is None:
        output = s.path / "report" / "report.html"
    # A malformed bundle is refused where it is read (Session.load, its JSON and table
    # readers: BundleError, exit 2); anything a renderer raises past that is a bug (exit 4).
    text = renderer.render(s)
    if output is None:
        out(text)
        return
    _write(output, text.encode())
    sys.stderr.write(f"wrote {output}\n")


@click.command()
@session_option()
@sessions_option("Sessions root for 'latest'.")
@format_option(help="Report printed after the analysis.")
@click.option(
    "--no-calibrate",
    is_flag=True,
    help="Without a stored calibration, do not measure a quick one (also: AACO_AUTO_CALIBRATE=0).",
)
def analyze(session: str, sessions: Path | None, fmt: str, no_calibrate: bool) -> None:
    """Recompute a bundle's roofline, bottleneck verdict and recommendations.

    Uses the calibration stored for this machine (aaco calibrate) or the published peaks of
    its GPU; for a CPU session of this machine without either, a quick calibration is
    measured and stored first. Run it again after `aaco import` or a new calibration.
    """
    # lazy: the pipeline imports the analyses (~60 ms)
    from aaco.pipeline import analyze_session

    path = session_path(session, sessions)
    s = Session.load(path)
    if s.status != "completed":
        raise UsageError(f"{path}: the run {s.status}; there is nothing to analyze")
    print_report(analyze_session(s.path, auto_calibrate=False if no_calibrate else None), fmt)


@click.group("export")
def export_app() -> None:
    """Export a session to other tools' formats."""


@export_app.command("perfetto")
@session_option()
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    required=True,
    help="Trace file to write; gzip-compressed when it ends in .gz. Open in ui.perfetto.dev.",
)
@sessions_option("Sessions root for 'latest'.")
def export_perfetto(session: str, output: Path, sessions: Path | None) -> None:
    """Write one timeline (iterations, ops, kernels, copies, telemetry, op->kernel arrows)."""
    # lazy: the trace builder imports the analyses (~0.1 s)
    from aaco.report.perfetto import export_perfetto as build_trace

    data = build_trace(Session.load(session_path(session, sessions)))
    if output.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    _write(output, data)
    sys.stderr.write(f"wrote {output} ({len(data) / 1e6:.1f} MB); open it in ui.perfetto.dev\n")
