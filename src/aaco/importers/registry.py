"""Find the importer for a path by content, and import a list of paths into one TraceTables.

Built-in importers are listed here as ``module:Class`` strings and loaded lazily; third-party
importers register the same way through the ``aaco.importers`` entry-point group. The order
of :data:`BUILTIN` is the sniffing order: specific formats before generic ones (an ONNX
Runtime profile is also a Chrome trace, so it is tried before the Kineto/Chrome importer).

Example::

    tables = import_paths([Path("trace.json.gz")])
    tables.kernels.num_rows
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from aaco.errors import InputError
from aaco.importers.base import Importer, TraceTables, read_head

__all__ = ["BUILTIN", "detect", "import_paths", "importer_classes"]

BUILTIN: tuple[str, ...] = (
    "aaco.importers.ort_trace:OrtTraceImporter",
    "aaco.importers.rocpd:RocpdImporter",
    "aaco.importers.nsys:NsysSqliteImporter",
    "aaco.importers.rocprofv3:Rocprofv3DirImporter",
    "aaco.importers.rocprofv3:Rocprofv3CsvImporter",
    "aaco.importers.rocprofv3_json:Rocprofv3JsonImporter",
    "aaco.importers.rocprofv3_att:Rocprofv3AttImporter",
    "aaco.importers.rocprof_legacy:RocprofV1Importer",
    "aaco.importers.rocprof_legacy:RocprofV2Importer",
    "aaco.importers.kineto:KinetoImporter",
)
ENTRY_POINT_GROUP = "aaco.importers"

_cache: list[type[Importer]] | None = None


def _load(ref: str) -> type[Importer]:
    module, _, attr = ref.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Importer)):
        raise TypeError(f"{ref} is not an Importer subclass")
    return cls


def importer_classes() -> list[type[Importer]]:
    """Every available importer class, built-ins first, in sniffing order."""
    global _cache
    if _cache is None:
        found = [_load(ref) for ref in BUILTIN]
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            cls = ep.load()
            if isinstance(cls, type) and issubclass(cls, Importer) and cls not in found:
                found.append(cls)
        _cache = found
    return list(_cache)


def _expected() -> str:
    return "; ".join(f"{c.name} ({c.description})" for c in importer_classes())


def detect(path: Path) -> type[Importer] | None:
    """The importer that recognises ``path`` by its content, or None."""
    if path.is_dir():
        for cls in importer_classes():
            if cls.reads_directories and cls.sniff(path, b""):
                return cls
        return None
    head = read_head(path)
    for cls in importer_classes():
        if not cls.reads_directories and cls.sniff(path, head):
            return cls
    return None


def _expand(path: Path) -> tuple[list[tuple[Path, type[Importer]]], list[str]]:
    """Importable units under ``path`` and the files skipped as not recognised."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    cls = detect(path)
    if cls is not None:
        return [(path, cls)], []
    if not path.is_dir():
        if path.stat().st_size == 0:
            raise InputError(f"{path}: empty file, expected a trace")
        raise InputError(f"{path}: not a recognised trace; expected one of: {_expected()}")
    units: list[tuple[Path, type[Importer]]] = []
    skipped: list[str] = []
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            sub, sub_skipped = _expand(child)
            units += sub
            skipped += sub_skipped
            continue
        found = detect(child)
        if found is None:
            skipped.append(str(child))
        else:
            units.append((child, found))
    return units, skipped


def import_paths(paths: Sequence[Path]) -> TraceTables:
    """Import every trace in ``paths`` (files or directories) into one TraceTables.

    A named file that no importer recognises is an error; inside a directory such files are
    skipped and listed in ``meta["skipped"]``. A directory with no trace at all is an error.
    A file given more than once (or also found in a directory given) is read once, its other
    mentions listed in ``meta["repeated"]``.
    """
    units: list[tuple[Path, type[Importer]]] = []
    skipped: list[str] = []
    for p in paths:
        found, skip = _expand(Path(p))
        if not found and Path(p).is_dir():
            raise InputError(f"{p}: no recognised trace in this directory")
        units += found
        skipped += skip
    # a file named twice (or also found inside a directory given) is read once
    seen: set[Path] = set()
    repeated: list[str] = []
    unique_units: list[tuple[Path, type[Importer]]] = []
    for path, cls in units:
        key = path.resolve()
        if key in seen:
            repeated.append(str(path))
        else:
            seen.add(key)
            unique_units.append((path, cls))
    parts = []
    for path, cls in unique_units:
        tables = cls().read(path)
        tables.meta.setdefault("importer", cls.name)
        tables.meta.setdefault("path", str(path))
        parts.append(tables)
    merged = TraceTables.merge(parts)
    for part in parts:  # files an importer skipped inside a directory it read as a unit
        skipped += [str(x) for x in part.meta.get("skipped") or []]
    merged.meta["skipped"] = skipped
    merged.meta["repeated"] = repeated
    return merged
