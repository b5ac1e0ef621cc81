"""``aaco import``: kernel traces captured elsewhere into a session bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from aaco.cli._common import format_option, print_report, sessions_root
from aaco.errors import AacoError
from aaco.session.bundle import read_json


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--session",
    "-s",
    "session_dir",
    type=click.Path(path_type=Path),
    help="Add the traces to this existing bundle instead of creating a new one.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root for the new bundle (default ./sessions or $AACO_SESSIONS).",
)
@click.option("--replace", is_flag=True, help="With --session: replace a trace already there.")
@click.option("--tag", help="Free-form label stored with a new bundle.")
@format_option(help="Report printed after the import.")
def import_command(
    paths: tuple[Path, ...],
    session_dir: Path | None,
    output: Path | None,
    replace: bool,
    tag: str | None,
    fmt: str,
) -> None:
    """Import kernel traces captured elsewhere (rocprofv3, rocprof, Kineto, ONNX Runtime).

    PATHS are trace files or directories (a rocprofv3 output folder, a folder of per-rank
    Kineto traces); formats are recognised by content. Without --session a new bundle is
    created from the traces alone.
    """
    # lazy: the importers and the analyses (~50 ms)
    from aaco.pipeline import import_into, import_new

    if session_dir is not None and output is not None:
        raise click.UsageError("give either --session (existing bundle) or --output, not both")
    if replace and session_dir is None:
        raise click.UsageError("--replace only applies with --session")
    if session_dir is not None:
        s = import_into(session_dir, list(paths), replace=replace)
    else:
        s = import_new(list(paths), sessions_root(output), tag=tag, argv=sys.argv)
    sys.stderr.write(f"imported into {s.path}\n")
    _import_note(s.path)
    print_report(s, fmt)


def _import_note(bundle: Path) -> None:
    """One line when the importers met odd values (nulled or left out), never one per event."""
    from aaco.session.paths import IMPORT_META_FILE

    try:
        line = read_json(bundle / IMPORT_META_FILE).get("warning")
    except (OSError, ValueError, AacoError):
        return
    if line:
        sys.stderr.write(f"note: {line}; details in {bundle / IMPORT_META_FILE}\n")
