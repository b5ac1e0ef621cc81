"""The result of ``aaco query`` as text: a table, JSON lines or CSV (Parquet is written by
the CLI with pyarrow); and ``aaco lake export``'s summary."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime
from typing import Any

import pyarrow as pa
from rich.markup import escape
from rich.table import Table

from aaco.report.text import render_text

__all__ = ["render_csv", "render_export", "render_json", "render_sweep", "render_table"]

#: rows a terminal table shows (the rest are counted); json/csv/parquet have them all
TABLE_ROWS = 1000


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def render_table(table: pa.Table, width: int = 110, color: bool = False) -> str:
    """Columns and up to :data:`TABLE_ROWS` rows, with the row count below."""
    t = Table(show_edge=False, pad_edge=False)
    for field in table.schema:
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
        t.add_column(escape(field.name), justify="right" if numeric else "left")
    for row in table.slice(0, TABLE_ROWS).to_pylist():
        t.add_row(*(escape(_cell(v)) for v in row.values()))
    more = table.num_rows - min(table.num_rows, TABLE_ROWS)
    tail = f"{table.num_rows} row(s)" + (f", first {TABLE_ROWS} shown" if more else "")
    return render_text(t, width=width, color=color).rstrip("\n") + "\n" + tail


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or infinity
    return value


def render_json(table: pa.Table) -> str:
    """One JSON object per row (JSON lines); NaN and infinities are null."""
    return "\n".join(
        json.dumps({k: _json_value(v) for k, v in row.items()}, default=_json_default)
        for row in table.to_pylist()
    )


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, int | float | str):
        return value
    return _json_default(value)


def render_csv(table: pa.Table) -> str:
    """CSV with a header row; null is an empty field."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.column_names)
    for row in table.to_pylist():
        w.writerow([_csv_value(v) for v in row.values()])
    return buf.getvalue()


def render_export(result: dict[str, Any]) -> str:
    """``aaco lake export``'s summary lines."""
    lines = [
        f"{result['lake']}: {result['added']} session(s) added, {result['replaced']} updated, "
        f"{result['unchanged']} unchanged, {result['running']} still running "
        f"({result['seconds']:.2f} s)"
    ]
    rows = result.get("rows") or {}
    if rows:
        lines.append("rows: " + ", ".join(f"{k} {v}" for k, v in sorted(rows.items())))
    if result.get("recovered"):
        lines.append(
            "finished or discarded an interrupted export: " + ", ".join(result["recovered"])
        )
    for u in result.get("unreadable") or []:
        lines.append(f"skipped {u['bundle']}: {u['error']}")
    return "\n".join(lines)


def render_sweep(
    result: dict[str, Any], table: pa.Table, width: int = 110, color: bool = False
) -> str:
    """``aaco sweep``'s result: its results ``table`` (one row per point, as
    ``results.parquet``), and where it all went."""
    keep = [
        c
        for c in (
            "point",
            *result["option_keys"],
            "status",
            "attempts",
            "p50_ms",
            "p99_ms",
            "throughput",
            "session_id",
            "error",
        )
        if c in table.column_names
    ]
    lines = [render_table(table.select(keep), width=width, color=color)]
    lines.append(
        f"sweep {result['name']} ({result['executor']}): {result['completed']} completed, "
        f"{result['failed']} failed in {result['seconds']:.1f} s; record in {result['folder']}"
    )
    if result.get("lake"):
        lines.append(render_export(result["lake"]))
    return "\n".join(lines)
