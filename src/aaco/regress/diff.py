"""``aaco diff``: compare a session with a baseline and decide whether it regressed.

Reads both bundles, runs :func:`aaco.analysis.compare.compare` on the measured iterations,
gathers evidence from whatever both bundles hold, and writes ``regress/diff.json``,
``regress/verdict.json`` and ``regress/baseline_ref.json`` into the session's bundle.
Serving sessions go to :func:`aaco.regress.serving_diff.diff_serving`. The method is
described in docs/methodology.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from aaco import __version__
from aaco.analysis import telemetry
from aaco.analysis.compare import (
    DEFAULT_GATES,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    QUANTILES,
    REGRESSION,
    Comparison,
    MetricShift,
    compare,
    is_bimodal,
    mode_shares,
    noise_floor,
    spans_modes,
)
from aaco.analysis.evidence import dict_differences, movers, scalar_delta
from aaco.analysis.ops import op_aggregates, typical_ns_per_iter
from aaco.analysis.sched import WAIT_SHARE_CONTENDED
from aaco.analysis.timeline import kernel_summary
from aaco.errors import BundleError, UsageError
from aaco.regress import serving
from aaco.regress.baseline import config_key, reference, run_key, usable_session
from aaco.regress.common import (
    CONTENTION_ALWAYS,
    CONTENTION_GAP,
    CONTENTION_SHARE,
    DEFAULT_THRESHOLD,
    EXIT_CODES,
    HISTORY_WINDOW,
    MAX_MARGIN,
    POOLED_RUNS,
    RECOMMEND,
    as_dict,
    as_list,
    check_sides,
    confidence_label,
    contention_reason,
    environment_differences,
    environment_items,
    finite,
    fmt_diffs,
    machine_cause,
    machine_comparison,
    machine_warnings,
    mib,
    num,
    sched_reason,
    sentinel_reason,
    severity,
    software_warnings,
    verdict_p,
)
from aaco.regress.serving_diff import diff_serving
from aaco.report.model import report_ops, session_op_names
from aaco.report.publish import write_reports
from aaco.report.regress import verdict_line
from aaco.session.bundle import Session, atomic_write_json, iter_sessions, utc_now_iso
from aaco.session.catalog import RUN_SETTINGS
from aaco.session.paths import (
    BASELINE_REF_FILE,
    BOTTLENECK_FILE,
    DERIVED_METRICS_FILE,
    DIFF_FILE,
    MODEL_META_FILE,
    VERDICT_FILE,
)
from aaco.session.schema import (
    GPU_TELEMETRY,
    INFERENCE_ITERS,
    KERNELS,
    OPS,
    ORT_RUNS,
    SCHED_THREADS,
    SYSTEM_EVENTS,
)

TOP_MOVERS = 10

__all__ = [
    "CONTENTION_ALWAYS",
    "CONTENTION_GAP",
    "CONTENTION_SHARE",
    "DEFAULT_THRESHOLD",
    "EXIT_CODES",
    "HISTORY_WINDOW",
    "MAX_MARGIN",
    "POOLED_RUNS",
    "baseline_history",
    "candidate_causes",
    "confidence",
    "confidence_label",
    "contention_guard",
    "contention_reason",
    "cpu_contention",
    "diff_serving",
    "diff_sessions",
    "environment_differences",
    "gather_evidence",
    "measured_latencies",
    "severity",
    "write_diff",
]


def measured_latencies(session: Session) -> np.ndarray[Any, Any]:
    """Measured-phase latencies in ms, in iteration order (warmup dropped)."""
    iters = session.iters()
    if iters is None:
        raise BundleError(f"{session.path}: no {INFERENCE_ITERS.path}")
    measured = iters.filter(pc.equal(iters.column("phase"), "measured")).sort_by("iteration")
    out: np.ndarray[Any, Any] = measured.column("latency_ns").to_numpy().astype(np.float64) / 1e6
    if out.size == 0:
        raise BundleError(f"{session.path}: no measured iterations to compare")
    return out


def baseline_history(
    baseline: Session,
    quantile: float = 0.5,
    window: int = HISTORY_WINDOW,
    root: Path | None = None,
) -> list[float]:
    """The ``quantile`` of the measured iterations of every completed session of the
    baseline's configuration, run settings and fingerprint under ``root`` (default: the
    sessions root the baseline lies in), up to and including the baseline (the last
    ``window``), oldest first."""
    root = root if root is not None else baseline.path.parent.parent
    key, fp = run_key(baseline), baseline.meta.get("fingerprint")
    created = str(baseline.meta.get("created_utc") or "")
    candidates: list[Session] = []
    for path in iter_sessions(root):
        try:
            s = Session.load(path)
        except BundleError:
            continue
        if s.status != "completed" or run_key(s) != key or s.meta.get("fingerprint") != fp:
            continue
        if str(s.meta.get("created_utc") or "") > created:
            continue
        candidates.append(s)
    values: list[float] = []
    for s in candidates[-window:]:
        try:
            x = measured_latencies(s)
        except BundleError:
            continue
        values.append(float(np.quantile(x, quantile)))
    return values


# -- evidence ---------------------------------------------------------------------------------
def _label_movers(ops: dict[str, Any] | None, baseline: Session, session: Session) -> None:
    """Name each operator mover by its original ONNX node (``label``, ``original_name``;
    :mod:`aaco.analysis.names`), as the session that ran it knows it."""
    if not ops:
        return
    na, nb = session_op_names(baseline), session_op_names(session)
    for r in ops["top_movers"]:
        r.update((na if r["status"] == "removed" else nb).get(r["name"]).to_json())


def _op_times(session: Session) -> tuple[dict[str, float], dict[str, str], dict[str, float]]:
    ops = session.ops()
    if ops is None or ops.num_rows == 0:
        return {}, {}, {}
    ops = report_ops(ops)
    nodes = op_aggregates(ops, "node_name").select(["node_name", "op_type"])
    kinds = {r["node_name"]: r["op_type"] for r in nodes.to_pylist()}
    # medians over the profiled iterations: one stalled execution is not a mover
    by_node = {k: v / 1e6 for k, v in typical_ns_per_iter(ops, "node_name").items()}
    by_type = {k: v / 1e6 for k, v in typical_ns_per_iter(ops, "op_type").items()}
    return by_node, kinds, by_type


def _kernel_times(session: Session) -> tuple[dict[str, float], dict[str, Any]]:
    kernels = session.table("kernels")
    derived = session.json_file(DERIVED_METRICS_FILE) or {}
    if kernels is None or kernels.num_rows == 0:
        return {}, derived
    iterations = derived.get("iterations")
    summ = kernel_summary(kernels, by="name").select(["name", "total_ns"]).to_pylist()
    if not iterations:
        return {}, derived
    return {r["name"]: r["total_ns"] / 1e6 / iterations for r in summ}, derived


def _mean_kernel_us(session: Session) -> float | None:
    kernels = session.table("kernels")
    if kernels is None or kernels.num_rows == 0:
        return None
    m = pc.mean(kernels.column("dur_ns")).as_py()
    return None if m is None else float(m) / 1e3


def gather_evidence(baseline: Session, session: Session, top: int = TOP_MOVERS) -> dict[str, Any]:
    """Every delta both bundles can support; a ``missing`` list names what they cannot."""
    sa, sb = baseline.summary or {}, session.summary or {}
    _, da = _kernel_times(baseline)
    _, db = _kernel_times(session)
    ta, tb = sa.get("telemetry") or {}, sb.get("telemetry") or {}
    pa_, pb_ = sa.get("profile") or {}, sb.get("profile") or {}
    scalars = {
        "kernel_launches_per_iteration": scalar_delta(
            num(da, "kernels_per_iteration", "mean"),
            num(db, "kernels_per_iteration", "mean"),
            "kernels",
            DERIVED_METRICS_FILE,
        ),
        "avg_kernel_duration_us": scalar_delta(
            _mean_kernel_us(baseline), _mean_kernel_us(session), "us", KERNELS.path
        ),
        "gpu_active_ratio": scalar_delta(
            num(da, "gpu_active_ratio"),
            num(db, "gpu_active_ratio"),
            "fraction",
            DERIVED_METRICS_FILE,
        ),
        "kar": scalar_delta(
            num(da, "kar"), num(db, "kar"), "kernels per node", DERIVED_METRICS_FILE
        ),
        "microkernel_pct": scalar_delta(
            num(da, "microkernel_pct"),
            num(db, "microkernel_pct"),
            "%",
            DERIVED_METRICS_FILE,
        ),
        "operator_time_ms_per_iter": scalar_delta(
            num(pa_, "node_ms_per_iter_p50"),
            num(pb_, "node_ms_per_iter_p50"),
            "ms",
            OPS.path,
        ),
        "framework_overhead_ms": scalar_delta(
            num(pa_, "ort_internal_overhead_ms"),
            num(pb_, "ort_internal_overhead_ms"),
            "ms",
            ORT_RUNS.path,
        ),
        "process_cpu_pct": scalar_delta(
            num(ta, "proc_cpu_pct_mean"),
            num(tb, "proc_cpu_pct_mean"),
            "%",
            SYSTEM_EVENTS.path,
        ),
        "system_cpu_pct": scalar_delta(
            num(ta, "sys_cpu_pct_mean"),
            num(tb, "sys_cpu_pct_mean"),
            "%",
            SYSTEM_EVENTS.path,
        ),
        "involuntary_ctx_switches_per_s": scalar_delta(
            num(ta, "ctx_switches_involuntary_per_s"),
            num(tb, "ctx_switches_involuntary_per_s"),
            "1/s",
            SYSTEM_EVENTS.path,
        ),
        "load_1m_max": scalar_delta(
            num(ta, "load_1m_max"), num(tb, "load_1m_max"), "", SYSTEM_EVENTS.path
        ),
        "cpu_freq_mhz": scalar_delta(
            num(ta, "cpu_freq_mhz_mean"),
            num(tb, "cpu_freq_mhz_mean"),
            "MHz",
            SYSTEM_EVENTS.path,
        ),
        "peak_rss_mib": scalar_delta(
            mib(num(ta, "proc_rss_peak_bytes")),
            mib(num(tb, "proc_rss_peak_bytes")),
            "MiB",
            SYSTEM_EVENTS.path,
        ),
        **machine_scalars(sa, sb),
    }
    missing = sorted(k for k, v in scalars.items() if v["delta"] is None)
    ops_a, kinds_a, types_a = _op_times(baseline)
    ops_b, kinds_b, types_b = _op_times(session)
    kern_a, _ = _kernel_times(baseline)
    kern_b, _ = _kernel_times(session)
    ops = movers(ops_a, ops_b, top, {**kinds_a, **kinds_b}) if ops_a and ops_b else None
    _label_movers(ops, baseline, session)
    op_types = movers(types_a, types_b, top) if types_a and types_b else None
    kernels = movers(kern_a, kern_b, top) if kern_a and kern_b else None
    if ops is None:
        missing.append("operators (an operator profile in both sessions)")
    if kernels is None:
        missing.append("kernels (a kernel trace in both sessions)")
    ba = baseline.json_file(BOTTLENECK_FILE) or {}
    bb = session.json_file(BOTTLENECK_FILE) or {}
    return {
        "scalars": scalars,
        "operators": ops,
        "op_types": op_types,
        "kernels": kernels,
        "bottleneck": {
            "baseline": ba.get("bottleneck_class"),
            "session": bb.get("bottleneck_class"),
            "changed": _class_changed(ba.get("bottleneck_class"), bb.get("bottleneck_class")),
        },
        "model": _model_changes(baseline, session),
        "environment": environment_differences(baseline, session),
        "missing": missing,
    }


def _gpu_mean(summary: dict[str, Any], key: str) -> float | None:
    """The mean of a per-device GPU figure over the devices the run used (all when which
    were used is unknown), from ``summary["gpu"]["devices"]``."""
    listed = as_dict(summary.get("gpu")).get("devices")
    devices = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    used = [d for d in devices if d.get("used") is True] or [
        d for d in devices if d.get("used") is None
    ]
    vals = [v for v in (finite(d.get(key)) for d in used) if v is not None]
    return sum(vals) / len(vals) if vals else None


def machine_scalars(sa: dict[str, Any], sb: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The GPU telemetry's and the scheduler's deltas between two summaries (clocks, power,
    energy per inference, throttling, run-queue wait): evidence for a diff; only the kinds
    of telemetry at least one side has."""
    ga, gb = as_dict(sa.get("gpu")), as_dict(sb.get("gpu"))
    ka, kb = as_dict(sa.get("sched")), as_dict(sb.get("sched"))
    # (evidence key, where: a per-device figure averaged over the used devices, the GPU
    # summary's own, or the scheduler summary's, the figure's key, unit)
    spec = (
        ("gpu_sm_clock_mhz", "device", "sm_clock_mhz_mean", "MHz"),
        ("gpu_clock_ratio", "gpu", "clock_ratio", ""),
        ("gpu_util_pct", "device", "util_gpu_pct_mean", "%"),
        ("gpu_power_w", "gpu", "avg_power_w", "W"),
        ("gpu_energy_per_inference_j", "gpu", "joules_per_inference", "J"),
        ("gpu_throttled_share", "gpu", "throttled_share", ""),
        ("gpu_violation_share", "gpu", "violation_share", ""),
        ("gpu_temp_c_max", "device", "temp_c_max", "degC"),
        ("runqueue_wait_share", "sched", "wait_share", ""),
        ("other_cpu_pct", "sched", "other_cpu_pct_mean", "%"),
    )

    def side(summary: dict[str, Any], gpu: dict[str, Any], sched: dict[str, Any], where: str,
             key: str) -> float | None:  # fmt: skip
        if where == "device":
            return _gpu_mean(summary, key)
        return finite((gpu if where == "gpu" else sched).get(key))

    # a kind of telemetry neither side has is not evidence that is missing (a CPU run has no
    # GPU clocks to compare): its keys are left out rather than listed as unknown
    have = {"device": bool(ga or gb), "gpu": bool(ga or gb), "sched": bool(ka or kb)}
    return {
        name: scalar_delta(
            side(sa, ga, ka, where, key),
            side(sb, gb, kb, where, key),
            unit,
            SCHED_THREADS.path if where == "sched" else GPU_TELEMETRY.path,
        )
        for name, where, key, unit in spec
        if have[where]
    }


