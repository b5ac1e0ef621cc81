"""The sessions under a root, one summary row each, for ``aaco ls`` and later history views."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aaco.errors import BundleError
from aaco.session import metadata
from aaco.session.bundle import Session, iter_sessions
from aaco.session.paths import SERVING_SUMMARY_FILE

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
        "kind": get(meta, "kind"),
        **_serving_headline(session),
    }


def _serving_headline(session: Session) -> dict[str, Any]:
    """A serving bundle's headline: TTFT p50/p99 and output tokens/s of its first load point
    (the knee's for a sweep); nothing for other bundles."""
    if session.meta.get("kind") != "serving":
        return {}
    summary = session.json_file(SERVING_SUMMARY_FILE)
    points = summary.get("points") if isinstance(summary, dict) else None
    if not isinstance(points, list) or not points:
        return {"ttft_p50_ms": None, "ttft_p99_ms": None, "output_tokens_per_s": None}
    knee = (summary.get("sweep") or {}).get("knee") if isinstance(summary, dict) else None
    index = knee.get("index", 0) if isinstance(knee, dict) else 0
    point = points[index] if isinstance(index, int) and 0 <= index < len(points) else points[0]
    ttft = point.get("ttft_ms") if isinstance(point, dict) else None
    tput = point.get("throughput") if isinstance(point, dict) else None
    ttft = ttft if isinstance(ttft, dict) else {}
    tput = tput if isinstance(tput, dict) else {}
    return {
        "ttft_p50_ms": ttft.get("p50"),
        "ttft_p99_ms": ttft.get("p99"),
        "output_tokens_per_s": tput.get("output_tokens_per_s"),
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
