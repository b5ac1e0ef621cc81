"""Stream the events of a Chrome-trace JSON file in decoded chunks, with bounded memory.

A Chrome trace is either a top-level array of events or an object whose ``traceEvents`` key
holds that array. Kineto writes ``schemaVersion``, ``deviceProperties``, ``distributedInfo``,
``displayTimeUnit``, ``baseTimeNanoseconds`` and build metadata before it, and
``traceName``, ``distributedInfo`` (with ``pg_config`` lists) and its log lines (``"WARNING":
["...", ...]``) after it, so nested objects and arrays can sit on either side. The file is
read in blocks of a few MB; the event array is cut into pieces of whole events, and each
piece is decoded on its own by a msgspec decoder, so the text of the whole file is never
held and the caller can turn each piece into compact columns before the next one is decoded.

Cutting without a tokenizer: events are separated by ``}`` ``,`` ``{`` (with any whitespace;
Kineto writes ``\\n  },\\n  {``). Such a separator can also occur inside an event (a nested
list of objects, or inside a string), but then the piece up to it is not a complete list of
events and decoding ``[`` + piece + ``]`` fails *at its very end*; the cut then moves on to the
next separator. A decoding error anywhere else means garbled content. The end of the array is
found by a real parse of the last piece (msgspec skipping to ``Raw``: it reports where the
array closed), so whatever follows it is read as the rest of the object; truncation shows as
an array, or an object around it, that never closes.

Text that Python's ``json`` reads but strict JSON parsers refuse is repaired on the slow path
only (when a piece fails to decode) and counted in :attr:`ChromeJsonReader.repairs`: the
``NaN``/``Infinity`` tokens ``json.dump`` writes (read as null), invalid UTF-8 bytes and lone
UTF-16 surrogate escapes (replaced by U+FFFD).

Example::

    reader = ChromeJsonReader(path, msgspec.json.Decoder(list[Event]))
    for events in reader:
        ...
    reader.top  # top-level keys other than traceEvents
"""

from __future__ import annotations

import io
import math
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from aaco.errors import InputError
from aaco.importers.base import open_binary

__all__ = ["DEFAULT_CHUNK_BYTES", "REPAIRS", "ChromeJsonReader", "repair_json"]

T = TypeVar("T")

#: bytes of JSON text decoded at once: large enough to amortise the per-call overhead,
#: small enough that text plus decoded structs stay a few tens of MB
DEFAULT_CHUNK_BYTES = 1 << 20

#: what :attr:`ChromeJsonReader.repairs` counts (field names of ``meta["odd_values"]``)
REPAIRS = {
    "numbers": "json: NaN/Infinity number",
    "range": "json: number out of range",
    "utf8": "json: invalid UTF-8 text",
    "surrogates": "json: lone UTF-16 surrogate escape",
}

