"""The ATT instruction analysis in words: plain lines for the terminal report.

:func:`format_att` takes an :class:`~aaco.analysis.att.AttSummary` or its
:func:`~aaco.analysis.att.summary_to_dict` form (as a report's JSON holds it) and returns
lines; only the CLI prints. A figure that is unknown reads "unknown", never 0.

Example::

    lines = format_att(summarize_att(session.table("att_instructions")))
"""

from __future__ import annotations

from typing import Any

from aaco.analysis.att import AttSummary, summary_to_dict
from aaco.report.machine import fnum, share

__all__ = ["CLASS_LABELS", "att_key", "format_att"]

#: how each instruction class reads in a report
CLASS_LABELS = {
    "matrix": "matrix (MFMA/WMMA)",
    "valu": "VALU",
    "salu": "SALU",
    "smem": "SMEM",
    "vmem_load": "VMEM load",
    "vmem_store": "VMEM store",
    "vmem_atomic": "VMEM atomic",
    "lds": "LDS",
    "branch": "branch/control",
    "sync": "wait/sync",
    "export": "export",
    "other": "other",
}

#: instructions listed under "top instructions by latency"
TOP = 5


def _int(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else "unknown"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dispatch_line(d: dict[str, Any]) -> str:
    kernels = ", ".join(d.get("kernels") or []) or "kernel unknown"
    agent, dispatch = d.get("agent_id"), d.get("dispatch_id")
    where = (
        f"agent {agent}, dispatch {dispatch}"
        if agent is not None or dispatch is not None
        else "dispatch unknown"
    )
    return f"  {where}: {_clip(kernels, 70)}"


def format_att(summary: AttSummary | dict[str, Any]) -> list[str]:
    """The lines of the report's ATT section."""
    s = summary_to_dict(summary) if isinstance(summary, AttSummary) else summary
    lines = ["ATT instruction analysis (rocprofv3 --att; totals over the traced waves only)"]
    for d in s.get("dispatches") or []:
        lines.append(_dispatch_line(d))
    if not s.get("instructions"):
        lines.append("  no instructions: no wave ran on the traced CU (code.json was empty)")
        return lines
    lines.append(
        f"  executed {_int(s.get('hits'))} instructions at {_int(s.get('instructions'))} "
        f"addresses ({_int(s.get('executed_instructions'))} executed), "
        f"{_int(s.get('latency_cycles'))} latency cycles"
    )
    lines.append(
        f"  stall {share(s.get('stall_fraction'))} of latency, idle "
        f"{share(s.get('idle_fraction'))} of wave time, IPC "
        f"{fnum(s.get('ipc'), '.3f')} per wave-cycle"
    )
    lines.append(
        f"  matrix cores: {share(s.get('matrix_hit_share'))} of executed instructions, "
        f"{share(s.get('matrix_cycle_share'))} of latency cycles"
    )
    classes = s.get("classes") or []
    if classes:
        lines.append(
            f"  {'class':<20}{'executed':>12}{'share':>8}{'latency cyc':>14}{'share':>8}"
            f"{'stall':>8}"
        )
        for c in classes:
            name = CLASS_LABELS.get(c.get("instruction_class"), str(c.get("instruction_class")))
            lines.append(
                f"  {name:<20}{_int(c.get('hits')):>12}{share(c.get('hit_share')):>8}"
                f"{_int(c.get('latency_cycles')):>14}{share(c.get('latency_share')):>8}"
                f"{share(c.get('stall_fraction')):>8}"
            )
    hot = (s.get("hotspots") or [])[:TOP]
    if hot:
        lines.append(f"  top {len(hot)} instructions by latency cycles (share, stall, source):")
        for h in hot:
            where = h.get("source_location") or "no source line"
            lines.append(
                f"  {h.get('rank', '?'):>3}. {share(h.get('latency_share')):>6}  "
                f"{_clip(str(h.get('instruction')), 44):<44}  "
                f"stall {share(h.get('stall_fraction'))}  {_clip(where, 48)}"
            )
    unknown = s.get("rows_with_unknown_counts")
    if isinstance(unknown, int) and unknown > 0:
        lines.append(
            f"  note: {unknown} instruction{'s' if unknown != 1 else ''} lack a count "
            "(left out of the figures that need it; see profiler/import.json)"
        )
    return lines


def att_key(session: Any) -> dict[str, Any]:
    """``{"att": ...}``: the ATT instruction summary of a bundle that has
    ``profiler/att_instructions.parquet``; empty otherwise."""
    from aaco.analysis.att import summarize_att

    table = session.table("att_instructions")
    if table is None or not table.num_rows:
        return {}
    return {"att": summary_to_dict(summarize_att(table))}
