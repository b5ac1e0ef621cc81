"""The sessions under a root, one summary row each, for ``aaco ls`` and later history views."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aaco.errors import BundleError
from aaco.session import metadata
from aaco.session.paths import INFERENCE_SUMMARY_FILE, LATEST, SERVING_SUMMARY_FILE, SESSION_FILE

if TYPE_CHECKING:
    # imported where a bundle is read: aaco.session.bundle imports pyarrow (~0.2 s), which
    # a listing from the cache never needs
    from aaco.session.bundle import Session

#: run settings that change the measured latencies themselves (the profiled pass is apart):
#: runs of one configuration, pooled or charted together, must share them; the ``run.``
#: keys of the metadata registry's settings (:func:`aaco.session.metadata.settings`)
RUN_SETTINGS = metadata.run_fields(metadata.settings())


# the registry's path of each session.json key a row reads, looked up once (a listing reads
# them for thousands of bundles)
_ROW_KEYS = ("created_utc", "model.name", "backend.name", "run.batch", "tag", "fingerprint",
             "run.threads", "run.preprocess", "run.framework", "kind")  # fmt: skip
_PATHS = {
    key: metadata.lookup(key).path for key in (*_ROW_KEYS, *(f"run.{k}" for k in RUN_SETTINGS))
}


def _get(meta: Mapping[str, Any], key: str) -> Any:
    """``metadata.get(meta, key)`` for a session.json key of ``_PATHS``."""
    value: Any = meta
    for part in _PATHS[key]:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def run_settings(meta: dict[str, Any]) -> str:
    """The ``RUN_SETTINGS`` of a bundle's ``session.json``, as one comparable string."""
    values = {k: _get(meta, f"run.{k}") for k in RUN_SETTINGS}
    return json.dumps(values, sort_keys=True, default=str)


