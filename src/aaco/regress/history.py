"""``aaco history``: the sessions of one configuration over time, with change points.

Sessions are grouped by (model, backend, hardware/software fingerprint and the run
settings of :data:`aaco.session.catalog.RUN_SETTINGS`: batch, threads, input shapes,
preprocessing, framework, torch device and compile): a change of any of these is a new
configuration, not a change point. Within a group they are ordered by creation time and
change points are searched on the per-session log-median and log-p90 (see
:mod:`aaco.analysis.changepoint`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from aaco.analysis.changepoint import DEFAULT_MAX_P, DEFAULT_WINDOW, change_points
from aaco.errors import BundleError
from aaco.session.catalog import iter_rows

SERIES = {"p50": "p50_ms", "p90": "p90_ms"}


def history(
    root: Path,
    model: str | None = None,
    backend: str | None = None,
    tag: str | None = None,
    window: int = DEFAULT_WINDOW,
    max_p: float = DEFAULT_MAX_P,
) -> list[dict[str, Any]]:
    """One entry per configuration group: its key, session rows and change points."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for _, row in iter_rows(root):
        if isinstance(row, BundleError) or row["status"] != "completed":
            continue  # a malformed bundle is listed by ``aaco ls``, not charted
        if model is not None and row["model"] != model:
            continue
        if backend is not None and row["backend"] != backend:
            continue
        if tag is not None and row["tag"] != tag:
            continue
        if not isinstance(row["p50_ms"], (int, float)) or row["p50_ms"] <= 0:
            continue
        key = (
            row["model"],
            row["backend"],
            row["batch"],
            row["fingerprint"],
            row.get("threads"),
            row.get("preprocess"),
            row.get("framework"),
            row.get("settings"),
        )
        groups.setdefault(key, []).append(row)
    out = []
    for key, rows in groups.items():
        rows.sort(key=lambda r: (str(r["created_utc"] or ""), r["id"]))
        cps: list[dict[str, Any]] = []
        for metric, column in SERIES.items():
            values = [r[column] for r in rows]
            if any(not isinstance(v, (int, float)) or v <= 0 for v in values):
                continue
            for cp in change_points([math.log(v) for v in values], window, max_p):
                at = rows[cp.index]
                cps.append(
                    {
                        "metric": metric,
                        "index": cp.index,
                        "session_id": at["id"],
                        "created_utc": at["created_utc"],
                        "before_ms": math.exp(cp.mean_before),
                        "after_ms": math.exp(cp.mean_after),
                        "magnitude_pct": math.expm1(cp.shift) * 100.0,
                        "p_value": cp.p_value,
                    }
                )
        cps.sort(key=lambda c: (c["index"], c["metric"]))
        out.append(
            {
                "model": key[0],
                "backend": key[1],
                "batch": key[2],
                "fingerprint": key[3],
                "threads": key[4],
                "preprocess": key[5],
                "framework": key[6],
                "sessions": rows,
                "change_points": cps,
                "method": {"window": window, "max_p": max_p, "series": "log p50, log p90"},
            }
        )
    out.sort(key=lambda g: (str(g["model"]), str(g["backend"]), str(g["fingerprint"])))
    return out
