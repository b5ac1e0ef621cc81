"""What the diffs of model runs (:mod:`aaco.regress.diff`) and serving sessions
(:mod:`aaco.regress.serving_diff`) share: the margins and exit codes, the verdict's labels,
the environment differences, which machines the runs ran on, and the CPU-contention rule
(docs/methodology.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from aaco.analysis.compare import (
    DIFFERENT_MACHINES,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    Comparison,
)
from aaco.analysis.evidence import dict_differences
from aaco.analysis.sched import STEAL_PCT_CONTENDED, WAIT_SHARE_CONTENDED, not_evidence
from aaco.errors import UsageError
from aaco.session import metadata
from aaco.session.bundle import Session
from aaco.session.fingerprint import fingerprint_fields, hardware_fingerprint

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
    "different machine": "The runs ran on different machines, so the difference is the "
    "hardware's as much as the code's: rerun the baseline on the session's machine (or both "
    "sides there, interleaved: aaco ab) before blaming the code.",
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


# -- machines -------------------------------------------------------------------------------
#: the fingerprint fields that describe the hardware (what
#: :func:`aaco.session.fingerprint.hardware_fingerprint` hashes); the others are software
HARDWARE_FIELDS = (
    "cpu_model",
    "cpu_architecture",
    "physical_cores",
    "logical_cores",
    "cpu_flags",
    "memory_gib",
    "gpus",
)
#: what tells two machines apart beyond the hardware model: the host and the physical GPUs
_PLACE_FIELDS = ("hostname", "gpu_uuids")
#: the first words of the warning that a diff compares different machines; the renderers
#: show such a warning as a banner under the verdict line
_NO_ENV = "no env.json"
_CONTAINERS = "same hardware model; the host names differ but name containers, not machines"


def _unknown_machine(session_id: str) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "known": False,
        "hostname": None,
        "container": None,
        **dict.fromkeys(HARDWARE_FIELDS),
        "gpu_uuids": [],
        "hardware_fingerprint": None,
    }


def machine_identity(session: Session) -> dict[str, Any]:
    """Which machine ``session`` ran on, from its env.json.

    ``hostname``; ``container`` (it ran in a Docker or Podman container, whose host name
    names the container, not the machine; null when unknown); the hardware fields of the
    fingerprint (:data:`HARDWARE_FIELDS`: CPU model, architecture, core counts, CPU flags,
    memory in GiB, GPUs as ``vendor:name``), each null when unknown (CPU flags that could not
    be read, a GPU query that failed and found nothing: not "none"); ``gpu_uuids``, the
    physical GPUs it saw; and ``hardware_fingerprint``
    (:func:`aaco.session.fingerprint.hardware_fingerprint`, which hashes an unknown field as
    it is). Without an env.json (or with one too malformed to read) ``known`` is false and
    the rest null or empty: unknown, not another machine.
    """
    env = as_dict(session.env)
    if not env:
        return _unknown_machine(session.session_id)
    gpus = as_dict(env.get("gpus"))
    listed = gpus.get("devices")
    devices = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    clean = {**env, "gpus": {**gpus, "devices": devices}}
    try:
        fields = fingerprint_fields(clean)
        hw_fp = hardware_fingerprint(clean)
    except (AttributeError, TypeError):  # a hand-edited section of the wrong shape
        return _unknown_machine(session.session_id)
    host = env.get("hostname")
    box = env.get("container")
    uuids = {d.get("uuid") for d in devices}
    flags = as_dict(env.get("cpu")).get("flags")
    # a query that failed and found nothing says nothing about the GPUs
    gpus_known = bool(devices) or not gpus.get("errors")
    return {
        "session_id": session.session_id,
        "known": True,
        "hostname": host.strip() if isinstance(host, str) and host.strip() else None,
        "container": bool(box.get("dockerenv") or box.get("containerenv"))
        if isinstance(box, dict)
        else None,
        **{k: fields.get(k) for k in HARDWARE_FIELDS},
        "cpu_flags": fields.get("cpu_flags") if isinstance(flags, dict) else None,
        "gpus": sorted(f"{d.get('vendor')}:{d.get('name')}" for d in devices)
        if gpus_known
        else None,
        "gpu_uuids": sorted(u.strip() for u in uuids if isinstance(u, str) and u.strip()),
        "hardware_fingerprint": hw_fp,
    }


def machine_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``{key, baseline, session}`` for each hardware field, the host name and the GPU uuids
    known on both sides that differ between two :func:`machine_identity` results, the
    hardware first; empty when either is unknown."""
    if not a.get("known") or not b.get("known"):
        return []
    return [
        {"key": k, "baseline": a.get(k), "session": b.get(k)}
        for k in (*HARDWARE_FIELDS, *_PLACE_FIELDS)
        if a.get(k) is not None and b.get(k) is not None and a.get(k) != b.get(k)
    ]


def _host_key(m: Mapping[str, Any]) -> str | None:
    host = m.get("hostname")
    return host.lower().rstrip(".") if isinstance(host, str) and host else None


