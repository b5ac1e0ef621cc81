"""Small text helpers every terminal table shares (numbers as text, a rich renderable as a
string), apart from :mod:`aaco.report.terminal` so that the listing commands (``aaco ls``)
load neither pyarrow nor the report model."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

__all__ = ["fmt_bytes", "fmt_ms", "render_text"]


def fmt_ms(v: float | None) -> str:
    """Milliseconds with 3 significant-ish digits; 'unknown' for missing values."""
    if v is None:
        return "unknown"
    if v >= 100:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.3f}"
    return f"{v:.4f}"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


def render_text(renderable: RenderableType, width: int = 110, color: bool = False) -> str:
    """Render any rich renderable to a string (ANSI styles only when ``color``)."""
    buf = io.StringIO()
    Console(
        file=buf,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
    ).print(renderable)
    return buf.getvalue()
