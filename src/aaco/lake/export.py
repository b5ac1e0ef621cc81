"""``aaco lake export``: copy the sessions of a sessions root into a lake, incrementally,
idempotently and crash-safely.

Each export run writes batches. A batch is first written whole under
``LAKE/_staging/<batch>/`` (which no reader looks at) and flushed to disk, then committed:

1. a commit record (``COMMIT.json``: the batch's files, and the sessions it replaces in
   older batches) is written atomically;
2. the replaced sessions' rows are filtered out of the older batches' files (each file
   rewritten atomically);
3. the staged files are moved into place (``os.replace``), the ``sessions`` files last;
4. the staging folder is removed.

A kill before step 1 leaves staging that the next export deletes; a kill after it leaves a
commit that the next export finishes (every step can be redone). Every data file is
complete Parquet at every moment, so the lake is readable throughout.

A session is exported again only when its files changed since (its ``source_stamp``: the
size and modification time of the bundle's files that the lake copies); a running session
is skipped until it finishes. Memory is bounded by the rows buffered before they are
written (:data:`FLUSH_ROWS` per open file, :data:`MAX_BUFFERED_ROWS` in all), not by the
size of the sessions.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aaco.errors import BundleError, InputError, UsageError
from aaco.lake.layout import LAKE_TABLES, PARTITION_KEYS, STAGING, open_lake, partition_dir
from aaco.lake.rows import BUNDLE_ERRORS, fleet_row, partition_value, session_date
from aaco.regress import serving
from aaco.regress.history import serving_rows
from aaco.runners.harness import one_line
from aaco.session.bundle import Session, atomic_write_json, iter_sessions, utc_now_iso
from aaco.session.paths import (
    ENV_FILE,
    INFERENCE_SUMMARY_FILE,
    MODEL_META_FILE,
    SERVING_SUMMARY_FILE,
    SESSION_FILE,
)
from aaco.session.schema import TABLES

__all__ = ["ExportResult", "export_lake", "open_lake", "recover", "serving_points_table"]

#: rows buffered per open file before a row group is written
FLUSH_ROWS = 65_536
#: rows buffered over all open files of a batch: past it, every buffer is written out (a
#: lake of many partitions would otherwise hold FLUSH_ROWS for each of them)
MAX_BUFFERED_ROWS = 262_144
#: sessions per batch: a kill loses at most this many sessions' work
BATCH_SESSIONS = 500
#: a batch is committed once it holds this many open files (one per table and partition),
#: so that an export of sessions over many dates stays far below the descriptor limit
MAX_OPEN_FILES = 128
_COMMIT = "COMMIT.json"
_LOCK = ".lock"
_PART = re.compile(r"^part-(?P<batch>[0-9TZ]+-[0-9a-f]+)\.parquet$")
#: the bundle files a session's lake rows are read from (the tables' own paths are added)
_STAMPED = (SESSION_FILE, ENV_FILE, INFERENCE_SUMMARY_FILE, SERVING_SUMMARY_FILE, MODEL_META_FILE)


@dataclass
class ExportResult:
    """What one export did."""

    lake: Path
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    #: sessions still running: exported once they finish
    running: int = 0
    #: (bundle, one-line reason) of each bundle that could not be read
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: rows written per table
    rows: dict[str, int] = field(default_factory=dict)
    batches: list[str] = field(default_factory=list)
    #: unfinished batches of an earlier, interrupted export: finished or discarded
    recovered: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "lake": str(self.lake),
            "added": self.added,
            "replaced": self.replaced,
            "unchanged": self.unchanged,
            "running": self.running,
            "unreadable": [{"bundle": b, "error": e} for b, e in self.unreadable],
            "rows": self.rows,
            "batches": self.batches,
            "recovered": self.recovered,
            "seconds": self.seconds,
        }


# -- the lake folder ------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(lake: Path) -> Iterator[None]:
    """One writer at a time: a second export fails at once rather than interleaving."""
    with (lake / _LOCK).open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(f"{lake}: another export is writing this lake") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _batch_files(lake: Path, batch: str) -> list[Path]:
    """The committed data files of ``batch``, every table."""
    name = f"part-{batch}.parquet"
    return [p for t in LAKE_TABLES for p in (lake / t).rglob(name)]


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or a folder) to disk: a commit record must never be durable
    before the files it names."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rewrite_without(path: Path, ids: set[str]) -> None:
    """Rewrite ``path`` without the rows of ``ids``, streamed a row group at a time
    (atomically; removed when no row stays)."""
    pf = pq.ParquetFile(path)
    drop = pa.array(sorted(ids), pa.string())
    present = pc.is_in(pf.read(columns=["session_id"])["session_id"], drop)
    if not pc.any(present).as_py():
        return
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    kept = 0
    with pq.ParquetWriter(tmp, pf.schema_arrow, compression="zstd") as writer:
        for batch in pf.iter_batches(batch_size=FLUSH_ROWS):
            rows = pa.Table.from_batches([batch]).filter(
                pc.invert(pc.is_in(batch.column("session_id"), drop))
            )
            if rows.num_rows:
                writer.write_table(rows)
                kept += rows.num_rows
    if kept == 0:
        tmp.unlink()
        path.unlink()
        return
    _fsync(tmp)
    os.replace(tmp, path)


def _commit_record(staged: Path) -> dict[str, Any] | None:
    """The batch's commit record; None when it has none, or an unreadable one (a record
    cut short: its files were flushed before it was written, so nothing is lost by
    treating the batch as never committed)."""
    try:
        record = json.loads((staged / _COMMIT).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and isinstance(record.get("files"), list)
    return record if ok else None


def _apply(lake: Path, staged: Path) -> None:
    """Finish the commit recorded in ``staged/COMMIT.json`` (every step can be redone)."""
    commit = _commit_record(staged)
    if commit is None:
        shutil.rmtree(staged, ignore_errors=True)
        return
    for old, ids in (commit.get("replace") or {}).items():
        for f in _batch_files(lake, old):
            _rewrite_without(f, set(ids))
    for rel in commit["files"]:
        src, dst = staged / rel, lake / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    shutil.rmtree(staged, ignore_errors=True)


def recover(lake: Path) -> list[str]:
    """Finish the committed batches of an interrupted export and discard the uncommitted
    ones; the batch ids handled."""
    root = lake / STAGING
    done: list[str] = []
    if not root.is_dir():
        return done
    for staged in sorted(root.iterdir()):
        _apply(lake, staged)  # a batch without a (whole) commit record is discarded
        done.append(staged.name)
    return done


def _exported(lake: Path) -> dict[str, tuple[str | None, str]]:
    """session id -> (source stamp, batch) of every session the lake holds."""
    out: dict[str, tuple[str | None, str]] = {}
    folder = lake / "sessions"
    if not folder.is_dir():
        return out
    for f in sorted(folder.rglob("*.parquet")):
        if not _PART.match(f.name):
            continue
        cols = ["session_id", "source_stamp", "lake_batch"]
        t = pq.read_table(f, columns=cols, partitioning=None)
        for sid, stamp, batch in zip(
            t["session_id"].to_pylist(),
            t["source_stamp"].to_pylist(),
            t["lake_batch"].to_pylist(),
            strict=True,
        ):
            out[sid] = (stamp, batch)
    return out


# -- one session --------------------------------------------------------------------------


def source_stamp(bundle: Path) -> str:
    """A digest of the size and modification time of the bundle files the lake copies."""
    parts: list[str] = []
    rels = [*_STAMPED, *(TABLES[t.source].path for t in LAKE_TABLES.values() if t.source)]
    for rel in rels:
        try:
            st = (bundle / rel).stat()
        except OSError:
            continue
        parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _sources(session: Session) -> list[tuple[str, pq.ParquetFile]]:
    """``(lake table, opened file)`` of each bundle table the session has, its schema
    checked (a column of the wrong type rejects the session before any of its rows is
    staged)."""
    out = []
    for name, lt in LAKE_TABLES.items():
        if lt.source is None:
            continue
        spec = TABLES[lt.source]
        path = session.path / spec.path
        if not path.is_file():
            continue
        try:
            pf = pq.ParquetFile(path)
            spec.conform(pf.schema_arrow.empty_table())
        except (OSError, pa.ArrowInvalid) as exc:
            raise BundleError(f"{path}: unreadable Parquet ({exc})") from exc
        out.append((name, pf))
    return out


def _stream(session: Session, name: str, pf: pq.ParquetFile) -> Iterator[pa.Table]:
    """The rows of one bundle table with their ``session_id``, FLUSH_ROWS at a time (a
    smaller table in one read, which is several times faster than batches)."""
    lt = LAKE_TABLES[name]
    assert lt.source is not None
    spec = TABLES[lt.source]
    # a file written with the declared schema (the usual case) needs no conforming: its
    # columns are taken as they are
    declared = pf.schema_arrow.remove_metadata().equals(spec.schema.remove_metadata())
    try:
        if pf.metadata.num_rows <= FLUSH_ROWS:
            parts: Iterator[pa.Table] = iter([pf.read(use_threads=False)])
        else:
            parts = (pa.Table.from_batches([b]) for b in pf.iter_batches(batch_size=FLUSH_ROWS))
        for part in parts:
            table = part if declared else spec.conform(part)
            ids = pa.array([session.session_id] * table.num_rows, pa.string())
            yield pa.Table.from_arrays([ids, *table.columns], schema=lt.schema)
    except (OSError, pa.ArrowInvalid) as exc:
        raise BundleError(f"{session.path / spec.path}: unreadable Parquet ({exc})") from exc


_POINT_FIGURES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "output_tokens_per_s",
                  "failed_fraction")  # fmt: skip


def serving_points_table(session: Session) -> pa.Table | None:
    """The serving session's load points (``aaco history``'s serving rows)."""
    if not serving.is_serving(session):
        return None
    rows = [
        {
            "session_id": session.session_id,
            "point": r["point"],
            "series": series,
            "load": r["load"],
            "requests": r["requests"],
            **{k: r[k] for k in _POINT_FIGURES},
        }
        for series, r in serving_rows(session)
    ]
    return pa.Table.from_pylist(rows, schema=LAKE_TABLES["serving_points"].schema)


# -- a batch -------------------------------------------------------------------------------


class _Batch:
    """The files of one batch being written under staging."""

    def __init__(self, lake: Path) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.id = f"{stamp}-{secrets.token_hex(3)}"
        self.lake = lake
        self.staged = lake / STAGING / self.id
        self.staged.mkdir(parents=True)
        self.part = f"part-{self.id}.parquet"
        self._writers: dict[Path, pq.ParquetWriter] = {}
        self._buffers: dict[Path, list[pa.Table]] = {}
        self._buffered: dict[Path, int] = {}
        self._total = 0
        self._schemas: dict[Path, pa.Schema] = {}
        self.sessions: dict[Path, list[dict[str, Any]]] = {}
        self.replace: dict[str, list[str]] = {}
        #: sessions whose rows are partly staged (a table failed mid-way): dropped at commit
        self.drop: set[str] = set()
        #: the commit record is written: from here the batch is finished, never discarded
        self.committed = False
        self.applied = False
        self.count = 0
        self.rows: dict[str, int] = {}

    @property
    def open_files(self) -> int:
        """Files open for writing, and buffers that will open one."""
        return len(set(self._writers) | set(self._buffers))

    def _rel(self, table: str, part: tuple[str, str, str]) -> Path:
        return partition_dir(Path(), table, *part) / self.part

    def add(self, table: str, part: tuple[str, str, str], rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        rel = self._rel(table, part)
        self._schemas[rel] = rows.schema
        self._buffers.setdefault(rel, []).append(rows)
        self._buffered[rel] = self._buffered.get(rel, 0) + rows.num_rows
        self.rows[table] = self.rows.get(table, 0) + rows.num_rows
        self._total += rows.num_rows
        if self._buffered[rel] >= FLUSH_ROWS:
            self._flush(rel)
        if self._total >= MAX_BUFFERED_ROWS:
            for other in list(self._buffers):
                self._flush(other)

    def _flush(self, rel: Path) -> None:
        buffered = self._buffers.pop(rel, [])
        self._total -= self._buffered.pop(rel, 0)
        if not buffered:
            return
        writer = self._writers.get(rel)
        if writer is None:
            path = self.staged / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, self._schemas[rel], compression="zstd")
            self._writers[rel] = writer
        writer.write_table(pa.concat_tables(buffered))

    def commit(self) -> list[Path]:
        """Write the sessions files and the commit record; the files, sessions last."""
        for rel in list(self._buffers):
            self._flush(rel)
        for w in self._writers.values():
            w.close()
        files = sorted(self._writers)
        if self.drop:
            for rel in files:
                _rewrite_without(self.staged / rel, self.drop)
            files = [rel for rel in files if (self.staged / rel).is_file()]
        schema = LAKE_TABLES["sessions"].schema
        sessions: list[Path] = []
        for part_dir, rows in sorted(self.sessions.items()):
            rel = part_dir / self.part
            path = self.staged / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")
            sessions.append(rel)
        self.rows["sessions"] = self.count
        folders = set()
        for rel in [*files, *sessions]:
            _fsync(self.staged / rel)
            folders.add((self.staged / rel).parent)
        for folder in folders:
            _fsync(folder)
        record = {
            "batch": self.id,
            "files": [str(p) for p in [*files, *sessions]],
            "replace": self.replace,
        }
        atomic_write_json(self.staged / _COMMIT, record)
        _fsync(self.staged)
        self.committed = True
        return [*files, *sessions]

    def discard(self) -> None:
        for w in self._writers.values():
            with contextlib.suppress(Exception):
                w.close()
        shutil.rmtree(self.staged, ignore_errors=True)


@dataclass
class _Prepared:
    """One bundle read ahead of the writer: what to do with it, and its rows."""

    bundle: Path
    #: ``ready``, ``running``, ``unchanged`` or ``error``
    state: str
    session_id: str = ""
    error: str = ""
    stamp: str = ""
    old: tuple[str | None, str] | None = None
    row: dict[str, Any] = field(default_factory=dict)
    part: tuple[str, str, str] = ("", "", "")
    #: the tables read whole (up to FLUSH_ROWS rows each), and those streamed by the writer
    small: list[tuple[str, pa.Table]] = field(default_factory=list)
    large: list[tuple[str, pq.ParquetFile]] = field(default_factory=list)
    session: Session | None = None


def _prepare(bundle: Path, known: dict[str, tuple[str | None, str]]) -> _Prepared:
    """Everything that can reject a bundle, and its small tables, read in a worker thread
    (Parquet decoding releases the GIL: the next sessions are read while one is written)."""
    # a session's id is its folder's name (Session.session_id): an unchanged bundle is
    # known from a few stat calls, without reading it
    stamp = source_stamp(bundle)
    old = known.get(bundle.name)
    if old is not None and old[0] == stamp:
        return _Prepared(bundle, "unchanged", bundle.name)
    try:
        session = Session.load(bundle)
        sid = session.session_id
        if session.status == "running":
            return _Prepared(bundle, "running", sid)
        row = fleet_row(session)
        part = (row["vendor"], row["arch"], partition_value(session_date(row, session)))
        prepared = _Prepared(bundle, "ready", sid, stamp=stamp, old=old, row=row, part=part)
        for name, pf in _sources(session):
            if pf.metadata.num_rows <= FLUSH_ROWS:
                prepared.small += [(name, t) for t in _stream(session, name, pf)]
            else:
                prepared.large.append((name, pf))
        points = serving_points_table(session)
        if points is not None:
            prepared.small.append(("serving_points", points))
        prepared.session = session
        return prepared
    except BundleError as exc:
        return _Prepared(bundle, "error", error=str(exc))
    except BUNDLE_ERRORS as exc:
        # a hand-edited or damaged file the readers did not foresee: this bundle only
        return _Prepared(
            bundle, "error", error=f"unreadable ({type(exc).__name__}: {one_line(exc)})"
        )


def _read_ahead(
    bundles: Iterator[Path], known: dict[str, tuple[str | None, str]], ahead: int = 4
) -> Iterator[_Prepared]:
    """:func:`_prepare` of each bundle, in order, at most ``ahead`` read before they are
    written (memory stays bounded)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="aaco-lake") as pool:
        window: list[Future[_Prepared]] = []
        try:
            for bundle in bundles:
                window.append(pool.submit(_prepare, bundle, known))
                if len(window) > ahead:
                    yield window.pop(0).result()
            while window:
                yield window.pop(0).result()
        finally:
            for f in window:
                f.cancel()


