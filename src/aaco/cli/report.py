"""``aaco report``, ``aaco analyze`` and ``aaco export``: a session's report, recomputed
analysis, and timeline for other tools."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import Any

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
    sessions_root,
    width,
)
from aaco.errors import InputError, UsageError
from aaco.session.bundle import Session, atomic_write_bytes


def _write(output: Path, data: bytes) -> None:
    """``data`` to ``output`` atomically; gzip-compressed when the name ends in ``.gz``."""
    if output.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
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
    help="Write to this file instead of stdout (html: default report.html in the bundle); "
    "gzip-compressed when it ends in .gz.",
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


def _what_ifs(specs: tuple[str, ...]) -> list[Any]:
    from aaco.analysis.critical_path import parse_what_if

    try:
        return [parse_what_if(w) for w in specs]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


_WHAT_IF_HELP = (
    "Re-time the critical path with TARGET[~REGEX]:FACTOR, e.g. kernel~gemm:0.5 (kernels "
    "matching 'gemm' take half their time); targets: kernel, copy, gpu, cpu, runtime, launch, "
    "sync, idle. Repeatable."
)


@click.group(invoke_without_command=True)
@session_option()
@sessions_option("Sessions root for 'latest'.")
@format_option(help="Report printed after the analysis.")
@click.option(
    "--no-calibrate",
    is_flag=True,
    help="Without a stored calibration, do not measure a quick one (also: AACO_AUTO_CALIBRATE=0).",
)
@click.option("--what-if", "what_if", multiple=True, metavar="SPEC", help=_WHAT_IF_HELP)
@click.pass_context
def analyze(
    ctx: click.Context,
    session: str,
    sessions: Path | None,
    fmt: str,
    no_calibrate: bool,
    what_if: tuple[str, ...],
) -> None:
    """Recompute a bundle's roofline, critical path, bottleneck verdict and recommendations.

    Uses the calibration stored for this machine (aaco calibrate) or the published peaks of
    its GPU; for a CPU session of this machine without either, a quick calibration is
    measured and stored first. Run it again after `aaco import` or a new calibration.
    `aaco analyze critical-path` prints the critical path of a bundle or a trace file.
    """
    if ctx.invoked_subcommand is not None:
        return
    # lazy: the analyses (~60 ms)
    from aaco.ingest import analyze_session

    specs = _what_ifs(what_if)
    path = session_path(session, sessions)
    s = Session.load(path)
    if s.status != "completed":
        raise UsageError(f"{path}: the run {s.status}; there is nothing to analyze")
    print_report(
        analyze_session(s.path, auto_calibrate=False if no_calibrate else None, what_if=specs),
        fmt,
    )


@analyze.command("critical-path")
@click.argument("trace", required=False, type=click.Path(path_type=Path))
@session_option("Bundle path, or 'latest' under the sessions root (when no TRACE is given).")
@sessions_option("Sessions root for 'latest'.")
@click.option("--what-if", "what_if", multiple=True, metavar="SPEC", help=_WHAT_IF_HELP)
@click.option("--process", "process_id", type=int, help="Only this process (rank) id.")
@click.option(
    "--step",
    type=int,
    help="Only ProfilerStep#N: host events in it and the GPU work they launched.",
)
@click.option("--segments", default=20, show_default=True, help="Longest path segments to list.")
@click.option("--json", "as_json", is_flag=True, help="The whole analysis as JSON.")
def critical_path(
    trace: Path | None,
    session: str,
    sessions: Path | None,
    what_if: tuple[str, ...],
    process_id: int | None,
    step: int | None,
    segments: int,
    as_json: bool,
) -> None:
    """The critical path over CPU threads and GPU streams of a bundle, or of TRACE (a Kineto,
    rocprofv3 or nsys file) without making a bundle: its share by category and operator,
    kernels' slack, unexplained waits, and what speeding something up would buy."""
    import json

    from aaco.analysis.critical_path import critical_path_summary

    specs = _what_ifs(what_if)
    if trace is not None:
        from aaco.analysis.kernels import classify_table
        from aaco.importers.registry import import_paths

        if not trace.exists():
            raise InputError(f"{trace}: no such file or directory")
        tt = import_paths([trace])
        # the names and families a bundle would have (what-if patterns match both)
        tt.kernels = classify_table(tt.kernels)
        tables = {
            "kernels": tt.kernels, "api_calls": tt.api_calls, "memcpy": tt.memcpy,
            "ops": tt.ops, "annotations": tt.annotations,
        }  # fmt: skip
    else:
        s = Session.load(session_path(session, sessions))
        tables = {name: s.table(name) for name in ("kernels", "api_calls", "memcpy", "annotations")}
        tables["ops"] = s.ops()
    try:
        summary = critical_path_summary(
            tables, specs, max_segments=max(segments, 0) or 1, step=step
        )
    except ValueError as exc:  # no such step
        raise UsageError(f"--step {step}: {exc}") from None
    if summary is None:
        raise InputError(
            f"{trace or session}: no GPU kernel or copy with device timestamps: the critical "
            "path orders host threads against GPU streams, and this has no GPU timeline "
            "(record one on a GPU: torch.profiler with CUDA activities, rocprofv3 "
            "--kernel-trace, nsys)"
        )
    if process_id is not None:
        all_processes = list(summary["processes"])
        summary["processes"] = [
            p for p in summary["processes"] if p.get("process_id") == process_id
        ]
        if not summary["processes"]:
            have = ", ".join(str(p.get("process_id")) for p in all_processes) or "none"
            raise UsageError(
                f"--process {process_id}: no such process with a GPU trace (processes: {have})"
            )
        summary["primary"] = summary["processes"][0]
        summary["primary_process_id"] = process_id
    if as_json:
        out(json.dumps(summary, indent=1))
        return
    from aaco.report.critical_path import critical_path_lines

    out("\n".join(critical_path_lines(summary, segments=segments)))


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
    _write(output, data)
    size = output.stat().st_size
    sys.stderr.write(f"wrote {output} ({size / 1e6:.1f} MB); open it in ui.perfetto.dev\n")


