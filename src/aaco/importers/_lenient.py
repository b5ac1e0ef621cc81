"""Count the values an importer could not use, so one odd value costs a warning, not the file.

Importers read well-formed files leniently: a field whose value has an unexpected type or
cannot be parsed becomes null (counted per field in ``meta["odd_values"]``), and a row that
cannot be placed at all (no usable timestamp, a negative duration) is dropped (counted per
reason in ``meta["dropped_rows"]``). Only files that are not in the format, truncated or
garbled are rejected.

Helpers deep inside an importer (CSV column readers, coercions) report through the
collector of the read in progress (:func:`collecting`), so no counter has to be threaded
through every function; the importer copies :meth:`OddValues.meta` into its ``meta``.

Example::

    with collecting() as odd:
        cols = read_columns(header, types, expected)
    tables.meta.update(odd.meta())
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "OddValues",
    "collecting",
    "note_dropped",
    "note_null",
    "summary_line",
    "to_int",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT_TEXT = re.compile(r"\s*[+-]?\d+\s*")


class OddValues:
    """Per-field counts of values set to null and per-reason counts of dropped rows."""

    def __init__(self) -> None:
        self.nulled: dict[str, int] = {}
        self.dropped: dict[str, int] = {}

    def null(self, field: str, count: int = 1) -> None:
        """``count`` values of ``field`` were unusable and are null in the tables."""
        if count > 0:
            self.nulled[field] = self.nulled.get(field, 0) + count

    def drop(self, reason: str, count: int = 1) -> None:
        """``count`` rows (events) were left out of the tables for ``reason``."""
        if count > 0:
            self.dropped[reason] = self.dropped.get(reason, 0) + count

    def merge(self, meta: Mapping[str, Any]) -> None:
        """Add the counts of another collector's :meth:`meta`."""
        for field, count in (meta.get("odd_values") or {}).items():
            self.null(str(field), int(count))
        for reason, count in (meta.get("dropped_rows") or {}).items():
            self.drop(str(reason), int(count))

    def __bool__(self) -> bool:
        return bool(self.nulled or self.dropped)

    def meta(self) -> dict[str, dict[str, int]]:
        """``{"odd_values": {field: n}, "dropped_rows": {reason: n}}`` (JSON-ready)."""
        return {"odd_values": dict(sorted(self.nulled.items())),
                "dropped_rows": dict(sorted(self.dropped.items()))}  # fmt: skip


_CURRENT: ContextVar[OddValues | None] = ContextVar("aaco_odd_values", default=None)


@contextmanager
def collecting() -> Iterator[OddValues]:
    """Collect the reports of :func:`note_null` / :func:`note_dropped` made inside the block.

    Nested blocks (a directory importer reading its files) also pass their counts outward.
    """
    outer = _CURRENT.get()
    odd = OddValues()
    token = _CURRENT.set(odd)
    try:
        yield odd
    finally:
        _CURRENT.reset(token)
        if outer is not None:
            outer.merge(odd.meta())


def note_null(field: str, count: int = 1) -> None:
    """Report ``count`` unusable values of ``field`` (kept as null) to the current read."""
    odd = _CURRENT.get()
    if odd is not None:
        odd.null(field, count)


def note_dropped(reason: str, count: int = 1) -> None:
    """Report ``count`` rows dropped for ``reason`` to the current read."""
    odd = _CURRENT.get()
    if odd is not None:
        odd.drop(reason, count)


def to_int(value: Any) -> int | None:
    """An integer id or count from a JSON/CSV value, or None when there is none.

    Ints as they are; integral floats; decimal or ``0x`` hexadecimal text. Booleans,
    fractions, containers and values outside int64 give None.

    >>> to_int(7), to_int(7.0), to_int("0x1a"), to_int(" 12 "), to_int(7.5), to_int(True)
    (7, 7, 26, 12, None, None)
    """
    out: int | None = None
    if type(value) is int:
        out = value
    elif type(value) is float:
        if math.isfinite(value) and value.is_integer():
            out = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > 40:
            return None  # no int64 is that long (and int() refuses 4300+ digits)
        try:
            out = int(text, 0)
        except ValueError:
            if _INT_TEXT.fullmatch(text):
                out = int(text)  # "007": base 0 refuses leading zeros
            else:
                try:
                    f = float(text)
                except ValueError:
                    return None
                if math.isfinite(f) and f.is_integer():
                    out = int(f)
    if out is None or not _INT64_MIN < out <= _INT64_MAX:
        return None
    return out


def summary_line(sources: Sequence[Mapping[str, Any]] | Iterable[Mapping[str, Any]]) -> str | None:
    """One line over the ``meta`` of every imported file: what was nulled and dropped.

    None when every file was read without odd values.

    >>> summary_line([{"odd_values": {"args.grid": 3}, "dropped_rows": {"ts": 1}}])
    '3 odd values set to null (args.grid 3); 1 row dropped (ts 1)'
    """
    odd = OddValues()
    for meta in sources:
        odd.merge(meta)
    if not odd:
        return None
    parts = []
    if odd.nulled:
        n = sum(odd.nulled.values())
        parts.append(f"{n} odd value{'s' if n != 1 else ''} set to null ({_top(odd.nulled)})")
    if odd.dropped:
        n = sum(odd.dropped.values())
        parts.append(f"{n} row{'s' if n != 1 else ''} dropped ({_top(odd.dropped)})")
    return "; ".join(parts)


def _top(counts: Mapping[str, int], keep: int = 4) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v}" for k, v in items[:keep])
    if len(items) > keep:
        text += f", +{len(items) - keep} more"
    return text
