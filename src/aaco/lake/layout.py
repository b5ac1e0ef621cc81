"""The lake's layout: its tables, their Arrow schemas and partition keys, and where each
file lies. One place that the exporter, the query views and the readers share.

A lake is a folder::

    LAKE/_lake.json                                      format, version, tables
    LAKE/<table>/vendor=<v>/arch=<a>/date=<YYYY-MM-DD>/part-<batch>.parquet
    LAKE/_staging/<batch>/...                            an export in flight (never read)

Every table has a ``session_id`` column and is partitioned (Hive style) by the session's
``vendor``, ``arch`` and UTC ``date``, which live in the path only, as Hive readers expect
(DuckDB ``hive_partitioning``, Polars ``hive_partitioning``, Spark partition discovery).
Names starting with ``_`` or ``.`` are skipped by all three, so staging and metadata stay
invisible to them.

Format history (``_lake.json`` ``version``):

1. the first: sessions, iterations, ops, kernels, memcpy, gpu_telemetry,
   system_telemetry, requests, serving_points.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from aaco import __version__
from aaco.errors import InputError
from aaco.lake.rows import FLEET_SCHEMA
from aaco.session.bundle import atomic_write_json, utc_now_iso
from aaco.session.schema import TABLES

__all__ = [
    "LAKE_FILE",
    "LAKE_FORMAT",
    "LAKE_TABLES",
    "LAKE_VERSION",
    "PARTITION_KEYS",
    "SERVING_POINTS_SCHEMA",
    "STAGING",
    "LakeTable",
    "open_lake",
]

LAKE_FILE = "_lake.json"
LAKE_FORMAT = "aaco-lake"
LAKE_VERSION = 1
STAGING = "_staging"
#: the Hive partition keys, outermost first: low-cardinality, what fleet queries filter on
PARTITION_KEYS = ("vendor", "arch", "date")

_SESSION_ID = pa.field("session_id", pa.string(), nullable=False)

#: one row per load point of a serving session (``aaco history``'s serving rows)
SERVING_POINTS_SCHEMA = pa.schema(
    [
        _SESSION_ID,
        ("point", pa.int64()),
        ("series", pa.string()),
        ("load", pa.string()),
        ("requests", pa.int64()),
        ("ttft_p50_ms", pa.float64()),
        ("ttft_p99_ms", pa.float64()),
        ("tpot_p50_ms", pa.float64()),
        ("output_tokens_per_s", pa.float64()),
        ("failed_fraction", pa.float64()),
    ]
)

#: the sessions table's extra columns: what the exporter knows of each row
_EXPORT_FIELDS = [
    pa.field("source_stamp", pa.string()),
    pa.field("exported_utc", pa.string()),
    pa.field("lake_batch", pa.string()),
]


@dataclass(frozen=True)
class LakeTable:
    """One table of the lake."""

    name: str
    #: the bundle table it copies (:data:`aaco.session.schema.TABLES`); None: built here
    source: str | None
    doc: str

    @property
    def schema(self) -> pa.Schema:
        """The columns of its files (partition keys excluded: they are in the path)."""
        if self.name == "sessions":
            fields = [f for f in FLEET_SCHEMA if f.name not in PARTITION_KEYS]
            return pa.schema([*fields, *_EXPORT_FIELDS])
        if self.name == "serving_points":
            return SERVING_POINTS_SCHEMA
        assert self.source is not None
        return pa.schema([_SESSION_ID, *TABLES[self.source].schema])

    def folder(self, lake: Path) -> Path:
        return lake / self.name

    def glob(self, lake: Path) -> str:
        """Every data file of the table, as a glob DuckDB and Polars read."""
        return str(lake / self.name / "**" / "*.parquet")


#: every table, sessions first
LAKE_TABLES: dict[str, LakeTable] = {
    t.name: t
    for t in (
        LakeTable("sessions", None, "one row per session: identity, settings, machine, headline"),
        LakeTable("iterations", "inference_iters", "every measured iteration's latency"),
        LakeTable("ops", "ops", "operator events of the profiled pass"),
        LakeTable("kernels", "kernels", "GPU kernel dispatches"),
        LakeTable("memcpy", "memcpy", "GPU memory copies"),
        LakeTable("gpu_telemetry", "gpu_telemetry", "GPU telemetry samples"),
        LakeTable("system_telemetry", "system_events", "CPU, memory and process samples"),
        LakeTable("requests", "serving_requests", "serving requests (aaco llm bench / run)"),
        LakeTable("serving_points", None, "one row per load point of a serving session"),
    )
}


def partition_dir(lake: Path, table: str, vendor: str, arch: str, date: str) -> Path:
    """The folder of one partition of ``table``."""
    return lake / table / f"vendor={vendor}" / f"arch={arch}" / f"date={date}"


def open_lake(lake: Path, *, create: bool) -> dict[str, Any]:
    """The lake's ``_lake.json`` (written when ``create`` and the folder is new or empty);
    InputError when ``lake`` is not a lake this AACO reads."""
    meta_file = lake / LAKE_FILE
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{meta_file}: unreadable ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != LAKE_FORMAT:
            raise InputError(f"{lake}: {LAKE_FILE} does not describe an AACO lake")
        if meta.get("version") != LAKE_VERSION:
            raise InputError(
                f"{lake}: lake version {meta.get('version')} is not supported "
                f"(this AACO reads version {LAKE_VERSION})"
            )
        return meta
    if not create:
        raise InputError(f"{lake}: not an AACO lake (no {LAKE_FILE}); `aaco lake export` makes one")
    if lake.exists() and (not lake.is_dir() or any(lake.iterdir())):
        raise InputError(f"{lake}: exists and is not an AACO lake; give an empty or new folder")
    lake.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": LAKE_FORMAT,
        "version": LAKE_VERSION,
        "created_utc": utc_now_iso(),
        "created_by": f"aaco {__version__}",
        "partition_keys": list(PARTITION_KEYS),
        "tables": {name: {"doc": t.doc, "source": t.source} for name, t in LAKE_TABLES.items()},
    }
    atomic_write_json(meta_file, meta)
    return meta
