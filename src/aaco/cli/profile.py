"""``aaco profile -- CMD``: run any command into a session bundle (wall time, trace, telemetry)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from aaco.cli._common import CONTEXT, err, format_option, print_report, sessions_root
from aaco.cli.run import parse_collectors


def parse_counters(value: str | None) -> tuple[str, ...]:
    """``--counters A,B``: the counter names, in order, each once."""
    if not value:
        return ()
    return tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))


@click.command(context_settings={**CONTEXT, "allow_interspersed_args": False})
@click.option(
    "--tracer",
    default="auto",
    show_default=True,
    metavar="NAME",
    help="auto (rocprofv3, else nsys if on PATH, else torch for a Python interpreter that "
    "has it, else none), none, or a tracer: rocprofv3, nsys, torch. Only run 1 is traced.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root (default ./sessions or $AACO_SESSIONS).",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run the command N times, each a fresh process; with a tracer, run 1 is traced and "
    "runs 2..N are the measured ones.",
)
@click.option(
    "--counters",
    metavar="LIST",
    help="Hardware counters rocprofv3 collects with the trace (--pmc), comma-separated, for "
    "the kernel roofline.",
)
@click.option(
    "--collectors",
    metavar="NAMES",
    help="Telemetry collectors, comma-separated (default: process_tree,sched,gpu; system "
    "watches the command's own process only).",
)
@click.option("--no-telemetry", is_flag=True, help="Do not sample telemetry.")
@click.option("--sample-hz", type=float, default=10.0, show_default=True, help="Telemetry rate.")
@click.option("--timeout", type=float, help="Kill a run after this many seconds (exit status 124).")
@click.option("--tag", help="Free text stored with the session.")
@format_option(help="Report printed after the runs.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(
    tracer: str,
    output: Path | None,
    repeat: int,
    counters: str | None,
    collectors: str | None,
    no_telemetry: bool,
    sample_hz: float,
    timeout: float | None,
    tag: str | None,
    fmt: str,
    command: tuple[str, ...],
) -> None:
    """Run any command and turn it into a session bundle: wall time of each run, exit status,
    a trace of run 1 (imported: kernels, operators, the analyses) and telemetry of the
    command's process tree.

    Everything after '--' is the command, verbatim. Its output passes through. aaco profile
    exits with the command's own status (127: not found; 128+N: killed by signal N; 124:
    --timeout); a failed command still makes a (failed) bundle.

    \b
    aaco profile -- ./my_app --size 4096
    aaco profile --repeat 5 --tracer none -- python bench.py
    aaco profile --tracer rocprofv3 --counters SQ_WAVES,SQ_INSTS_VALU -- ./my_hip_app
    """
    # lazy: the runner imports the importers, the analyses and the report model
    from aaco.runners.profile import ProfileOptions, exit_status, profile_command

    session = profile_command(
        ProfileOptions(
            command=command,
            tracer=tracer,
            repeat=repeat,
            counters=parse_counters(counters),
            collectors=parse_collectors(collectors),
            telemetry=not no_telemetry,
            sample_hz=sample_hz,
            timeout_s=timeout,
            output=sessions_root(output),
            tag=tag,
            argv=["aaco", *sys.argv[1:]],
        )
    )
    print_report(session, fmt)
    code = exit_status(session)
    if session.status == "completed" and code == 0:
        sys.stderr.write(f"bundle: {session.path}\n")
        return
    message = (session.error or {}).get("message", "no reason recorded")
    err(f"error: {message}; exit status {code}; {session.status} bundle: {session.path}")
    sys.exit(code or 1)
