"""The sessions under a root, one summary row each, for ``aaco ls`` and later history views."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aaco.errors import BundleError
from aaco.session import metadata
from aaco.session.bundle import Session, iter_sessions

#: run settings that change the measured latencies themselves (the profiled pass is apart):
#: runs of one configuration, pooled or charted together, must share them; the ``run.``
#: keys of the metadata registry's settings (:func:`aaco.session.metadata.settings`)
RUN_SETTINGS = metadata.run_fields(metadata.settings())


def run_settings(meta: dict[str, Any]) -> str:
    """The ``RUN_SETTINGS`` of a bundle's ``session.json``, as one comparable string."""
    values = {k: metadata.get(meta, f"run.{k}") for k in RUN_SETTINGS}
    return json.dumps(values, sort_keys=True, default=str)


def session_row(session: Session) -> dict[str, Any]:
    """One row: identity, configuration and headline numbers (None when unknown)."""
    meta = session.meta
    summary = session.summary or {}
    lat, thr = summary.get("latency_ms") or {}, summary.get("throughput") or {}
    if not isinstance(lat, dict) or not isinstance(thr, dict):
        raise BundleError(f"{session.path}: inference_summary.json is malformed")
    get = metadata.get
    return {
        "id": session.session_id,
        "path": str(session.path),
        "created_utc": get(meta, "created_utc"),
        "model": get(meta, "model.name"),
        "backend": get(meta, "backend.name"),
        "batch": get(meta, "run.batch"),
        "tag": get(meta, "tag"),
        "status": session.status,
        "p50_ms": lat.get("p50"),
        "p90_ms": lat.get("p90"),
        "p99_ms": lat.get("p99"),
        "iterations": lat.get("count"),
        "throughput": thr.get("items_per_s"),
        "iterations_per_s": thr.get("iterations_per_s"),
        "fingerprint": get(meta, "fingerprint"),
        "threads": get(meta, "run.threads"),
        "preprocess": get(meta, "run.preprocess"),
        "framework": get(meta, "run.framework"),
        "settings": run_settings(meta),
    }


def list_sessions(root: Path) -> list[dict[str, Any]]:
    """Rows for every loadable bundle under ``root``, oldest first; unreadable ones are
    listed with status ``unreadable`` rather than hidden."""
    rows: list[dict[str, Any]] = []
    for path, row in iter_rows(root):
        if isinstance(row, BundleError):
            # One malformed bundle must not hide the others.
            row = {"id": path.name, "path": str(path), "status": "unreadable", "error": str(row)}
        rows.append(row)
    return rows


def iter_rows(root: Path) -> Iterator[tuple[Path, dict[str, Any] | BundleError]]:
    """``(path, row)`` for every bundle under ``root``, oldest first; the row is the
    :class:`BundleError` that explains why a malformed bundle could not be read."""
    for path in iter_sessions(root):
        try:
            yield path, session_row(Session.load(path))
        except BundleError as exc:
            yield path, exc
