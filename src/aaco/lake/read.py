"""What other commands read from a lake: its sessions' summary rows (``aaco export
prometheus``, the dashboard's listing) and the rows ``aaco history`` charts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aaco.lake.layout import open_lake
from aaco.lake.query import run_query

__all__ = ["history_rows", "lake_rows"]

#: the history row keys read from the lake's sessions table, by their row name
_MODEL_COLUMNS = {
    "id": "session_id",
    "path": "source_path",
    "created_utc": "created_utc",
    "model": "model",
    "backend": "backend",
    "batch": "batch",
    "tag": "tag",
    "status": "status",
    "p50_ms": "p50_ms",
    "p90_ms": "p90_ms",
    "p99_ms": "p99_ms",
    "iterations": "iterations",
    "throughput": "throughput",
    "iterations_per_s": "iterations_per_s",
    "fingerprint": "fingerprint",
    "threads": "threads",
    "preprocess": "preprocess",
    "framework": "framework",
    "settings": "settings",
    "kind": "kind",
    "vendor": "vendor",
    "arch": "arch",
    "device": "device",
    "hostname": "hostname",
}


def lake_rows(lake: Path) -> list[dict[str, Any]]:
    """Every row of the lake's ``sessions`` table (:data:`aaco.lake.rows.FLEET_SCHEMA`'s
    columns with ``date``), oldest first."""
    open_lake(lake, create=False)  # a folder that is not a lake is an error, not 0 rows
    table = run_query(lake, "SELECT * FROM sessions ORDER BY created_utc NULLS FIRST, session_id")
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def history_rows(lake: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(series, row)`` of every completed session (model runs: series ``""``) and every
    load point of a completed serving session in the lake, as
    :func:`aaco.regress.history.history_from_rows` takes them."""
    open_lake(lake, create=False)
    cols = ", ".join(f'"{c}" AS "{k}"' for k, c in _MODEL_COLUMNS.items())
    models = run_query(
        lake, f"SELECT {cols} FROM sessions WHERE status = 'completed' AND kind <> 'serving'"
    ).to_pylist()
    out: list[tuple[str, dict[str, Any]]] = [("", r) for r in models]
    points = run_query(
        lake,
        "SELECT s.session_id AS id, s.source_path AS path, s.created_utc, s.model, s.backend, "
        "s.tag, s.status, s.fingerprint, s.vendor, s.arch, s.device, s.hostname, p.point, "
        "p.series, p.load, p.requests, p.ttft_p50_ms, p.ttft_p99_ms, p.tpot_p50_ms, "
        "p.output_tokens_per_s, p.failed_fraction FROM serving_points p JOIN sessions s "
        "USING (session_id) WHERE s.status = 'completed' ORDER BY s.session_id, p.point",
    ).to_pylist()
    for r in points:
        series = r.pop("series")
        out.append((series, {"kind": "serving", **r}))
    return out
