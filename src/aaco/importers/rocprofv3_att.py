"""Read the per-instruction totals of rocprofv3's advanced thread trace (``code.json``).

``rocprofv3 --att`` decodes each traced dispatch into a folder
``ui_output_agent_<agent>_dispatch_<dispatch>/``. Its ``code.json`` is written by the
rocprofiler-SDK att tool (``source/lib/att-tool/code.cpp``, tool version ``3.0.0``) as::

    {"code": [["s_load_dword s2, s[4:5], 0x24", 0, 1, "kernel.cpp:6", 2, 6400, 672, 49156,
               46468, 30636], ...],
     "header": "ISA, _, LineNumber, Source, Codeobj, Vaddr, Hit, Latency, Stall, Idle",
     "sqtt_funcmap": [...],     # newer builds only; not read
     "version": "3.0.0"}

one row per instruction address of the kernels the traced waves ran, with totals over
those waves: ``Hit`` executions, ``Latency`` cycles (stall + issue on gfx9, stall + execute
on gfx10+), ``Stall`` cycles (part of the latency) and ``Idle`` cycles (the gap since the
previous instruction completed; not part of it). A row whose ISA starts with ``;`` labels a
kernel: ``["; <symbol>", 0, line, "<demangled name>", codeobj, vaddr, 0, 0, 0, 0]``, placed
at the kernel's first instruction. A dispatch where no wave ran on the traced CU writes
``"code": null``. Columns are taken by the names ``header`` gives (the documented order
when there is none), so a decoder that reorders or adds columns is still read right.

The folder's name gives the agent and dispatch ids; ``filenames.json`` beside the file, when
present, gives the GPU generation (``gfxip``) and the number of traced waves (``meta``). The
wave files (``se*_sm*_sl*_wv*.json``, which grow with the length of the trace) are never
read: the text read is one row per instruction of the traced kernels, so memory follows the
table kept, not the trace. Rows are decoded by msgspec into typed structs.

Odd values: a count, address or line that is not a non-negative integer is null (counted in
``meta["odd_values"]`` as ``code.<column>``); a row that is not an array or has no
instruction text is left out (``meta["dropped_rows"]``). NaN/Infinity and bad UTF-8 are
repaired as in the other JSON importers. A file cut short or garbled is one ``InputError``.

Example::

    tables = Rocprofv3AttImporter().read(Path("ui_output_agent_1_dispatch_3/code.json"))
    tables.att_instructions.num_rows
"""

from __future__ import annotations

import bisect
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from aaco.errors import InputError
from aaco.importers._chrome_json import repair_json
from aaco.importers._lenient import collecting, note_dropped, note_null, to_int
from aaco.importers.base import Importer, TraceTables, open_binary
from aaco.session.schema import ATT_INSTRUCTIONS

__all__ = ["SOURCE", "Rocprofv3AttImporter", "mnemonic_of", "read_att_code"]

SOURCE = "rocprofv3-att"
_EXPECTED = 'a rocprofv3 ATT code.json ({"code": [[ISA, _, LineNumber, Source, ...]], ...})'

#: the columns of a code.json row, as the att tool's ``header`` names them
DEFAULT_HEADER = ("ISA", "_", "LineNumber", "Source", "Codeobj", "Vaddr", "Hit", "Latency",
                  "Stall", "Idle")  # fmt: skip
# the header names AACO reads -> the role they fill (matched without case or spaces)
_ROLES = {
    "isa": "isa",
    "linenumber": "line",
    "source": "source",
    "codeobj": "codeobj",
    "vaddr": "vaddr",
    "hit": "hit",
    "latency": "latency",
    "stall": "stall",
    "idle": "idle",
}
_INT_ROLES = ("line", "codeobj", "vaddr", "hit", "latency", "stall", "idle")
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1

