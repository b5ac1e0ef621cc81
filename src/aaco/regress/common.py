"""What the diffs of model runs (:mod:`aaco.regress.diff`) and serving sessions
(:mod:`aaco.regress.serving_diff`) share: the margins and exit codes, the verdict's labels,
the environment differences and the CPU-contention rule (docs/methodology.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from aaco.analysis.compare import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, Comparison
from aaco.analysis.evidence import dict_differences
from aaco.analysis.sched import STEAL_PCT_CONTENDED, WAIT_SHARE_CONTENDED, not_evidence
from aaco.errors import UsageError
from aaco.session import metadata
from aaco.session.bundle import Session

DEFAULT_THRESHOLD = 0.03
HISTORY_WINDOW = 50
#: the largest equivalence margin a comparison takes (a fraction below 1); a learned floor at
#: or above it makes the verdict INCONCLUSIVE
MAX_MARGIN = 1.0
#: runs per side from which the pooled interval, not the learned floor, holds run-to-run noise
POOLED_RUNS = 3

EXIT_CODES = {NO_CHANGE: 0, IMPROVEMENT: 0, REGRESSION: 1, INCONCLUSIVE: 3}


def _run_keys() -> tuple[str, ...]:
    """Run settings whose change is a candidate cause by itself: the ``run.`` keys the
    metadata registry marks as causes (:func:`aaco.session.metadata.causes`)."""
    return metadata.run_fields(metadata.causes())


RECOMMEND = {
    "configuration change": "The runs were configured differently; rerun the baseline with "
    "the session's settings (or revert them) before blaming the code.",
    "environment change": "Software or hardware differs between the runs; pin the versions "
    "listed under environment and compare like with like.",
    "model change": "The graph itself changed; look at the added/removed operators and the "
    "top movers for the layers that grew.",
    "launch-bound": "More kernel launches per iteration: investigate graph partitioning and "
    "operator fusion, or capture the graph (CUDA/HIP graphs).",
    "slower kernels": "Kernels themselves got slower: compare the top kernel movers and check "
    "clocks, data types and kernel selection (tuning databases).",
    "gpu idle": "The GPU sits idle more often: host-side work or synchronisation grew between "
    "kernels; see the idle breakdown of both reports.",
    "throttling": "Clocks were lower during the session: check power and thermal limits and "
    "pin clocks for benchmarking.",
    "cpu contention": "Other work competed for the CPU during the session: rerun on a quiet "
    "machine or pin the benchmark to isolated cores.",
    "energy": "The GPU spends more energy per inference: compare clocks, power and "
    "utilisation of both runs (aaco report, GPU section) before blaming the kernels.",
    "operator": "One operator explains most of the change: profile it alone and compare its "
    "kernels and shapes between the runs.",
}


def num(d: dict[str, Any] | None, *keys: str) -> float | None:
    """The number at ``d[k1][k2]...``, else None (a missing key, or not a number)."""
    v: Any = d
    for k in keys:
        if not isinstance(v, dict):
            return None
        v = v.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def mib(v: float | None) -> float | None:
    """Bytes in MiB."""
    return None if v is None else v / 2**20


def as_dict(v: Any) -> dict[str, Any]:
    """``v`` when it is a JSON object, else empty: a hand-edited bundle must not crash."""
    return v if isinstance(v, dict) else {}


def finite(v: Any) -> float | None:
    """A finite number, else None (unknown): NaN telemetry is no measurement of 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def environment_differences(baseline: Session, session: Session) -> dict[str, Any]:
    """Differences that can explain a change: fingerprint, packages, run settings, env."""
    ea, eb = as_dict(baseline.env), as_dict(session.env)
    ra, rb = as_dict(baseline.meta.get("run")), as_dict(session.meta.get("run"))
    keys = _run_keys()
    run = dict_differences({k: ra.get(k) for k in keys}, {k: rb.get(k) for k in keys})
    backend = dict_differences(baseline.meta.get("backend"), session.meta.get("backend"))
    return {
        "same_fingerprint": baseline.meta.get("fingerprint") == session.meta.get("fingerprint"),
        "fingerprint": dict_differences(
            as_dict(ea.get("fingerprint_fields")), as_dict(eb.get("fingerprint_fields"))
        ),
        "packages": dict_differences(as_dict(ea.get("packages")), as_dict(eb.get("packages"))),
        "run": run,
        "backend": backend,
        "env_vars": dict_differences(as_dict(ea.get("env_vars")), as_dict(eb.get("env_vars"))),
        "cpu_governors": dict_differences(
            {"governors": as_dict(ea.get("cpu")).get("governors")},
            {"governors": as_dict(eb.get("cpu")).get("governors")},
        ),
        "gpus": dict_differences({"gpus": ea.get("gpus")}, {"gpus": eb.get("gpus")}),
    }


