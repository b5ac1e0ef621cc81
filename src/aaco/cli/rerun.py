"""``aaco rerun``: repeat a recorded run from its capsule (``runtime/capsule.json``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from aaco.cli._common import err, finish, format_option, sessions_root


@click.command()
@click.argument("session", type=click.Path(path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root of the new bundle (default ./sessions or $AACO_SESSIONS).",
)
@click.option("--tag", help="Free text stored with the new session (default rerun-of:<id>).")
@format_option("--report", "report_format", help="Report printed after the run.")
def rerun(session: Path, output: Path | None, tag: str | None, report_format: str) -> None:
    """Run SESSION's measurement again into a new bundle: the same model (its file checked
    against the recorded sha256), options, seeds and CPU isolation; the new session.json
    records rerun_of. A warning when this machine's environment fingerprint differs."""
    # lazy: the pipeline imports the analyses and onnx
    from aaco.pipeline import run_model
    from aaco.runners.capsule import prepare_rerun

    plan = prepare_rerun(
        session, output=sessions_root(output), tag=tag, argv=["aaco", *sys.argv[1:]]
    )
    for warning in plan.warnings:
        err(f"warning: {warning}")
    finish(run_model(plan.options), "rerun", report_format)
