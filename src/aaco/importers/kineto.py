"""Read PyTorch profiler (Kineto) Chrome traces, CUDA, ROCm and CPU flavours, into TraceTables.

``torch.profiler`` writes (``export_chrome_trace``) a JSON object with ``traceEvents`` (``.json``
or ``.json.gz``): ``ph:"X"`` events whose ``cat`` says what they are (``cpu_op``,
``user_annotation`` with ``ProfilerStep#N``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``,
``cuda_runtime``, ``cuda_driver``, ``cuda_sync``, ``gpu_user_annotation``), ``ts``/``dur`` in
microseconds, and ``args`` carrying the links: a cpu_op, the runtime calls it made and their
kernels share ``External id``; a launch call and its kernel share ``correlation``. GPU events
sit on ``pid`` = device, ``tid`` = stream. ROCm builds keep the categories but name the calls
``hipLaunchKernel`` ..., may write streams as ``"0x0"``, and put grid/block on the launch call
rather than on the kernel. Generic Chrome traces (a top-level array of events) are read the
same way; whatever categories they lack simply give empty tables.

Speed: events are decoded by msgspec into structs that hold only the fields used here, one
piece of a few MB at a time (:mod:`aaco.importers._chrome_json`), and each piece is turned into
column lists right away (names stored once per distinct name), so memory is bounded by the
columns kept. Flow (``s``/``f``), metadata (``M``), instant (``i``), counter (``C``),
``python_function`` and ``overhead`` events are counted in ``meta`` but not tabled.

Leniency: the struct fields accept any JSON value, so an odd value in one event (Inductor's
``"grid": "grid(512,)"``, a stream as text) never fails the decoder. Each column is then
checked with one C-level pass over the types of its values; a column of the expected types
goes the fast way, any other is coerced value by value: numeric text and integral floats
are read, anything else is null and counted in ``meta["odd_values"]`` (by field); an event
without a usable ``ts``/``dur``/``name`` is left out and counted in ``meta["dropped_rows"]``.
``displayTimeUnit`` is a display hint: ``ts``/``dur`` are microseconds whatever it says (as
HTA and Perfetto read them); it is recorded in ``meta["clock"]``.

Example::

    tables = KinetoImporter().read(Path("rank0.pt.trace.json.gz"))
    tables.kernels.group_by("name").aggregate([("dur_ns", "sum")])
"""

from __future__ import annotations

import math
import os
import pickle
import re
import resource
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import numpy as np
import pyarrow as pa

from aaco.errors import InputError
from aaco.importers._chrome_json import DEFAULT_CHUNK_BYTES, ChromeJsonReader
from aaco.importers._lenient import OddValues, to_int
from aaco.importers.base import Importer, TraceTables
from aaco.session.schema import ANNOTATIONS, API_CALLS, KERNELS, MEMCPY, OPS

__all__ = ["API_CATEGORIES", "SOURCE", "KinetoImporter", "api_kind", "memcpy_kind"]

SOURCE = "kineto"

#: categories of host runtime calls (tabled in api_calls, ``domain`` = category)
API_CATEGORIES = ("cuda_runtime", "cuda_driver", "cuda_sync")

_EXPECTED = "a PyTorch profiler / Kineto Chrome trace (JSON with traceEvents)"
_STEP = re.compile(r"ProfilerStep#(\d+)$")

# Exact launch entry points of the CUDA runtime/driver and HIP; matched before the
# substring rules so that e.g. hipLaunchKernel never falls into `other`.
_LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cudaLaunchHostFunc",
        "cudaGraphLaunch",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuLaunchGrid",
        "cuGraphLaunch",
        "hipLaunchKernel",
        "hipLaunchKernelExC",
        "hipExtLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipHccModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipExtLaunchMultiKernelMultiDevice",
        "hipGraphLaunch",
    }
)
_API_KIND_CACHE: dict[str, str] = {}


def api_kind(name: str) -> str:
    """Classify a CUDA/HIP runtime or driver call by name.

    Returns ``launch``, ``memcpy``, ``memset``, ``sync``, ``alloc`` or ``other``.

    >>> api_kind("hipExtModuleLaunchKernel"), api_kind("cudaMemcpyAsync")
    ('launch', 'memcpy')
    """
    kind = _API_KIND_CACHE.get(name)
    if kind is not None:
        return kind
    base = name.removesuffix("_ptsz").removesuffix("_spt")
    if base in _LAUNCH_NAMES or (base.startswith(("cuda", "cu", "hip")) and "LaunchKernel" in base):
        kind = "launch"
    elif "Memcpy" in base:
        kind = "memcpy"
    elif "Memset" in base:
        kind = "memset"
    elif (
        "Synchronize" in base
        or "StreamWaitEvent" in base
        or "StreamWaitValue" in base
        or base in ("Stream Sync", "Event Sync", "Context Sync", "Device Sync", "Stream Wait Event")
    ):
        kind = "sync"
    elif "Malloc" in base or "Free" in base or "MemAlloc" in base or "MemFree" in base:
        kind = "alloc"
    else:
        kind = "other"
    if len(_API_KIND_CACHE) < 65536:
        _API_KIND_CACHE[name] = kind
    return kind


_MEMCPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP")


def memcpy_kind(name: str, arg_kind: object = None) -> str:
    """Direction of a Kineto ``gpu_memcpy``/``gpu_memset`` event from its name or args.kind.

    >>> memcpy_kind("Memcpy HtoD (Pageable -> Device)"), memcpy_kind("Memset (Device)")
    ('HtoD', 'memset')
    """
    if name.startswith("Memset"):
        return "memset"
    for k in _MEMCPY_KINDS:
        if k in name:
            return k
    if isinstance(arg_kind, str) and arg_kind in _MEMCPY_KINDS:
        return arg_kind
    return "unknown"


# Every field is decoded as whatever JSON value the file holds (``Any``): one event with an
# odd value (a Triton launch's ``"grid": "grid(512,)"``, a string ``"stream"``) must not make
# the decoder reject the piece. Values are checked and coerced per column afterwards, where
# a column of the expected types takes a C-level fast path (see _Collector).
class _Args(msgspec.Struct, gc=False):
    """The args keys read here; every other key is skipped by the decoder."""

    external_id: Any = msgspec.field(default=None, name="External id")
    correlation: Any = None
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared: Any = msgspec.field(default=None, name="shared memory")
    nbytes: Any = msgspec.field(default=None, name="bytes")
    kind: Any = None
    # cuda_sync events: the stream whose work was waited for, and the correlation id of the
    # cudaEventRecord call that recorded the waited-on event
    wait_stream: Any = msgspec.field(default=None, name="wait_on_stream")
    wait_corr: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | list[Any] | str | int | float | bool | None = None