def same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[bool | None, str]:
    """Did two runs (their :func:`machine_identity`) run on one machine: True, False, or
    None when that cannot be told; and why (docs/methodology.md, "Machines").

    Another machine is another physical box, not only another model: two boxes of one model
    differ in their silicon, cooling, firmware and neighbours. So the runs ran on different
    machines when their hardware differs (a field known on both sides: an unknown one is
    no difference), or, on the same hardware model, when both list GPU uuids and share none
    (other physical GPUs), or, without uuids, when both host names are known and differ
    outside containers. They ran on one machine when the hardware is the same and they
    share a GPU uuid, or their host names are equal. Unknown: an env.json missing on either
    side, a host name missing, or host names that differ inside a container (a container's
    host name names the container, not the machine).
    """
    missing = [str(m.get("session_id")) for m in (a, b) if not m.get("known")]
    if missing:
        return None, f"{_NO_ENV} in {', '.join(missing)}"
    hw = [d["key"] for d in machine_differences(a, b) if d["key"] in HARDWARE_FIELDS]
    if hw:
        return False, f"hardware differs: {', '.join(hw)}"
    ua, ub = set(a.get("gpu_uuids") or ()), set(b.get("gpu_uuids") or ())
    if ua and ub:
        if ua & ub:
            return True, "same hardware, a GPU in common (same uuid)"
        return False, "same hardware model, other physical GPUs (no GPU uuid in common)"
    ha, hb = _host_key(a), _host_key(b)
    if ha is None or hb is None:
        return None, "same hardware model; host name unknown"
    if ha == hb:
        return True, "same hardware and host name"
    if a.get("container") or b.get("container"):
        return None, _CONTAINERS
    return False, "same hardware model, another host"


def _hardware_words(m: Mapping[str, Any]) -> str:
    """``Intel Xeon Gold 6430, 2x NVIDIA H100 80GB HBM3``: the CPU and GPUs of a
    :func:`machine_identity`."""
    cpu = m.get("cpu_model") or "unknown CPU"
    if m.get("gpus") is None:
        return f"{cpu}, GPUs unknown"
    names = Counter(
        name if name != "None" else vendor
        for vendor, _, name in (str(g).partition(":") for g in m["gpus"])
    )
    gpu = " + ".join(f"{n}x {g}" if n > 1 else g for g, n in names.items()) or "no GPU"
    return f"{cpu}, {gpu}"


def describe_machine(m: Mapping[str, Any]) -> str:
    """``node-a (Intel Xeon Gold 6430, 2x NVIDIA H100 80GB HBM3)``: host, CPU and GPUs of a
    :func:`machine_identity`."""
    if not m.get("known"):
        return f"an unknown machine ({_NO_ENV})"
    return f"{m.get('hostname') or 'an unknown host'} ({_hardware_words(m)})"