@export_app.command("prometheus")
@sessions_option("Sessions root to read (default: $AACO_SESSIONS, else ./sessions).")
@click.option(
    "--lake",
    type=click.Path(path_type=Path),
    help="Read the sessions table of this lake (aaco lake) instead of a sessions root.",
)
@click.option(
    "--textfile",
    type=click.Path(path_type=Path),
    help="Write atomically to this file for node_exporter's textfile collector "
    "(--collector.textfile.directory); must end in .prom.",
)
@click.option(
    "--push",
    "push_url",
    metavar="URL",
    help="Push to this Pushgateway, replacing the metrics of the job's group (HTTP PUT).",
)
@click.option("--job", default="aaco", show_default=True, help="Pushgateway job (with --push).")
@click.option(
    "--instance",
    help="Pushgateway grouping key 'instance' (with --push; default: this host's name).",
)
@click.option("--model", help="Only sessions of this model.")
@click.option("--backend", help="Only sessions of this backend.")
def export_prometheus(
    sessions: Path | None,
    lake: Path | None,
    textfile: Path | None,
    push_url: str | None,
    job: str,
    instance: str | None,
    model: str | None,
    backend: str | None,
) -> None:
    """Session results as Prometheus metrics, labelled like dcgm-exporter's and AMD
    device-metrics-exporter's GPU metrics (see docs/prometheus.md).

    Exports the newest completed session of each configuration (model, backend, batch,
    threads, settings, tag, host, GPU): latency quantiles and throughput in base units,
    serving TTFT and tokens/s, the session's creation time and an info metric. Prints the
    text to stdout unless --textfile or --push says where it goes.
    """
    # lazy: prometheus_client, and the row builders (pyarrow)
    from aaco.lake import prometheus

    ctx = click.get_current_context()
    if push_url is None:
        for name in ("job", "instance"):
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT:
                raise UsageError(f"--{name} needs --push")
    if lake is not None and sessions is not None:
        raise UsageError("--lake and --sessions are exclusive: read one or the other")
    if textfile is not None and not textfile.name.endswith(".prom"):
        raise UsageError(
            f"--textfile {textfile}: must end in .prom (node_exporter reads only *.prom files)"
        )
    skipped = 0
    if lake is not None:
        # lazy: the lake reader imports duckdb
        from aaco.lake.read import lake_rows

        rows = lake_rows(lake)
        source = str(lake)
    else:
        from aaco.lake.rows import folder_fleet_rows  # lazy: pyarrow, the device tables

        root = sessions_root(sessions)
        if not root.is_dir():
            raise InputError(f"{root}: no such sessions root")
        rows, notes = folder_fleet_rows(root)
        skipped = len(notes)
        source = str(root)
    rows = [
        r
        for r in rows
        if (model is None or r.get("model") == model)
        and (backend is None or r.get("backend") == backend)
    ]
    if skipped:
        sys.stderr.write(f"skipped {skipped} unreadable bundle(s) under {source}\n")
    if textfile is None and push_url is None:
        out(prometheus.render(rows))
        return
    if textfile is not None:
        n = prometheus.write_textfile(textfile, rows)
        sys.stderr.write(f"wrote {textfile}: {n} series from {len(rows)} session(s)\n")
    if push_url is not None:
        import socket

        key = {"instance": instance if instance is not None else socket.gethostname()}
        n = prometheus.push(rows, push_url, job=job, grouping_key=key)
        sys.stderr.write(
            f"pushed {n} series from {len(rows)} session(s) to {push_url} "
            f"(job={job}, instance={key['instance']})\n"
        )
