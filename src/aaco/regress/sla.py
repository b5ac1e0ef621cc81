"""``aaco check --sla``: service-level rules evaluated against one session.

A rules file is YAML, either a list of strings or a mapping::

    rules:                       # or the list itself at top level
      - p99_ms <= 12
      - throughput >= 200
      - gpu_active_ratio >= 0.7
      - ttft_p99_ms < 200        # serving sessions (aaco llm bench / aaco llm run)
      - failed_fraction <= 0.01

    p99_ms: "<= 12"              # mapping form: metric -> "OP VALUE" (beside rules: too)

Model-run metrics (:data:`METRICS`) read the iterations' summary; serving metrics
(:data:`SERVING_METRICS`) read one load point of ``metrics/serving_summary.json`` (the
first, or ``point``). A rule whose metric the session does not hold (a serving metric of a
model run, and the reverse) evaluates to *unknown*, which fails the check (an SLA that
cannot be verified is not met) unless ``allow_unknown`` is set.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aaco.errors import InputError, UsageError
from aaco.regress import serving
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
_WITH_UNIT = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|==|!=|<|>)\s*([-+]?[0-9]*\.?[0-9]+)\s*([A-Za-z%/]+)\s*$"
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


def _serving_metrics() -> dict[str, str]:
    units = {"failed_requests": "requests", "failed_fraction": "fraction", "good_fraction": ""}
    units.update(
        {
            "output_tokens_per_s": "tokens/s",
            "total_tokens_per_s": "tokens/s",
            "requests_per_s": "1/s",
            "goodput_requests_per_s": "1/s",
        }
    )
    out: dict[str, str] = {}
    for name in serving.figures({}):
        out[name] = "ms" if name.endswith("_ms") else units.get(name, "")
    return out


#: serving metric name -> unit: ``{ttft,tpot,itl,e2e}_{mean,p50,p90,p95,p99,max}_ms``,
#: ``output_tokens_per_s``, ``total_tokens_per_s``, ``requests_per_s``,
#: ``goodput_requests_per_s``, ``good_fraction``, ``failed_requests``, ``failed_fraction``
#: (:func:`aaco.regress.serving.figures`); documented in docs/methodology.md
SERVING_METRICS: dict[str, str] = _serving_metrics()


@dataclass(frozen=True)
class Rule:
    metric: str
    op: str
    limit: float
    text: str


def known_metrics() -> list[str]:
    """Every metric a rule may name: the model-run ones, then the serving ones."""
    return [*METRICS, *SERVING_METRICS]


def parse_rule(text: str) -> Rule:
    m = _RULE.match(text)
    if not m:
        unit = _WITH_UNIT.match(text)
        if unit:
            name, op, value, suffix = unit.groups()
            hint = name if name.endswith(f"_{suffix}") else f"{name}_{suffix}"
            example = f" (e.g. '{hint} {op} {value}')" if hint in known_metrics() else ""
            raise UsageError(
                f"SLA rule {text!r}: write the number without a unit, the metric's name "
                f"carries it{example}"
            )
        raise UsageError(f"SLA rule {text!r}: expected 'METRIC OP NUMBER', e.g. 'p99_ms <= 12'")
    metric, op, value = m.groups()
    if metric not in METRICS and metric not in SERVING_METRICS:
        close = difflib.get_close_matches(metric, known_metrics(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(
            f"SLA rule {text!r}: unknown metric {metric!r}; {hint}known: "
            f"{', '.join(known_metrics())}"
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


def check(
    session: Session, rules: list[Rule], allow_unknown: bool = False, point: str | None = None
) -> dict[str, Any]:
    """Evaluate every rule: ``{passed, results[{rule, metric, value, unit, status}]}``.

    status is ``pass``, ``fail`` or ``unknown`` (the session lacks the metric). ``point``
    picks a serving session's load point (:func:`aaco.regress.serving.resolve_point`: an
    index, ``concurrency=N`` or ``rate=R``; default the first).
    """
    figures: dict[str, float | None] = {}
    label: str | None = None
    if serving.is_serving(session):
        p = serving.resolve_point(session, point)
        figures = serving.point_figures(session, p)
        label = serving.load_label(serving.point_load(session, p))
    elif point is not None:
        raise UsageError("--point picks a load point of a serving session; this is a model run")
    results = []
    for r in rules:
        if r.metric in SERVING_METRICS:
            unit, value = SERVING_METRICS[r.metric], figures.get(r.metric)
        else:
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
        **({"point": label} if label is not None else {}),
        "passed": not failed,
        "failed": len(failed),
        "results": results,
    }
