"""Evidence for a diff: what moved between two sessions, from what both bundles hold.

Pure functions over plain values and per-name time maps; ``aaco.regress.diff`` gathers the
inputs from the bundles. A figure missing from either side is reported as unknown (None),
never as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def scalar_delta(
    baseline: float | None, session: float | None, unit: str, source: str
) -> dict[str, Any]:
    """``{baseline, session, delta, delta_pct, unit, source}``; deltas None when unknown."""
    known = baseline is not None and session is not None
    delta = session - baseline if known else None  # type: ignore[operator]
    pct = (
        delta / abs(baseline) * 100.0
        if known and delta is not None and baseline not in (None, 0)
        else None
    )
    return {
        "baseline": baseline,
        "session": session,
        "delta": delta,
        "delta_pct": pct,
        "unit": unit,
        "source": source,
    }


def movers(
    baseline: Mapping[str, float],
    session: Mapping[str, float],
    top: int,
    kinds: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per-name time deltas (an HTA-style trace diff on aggregated names).

    ``baseline``/``session`` map a name (node, kernel) to ms per iteration. Returns
    ``top_movers`` (largest absolute change first, each with status changed/added/removed),
    ``added`` and ``removed`` name lists, and the totals on each side.
    """
    rows: list[dict[str, Any]] = []
    for name in set(baseline) | set(session):
        a, b = baseline.get(name), session.get(name)
        status = "added" if a is None else "removed" if b is None else "changed"
        a0, b0 = a or 0.0, b or 0.0
        rows.append(
            {
                "name": name,
                "kind": (kinds or {}).get(name),
                "status": status,
                "baseline_ms": a,
                "session_ms": b,
                "delta_ms": b0 - a0,
                "delta_pct": (b0 - a0) / a0 * 100.0 if a else None,
            }
        )
    rows.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    total_a, total_b = sum(baseline.values()), sum(session.values())
    return {
        "top_movers": rows[:top],
        "added": sorted(r["name"] for r in rows if r["status"] == "added"),
        "removed": sorted(r["name"] for r in rows if r["status"] == "removed"),
        "baseline_total_ms": total_a,
        "session_total_ms": total_b,
        "delta_total_ms": total_b - total_a,
    }


def dict_differences(
    baseline: Mapping[str, Any] | None, session: Mapping[str, Any] | None, prefix: str = ""
) -> list[dict[str, Any]]:
    """Leaf-level differences between two nested JSON objects: ``{key, baseline, session}``."""
    out: list[dict[str, Any]] = []
    a, b = baseline or {}, session or {}
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        path = f"{prefix}{key}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out.extend(dict_differences(va, vb, path + "."))
        elif va != vb:
            out.append({"key": path, "baseline": va, "session": vb})
    return out
