"""Instruction analysis of an advanced thread trace: classify each instruction, then measure.

Input is the ``att_instructions`` table (:data:`aaco.session.schema.ATT_INSTRUCTIONS`), one
row per instruction address with its totals over the traced waves. :func:`classify_mnemonic`
sorts a CDNA/RDNA opcode into one of :data:`CLASSES`; :func:`summarize_att` gives the
instruction mix, the cycles per class, the stall and idle fractions, the instructions per
wave-cycle, the matrix-core share and the hotspots. Every figure is defined in
docs/metrics.md ("ATT instruction analysis"). Pure functions: tables in, dataclasses out.

A count the trace does not give (null) is unknown, never zero: each figure is computed over
the rows that have every count it needs, and :attr:`AttSummary.rows_with_unknown_counts`
says how many rows lacked one.

Example::

    summary = summarize_att(session.table("att_instructions"))
    summary.stall_fraction, summary.classes[0].instruction_class
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = [
    "CLASSES",
    "AttSummary",
    "ClassStats",
    "DispatchStats",
    "Hotspot",
    "classify_instructions",
    "classify_mnemonic",
    "summarize_att",
    "summary_to_dict",
]

#: instruction classes, in the order reports list them
CLASSES: tuple[str, ...] = (
    "matrix",  # matrix cores: MFMA / SMFMAC (CDNA), WMMA / SWMMAC (RDNA)
    "valu",  # every other v_* instruction
    "salu",  # scalar ALU: s_* arithmetic, compares, moves, exec-mask operations
    "smem",  # scalar memory: s_load*, s_buffer_load*, s_store*, ...
    "vmem_load",  # vector memory reads: buffer_*, global_*, flat_*, scratch_*, image_*
    "vmem_store",  # vector memory writes
    "vmem_atomic",  # vector memory atomics
    "lds",  # local data share: ds_*
    "branch",  # control flow: s_branch, s_cbranch*, s_endpgm, s_setpc, s_swappc, s_call ...
    "sync",  # waits and barriers: s_waitcnt*, s_wait_*, s_barrier*, s_sleep, s_nop, fences
    "export",  # exp / export
    "other",  # anything else: messages, trace markers, priority hints, unknown opcodes
)

_MATRIX = ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")
_VMEM = ("buffer_", "tbuffer_", "global_", "flat_", "scratch_", "image_")
# cache write-back / invalidate: the memory fences of acquire and release, not data movement
_VMEM_FENCES = ("buffer_wbinvl1", "buffer_inv", "buffer_gl0_inv", "buffer_gl1_inv",
                "buffer_wbl2", "global_inv", "global_wb")  # fmt: skip
_SMEM = ("s_load_", "s_buffer_load_", "s_store_", "s_buffer_store_", "s_scratch_",
         "s_atomic_", "s_buffer_atomic_", "s_dcache_", "s_atc_probe", "s_prefetch_",
         "s_memtime", "s_memrealtime")  # fmt: skip
_LDS = ("ds_", "lds_")
_EXPORT = ("exp", "export")
_BRANCH = ("s_branch", "s_cbranch", "s_endpgm", "s_setpc", "s_swappc", "s_call", "s_rfe",
           "s_trap")  # fmt: skip
_SYNC = ("s_waitcnt", "s_wait_", "s_barrier", "s_sleep", "s_nop", "s_delay_alu",
         "s_icache_inv")  # fmt: skip
# scalar instructions that neither compute nor move data nor wait
_SCALAR_OTHER = ("s_sendmsg", "s_ttracedata", "s_setprio", "s_sethalt", "s_code_end",
                 "s_clause", "s_inst_prefetch", "s_set_inst_prefetch_distance", "s_setkill",
                 "s_incperflevel", "s_decperflevel")  # fmt: skip


def classify_mnemonic(mnemonic: str | None) -> str:
    """The class (one of :data:`CLASSES`) of an AMD GPU opcode, by its name.

    >>> classify_mnemonic("v_mfma_f32_32x32x8f16"), classify_mnemonic("buffer_load_dwordx4")
    ('matrix', 'vmem_load')
    >>> classify_mnemonic("ds_read_b128"), classify_mnemonic("s_waitcnt")
    ('lds', 'sync')
    """
    m = (mnemonic or "").strip().lower()
    if not m:
        return "other"
    if m.startswith(_MATRIX):
        return "matrix"
    if m.startswith(_VMEM_FENCES):
        return "sync"
    if m.startswith(_VMEM):
        if "_atomic" in m:
            return "vmem_atomic"
        if "_store" in m:
            return "vmem_store"
        return "vmem_load"  # loads, samples, gathers and LDS-direct loads read memory
    if m.startswith(_LDS):
        return "lds"
    if m in _EXPORT:
        return "export"
    if m.startswith("s_"):
        if m.startswith(_SMEM):
            return "smem"
        if m.startswith(_BRANCH):
            return "branch"
        if m.startswith(_SYNC):
            return "sync"
        if m.startswith(_SCALAR_OTHER):
            return "other"
        return "salu"
    if m.startswith("v_"):
        return "valu"
    return "other"


def classify_instructions(table: pa.Table) -> pa.Table:
    """Fill ``mnemonic`` and ``instruction_class`` of an ``att_instructions`` table.

    Values already present are kept; nulls are filled from the instruction text. Each
    distinct mnemonic is classified once.
    """
    if table.num_rows == 0:
        return table
    text = table.column("instruction").to_pylist()
    mnemonics = [
        m if m is not None else (t.split(None, 1)[0].lower() if t and t.split() else None)
        for m, t in zip(table.column("mnemonic").to_pylist(), text, strict=True)
    ]
    known: dict[str | None, str] = {}
    classes = [
        c if c is not None else known.setdefault(m, classify_mnemonic(m))
        for c, m in zip(table.column("instruction_class").to_pylist(), mnemonics, strict=True)
    ]
    out = table.set_column(
        table.column_names.index("mnemonic"), "mnemonic", pa.array(mnemonics, pa.string())
    )
    i = out.column_names.index("instruction_class")
    return out.set_column(i, "instruction_class", pa.array(classes, pa.string()))


@dataclass(frozen=True)
class ClassStats:
    """The totals of one instruction class."""

    instruction_class: str
    #: distinct instruction addresses of the class (rows), executed or not
    instructions: int
    #: executed instructions: the sum of ``hits``
    hits: int
    #: hits / the hits of every class; None when nothing was executed
    hit_share: float | None
    latency_cycles: int
    #: latency_cycles / the latency cycles of every class
    latency_share: float | None
    stall_cycles: int
    idle_cycles: int
    #: stall_cycles / latency_cycles within the class
    stall_fraction: float | None


@dataclass(frozen=True)
class Hotspot:
    """One of the instructions with the most latency cycles."""

    rank: int
    agent_id: int | None
    dispatch_id: int | None
    kernel_name: str | None
    address: int | None
    instruction: str
    instruction_class: str
    source_location: str | None
    hits: int | None
    latency_cycles: int
    stall_cycles: int | None
    idle_cycles: int | None
    #: latency_cycles / the latency cycles of every instruction
    latency_share: float | None
    #: stall_cycles / latency_cycles
    stall_fraction: float | None
    #: latency_cycles / hits: the mean latency of one execution
    cycles_per_hit: float | None


@dataclass(frozen=True)
class DispatchStats:
    """The headline figures of one traced dispatch (``agent_id``, ``dispatch_id``)."""

    agent_id: int | None
    dispatch_id: int | None
    kernels: tuple[str, ...]
    instructions: int
    hits: int
    latency_cycles: int
    stall_fraction: float | None
    idle_fraction: float | None
    ipc: float | None
    matrix_hit_share: float | None


@dataclass(frozen=True)
class AttSummary:
    """The instruction analysis of an ``att_instructions`` table (docs/metrics.md)."""

    #: rows: distinct instruction addresses, executed or not
    instructions: int
    #: rows with hits > 0
    executed_instructions: int
    #: executed instructions: the sum of hits
    hits: int
    latency_cycles: int
    stall_cycles: int
    idle_cycles: int
    #: stall cycles / latency cycles
    stall_fraction: float | None
    #: idle cycles / (latency + idle cycles)
    idle_fraction: float | None
    #: hits / (latency + idle cycles): instructions per wave-cycle
    ipc: float | None
    #: matrix-class hits / all hits
    matrix_hit_share: float | None
    #: matrix-class latency cycles / all latency cycles
    matrix_cycle_share: float | None
    #: per class, in :data:`CLASSES` order, the classes present only
    classes: tuple[ClassStats, ...]
    hotspots: tuple[Hotspot, ...]
    dispatches: tuple[DispatchStats, ...]
    #: rows lacking hits, latency, stall or idle (left out of the figures that need it)
    rows_with_unknown_counts: int


def _ratio(num: int, den: int) -> float | None:
    return num / den if den > 0 else None


class _Totals:
    """Sums over rows, each figure over the rows that know every count it needs."""

    def __init__(self) -> None:
        self.rows = 0
        self.executed = 0
        self.hits = 0
        self.latency = 0
        self.stall = 0
        self.idle = 0
        self.stall_num = self.stall_den = 0  # rows with stall and latency
        self.idle_num = self.idle_den = 0  # rows with idle and latency
        self.ipc_num = self.ipc_den = 0  # rows with hits, latency and idle

    def add(self, hits: int | None, lat: int | None, stall: int | None, idle: int | None) -> None:
        self.rows += 1
        if hits is not None:
            self.hits += hits
            self.executed += hits > 0
        if lat is not None:
            self.latency += lat
        if stall is not None:
            self.stall += stall
        if idle is not None:
            self.idle += idle
        if lat is not None and stall is not None:
            self.stall_num += stall
            self.stall_den += lat
        if lat is not None and idle is not None:
            self.idle_num += idle
            self.idle_den += lat + idle
            if hits is not None:
                self.ipc_num += hits
                self.ipc_den += lat + idle

    @property
    def stall_fraction(self) -> float | None:
        return _ratio(self.stall_num, self.stall_den)

    @property
    def idle_fraction(self) -> float | None:
        return _ratio(self.idle_num, self.idle_den)

    @property
    def ipc(self) -> float | None:
        return _ratio(self.ipc_num, self.ipc_den)


def _sort_key(key: tuple[int | None, int | None]) -> tuple[bool, int, bool, int]:
    a, d = key
    return (a is None, a or 0, d is None, d or 0)


def summarize_att(table: pa.Table, top_n: int = 10) -> AttSummary:
    """The instruction mix, cycles, stall and idle fractions, IPC, matrix-core share and the
    ``top_n`` hotspots of an ``att_instructions`` table (every dispatch in it together, and
    each dispatch on its own in :attr:`AttSummary.dispatches`)."""
    t = classify_instructions(table)
    cols = {n: t.column(n).to_pylist() for n in t.column_names}
    total = _Totals()
    by_class: dict[str, _Totals] = {}
    by_dispatch: dict[tuple[int | None, int | None], tuple[_Totals, _Totals, set[str]]] = {}
    unknown = 0
    for i in range(t.num_rows):
        hits, lat = cols["hits"][i], cols["latency_cycles"][i]
        stall, idle = cols["stall_cycles"][i], cols["idle_cycles"][i]
        unknown += None in (hits, lat, stall, idle)
        klass = cols["instruction_class"][i]
        total.add(hits, lat, stall, idle)
        by_class.setdefault(klass, _Totals()).add(hits, lat, stall, idle)
        key = (cols["agent_id"][i], cols["dispatch_id"][i])
        d_all, d_matrix, kernels = by_dispatch.setdefault(key, (_Totals(), _Totals(), set()))
        d_all.add(hits, lat, stall, idle)
        if klass == "matrix":
            d_matrix.add(hits, lat, stall, idle)
        if cols["kernel_name"][i]:
            kernels.add(cols["kernel_name"][i])
    matrix = by_class.get("matrix", _Totals())
    classes = tuple(
        ClassStats(
            instruction_class=k,
            instructions=c.rows,
            hits=c.hits,
            hit_share=_ratio(c.hits, total.hits),
            latency_cycles=c.latency,
            latency_share=_ratio(c.latency, total.latency),
            stall_cycles=c.stall,
            idle_cycles=c.idle,
            stall_fraction=c.stall_fraction,
        )
        for k in CLASSES
        if (c := by_class.get(k)) is not None
    )
    dispatches = tuple(
        DispatchStats(
            agent_id=key[0],
            dispatch_id=key[1],
            kernels=tuple(sorted(kernels)),
            instructions=d.rows,
            hits=d.hits,
            latency_cycles=d.latency,
            stall_fraction=d.stall_fraction,
            idle_fraction=d.idle_fraction,
            ipc=d.ipc,
            matrix_hit_share=_ratio(m.hits, d.hits),
        )
        for key, (d, m, kernels) in sorted(by_dispatch.items(), key=lambda kv: _sort_key(kv[0]))
    )
    return AttSummary(
        instructions=total.rows,
        executed_instructions=total.executed,
        hits=total.hits,
        latency_cycles=total.latency,
        stall_cycles=total.stall,
        idle_cycles=total.idle,
        stall_fraction=total.stall_fraction,
        idle_fraction=total.idle_fraction,
        ipc=total.ipc,
        matrix_hit_share=_ratio(matrix.hits, total.hits),
        matrix_cycle_share=_ratio(matrix.latency, total.latency),
        classes=classes,
        hotspots=_hotspots(cols, total.latency, top_n),
        dispatches=dispatches,
        rows_with_unknown_counts=unknown,
    )


def _hotspots(cols: dict[str, list[Any]], total_latency: int, top_n: int) -> tuple[Hotspot, ...]:
    """The ``top_n`` rows by latency cycles (ties: by dispatch, then address)."""
    rows = [i for i, lat in enumerate(cols["latency_cycles"]) if lat]
    rows.sort(
        key=lambda i: (
            -cols["latency_cycles"][i],
            *_sort_key((cols["agent_id"][i], cols["dispatch_id"][i])),
            cols["address"][i] is None,
            cols["address"][i] or 0,
        )
    )
    out = []
    for rank, i in enumerate(rows[: max(top_n, 0)], 1):
        lat, hits, stall = cols["latency_cycles"][i], cols["hits"][i], cols["stall_cycles"][i]
        out.append(
            Hotspot(
                rank=rank,
                agent_id=cols["agent_id"][i],
                dispatch_id=cols["dispatch_id"][i],
                kernel_name=cols["kernel_name"][i],
                address=cols["address"][i],
                instruction=cols["instruction"][i],
                instruction_class=cols["instruction_class"][i],
                source_location=cols["source_location"][i],
                hits=hits,
                latency_cycles=lat,
                stall_cycles=stall,
                idle_cycles=cols["idle_cycles"][i],
                latency_share=_ratio(lat, total_latency),
                stall_fraction=None if stall is None else _ratio(stall, lat),
                cycles_per_hit=None if hits is None else _ratio(lat, hits),
            )
        )
    return tuple(out)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def summary_to_dict(summary: AttSummary) -> dict[str, Any]:
    """The summary as JSON-ready dicts and lists (no NaN: unknown figures are None)."""
    out: dict[str, Any] = _plain(summary)
    return out