_STR = rb'"(?:[^"\\]|\\.)*"'
_INT = rb"\s*-?\d+\s*"
# the opening of a code.json: {"code": [ then a first row [text, int, int, text|null, int, int,
_FIRST_ROW = re.compile(
    rb'\{\s*"code"\s*:\s*\[\s*\[\s*'
    + rb"\s*,".join((_STR, _INT, _INT, rb"\s*(?:" + _STR + rb"|null)\s*", _INT, _INT, b""))
)
_HEADER_KEY = re.compile(rb'"header"\s*:\s*"ISA,\s*_,\s*LineNumber,')
_FOLDER = re.compile(r"ui_output_agent_(\d+)_dispatch_(\d+)")
# the first file:line of a Source value (a file name may hold ':' and spaces)
_SOURCE = re.compile(r"\s*(.*?):(\d+)(?=\s|$)")


class _Row(msgspec.Struct, array_like=True):
    """A code.json row in the documented column order (the fast path)."""

    isa: str
    unused: int
    line: int
    source: str | None
    codeobj: int
    vaddr: int
    hit: int
    latency: int
    stall: int
    idle: int


class _Doc(msgspec.Struct):
    code: list[_Row] | msgspec.UnsetType | None = msgspec.UNSET
    header: str | None = None
    version: str | None = None


class _LooseDoc(msgspec.Struct):
    code: Any = msgspec.UNSET
    header: Any = None
    version: Any = None


class _Filenames(msgspec.Struct):
    gfxip: int | None = None
    gfxv: str | None = None
    version: str | None = None
    wave_filenames: Any = None


_FAST = msgspec.json.Decoder(_Doc)
_LOOSE = msgspec.json.Decoder(_LooseDoc)
_FILENAMES = msgspec.json.Decoder(_Filenames)

# one decoded row: isa, line, source, codeobj, vaddr, hit, latency, stall, idle
_Cells = tuple[str, int | None, str | None, int | None, int | None, int | None, int | None,
               int | None, int | None]  # fmt: skip


def mnemonic_of(instruction: str) -> str | None:
    """The opcode of an ISA line: its first word, lower case; None for blank text.

    >>> mnemonic_of("v_mfma_f32_32x32x8f16 a[0:15], v[0:1], v[2:3], a[0:15]")
    'v_mfma_f32_32x32x8f16'
    """
    words = instruction.split(None, 1)
    return words[0].lower() if words else None


def read_att_code(path: Path) -> TraceTables:
    """Read one ATT ``code.json`` (plain or gzip) into ``att_instructions``."""
    with collecting() as odd:
        out = _read(path)
    out.meta.update(odd.meta())
    return out


def _read(path: Path) -> TraceTables:
    with open_binary(path) as f:
        try:
            data: bytes = f.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: unreadable ({exc}), expected {_EXPECTED}") from None
    if not data.strip():
        raise InputError(f"{path}: empty file, expected {_EXPECTED}")
    doc = _decode(path, data)
    if isinstance(doc, _Doc) and doc.header is not None:
        names = _header_names(path, doc.header)
        if names != list(DEFAULT_HEADER):
            doc = _decode_loose(path, data)  # other columns: read them by their names
    del data
    if isinstance(doc, _Doc):
        version: str | None = doc.version
        names = list(DEFAULT_HEADER)
    else:
        version = doc.version if isinstance(doc.version, str) else None
        names = list(DEFAULT_HEADER) if doc.header is None else _header_names(path, doc.header)
    code: Any = doc.code
    if code is msgspec.UNSET and doc.header is None:
        raise InputError(f'{path}: no "code" rows, expected {_EXPECTED}')
    if code is msgspec.UNSET or code is None:
        code = []  # null: no wave ran on the traced CU
    if not isinstance(code, list):
        raise InputError(f'{path}: "code" is not a list of rows, expected {_EXPECTED}')
    roles = _roles(names)
    cells = _typed_cells(code) if isinstance(doc, _Doc) else _loose_cells(code, roles)
    agent, dispatch = _folder_ids(path)
    table_cols, labels, kernels = _columns(cells, agent, dispatch)
    out = TraceTables(att_instructions=ATT_INSTRUCTIONS.from_columns(table_cols))
    out.meta = {
        "tool": "rocprofv3",
        "format": SOURCE,
        "files": [str(path)],
        "version": version,
        "columns": names,
        "missing_columns": [n for n in DEFAULT_HEADER if n != "_" and _ROLES[n.lower()]
                            not in roles],
        "agent_id": agent,
        "dispatch_id": dispatch,
        "kernel_labels": labels,
        "kernels": kernels,
        "instructions": out.att_instructions.num_rows,
        **_filenames_meta(path),
    }  # fmt: skip
    return out


