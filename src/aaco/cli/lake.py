"""``aaco lake`` and ``aaco query``: sessions of many machines as one Hive-partitioned
Parquet lake, and SQL over a lake or a sessions root."""

from __future__ import annotations

import json
from pathlib import Path

import click

from aaco.cli._common import color, err, out, sessions_option, sessions_root, width
from aaco.errors import UsageError


@click.group("lake")
def lake_app() -> None:
    """A lake of sessions: Hive-partitioned Parquet that DuckDB, Polars and Spark read."""


@lake_app.command("export")
@sessions_option("Sessions root to export.")
@click.option(
    "--to", "lake", required=True, type=click.Path(path_type=Path), help="The lake (a folder)."
)
@click.option("--json", "as_json", is_flag=True, help="The export's summary as JSON.")
def lake_export(sessions: Path | None, lake: Path, as_json: bool) -> None:
    """Export every finished session of a sessions root into LAKE: incremental (only new or
    changed sessions), idempotent, and a kill leaves a readable lake."""
    from aaco.lake.export import export_lake  # lazy: pyarrow
    from aaco.report.query import render_export

    result = export_lake(sessions_root(sessions), lake).to_json()
    out(json.dumps(result, indent=2) if as_json else render_export(result))


@click.command("query")
@click.argument("sql")
@click.option(
    "--lake",
    "source",
    type=click.Path(path_type=Path),
    help="A lake, or a sessions root (default: the sessions root).",
)
@sessions_option("Sessions root queried when --lake is not given.")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(("table", "json", "csv", "parquet")),
    default=None,
    help="table (default on a terminal), json (lines), csv or parquet (needs --output); "
    "guessed from --output's extension.",
)
@click.option(
    "--output", "-o", type=click.Path(path_type=Path), help="Write the result to this file."
)
def query(
    sql: str, source: Path | None, sessions: Path | None, fmt: str | None, output: Path | None
) -> None:
    """Run SQL (DuckDB) over a lake or a sessions root. Tables: sessions, iterations, ops,
    kernels, memcpy, gpu_telemetry, system_telemetry, requests, serving_points; each has
    session_id, and sessions has vendor, arch and date."""
    from aaco.lake.query import run_query  # lazy: duckdb, pyarrow

    if fmt is None:
        suffix = output.suffix.lower().lstrip(".") if output else ""
        fmt = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet"}.get(
            suffix, "table"
        )
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet needs --output FILE")
    if source is not None and sessions is not None:
        raise UsageError("--lake and --sessions are exclusive: query one or the other")
    notes: list[str] = []
    table = run_query(source if source is not None else sessions_root(sessions), sql, notes)
    for note in notes:
        err(f"warning: {note}")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert output is not None
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        _write(output, buf.getvalue().to_pybytes())
        err(f"{table.num_rows} row(s) -> {output}")
        return
    from aaco.report.query import render_csv, render_json, render_table

    if fmt == "json":
        text = render_json(table)
    elif fmt == "csv":
        text = render_csv(table)
    else:
        text = render_table(table, width=width(), color=color() and output is None)
    if output is None:
        if text:
            out(text)
        return
    _write(output, (text + ("\n" if text else "")).encode())
    err(f"{table.num_rows} row(s) -> {output}")


def _write(path: Path, data: bytes) -> None:
    """``data`` to ``path`` atomically: a failure leaves no half file."""
    from aaco.session.bundle import atomic_write_bytes  # lazy: pyarrow

    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None