_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_WS = b" \t\r\n"
_TRACE_EVENTS = b'"traceEvents"'
_ERR_BYTE = re.compile(r"\(byte (\d+)\)")
# tries at moving a cut before the content is declared garbled
_MAX_TRIES = 256
# the top-level keys before traceEvents are small; a bigger header is not a trace
_MAX_HEADER = 64 << 20
_ANY = msgspec.json.Decoder(dict[str, Any])
_RAW = msgspec.json.Decoder(msgspec.Raw)
# a JSON string (kept as is) or a non-standard number token outside strings
_NONSTD = re.compile(rb'("(?:[^"\\]|\\.)*")|(-?Infinity|NaN)', re.S)
_NONSTD_HINT = re.compile(rb"NaN|Infinity")
# a JSON string (kept as is) or a number token; numbers beyond a double or of thousands of
# digits are refused by msgspec ("out of range") but read by Python's json (inf, big int)
_NUMBER = re.compile(rb'("(?:[^"\\]|\\.)*")|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)', re.S)
_BIG_HINT = re.compile(rb"\d{300}|\d[eE]\+?\d{3}")
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPE_HINT = re.compile(rb"\\u")
# a valid surrogate pair (kept) or a lone surrogate escape
_SURROGATE = re.compile(
    rb"(\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)


class _Undecodable(Exception):
    """A piece that does not decode; ``at_end`` when the error is at its very end."""

    def __init__(self, message: str, at_end: bool) -> None:
        super().__init__(message)
        self.at_end = at_end


def _sub_counted(
    pattern: re.Pattern[bytes], data: bytes, fix: Callable[[re.Match[bytes]], bytes | None]
) -> tuple[bytes, int]:
    """``pattern.sub`` over ``data`` where ``fix`` gives a match's replacement, or None to
    keep the match as it is; also how many matches were replaced."""
    count = 0

    def sub(m: re.Match[bytes]) -> bytes:
        nonlocal count
        got = fix(m)
        if got is None:
            return m.group(0)
        count += 1
        return got

    return pattern.sub(sub, data), count


def _null_nonstandard(m: re.Match[bytes]) -> bytes | None:
    """NaN / Infinity and friends (group 2) become null; strings (group 1) stay."""
    return None if m.group(2) is None else b"null"


def _null_out_of_range(m: re.Match[bytes]) -> bytes | None:
    """A number (group 2) of over 300 digits or beyond float's range becomes null."""
    tok = m.group(2)
    if tok is None:
        return None
    digits = len(tok) - tok[:1].count(b"-")
    if (digits > 300 and tok.lstrip(b"-").isdigit()) or math.isinf(float(tok)):
        return b"null"
    return None


def _replace_lone_surrogate(m: re.Match[bytes]) -> bytes | None:
    """A lone surrogate escape becomes U+FFFD; a valid pair (group 1) stays."""
    return None if m.group(1) is not None else b"\\ufffd"


def repair_json(data: bytes, repairs: dict[str, int]) -> bytes | None:
    """``data`` with non-standard JSON fixed (counts added to ``repairs``); None if clean."""
    out = data
    for key, hint, pattern, fix in (
        ("numbers", _NONSTD_HINT, _NONSTD, _null_nonstandard),
        ("range", _BIG_HINT, _NUMBER, _null_out_of_range),
        ("surrogates", _ESCAPE_HINT, _SURROGATE, _replace_lone_surrogate),
    ):
        if not hint.search(out):  # a cheap scan spares the substitution on clean data
            continue
        fixed, count = _sub_counted(pattern, out, fix)
        if count:
            repairs[REPAIRS[key]] = repairs.get(REPAIRS[key], 0) + count
            out = fixed
    try:
        out.decode("utf-8")
    except UnicodeDecodeError:
        text = out.decode("utf-8", "replace")
        bad = text.count("\ufffd") - out.count("\ufffd".encode())
        repairs[REPAIRS["utf8"]] = repairs.get(REPAIRS["utf8"], 0) + max(bad, 1)
        out = text.encode("utf-8")
    return out if out is not data else None


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes, repairs: dict[str, int]) -> Any:
    """Decode ``data``, repairing non-standard JSON if that is what failed.

    Raises :class:`_Undecodable` (with ``at_end`` measured on the text actually decoded).
    """
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        first = _undecodable(exc, data)
    # a piece cut inside an event fails at its end: nothing to repair (the common case)
    if first.at_end and not _SURROGATE_HINT.search(data):
        raise first
    found: dict[str, int] = {}
    fixed = repair_json(data, found)
    if fixed is None:
        raise first
    try:
        value = decoder.decode(fixed)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _undecodable(exc, fixed) from None
    for k, v in found.items():
        repairs[k] = repairs.get(k, 0) + v
    return value


def _undecodable(exc: Exception, data: bytes) -> _Undecodable:
    msg = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        return _Undecodable(f"unexpected content ({msg})", False)
    if isinstance(exc, UnicodeDecodeError):
        return _Undecodable("invalid UTF-8", False)
    if "truncated" in msg:
        return _Undecodable(msg, True)
    m = _ERR_BYTE.search(msg)
    return _Undecodable(msg, m is not None and int(m.group(1)) >= len(data) - 1)


