"""Regenerate docs/schema.md from the table declarations in aaco.session.schema."""

from __future__ import annotations

from pathlib import Path

from aaco.session.schema import render_markdown

if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "docs" / "schema.md"
    out.write_text(render_markdown())
    print(f"wrote {out}")
