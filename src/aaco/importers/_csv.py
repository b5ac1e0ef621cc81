"""Shared CSV reading for the rocprof importers: header sniffing, typed columnar reads, checks.

rocprofv3 and legacy rocprof write plain comma-separated files with a (usually quoted) header
line. Columns are matched by a *key*: the header name lower-cased with everything but letters
and digits dropped, so ``LDS_Block_Size``, ``Lds_Block_Size`` and ``lds-block-size`` are one
column, as are legacy ``gpu-id`` and ``GPU_ID``. The body is read with ``pyarrow.csv``
(multithreaded C++ parser) restricted to the columns an importer asks for, with the types it
asks for, so timestamps are parsed straight into int64 and never pass through a float.

Structural failures become an :class:`InputError` naming the file: an empty file, a missing
column, a row with fewer or more fields than the header (a truncated or garbled file). Odd
*values* do not: a cell that does not parse as its column's type is null (counted per column,
see :mod:`aaco.importers._lenient`), a row with a missing or reversed timestamp is dropped
(counted), a value beyond its column's range is null (counted).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from aaco.errors import InputError
from aaco.importers._lenient import note_dropped, note_null, to_int
from aaco.importers.base import read_head
from aaco.session.schema import TableSpec

__all__ = [
    "CsvHeader",
    "check_times",
    "fill_table",
    "lenient_array",
    "map_values",
    "norm",
    "pid_from_name",
    "read_columns",
    "read_header",
    "time_mask",
]

T = TypeVar("T")

_NON_ALNUM = re.compile(r"[^a-z0-9]")
_PID_PREFIX = re.compile(r"^(\d+)_")
# pyarrow's messages can quote a whole row; one line of reasonable length is enough
_MAX_MSG = 160


def norm(name: str) -> str:
    """The matching key of a header name: ``"LDS_Block_Size"`` -> ``"ldsblocksize"``."""
    return _NON_ALNUM.sub("", name.strip().lower())


@dataclass(frozen=True)
class CsvHeader:
    """The header line of a CSV file: its names as written, keyed by :func:`norm`."""

    path: Path
    names: tuple[str, ...]

    @property
    def keys(self) -> dict[str, str]:
        """key -> name as written (the first column wins when two share a key)."""
        out: dict[str, str] = {}
        for n in self.names:
            out.setdefault(norm(n), n)
        return out

    def has(self, *keys: str) -> bool:
        k = self.keys
        return all(key in k for key in keys)

    def require(self, keys: Iterable[str], expected: str) -> None:
        """Raise InputError naming the columns (as keys) this header lacks."""
        missing = [key for key in keys if key not in self.keys]
        if missing:
            raise InputError(
                f"{self.path}: not {expected}: missing column(s) {', '.join(missing)} "
                "(matched case-insensitively, ignoring '_' and '-')"
            )


def read_header(path: Path, head: bytes | None = None) -> CsvHeader | None:
    """Parse the first line of ``path`` (or of ``head``) as a CSV header; None if it is not one.

    Cheap and never raises on foreign content, so importers can call it from ``sniff``.
    """
    if head is None:
        try:
            head = read_head(path)
        except (InputError, OSError):
            return None
    if not head:
        return None
    line, nl, _ = head.partition(b"\n")
    if not nl and len(head) >= 64 * 1024:
        return None  # no line end in the first 64 KiB: not a CSV header
    try:
        text = line.decode("utf-8").lstrip("\ufeff").rstrip("\r")
    except UnicodeDecodeError:
        return None
    if "," not in text or text.lstrip().startswith(("{", "[")):
        return None
    try:
        names = next(csv.reader([text]))
    except (csv.Error, StopIteration):
        return None
    if len(names) < 2 or any(not n.strip() for n in names):
        return None
    return CsvHeader(path, tuple(n.strip() for n in names))


def _one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return msg if len(msg) <= _MAX_MSG else msg[: _MAX_MSG - 3] + "..."


def read_columns(
    header: CsvHeader,
    types: Mapping[str, pa.DataType],
    expected: str,
    *,
    required: Sequence[str] = (),
    times: tuple[str, str] | None = None,
) -> tuple[dict[str, pa.ChunkedArray], int]:
    """Read the columns ``types`` names (by key) that the file has; return them keyed, and rows.

    Keys in ``required`` must be present (InputError otherwise); the others are optional and
    simply absent from the result when the file lacks them. Every column of every row is
    still tokenised, so a short (truncated) row anywhere is an error. A cell that does not
    parse as its column's type is null and counted. ``times`` = (start key, end key): rows
    whose start or end is missing, or whose end is before the start, are dropped and counted
    (when the file has both columns).
    """
    header.require(required, expected)
    keys = header.keys
    wanted = {keys[k]: (k, t) for k, t in types.items() if k in keys}
    path = header.path
    try:
        table = _read_csv(path, {name: t for name, (_, t) in wanted.items()})
    except pa.ArrowInvalid as exc:
        if "conversion error" not in str(exc):
            raise _malformed(path, expected, exc) from None
        # odd cells: read the typed columns as text and convert them value by value
        text = {name: t if _is_text(t) else pa.string() for name, (_, t) in wanted.items()}
        try:
            table = _read_csv(path, text)
        except pa.ArrowException as exc2:
            raise _malformed(path, expected, exc2) from None
        table = pa.table(
            {
                name: _lenient_cast(table.column(name), wanted[name][1], name)
                for name in table.column_names
            }
        )
    except pa.ArrowException as exc:
        raise _malformed(path, expected, exc) from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: unreadable, expected {expected}: {_one_line(exc)}") from None
    cols = {wanted[name][0]: _finite_only(table.column(name), name) for name in table.column_names}
    n = table.num_rows
    if times is not None and times[0] in cols and times[1] in cols:
        ok = time_mask(cols[times[0]], cols[times[1]])
        kept = pc.sum(ok).as_py() or 0
        if kept < n:
            cols = {k: c.filter(ok) for k, c in cols.items()}
            n = kept
    return cols, n


def _read_csv(path: Path, types: Mapping[str, pa.DataType]) -> pa.Table:
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    source: Any = pa.input_stream(str(path), compression="gzip") if gz else str(path)
    return pacsv.read_csv(
        source,
        read_options=pacsv.ReadOptions(use_threads=True, block_size=4 << 20),
        convert_options=pacsv.ConvertOptions(
            column_types=dict(types),
            include_columns=list(types),
            # an empty field is unknown (null), but a quoted "" name stays ""
            strings_can_be_null=False,
        ),
    )


def _malformed(path: Path, expected: str, exc: BaseException) -> InputError:
    return InputError(f"{path}: truncated or malformed CSV, expected {expected}: {_one_line(exc)}")


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_dictionary(t))  # fmt: skip


def _lenient_cast(col: pa.ChunkedArray, typ: pa.DataType, name: str) -> pa.ChunkedArray:
    """Text cells to ``typ``; a cell that is not a number of that type is null and counted."""
    if _is_text(typ):
        return col
    try:
        return col.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = col.to_pylist()
    if pa.types.is_integer(typ):
        bits = typ.bit_width - (1 if pa.types.is_signed_integer(typ) else 0)
        lo = -(1 << bits) if pa.types.is_signed_integer(typ) else 0
        hi = (1 << bits) - 1
        out: list[Any] = []
        for v in values:
            i = to_int(v) if v else None
            out.append(i if i is not None and lo <= i <= hi else None)
    else:
        out = [_finite(v) for v in values]
    note_null(name, sum(1 for v, o in zip(values, out, strict=True) if o is None and v))
    return pa.chunked_array([pa.array(out, type=typ)], type=typ)


def _finite_only(col: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    """A float column with NaN and infinities (``nan``, ``inf`` cells) as null, counted."""
    if not pa.types.is_floating(col.type):
        return col
    bad = pc.fill_null(pc.invert(pc.is_finite(col)), False)
    count = pc.sum(bad).as_py() or 0
    if not count:
        return col
    note_null(name, count)
    return pc.if_else(bad, pa.scalar(None, col.type), col)


def _finite(text: str | None) -> float | None:
    if not text:
        return None
    try:
        f = float(text)
    except ValueError:
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def time_mask(start: pa.ChunkedArray | pa.Array, end: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Rows with both timestamps and end >= start; the others are counted as dropped."""
    ok = pc.fill_null(pc.greater_equal(end, start), False)
    missing = pc.sum(pc.or_(pc.is_null(start), pc.is_null(end))).as_py() or 0
    kept = pc.sum(ok).as_py() or 0
    note_dropped("start/end timestamp missing or not a number", missing)
    note_dropped("end timestamp before start", len(ok) - kept - missing)
    return ok if isinstance(ok, pa.Array) else ok.combine_chunks()