def fmt_diffs(items: Sequence[dict[str, Any]], limit: int = 4) -> str:
    parts = [f"{d['key']}: {_short(d['baseline'])} -> {_short(d['session'])}" for d in items]
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def _short(v: Any) -> str:
    s = "unset" if v is None else str(v)
    return s if len(s) <= 40 else s[:37] + "..."


#: other processes' share of the machine's CPU (0-1) that makes a side's timing suspect ...
CONTENTION_SHARE = 0.2
#: ... when it exceeds the other side's by this much, or on either side regardless
CONTENTION_GAP = 0.1
CONTENTION_ALWAYS = 0.5


def contention_reason(ca: float | None, cb: float | None, verdict: str) -> str | None:
    """:func:`contention_guard` over the two sides' contention shares (0-1, None unknown)."""
    if verdict not in (REGRESSION, IMPROVEMENT):
        return None
    slow, fast = (cb, ca) if verdict == REGRESSION else (ca, cb)
    slow_side = "session" if verdict == REGRESSION else "baseline"
    worst = max((c for c in (ca, cb) if c is not None), default=None)
    if worst is not None and worst >= CONTENTION_ALWAYS:
        reason = f"other processes used {worst:.0%} of the CPU during the measured phase"
    elif (
        slow is not None
        and slow >= CONTENTION_SHARE
        and (fast is None or slow - fast >= CONTENTION_GAP)
    ):
        other = "unknown" if fast is None else f"{fast:.0%}"
        reason = (
            f"other processes used {slow:.0%} of the CPU during the {slow_side}'s measured "
            f"phase (the other side: {other})"
        )
    else:
        return None
    return (
        f"MEASUREMENT NOT VALID: {reason}; the {verdict} may be the machine's, not the "
        "code's, so the verdict is INCONCLUSIVE: rerun on a quiet machine"
    )


#: a side's timing is not trusted from the worker's run-queue wait share
#: WAIT_SHARE_CONTENDED (wait / (run + wait) of its threads, aaco.analysis.sched) when other
#: tasks used at least this much of one core on the worker's CPUs (or their use is unknown):
#: a worker with more threads than CPUs waits for its own threads, which is its
#: configuration, the same on both sides, not the machine's load
OTHER_CPU_PCT_CONTENDED = 10.0


def sched_contended(sched: dict[str, Any] | None) -> str | None:
    """A one-line account of a side's run-queue wait when it makes the timing suspect."""
    s = as_dict(sched)
    if not_evidence(s):
        return None
    steal = finite(s.get("steal_pct_mean"))
    if steal is not None and steal >= STEAL_PCT_CONTENDED:
        return f"the hypervisor took {steal:.0f}% of the worker's CPUs' time (steal)"
    wait = finite(s.get("wait_share"))
    if wait is None or wait < WAIT_SHARE_CONTENDED:
        return None
    other = finite(s.get("other_cpu_pct_mean"))
    if other is not None and other < OTHER_CPU_PCT_CONTENDED:
        return None
    cpus = s.get("affinity")
    n = len(cpus) if isinstance(cpus, list) and cpus else None
    on = f" on its {n} CPU{'s' if n != 1 else ''}" if n else ""
    busy = "" if other is None else f"; other tasks used {other / 100:.2f} cores{on}"
    return f"the worker waited {wait:.0%} of its runnable time for a CPU{busy}"