def _decode(path: Path, data: bytes) -> _Doc | _LooseDoc:
    """The typed document, or the untyped one when a value has an unexpected type."""
    try:
        return _FAST.decode(data)
    except msgspec.ValidationError:
        pass
    except (msgspec.DecodeError, UnicodeDecodeError):
        # NaN, numbers beyond a double, bad UTF-8: repaired (and counted) when that is all
        found: dict[str, int] = {}
        fixed = repair_json(data, found)
        if fixed is None:
            raise _malformed(path) from None
        for field, count in found.items():
            note_null(field, count)
        data = fixed
    return _decode_loose(path, data)


def _decode_loose(path: Path, data: bytes) -> _LooseDoc:
    try:
        return _LOOSE.decode(data)
    except msgspec.ValidationError:
        raise InputError(f"{path}: not a JSON object, expected {_EXPECTED}") from None
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise _malformed(path) from None


def _malformed(path: Path) -> InputError:
    return InputError(f"{path}: truncated or malformed JSON, expected {_EXPECTED}")


def _header_names(path: Path, header: Any) -> list[str]:
    if not isinstance(header, str) or not header.strip():
        note_null("header")
        return list(DEFAULT_HEADER)
    names = [n.strip() for n in header.split(",")]
    if "isa" not in {n.lower().replace(" ", "") for n in names}:
        raise InputError(f"{path}: its header names no ISA column ({header[:80]!r})")
    return names


def _roles(names: Sequence[str]) -> dict[str, int]:
    """role -> column index, the first column of each known name."""
    roles: dict[str, int] = {}
    for i, name in enumerate(names):
        role = _ROLES.get(name.lower().replace(" ", ""))
        if role is not None and role not in roles:
            roles[role] = i
    return roles


def _typed_cells(rows: list[_Row]) -> Iterator[_Cells]:
    for r in rows:
        yield (
            r.isa,
            _count(r.line, "line"),
            r.source or None,
            _count(r.codeobj, "codeobj"),
            _count(r.vaddr, "vaddr"),
            _count(r.hit, "hit"),
            _count(r.latency, "latency"),
            _count(r.stall, "stall"),
            _count(r.idle, "idle"),
        )


def _count(value: int, role: str) -> int | None:
    """``value`` when it is a count the table can hold (0 <= value < 2**63), else None."""
    if 0 <= value <= _INT64_MAX:
        return value
    note_null(f"code.{role}")
    return None


def _loose_cells(rows: list[Any], roles: dict[str, int]) -> Iterator[_Cells]:
    isa_at = roles["isa"]
    for r in rows:
        if not isinstance(r, list):
            note_dropped("code: row not an array")
            continue
        isa = r[isa_at] if isa_at < len(r) else None
        if not isinstance(isa, str):
            note_dropped("code: instruction text missing or not text")
            continue
        source = _cell(r, roles.get("source"))
        if source is not None and not isinstance(source, str):
            note_null("code.source")
            source = None
        ints: list[int | None] = []
        for role in _INT_ROLES:
            at = roles.get(role)
            if at is None:
                ints.append(None)  # the column is absent from the file: unknown, not odd
                continue
            value = to_int(r[at]) if at < len(r) else None
            ints.append(None if value is None else _count(value, role))
            if value is None:
                note_null(f"code.{role}")
        line, codeobj, vaddr, hit, latency, stall, idle = ints
        yield (isa, line, source or None, codeobj, vaddr, hit, latency, stall, idle)


def _cell(row: list[Any], at: int | None) -> Any:
    return row[at] if at is not None and at < len(row) else None