# an element of traceEvents that is not an object decodes as itself and is skipped
_DECODER = msgspec.json.Decoder(list[_Event | list[Any] | str | int | float | bool | None])
_NAME, _PID, _TID, _TS, _DUR, _ARGS = (
    attrgetter(f) for f in ("name", "pid", "tid", "ts", "dur", "args")
)
_EXT, _CORR, _DEVICE, _STREAM, _GRID, _BLOCK = (
    attrgetter(f) for f in ("external_id", "correlation", "device", "stream", "grid", "block")
)
_REGS, _SHARED, _NBYTES, _DIMS, _KIND = (
    attrgetter(f) for f in ("registers", "shared", "nbytes", "input_dims", "kind")
)
_WSTREAM, _WCORR = attrgetter("wait_stream"), attrgetter("wait_corr")
# the key of meta["odd_values"] for each int column, as the file spells the field
_FIELD = {"ext": "args.External id", "corr": "args.correlation", "device": "args.device",
          "stream": "args.stream", "grid": "args.grid", "block": "args.block",
          "regs": "args.registers per thread", "shared": "args.shared memory",
          "nbytes": "args.bytes", "pid": "pid", "tid": "tid",
          "wstream": "args.wait_on_stream",
          "wcorr": "args.wait_on_cuda_event_record_corr_id"}  # fmt: skip


#: null marker inside int64 columns until they become Arrow arrays with a validity mask
_NULL = np.iinfo(np.int64).min