def _model_changes(baseline: Session, session: Session) -> dict[str, Any]:
    ma, mb = baseline.model_meta or {}, session.model_meta or {}
    counts = dict_differences(ma.get("op_type_counts"), mb.get("op_type_counts"))
    return {
        "same_file": bool(ma.get("sha256")) and ma.get("sha256") == mb.get("sha256"),
        "sha256": {"baseline": ma.get("sha256"), "session": mb.get("sha256")},
        "node_count": scalar_delta(
            num(ma, "node_count"), num(mb, "node_count"), "nodes", MODEL_META_FILE
        ),
        "op_type_count_changes": counts,
    }


def candidate_causes(
    evidence: dict[str, Any],
    latency_delta_ms: float,
    machines: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Causes the evidence supports, strongest first: each ``{cause, detail}``.

    ``machines`` (:func:`aaco.regress.common.machine_comparison`): runs on different
    machines make "different machine" the first cause, and take the hardware out of
    "environment change"."""
    out: list[dict[str, Any]] = []
    env = evidence["environment"]
    sc = evidence["scalars"]
    machine = None if machines is None else machine_cause(machines)
    if machine is not None:
        out.append(machine)
    if env["run"] or env["backend"]:
        items = [*env["run"], *env["backend"]]
        out.append({"cause": "configuration change", "detail": fmt_diffs(items)})
    software = environment_items(env, machines)
    if software:
        out.append({"cause": "environment change", "detail": fmt_diffs(software)})
    model = evidence["model"]
    ops = evidence.get("operators") or {}
    if not model["same_file"] and (model["op_type_count_changes"] or ops.get("added")):
        n_add, n_rem = len(ops.get("added") or []), len(ops.get("removed") or [])
        out.append(
            {
                "cause": "model change",
                "detail": f"model file differs; {n_add} operator(s) added, {n_rem} removed",
            }
        )
    launches = sc["kernel_launches_per_iteration"]["delta_pct"]
    if launches is not None and launches >= 10:
        out.append(
            {"cause": "launch-bound", "detail": f"kernel launches per iteration {launches:+.0f} %"}
        )
    kdur = sc["avg_kernel_duration_us"]["delta_pct"]
    if kdur is not None and kdur >= 10:
        out.append({"cause": "slower kernels", "detail": f"average kernel duration {kdur:+.0f} %"})
    active = sc["gpu_active_ratio"]["delta"]
    if active is not None and active <= -0.05:
        out.append({"cause": "gpu idle", "detail": f"GPU active ratio {active:+.2f}"})
    freq = sc["cpu_freq_mhz"]["delta_pct"]
    if freq is not None and freq <= -5:
        out.append({"cause": "throttling", "detail": f"CPU clock {freq:+.1f} %"})
    out += gpu_causes(sc)
    inv = sc["involuntary_ctx_switches_per_s"]
    load = sc["load_1m_max"]
    if (
        inv["delta_pct"] is not None and inv["delta_pct"] >= 100 and (inv["session"] or 0) >= 50
    ) or (load["delta"] is not None and load["delta"] >= 1.0):
        parts = []
        if inv["delta_pct"] is not None:
            parts.append(f"involuntary context switches {inv['delta_pct']:+.0f} %")
        if load["delta"] is not None:
            parts.append(f"1-min load {load['baseline']:.2f} -> {load['session']:.2f}")
        out.append({"cause": "cpu contention", "detail": ", ".join(parts)})
    wait = sc.get("runqueue_wait_share") or {}
    if (
        wait.get("delta") is not None
        and wait["delta"] >= 0.05
        and (wait.get("session") or 0.0) >= WAIT_SHARE_CONTENDED
    ):
        out.append(
            {
                "cause": "cpu contention",
                "detail": f"run-queue wait {wait['baseline']:.0%} -> {wait['session']:.0%} of "
                "the worker's runnable time",
            }
        )
    if ops.get("top_movers") and latency_delta_ms:
        top = ops["top_movers"][0]
        share = top["delta_ms"] / latency_delta_ms
        # above 150 % the operator profile and the timed runs disagree (another pass, a
        # stall): no single operator can then be said to explain the change
        if 0.4 <= share <= 1.5:
            out.append(
                {
                    "cause": "operator",
                    "detail": f"{top.get('label') or top['name']} ({top['kind'] or '?'}) "
                    f"{top['delta_ms']:+.3f} ms "
                    f"per iteration, {share:.0%} of the latency change",
                }
            )
    return out


def gpu_causes(sc: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """Candidate causes in the GPU telemetry's deltas: lower clocks or more time throttled
    (throttling), more energy per inference (power)."""
    out: list[dict[str, str]] = []
    parts = []
    clock = sc.get("gpu_sm_clock_mhz") or {}
    if clock.get("delta_pct") is not None and clock["delta_pct"] <= -5:
        parts.append(f"GPU SM clock {clock['delta_pct']:+.1f} %")
    for key, what in (
        ("gpu_throttled_share", "throttled"),
        ("gpu_violation_share", "in violation"),
    ):
        d = sc.get(key) or {}
        if d.get("delta") is not None and d["delta"] >= 0.1:
            parts.append(f"time {what} {d['baseline']:.0%} -> {d['session']:.0%}")
    if parts:
        out.append({"cause": "throttling", "detail": ", ".join(parts)})
    energy = sc.get("gpu_energy_per_inference_j") or {}
    if energy.get("delta_pct") is not None and energy["delta_pct"] >= 10:
        out.append(
            {
                "cause": "energy",
                "detail": f"GPU energy per inference {energy['delta_pct']:+.0f} % "
                f"({energy['baseline']:.3g} -> {energy['session']:.3g} J)",
            }
        )
    return out


def _class_changed(a: Any, b: Any) -> bool:
    """A bottleneck shift needs a known class on both sides (unknown -> X is no shift)."""
    known = {None, "", "unknown"}
    return a not in known and b not in known and a != b


def _setting_differences(a: Session, b: Session) -> list[dict[str, Any]]:
    ra, rb = a.meta.get("run") or {}, b.meta.get("run") or {}
    keys = ("model", "backend")
    out = dict_differences(
        {k: (a.meta.get(k) or {}).get("name") for k in keys},
        {k: (b.meta.get(k) or {}).get("name") for k in keys},
    )
    return out + dict_differences(
        {k: ra.get(k) for k in RUN_SETTINGS}, {k: rb.get(k) for k in RUN_SETTINGS}
    )


def cpu_contention(session: Session) -> float | None:
    """Other processes' share of the machine's CPU during the measured phase (0-1): the
    system's busy share minus the worker's own (docs/bottleneck_taxonomy.md); None without
    telemetry or a CPU count."""
    tel = as_dict((session.summary or {}).get("telemetry"))
    cpu = as_dict(as_dict(session.env).get("cpu"))
    sys_cpu, proc_cpu = finite(tel.get("sys_cpu_pct_mean")), finite(tel.get("proc_cpu_pct_mean"))
    cores = finite(cpu.get("logical_cores"))
    if sys_cpu is None or proc_cpu is None or not cores:
        return None
    return telemetry.cpu_contention(sys_cpu, proc_cpu, cores)


def contention_guard(baseline: Session, session: Session, verdict: str) -> str | None:
    """Why a REGRESSION or IMPROVEMENT cannot be trusted, or None.

    Measurement validity comes first (as in the bottleneck classifier), in order of the
    directness of the evidence: a side whose worker waited 10 % or more of its runnable time
    on a run queue while other tasks held its CPUs (scheduler telemetry); a side whose noise
    sentinel saw the machine change speed during the run (``aaco run --isolate``); and, from
    the system sampler alone, other processes using a fifth or more of the machine during the
    slower side's measured phase, a tenth of it more than during the faster side's (or half
    of it on either side). The change may then be the machine's: INCONCLUSIVE.
    """
    sa, sb = as_dict(baseline.summary), as_dict(session.summary)
    return (
        sched_reason(sa.get("sched"), sb.get("sched"), verdict)
        or sentinel_reason(baseline.meta.get("capsule"), session.meta.get("capsule"), verdict)
        or contention_reason(cpu_contention(baseline), cpu_contention(session), verdict)
    )


RECOMMEND_AB = (
    "One run a side of a multi-modal latency cannot tell a code change from the process "
    'landing in another mode: run both sides interleaved, aaco ab --a "<A\'s run options>" '
    '--b "<B\'s run options>", or several runs a side (aaco run --repeat 3, then diff '
    "-b B1 -b B2 -b B3 -s S1 -s S2 -s S3)."
)


def cold_start_modes(
    a: list[np.ndarray[Any, Any]], b: list[np.ndarray[Any, Any]], delta: float = 0.0
) -> dict[str, Any] | None:
    """The cold-start guard (one run a side, no history): when either run's latencies are
    multi-modal, or the pooled latencies are and a run spans both modes (their shares then
    differ between the runs), the mode a process lands in is noise this diff cannot measure,
    so a REGRESSION or IMPROVEMENT is not trusted. Returns the mode shares and the warning,
    or None when the runs show one mode each, or when the sides are separated beyond the
    margin ``delta`` (the session's p10 above the baseline's p90, or its p90 below the
    baseline's p10: no mode of one run explains the other's)."""
    xa, xb = np.concatenate(a), np.concatenate(b)
    a10, a90 = np.quantile(xa, [0.1, 0.9])
    b10, b90 = np.quantile(xb, [0.1, 0.9])
    if b10 > a90 * (1 + delta) or b90 < a10 * (1 - delta):
        return None
    bim_a, bim_b = is_bimodal(xa), is_bimodal(xb)
    shares = mode_shares(xa, xb)
    spans = shares is not None and (
        spans_modes(xa, shares["split"]) or spans_modes(xb, shares["split"])
    )
    if not (bim_a or bim_b or spans):
        return None
    which = (
        " and ".join(n for n, f in (("baseline", bim_a), ("session", bim_b)) if f)
        or "the runs together"
    )
    detail = ""
    if shares is not None:
        detail = (
            f"; iterations above {shares['split']:.3g} ms (the slower mode): baseline "
            f"{shares['baseline_slow_share']:.0%}, session {shares['session_slow_share']:.0%}"
        )
    return {
        "baseline_bimodal": bim_a,
        "session_bimodal": bim_b,
        **(shares or {}),
        "warning": "COLD START ON A MULTI-MODAL LATENCY: one run a side, no history, and "
        f"{which} show more than one mode{detail}; which mode a process lands in varies "
        "from run to run, so the verdict is INCONCLUSIVE: run aaco ab (interleaved runs) or "
        "aaco run --repeat 3 on each side",
    }


def _recommendation(verdict: str, suspected: str | None, contended: bool) -> str | None:
    if contended:
        return RECOMMEND["cpu contention"]
    if verdict == REGRESSION:
        return RECOMMEND.get(suspected or "") or (
            "No cause stands out in the evidence both bundles hold: profile both sides "
            "(operators, and kernels on a GPU) and compare the top movers."
        )
    if verdict == INCONCLUSIVE:
        return RECOMMEND.get(suspected or "") or (
            "The interval straddles the margin: rerun both sides with more iterations, or "
            "several runs per side (aaco run --repeat 3), to narrow it."
        )
    return None


# -- verdict ------------------------------------------------------------------------------------


def confidence(c: Comparison) -> float:
    """Bootstrap support for the statistical verdict: 1 - the (Holm-adjusted) one-sided p
    behind it; for INCONCLUSIVE, the best support any outcome got (below the bar)."""
    gated = [c.metrics[g] for g in c.gates]

    def reg(m: MetricShift) -> float:
        return m.p_regression_holm if m.p_regression_holm is not None else m.p_regression

    def imp(m: MetricShift) -> float:
        return m.p_improvement_holm if m.p_improvement_holm is not None else m.p_improvement

    if c.verdict == REGRESSION:
        return 1.0 - min(reg(m) for m in gated)
    if c.verdict == IMPROVEMENT:
        return 1.0 - min(imp(m) for m in gated)
    if c.verdict == NO_CHANGE:
        return 1.0 - max(m.p_equivalence for m in gated)
    return 1.0 - min(min(reg(m), imp(m), m.p_equivalence) for m in gated)


def _kind_label(s: Session) -> str:
    return (
        f"a serving session ({s.session_id})"
        if serving.is_serving(s)
        else f"a model run ({s.session_id})"
    )


def diff_sessions(
    baseline: Session | Sequence[Session],
    session: Session | Sequence[Session],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    gates: Sequence[str] | None = None,
    baseline_name: str | None = None,
    sessions_root: Path | None = None,
    allow_model_change: bool = False,
    use_history: bool = True,
    check_contention: bool = True,
    point: str | None = None,
) -> dict[str, Any]:
    """The full diff (``regress/diff.json``); its ``verdict`` key is ``regress/verdict.json``.

    Each side is one session or several runs of one configuration (pooled by a two-stage
    bootstrap, which puts run-to-run variation into the interval). Evidence, references and
    the noise floor come from the first session of each side. Serving sessions are compared
    by :func:`diff_serving` (``gates`` then read ``METRIC:QUANTILE``, ``point`` picks the load
    point); a serving session and a model run cannot be compared (UsageError).
    """
    bases, news = as_list(baseline), as_list(session)
    check_sides(bases, news)
    kinds = {serving.is_serving(s) for s in [*bases, *news]}
    if len(kinds) > 1:
        odd = next(
            s for s in [*bases, *news] if serving.is_serving(s) != serving.is_serving(bases[0])
        )
        raise UsageError(
            f"cannot compare {_kind_label(bases[0])} with {_kind_label(odd)}: aaco diff "
            "compares sessions of one kind"
        )
    if True in kinds:
        return diff_serving(
            bases,
            news,
            threshold=threshold,
            gates=gates,
            baseline_name=baseline_name,
            sessions_root=sessions_root,
            allow_model_change=allow_model_change,
            use_history=use_history,
            check_contention=check_contention,
            point=point,
        )
    if point is not None:
        raise UsageError("--point picks a load point of serving sessions; these are model runs")
    gates = DEFAULT_GATES if gates is None else gates
    for s in bases:
        usable_session(s, "baseline")
    for s in news:
        usable_session(s, "session")
    for label, side in (("baseline", bases), ("session", news)):
        if len({run_key(s) for s in side}) > 1:
            odd = next(s for s in side if run_key(s) != run_key(side[0]))
            what = fmt_diffs(_setting_differences(side[0], odd)) or "model, backend or batch"
            raise UsageError(
                f"the {label} runs are of different configurations and cannot be pooled "
                f"({side[0].session_id} vs {odd.session_id}: {what})"
            )
    first_a, first_b = bases[0], news[0]
    name_a = (first_a.meta.get("model") or {}).get("name")
    name_b = (first_b.meta.get("model") or {}).get("name")
    if name_a != name_b and not allow_model_change:
        raise UsageError(
            f"the bundles profile different models ({name_a!r} vs {name_b!r}); "
            "pass --allow-model-change to compare them anyway"
        )
    a = [measured_latencies(s) for s in bases]
    b = [measured_latencies(s) for s in news]
    gate_list = list(gates)
    if gate_list and gate_list[0] not in QUANTILES:
        raise UsageError(f"unknown gate {gate_list[0]!r}; choose from {', '.join(QUANTILES)}")
    q = QUANTILES[gate_list[0]] if gate_list else 0.5
    # the root named (--sessions) when the baseline lies in it, else the baseline's own
    in_root = sessions_root is not None and first_a.path.resolve().is_relative_to(
        sessions_root.resolve()
    )
    history_root = sessions_root if in_root else None
    history = baseline_history(first_a, q, root=history_root) if use_history else []
    floor = noise_floor(history)
    # with POOLED_RUNS runs on each side the two-stage bootstrap already holds the
    # run-to-run variation the floor stands for: adding it would count that noise twice
    floor_applied = floor is not None and min(len(bases), len(news)) < POOLED_RUNS
    delta = max(threshold, floor if floor_applied and floor is not None else 0.0)
    # a floor of 100 % or more: past sessions of this configuration differ by 2x or more
    # from one to the next, so no difference between two of them means anything
    too_noisy = delta >= MAX_MARGIN
    try:
        comp = compare(a, b, delta=min(delta, MAX_MARGIN - 1e-9), gates=gates)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    baseline, session = first_a, first_b
    warnings = list(comp.warnings)
    evidence = gather_evidence(baseline, session)
    env = evidence["environment"]
    machines = machine_comparison(bases, news)
    fps = {x.meta.get("fingerprint") for x in [*bases, *news]}
    warnings[:0] = software_warnings(env, machines, fps)
    ka, kb = config_key(baseline), config_key(session)
    if ka[1:] != kb[1:]:
        warnings.insert(0, f"different configuration: backend/batch {ka[1:]} vs {kb[1:]}")
    if name_a != name_b:
        warnings.insert(0, f"different models compared: {name_a!r} vs {name_b!r}")
    prim = comp.primary
    latency_delta_ms = prim.session - prim.baseline
    median = comp.metrics["p50"]
    final = comp.verdict
    if too_noisy:
        warnings.insert(
            0,
            f"HISTORY TOO NOISY TO JUDGE: the learned noise floor is {delta * 100:.0f} % "
            f"(this configuration's past sessions differ by 2x or more from one to the "
            "next); quiet the machine or pool runs (aaco run --repeat 3)",
        )
        final = INCONCLUSIVE
    cold = min(comp.runs) == 1 and floor is None
    modes = cold_start_modes(a, b, delta) if cold else None
    if modes is not None and final in (REGRESSION, IMPROVEMENT):
        warnings.insert(0, modes["warning"])
        final = INCONCLUSIVE
    contention = contention_guard(baseline, session, final) if check_contention else None
    if contention is not None:
        warnings.insert(0, contention)
        final = INCONCLUSIVE
    # runs on different machines come first of all: the rest reads differently after it
    warnings[:0] = machine_warnings(machines)
    causes = (
        candidate_causes(evidence, median.session - median.baseline, machines)
        if final != NO_CHANGE
        else []
    )
    suspected = causes[0]["cause"] if causes else None
    conf = confidence(comp)
    label = confidence_label(conf)
    if final == INCONCLUSIVE:
        label = "low"
    elif min(comp.runs) < POOLED_RUNS and floor is None and label == "high":
        # too few processes per side and no history: the interval holds the iterations'
        # noise, not the process-to-process variation, so a narrow interval is not certainty
        label = "medium"
        warnings.append(
            f"{min(comp.runs)} run(s) on a side and no history of the baseline's "
            "configuration: the interval does not hold run-to-run variation; repeat runs "
            "(aaco run --repeat 3, then -b B1 -b B2 -b B3 -s S1 -s S2 -s S3) or diff against "
            "a baseline with 5 or more past sessions for a learned noise floor"
        )
    lo, hi = prim.ci_pct
    verdict = {
        "regression": final == REGRESSION,
        "verdict": final,
        "severity": severity(final, prim.delta_pct),
        # an INCONCLUSIVE verdict claims nothing: no confidence; what the statistics alone
        # said (before the shape and contention guards) stays beside it
        "confidence": None if final == INCONCLUSIVE else conf,
        "confidence_label": label,
        "statistical_verdict": comp.verdict,
        "statistical_confidence": conf,
        "metric": prim.name,
        "latency_delta_pct": prim.delta_pct,
        "latency_delta_ms": latency_delta_ms,
        "median_delta_pct": comp.metrics["p50"].delta_pct,
        "median_ci_pct": list(comp.metrics["p50"].ci_pct),
        "ci_pct": [lo, hi],
        "p_value": verdict_p(comp),
        "measurement_valid": contention is None,
        "welch_p_value": comp.welch.p_value,
        "threshold_pct": threshold * 100.0,
        "noise_floor_pct": None if floor is None else floor * 100.0,
        "margin_pct": delta * 100.0,
        "suspected_cause": suspected,
        "candidate_causes": causes,
        "evidence": _headline_evidence(evidence),
        "recommendation": RECOMMEND_AB
        if modes is not None and final == INCONCLUSIVE and contention is None
        else _recommendation(final, suspected, contention is not None),
        "modes": None if modes is None else {k: v for k, v in modes.items() if k != "warning"},
        "baseline": {
            "session_id": baseline.session_id,
            "name": baseline_name,
            "runs": [x.session_id for x in bases],
        },
        "session": {"session_id": session.session_id, "runs": [x.session_id for x in news]},
        "machines": machines,
        "warnings": warnings,
        "exit_code": EXIT_CODES[final],
    }
    out = {
        "summary": "",
        "diff_format_version": 1,
        "created_utc": utc_now_iso(),
        "aaco_version": __version__,
        "verdict": verdict,
        "comparison": comp.to_json(),
        "noise_floor": {
            "history_sessions": len(history),
            "applied": floor_applied,
            "floor_pct": None if floor is None else floor * 100.0,
            "quantile": comp.gates[0],
            "rule": "3 x 1.4826 x MAD of the differences of consecutive past sessions' log "
            "gating quantile (>= 5 sessions): three standard deviations of the log ratio of "
            "two sessions, robust to drifts and level shifts",
        },
        "evidence": evidence,
        "baseline_ref": reference(baseline, sessions_root, baseline_name),
        "warnings": warnings,
    }
    out["summary"] = verdict_line(out)
    return out


def _headline_evidence(evidence: dict[str, Any]) -> dict[str, Any]:
    """The design documents' compact ``evidence`` object: the known deltas, in % or units."""
    out: dict[str, Any] = {}
    for key, v in evidence["scalars"].items():
        if v["delta"] is None:
            continue
        out[f"{key}_delta_pct" if v["delta_pct"] is not None else f"{key}_delta"] = (
            v["delta_pct"] if v["delta_pct"] is not None else v["delta"]
        )
    for key, singular in (("operators", "operator"), ("kernels", "kernel")):
        mv = evidence.get(key)
        if mv and mv["top_movers"]:
            t = mv["top_movers"][0]
            out[f"top_{singular}_mover"] = {
                "name": t["name"],
                **({"label": t["label"]} if "label" in t else {}),
                "delta_ms": t["delta_ms"],
            }
            out[f"{key}_added"] = len(mv["added"])
            out[f"{key}_removed"] = len(mv["removed"])
    if evidence["bottleneck"]["changed"]:
        out["bottleneck_shift"] = [
            evidence["bottleneck"]["baseline"],
            evidence["bottleneck"]["session"],
        ]
    out["unknown"] = evidence["missing"]
    return out


def write_diff(session: Session, diff: dict[str, Any], refresh_reports: bool = True) -> None:
    """Write the three regress/ files into the session's bundle (each atomically), then
    re-render its report/ copies so that they show the verdict."""
    root = session.path
    atomic_write_json(root / DIFF_FILE, diff)
    atomic_write_json(root / VERDICT_FILE, diff["verdict"])
    atomic_write_json(root / BASELINE_REF_FILE, diff["baseline_ref"])
    if refresh_reports:
        write_reports(root)