def _folder_ids(path: Path) -> tuple[int | None, int | None]:
    m = _FOLDER.fullmatch(path.parent.name)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _columns(
    cells: Iterable[_Cells], agent: int | None, dispatch: int | None
) -> tuple[dict[str, list[Any]], int, list[str]]:
    """The table's columns, the number of kernel labels and the kernels they name."""
    insts: list[_Cells] = []
    # code object -> sorted label addresses, and (symbol, demangled name) at each
    labels: dict[int, dict[int, tuple[str, str | None]]] = {}
    n_labels = 0
    for c in cells:
        if c[0].lstrip().startswith(";"):
            n_labels += 1
            codeobj, vaddr = c[3], c[4]
            if codeobj is None or vaddr is None:
                note_dropped("code: kernel label without an address")
                continue
            labels.setdefault(codeobj, {})[vaddr] = (c[0].lstrip()[1:].strip(), c[2])
        else:
            insts.append(c)
    starts = {co: sorted(at) for co, at in labels.items()}
    cols: dict[str, list[Any]] = {name: [] for name in ATT_INSTRUCTIONS.column_names}
    for isa, line, source, codeobj, vaddr, hit, latency, stall, idle in insts:
        symbol: str | None = None
        demangled: str | None = None
        if codeobj in starts and vaddr is not None:
            k = bisect.bisect_right(starts[codeobj], vaddr) - 1
            if k >= 0:
                symbol, demangled = labels[codeobj][starts[codeobj][k]]
        file, src_line = _source(source)
        if line is not None and line > _INT32_MAX:
            note_null("code.line")
            line = None
        row = {
            "source": SOURCE,
            "agent_id": agent,
            "dispatch_id": dispatch,
            "kernel_name": demangled or symbol or None,
            "kernel_symbol": symbol or None,
            "code_object_id": codeobj,
            "address": vaddr,
            "code_line": line,
            "instruction": isa,
            "mnemonic": mnemonic_of(isa),
            "instruction_class": None,  # filled by aaco.analysis.att.classify_instructions
            "source_location": source,
            "source_file": file,
            "source_line": src_line,
            "hits": hit,
            "latency_cycles": latency,
            "stall_cycles": stall,
            "idle_cycles": idle,
        }
        for name, value in row.items():
            cols[name].append(value)
    kernels = sorted({d or s for co in labels.values() for s, d in co.values() if d or s})
    return cols, n_labels, kernels


def _source(source: str | None) -> tuple[str | None, int | None]:
    if not source:
        return None, None
    m = _SOURCE.match(source)
    if not m or not m.group(1):
        return None, None
    line = int(m.group(2))
    return m.group(1), line if line <= _INT32_MAX else None


def _filenames_meta(path: Path) -> dict[str, Any]:
    """GPU generation and traced waves from ``filenames.json`` beside ``path``, when readable."""
    f = path.parent / "filenames.json"
    try:
        doc = _FILENAMES.decode(f.read_bytes()) if f.is_file() else None
    except (OSError, msgspec.DecodeError):
        doc = None
    if doc is None:
        return {"gfxip": None, "traced_waves": None}
    return {"gfxip": doc.gfxip, "traced_waves": _count_waves(doc.wave_filenames)}


def _count_waves(tree: Any) -> int | None:
    """Waves in ``wave_filenames`` (se -> simd -> slot -> id -> [file, begin, end])."""
    if not isinstance(tree, dict):
        return None
    n = 0
    for simds in tree.values():
        for slots in simds.values() if isinstance(simds, dict) else ():
            for ids in slots.values() if isinstance(slots, dict) else ():
                n += len(ids) if isinstance(ids, dict) else 0
    return n


class Rocprofv3AttImporter(Importer):
    """rocprofv3 advanced thread trace: a dispatch's ``code.json`` (instruction totals)."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = (
        "rocprofv3 --att instruction totals (ui_output_agent_*_dispatch_*/code.json)"
    )

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        """A JSON object whose ``code`` rows have the att tool's columns, or its header."""
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if text[:1] != b"{":
            return False
        return _FIRST_ROW.match(text) is not None or _HEADER_KEY.search(text) is not None

    def read(self, path: Path) -> TraceTables:
        return read_att_code(Path(path))
