"""Text rendering of calibrations (``aaco calibrate``): measured peaks, repeats, stability."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from aaco.report.text import render_text
from aaco.session.calibration import Ceilings, quality_label

__all__ = ["busy_note", "render_calibration", "render_calibrations"]


def _g(v: float | None, scale: float) -> str:
    return "unknown" if v is None else f"{v / scale:,.1f}"


def _one(c: Ceilings, path: Path | None, note: str | None) -> list[RenderableType]:
    head = Text(f"{c.device} ({c.backend or '?'}), {c.source} {c.measured_utc or ''}".rstrip())
    if c.source == "calibrated":
        head.append(f"\nquality: {quality_label(c)}")
    if path is not None:
        head.append(f"\nstored: {path}", style="dim")
    if note:
        head.append(f"\n{note}", style="dim")
    t = Table(show_edge=False, pad_edge=False)
    for col in ("ceiling", "value"):
        t.add_column(col, justify="left" if col == "ceiling" else "right")
    for k, v in sorted(c.flops_per_s.items()):
        unit = "GOP/s" if k.startswith(("int", "uint")) else "GFLOP/s"
        t.add_row(f"{k} {unit}", _g(v, 1e9))
    if c.memory_levels:
        for lv in c.memory_levels:
            cap = f" ({lv.capacity_bytes / 1024:,.0f} KiB)" if lv.capacity_bytes else ""
            how = "" if lv.measured else " (nearer level's)"
            label = "memory GB/s (DRAM)" if lv.name == "DRAM" else f"{lv.name}{cap} GB/s{how}"
            t.add_row(label, _g(lv.bytes_per_s, 1e9))
    else:
        t.add_row("memory GB/s", _g(c.bytes_per_s, 1e9))
    parts: list[RenderableType] = [head, t]
    ms = c.details.get("measurements") or []
    if ms:
        m = Table(title="measurements", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("benchmark", "size", "value", "CV", "repeats", "stable", "busy"):
            m.add_column(col, justify="left" if col in ("benchmark", "size") else "right")
        for x in ms:
            scale = 1e9
            unit = {"FLOP/s": "GFLOP/s", "OP/s": "GOP/s"}.get(x["unit"], "GB/s")
            m.add_row(
                x["name"],
                escape(x["size"]),
                f"{x['value'] / scale:,.1f} {unit}",
                f"{100 * x['cv']:.1f}%",
                str(x["repeats"]),
                "yes" if x["stable"] else "no",
                _busy(x),
            )
        parts.append(m)
    busy = busy_note(c)
    if busy:
        parts.append(Text(busy, style="yellow"))
    return parts


def _busy(x: dict[str, object]) -> str:
    """``3 discarded, 12%`` (repetitions disturbed by other processes, their share of the
    CPU); ``-`` for measurements from before contention was judged per repetition."""
    share = x.get("other_share")
    if not isinstance(share, int | float):
        return "-"
    out = f"{100 * share:.0f}%"
    if x.get("discarded"):
        out = f"{x['discarded']} discarded, {out}"
    return out + (" DISTURBED" if x.get("disturbed") else "")


def busy_note(c: Ceilings, threshold: float = 0.10) -> str | None:
    """A warning when other processes used at least ``threshold`` of the machine's CPU time
    while the calibration measured (``details.other_cpu_share``): its figures may be low."""
    share = c.details.get("other_cpu_share")
    if share is None or share < threshold:
        return None
    return (
        f"other processes used {100 * share:.0f}% of the CPU time while measuring, so these "
        "figures may be low; run `aaco calibrate` on a quiet machine"
    )


def render_calibration(
    c: Ceilings, path: Path | None = None, note: str | None = None, width: int = 100
) -> str:
    return render_text(Group(*_one(c, path, note)), width)


def render_calibrations(
    items: list[tuple[Path, Ceilings]], published: list[Ceilings], width: int = 100
) -> str:
    parts: list[RenderableType] = []
    if not items:
        parts.append(Text("no stored calibration (run `aaco calibrate`)"))
    for path, c in items:
        parts += [*_one(c, path, None), Text("")]
    for p in published:
        parts += [*_one(p, None, f"published peaks for {p.details.get('matched')}"), Text("")]
    return render_text(Group(*parts), width)