class ChromeJsonReader(Generic[T]):
    """Iterate over the decoded pieces of the event array of the Chrome trace at ``path``.

    ``decoder`` decodes ``[ev, ev, ...]`` text into ``T`` (typically ``list[Event]``).
    After the iteration ends, ``top`` holds the other top-level keys (empty for an array
    trace), ``is_array`` says which form the file had and ``repairs`` counts what was
    repaired (see the module docstring). Raises :class:`InputError` (one line, naming the
    file) for a file that is not a Chrome trace, truncated or garbled.
    """

    def __init__(
        self,
        path: Path,
        decoder: msgspec.json.Decoder[T],
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        expected: str = "a Chrome trace (JSON array of events or object with traceEvents)",
        span: tuple[int, int | None, bool] | None = None,
        text: bytes | None = None,
    ) -> None:
        """``span`` = (start, stop, is_array) reads only the events between two byte offsets
        of an uncompressed file, for splitting one trace between processes: ``start`` > 0 is
        the ``{`` of an event (the header is not read; ``is_array`` gives the file's form),
        ``stop`` the offset just past an event's ``}`` (None: to the end of the file, whose
        closing is checked as usual and whose trailing keys land in ``top``). ``text``: the
        file's (decompressed) bytes already in memory, read instead of ``path`` (which
        still names the file in errors); offsets of ``span`` are then offsets into it."""
        self.path = path
        self.text = text
        self.span = span
        self._left: int | None = None
        self.decoder = decoder
        self.chunk_bytes = chunk_bytes
        self.expected = expected
        self.top: dict[str, Any] = {}
        self.is_array = False
        self.text_bytes = 0
        self.repairs: dict[str, int] = {}

    def _fail(self, why: str) -> InputError:
        return InputError(f"{self.path}: {why}; expected {self.expected}")

    def __iter__(self) -> Iterator[T]:
        if self.text is not None:
            yield from self._run(io.BytesIO(self.text))
            return
        f = open_binary(self.path)
        # GzipFile(fileobj=...) does not close the file it wraps: close both
        inner = getattr(f, "fileobj", None)
        try:
            yield from self._run(f)
        finally:
            f.close()
            if inner is not None:
                inner.close()

    def _read(self, f: Any) -> bytes:
        size = self.chunk_bytes
        if self._left is not None:
            size = min(size, self._left)
            if size <= 0:
                return b""
        try:
            block: bytes = f.read(size)
        except (EOFError, OSError, zlib.error) as exc:
            # gzip stream cut short or corrupt: never return what came before
            raise self._fail(f"unreadable or truncated compressed data ({exc})") from None
        self.text_bytes += len(block)
        if self._left is not None:
            self._left -= len(block)
        return block

    def _run(self, f: Any) -> Iterator[T]:
        if self.span is not None and self.span[0] > 0:
            f.seek(self.span[0])
        if self.span is not None and self.span[1] is not None:
            self._left = self.span[1] - self.span[0]
        buf = self._read(f)
        eof = not buf
        if self.span is not None and self.span[0] > 0:
            # the middle of the event array: no header
            self.is_array = self.span[2]
            start = 0
        else:
            buf, start, eof = self._opening(f, buf, eof)

        while True:
            # fill up to one chunk past the start of the pending events
            while not eof and len(buf) - start < self.chunk_bytes + (1 << 16):
                block = self._read(f)
                if not block:
                    eof = True
                else:
                    buf = buf[start:] + block
                    start = 0
            cut = self._cut(buf, start) if not eof else None
            if cut is None:
                if not eof:
                    # no separator past the target yet: a single huge event; read on
                    block = self._read(f)
                    if not block:
                        eof = True
                    else:
                        buf = buf[start:] + block
                        start = 0
                    continue
                if self._left is not None:
                    # the span stops after a whole event: no closing to check here
                    yield from self._up_to_stop(buf, start)
                else:
                    yield from self._last(buf, start)
                return
            decoded, nxt = cut
            yield decoded
            buf = buf[nxt:]
            start = 0

    def _opening(self, f: Any, buf: bytes, eof: bool) -> tuple[bytes, int, bool]:
        """Skip to the first event; return (buf, start of events, eof)."""
        if buf.startswith(b"\xef\xbb\xbf"):
            buf = buf[3:]
        stripped = buf.lstrip(_WS)
        if not stripped:
            raise self._fail("empty file")
        buf = stripped
        if buf[:1] == b"[":
            self.is_array = True
            return buf, 1, eof
        if buf[:1] == b"{":
            return self._header(f, buf, eof)
        raise self._fail("not JSON")

    def _header(self, f: Any, buf: bytes, eof: bool) -> tuple[bytes, int, bool]:
        """Decode the keys before ``traceEvents``; return (buf, start of events, eof)."""
        search = 0
        while True:
            idx = buf.find(_TRACE_EVENTS, search)
            if idx < 0:
                if eof:
                    break
                if len(buf) > _MAX_HEADER:
                    raise self._fail("no traceEvents key in the first 64 MB")
                block = self._read(f)
                if not block:
                    eof = True
                else:
                    search = max(0, len(buf) - len(_TRACE_EVENTS))
                    buf += block
                continue
            # the key is at the top level iff what precedes it closes as an object
            try:
                head = _decode(_ANY, buf[:idx] + b'"traceEvents":null}', self.repairs)
            except _Undecodable:
                search = idx + 1
                continue
            pos = idx + len(_TRACE_EVENTS)
            while True:
                # read on until the ':' and the first character after it are in (a small
                # read size can cut between them)
                rest = buf[pos:].lstrip(_WS)
                if eof or (rest[:1] == b":" and rest[1:].lstrip(_WS)) or rest[:1] not in b":":
                    break
                block = self._read(f)
                if not block:
                    eof = True
                buf += block
            if rest[:1] != b":":
                raise self._fail("malformed traceEvents key")
            rest = rest[1:].lstrip(_WS)
            if rest[:1] != b"[":
                raise self._fail("traceEvents is not an array")
            head.pop("traceEvents", None)
            self.top = head
            start = len(buf) - len(rest) + 1
            return buf, start, eof
        # no traceEvents: a JSON object that is not a trace (or a truncated one)
        try:
            _decode(_ANY, buf, {})
        except _Undecodable:
            raise self._fail("not a JSON trace (truncated or garbled object)") from None
        raise self._fail("a JSON object without traceEvents")

    def _decode_piece(self, piece: bytes) -> tuple[T | None, bool]:
        """Decode ``[piece]``; (value, False) or (None, True when the error is at the end)."""
        try:
            return _decode(self.decoder, b"[" + piece + b"]", self.repairs), False
        except _Undecodable as exc:
            return None, exc.at_end

    def _cut(self, buf: bytes, start: int) -> tuple[T, int] | None:
        """Decode whole events from ``start`` to a separator past one chunk; None if none."""
        search = start + self.chunk_bytes
        for _ in range(_MAX_TRIES):
            m = _CUT.search(buf, search)
            if m is None:
                return None
            end = m.start() + 1
            value, at_end = self._decode_piece(buf[start:end])
            if value is not None:
                return value, m.end() - 1
            if not at_end:
                raise self._fail("garbled JSON in traceEvents")
            search = m.start() + 1
        raise self._fail("garbled JSON in traceEvents (no event boundary found)")

    def _up_to_stop(self, buf: bytes, start: int) -> Iterator[T]:
        piece = buf[start:]
        if not piece.strip(_WS):
            return
        value, _ = self._decode_piece(piece)
        if value is None:
            raise self._fail("garbled JSON in traceEvents (no event boundary at the split)")
        yield value

    def _array_end(self, data: bytes) -> tuple[bytes, int]:
        """Where the array that ``data`` starts with closes: (data, index past its ``]``).

        ``data`` comes back repaired when NaN/Infinity tokens had to be replaced to parse it.
        """
        for attempt in range(2):
            try:
                _RAW.decode(data)
                return data, len(data)
            except msgspec.DecodeError as exc:
                msg = str(exc)
            m = _ERR_BYTE.search(msg)
            if "trailing characters" in msg and m is not None:
                # the byte reported is just past the first character after the array
                return data, data.rfind(b"]", 0, int(m.group(1)) - 1) + 1
            if "truncated" in msg and not _SURROGATE_HINT.search(data):
                raise self._fail("truncated: the traceEvents array never closes")
            found: dict[str, int] = {}
            fixed = repair_json(data, found) if attempt == 0 else None
            if fixed is None:
                break
            data = fixed
            for k, v in found.items():
                self.repairs[k] = self.repairs.get(k, 0) + v
        raise self._fail(f"garbled JSON in traceEvents ({msg})")

    def _last(self, buf: bytes, start: int) -> Iterator[T]:
        """Decode the events from ``start`` to the end of the array, and what follows it."""
        data, end = self._array_end(b"[" + buf[start:])
        tail = data[end:]
        if self.is_array:
            if tail.strip(_WS):
                raise self._fail("garbled: data after the closing ']' of the event array")
        else:
            try:
                after = _decode(_ANY, b'{"traceEvents":null' + tail, self.repairs)
            except _Undecodable as exc:
                if exc.at_end:
                    raise self._fail(
                        "truncated: the object around traceEvents never closes"
                    ) from None
                raise self._fail("garbled JSON after the traceEvents array") from None
            after.pop("traceEvents", None)
            self.top.update(after)
        try:
            value: T = _decode(self.decoder, data[:end], self.repairs)
        except _Undecodable as exc:
            raise self._fail(f"garbled JSON in traceEvents ({exc})") from None
        yield value
