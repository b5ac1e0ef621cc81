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

import os
import signal
import sys
import traceback

import click

from aaco import __version__
from aaco.cli import (
    diff,
    importing,
    llm,
    machine,
    models,
    profile,
    report,
    rerun,
    run,
    sessions,
    web,
)
from aaco.cli._common import CONTEXT, classify, err, fail, terminate
from aaco.errors import attached_warnings

__all__ = ["app", "main"]


@click.group(context_settings=CONTEXT)
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, "--version", prog_name="aaco", message="%(prog)s %(version)s")
def app(debug: bool) -> None:
    """AACO, the AI Compute Observatory: where the time of an AI inference went, and why."""


for _command in (
    run.run,
    profile.profile,
    rerun.rerun,
    report.report,
    report.analyze,
    report.export_app,
    importing.import_command,
    machine.calibrate,
    machine.info,
    machine.doctor,
    sessions.ls_command,
    sessions.history,
    sessions.check,
    sessions.baseline_app,
    diff.diff,
    models.models_app,
    llm.llm_app,
    web.serve,
    web.dashboard,
):
    app.add_command(_command)


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
