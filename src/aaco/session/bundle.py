"""The session bundle: a folder of Parquet tables and JSON files that every command reads.

Layout (format_version 1)::

    session.json  env.json
    model/model_meta.json  model/graph_nodes.parquet  model/graph_edges.parquet
    model/optimized.onnx                       (graph ORT executed, when it could be saved)
    runtime/ort_config.json
    telemetry/system_events.parquet
    profiler/ort_profile_raw/  profiler/ops.parquet  profiler/ort_runs.parquet
    metrics/inference_iters.parquet  metrics/inference_summary.json
    report/

Room is kept for ``profiler/kernels.parquet``, ``attribution/``, the derived metrics and the
diagnosis under ``metrics/``, ``regress/`` and ``telemetry/gpu_events.parquet``; every JSON
file's path is named in :mod:`aaco.session.paths`.

A bundle is built in a hidden staging folder (``.<id>.partial``) and renamed into place
when the run ends, whatever its status, so a folder without the dot is never half-written.
Every file inside is written to a temporary name and renamed.

Format history:
    1 -- first version.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from aaco.errors import BundleError, InputError
from aaco.session.paths import (
    ENV_FILE,
    INFERENCE_SUMMARY_FILE,
    LATEST,
    MODEL_META_FILE,
    ORT_CONFIG_FILE,
    SESSION_FILE,
)
from aaco.session.schema import TABLES, TableSpec

_T = TypeVar("_T")

FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = (1,)
# session.json fields whose type readers rely on; a bundle with another type is malformed
_OBJECT_FIELDS = ("model", "backend", "run", "clock", "phases", "worker", "telemetry")
#: env.json sections every reader takes for objects
_ENV_SECTIONS = ("python", "cpu", "memory", "os", "gpus", "onnxruntime", "packages", "container")
_TEXT_FIELDS = ("session_id", "created_utc", "finished_utc", "status", "tag", "fingerprint")

STATUS_RUNNING = "running"
STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"
STATUS_TIMEOUT = "timeout"


def _file_mode() -> int:
    # mkstemp creates 0600 files; bundles are meant to be shared, so honour the umask instead.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_json(obj: Any) -> str:
    """JSON text in the bundle's style: indented, keys in insertion order, NaN refused."""
    return json.dumps(obj, indent=2, allow_nan=False, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    # numpy scalars and paths show up in metadata; anything else is a bug worth seeing.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, to_json(obj).encode())


# (device, inode, mtime ns, size) of a Parquet file -> the table written to it
_FileKey = tuple[int, int, int, int]
_HANDOFF: contextvars.ContextVar[dict[_FileKey, tuple[Path, pa.Table]] | None] = (
    contextvars.ContextVar("aaco_table_handoff", default=None)
)


def _file_key(st: os.stat_result) -> _FileKey:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@contextlib.contextmanager
def table_handoff() -> Iterator[None]:
    """Within this block, a table this thread writes with :func:`write_table` stays in
    memory and a :class:`Session` reading that same file back gets it without decoding the
    Parquet again (``aaco import`` writes the tables, then its analyses and reports read
    them). The file is recognised by device, inode, modification time and size, so a file
    replaced or changed since is read from disk; renaming the bundle folder (publishing it)
    keeps the match. The tables are released when the outermost block ends."""
    if _HANDOFF.get() is not None:
        yield
        return
    token = _HANDOFF.set({})
    try:
        yield
    finally:
        _HANDOFF.reset(token)


@contextlib.contextmanager
def bundle_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the bundle folder ``path`` while a command rewrites it
    (``aaco import --session``, ``aaco analyze``): a second such command on the same bundle
    waits for the first instead of interleaving its files with it. An advisory ``flock`` on
    the folder itself (nothing written); where ``fcntl`` is missing, no lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _handed_back(path: Path) -> pa.Table | None:
    """The table written to ``path`` inside :func:`table_handoff`, if the file is unchanged."""
    tables = _HANDOFF.get()
    if not tables:
        return None
    try:
        found = tables.get(_file_key(path.stat()))
    except OSError:
        return None
    return None if found is None else found[1]


def write_table(path: Path, table: pa.Table) -> None:
    """Write a Parquet table atomically (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    tables = _HANDOFF.get()
    if tables is not None:
        # a file rewritten in the block: its earlier table is unreachable, release it
        for key in [k for k, (p, _) in tables.items() if p == path]:
            del tables[key]
        tables[_file_key(path.stat())] = (path, table)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: unreadable JSON ({exc})") from exc


def new_session_id(now: datetime | None = None) -> str:
    """``YYYYmmdd_HHMMSS_<6 hex>``: sortable by time, unique with high probability."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


@dataclass
class Session:
    """A loaded session bundle, with typed access to its files.

    >>> s = Session.load("sessions/latest")          # doctest: +SKIP
    >>> s.status, s.summary["latency_ms"]["p50"]     # doctest: +SKIP
    """

    path: Path
    meta: dict[str, Any]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Session:
        """Load a bundle from its folder, or from a sessions root (its ``latest`` pointer).

        ``latest`` alone means ``./sessions/latest``.
        """
        p = Path(path)
        if str(path) == LATEST and not p.exists():
            p = Path("sessions") / LATEST
        if p.is_dir() and not (p / SESSION_FILE).exists() and (p / LATEST).exists():
            p = p / LATEST
        p = resolve_latest(p)
        if not p.exists():
            raise BundleError(f"{path}: no such session bundle")
        if not p.is_dir() or not (p / SESSION_FILE).is_file():
            raise BundleError(f"{path}: not a session bundle (no {SESSION_FILE})")
        try:
            meta = read_json(p / SESSION_FILE)
        except FileNotFoundError as exc:
            raise BundleError(f"{path}: not a session bundle (no {SESSION_FILE})") from exc
        if not isinstance(meta, dict) or "format_version" not in meta:
            raise BundleError(f"{path}: {SESSION_FILE} has no format_version")
        version = meta["format_version"]
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise BundleError(
                f"{path}: bundle format_version {version} is not supported "
                f"(this AACO reads {list(SUPPORTED_FORMAT_VERSIONS)})"
            )
        for key in _OBJECT_FIELDS:
            if meta.get(key) is not None and not isinstance(meta[key], dict):
                raise BundleError(f"{path}: {SESSION_FILE} field {key!r} is not an object")
        for key in _TEXT_FIELDS:
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise BundleError(f"{path}: {SESSION_FILE} field {key!r} is not a string")
        return cls(path=p.resolve(), meta=meta)

    # -- metadata -------------------------------------------------------------------------
    @property
    def session_id(self) -> str:
        """The bundle's folder name: what commands and the API look a session up by (a
        renamed or copied bundle keeps its creation id in ``meta["session_id"]``)."""
        return self.path.name

    @property
    def status(self) -> str:
        return str(self.meta.get("status", "unknown"))

    @property
    def error(self) -> dict[str, Any] | None:
        err = self.meta.get("error")
        return err if isinstance(err, dict) else None

    def memo(self, key: str, make: Callable[[], _T]) -> _T:
        """``make()``, computed once per loaded bundle (a Session is a snapshot: what is
        derived from its files stays true while it lives); ``key`` names the result."""
        memo_key = f"memo:{key}"
        if memo_key not in self._cache:
            self._cache[memo_key] = make()
        return self._cache[memo_key]  # type: ignore[no-any-return]

    def json_file(self, relpath: str) -> Any | None:
        """A JSON file of the bundle, or None when it is absent."""
        if relpath not in self._cache:
            f = self.path / relpath
            self._cache[relpath] = read_json(f) if f.is_file() else None
        return self._cache[relpath]

    def _json_object(
        self, relpath: str, objects: tuple[str, ...] = (), numbers: tuple[str, ...] = ()
    ) -> dict[str, Any] | None:
        """A bundle JSON file that must be an object; ``objects``: its sections that must be
        objects (or null), ``numbers``: sections whose values must be numbers (or null).
        A file that breaks this is a malformed bundle (BundleError), found here, where it is
        read, rather than as a crash of whatever renders it."""
        data = self.json_file(relpath)
        if data is not None and not isinstance(data, dict):
            raise BundleError(f"{self.path / relpath}: not a JSON object")
        for key in objects + numbers if data else ():
            value = data.get(key) if data else None
            if value is not None and not isinstance(value, dict):
                raise BundleError(f"{self.path / relpath}: field {key!r} is not an object")
        for key in numbers if data else ():
            for k, v in ((data or {}).get(key) or {}).items():
                if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                    raise BundleError(f"{self.path / relpath}: {key}.{k} is not a number")
        return data

    @property
    def env(self) -> dict[str, Any] | None:
        """env.json; a section that is not an object (one odd value of the machine's
        description) reads as absent, unknown, rather than rejecting the bundle."""
        data = self._json_object(ENV_FILE)
        if not data:
            return data
        odd = [
            k for k in _ENV_SECTIONS if data.get(k) is not None and not isinstance(data[k], dict)
        ]
        return {**data, **dict.fromkeys(odd)} if odd else data

    @property
    def summary(self) -> dict[str, Any] | None:
        return self._json_object(
            INFERENCE_SUMMARY_FILE,
            objects=("throughput", "telemetry", "warmup", "noise", "profile", "worker"),
            numbers=("latency_ms",),
        )

    @property
    def model_meta(self) -> dict[str, Any] | None:
        return self._json_object(MODEL_META_FILE)

    @property
    def ort_config(self) -> dict[str, Any] | None:
        return self._json_object(ORT_CONFIG_FILE)

    # -- tables ---------------------------------------------------------------------------
    def has_table(self, name: str) -> bool:
        return (self.path / _spec(name).path).is_file()

    def table(self, name: str) -> pa.Table | None:
        """A declared table, checked against its schema; None when the bundle lacks it."""
        spec = _spec(name)
        key = f"table:{name}"
        if key not in self._cache:
            f = self.path / spec.path
            if not f.is_file():
                self._cache[key] = None
            else:
                raw = _handed_back(f)
                try:
                    if raw is None:
                        raw = pq.read_table(f)
                except (OSError, pa.ArrowInvalid) as exc:
                    raise BundleError(f"{f}: unreadable Parquet ({exc})") from exc
                self._cache[key] = spec.conform(raw)
        result: pa.Table | None = self._cache[key]
        return result

    def iters(self) -> pa.Table | None:
        return self.table("inference_iters")

    def ops(self) -> pa.Table | None:
        return self.table("ops")

    def system_events(self) -> pa.Table | None:
        return self.table("system_events")


def _spec(name: str) -> TableSpec:
    try:
        return TABLES[name]
    except KeyError:
        raise BundleError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}") from None