class _Codes(dict[Any, int]):
    """value -> code; an unseen value gets the next code (so ``map(d.__getitem__, ...)``
    encodes a whole column in one C-level loop)."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


class _Names:
    """Dictionary encoding: each distinct value stored once, rows keep int32 codes."""

    def __init__(self) -> None:
        self.index = _Codes()

    def encode(self, values: Iterable[Any], count: int) -> np.ndarray:
        return np.fromiter(map(self.index.__getitem__, values), dtype=np.int32, count=count)

    def values(self) -> list[Any]:
        return list(self.index)


_NONE = type(None)
_ONLY_INT = frozenset({int})
_INT_OR_NONE = frozenset({int, _NONE})
_NUMBERS = frozenset({int, float})
_LIST_OR_NONE = frozenset({list, _NONE})
# |ts| beyond this many us overflows int64 ns
_MAX_US = np.iinfo(np.int64).max // 1000
# (digit counts bounded: Python refuses to convert int text of over 4300 digits)
_US_TEXT = re.compile(r"\s*(-?)(\d{1,20})(?:\.(\d{0,30}))?\s*")
_DIM_TEXT = re.compile(
    r"\s*[\[(]?\s*(\d{1,20})\s*(?:,\s*(\d{1,20})\s*)?(?:,\s*(\d{1,20})\s*)?,?\s*[\])]?\s*"
)


def _ints(values: list[Any]) -> tuple[np.ndarray, int]:
    """A column of integer ids as int64 with _NULL markers, and how many values were odd.

    Ints (None is null) take a C-level path; anything else goes through
    :func:`~aaco.importers._lenient.to_int` (integral floats, decimal or ``"0x1a"`` text),
    and a present value it cannot read is null and counted.
    """
    types = set(map(type, values))
    if types <= _ONLY_INT:
        try:
            return np.array(values, dtype=np.int64), 0
        except OverflowError:
            pass
    elif types <= _INT_OR_NONE:
        if types == {_NONE}:
            return np.full(len(values), _NULL, dtype=np.int64), 0
        try:
            # ints and nulls: still a C loop, through Arrow's converter
            return _fill_null(pa.array(values, type=pa.int64())), 0
        except (pa.ArrowInvalid, OverflowError):
            pass
    out = list(map(to_int, values))
    bad = sum(1 for v, o in zip(values, out, strict=True) if o is None and v is not None)
    return np.array([_NULL if o is None else o for o in out], dtype=np.int64), bad


def _fill_null(arr: pa.Array) -> np.ndarray:
    """Int64 Arrow array (nulls allowed) -> numpy int64 with _NULL markers."""
    n = len(arr)
    validity, data = arr.buffers()
    values: np.ndarray = np.frombuffer(data, dtype=np.int64, count=n + arr.offset)[arr.offset :]
    if not arr.null_count:
        copy: np.ndarray = values.copy()
        return copy
    bits = np.frombuffer(validity, dtype=np.uint8)
    valid = np.unpackbits(bits, bitorder="little", count=n + arr.offset)[arr.offset :]
    out: np.ndarray = np.where(valid.astype(bool), values, _NULL)
    return out


def _vec3(v: Any) -> tuple[int | None, int | None, int | None] | None:
    """A grid/block value as (x, y, z); None when it is not one (absent axes are None).

    Lists of up to three ints are what Kineto writes; text such as ``"[4, 2, 1]"`` or
    ``"(4, 2, 1)"``, a ``{"x", "y", "z"}`` object or a bare number (x only) are read too.
    """
    parts: list[Any]
    if isinstance(v, list):
        parts = v
    elif isinstance(v, str):
        m = _DIM_TEXT.fullmatch(v)
        if m is None:
            return None
        parts = [int(g) for g in m.groups() if g is not None]
    elif isinstance(v, dict):
        parts = [v.get("x"), v.get("y"), v.get("z")]
        while parts and parts[-1] is None:
            parts.pop()
    elif type(v) is int:
        parts = [v]
    else:
        return None
    if not 1 <= len(parts) <= 3:
        return None
    ints = [to_int(p) for p in parts]
    if None in ints:
        return None
    ints += [None] * (3 - len(ints))
    return ints[0], ints[1], ints[2]


def _dims3(vecs: list[Any]) -> tuple[np.ndarray, int]:
    """grid/block values as an (n, 3) int64 array (null where absent), and the odd count."""
    n = len(vecs)
    out = np.full((n, 3), _NULL, dtype=np.int64)
    types = set(map(type, vecs))
    if types <= {_NONE}:
        return out, 0
    if types <= _LIST_OR_NONE:
        rows: Any = slice(None)
        present: list[Any] = vecs
        if _NONE in types:
            rows = [i for i, v in enumerate(vecs) if v is not None]
            present = [vecs[i] for i in rows]
        # lists of exactly three ints, the usual case: one C loop
        if set(map(len, present)) == {3} and set(map(type, chain.from_iterable(present))) <= {int}:
            try:
                out[rows] = np.array(present, dtype=np.int64)
                return out, 0
            except OverflowError:
                pass
    bad = 0
    for i, v in enumerate(vecs):
        if v is None:
            continue
        xyz = _vec3(v)
        if xyz is None:
            bad += 1
            continue
        out[i] = [_NULL if c is None else c for c in xyz]
    return out, bad


def _us_text(v: Any) -> int | None:
    """One ts/dur value in us (number or numeric text) as int ns; None when there is none."""
    if type(v) is int:
        return v * 1000 if -_MAX_US <= v <= _MAX_US else None
    if type(v) is float:
        if not (math.isfinite(v) and -_MAX_US <= v <= _MAX_US):
            return None
        whole = math.floor(v)
        return whole * 1000 + round((v - whole) * 1000)
    if not isinstance(v, str):
        return None
    m = _US_TEXT.fullmatch(v)
    if m is None:
        try:
            return _us_text(float(v))  # "1e3"
        except ValueError:
            return None
    # decimal text is scaled exactly (Perfetto reads numeric strings the same way)
    sign, whole_text, frac = m.groups()
    frac = (frac or "") + "0000"
    ns = int(whole_text) * 1000 + int(frac[:3]) + (frac[3] >= "5")
    ns = -ns if sign else ns
    return ns if abs(ns) <= _MAX_US * 1000 else None


def _us_to_ns(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds to int64 ns, round(us * 1000), and a mask of the values that were usable.

    The integer part is scaled exactly in int64 so that epoch-based timestamps (1.7e15 us)
    keep ns precision; only the fraction goes through floating point. Numbers take a C-level
    path; numeric text is read exactly; anything else (missing, null, text, NaN) is unusable.
    """
    n = len(values)
    if not n:
        return np.zeros(0, dtype=np.int64), np.ones(0, dtype=bool)
    types = set(map(type, values))
    if types <= _ONLY_INT:
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            pass
        else:
            ok = np.abs(arr) <= _MAX_US
            return np.where(ok, arr, 0) * 1000, ok
    elif types <= _NUMBERS:
        farr = np.array(values, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(farr) & (np.abs(farr) <= _MAX_US)
        f = np.where(ok, farr, 0.0)
        whole = np.floor(f)
        ns: np.ndarray = whole.astype(np.int64) * 1000 + np.rint((f - whole) * 1000).astype(
            np.int64
        )
        return ns, ok
    out = list(map(_us_text, values))
    ok = np.fromiter((o is not None for o in out), dtype=bool, count=n)
    return np.array([0 if o is None else o for o in out], dtype=np.int64), ok


def _labels(values: list[Any]) -> tuple[list[Any], int]:
    """cat/ph values: strings as they are, anything else "" (unknown); the odd count."""
    if set(map(type, values)) <= {str}:
        return values, 0
    out = [v if type(v) is str else "" for v in values]
    bad = sum(1 for v in values if type(v) is not str and v is not None)
    return out, bad


def _event_names(values: list[Any]) -> tuple[list[Any], np.ndarray | None]:
    """Event names: strings, and numbers as their text; a mask of the usable ones (None when
    all are). Every table declares its name column non-null, so an event whose name is null,
    a list or an object cannot be tabled."""
    if set(map(type, values)) <= {str}:
        return values, None
    out = [v if type(v) is str else str(v) if type(v) in (int, float) else None for v in values]
    return out, np.fromiter((v is not None for v in out), dtype=bool, count=len(out))


class _Table:
    """The columns of one table as lists of per-chunk numpy arrays."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = defaultdict(list)

    def put(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts[k].append(v)

    def col(self, key: str, dtype: Any = np.int64) -> np.ndarray:
        parts = self.parts.get(key)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts.get("start", []))


_CATS = ("cuda_runtime", "cuda_driver", "cuda_sync", "user_annotation", "gpu_user_annotation",
         "gpu_memcpy", "gpu_memset", "cpu_op", "kernel")  # fmt: skip
_CAT_CODE = {c: i for i, c in enumerate(_CATS)}
# table of each category code, in the order rows are grouped in a piece; index -1 (the last
# entry) is where categories that are not tabled land
_OPS, _KERNELS, _MEMCPY, _API, _ANN = range(5)
_TABLE_OF = np.array([_API, _API, _API, _ANN, _ANN, _MEMCPY, _MEMCPY, _OPS, _KERNELS, -1],
                     dtype=np.int8)  # fmt: skip
_PH = attrgetter("ph")
_CAT = attrgetter("cat")


def _bump(counts: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``counts`` plus the occurrences of each code in ``codes`` (growing as codes appear)."""
    add = np.bincount(codes)
    if len(add) > len(counts):
        counts = np.concatenate([counts, np.zeros(len(add) - len(counts), dtype=np.int64)])
    counts[: len(add)] += add
    return counts


class _Collector:
    """Turns each decoded piece into compact columns; builds the tables at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names = _Names()
        self.shapes = _Names()
        # category and phase codes; the tabled categories first, so code == _CAT_CODE
        self.cat_ids = _Codes({c: i for i, c in enumerate(_CATS)})
        self.ph_ids = _Codes({"X": 0})
        self.cat_counts = np.zeros(len(_CATS), dtype=np.int64)
        self.ph_counts = np.zeros(1, dtype=np.int64)
        self.total = 0
        self.tabled = 0
        # whether any tabled event's ts is a JSON float (HTA then rounds every event to µs)
        self.float_ts = False
        self.ops = _Table()
        self.kernels = _Table()
        self.memcpy = _Table()
        self.api = _Table()
        self.ann = _Table()
        self.odd = OddValues()
        # codes of cat_ids / ph_ids inspected so far, and those that are not text
        self._labels_checked = [len(self.cat_ids), len(self.ph_ids)]
        self._bad_labels: tuple[dict[int, bool], dict[int, bool]] = ({}, {})

    @property
    def categories(self) -> dict[str, int]:
        return {c: int(k) for c, k in zip(self.cat_ids, self.cat_counts, strict=False) if k and c}

    @property
    def phases(self) -> dict[str, int]:
        return {p: int(k) for p, k in zip(self.ph_ids, self.ph_counts, strict=False) if k}

    def add(self, events: list[Any]) -> None:
        """Columns of one decoded piece; every per-event step is a C-level loop (map) as
        long as the values have the expected types (odd ones take a slower, counted path)."""
        n = len(events)
        if not n:
            return
        try:
            # the fast way: every entry an event, every cat/ph hashable
            cc = np.fromiter(map(self.cat_ids.__getitem__, map(_CAT, events)), np.int32, n)
            pc = np.fromiter(map(self.ph_ids.__getitem__, map(_PH, events)), np.int32, n)
        except (AttributeError, TypeError):
            # an entry that is not an object, or a cat/ph that is a list or an object
            events, cc, pc = self._codes_one_by_one(events)
            n = len(events)
            if not n:
                return
        checked = self._labels_checked
        if (len(self.cat_ids) > checked[0] or len(self.ph_ids) > checked[1]
                or self._bad_labels[0] or self._bad_labels[1]):  # fmt: skip
            self._unknown_labels(cc, pc)
        self.total += n
        self.cat_counts = _bump(self.cat_counts, cc)
        self.ph_counts = _bump(self.ph_counts, pc)
        table = _TABLE_OF[np.minimum(cc, len(_CATS))]
        table[pc != 0] = -1
        sel = np.flatnonzero(table >= 0)
        if not len(sel):
            return
        self.tabled += len(sel)
        # rows of one table together, in file order within it
        order = sel[np.argsort(table[sel], kind="stable")]
        b = np.searchsorted(table[order], np.arange(6)).tolist()
        rows = list(map(events.__getitem__, order.tolist()))
        cat = cc[order].astype(np.int8)
        for t, tab in enumerate((self.ops, self.kernels, self.memcpy, self.api, self.ann)):
            lo, hi = b[t], b[t + 1]
            if lo < hi:
                self._put(t, tab, rows[lo:hi], cat[lo:hi])

    def _codes_one_by_one(self, events: list[Any]) -> tuple[list[_Event], Any, Any]:
        """Category and phase codes the slow way: entries that are not events left out, a
        cat/ph that is not text treated as absent; both counted."""
        kept = [e for e in events if type(e) is _Event]
        self.odd.drop("traceEvents: entry is not an object", len(events) - len(kept))
        cats, bad = _labels(list(map(_CAT, kept)))
        self.odd.null("cat", bad)
        phs, bad = _labels(list(map(_PH, kept)))
        self.odd.null("ph", bad)
        cc = np.fromiter(map(self.cat_ids.__getitem__, cats), np.int32, len(kept))
        pc = np.fromiter(map(self.ph_ids.__getitem__, phs), np.int32, len(kept))
        return kept, cc, pc

    def _unknown_labels(self, cc: np.ndarray, pc: np.ndarray) -> None:
        """Codes given to a cat/ph that is not text (a number, null) are recoded, in place, as
        absent (""), and counted unless null. Only the few distinct values are inspected,
        each once."""
        for i, (ids, codes, field) in enumerate(((self.cat_ids, cc, "cat"),
                                                  (self.ph_ids, pc, "ph"))):  # fmt: skip
            start = self._labels_checked[i]
            if len(ids) > start:
                for code, key in enumerate(list(ids)[start:], start):
                    if type(key) is not str:
                        self._bad_labels[i][code] = key is not None
                self._labels_checked[i] = len(ids)
            bad = self._bad_labels[i]
            if not bad:
                continue
            odd = np.isin(codes, list(bad))
            if odd.any():
                counted = [code for code, count in bad.items() if count]
                self.odd.null(field, int(np.isin(codes, counted).sum()) if counted else 0)
                codes[odd] = ids[""]

    def export(self) -> dict[str, Any]:
        """The collected columns as plain data (to hand from a worker process to the parent)."""
        tables = {}
        for t, tab in enumerate(self._tables()):
            tables[t] = {k: np.concatenate(v) for k, v in tab.parts.items()}
        return {
            "names": self.names.values(),
            "shapes": self.shapes.values(),
            "categories": self.categories,
            "phases": self.phases,
            "total": self.total,
            "tabled": self.tabled,
            "float_ts": self.float_ts,
            "tables": tables,
            "odd": self.odd.meta(),
        }

    def absorb(self, part: dict[str, Any]) -> None:
        """Append the rows of an exported collector (the events that follow ours)."""
        names = np.array([self.names.index[v] for v in part["names"]] or [0], dtype=np.int32)
        shapes = np.array([self.shapes.index[v] for v in part["shapes"]] or [0], dtype=np.int32)
        for c, k in part["categories"].items():
            code = self.cat_ids[c]
            self.cat_counts = _bump(self.cat_counts, np.full(k, code, dtype=np.int32))
        for ph, k in part["phases"].items():
            self.ph_counts = _bump(self.ph_counts, np.full(k, self.ph_ids[ph], dtype=np.int32))
        self.total += part["total"]
        self.tabled += part["tabled"]
        self.float_ts = self.float_ts or bool(part.get("float_ts"))
        self.odd.merge(part["odd"])
        for t, tab in enumerate(self._tables()):
            cols = dict(part["tables"][t])
            if "name" in cols:
                cols["name"] = names[cols["name"]]
            for key in ("dims", "kind"):
                if key in cols:
                    cols[key] = shapes[cols[key]]
            tab.put(**cols)

    def _tables(self) -> tuple[_Table, ...]:
        return (self.ops, self.kernels, self.memcpy, self.api, self.ann)

    def _put(self, t: int, tab: _Table, evs: list[_Event], cat: np.ndarray) -> None:
        """The columns that table ``t`` uses, for its rows ``evs`` of one piece."""
        ts_values = list(map(_TS, evs))
        if not self.float_ts and float in set(map(type, ts_values)):
            self.float_ts = True
        start, ok_start = _us_to_ns(ts_values)
        dur, ok_dur = _us_to_ns(list(map(_DUR, evs)))
        names, ok_name = _event_names(list(map(_NAME, evs)))
        ok = ok_start & ok_dur & (dur >= 0)
        if ok_name is not None:
            ok &= ok_name
        if not ok.all():
            # an event that cannot be placed in time or named is left out, and counted
            self.odd.drop("ts: missing, not a number or out of range", int((~ok_start).sum()))
            self.odd.drop(
                "dur: missing, not a number or out of range", int((ok_start & ~ok_dur).sum())
            )
            self.odd.drop("dur: negative", int((ok_start & ok_dur & (dur < 0)).sum()))
            if ok_name is not None:
                named = ok_start & ok_dur & (dur >= 0) & ~ok_name
                self.odd.drop("name: not a string", int(named.sum()))
            keep = np.flatnonzero(ok)
            self.tabled -= len(evs) - len(keep)
            evs = list(map(evs.__getitem__, keep.tolist()))
            names = list(map(names.__getitem__, keep.tolist()))
            start, dur, cat = start[keep], dur[keep], cat[keep]
            if not evs:
                return
        m = len(evs)
        tab.put(name=self.names.encode(names, m), pid=self._ints("pid", map(_PID, evs)),
                tid=self._ints("tid", map(_TID, evs)), start=start, dur=dur)  # fmt: skip
        if t in (_MEMCPY, _API, _ANN):
            tab.put(cat=cat)
        if t == _ANN:
            return
        args = list(map(_ARGS, evs))
        types = set(map(type, args))
        if types != {_Args}:
            self.odd.null("args", sum(1 for a in args if type(a) is not _Args and a is not None))
            args = [a if type(a) is _Args else _NO_ARGS for a in args]
        tab.put(ext=self._ints("ext", map(_EXT, args)))
        if t == _OPS:
            tab.put(dims=self.shapes.encode(map(bytes, map(_DIMS, args)), m))
            return
        tab.put(corr=self._ints("corr", map(_CORR, args)),
                device=self._ints("device", map(_DEVICE, args)))  # fmt: skip
        tab.put(stream=self._ints("stream", map(_STREAM, args)))
        if t == _API:
            tab.put(wstream=self._ints("wstream", map(_WSTREAM, args)),
                    wcorr=self._ints("wcorr", map(_WCORR, args)))  # fmt: skip
        if t != _MEMCPY:
            grid = self._dims3("grid", map(_GRID, args))
            block = self._dims3("block", map(_BLOCK, args))
            tab.put(gx=grid[:, 0], gy=grid[:, 1], gz=grid[:, 2],
                    bx=block[:, 0], by=block[:, 1], bz=block[:, 2])  # fmt: skip
        if t == _KERNELS:
            tab.put(regs=self._ints("regs", map(_REGS, args)),
                    shared=self._ints("shared", map(_SHARED, args)))  # fmt: skip
        elif t == _MEMCPY:
            kinds = [k if type(k) is str else "" for k in map(_KIND, args)]
            tab.put(nbytes=self._ints("nbytes", map(_NBYTES, args)),
                    kind=self.shapes.encode(kinds, m))  # fmt: skip

    def _ints(self, key: str, values: Iterable[Any]) -> np.ndarray:
        arr, bad = _ints(list(values))
        self.odd.null(_FIELD[key], bad)
        return arr

    def _dims3(self, key: str, values: Iterable[Any]) -> np.ndarray:
        arr, bad = _dims3(list(values))
        self.odd.null(_FIELD[key], bad)
        return arr

    # -- building the tables -------------------------------------------------------------

    def _times(self, t: _Table, what: str) -> tuple[np.ndarray, np.ndarray]:
        # events without a usable ts/dur were dropped (and counted) as they were collected
        return t.col("start"), t.col("dur")

    def build(self, top: dict[str, Any]) -> TraceTables:
        names = self.names.values()
        # Input Dims stay raw bytes until here; msgspec does not check them for UTF-8
        shapes = [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            for v in self.shapes.values()
        ]

        # annotations, and the step windows that give iterations
        an = self.ann
        ann_start, ann_dur = self._times(an, "annotation")
        ann_codes = an.col("name", np.int32)
        code_step = np.array(
            [int(hit.group(1)) if (hit := _STEP.match(n)) else -1 for n in names], dtype=np.int64
        )
        step_arr = code_step[ann_codes] if len(ann_codes) else np.zeros(0, dtype=np.int64)
        is_gpu = an.col("cat", np.int8) == _CAT_CODE["gpu_user_annotation"]
        host_win = _Windows(ann_start, ann_dur, step_arr, (~is_gpu) & (step_arr >= 0))
        gpu_win = _Windows(ann_start, ann_dur, step_arr, is_gpu & (step_arr >= 0))
        ann_pid, ann_tid = an.col("pid"), an.col("tid")
        kind = np.where(is_gpu, "gpu_user", np.where(step_arr >= 0, "step", "user"))
        annotations = ANNOTATIONS.from_columns(
            {
                "source": _const(SOURCE, len(ann_start)),
                "kind": kind.tolist(),
                "name": _strings(ann_codes, names),
                "process_id": _nullable(np.where(is_gpu, _NULL, ann_pid), pa.int64()),
                "thread_id": _nullable(np.where(is_gpu, _NULL, ann_tid), pa.int64()),
                "device": _nullable(np.where(is_gpu, ann_pid, _NULL), pa.int32()),
                "stream": _nullable(np.where(is_gpu, ann_tid, _NULL), pa.int64()),
                "start_ns": ann_start,
                "dur_ns": ann_dur,
                "step": _nullable(np.where(is_gpu, _NULL, np.where(step_arr >= 0, step_arr,
                                                                    _NULL)), pa.int32()),
            }
        )  # fmt: skip

        # ops
        o = self.ops
        op_start, op_dur = self._times(o, "cpu_op")
        n_o = len(op_start)
        op_names = _strings(o.col("name", np.int32), names)
        shape_arr = _strings(o.col("dims", np.int32), [s or None for s in shapes])
        ops = OPS.from_columns(
            {
                "source": _const("pytorch", n_o),
                "iteration": host_win.lookup(op_start),
                "node_name": op_names,
                "op_type": op_names,
                "provider": pa.nulls(n_o, pa.string()),
                "node_index": pa.nulls(n_o, pa.int32()),
                "start_ns": op_start,
                "dur_ns": op_dur,
                "nested_ns": pa.nulls(len(op_start), pa.int64()),
                "thread_id": _nullable(o.col("tid"), pa.int64()),
                "input_shapes": shape_arr,
                "output_shapes": pa.nulls(n_o, pa.string()),
                "activation_bytes": pa.nulls(n_o, pa.int64()),
                "parameter_bytes": pa.nulls(n_o, pa.int64()),
                "output_bytes": pa.nulls(n_o, pa.int64()),
                "original_nodes": pa.nulls(n_o, pa.list_(pa.string())),
                "process_id": _nullable(o.col("pid"), pa.int64()),
                "external_id": _nullable(o.col("ext"), pa.int64()),
            }
        )

        # api calls
        a = self.api
        api_start, api_dur = self._times(a, "runtime")
        api_codes = a.col("name", np.int32)
        code_kind = np.array([api_kind(n) for n in names], dtype=object)
        api_cat = a.col("cat", np.int8)
        api_kinds = code_kind[api_codes] if len(api_codes) else np.zeros(0, dtype=object)
        api_kinds[api_cat == _CAT_CODE["cuda_sync"]] = "sync"
        launch = api_kinds == "launch"
        self.launch_names = {names[c] for c in np.unique(api_codes[launch]).tolist()}
        # cuda_sync events sit on the device's track (pid = device, tid = stream)
        on_dev = a.col("device") != _NULL
        api_corr = a.col("corr")
        api_pid = np.where(on_dev, _NULL, a.col("pid"))
        api_tid = np.where(on_dev, _NULL, a.col("tid"))
        api_calls = API_CALLS.from_columns(
            {
                "source": _const(SOURCE, len(api_start)),
                "domain": _strings(api_cat, list(_CATS)),
                "name": _strings(api_codes, names),
                "kind": api_kinds.tolist(),
                "process_id": _nullable(api_pid, pa.int64()),
                "thread_id": _nullable(api_tid, pa.int64()),
                "start_ns": api_start,
                "end_ns": api_start + api_dur,
                "dur_ns": api_dur,
                "correlation_id": _nullable(api_corr, pa.int64()),
                "external_id": _nullable(a.col("ext"), pa.int64()),
                # a device-side sync (cuda_sync on a device track) waits on a device/stream
                "device": _nullable(np.where(on_dev, a.col("device"), _NULL), pa.int32()),
                "stream": _nullable(np.where(on_dev, a.col("stream"), _NULL), pa.int64()),
                "wait_stream": _nullable(_no_sentinel(a.col("wstream")), pa.int64()),
                "wait_correlation_id": _nullable(_no_sentinel(a.col("wcorr")), pa.int64()),
            }
        )
        has_activity = np.isin(api_kinds, ["launch", "memcpy", "memset"])
        launch_of = _CorrIndex(np.where(has_activity, api_corr, _NULL))

        # kernels
        k = self.kernels
        k_start, k_dur = self._times(k, "kernel")
        n_k = len(k_start)
        pos = launch_of.find(k.col("corr"))
        found = pos >= 0
        pc = np.where(found, pos, 0)

        def from_launch(col: str) -> np.ndarray:
            # ROCm: grid/block are args of the launch call, not of the kernel event
            own = k.col(col)
            if not len(own):
                return own
            theirs = np.where(found, a.col(col)[pc], _NULL) if len(api_start) else own
            return np.where(own == _NULL, theirs, own)

        k_dev = k.col("device")
        k_dev = np.where(k_dev == _NULL, k.col("pid"), k_dev)
        k_stream = k.col("stream")
        k_stream = np.where(k_stream == _NULL, k.col("tid"), k_stream)
        kernels = KERNELS.from_columns(
            {
                "source": _const(SOURCE, n_k),
                "name": _strings(k.col("name", np.int32), names),
                "short_name": pa.nulls(n_k, pa.string()),
                "family": pa.nulls(n_k, pa.string()),
                "library": pa.nulls(n_k, pa.string()),
                "dtype": pa.nulls(n_k, pa.string()),
                "start_ns": k_start,
                "end_ns": k_start + k_dur,
                "dur_ns": k_dur,
                "time_is_gpu": np.ones(n_k, dtype=bool),
                "device": _nullable(k_dev, pa.int32()),
                "stream": _nullable(k_stream, pa.int64()),
                "queue": pa.nulls(n_k, pa.int64()),
                "correlation_id": _nullable(k.col("corr"), pa.int64()),
                "external_id": _nullable(k.col("ext"), pa.int64()),
                "dispatch_id": pa.nulls(n_k, pa.int64()),
                "process_id": _nullable(np.where(found, api_pid[pc], _NULL)
                                        if len(api_start) else np.full(n_k, _NULL), pa.int64()),
                "thread_id": _nullable(np.where(found, api_tid[pc], _NULL)
                                       if len(api_start) else np.full(n_k, _NULL), pa.int64()),
                "grid_x": _nullable(from_launch("gx"), pa.int64()),
                "grid_y": _nullable(from_launch("gy"), pa.int64()),
                "grid_z": _nullable(from_launch("gz"), pa.int64()),
                "block_x": _nullable(from_launch("bx"), pa.int64()),
                "block_y": _nullable(from_launch("by"), pa.int64()),
                "block_z": _nullable(from_launch("bz"), pa.int64()),
                "registers": _nullable(k.col("regs"), pa.int32()),
                "accum_vgpr": pa.nulls(n_k, pa.int32()),
                "sgpr": pa.nulls(n_k, pa.int32()),
                "shared_bytes": _nullable(k.col("shared"), pa.int64()),
                "scratch_bytes": pa.nulls(n_k, pa.int64()),
                "iteration": _iterations(pos, api_start, host_win, gpu_win, k_start),
            }
        )  # fmt: skip

        # memcpy / memset
        m = self.memcpy
        m_start, m_dur = self._times(m, "memcpy")
        n_m = len(m_start)
        m_codes = m.col("name", np.int32)
        m_kind_codes = m.col("kind", np.int32)
        is_set = m.col("cat", np.int8) == _CAT_CODE["gpu_memset"]
        m_kinds = [
            "memset" if s else memcpy_kind(names[c], shapes[kc])
            for s, c, kc in zip(is_set.tolist(), m_codes.tolist(), m_kind_codes.tolist(),
                                strict=True)
        ]  # fmt: skip
        m_dev = m.col("device")
        m_stream = m.col("stream")
        memcpy = MEMCPY.from_columns(
            {
                "source": _const(SOURCE, n_m),
                "name": _strings(m_codes, names),
                "kind": m_kinds,
                "bytes": _nullable(m.col("nbytes"), pa.int64()),
                "start_ns": m_start,
                "end_ns": m_start + m_dur,
                "dur_ns": m_dur,
                "device": _nullable(np.where(m_dev == _NULL, m.col("pid"), m_dev), pa.int32()),
                "stream": _nullable(np.where(m_stream == _NULL, m.col("tid"), m_stream),
                                    pa.int64()),
                "src_device": pa.nulls(n_m, pa.int32()),
                "dst_device": pa.nulls(n_m, pa.int32()),
                "correlation_id": _nullable(m.col("corr"), pa.int64()),
                "external_id": _nullable(m.col("ext"), pa.int64()),
                "iteration": _iterations(launch_of.find(m.col("corr")), api_start, host_win,
                                         gpu_win, m_start),
            }
        )  # fmt: skip
        return TraceTables(
            kernels=kernels,
            api_calls=api_calls,
            memcpy=memcpy,
            ops=ops,
            annotations=annotations,
            meta=self._meta(top),
        )

    def _meta(self, top: dict[str, Any]) -> dict[str, Any]:
        devices = top.get("deviceProperties")
        devices = devices if isinstance(devices, list) else []
        dist = top.get("distributedInfo")
        rank = dist.get("rank") if isinstance(dist, dict) else None
        hip = any(n.startswith("hip") for n in self.launch_names)
        amd = any(isinstance(d, dict) and "AMD" in str(d.get("name", "")) for d in devices)
        gpu_events = len(self.kernels) + len(self.memcpy) + len(self.api)
        if hip or amd:
            flavour = "rocm"
        elif gpu_events or devices:
            flavour = "cuda"
        else:
            flavour = "cpu"
        base = top.get("baseTimeNanoseconds")
        unit = top.get("displayTimeUnit")
        return {
            "tool": "pytorch-profiler",
            "format": "kineto-chrome",
            "files": [str(self.path)],
            "flavour": flavour,
            "schema_version": top.get("schemaVersion"),
            "devices": devices,
            "rank": rank if type(rank) is int else None,
            "world_size": _int_or_none(dist.get("world_size")) if isinstance(dist, dict) else None,
            "trace_name": top.get("traceName"),
            "clock": {
                "unit": "us",
                "converted_to": "ns",
                "origin": "trace",
                "base_time_ns": base if type(base) is int else None,
                # a display hint only: ts/dur are us whatever it says (Chrome trace format,
                # HTA and Perfetto's trace processor all read them so)
                "display_time_unit": unit if isinstance(unit, str) else None,
                # a ts written as a JSON float: HTA then rounds every event to whole µs
                "float_ts": self.float_ts,
            },
            "event_count": self.total,
            "events_by_category": dict(sorted(self.categories.items())),
            "events_by_phase": dict(sorted(self.phases.items())),
            "tabled_events": self.tabled,
            "skipped_events": self.total - self.tabled,
            **self.odd.meta(),
        }


class _Windows:
    """Step windows [start, start + dur) with their step numbers, for time lookups."""

    def __init__(self, start: np.ndarray, dur: np.ndarray, step: np.ndarray, keep: Any) -> None:
        order = np.argsort(start[keep], kind="stable")
        self.start = start[keep][order]
        self.end = (start + dur)[keep][order]
        self.step = step[keep][order]

    def lookup_arr(self, ts: np.ndarray) -> np.ndarray:
        """Step of the window containing each ts; -1 where none."""
        out = np.full(len(ts), -1, dtype=np.int64)
        if not len(self.start) or not len(ts):
            return out
        i = np.searchsorted(self.start, ts, side="right") - 1
        ok = i >= 0
        ic = np.where(ok, i, 0)
        ok &= ts < self.end[ic]
        out[ok] = self.step[ic][ok]
        return out

    def lookup(self, ts: np.ndarray) -> pa.Array:
        out = self.lookup_arr(ts)
        return _nullable(np.where(out < 0, _NULL, out), pa.int32())


class _CorrIndex:
    """Row of the API call (launch, memcpy, memset) that has a given correlation id."""

    def __init__(self, corr: np.ndarray) -> None:
        self.order = np.argsort(corr, kind="stable")
        self.sorted = corr[self.order]

    def find(self, q: np.ndarray) -> np.ndarray:
        out = np.full(len(q), -1, dtype=np.int64)
        if not len(self.sorted) or not len(q):
            return out
        i = np.searchsorted(self.sorted, q)
        ic = np.minimum(i, len(self.sorted) - 1)
        ok = (self.sorted[ic] == q) & (q != _NULL)
        out[ok] = self.order[ic][ok]
        return out


def _iterations(
    pos: np.ndarray, api_start: np.ndarray, host: _Windows, gpu: _Windows, start: np.ndarray
) -> pa.Array:
    """Step of the launch call (by correlation), else the GPU step window of the start."""
    out = np.full(len(pos), -1, dtype=np.int64)
    have = pos >= 0
    if have.any():
        out[have] = host.lookup_arr(api_start[pos[have]])
    rest = out < 0
    if rest.any():
        out[rest] = gpu.lookup_arr(start[rest])
    return _nullable(np.where(out < 0, _NULL, out), pa.int32())


def _no_sentinel(arr: np.ndarray) -> np.ndarray:
    """Kineto's "none" (-1, or 2**32 - 1 for an unsigned stream id) as null."""
    return np.where((arr == -1) | (arr == 4294967295), _NULL, arr)


def _nullable(arr: np.ndarray, typ: pa.DataType) -> pa.Array:
    """An int64 column with _NULL markers as an Arrow array of ``typ`` with nulls."""
    mask = arr == _NULL
    return pa.array(np.where(mask, 0, arr), type=typ, mask=mask if mask.any() else None)


def _const(value: str, n: int) -> pa.Array:
    return _strings(np.zeros(n, dtype=np.int32), [value])


def _strings(codes: np.ndarray, values: Sequence[str | None]) -> pa.Array:
    """Plain Arrow strings ``values[codes]`` (None is null).

    The schema declares plain ``string`` columns; Arrow's ``take`` of the distinct values
    builds one in C++ (8x faster than joining the bytes in Python at 2 M rows, 2.5x faster
    than casting a dictionary array).
    """
    try:
        return pa.array(values, pa.string()).take(pa.array(codes, pa.int64()))
    except (pa.ArrowCapacityError, pa.ArrowInvalid) as exc:  # over 2 GiB of names
        raise InputError(f"names too long for one Arrow string column: {exc}") from None


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def _looks_like_ort(head: bytes) -> bool:
    return re.search(rb'"cat"\s*:\s*"(Session|Node|Kernel)"', head) is not None


class KinetoImporter(Importer):
    """PyTorch profiler / Kineto Chrome traces (CUDA, ROCm, CPU) and generic Chrome traces."""

    name: ClassVar[str] = "kineto"
    description: ClassVar[str] = (
        "PyTorch profiler (Kineto) Chrome trace .json/.json.gz, or a generic Chrome trace"
    )

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES, workers: int | None = None) -> None:
        """``workers``: processes that decode one file (None: 2 where two CPUs are free and
        ``os.fork`` exists; 1: never fork). Only uncompressed files of at least
        ``PARALLEL_MIN_BYTES`` are split; the tables are the same either way."""
        self.chunk_bytes = chunk_bytes
        self.workers = workers

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if text[:1] == b"{":
            # Kineto and generic object traces; rocprofv3 JSON has no traceEvents
            return b'"traceEvents"' in text
        if text[:1] == b"[":
            # a generic array trace, but not an ONNX Runtime profile (its own importer)
            return re.search(rb'"ph"\s*:', text) is not None and not _looks_like_ort(text)
        return False

    def read(self, path: Path) -> TraceTables:
        path = Path(path)
        if self._split_ok(path):
            tables = self._read_split(path)
            if tables is not None:
                return tables
        return self._read_serial(path)

    def _read_serial(self, path: Path) -> TraceTables:
        reader = ChromeJsonReader(path, _DECODER, self.chunk_bytes, _EXPECTED)
        col = _Collector(path)
        try:
            for events in reader:
                col.add(events)
        except MemoryError:
            raise InputError(f"{path}: trace too large for memory") from None
        col.odd.merge({"odd_values": reader.repairs})
        tables = col.build(reader.top)
        tables.meta["text_bytes"] = reader.text_bytes
        tables.meta["layout"] = "array" if reader.is_array else "object"
        return tables

    def _split_ok(self, path: Path) -> bool:
        workers = self.workers
        if workers is None:
            workers = 2 if len(os.sched_getaffinity(0)) >= 2 else 1
        if workers < 2 or not hasattr(os, "fork"):
            return False
        try:
            size = path.stat().st_size
            with open(path, "rb") as f:
                magic = f.read(2)
                trailer = b""
                if magic == b"\x1f\x8b" and size >= 18:
                    f.seek(size - 4)
                    trailer = f.read(4)
        except OSError:
            return False
        if magic == b"\x1f\x8b":
            # gzip: split the decompressed text when it is worth a fork and small enough to
            # hold (else the serial reader streams it). The trailer's ISIZE (text length mod
            # 2**32) is only the estimate: the decompression itself enforces the bound
            text = int.from_bytes(trailer, "little") if len(trailer) == 4 else 0
            return size <= GZIP_PARALLEL_MAX_BYTES and (
                text >= PARALLEL_MIN_BYTES or size >= PARALLEL_MIN_BYTES
            )
        return size >= PARALLEL_MIN_BYTES

    def _read_split(self, path: Path) -> TraceTables | None:
        """Decode the second half of the file in a forked child while this process decodes
        the first; None (the caller then reads serially, which also gives the right error
        for a bad file) when no split point is found or either half fails. A gzip file is
        decompressed into memory first (both processes then read the same bytes, the
        child's a copy-on-write view), when its text is at most ``GZIP_PARALLEL_MAX_BYTES``
        and at least ``PARALLEL_MIN_BYTES``."""
        text: bytes | None = None
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                text = _gunzip_bounded(path, GZIP_PARALLEL_MAX_BYTES)
                if text is None or len(text) < PARALLEL_MIN_BYTES:
                    return None
        if text is not None:
            size = len(text)
            head = text[: 1 << 16].lstrip(b"\xef\xbb\xbf \t\r\n")
            window = text[size // 2 : size // 2 + (4 << 20)]
        else:
            size = path.stat().st_size
            with open(path, "rb") as f:
                head = f.read(1 << 16).lstrip(b"\xef\xbb\xbf \t\r\n")
                f.seek(size // 2)
                window = f.read(4 << 20)
        m = _SPLIT.search(window)
        if m is None or head[:1] not in (b"[", b"{"):
            return None
        is_array = head[:1] == b"["
        stop = size // 2 + m.start() + 1  # just past the "}" of an event
        second = size // 2 + m.end() - 1  # the "{" of the next
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            os.close(rfd)
            _child(path, self.chunk_bytes, (second, None, is_array), wfd, text)
        os.close(wfd)
        part: Any = None
        try:
            reader = ChromeJsonReader(
                path, _DECODER, self.chunk_bytes, _EXPECTED, (0, stop, is_array), text
            )
            col = _Collector(path)
            try:
                for events in reader:
                    col.add(events)
            except (InputError, MemoryError):
                return None
            with os.fdopen(rfd, "rb", closefd=False) as pipe:
                data = pipe.read()
            part = pickle.loads(data) if data else None
        finally:
            os.close(rfd)
            _, status = os.waitpid(pid, 0)
        if not isinstance(part, dict) or "error" in part or os.waitstatus_to_exitcode(status):
            return None
        col.absorb(part["collector"])
        del part["collector"]
        col.odd.merge({"odd_values": reader.repairs})
        col.odd.merge({"odd_values": part["repairs"]})
        reader.top.update(part["top"])
        tables = col.build(reader.top)
        # the separator between the halves is read by neither
        tables.meta["text_bytes"] = reader.text_bytes + (second - stop) + part["text_bytes"]
        tables.meta["layout"] = "array" if is_array else "object"
        tables.meta["workers"] = [part["memory"]]
        return tables


#: files smaller than this are read by one process (forking costs more than it saves)
PARALLEL_MIN_BYTES = 8 << 20
#: a gzip trace is split between two processes only when its text is at most this large:
#: it is then held in memory whole (a larger one is streamed by one process)
GZIP_PARALLEL_MAX_BYTES = 256 << 20
_SPLIT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


def _gunzip_bounded(path: Path, limit: int) -> bytes | None:
    """The decompressed text of a single-member gzip file, or None when it is longer than
    ``limit``, corrupt, truncated or made of several members (the streaming reader then
    reads it, and reports any error)."""
    d = zlib.decompressobj(31)
    out: list[bytes] = []
    total = 0
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                piece = d.decompress(block, limit + 1 - total)
                total += len(piece)
                out.append(piece)
                if total > limit or d.unconsumed_tail or d.unused_data:
                    return None
    except (OSError, zlib.error):
        return None
    if not d.eof:
        return None
    return b"".join(out)


def _rss_kb() -> int:
    """Resident set size of this process now, in KiB (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


def _private_kb() -> int:
    """Memory private to this process (its own pages, copy-on-write copies included), KiB."""
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            text = f.read().decode()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("Private_"))


def _child(
    path: Path,
    chunk_bytes: int,
    span: tuple[int, int | None, bool],
    wfd: int,
    text: bytes | None = None,
) -> None:
    """Forked worker: collect the events of ``span`` and write them, pickled, to ``wfd``.

    Leaves with ``os._exit`` (never returns into the parent's stack); any failure is sent
    as ``{"error": ...}`` and the parent falls back to reading the file by itself.
    """
    code = 0
    try:
        start_kb = _rss_kb()
        reader = ChromeJsonReader(path, _DECODER, chunk_bytes, _EXPECTED, span, text)
        col = _Collector(path)
        for events in reader:
            col.add(events)
        out: dict[str, Any] = {
            "collector": col.export(),
            "top": reader.top,
            "text_bytes": reader.text_bytes,
            "repairs": reader.repairs,
        }
        del col
        out["memory"] = {
            "pid": os.getpid(),
            "rss_start_kb": start_kb,
            "rss_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "private_kb": _private_kb(),
        }
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:
        data = pickle.dumps({"error": str(exc)})
        code = 1
    try:
        with os.fdopen(wfd, "wb") as pipe:
            pipe.write(data)
    finally:
        os._exit(code)
