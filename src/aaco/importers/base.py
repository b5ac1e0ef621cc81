"""The importer plug-in interface and the normalized result every importer returns.

An importer reads one trace file (or one directory a tool writes as a unit, such as a rocpd
database) and returns a :class:`TraceTables`: Arrow tables that conform to the declared
schemas of :mod:`aaco.session.schema` (``kernels``, ``api_calls``, ``memcpy``, ``ops``,
``annotations``, ``kernel_counters``, ``att_instructions``), each possibly empty, plus a
``meta`` dict describing what was read (tool, format variant, clock, devices, counts).

Importers are chosen by *content*: :meth:`Importer.sniff` gets the path and the first bytes
of the (decompressed) file and answers whether it recognises the format. The name of a file
is a hint at most; a CSV is recognised by its header columns, a JSON trace by its keys.

Rules every importer follows:

* Match columns and keys **by name**, never by position; accept the documented variants.
* Stream: memory is bounded by the columns kept, never by the size of the text.
* Times become integer nanoseconds (``*_ns`` columns) on the trace's own clock.
* A file that is not in the format, is truncated or is garbled raises :class:`InputError`
  with a one-line message naming the file and what was expected. Nothing is half-returned.
* One odd value never rejects a well-formed file: a field that does not parse is null, a
  row that cannot be placed in time is left out, and both are counted in
  ``meta["odd_values"]`` / ``meta["dropped_rows"]`` (see :mod:`aaco.importers._lenient`).
* Unknown values are null, never a made-up default.

Example::

    tables = import_path(Path("run/host/1234_kernel_trace.csv"))
    tables.kernels.num_rows
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from aaco.errors import InputError
from aaco.session.schema import (
    ANNOTATIONS,
    API_CALLS,
    ATT_INSTRUCTIONS,
    KERNEL_COUNTERS,
    KERNELS,
    MEMCPY,
    OPS,
    TableSpec,
)

__all__ = [
    "SNIFF_BYTES",
    "TABLE_FIELDS",
    "Importer",
    "TraceTables",
    "read_head",
]

#: how many leading bytes (after decompression) :meth:`Importer.sniff` receives
SNIFF_BYTES = 64 * 1024

#: TraceTables field -> the schema its table follows
TABLE_FIELDS: dict[str, TableSpec] = {
    "kernels": KERNELS,
    "api_calls": API_CALLS,
    "memcpy": MEMCPY,
    "ops": OPS,
    "annotations": ANNOTATIONS,
    "kernel_counters": KERNEL_COUNTERS,
    "att_instructions": ATT_INSTRUCTIONS,
}


@dataclass
class TraceTables:
    """What an importer read, as tables that follow the bundle schemas (possibly empty)."""

    kernels: pa.Table = field(default_factory=KERNELS.empty)
    api_calls: pa.Table = field(default_factory=API_CALLS.empty)
    memcpy: pa.Table = field(default_factory=MEMCPY.empty)
    ops: pa.Table = field(default_factory=OPS.empty)
    annotations: pa.Table = field(default_factory=ANNOTATIONS.empty)
    kernel_counters: pa.Table = field(default_factory=KERNEL_COUNTERS.empty)
    att_instructions: pa.Table = field(default_factory=ATT_INSTRUCTIONS.empty)
    #: what was read: ``tool``, ``format``, ``files``, ``clock`` (``unit`` and ``origin``),
    #: ``devices`` (list of dicts), ``ranks`` ... JSON-serialisable
    meta: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name) for name in TABLE_FIELDS}

    @property
    def event_count(self) -> int:
        return sum(t.num_rows for t in self.tables().values())

    @classmethod
    def merge(cls, parts: Iterable[TraceTables]) -> TraceTables:
        """Concatenate several imports (e.g. the kernel, API and copy CSVs of one run)."""
        parts = list(parts)
        out = cls()
        for name, spec in TABLE_FIELDS.items():
            tables = [getattr(p, name) for p in parts if getattr(p, name).num_rows]
            if tables:
                setattr(out, name, pa.concat_tables([spec.conform(t) for t in tables]))
        out.meta = {"sources": [p.meta for p in parts]}
        return out


class Importer:
    """One trace format. Subclasses set the class attributes and implement two methods.

    ``sniff`` must be cheap and must not raise on foreign content; ``read`` does the work.
    """

    #: short identifier, also written to the ``source`` column, e.g. ``rocprofv3-csv``
    name: ClassVar[str] = ""
    #: one line for ``aaco import --help`` and error messages: what this importer reads
    description: ClassVar[str] = ""
    #: True when the importer reads a directory (e.g. a rocprofv3 output folder) as a unit
    reads_directories: ClassVar[bool] = False

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        """Whether ``path`` (whose first bytes, decompressed, are ``head``) is this format."""
        raise NotImplementedError

    def read(self, path: Path) -> TraceTables:
        """Read the whole file into normalized tables; raise InputError on bad content."""
        raise NotImplementedError


def open_binary(path: Path) -> Any:
    """Open a file for binary reading, transparently decompressing ``.gz`` (by magic bytes)."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    magic = f.read(2)
    if magic == b"\x1f\x8b":
        f.close()
        # GzipFile opened by name owns (and closes) its file.
        return gzip.GzipFile(filename=path, mode="rb")
    f.seek(0)
    return f


def read_head(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` bytes of a file, decompressed when gzip; b"" for unreadable gz."""
    with open_binary(path) as f:
        try:
            data: bytes = f.read(size)
        except (OSError, EOFError, zlib.error):
            return b""
        return data
