"""The generation part of the report model: ``metrics/generation.json`` of ``aaco llm run`` (an
in-process ONNX decoder loop), its prefill and decode phases side by side.

:func:`generation_section` is the report's ``generation`` object (docs/report-json.md): the
file's model and per-phase totals, every operator type of each phase with its share of the
phase's operator time and its ms per run, the top nodes, and whether the operator split
exists (``split_note`` says why not: profiling off, a failed profiled pass). The other
functions turn that object into the text every renderer shows (:class:`TextTable`, lines);
figures that are unknown read ``unknown``, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aaco.report.serving import (
    fmt_count,
    fmt_short,
    generation_load_description,
    is_generate_load,
    is_serving,
)
from aaco.session.bundle import Session
from aaco.session.paths import GENERATION_FILE

__all__ = [
    "CHART_TYPES",
    "GENERATE_FRAMEWORK",
    "INFLATION_NOTE",
    "PHASES",
    "TOP_NODES",
    "TOP_TYPES",
    "TextTable",
    "generation_header",
    "generation_section",
    "inflation_note",
    "is_generation",
    "op_type_table",
    "phase_share_bars",
    "phase_table",
    "split_line",
]

#: ``session.json`` ``run.framework`` of ``aaco llm run``
GENERATE_FRAMEWORK = "onnxruntime-generate"
#: the phases of a generation in the order they run (as :mod:`aaco.generate.profile` names
#: them); a file naming others shows them after these
PHASES = ("prefill", "decode")
#: operator types per phase in the side-by-side table and the share chart
TOP_TYPES = 8
#: operator types named in the share chart over all phases (one colour each; the rest "other")
CHART_TYPES = 9
#: nodes per phase in the JSON report's ``top_nodes``
TOP_NODES = 15
#: what each phase's wall time per run stands for, in the request figures' terms
_PHASE_ROLE = {"prefill": "per generation (= TTFT)", "decode": "per step (≈ TPOT)"}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def is_generation(session: Session) -> bool:
    """Whether the bundle is an in-process generation (``aaco llm run``), with or without its
    ``metrics/generation.json``."""
    if not is_serving(session):
        return False
    meta = session.meta
    return (
        _dict(meta.get("run")).get("framework") == GENERATE_FRAMEWORK
        or is_generate_load(_dict(meta.get("serving")).get("load"))
        or session.json_file(GENERATION_FILE) is not None
    )


def _phases(found: Sequence[str]) -> list[str]:
    return [p for p in PHASES if p in found] + sorted(p for p in found if p not in PHASES)


def _split_rows(gen: dict[str, Any]) -> list[dict[str, Any]]:
    rows = gen.get("op_split")
    if not isinstance(rows, list):
        return []
    return [
        r
        for r in rows
        if isinstance(r, dict)
        and isinstance(r.get("phase"), str)
        and _num(r.get("total_us")) is not None
    ]


def _per_run(total_us: float, runs: int | None) -> float | None:
    return total_us / 1000.0 / runs if runs else None


def _type_rows(
    rows: Sequence[dict[str, Any]], runs: int | None, total_us: float
) -> list[dict[str, Any]]:
    """Operator types of one phase (``op_split`` rows or the file's ``top_ops``), biggest
    first: ``op_type, calls, nodes, total_us, share, ms_per_run``."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = str(r.get("op_type") or "unknown")
        g = groups.setdefault(
            key, {"op_type": key, "calls": 0, "nodes": 0, "total_us": 0.0, "share": None}
        )
        g["calls"] += _int(r.get("calls")) or 0
        # an op_split row is one node; a top_ops row says how many it sums
        g["nodes"] += (_int(r.get("nodes")) or 0) if "nodes" in r else 1
        g["total_us"] += _num(r.get("total_us")) or 0.0
    for g in groups.values():
        g["share"] = g["total_us"] / total_us if total_us > 0 else None
        g["ms_per_run"] = _per_run(g["total_us"], runs)
    return sorted(groups.values(), key=lambda g: (-g["total_us"], g["op_type"]))


def _phase_total(nodes: Sequence[dict[str, Any]], top: Sequence[dict[str, Any]]) -> float:
    """A phase's operator time (us): its nodes' sum; from the top types alone (they are
    not all of it), what a type's time over its share says."""
    if nodes:
        return sum(_num(r.get("total_us")) or 0.0 for r in nodes)
    for r in top:
        us, share = _num(r.get("total_us")), _num(r.get("share"))
        if us is not None and share:
            return us / share
    return 0.0


def _split_note(
    gen: dict[str, Any] | None, requested: Any, errors: Sequence[str], split: bool
) -> str | None:
    if gen is None:
        return f"no {GENERATION_FILE} in this bundle (the run ended before it was written)"
    if split:
        return None
    if requested is False:
        return "not profiled (the run was asked not to: --no-profile)"
    if errors:
        return "no operator split: " + "; ".join(errors)
    return "no operator split: the profiled generation recorded no operator"


def generation_section(session: Session) -> dict[str, Any] | None:
    """The report's ``generation`` object (docs/report-json.md); None for a bundle that is
    no in-process generation."""
    if not is_generation(session):
        return None
    raw = session.json_file(GENERATION_FILE)
    gen = raw if isinstance(raw, dict) else None
    g = gen or {}
    totals = _dict(g.get("phase_totals"))
    errors = [str(e) for e in g.get("errors") or []] if isinstance(g.get("errors"), list) else []
    split_rows = _split_rows(g)
    top = _dict(g.get("top_ops"))
    names = _phases(
        list(dict.fromkeys([*totals, *(r["phase"] for r in split_rows), *top]))
        or (list(PHASES) if gen is not None else [])
    )
    op_types: dict[str, list[dict[str, Any]]] = {}
    top_nodes: dict[str, list[dict[str, Any]]] = {}
    for phase in names:
        runs = _int(_dict(totals.get(phase)).get("runs_per_generation"))
        nodes = [r for r in split_rows if r["phase"] == phase]
        # the file's top_ops (five types) stand in when it has no op_split (hand-made files)
        source = nodes or [r for r in top.get(phase) or [] if isinstance(r, dict)]
        op_types[phase] = _type_rows(source, runs, _phase_total(nodes, source))
        top_nodes[phase] = [
            {
                "op_type": r.get("op_type"),
                "node": r.get("node"),
                "calls": r.get("calls"),
                "total_us": r["total_us"],
                "share": r.get("share"),
                "ms_per_run": _per_run(float(r["total_us"]), runs),
            }
            for r in sorted(nodes, key=lambda r: -float(r["total_us"]))[:TOP_NODES]
        ]
    split = any(op_types.values())
    requested = _dict(session.meta.get("run")).get("profile")
    return {
        "file_present": gen is not None,
        "model": _dict(g.get("model")),
        "load": _dict(_dict(session.meta.get("serving")).get("load")),
        "profile_requested": requested if isinstance(requested, bool) else None,
        "phases": names,
        "phase_totals": {p: _dict(totals.get(p)) for p in names},
        "op_types": op_types,
        "top_nodes": top_nodes,
        "split_available": split,
        "split_note": _split_note(gen, requested, errors, split),
        "errors": errors,
    }


# -- what every renderer shows -------------------------------------------------------------


@dataclass(frozen=True)
class TextTable:
    """A table of text cells; ``headers`` may hold line breaks, ``numeric`` says which
    columns hold figures (right-aligned)."""

    key: str
    title: str
    headers: list[str]
    numeric: list[bool]
    rows: list[list[str]]


def generation_header(
    gen: dict[str, Any], provider: Any = None, name: Any = None
) -> list[tuple[str, str]]:
    """The report header's rows for an in-process generation: model (and its shape), runtime
    (where it ran) and load; ``provider`` and ``name`` stand in for what the file lacks."""
    model = gen["model"]
    shape = [
        f"{fmt_count(model.get(k))} {k}" if k != "vocab" else f"vocab {fmt_count(model[k])}"
        for k in ("layers", "heads", "vocab")
        if _num(model.get(k)) is not None
    ]
    kind = [str(model["kind"])] if model.get("kind") else []
    detail = ", ".join(kind + shape)
    name = str(model.get("name") or name or "unknown")
    where = model.get("provider") or provider or "unknown provider"
    return [
        ("model", f"{name} ({detail})" if detail else name),
        ("runtime", f"in-process generation (aaco llm run), onnxruntime, {where}"),
        ("load", generation_load_description(gen["load"])),
    ]


def _request_p50(points: Sequence[dict[str, Any]], key: str) -> float | None:
    """A single point's request figure (p50), the request-level twin of a phase's time."""
    if len(points) != 1:
        return None
    d = points[0].get(key)
    return _num(d.get("p50")) if isinstance(d, dict) else None


#: a profiled pass this much slower than the measured one gets a note: its operator times
#: are inflated by the profiler's cost per node, their shares still hold
INFLATION_NOTE = 1.10


def phase_table(gen: dict[str, Any], points: Sequence[dict[str, Any]]) -> TextTable:
    """The phases side by side: wall time per run (the prefill = TTFT, a decode step ≈ TPOT),
    the requests' own p50 of those figures, and the profiled pass's wall and operator time
    and the operators' share of that wall time."""
    names = gen["phases"]
    totals = gen["phase_totals"]
    twins = {"prefill": (("TTFT", "ttft_ms"),), "decode": (("TPOT", "tpot_ms"), ("ITL", "itl_ms"))}

    def cells(fn: Callable[[str, dict[str, Any]], str]) -> list[str]:
        return [fn(p, totals.get(p) or {}) for p in names]

    def twin(phase: str, _: dict[str, Any]) -> str:
        return " / ".join(
            f"{name} {fmt_short(_request_p50(points, key))}" for name, key in twins.get(phase, ())
        )

    def share(_: str, t: dict[str, Any]) -> str:
        v = _num(t.get("ops_share_of_wall"))
        return "unknown" if v is None else f"{fmt_short(v, 100)} %"

    rows = [
        ["runs per generation", *cells(lambda _, t: fmt_count(t.get("runs_per_generation")))],
        ["wall ms per run (median)", *cells(lambda _, t: fmt_short(t.get("wall_ms_per_run")))],
        ["requests p50 ms", *cells(twin)],
        [
            "profiled: wall ms per run",
            *cells(lambda _, t: fmt_short(t.get("profiled_wall_ms_per_run"))),
        ],
        ["profiled: operator ms", *cells(lambda _, t: fmt_short(t.get("ops_ms_per_run")))],
        ["profiled: operator share", *cells(share)],
    ]
    headers = ["", *(f"{p}\n{_PHASE_ROLE.get(p, 'per run')}" for p in names)]
    numeric = [False, *(True for _ in names)]
    return TextTable("phases", "Prefill vs decode, per run", headers, numeric, rows)


def inflation_note(gen: dict[str, Any]) -> str | None:
    """A line when the profiled pass ran notably slower than the measured runs (ORT's
    profiler costs time per node: decode steps of many small nodes suffer most)."""
    found = []
    for p in gen["phases"]:
        t = gen["phase_totals"].get(p) or {}
        wall, prof = _num(t.get("wall_ms_per_run")), _num(t.get("profiled_wall_ms_per_run"))
        if wall and prof and prof / wall > INFLATION_NOTE:
            found.append(f"{prof / wall:.1f}x ({p})")
    if not found:
        return None
    return (
        f"the profiled pass ran {' and '.join(found)} slower than the measured runs (the "
        "profiler's cost per node): read operator times as shares, not absolute ms"
    )


def op_type_table(gen: dict[str, Any], n: int = TOP_TYPES) -> TextTable | None:
    """The top operator types of each phase side by side (op type, share of the phase's
    operator time, ms per run); None without an operator split."""
    if not gen["split_available"]:
        return None
    names = gen["phases"]
    per = {p: gen["op_types"].get(p) or [] for p in names}
    depth = min(n, max(len(v) for v in per.values()))
    headers, numeric = ["#"], [True]
    for p in names:
        unit = "ms/step" if p == "decode" else "ms/run"
        headers += [f"{p}\nop type", "share\n%", unit]
        numeric += [False, True, True]
    rows = []
    for i in range(depth):
        row = [str(i + 1)]
        for p in names:
            if i < len(per[p]):
                t = per[p][i]
                row += [str(t["op_type"]), fmt_short(t["share"], 100), fmt_short(t["ms_per_run"])]
            elif i == 0:
                row += ["none profiled", "", ""]
            else:
                row += ["", "", ""]
        rows.append(row)
    title = "Top operator types per phase (share of the phase's operator time, ms per run)"
    return TextTable("phase-ops", title, headers, numeric, rows)


def split_line(gen: dict[str, Any]) -> str:
    """Where the operator split comes from, or why there is none."""
    note = gen.get("split_note")
    if note:
        return str(note)
    decode = int(_num((gen["phase_totals"].get("decode") or {}).get("runs_per_generation")) or 0)
    steps = f", {decode} decode steps" if decode else ""
    return f"operator times from one profiled generation (1 prefill{steps})"


def phase_share_bars(
    gen: dict[str, Any], n: int = CHART_TYPES
) -> list[tuple[str, list[tuple[str, float, str]]]]:
    """Each phase's operator-time shares for a stacked bar: (phase, [(op type, share 0-1,
    hover)]), biggest first, ``other`` last. At most ``n`` op types are named over all
    phases, taken rank by rank from each phase in turn (each keeps one colour in every
    bar); the rest is ``other``. Phases without an operator split are left out."""
    names = [p for p in gen["phases"] if gen["op_types"].get(p)]
    keys: list[str] = []
    for rank in range(max((len(gen["op_types"][p]) for p in names), default=0)):
        for p in names:
            types = gen["op_types"][p]
            if rank < len(types) and types[rank]["op_type"] not in keys and len(keys) < n:
                keys.append(types[rank]["op_type"])
    bars = []
    for p in names:
        segs: list[tuple[str, float, str]] = []
        for t in gen["op_types"][p]:
            share = _num(t["share"])
            if t["op_type"] not in keys or share is None or share <= 0:
                continue
            hover = (
                f"{p}: {t['op_type']} {fmt_short(share, 100)} % of operator time, "
                f"{fmt_short(t['ms_per_run'])} ms per run, {fmt_count(t['calls'])} calls"
            )
            segs.append((t["op_type"], share, hover))
        rest = 1.0 - sum(s for _, s, _ in segs)
        if segs and rest > 1e-6:
            segs.append(("other", rest, f"{p}: the other op types, {fmt_short(rest, 100)} %"))
        if segs:
            bars.append((p, segs))
    return bars
