"""``aaco check --sla``: service-level rules evaluated against one session.

A rules file is YAML, either a list of strings or a mapping::

    rules:                       # or the list itself at top level
      - p99_ms <= 12
      - throughput >= 200
      - gpu_active_ratio >= 0.7

    p99_ms: "<= 12"              # mapping form: metric -> "OP VALUE" (beside rules: too)

A rule whose metric the session does not hold evaluates to *unknown*, which fails the check
(an SLA that cannot be verified is not met) unless ``allow_unknown`` is set.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aaco.errors import InputError, UsageError
from aaco.session.bundle import Session
from aaco.session.paths import DERIVED_METRICS_FILE

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
    "==": operator.eq,
    "!=": operator.ne,
}
_RULE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|==|!=|<|>)\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$"
)
_OP_ONLY = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")


def _lat(key: str) -> Callable[[Session], float | None]:
    return lambda s: _get(s.summary, "latency_ms", key)


def _derived(key: str) -> Callable[[Session], float | None]:
    return lambda s: _get(s.json_file(DERIVED_METRICS_FILE), key)


def _get(d: Any, *keys: str) -> float | None:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else None


#: metric name -> (unit, getter); documented in docs/methodology.md
METRICS: dict[str, tuple[str, Callable[[Session], float | None]]] = {
    "mean_ms": ("ms", _lat("mean")),
    "p50_ms": ("ms", _lat("p50")),
    "p90_ms": ("ms", _lat("p90")),
    "p95_ms": ("ms", _lat("p95")),
    "p99_ms": ("ms", _lat("p99")),
    "max_ms": ("ms", _lat("max")),
    "cov": ("", _lat("cov")),
    "throughput": ("items/s", lambda s: _get(s.summary, "throughput", "items_per_s")),
    "iterations_per_s": ("1/s", lambda s: _get(s.summary, "throughput", "iterations_per_s")),
    "gpu_active_ratio": ("fraction", _derived("gpu_active_ratio")),
    "kar": ("kernels per node", _derived("kar")),
    "microkernel_pct": ("%", _derived("microkernel_pct")),
    "launch_rate_per_s": ("1/s", _derived("launch_rate_per_s")),
    "kernels_per_iteration": (
        "kernels",
        lambda s: _get(s.json_file(DERIVED_METRICS_FILE), "kernels_per_iteration", "mean"),
    ),
    "peak_rss_mib": (
        "MiB",
        lambda s: (lambda v: None if v is None else v / 2**20)(
            _get(s.summary, "telemetry", "proc_rss_peak_bytes")
        ),
    ),
    "warmup_effect_pct": ("%", lambda s: _get(s.summary, "warmup", "effect_pct")),
}


@dataclass(frozen=True)
class Rule:
    metric: str
    op: str
    limit: float
    text: str


def parse_rule(text: str) -> Rule:
    m = _RULE.match(text)
    if not m:
        raise UsageError(f"SLA rule {text!r}: expected 'METRIC OP NUMBER', e.g. 'p99_ms <= 12'")
    metric, op, value = m.groups()
    if metric not in METRICS:
        raise UsageError(
            f"SLA rule {text!r}: unknown metric {metric!r}; known: {', '.join(METRICS)}"
        )
    return Rule(metric=metric, op=op, limit=float(value), text=f"{metric} {op} {value}")


def load_rules(path: Path) -> list[Rule]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such SLA file") from None
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: unreadable SLA file ({str(exc).splitlines()[0]})") from exc
    listed: Any = None
    if isinstance(data, dict) and "rules" in data:
        # a 'rules:' list and mapping-form rules beside it both count
        data = dict(data)
        listed = data.pop("rules")
        if not isinstance(listed, list):
            raise InputError(f"{path}: 'rules:' must be a list of rules like 'p99_ms <= 12'")
    elif isinstance(data, list):
        listed, data = data, {}
    rules: list[Rule] = []
    if listed is not None:
        for item in listed:
            if not isinstance(item, str):
                raise InputError(f"{path}: each rule must be a string like 'p99_ms <= 12'")
            rules.append(parse_rule(item))
    if isinstance(data, dict):
        for metric, cond in data.items():
            m = _OP_ONLY.match(str(cond))
            if not m:
                raise InputError(
                    f"{path}: rule for {metric!r} must look like '<= 12', not {cond!r}"
                )
            rules.append(parse_rule(f"{metric} {m.group(1)} {m.group(2)}"))
    elif data is not None:
        raise InputError(f"{path}: expected a list of rules or a 'rules:' key")
    if not rules:
        raise InputError(f"{path}: no rules")
    return rules


def check(session: Session, rules: list[Rule], allow_unknown: bool = False) -> dict[str, Any]:
    """Evaluate every rule: ``{passed, results[{rule, metric, value, unit, status}]}``.

    status is ``pass``, ``fail`` or ``unknown`` (the session lacks the metric).
    """
    results = []
    for r in rules:
        unit, getter = METRICS[r.metric]
        value = getter(session)
        status = "unknown" if value is None else "pass" if _OPS[r.op](value, r.limit) else "fail"
        results.append(
            {"rule": r.text, "metric": r.metric, "value": value, "unit": unit, "status": status}
        )
    failed = [
        x
        for x in results
        if x["status"] == "fail" or (x["status"] == "unknown" and not allow_unknown)
    ]
    return {
        "session_id": session.session_id,
        "passed": not failed,
        "failed": len(failed),
        "results": results,
    }