def session_row(session: Session) -> dict[str, Any]:
    """One row: identity, configuration and headline numbers (None when unknown)."""
    meta = session.meta
    summary = session.summary or {}
    lat, thr = summary.get("latency_ms") or {}, summary.get("throughput") or {}
    if not isinstance(lat, dict) or not isinstance(thr, dict):
        raise BundleError(f"{session.path}: inference_summary.json is malformed")
    get = _get
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
    listed with status ``unreadable`` rather than hidden.

    The rows of a root of thousands of bundles are kept in ``ROOT/.catalog.json``
    (:class:`_RowCache`): a bundle whose files are unchanged since is not read again."""
    rows: list[dict[str, Any]] = []
    cache = _RowCache.load(root)
    for path, real in _bundles(root):
        row, stamp = cache.get(path, real)
        if row is None:
            try:
                row = session_row(_load(path, real))
            except BundleError as exc:
                # One malformed bundle must not hide the others.
                row = {
                    "id": path.name,
                    "path": str(path),
                    "status": "unreadable",
                    "error": str(exc),
                }
            else:
                cache.put(real, stamp, row)
        rows.append(row)
    cache.save()
    return rows


def iter_rows(root: Path) -> Iterator[tuple[Path, dict[str, Any] | BundleError]]:
    """``(path, row)`` for every bundle under ``root``, oldest first; the row is the
    :class:`BundleError` that explains why a malformed bundle could not be read."""
    for path, real in _bundles(root):
        try:
            yield path, session_row(_load(path, real))
        except BundleError as exc:
            yield path, exc


def _bundles(root: Path) -> Iterator[tuple[Path, Path]]:
    """:func:`aaco.session.bundle.iter_sessions`, with each bundle's resolved path, for a
    listing of thousands: one directory read per folder and one ``stat`` per bundle; only
    a folder that is a symlink is resolved to check that it stays inside the root."""
    if not root.is_dir():
        return
    inside = root.resolve()
    for day in _entries(root):
        if day.name.startswith(".") or day.name == LATEST or not day.is_dir():
            continue
        for bundle in _entries(Path(day.path)):
            if bundle.name.startswith(".") or not _is_file(os.path.join(bundle.path, SESSION_FILE)):
                continue
            path = Path(bundle.path)
            if day.is_symlink() or bundle.is_symlink():
                real = path.resolve()
                if not real.is_relative_to(inside):
                    continue
            else:
                real = inside / day.name / bundle.name
            yield path, real


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    """The entries of ``folder`` in the order of ``sorted(folder.iterdir())``."""
    with os.scandir(folder) as it:
        entries = list(it)
    paths = {e.name: folder / e.name for e in entries}
    return sorted(entries, key=lambda e: paths[e.name])


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _load(path: Path, real: Path) -> Session:
    """``Session.load(path)`` for a bundle folder found by :func:`_bundles` (``real``: its
    resolved path): its ``session.json`` read once and checked as ``Session.load`` checks
    it; anything it would refuse goes to ``Session.load`` itself, for its exact error."""
    from aaco.session.bundle import (
        _OBJECT_FIELDS,
        _TEXT_FIELDS,
        SUPPORTED_FORMAT_VERSIONS,
        Session,
    )

    try:
        meta = json.loads((path / SESSION_FILE).read_text())
    except (OSError, ValueError):
        return Session.load(path)
    if (
        not isinstance(meta, dict)
        or meta.get("format_version", None) not in SUPPORTED_FORMAT_VERSIONS
        or "format_version" not in meta
        or any(meta.get(k) is not None and not isinstance(meta[k], dict) for k in _OBJECT_FIELDS)
        or any(meta.get(k) is not None and not isinstance(meta[k], str) for k in _TEXT_FIELDS)
    ):
        return Session.load(path)
    return Session(path=real, meta=meta)


#: the listing's cache, in the sessions root (hidden: never taken for a day folder)
CATALOG_CACHE_FILE = ".catalog.json"
# bump when the cache's layout changes
_CACHE_FORMAT = 1


def _code_stamp() -> str:
    """What the rows are computed by: aaco's version and the modules that compute them (a
    changed module, in a source checkout, makes every cached row stale). Found, not
    imported: the bundle module is only imported when a bundle must be read."""
    from aaco import __version__

    parts = [__version__]
    for name in ("aaco.session.bundle", "aaco.session.metadata", "aaco.session.paths", __name__):
        spec = importlib.util.find_spec(name)
        origin = _file_stamp(spec.origin) if spec is not None and spec.origin else None
        parts.append("?" if origin is None else f"{origin[1]}:{origin[2]}")
    return " ".join(parts)


def _file_stamp(path: str) -> list[int] | None:
    """A file's identity and version: (inode, size, mtime, ctime in ns); None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class _RowCache:
    """Rows of the bundles of one root, each kept with the stamps of the files it was
    computed from (session.json, the inference summary, a serving bundle's serving summary):
    a row is reused only while every stamp, the root and the code are the same; unreadable
    bundles are never cached (their error is read anew). Writing is best effort (a
    read-only root just goes uncached), atomic (a temporary file renamed)."""

    def __init__(self, root: Path, inside: Path | None, rows: dict[str, Any]) -> None:
        self.root = root
        self.inside = inside
        self.old = rows
        self.new: dict[str, Any] = {}
        self.changed = False

    @classmethod
    def load(cls, root: Path) -> _RowCache:
        if not root.is_dir():
            return cls(root, None, {})
        inside = root.resolve()
        try:
            data = json.loads((root / CATALOG_CACHE_FILE).read_text())
        except (OSError, ValueError):
            return cls(root, inside, {})
        ok = (
            isinstance(data, dict)
            and data.get("format") == _CACHE_FORMAT
            and data.get("root") == str(inside)
            and data.get("code") == _code_stamp()
            and isinstance(data.get("rows"), dict)
        )
        return cls(root, inside, data["rows"] if ok else {})

    def _key(self, real: Path) -> str | None:
        """A bundle's key: its real folder (a symlink to it shares its row, which names the
        real folder too); None for one outside the root's ``<day>/<bundle>`` layout."""
        if self.inside is None or real.parent.parent != self.inside:
            return None
        return f"{real.parent.name}/{real.name}"

    @staticmethod
    def _stamps(path: Path) -> list[Any]:
        """The stamps of the files a row is computed from, taken before they are read (a
        file that changes after stays newer than its stamp: read again next time)."""
        base = str(path)
        return [
            _file_stamp(os.path.join(base, name))
            for name in (SESSION_FILE, INFERENCE_SUMMARY_FILE, SERVING_SUMMARY_FILE)
        ]

    def get(self, path: Path, real: Path) -> tuple[dict[str, Any] | None, list[Any] | None]:
        """The cached row of a bundle (None: read it), and the stamps to cache it under."""
        key = self._key(real)
        if key is None:
            return None, None
        stamps = self._stamps(path)
        entry = self.old.get(key)
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("row"), dict)
            and entry.get("stamps") == stamps
        ):
            self.new[key] = entry
            row: dict[str, Any] = entry["row"]
            return row, stamps
        return None, stamps

    def put(self, real: Path, stamps: list[Any] | None, row: dict[str, Any]) -> None:
        key = self._key(real)
        if key is None or stamps is None:
            return
        self.new[key] = {"stamps": stamps, "row": row}
        self.changed = True

    def save(self) -> None:
        if self.inside is None or not (self.changed or len(self.new) != len(self.old)):
            return
        data = {"format": _CACHE_FORMAT, "root": str(self.inside), "code": _code_stamp(),
                "rows": self.new}  # fmt: skip
        try:
            text = json.dumps(data, separators=(",", ":"))
            fd, tmp = tempfile.mkstemp(prefix=f"{CATALOG_CACHE_FILE}.", dir=self.root)
        except (OSError, TypeError, ValueError):
            return  # a read-only root (or a row JSON cannot hold): no cache
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.root / CATALOG_CACHE_FILE)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
