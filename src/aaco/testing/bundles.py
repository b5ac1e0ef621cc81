"""Bundles for tests: :func:`make_bundle` writes one with known latencies and no model run;
:func:`bundle_shape` describes one (files, table schemas, JSON key paths) for comparing
bundles written by two versions of AACO."""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from aaco.analysis.stats import summarize_iterations
from aaco.pipeline import RunOptions, initial_meta
from aaco.report.publish import write_reports
from aaco.runners.base import RunPlan
from aaco.runners.harness import iters_table
from aaco.session.bundle import STATUS_COMPLETED, BundleWriter, Session, utc_now_iso
from aaco.session.paths import INFERENCE_SUMMARY_FILE
from aaco.session.records import save_session

__all__ = ["bundle_shape", "make_bundle"]


def make_bundle(
    root: Path,
    latencies_ms: Sequence[float],
    *,
    warmup_ms: Sequence[float] = (),
    model: str = "fake",
    tag: str | None = None,
    batch: int | None = None,
    status: str = STATUS_COMPLETED,
    error: str | None = None,
    reports: bool = False,
    summary_extra: dict[str, Any] | None = None,
) -> Session:
    """A published bundle under ``root`` whose measured iterations took ``latencies_ms``,
    back to back (and ``warmup_ms`` before them), written by the pipeline's own functions:
    ``session.json``, ``metrics/inference_iters.parquet`` and the summary; no worker, no
    profile, no telemetry. ``reports`` renders the report copies too; ``summary_extra``
    adds keys to the summary (a ``sched`` section, say).

    >>> s = make_bundle(tmp, [1.0, 2.0, 3.0])       # doctest: +SKIP
    >>> s.summary["latency_ms"]["p50"]               # doctest: +SKIP
    2.0
    """
    writer = BundleWriter(root)
    plan = RunPlan(
        model={"name": model, "path": None, "source": "aaco.testing"},
        backend={"name": "fake", "provider": "cpu"},
        spec={},
        warmup=len(warmup_ms),
        iterations=len(latencies_ms),
        batch=batch,
    )
    opts = RunOptions(
        model=model, framework="fake", tag=tag, profile=False, telemetry=False, argv=["aaco"]
    )
    meta = initial_meta(writer, opts, plan)
    t = 1_000_000_000
    stamps: dict[str, tuple[array[int], array[int]]] = {}
    for phase, values in (("warmup", warmup_ms), ("measured", latencies_ms)):
        starts, ends = array("q"), array("q")
        for ms in values:
            starts.append(t)
            t += round(ms * 1e6)
            ends.append(t)
        stamps[phase] = (starts, ends)
        if starts:
            meta["phases"][phase] = [starts[0], ends[-1]]
    table = iters_table(*stamps["warmup"], *stamps["measured"])
    writer.write_table("inference_iters", table)
    meta["status"] = status
    meta["error"] = None if error is None else {"message": error, "stage": "measure"}
    meta["finished_utc"] = utc_now_iso()
    summary: dict[str, Any] = {"status": status, "worker": None}
    summary.update(summarize_iterations(table, batch))
    summary["profile"] = None
    summary["telemetry"] = None
    summary.update(summary_extra or {})
    save_session(writer.path, meta)
    writer.write_json(INFERENCE_SUMMARY_FILE, summary)
    writer.publish()
    if reports:
        write_reports(writer.final_path)
    return Session.load(writer.final_path)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _key_paths(value: Any, prefix: str, out: set[str]) -> None:
    out.add(prefix or "$")
    if isinstance(value, dict):
        for k, v in value.items():
            _key_paths(v, f"{prefix}.{k}", out)
    elif isinstance(value, list):
        for v in value:
            _key_paths(v, f"{prefix}[]", out)


def bundle_shape(root: Path) -> dict[str, Any]:
    """The shape of the bundle folder ``root``: for each file (bundle-relative path), the
    Arrow schema of a Parquet table (column -> type), the sorted JSON key paths of a JSON
    file (``.run.batch``, ``[].name``), or None for any other file."""
    files: dict[str, Any] = {}
    for f in sorted(root.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(root).as_posix()
        if f.suffix == ".parquet":
            schema = pq.read_schema(f)
            files[rel] = {n: str(t) for n, t in zip(schema.names, schema.types, strict=True)}
        elif f.suffix == ".json":
            paths: set[str] = set()
            _key_paths(json.loads(f.read_text()), "", paths)
            files[rel] = sorted(paths)
        else:
            files[rel] = None
    return files