def sched_reason(sa: dict[str, Any] | None, sb: dict[str, Any] | None, verdict: str) -> str | None:
    """INCONCLUSIVE's reason when either side's worker waited for CPUs that other tasks held
    (:func:`sched_contended`), for a REGRESSION or IMPROVEMENT; else None."""
    if verdict not in (REGRESSION, IMPROVEMENT):
        return None
    parts = []
    for label, s in (("baseline", sa), ("session", sb)):
        why = sched_contended(s)
        if why is not None:
            parts.append(f"during the {label}'s measured phase {why}")
    if not parts:
        return None
    waits = [finite(as_dict(s).get("wait_share")) for s in (sa, sb)]
    shown = " vs ".join("unknown" if w is None else f"{w:.0%}" for w in waits)
    return (
        f"MEASUREMENT NOT VALID: {'; '.join(parts)} (run-queue wait, baseline vs session: "
        f"{shown}); the {verdict} may be the machine's, not the code's, so the verdict is "
        "INCONCLUSIVE: rerun on a quiet machine or with aaco run --isolate"
    )


def sentinel_reason(
    ca: dict[str, Any] | None, cb: dict[str, Any] | None, verdict: str
) -> str | None:
    """INCONCLUSIVE's reason when the noise sentinel of either side's capsule saw the
    machine's speed change during the run (``capsule.sentinel.speed_changed``)."""
    if verdict not in (REGRESSION, IMPROVEMENT):
        return None
    parts = []
    for label, c in (("baseline", ca), ("session", cb)):
        sent = as_dict(as_dict(c).get("sentinel"))
        if sent.get("speed_changed") is True:
            drift = finite(sent.get("drift_pct"))
            by = f" by {drift:+.1f} %" if drift is not None else ""
            parts.append(f"the machine's speed changed{by} during the {label}'s run")
    if not parts:
        return None
    return (
        f"MEASUREMENT NOT VALID: {'; '.join(parts)} (noise sentinel); the {verdict} may be "
        "the machine's, not the code's, so the verdict is INCONCLUSIVE: rerun both sides"
    )


def severity(verdict: str, delta_pct: float) -> str:
    """none / low (< 5 %) / medium (< 15 %) / high, for regressions only."""
    if verdict != REGRESSION:
        return "none"
    return "low" if delta_pct < 5 else "medium" if delta_pct < 15 else "high"


def confidence_label(value: float) -> str:
    return "high" if value >= 0.99 else "medium" if value >= 0.95 else "low"


def as_list(x: Session | Sequence[Session]) -> list[Session]:
    return [x] if isinstance(x, Session) else list(x)


def check_sides(bases: list[Session], news: list[Session]) -> None:
    """Both sides hold sessions, no bundle twice."""
    if not bases or not news:
        raise UsageError("both sides need at least one session")
    if {s.path for s in bases} & {s.path for s in news}:
        raise UsageError("baseline and session are the same bundle")
    for label, side in (("baseline", bases), ("session", news)):
        if len({s.path for s in side}) < len(side):
            raise UsageError(f"the same {label} bundle is given twice")


def verdict_p(c: Comparison) -> float:
    m = c.primary
    if c.verdict == IMPROVEMENT:
        return m.p_improvement_holm if m.p_improvement_holm is not None else m.p_improvement
    if c.verdict == NO_CHANGE:
        return m.p_equivalence
    return m.p_regression_holm if m.p_regression_holm is not None else m.p_regression
