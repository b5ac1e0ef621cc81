"""The ``aaco`` command line: thin commands over the library; the only package that prints.

Exit codes: 0 success; 1 a run that failed or timed out, a regression (``diff``) or a
violated rule (``check``); 2 a usage error (bad option, unknown name, unreadable or malformed
input, a path that is not a bundle); 3 an inconclusive ``diff``; 4 an internal error of AACO
itself (a bug: rerun with --debug and report the traceback); 130 interrupted.

One module per command group (:mod:`~aaco.cli.run`, :mod:`~aaco.cli.report`, ...), what
they share in :mod:`aaco.cli._common`; this module assembles :data:`app` and runs it
(:func:`main`).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback

import click

from aaco import __version__
from aaco.cli._common import CONTEXT, classify, err, fail, terminate
from aaco.errors import attached_warnings

__all__ = ["COMMANDS", "app", "main"]

#: every command: name -> (module, attribute, the one-line help `aaco --help` lists). The
#: modules load only when their command runs, so `aaco --help` and `aaco --version` import
#: none of them (nor pyarrow, onnx, scipy ...); tests/cli/test_cli.py checks each line
#: against the command's own help.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("aaco.cli.run", "run", "Profile a model: warmup, measured iterations, operator..."),
    "profile": (
        "aaco.cli.profile", "profile",
        "Run any command and turn it into a session bundle: wall time...",
    ),
    "rerun": (
        "aaco.cli.rerun", "rerun", "Run SESSION's measurement again into a new bundle: the same...",
    ),
    "report": (
        "aaco.cli.report", "report",
        "Show a session's report in the terminal, as JSON, or as one...",
    ),
    "analyze": (
        "aaco.cli.report", "analyze", "Recompute a bundle's roofline, critical path, bottleneck...",
    ),
    "export": ("aaco.cli.report", "export_app", "Export a session to other tools' formats."),
    "import": (
        "aaco.cli.importing", "import_command",
        "Import kernel traces captured elsewhere (rocprofv3, rocprof,...",
    ),
    "calibrate": (
        "aaco.cli.machine", "calibrate",
        "Measure this machine's peak FLOP/s and memory bandwidth...",
    ),
    "info": (
        "aaco.cli.machine", "info",
        "Show this machine: CPU, memory, GPUs, onnxruntime providers,...",
    ),
    "doctor": (
        "aaco.cli.machine", "doctor",
        "Check this machine's readiness for stable measurement, with...",
    ),
    "ls": (
        "aaco.cli.sessions", "ls_command",
        "List sessions: time, model, backend, batch, p50, status.",
    ),
    "history": (
        "aaco.cli.sessions", "history",
        "Sessions of each configuration over time, with detected...",
    ),
    "check": (
        "aaco.cli.sessions", "check",
        "Check a session against SLA rules (p99_ms <= 12, throughput...",
    ),
    "baseline": (
        "aaco.cli.sessions", "baseline_app",
        "Named baselines to diff against (stored under the sessions...",
    ),
    "ab": (
        "aaco.cli.ab", "ab", "Interleaved A/B of two run configurations, alternating fresh...",
    ),
    "lake": (
        "aaco.cli.lake", "lake_app",
        "A lake of sessions: Hive-partitioned Parquet that DuckDB, Polars...",
    ),
    "query": (
        "aaco.cli.lake", "query", "Run SQL (DuckDB) over a lake or a sessions root.",
    ),
    "sweep": (
        "aaco.cli.sweep", "sweep",
        "Run a matrix of runs (models x backends x batch x threads x any...",
    ),
    "diff": ("aaco.cli.diff", "diff", "Did SESSION regress against BASELINE? Writes..."),
    "models": ("aaco.cli.models", "models_app", "Built-in and registered models."),
    "tune": (
        "aaco.cli.tune", "tune", "Search ONNX Runtime's options for a faster configuration,...",
    ),
    "llm": (
        "aaco.cli.llm", "llm_app",
        "LLM inference: serving benchmarks and ONNX decoder generation.",
    ),
    "serve": ("aaco.cli.web", "serve", "REST API over a sessions root (FastAPI; schema at..."),
    "dashboard": (
        "aaco.cli.web", "dashboard",
        "Web dashboard: sessions with filters, reports, comparisons,...",
    ),
}  # fmt: skip


class _LazyGroup(click.Group):
    """A group whose commands load on first use (click's documented lazy-loading pattern),
    listing them in `--help` from :data:`COMMANDS` without importing their modules."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        known = super().get_command(ctx, cmd_name)
        if known is not None or cmd_name not in COMMANDS:
            return known
        module, attr, _ = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):  # pragma: no cover - a wrong table entry
            raise TypeError(f"{module}:{attr} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings=CONTEXT)
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, "--version", prog_name="aaco", message="%(prog)s %(version)s")
def app(debug: bool) -> None:
    """AACO, the AI Compute Observatory: where the time of an AI inference went, and why."""


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the app and turns errors into one line and an exit code.

    Every failure ends in one ``aaco: error: ...`` line on stderr (after the one-line
    warnings attached to the exception, :func:`aaco.errors.attached_warnings`) and its exit
    code; ``--debug`` prints the traceback first and keeps the exit code.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is a global option: it counts only before the command name.
    leading = args[: next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))]
    debug = "--debug" in leading
    # A polite kill (SIGTERM) unwinds like Ctrl-C: the worker is killed and the bundle is
    # published as failed instead of being left half-built with a worker still running.
    signal.signal(signal.SIGTERM, terminate)
    try:
        rc = app.main(args=args, prog_name="aaco", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
        sys.exit(0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        # `aaco ls --json | head -1`: the reader has what it wanted.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except (Exception, KeyboardInterrupt) as exc:
        message, code = classify(exc, args)
        if debug and code != 130:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        for warning in attached_warnings(exc):
            err(f"warning: {warning}")
        fail(message, code)
    sys.exit(rc if isinstance(rc, int) else 0)
