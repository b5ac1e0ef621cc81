"""``aaco import``: kernel traces captured elsewhere into a session bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from aaco.cli._common import format_option, print_report, sessions_root
from aaco.errors import AacoError
from aaco.session.bundle import read_json
from aaco.stages import Recording, recording, stage


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
@click.option(
    "--timings",
    is_flag=True,
    help="Also print, on stderr, where the import spent its time and memory, stage by stage.",
)
@format_option(help="Report printed after the import.")
def import_command(
    paths: tuple[Path, ...],
    session_dir: Path | None,
    output: Path | None,
    replace: bool,
    tag: str | None,
    timings: bool,
    fmt: str,
) -> None:
    """Import kernel traces captured elsewhere (rocprofv3, rocprof, Kineto, ONNX Runtime).

    PATHS are trace files or directories (a rocprofv3 output folder, a folder of per-rank
    Kineto traces); formats are recognised by content. Without --session a new bundle is
    created from the traces alone.
    """
    # lazy: the importers and the analyses (~50 ms); not the runners (aaco.pipeline)
    from aaco.ingest import import_into, import_new

    if session_dir is not None and output is not None:
        raise click.UsageError("give either --session (existing bundle) or --output, not both")
    if replace and session_dir is None:
        raise click.UsageError("--replace only applies with --session")
    with recording() as rec:
        if session_dir is not None:
            s = import_into(session_dir, list(paths), replace=replace)
        else:
            s = import_new(list(paths), sessions_root(output), tag=tag, argv=sys.argv)
    sys.stderr.write(f"imported into {s.path}\n")
    _import_note(s.path)
    with recording() as shown, stage("print report"):
        print_report(s, fmt)
    if timings:
        sys.stderr.write(_timings_text(rec, shown))


def _timings_text(*recordings: Recording) -> str:
    """The stage table of ``--timings``: one line per stage as it began, inner stages
    indented; the last line the total of the recordings (start-up of the interpreter and
    of the CLI not included)."""
    lines = ["timings (wall s; peak RSS so far, MiB):"]
    for rec in recordings:
        for st in rec.in_start_order():
            label = "  " * st.depth + st.name.rsplit("/", 1)[-1]
            lines.append(f"  {label:<40} {st.seconds:8.3f} s {st.peak_rss_mib:8.0f} MiB")
    total = sum(r.total_s or 0.0 for r in recordings)
    lines.append(f"  {'total (after start-up)':<40} {total:8.3f} s")
    return "\n".join(lines) + "\n"


def _import_note(bundle: Path) -> None:
    """One line when the importers met odd values (nulled or left out), never one per event."""
    from aaco.session.paths import IMPORT_META_FILE

    try:
        line = read_json(bundle / IMPORT_META_FILE).get("warning")
    except (OSError, ValueError, AacoError):
        return
    if line:
        sys.stderr.write(f"note: {line}; details in {bundle / IMPORT_META_FILE}\n")