def check_times(
    path: Path, start: pa.ChunkedArray, end: pa.ChunkedArray, expected: str
) -> pa.ChunkedArray:
    """Validate start/end timestamps (present, end >= start) and return end - start."""
    if start.null_count or end.null_count:
        raise InputError(f"{path}: missing start/end timestamp in some rows, expected {expected}")
    bad = pc.less(end, start)
    if pc.any(bad).as_py():
        row = pc.index(bad, True).as_py()
        raise InputError(
            f"{path}: end timestamp before start timestamp on data row {row + 1}, "
            f"expected {expected}"
        )
    return pc.subtract(end, start)


def map_values(
    col: pa.ChunkedArray | pa.Array, fn: Callable[[Any], T], typ: pa.DataType
) -> pa.Array:
    """Apply a Python function to each *distinct* value of a column and broadcast the result.

    Columns such as kernel names, API function names or agent labels have few distinct values,
    so this is vectorised in the row count: one hash pass, one take.
    """
    if pa.types.is_dictionary(col.type):
        # few distinct values per chunk dictionary: map those, then take by the indices
        cache: dict[Any, Any] = {}

        def lookup(v: Any) -> Any:
            if v not in cache:
                cache[v] = fn(v)
            return cache[v]

        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        out = [
            pa.array([lookup(v) for v in c.dictionary.to_pylist()], type=typ).take(c.indices)
            for c in chunks
        ]
        if not out:
            return pa.array([], type=typ)
        return pa.concat_arrays(out) if len(out) > 1 else out[0]
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    uniq = pc.unique(col)
    mapped = pa.array([fn(v) for v in uniq.to_pylist()], type=typ)
    idx = pc.index_in(col, value_set=uniq)
    return mapped.take(idx)