def export_lake(
    root: Path,
    lake: Path,
    *,
    batch_sessions: int = BATCH_SESSIONS,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Export every finished session under ``root`` that the lake lacks, or holds in an
    older state, into ``lake`` (created when new); see the module's docstring."""
    if batch_sessions < 1:
        raise UsageError("batch_sessions must be at least 1")
    if not root.is_dir():
        raise InputError(f"{root}: no such sessions root")
    started = time.perf_counter()
    open_lake(lake, create=True)
    result = ExportResult(lake=lake)
    with _locked(lake):
        result.recovered = recover(lake)
        known = _exported(lake)
        seen: set[str] = set()
        batch: _Batch | None = None
        try:
            for prep in _read_ahead(iter_sessions(root), known):
                if prep.state == "error":
                    result.unreadable.append((str(prep.bundle), prep.error))
                    continue
                sid = prep.session_id
                if sid in seen:
                    result.unreadable.append(
                        (str(prep.bundle), f"a second bundle named {sid} (the first is exported)")
                    )
                    continue
                seen.add(sid)
                if prep.state == "running":
                    result.running += 1
                    continue
                if prep.state == "unchanged":
                    result.unchanged += 1
                    continue
                if batch is None:
                    batch = _Batch(lake)
                try:
                    _add_session(batch, prep)
                except BundleError as exc:
                    result.unreadable.append((str(prep.bundle), str(exc)))
                    continue
                if prep.old is not None:
                    batch.replace.setdefault(prep.old[1], []).append(sid)
                    result.replaced += 1
                else:
                    result.added += 1
                if progress is not None:
                    progress(result.added + result.replaced)
                if batch.count >= batch_sessions or batch.open_files >= MAX_OPEN_FILES:
                    _commit(batch, result)
                    batch = None
            if batch is not None:
                _commit(batch, result)
                batch = None
        finally:
            if batch is not None and batch.committed and not batch.applied:
                # interrupted after the commit record (Ctrl-C, SIGTERM, a full disk while
                # moving files in): finish it now if possible, else the next export does
                with contextlib.suppress(Exception):
                    _apply(batch.lake, batch.staged)
            elif batch is not None:  # before its commit record: nothing of it stays
                batch.discard()
    result.seconds = time.perf_counter() - started
    return result


def _add_session(batch: _Batch, prep: _Prepared) -> None:
    """Stage one session's rows (its tables first; its sessions row is kept for the end).

    What can reject a session (its summary, its tables' schemas, its serving points) was
    read before any of its rows is staged; a large table that fails mid-way has the rows
    already staged dropped when the batch is committed."""
    assert prep.session is not None
    for name, rows in prep.small:
        batch.add(name, prep.part, rows)
    try:
        for name, pf in prep.large:
            for rows in _stream(prep.session, name, pf):
                batch.add(name, prep.part, rows)
    except BundleError:
        batch.drop.add(prep.session_id)
        raise
    row = dict(prep.row, source_stamp=prep.stamp, exported_utc=utc_now_iso(), lake_batch=batch.id)
    for key in PARTITION_KEYS:
        row.pop(key, None)
    batch.sessions.setdefault(partition_dir(Path(), "sessions", *prep.part), []).append(row)
    batch.count += 1


def _commit(batch: _Batch, result: ExportResult) -> None:
    batch.commit()
    _apply(batch.lake, batch.staged)
    batch.applied = True
    result.batches.append(batch.id)
    for name, n in batch.rows.items():
        result.rows[name] = result.rows.get(name, 0) + n
