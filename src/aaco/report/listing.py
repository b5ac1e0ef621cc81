"""Tables for the listing commands: ``aaco ls``, ``aaco models list`` and ``aaco info``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from aaco.report.text import fmt_bytes, fmt_ms, render_text


def _s(v: Any) -> str:
    return "unknown" if v is None else escape(str(v))


def _latency_cells(row: dict[str, Any]) -> tuple[str, str]:
    """The p50 and p99 cells: a model run's latency; a serving benchmark's TTFT (its rows
    carry ``ttft_p50_ms`` / ``ttft_p99_ms``; an older catalog row, neither: unknown)."""
    if row.get("kind") == "serving":
        p50, p99 = row.get("ttft_p50_ms"), row.get("ttft_p99_ms")
        return (
            "unknown" if p50 is None else f"{fmt_ms(p50)} TTFT",
            "unknown" if p99 is None else f"{fmt_ms(p99)} TTFT",
        )
    return fmt_ms(row.get("p50_ms")), fmt_ms(row.get("p99_ms"))


def render_sessions_table(
    rows: Sequence[dict[str, Any]], width: int = 110, color: bool = False
) -> str:
    t = Table(show_edge=False, pad_edge=False)
    t.add_column("time (UTC)", no_wrap=True)
    t.add_column("session", no_wrap=True, min_width=22)
    for col, justify in (
        ("model", "left"),
        ("backend", "left"),
        ("batch", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("status", "left"),
        ("tag", "left"),
    ):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        status = r.get("status", "unknown")
        style = {"completed": "green", "failed": "red", "timeout": "red"}.get(status, "yellow")
        created = (r.get("created_utc") or "")[:16].replace("T", " ")
        t.add_row(
            created or "unknown",
            _s(r.get("id")),
            _s(r.get("model")),
            _s(r.get("backend")),
            _s(r.get("batch")),
            *_latency_cells(r),
            f"[{style}]{escape(status)}[/{style}]",
            escape(r.get("tag") or ""),
        )
    return render_text(t, width, color)


def _inputs_summary(shapes: dict[str, list[int]], keep: int = 3) -> str:
    parts = [f"{k}={'x'.join(map(str, v))}" for k, v in shapes.items()]
    if len(parts) > keep:
        parts = [*parts[: keep - 1], f"... {len(parts) - keep + 1} more"]
    return ", ".join(parts)


def render_models_table(
    rows: Sequence[dict[str, Any]], width: int = 110, color: bool = False
) -> str:
    t = Table(show_edge=False, pad_edge=False)
    for col, justify in (
        ("model", "left"),
        ("source", "left"),
        ("params", "right"),
        ("size", "right"),
        ("inputs", "left"),
        ("expected bottleneck", "left"),
        ("description", "left"),
    ):
        # a class name is never cut: the description column wraps instead
        no_wrap = col == "expected bottleneck"
        t.add_column(col, justify=justify, no_wrap=no_wrap)  # type: ignore[arg-type]
    for r in rows:
        params = r.get("parameter_count")
        t.add_row(
            _s(r["name"]),
            _s(r.get("source")),
            "unknown"
            if params is None
            else f"{params / 1e6:.2f} M"
            if params >= 1e5
            else f"{params:,}",
            fmt_bytes(r.get("parameter_bytes")),
            _s(_inputs_summary(r.get("input_shapes") or {})),
            _s(r.get("expected_bottleneck") or "-"),
            _s(r.get("description") or ""),
        )
    return render_text(t, width, color)


def render_machine(desc: dict[str, Any], width: int = 110, color: bool = False) -> str:
    t = Table(show_header=False, show_edge=False, pad_edge=False)
    t.add_column("what", style="dim")
    t.add_column("value")
    cpu = desc.get("cpu") or {}
    mem = desc.get("memory") or {}
    t.add_row("CPU", _s(cpu.get("model")))
    t.add_row(
        "cores",
        f"{_s(cpu.get('physical_cores'))} physical, {_s(cpu.get('logical_cores'))} logical",
    )
    freq = cpu.get("freq_mhz") or {}
    t.add_row(
        "frequency",
        f"{_s(freq.get('current'))} MHz (max {_s(freq.get('max'))})" if freq else "unknown",
    )
    t.add_row("governor", _s(", ".join(cpu.get("governors") or []) or None))
    t.add_row(
        "memory",
        f"{fmt_bytes(mem.get('total_bytes'))} total, {fmt_bytes(mem.get('available_bytes'))} free",
    )
    osd = desc.get("os") or {}
    os_parts = (osd.get("distro"), osd.get("system"), osd.get("release"))
    t.add_row("OS", _s(", ".join(str(v) for v in os_parts if v) or None))
    gpus = (desc.get("gpus") or {}).get("devices") or []
    if gpus:
        for g in gpus:
            t.add_row(
                f"GPU {g.get('index')}",
                f"{_s(g.get('vendor'))} {_s(g.get('name'))}, driver {_s(g.get('driver'))}, "
                f"{fmt_bytes(g.get('memory_bytes'))}",
            )
    else:
        t.add_row("GPUs", "none seen")
    for err in (desc.get("gpus") or {}).get("errors") or []:
        t.add_row("GPU probe", f"[yellow]{escape(str(err))}[/yellow]")
    ort = desc.get("onnxruntime") or {}
    t.add_row("onnxruntime", f"{_s(ort.get('version'))} ({_s(ort.get('distribution'))})")
    t.add_row("providers", _s(", ".join(ort.get("available_providers") or [])))
    tools = desc.get("tools") or {}
    for name, path in tools.items():
        t.add_row(name, f"[green]{escape(path)}[/green]" if path else "[dim]not on PATH[/dim]")
    return render_text(t, width, color)