def _groups(ids: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The runs grouped by machine: each joins the first group whose first run it is not
    known to differ from."""
    groups: list[list[Mapping[str, Any]]] = []
    for m in ids:
        for g in groups:
            if same_machine(g[0], m)[0] is not False:
                g.append(m)
                break
        else:
            groups.append([m])
    return groups


def _fmt_groups(groups: list[list[Mapping[str, Any]]]) -> str:
    return "; ".join(
        f"{', '.join(str(m.get('session_id')) for m in g)} on {describe_machine(g[0])}"
        for g in groups
    )


def _differs(ids: Sequence[Mapping[str, Any]]) -> bool:
    return any(same_machine(x, y)[0] is False for x, y in combinations(ids, 2))


def machine_comparison(bases: Sequence[Session], news: Sequence[Session]) -> dict[str, Any]:
    """The ``machines`` field of a verdict: which machines the runs of each side ran on.

    ``between_sides``: whether the first run of each side (the ones the evidence comes
    from) ran on one machine (:func:`same_machine`; True, False or null when unknown), and
    ``basis`` why. ``same``: True when every run of both sides ran on one machine, False
    when any two are known to have run on different machines, else null. ``baseline`` and
    ``session``: the first runs' :func:`machine_identity`; ``differences``: the fields
    that differ between them (``{key, baseline, session}``); ``mixed``: the sides whose
    runs came from more than one machine; ``runs``: every run's identity, by side.
    """
    ids_a = [machine_identity(s) for s in bases]
    ids_b = [machine_identity(s) for s in news]
    between, basis = same_machine(ids_a[0], ids_b[0])
    pairs = [same_machine(x, y)[0] for x, y in combinations([*ids_a, *ids_b], 2)]
    same = False if False in pairs else True if all(p is True for p in pairs) else None
    return {
        "same": same,
        "between_sides": between,
        "basis": basis,
        "baseline": ids_a[0],
        "session": ids_b[0],
        "differences": machine_differences(ids_a[0], ids_b[0]),
        "mixed": [
            label for label, ids in (("baseline", ids_a), ("session", ids_b)) if _differs(ids)
        ],
        "runs": {"baseline": ids_a, "session": ids_b},
    }


def machine_warnings(machines: Mapping[str, Any]) -> list[str]:
    """The warnings of a :func:`machine_comparison`: ``DIFFERENT MACHINES: ...`` when the
    sides ran on different machines, ``DIFFERENT MACHINES among the <side> runs: ...`` for
    each side whose runs came from more than one (``... among the runs compared`` when
    only runs of both sides together tell), and a note when containers hide whether the
    sides' machine is one."""
    a, b = machines["baseline"], machines["session"]
    runs = machines["runs"]
    out: list[str] = []
    if machines["between_sides"] is False:
        out.append(
            f"{DIFFERENT_MACHINES}: baseline ran on {describe_machine(a)}, session on "
            f"{describe_machine(b)}: this compares hardware, not code ({machines['basis']})"
        )
    for label in machines["mixed"]:
        out.append(
            f"{DIFFERENT_MACHINES} among the {label} runs: {_fmt_groups(_groups(runs[label]))}: "
            f"the pooled {label} mixes hardware into the comparison"
        )
    if machines["same"] is False and not out:
        everyone = [*runs["baseline"], *runs["session"]]
        out.append(
            f"{DIFFERENT_MACHINES} among the runs compared: {_fmt_groups(_groups(everyone))}: "
            "the comparison mixes hardware into the code's difference"
        )
    if machines["between_sides"] is None and machines["basis"] == _CONTAINERS:
        out.append(
            "machine not identified: the runs ran in containers with different host names "
            f"({a['hostname']} vs {b['hostname']}) on the same hardware model "
            f"({_hardware_words(a)}); if the containers ran on different machines, the "
            "difference may be the hardware's, not the code's"
        )
    return out


def software_warnings(
    env: Mapping[str, Any], machines: Mapping[str, Any], fingerprints: set[Any]
) -> list[str]:
    """The warnings of software that differs: between the sides' first runs (``env``,
    :func:`environment_differences`), ``DIFFERENT SOFTWARE ON THE SAME MACHINE``,
    ``DIFFERENT SOFTWARE`` on one hardware model, ``DIFFERENT SOFTWARE as well`` beside
    different machines, or ``DIFFERENT FINGERPRINT`` without env.json to tell which; among
    the runs of one side (``fingerprints``: every run's fingerprint), unless their
    machines already differ."""
    out: list[str] = []
    between = machines["between_sides"]
    items = env["fingerprint"]
    if between is False:
        items = [d for d in items if d["key"] not in HARDWARE_FIELDS]
    what, differ = fmt_diffs(items, limit=6), "fingerprints differ"
    if not env["same_fingerprint"]:
        a = machines["baseline"]
        if between is False:
            if items:
                out.append(f"DIFFERENT SOFTWARE as well: {what}")
        elif between is True:
            out.append(
                f"DIFFERENT SOFTWARE ON THE SAME MACHINE: both sides ran on "
                f"{describe_machine(a)}, with different software ({what or differ}); the "
                "difference may be the software's, not the code's"
            )
        elif a["known"] and machines["session"]["known"]:
            out.append(
                f"DIFFERENT SOFTWARE on the same hardware model (whether on the same machine "
                f"is unknown: {machines['basis']}): {what or differ}; the "
                "difference may be the software's, not the code's"
            )
        else:
            out.append(
                f"DIFFERENT FINGERPRINT: {what or differ}, and without "
                "env.json on both sides whether the machine or the software differs is "
                "unknown; the difference may not be the code's"
            )
    elif len(fingerprints) > 1 and machines["same"] is not False:
        fps = ", ".join(sorted(str(f) for f in fingerprints))
        if machines["same"] is True:
            out.append(
                f"DIFFERENT SOFTWARE among the runs of one side on the same machine ({fps}); "
                "the difference may be the software's, not the code's"
            )
        else:
            out.append(
                f"DIFFERENT FINGERPRINT among the runs of one side ({fps}); the difference "
                "may not be the code's"
            )
    return out


def machine_cause(machines: Mapping[str, Any]) -> dict[str, Any] | None:
    """The candidate cause "different machine" when the runs compared ran on different
    machines (the sides', or those pooled on one side), with what differs; else None."""
    if machines["between_sides"] is False:
        detail = fmt_diffs(machines["differences"], limit=6) or str(machines["basis"])
        return {"cause": "different machine", "detail": detail}
    if machines["mixed"]:
        sides = " and ".join(machines["mixed"])
        return {
            "cause": "different machine",
            "detail": f"the {sides} runs came from more than one machine",
        }
    if machines["same"] is False:
        return {
            "cause": "different machine",
            "detail": "the runs compared came from more than one machine",
        }
    return None


def environment_items(env: Mapping[str, Any], machines: Mapping[str, Any] | None) -> list[Any]:
    """The differences behind the candidate cause "environment change": packages, the
    fingerprint's fields, environment variables, CPU governors, GPUs; less the hardware
    when "different machine" (:func:`machine_cause`) already names it."""
    fp = list(env["fingerprint"])
    gpus = list(env["gpus"])
    if machines is not None and machine_cause(machines) is not None:
        fp = [d for d in fp if d["key"] not in HARDWARE_FIELDS]
        gpus = []
    return [*env["packages"], *fp, *env["env_vars"], *env["cpu_governors"], *gpus]


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
