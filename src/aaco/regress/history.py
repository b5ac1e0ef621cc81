"""``aaco history``: the sessions of one configuration over time, with change points.

Model runs are grouped by (model, backend, hardware/software fingerprint and the run
settings of :data:`aaco.session.catalog.RUN_SETTINGS`: batch, threads, input shapes,
preprocessing, framework, torch device and compile): a change of any of these is a new
configuration, not a change point. Within a group they are ordered by creation time and
change points are searched on the per-session log-median and log-p90 (see
:mod:`aaco.analysis.changepoint`).

Serving sessions (``kind: "serving"``) are grouped the same way by their serving settings
and the load of each point (:func:`aaco.regress.serving.history_key`), so each load of a
sweep is a series of its own; their rows carry TTFT p50/p99, TPOT p50, output tokens/s and
the failed share, and change points are searched on log TTFT p50 and log TPOT p50.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aaco.analysis.changepoint import DEFAULT_MAX_P, DEFAULT_WINDOW, change_points
from aaco.errors import BundleError, UsageError
from aaco.regress import serving
from aaco.session import metadata
from aaco.session.bundle import Session, iter_sessions
from aaco.session.catalog import session_row

SERIES = {"p50": "p50_ms", "p90": "p90_ms"}
#: the series change points are searched on in a serving group
SERVING_SERIES = {"ttft_p50": "ttft_p50_ms", "tpot_p50": "tpot_p50_ms"}


def serving_rows(session: Session) -> list[tuple[str, dict[str, Any]]]:
    """``(series key, row)`` for each load point of a serving session: identity, the point's
    load and its headline figures (None when unknown)."""
    meta = session.meta
    get = metadata.get
    out = []
    for p in serving.points(session):
        point = int(p["point"])
        figures = serving.figures(p)
        load = p.get("load")
        requests = p.get("requests")
        row = {
            "id": session.session_id,
            "path": str(session.path),
            "kind": serving.SERVING_KIND,
            "created_utc": get(meta, "created_utc"),
            "model": get(meta, "model.name"),
            "backend": get(meta, "backend.name"),
            "tag": get(meta, "tag"),
            "status": session.status,
            "fingerprint": get(meta, "fingerprint"),
            "point": point,
            "load": serving.load_label(load if isinstance(load, dict) else {}),
            "requests": (requests or {}).get("measured") if isinstance(requests, dict) else None,
            "ttft_p50_ms": figures["ttft_p50_ms"],
            "ttft_p99_ms": figures["ttft_p99_ms"],
            "tpot_p50_ms": figures["tpot_p50_ms"],
            "output_tokens_per_s": figures["output_tokens_per_s"],
            "failed_fraction": figures["failed_fraction"],
        }
        out.append((serving.history_key(session, point), row))
    return out


def folder_rows(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(series, row)`` of every completed bundle under ``root``: a model run's row (series
    ``""``) or each load point of a serving session; malformed bundles are skipped (``aaco
    ls`` lists them)."""
    for path in iter_sessions(root):
        try:
            session = Session.load(path)
            if session.status != "completed":
                continue
            if serving.is_serving(session):
                rows = serving_rows(session)
            else:
                rows = [("", session_row(session))]
        except (BundleError, UsageError, ValueError, TypeError, KeyError):
            continue  # a malformed bundle is listed by ``aaco ls``, not charted
        yield from rows


def history(
    root: Path,
    model: str | None = None,
    backend: str | None = None,
    tag: str | None = None,
    window: int = DEFAULT_WINDOW,
    max_p: float = DEFAULT_MAX_P,
) -> list[dict[str, Any]]:
    """One entry per configuration group of the sessions under ``root``: its key, session
    rows and change points (model runs first, then serving groups, each ``kind`` saying
    which)."""
    return history_from_rows(folder_rows(root), model, backend, tag, window, max_p)


def history_from_rows(
    rows: Iterable[tuple[str, dict[str, Any]]],
    model: str | None = None,
    backend: str | None = None,
    tag: str | None = None,
    window: int = DEFAULT_WINDOW,
    max_p: float = DEFAULT_MAX_P,
) -> list[dict[str, Any]]:
    """:func:`history` over ``(series, row)`` pairs from anywhere: a sessions root
    (:func:`folder_rows`) or a lake (:func:`aaco.lake.read.history_rows`). A configuration
    includes its machine (the fingerprint, and the host when the rows name it), so sessions
    of many machines make one series per machine, each searched for change points on its
    own."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for series, row in rows:
        if model is not None and row["model"] != model:
            continue
        if backend is not None and row["backend"] != backend:
            continue
        if tag is not None and row["tag"] != tag:
            continue
        # the fingerprint names a kind of machine (hardware and software), not a box: rows
        # that name their host (a lake's) make one series per host, so that two identical
        # machines' sessions are never searched for change points as one
        host = row.get("hostname")
        if series:
            level = row["ttft_p50_ms"]
            key: tuple[Any, ...] = ("serving", row["model"], row["backend"], row["fingerprint"])
            key = (*key, series, host)
        else:
            level = row["p50_ms"]
            key = (
                "model",
                row["model"],
                row["backend"],
                row["fingerprint"],
                row["batch"],
                row.get("threads"),
                row.get("preprocess"),
                row.get("framework"),
                row.get("settings"),
                host,
            )
        if not isinstance(level, (int, float)) or level <= 0:
            continue
        groups.setdefault(key, []).append(row)
    out = [_group(key, rows, window, max_p) for key, rows in groups.items()]
    out.sort(
        key=lambda g: (
            g["kind"] != "model",
            str(g["model"]),
            str(g["backend"]),
            str(g["fingerprint"]),
            str(g.get("load") or ""),
        )
    )
    return out


def _group(
    key: tuple[Any, ...], rows: list[dict[str, Any]], window: int, max_p: float
) -> dict[str, Any]:
    rows.sort(key=lambda r: (str(r["created_utc"] or ""), r["id"]))
    if key[0] == "serving":
        cps = _change_points(rows, SERVING_SERIES, window, max_p)
        first = rows[0]
        return {
            "kind": serving.SERVING_KIND,
            "model": key[1],
            "backend": key[2],
            "batch": None,
            "fingerprint": key[3],
            "machine": _machine(rows),
            "load": first["load"],
            # the series key is the settings' JSON (serving.history_key)
            "settings": json.loads(key[4]),
            "sessions": rows,
            "change_points": cps,
            "method": {
                "window": window,
                "max_p": max_p,
                "series": "log ttft p50, log tpot p50",
            },
        }
    cps = _change_points(rows, SERIES, window, max_p)
    return {
        "kind": "model",
        "model": key[1],
        "backend": key[2],
        "batch": key[4],
        "fingerprint": key[3],
        "machine": _machine(rows),
        "threads": key[5],
        "preprocess": key[6],
        "framework": key[7],
        "sessions": rows,
        "change_points": cps,
        "method": {"window": window, "max_p": max_p, "series": "log p50, log p90"},
    }


def _machine(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Where the group's sessions ran (host, vendor, architecture, device), as the lake's
    rows record it; None for rows without it (a sessions root is one machine's)."""
    last = rows[-1]
    keys = ("hostname", "vendor", "arch", "device")
    if not any(last.get(k) for k in keys):
        return None
    return {k: last.get(k) for k in keys}


def _change_points(
    rows: Sequence[dict[str, Any]], series: dict[str, str], window: int, max_p: float
) -> list[dict[str, Any]]:
    cps: list[dict[str, Any]] = []
    for metric, column in series.items():
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
    return cps