def resolve_latest(p: Path) -> Path:
    """Follow a ``latest`` pointer (a symlink, or a text file where symlinks are unavailable)."""
    if p.name == LATEST and p.is_file():
        return (p.parent / p.read_text().strip()).resolve()
    return p


class BundleWriter:
    """Builds one bundle in a staging folder and publishes it with a rename.

    The writer never leaves a folder that looks complete unless :meth:`publish` ran; a
    crash of AACO itself leaves only the hidden ``.<id>.partial`` folder, which ``aaco ls``
    ignores.
    """

    def __init__(self, root: Path, session_id: str | None = None) -> None:
        self.root = root
        self.session_id = session_id or new_session_id()
        day = f"{self.session_id[0:4]}-{self.session_id[4:6]}-{self.session_id[6:8]}"
        self.final_path = root / day / self.session_id
        self.path = root / day / f".{self.session_id}.partial"
        try:
            self.path.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise InputError(f"cannot write sessions under {root}: {exc.strerror or exc}") from exc
        if not os.access(self.path, os.W_OK):
            raise InputError(f"cannot write sessions under {root}: permission denied")

    def file(self, relpath: str) -> Path:
        """Absolute path of a bundle file (inside the staging folder until published)."""
        p = self.path / relpath
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, relpath: str, obj: Any) -> None:
        atomic_write_json(self.file(relpath), obj)

    def write_table(self, name: str, table: pa.Table) -> None:
        spec = _spec(name)
        write_table(self.file(spec.path), spec.conform(table))

    def discard(self) -> None:
        """Remove the staging folder: nothing worth keeping was produced (bad input)."""
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # the day folder, when this was its only entry

    def publish(self) -> Path:
        """Rename the staging folder into place and point ``latest`` at it."""
        os.replace(self.path, self.final_path)
        self.path = self.final_path
        update_latest(self.root, self.final_path)
        return self.final_path


def update_latest(root: Path, target: Path) -> None:
    """Atomically point ``root/latest`` at ``target`` (relative symlink)."""
    link = root / LATEST
    rel = os.path.relpath(target, root)
    tmp = root / f".{LATEST}.{secrets.token_hex(4)}"
    try:
        os.symlink(rel, tmp)
    except OSError:
        atomic_write_bytes(link, rel.encode())
        return
    os.replace(tmp, link)


def iter_sessions(root: Path) -> Iterator[Path]:
    """Published bundles under a sessions root, oldest first (hidden staging folders skipped).

    A bundle or day folder that is a symlink resolving outside the root is skipped: what a
    root lists (and what ``aaco serve`` serves from it) stays inside it.
    """
    if not root.is_dir():
        return
    inside = root.resolve()
    for day in sorted(root.iterdir()):
        if day.name.startswith(".") or day.name == LATEST or not day.is_dir():
            continue
        for bundle in sorted(day.iterdir()):
            if (
                not bundle.name.startswith(".")
                and (bundle / SESSION_FILE).is_file()
                and bundle.resolve().is_relative_to(inside)
            ):
                yield bundle


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