def pid_from_name(path: Path) -> int | None:
    """Process id from a rocprofv3 file name ``<pid>_<domain>.csv``, else None."""
    m = _PID_PREFIX.match(path.name)
    return int(m.group(1)) if m else None


def fill_table(path: Path, spec: TableSpec, n: int, cols: Mapping[str, Any]) -> pa.Table:
    """A table of ``spec`` with ``n`` rows from ``cols``; absent columns are null (unknown).

    Values may be arrays, chunked arrays or one scalar (repeated). A value that does not fit
    its declared type (e.g. a register count beyond int32) is an InputError, not a crash.
    """
    unknown = sorted(set(cols) - set(spec.column_names))
    if unknown:
        raise ValueError(f"table {spec.name}: unknown columns {unknown}")
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for c in spec.columns:
        v = cols.get(c.name)
        try:
            if v is None:
                arrays.append(pa.nulls(n, c.type))
            elif isinstance(v, (pa.Array, pa.ChunkedArray)):
                arrays.append(v if v.type == c.type else v.cast(c.type))
            else:
                arrays.append(pa.repeat(pa.scalar(v, type=c.type), n))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
            # e.g. a register count beyond int32: that value is unknown, the rest is kept
            arrays.append(_cast_or_null(v, c.type, f"{spec.name}.{c.name}", n))
    return pa.Table.from_arrays(arrays, schema=spec.schema)


def _cast_or_null(v: Any, typ: pa.DataType, field: str, n: int) -> pa.Array:
    """``v`` (array or scalar) as ``typ`` value by value; what does not fit is null, counted."""
    values = v.to_pylist() if isinstance(v, (pa.Array, pa.ChunkedArray)) else [v] * n
    return lenient_array(values, typ, field)


def lenient_array(values: Sequence[Any], typ: pa.DataType, field: str) -> pa.Array:
    """``pa.array(values, typ)``, except that a value that does not fit ``typ`` (text in a
    number column, an int beyond int32) is null and counted as an odd value of ``field``."""
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    out: list[Any] = []
    for x in values:
        try:
            out.append(None if x is None else pa.scalar(x, type=typ).as_py())
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            out.append(None)
    note_null(
        field, sum(1 for x, o in zip(values, out, strict=True) if o is None and x is not None)
    )
    return pa.array(out, type=typ)
