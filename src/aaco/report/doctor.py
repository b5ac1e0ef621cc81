"""The text and JSON of ``aaco doctor``: the machine's readiness for stable measurement, one
line per check and the fix under each problem, as ``pyperf system show`` prints it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aaco.collectors.machine_state import (
    ERROR,
    STATES,
    UNKNOWN,
    WARNING,
    Check,
    format_cpu_list,
    is_ready,
)

__all__ = ["doctor_document", "format_doctor"]

_TITLE_WIDTH = 28


def _verdict(checks: Sequence[Check]) -> str:
    counts = {s: sum(c.state == s for c in checks) for s in STATES}

    def n(state: str) -> str:
        k = counts[state]
        return f"{k} {state}" + ("s" if k != 1 and state != UNKNOWN else "")

    if not is_ready(checks):
        return f"not ready: {n(ERROR)} (fix them first), {n(WARNING)}, {n(UNKNOWN)}"
    if counts[WARNING]:
        return f"ready, with {n(WARNING)}: sources of noise, the fixes above make runs steadier" + (
            f"; {n(UNKNOWN)}" if counts[UNKNOWN] else ""
        )
    return "ready for stable measurement" + (f"; {n(UNKNOWN)}" if counts[UNKNOWN] else "")


def format_doctor(
    checks: Sequence[Check], cpus: Sequence[int] | None = None, cpus_source: str | None = None
) -> list[str]:
    """The lines of ``aaco doctor``: a heading naming the CPUs checked, then per check its
    state, title and the value seen; under a problem, why it matters and ``fix:`` with the
    command; under an unknown, the reason; a last line with the verdict.

    >>> format_doctor([Check("aslr", "ASLR", "ok", "full randomization")])[2]
    'ok       ASLR                         full randomization'
    """
    where = f"CPU {format_cpu_list(cpus)}" if cpus else "all CPUs"
    how = f" ({cpus_source})" if cpus_source else ""
    lines = [f"Machine state for measuring on {where}{how}", ""]
    for c in checks:
        lines.append(f"{c.state:<8} {c.title:<{_TITLE_WIDTH}} {c.value or '-'}".rstrip())
        if c.state != "ok" and c.detail:
            lines.append(f"{'':<9}{c.detail}")
        if c.fix and c.state in (WARNING, ERROR):
            lines.append(f"{'':<9}fix: {c.fix}")
    lines += ["", _verdict(checks)]
    return lines


def doctor_document(
    checks: Sequence[Check], cpus: Sequence[int] | None = None, cpus_source: str | None = None
) -> dict[str, Any]:
    """``aaco doctor --format json``: ready, the CPUs checked and every check's record."""
    return {
        "ready": is_ready(checks),
        "cpus": list(cpus) if cpus else None,
        "cpus_source": cpus_source,
        "counts": {s: sum(c.state == s for c in checks) for s in STATES},
        "checks": [c.to_json() for c in checks],
    }
