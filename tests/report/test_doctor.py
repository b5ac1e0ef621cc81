"""``aaco doctor``'s lines and JSON, from check records known by construction."""

from __future__ import annotations

from aaco.collectors.machine_state import Check
from aaco.report.doctor import doctor_document, format_doctor

OK = Check("aslr", "ASLR", "ok", "full randomization")
WARN = Check(
    "cpu_governor",
    "CPU scaling governor",
    "warning",
    "powersave on CPU 1",
    "the clock follows the load",
    "sudo cpupower -c 1 frequency-set -g performance",
)
UNKNOWN = Check("turbo", "Turbo boost", "unknown", None, "no boost switch")
ERROR = Check("power_supply", "Power supply", "error", "on battery", "capped", "plug in")


def test_lines_give_state_value_and_the_fix_under_each_problem() -> None:
    lines = format_doctor([OK, WARN, UNKNOWN], cpus=[1], cpus_source="least busy")
    assert lines == [
        "Machine state for measuring on CPU 1 (least busy)",
        "",
        "ok       ASLR                         full randomization",
        "warning  CPU scaling governor         powersave on CPU 1",
        "         the clock follows the load",
        "         fix: sudo cpupower -c 1 frequency-set -g performance",
        "unknown  Turbo boost                  -",
        "         no boost switch",
        "",
        "ready, with 1 warning: sources of noise, the fixes above make runs steadier; 1 unknown",
    ]


def test_verdicts() -> None:
    assert format_doctor([OK])[-1] == "ready for stable measurement"
    assert format_doctor([OK], cpus=None)[0] == "Machine state for measuring on all CPUs"
    last = format_doctor([OK, WARN, ERROR])[-1]
    assert last == "not ready: 1 error (fix them first), 1 warning, 0 unknown"


def test_json_document() -> None:
    doc = doctor_document([OK, ERROR], [1, 2], "--cpus")
    assert doc["ready"] is False and doc["cpus"] == [1, 2]
    assert doc["counts"] == {"ok": 1, "warning": 0, "error": 1, "unknown": 0}
    assert [c["name"] for c in doc["checks"]] == ["aslr", "power_supply"]
    assert doc["checks"][1]["fix"] == "plug in"
