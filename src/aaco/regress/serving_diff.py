"""``aaco diff`` of serving sessions: per-request TTFT, TPOT and e2e and windowed output
throughput at one load point, each through :func:`aaco.analysis.compare.compare`, judged
with the failed-request share as one Holm family (docs/methodology.md, "Serving sessions").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from aaco import __version__
from aaco.analysis import telemetry
from aaco.analysis.compare import (
    IMPROVEMENT,
    INCONCLUSIVE,
    MIN_SAMPLES,
    NO_CHANGE,
    QUANTILES,
    REGRESSION,
    Comparison,
    Family,
    GateTest,
    MetricShift,
    compare,
    judge_family,
    noise_floor,
)
from aaco.analysis.evidence import dict_differences, scalar_delta
from aaco.errors import BundleError, UsageError
from aaco.regress import serving
from aaco.regress.baseline import config_key, reference, usable_session
from aaco.regress.common import (
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
    severity,
    software_warnings,
    verdict_p,
)
from aaco.report.regress import verdict_line
from aaco.session.bundle import Session, iter_sessions, utc_now_iso
from aaco.session.paths import SERVING_SUMMARY_FILE
from aaco.session.schema import GPU_TELEMETRY, SYSTEM_EVENTS


def _sps() -> Any:
    """scipy.stats, imported when first needed: it takes ~0.5-1 s to import, and most
    commands never reach a statistical test."""
    from scipy import stats

    return stats


__all__ = ["DEFAULT_GATES", "diff_serving", "parse_serving_gates", "serving_history"]

DEFAULT_GATES = serving.DEFAULT_GATES

_SERVING_RECOMMEND = {
    "queueing or prefill": "Requests waited longer for their first token while decoding "
    "kept its pace: look at the server's scheduling, prefill (prompt length, prefix cache) "
    "and queue depth (serving/server_metrics.parquet: waiting requests, KV-cache use).",
    "slower decode": "Each output token took longer: check the batch the server decodes "
    "(concurrency, max batch size), kernels, data types and clocks of the serving build.",
    "client overload": "The load generator itself was saturated: its timestamps are late; "
    "lower the load or run the client on a machine of its own.",
    "failed requests": "More requests failed: read the errors in "
    "metrics/serving_summary.json (timeouts, HTTP 5xx) before trusting the latencies of "
    "the ones that succeeded.",
}


#: a side whose failed share reaches this makes the survivors' latencies suspect
FAILED_SHARE_WARN = 0.05
#: samples beyond an upper gating quantile under which its interval rests on too few
TAIL_SAMPLES = 10


def parse_serving_gates(gates: Sequence[str] | None) -> dict[str, tuple[str, ...]]:
    """``METRIC:QUANTILE`` gates (default :data:`serving.DEFAULT_GATES`) by metric, in order."""
    out: dict[str, list[str]] = {}
    metrics = ", ".join(serving.METRICS)
    for g in gates or serving.DEFAULT_GATES:
        metric, sep, q = g.strip().partition(":")
        if not sep:
            raise UsageError(
                f"gate {g!r}: serving sessions gate on METRIC:QUANTILE, e.g. ttft:p99 "
                f"(metrics: {metrics}; quantiles: {', '.join(QUANTILES)})"
            )
        if metric not in serving.METRICS:
            raise UsageError(f"gate {g!r}: unknown metric {metric!r}; choose from {metrics}")
        if q not in QUANTILES:
            raise UsageError(
                f"gate {g!r}: unknown quantile {q!r}; choose from {', '.join(QUANTILES)}"
            )
        out.setdefault(metric, []).append(q)
    return {m: tuple(dict.fromkeys(qs)) for m, qs in out.items()}


def serving_history(
    baseline: Session, point: int, root: Path | None = None, window: int = HISTORY_WINDOW
) -> list[tuple[Session, int]]:
    """The completed serving sessions under ``root`` (default: the baseline's sessions root)
    with the baseline's fingerprint and settings at its load point ``point``, up to and
    including the baseline (the last ``window``), oldest first: ``(session, its point)``."""
    root = root if root is not None else baseline.path.parent.parent
    want = serving.history_key(baseline, point)
    fp = baseline.meta.get("fingerprint")
    created = str(baseline.meta.get("created_utc") or "")
    load = serving.point_load(baseline, point)
    found: list[tuple[Session, int]] = []
    for path in iter_sessions(root):
        try:
            s = Session.load(path)
            if (
                not serving.is_serving(s)
                or s.status != "completed"
                or s.meta.get("fingerprint") != fp
                or str(s.meta.get("created_utc") or "") > created
                or config_key(s) != config_key(baseline)
            ):
                continue
            p = serving.matching_point(s, load, single=False)
            if serving.history_key(s, p) == want:
                found.append((s, p))
        except (BundleError, UsageError):
            continue
    return found[-window:]


def _history_values(past: Sequence[tuple[Session, int]], metric: str, q: float) -> list[float]:
    values: list[float] = []
    for s, p in past:
        try:
            v = serving.quantile_value(s, p, metric, q)
        except BundleError:
            continue
        if v is not None:
            values.append(v)
    return values


def _serving_telemetry(session: Session, point: int) -> dict[str, Any] | None:
    """The system sampler's summary over ``point``'s phase (the whole run when unknown)."""
    events = session.system_events()
    if events is None or events.num_rows == 0:
        return None
    phases = as_dict(session.meta.get("phases"))
    window = phases.get(f"point{point}") or phases.get("measured")
    if isinstance(window, list) and len(window) == 2:
        return telemetry.summarize_system(events, (int(window[0]), int(window[1])))
    return telemetry.summarize_system(events)


def serving_contention(session: Session, point: int) -> float | None:
    """Other processes' share of the CPU during ``point`` (0-1), when the sampler watched the
    server (a client-side sample cannot say what the server met); else None."""
    if as_dict(session.meta.get("telemetry")).get("process") != "server":
        return None
    tel = _serving_telemetry(session, point) or {}
    sys_cpu, proc_cpu = finite(tel.get("sys_cpu_pct_mean")), finite(tel.get("proc_cpu_pct_mean"))
    cores = finite(as_dict(as_dict(session.env).get("cpu")).get("logical_cores"))
    if sys_cpu is None or proc_cpu is None or not cores:
        return None
    return telemetry.cpu_contention(sys_cpu, proc_cpu, cores)


def _unit_json(c: Comparison, unit: str, gating: bool) -> dict[str, Any]:
    """``c.to_json()`` in ``unit`` (``baseline``/``session`` for other units than ms), its
    verdicts null when it does not gate."""
    out = c.to_json()
    out["unit"] = unit
    for m in out["metrics"].values():
        if unit != "ms":
            m["baseline"], m["session"] = m.pop("baseline_ms"), m.pop("session_ms")
        if not gating:
            m["verdict"] = m["p_regression_holm"] = m["p_improvement_holm"] = None
    if not gating:
        out.update(verdict=None, gates=[], requested_gates=[], primary=None)
    return out


def _quantiles_json(x: np.ndarray[Any, Any]) -> dict[str, float] | None:
    if x.size == 0:
        return None
    return {
        k: float(v)
        for k, v in zip(QUANTILES, np.quantile(x, list(QUANTILES.values())), strict=True)
    }


def _serving_confidence(family: Family) -> float:
    """:func:`confidence` over every gate and test of a family."""
    gates = [m for c in family.comparisons.values() for m in (c.metrics[g] for g in c.gates)]
    tests = list(family.tests.values())

    def pr(p: float | None, raw: float) -> float:
        return raw if p is None else p

    reg = [pr(m.p_regression_holm, m.p_regression) for m in gates]
    reg += [pr(t.p_regression_holm, t.p_regression) for t in tests]
    imp = [pr(m.p_improvement_holm, m.p_improvement) for m in gates]
    imp += [pr(t.p_improvement_holm, t.p_improvement) for t in tests]
    if family.verdict == REGRESSION:
        return 1.0 - min(reg)
    if family.verdict == IMPROVEMENT:
        return 1.0 - min(imp)
    # the failure test claims no equivalence of its own: the quantile gates carry it, and
    # an INCONCLUSIVE family's best support is among them
    if family.verdict == NO_CHANGE:
        return 1.0 - max(m.p_equivalence for m in gates)
    return 1.0 - min(
        min(
            pr(m.p_regression_holm, m.p_regression),
            pr(m.p_improvement_holm, m.p_improvement),
            m.p_equivalence,
        )
        for m in gates
    )


def _client_warnings(session: Session, point: int) -> list[str]:
    client = as_dict(serving.point_summary(session, point).get("client"))
    return [str(w) for w in client.get("warnings") or []]


def _serving_scalars(a: Session, pa_: int, b: Session, pb: int) -> dict[str, dict[str, Any]]:
    ta, tb = _serving_telemetry(a, pa_) or {}, _serving_telemetry(b, pb) or {}
    sa, sb = serving.point_summary(a, pa_), serving.point_summary(b, pb)
    src = SERVING_SUMMARY_FILE
    tsrc = SYSTEM_EVENTS.path

    def per_request(p: dict[str, Any], key: str) -> float | None:
        total, ok = num(p, "throughput", key), num(p, "requests", "ok")
        return total / ok if total is not None and ok else None

    def client(p: dict[str, Any], *keys: str) -> float | None:
        return num(as_dict(p.get("client")), *keys)

    return {
        "achieved_rate_per_s": scalar_delta(
            num(sa, "rate", "achieved"), num(sb, "rate", "achieved"), "1/s", src
        ),
        "output_tokens_per_request": scalar_delta(
            per_request(sa, "output_tokens"), per_request(sb, "output_tokens"), "tokens", src
        ),
        "prompt_tokens_per_request": scalar_delta(
            per_request(sa, "prompt_tokens"), per_request(sb, "prompt_tokens"), "tokens", src
        ),
        "client_cpu_pct": scalar_delta(client(sa, "cpu_pct"), client(sb, "cpu_pct"), "%", src),
        "client_loop_lag_p99_ms": scalar_delta(
            client(sa, "loop_lag_ms", "p99"), client(sb, "loop_lag_ms", "p99"), "ms", src
        ),
        "process_cpu_pct": scalar_delta(
            num(ta, "proc_cpu_pct_mean"), num(tb, "proc_cpu_pct_mean"), "%", tsrc
        ),
        "system_cpu_pct": scalar_delta(
            num(ta, "sys_cpu_pct_mean"), num(tb, "sys_cpu_pct_mean"), "%", tsrc
        ),
        "involuntary_ctx_switches_per_s": scalar_delta(
            num(ta, "ctx_switches_involuntary_per_s"),
            num(tb, "ctx_switches_involuntary_per_s"),
            "1/s",
            tsrc,
        ),
        "load_1m_max": scalar_delta(num(ta, "load_1m_max"), num(tb, "load_1m_max"), "", tsrc),
        "cpu_freq_mhz": scalar_delta(
            num(ta, "cpu_freq_mhz_mean"), num(tb, "cpu_freq_mhz_mean"), "MHz", tsrc
        ),
        "peak_rss_mib": scalar_delta(
            mib(num(ta, "proc_rss_peak_bytes")),
            mib(num(tb, "proc_rss_peak_bytes")),
            "MiB",
            tsrc,
        ),
        **_gpu_scalars(sa, sb),
    }


def _gpu_scalars(sa: dict[str, Any], sb: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The load point's GPU energy (the collector's counters over that point's window):
    joules per output token and per request, power, clocks, throttling; only when a side
    has it (a CPU server has no GPU figures to be missing)."""
    ga, gb = as_dict(sa.get("gpu")), as_dict(sb.get("gpu"))
    if not (ga or gb):
        return {}
    src = GPU_TELEMETRY.path
    keys = (
        ("gpu_energy_per_output_token_j", "joules_per_output_token", "J"),
        ("gpu_energy_per_request_j", "joules_per_request", "J"),
        ("gpu_power_w", "avg_power_w", "W"),
        ("gpu_clock_ratio", "clock_ratio", ""),
        ("gpu_throttled_share", "throttled_share", ""),
    )
    return {
        name: scalar_delta(finite(ga.get(key)), finite(gb.get(key)), unit, src)
        for name, key, unit in keys
    }


def _serving_causes(
    evidence: dict[str, Any],
    family: Family,
    failures_rose: bool,
    machines: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Causes the evidence supports, strongest first: each ``{cause, detail}``; runs on
    different machines (``machines``) make "different machine" the first."""
    out: list[dict[str, Any]] = []
    env = evidence["environment"]
    machine = None if machines is None else machine_cause(machines)
    if machine is not None:
        out.append(machine)
    settings = [d for d in evidence["settings"] if not d["key"].startswith(_SIZE_KEYS)]
    if settings or env["run"] or env["backend"]:
        items = [*settings, *env["run"], *env["backend"]]
        out.append({"cause": "configuration change", "detail": fmt_diffs(items)})
    software = environment_items(env, machines)
    if software:
        out.append({"cause": "environment change", "detail": fmt_diffs(software)})
    if failures_rose:
        f = evidence["failures"]
        out.append(
            {
                "cause": "failed requests",
                "detail": f"failed requests {f['baseline']['fraction']:.1%} -> "
                f"{f['session']['fraction']:.1%}",
            }
        )
    comps = family.comparisons
    ttft, tpot = comps.get("ttft"), comps.get("tpot")
    if (
        ttft is not None
        and ttft.verdict == REGRESSION
        and (tpot is None or tpot.verdict != REGRESSION)
    ):
        m = ttft.primary
        out.append(
            {
                "cause": "queueing or prefill",
                "detail": f"ttft {m.name} {m.delta_pct:+.1f} % while time per output token "
                + ("held" if tpot is not None else "is unknown"),
            }
        )
    if tpot is not None and tpot.verdict == REGRESSION:
        m = tpot.primary
        out.append({"cause": "slower decode", "detail": f"tpot {m.name} {m.delta_pct:+.1f} %"})
    sc = evidence["scalars"]
    # the load generator's own health, as aaco llm bench judged it (aaco.serving.load)
    client = evidence["client_warnings"]
    busy = [f"{side}: {w}" for side in ("baseline", "session") for w in client[side]]
    if busy:
        out.append({"cause": "client overload", "detail": "; ".join(busy)})
    freq = sc["cpu_freq_mhz"]["delta_pct"]
    if freq is not None and freq <= -5:
        out.append({"cause": "throttling", "detail": f"CPU clock {freq:+.1f} %"})
    throttled = sc.get("gpu_throttled_share") or {}
    if throttled.get("delta") is not None and throttled["delta"] >= 0.1:
        out.append(
            {
                "cause": "throttling",
                "detail": f"GPU time throttled {throttled['baseline']:.0%} -> "
                f"{throttled['session']:.0%}",
            }
        )
    energy = sc.get("gpu_energy_per_output_token_j") or {}
    if energy.get("delta_pct") is not None and energy["delta_pct"] >= 10:
        out.append(
            {
                "cause": "energy",
                "detail": f"GPU energy per output token {energy['delta_pct']:+.0f} % "
                f"({energy['baseline']:.3g} -> {energy['session']:.3g} J)",
            }
        )
    inv, load = sc["involuntary_ctx_switches_per_s"], sc["load_1m_max"]
    if (
        inv["delta_pct"] is not None and inv["delta_pct"] >= 100 and (inv["session"] or 0) >= 50
    ) or (load["delta"] is not None and load["delta"] >= 1.0):
        parts = []
        if inv["delta_pct"] is not None:
            parts.append(f"involuntary context switches {inv['delta_pct']:+.0f} %")
        if load["delta"] is not None:
            parts.append(f"1-min load {load['baseline']:.2f} -> {load['session']:.2f}")
        out.append({"cause": "cpu contention", "detail": ", ".join(parts)})
    return out


_SIZE_KEYS = tuple(
    f"load.{k}" for k in ("requests", "duration_s", "warmup_requests", "warmup_s", "seed")
)


def _serving_recommendation(verdict: str, suspected: str | None, contended: bool) -> str | None:
    if contended:
        return RECOMMEND["cpu contention"]
    known = _SERVING_RECOMMEND.get(suspected or "") or RECOMMEND.get(suspected or "")
    if verdict == REGRESSION:
        return known or (
            "No cause stands out in the evidence both bundles hold: compare the servers' "
            "logs and metrics (serving/server_metrics.parquet) over the two runs."
        )
    if verdict == INCONCLUSIVE:
        return known or (
            "The interval straddles the margin: send more requests (a p99 needs about 1000), "
            "or take several runs per side, to narrow it."
        )
    return None


def _resolve_points(
    bases: list[Session], news: list[Session], point: str | None
) -> tuple[dict[str, Any], dict[Path, int]]:
    """The load compared and each run's point at it: the baseline's first point (or
    ``--point``), every other run's at the same load (:func:`serving.matching_point`), or
    each run's own ``--point concurrency=N``."""
    first = bases[0]
    p0 = serving.resolve_point(first, point)
    load = serving.point_load(first, p0)
    by_value = point is not None and "=" in point
    single = all(len(serving.points(s)) == 1 for s in [*bases, *news])
    pts: dict[Path, int] = {first.path: p0}
    for s in [*bases[1:], *news]:
        pts[s.path] = (
            serving.resolve_point(s, point) if by_value else serving.matching_point(s, load, single)
        )
    for label, side in (("baseline", bases), ("session", news)):
        ref = serving.identity_settings(side[0], pts[side[0].path])
        for s in side[1:]:
            other = serving.identity_settings(s, pts[s.path])
            if other != ref or config_key(s) != config_key(side[0]):
                what = fmt_diffs(dict_differences(ref, other)) or "model or backend"
                raise UsageError(
                    f"the {label} runs are of different configurations and cannot be pooled "
                    f"({side[0].session_id} vs {s.session_id}: {what})"
                )
    return load, pts


@dataclass
class _Metrics:
    """What the per-metric comparisons produced."""

    gating: dict[str, Comparison] = field(default_factory=dict)
    #: every metric compared (gating or not); None where it could not be
    compared: dict[str, Comparison | None] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    floors: dict[str, dict[str, Any]] = field(default_factory=dict)
    margins: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    window_ns: float | None = None
    no_window: str | None = None


def _compare_metrics(
    runs_a: list[serving.PointSamples],
    runs_b: list[serving.PointSamples],
    gate_map: dict[str, tuple[str, ...]],
    threshold: float,
    past: Sequence[tuple[Session, int]],
) -> _Metrics:
    """Each metric of :data:`serving.METRICS` through :func:`compare`, with its own margin
    (the threshold, or the noise floor its history gives)."""
    out = _Metrics()
    out.window_ns, out.no_window = serving.choose_window([*runs_a, *runs_b])
    pooled = min(len(runs_a), len(runs_b))
    for name, m in serving.METRICS.items():
        own_gates = gate_map.get(name, ())
        a, b, why = _metric_samples(name, runs_a, runs_b, out.window_ns, out.no_window)
        if why is not None:
            out.compared[name] = None
            out.unknown[name] = why
            if own_gates:
                out.warnings.append(f"{name} cannot be compared ({why}), so it does not gate")
            continue
        q = own_gates[0] if own_gates else "p50"
        history = _history_values(past, name, QUANTILES[q])
        floor = noise_floor(history)
        applied = floor is not None and pooled < POOLED_RUNS
        delta = max(threshold, floor if applied and floor is not None else 0.0)
        out.margins[name] = delta
        out.floors[name] = {
            "history_sessions": len(history),
            "applied": applied,
            "floor_pct": None if floor is None else floor * 100.0,
            "quantile": q,
        }
        try:
            comp = compare(
                a,
                b,
                delta=min(delta, MAX_MARGIN - 1e-9),
                gates=own_gates or ("p50",),
                higher_is_better=m.higher_is_better,
            )
        except ValueError as exc:
            raise UsageError(f"{name}: {exc}") from exc
        out.compared[name] = comp
        if own_gates:
            out.gating[name] = comp
        fewest = min(sum(x.size for x in a), sum(x.size for x in b))
        for g in own_gates:
            beyond = fewest * (1.0 - QUANTILES[g])
            if QUANTILES[g] > 0.5 and beyond < TAIL_SAMPLES:
                out.warnings.append(
                    f"{name} {g} rests on {beyond:.0f} sample(s) beyond it on a side "
                    f"({fewest} in all): its interval is wide and the gate is often "
                    f"INCONCLUSIVE; send {TAIL_SAMPLES / (1.0 - QUANTILES[g]):.0f} or more "
                    "requests, or gate on a lower quantile"
                )
    return out


def _metric_samples(
    name: str,
    runs_a: list[serving.PointSamples],
    runs_b: list[serving.PointSamples],
    window_ns: float | None,
    no_window: str | None,
) -> tuple[list[np.ndarray[Any, Any]], list[np.ndarray[Any, Any]], str | None]:
    """Each run's sample of ``name`` on both sides, or why there is none."""
    if serving.METRICS[name].column is None:
        if window_ns is None:
            return [], [], no_window or "no throughput windows"
        a = [serving.window_rates(r, window_ns) for r in runs_a]
        b = [serving.window_rates(r, window_ns) for r in runs_b]
        return a, b, None
    a = [r.series[name] for r in runs_a]
    b = [r.series[name] for r in runs_b]
    for r in [*runs_a, *runs_b]:
        if r.series[name].size < MIN_SAMPLES:
            return (
                a,
                b,
                (
                    f"{r.session_id} has {r.series[name].size} request(s) with a known {name}; "
                    f"at least {MIN_SAMPLES} are needed"
                ),
            )
    return a, b, None


@dataclass(frozen=True)
class _Failures:
    """The failed requests of each side, pooled over its runs."""

    failed_a: int
    measured_a: int
    failed_b: int
    measured_b: int

    @property
    def share_a(self) -> float:
        return self.failed_a / self.measured_a

    @property
    def share_b(self) -> float:
        return self.failed_b / self.measured_b

    @property
    def rose(self) -> bool:
        return self.share_b > self.share_a

    def test(self) -> GateTest:
        """A one-sided Fisher exact test each way. It never claims equivalence: a rise it
        cannot call significant still keeps the verdict from NO CHANGE."""
        table = [
            [self.failed_b, self.measured_b - self.failed_b],
            [self.failed_a, self.measured_a - self.failed_a],
        ]
        up = float(_sps().fisher_exact(table, alternative="greater").pvalue)
        down = float(_sps().fisher_exact(table, alternative="less").pvalue)
        return GateTest(
            "failed_fraction",
            p_regression=min(1.0, up),
            p_improvement=min(1.0, down),
            p_equivalence=1.0 if self.rose else 0.0,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": {
                "measured": self.measured_a,
                "failed": self.failed_a,
                "fraction": self.share_a,
            },
            "session": {
                "measured": self.measured_b,
                "failed": self.failed_b,
                "fraction": self.share_b,
            },
            "delta_points": (self.share_b - self.share_a) * 100.0,
        }


def _failures(runs_a: list[serving.PointSamples], runs_b: list[serving.PointSamples]) -> _Failures:
    return _Failures(
        failed_a=sum(r.failed for r in runs_a),
        measured_a=sum(r.measured for r in runs_a),
        failed_b=sum(r.failed for r in runs_b),
        measured_b=sum(r.measured for r in runs_b),
    )


def _failure_warnings(f: _Failures, test: GateTest) -> tuple[list[str], list[str]]:
    """(warnings to lead with, warnings to append) about the failed requests."""
    first: list[str] = []
    last: list[str] = []
    if f.rose:
        first.append(
            f"FAILED REQUESTS ROSE: {f.failed_a} of {f.measured_a} ({f.share_a:.1%}) -> "
            f"{f.failed_b} of {f.measured_b} ({f.share_b:.1%}), one-sided Fisher "
            f"p={test.p_regression:.2g}"
            + (
                ""
                if test.verdict == REGRESSION
                else "; not significant, but a run whose failures rose is not unchanged"
            )
        )
    worst = max(f.share_a, f.share_b)
    if worst >= FAILED_SHARE_WARN:
        last.append(
            f"{worst:.0%} of a side's requests failed: the latencies are of the successful "
            "ones only and may flatter that side"
        )
    return first, last


def _itl_evidence(
    runs_a: list[serving.PointSamples], runs_b: list[serving.PointSamples]
) -> dict[str, Any]:
    """Quantiles of the inter-token latencies of each side: reported, never gating."""
    ia = np.concatenate([r.itl for r in runs_a])
    ib = np.concatenate([r.itl for r in runs_b])
    qa, qb = _quantiles_json(ia), _quantiles_json(ib)
    ratio = None
    if qa is not None and qb is not None:
        ratio = {k: qb[k] / qa[k] if qa[k] else None for k in qa}
    return {
        "baseline": qa,
        "session": qb,
        "ratio": ratio,
        "samples": {"baseline": int(ia.size), "session": int(ib.size)},
    }


@dataclass(frozen=True)
class _Headline:
    metric: str
    unit: str
    delta_pct: float
    delta_abs: float | None
    ci_pct: list[float] | None
    median: MetricShift | None
    margin: float
    p_value: float | None
    welch_p: float | None
    floor_pct: float | None
    severity: str


def _headline(
    family: Family, final: str, found: _Metrics, failures: _Failures, threshold: float
) -> _Headline:
    """The figure the verdict line reports: the gate (or the failure test) that decided.
    When the failure test decided, the median shift and Welch's p are the headline
    latency's (:func:`_latency_comparison`), which readers of model-run diffs expect."""
    name, gate = family.primary
    if name == "failed_fraction":
        t = family.tests[name]
        latency = _latency_comparison(family, found)
        delta = (failures.share_b - failures.share_a) * 100.0
        sev = "none"
        if final == REGRESSION:  # in percentage points of requests
            sev = "high" if delta >= 5 else "medium" if delta >= 1 else "low"
        return _Headline(
            metric=name,
            unit="points",
            delta_pct=delta,
            delta_abs=None,
            ci_pct=None,
            median=latency.metrics["p50"],
            margin=min(found.margins.values(), default=threshold),
            p_value=t.p_improvement_holm if final == IMPROVEMENT else t.p_regression_holm,
            welch_p=latency.welch.p_value,
            floor_pct=None,
            severity=sev,
        )
    comp = family.comparisons[name]
    shift = comp.metrics[gate]
    unit = serving.METRICS[name].unit
    return _Headline(
        metric=f"{name} {gate}",
        unit=unit,
        delta_pct=shift.delta_pct,
        delta_abs=shift.session - shift.baseline,
        ci_pct=list(shift.ci_pct),
        median=comp.metrics["p50"],
        margin=found.margins[name],
        p_value=verdict_p(replace(comp, primary_gate=gate, verdict=family.verdict)),
        welch_p=comp.welch.p_value,
        floor_pct=found.floors[name]["floor_pct"],
        severity=severity(final, abs(shift.delta_pct)),
    )


def _latency_comparison(family: Family, found: _Metrics) -> Comparison:
    """A latency comparison for readers of model-run diffs (``comparison``): the deciding
    metric when it is a latency, else TTFT's, else the first latency compared, else the
    first gate's."""
    compared = {n: c for n, c in found.compared.items() if c is not None}
    compared.update(family.comparisons)
    latencies = [n for n in compared if serving.METRICS[n].unit == "ms"]
    for n in (family.primary[0], "ttft", *latencies):
        if n in latencies:
            return compared[n]
    return next(iter(family.comparisons.values()))


def diff_serving(
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
    """The diff of two serving sessions (or runs of each side) at one load point
    (docs/methodology.md, "Serving sessions").

    Per-request TTFT, TPOT and e2e (measured phase, successful requests, request order) and
    output tokens per second over fixed windows are each compared by
    :func:`~aaco.analysis.compare.compare`; the gates (``METRIC:QUANTILE``, default
    :data:`DEFAULT_GATES`) and a one-sided test of the failed share are judged as one Holm
    family (:func:`~aaco.analysis.compare.judge_family`).

    >>> diff = diff_serving(Session.load(base), Session.load(new))  # doctest: +SKIP
    >>> diff["verdict"]["verdict"], diff["verdict"]["metric"]       # doctest: +SKIP
    ('REGRESSION', 'ttft p99')
    """
    bases, news = as_list(baseline), as_list(session)
    check_sides(bases, news)
    for s in bases:
        usable_session(s, "baseline")
    for s in news:
        usable_session(s, "session")
    gate_map = parse_serving_gates(gates)
    first_a, first_b = bases[0], news[0]
    load, pts = _resolve_points(bases, news, point)
    p0, pb0 = pts[first_a.path], pts[first_b.path]
    name_a = (first_a.meta.get("model") or {}).get("name")
    name_b = (first_b.meta.get("model") or {}).get("name")
    if name_a != name_b and not allow_model_change:
        raise UsageError(
            f"the bundles serve different models ({name_a!r} vs {name_b!r}); "
            "pass --allow-model-change to compare them anyway"
        )
    runs_a = [serving.point_samples(s, pts[s.path]) for s in bases]
    runs_b = [serving.point_samples(s, pts[s.path]) for s in news]
    for label, runs in (("baseline", runs_a), ("session", runs_b)):
        for r in runs:
            if r.ok < MIN_SAMPLES:
                raise UsageError(
                    f"{label} {r.session_id} has {r.ok} successful measured request(s) at "
                    f"{r.label}; at least {MIN_SAMPLES} are needed"
                )
    # the root named (--sessions) when the baseline lies in it, else the baseline's own
    in_root = sessions_root is not None and first_a.path.resolve().is_relative_to(
        sessions_root.resolve()
    )
    past = serving_history(first_a, p0, sessions_root if in_root else None) if use_history else []
    found = _compare_metrics(runs_a, runs_b, gate_map, threshold, past)
    if not found.gating:
        raise UsageError("no gate can be judged: " + "; ".join(found.warnings))
    failures = _failures(runs_a, runs_b)
    family = judge_family(found.gating, [failures.test()])
    fail_test = family.tests["failed_fraction"]
    final = family.verdict
    lead, warnings = _failure_warnings(failures, fail_test)
    warnings = [*found.warnings, *warnings]
    noisy = [n for n in found.gating if found.margins[n] >= MAX_MARGIN]
    if noisy:
        lead.insert(
            0,
            f"HISTORY TOO NOISY TO JUDGE {', '.join(noisy)}: the learned noise floor is 100 % "
            "or more (this configuration's past sessions differ by 2x or more from one to "
            "the next); quiet the machine or pool runs",
        )
        final = INCONCLUSIVE
    env = environment_differences(first_a, first_b)
    settings_diff = dict_differences(serving.settings(first_a, p0), serving.settings(first_b, pb0))
    machines = machine_comparison(bases, news)
    fps = {x.meta.get("fingerprint") for x in [*bases, *news]}
    lead[:0] = software_warnings(env, machines, fps)
    changed = [d for d in settings_diff if not d["key"].startswith(_SIZE_KEYS)]
    if changed:
        lead.insert(0, f"different configuration: {fmt_diffs(changed)}")
    if name_a != name_b:
        lead.insert(0, f"different models compared: {name_a!r} vs {name_b!r}")
    contention = None
    if check_contention:
        contention = contention_reason(
            serving_contention(first_a, p0), serving_contention(first_b, pb0), final
        )
    if contention is not None:
        lead.insert(0, contention)
        final = INCONCLUSIVE
    # runs on different machines come first of all: the rest reads differently after it
    lead[:0] = machine_warnings(machines)
    warnings = lead + warnings
    for name, comp in family.comparisons.items():
        warnings += [f"{name}: {w}" for w in comp.warnings]
    evidence: dict[str, Any] = {
        "settings": settings_diff,
        "environment": env,
        "scalars": _serving_scalars(first_a, p0, first_b, pb0),
        "failures": failures.to_json(),
        "itl_ms": _itl_evidence(runs_a, runs_b),
        "client_warnings": {
            "baseline": _client_warnings(first_a, p0),
            "session": _client_warnings(first_b, pb0),
        },
        # what readers of model-run diffs look for, empty here
        "operators": None,
        "kernels": None,
        "bottleneck": {"baseline": None, "session": None, "changed": False},
    }
    evidence["missing"] = sorted(k for k, v in evidence["scalars"].items() if v["delta"] is None)
    causes = (
        _serving_causes(evidence, family, failures.rose, machines) if final != NO_CHANGE else []
    )
    suspected = causes[0]["cause"] if causes else None
    conf = _serving_confidence(family)
    label = confidence_label(conf)
    pooled = min(len(bases), len(news))
    if final == INCONCLUSIVE:
        label = "low"
    elif (
        pooled < POOLED_RUNS
        and all(f["floor_pct"] is None for f in found.floors.values())
        and label == "high"
    ):
        # as for model runs: one process a side and no history is no certainty
        label = "medium"
        warnings.append(
            f"{pooled} run(s) on a side and no history of the baseline's configuration: the "
            "interval does not hold run-to-run variation; repeat runs (-b B1 -b B2 -b B3 "
            "-s S1 -s S2 -s S3) or diff against a baseline with 5 or more past sessions for a "
            "learned noise floor"
        )
    head = _headline(family, final, found, failures, threshold)
    point_label = serving.load_label(load)
    verdict = {
        "kind": serving.SERVING_KIND,
        "regression": final == REGRESSION,
        "verdict": final,
        "severity": head.severity,
        "confidence": None if final == INCONCLUSIVE else conf,
        "confidence_label": label,
        "statistical_verdict": family.verdict,
        "statistical_confidence": conf,
        "metric": head.metric,
        "unit": head.unit,
        "point": point_label,
        "delta_pct": head.delta_pct,
        "latency_delta_pct": head.delta_pct,
        "latency_delta_ms": head.delta_abs if head.unit == "ms" else None,
        "median_delta_pct": None if head.median is None else head.median.delta_pct,
        "median_ci_pct": None if head.median is None else list(head.median.ci_pct),
        "ci_pct": head.ci_pct,
        "p_value": head.p_value,
        "measurement_valid": contention is None,
        "welch_p_value": head.welch_p,
        "threshold_pct": threshold * 100.0,
        "noise_floor_pct": head.floor_pct,
        "margin_pct": head.margin * 100.0,
        "margins_pct": {n: v * 100.0 for n, v in found.margins.items()},
        "failed_fraction": {"baseline": failures.share_a, "session": failures.share_b},
        "suspected_cause": suspected,
        "candidate_causes": causes,
        "evidence": _serving_headline(evidence),
        "recommendation": _serving_recommendation(final, suspected, contention is not None),
        "baseline": {
            "session_id": first_a.session_id,
            "name": baseline_name,
            "runs": [x.session_id for x in bases],
        },
        "session": {"session_id": first_b.session_id, "runs": [x.session_id for x in news]},
        "machines": machines,
        "warnings": warnings,
        "exit_code": EXIT_CODES[final],
    }
    out = {
        "summary": "",
        "kind": serving.SERVING_KIND,
        "diff_format_version": 1,
        "created_utc": utc_now_iso(),
        "aaco_version": __version__,
        "verdict": verdict,
        "comparison": _latency_comparison(family, found).to_json(),
        "serving": {
            "point": {
                "label": point_label,
                "load": load,
                "baseline": [pts[s.path] for s in bases],
                "session": [pts[s.path] for s in news],
            },
            "gates": [f"{n}:{g}" for n, c in family.comparisons.items() for g in c.gates],
            "requested_gates": [f"{n}:{g}" for n, qs in gate_map.items() for g in qs],
            "primary": head.metric,
            "metrics": _metrics_json(family, found),
            "failures": {
                **failures.to_json(),
                "test": "one-sided Fisher exact test on the pooled counts",
                "p_regression": fail_test.p_regression,
                "p_regression_holm": fail_test.p_regression_holm,
                "p_improvement": fail_test.p_improvement,
                "p_improvement_holm": fail_test.p_improvement_holm,
                "verdict": fail_test.verdict,
            },
            "throughput": _throughput_json(found, bases, news, runs_a, runs_b, pts),
            "runs": {"baseline": len(bases), "session": len(news)},
        },
        "noise_floor": {
            "by_metric": found.floors,
            "rule": "3 x 1.4826 x MAD of the differences of consecutive past sessions' log "
            "gating quantile (>= 5 sessions), per metric",
        },
        "evidence": evidence,
        "baseline_ref": reference(first_a, sessions_root, baseline_name),
        "warnings": warnings,
    }
    out["summary"] = verdict_line(out)
    return out


def _metrics_json(family: Family, found: _Metrics) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, comp in found.compared.items():
        m = serving.METRICS[name]
        gating = name in family.comparisons
        judged = family.comparisons.get(name, comp)
        out[name] = {
            "unit": m.unit,
            "gating": gating,
            "higher_is_better": m.higher_is_better,
            "description": m.description,
            "margin_pct": None if name not in found.margins else found.margins[name] * 100.0,
            "noise_floor": found.floors.get(name),
            "comparison": None if judged is None else _unit_json(judged, m.unit, gating),
            "unknown": found.unknown.get(name),
        }
    return out


def _throughput_json(
    found: _Metrics,
    bases: list[Session],
    news: list[Session],
    runs_a: list[serving.PointSamples],
    runs_b: list[serving.PointSamples],
    pts: dict[Path, int],
) -> dict[str, Any]:
    w = found.window_ns

    def windows(runs: list[serving.PointSamples]) -> list[int]:
        return [] if w is None else [int(serving.window_rates(r, w).size) for r in runs]

    def figure(sessions: list[Session]) -> list[float | None]:
        return [serving.point_figures(s, pts[s.path])["output_tokens_per_s"] for s in sessions]

    return {
        "window_s": None if w is None else w / 1e9,
        "windows": {"baseline": windows(runs_a), "session": windows(runs_b)},
        "run_output_tokens_per_s": {"baseline": figure(bases), "session": figure(news)},
        "definition": "output tokens of the successful measured requests that arrived in each "
        "full window of window_s from the point's first send, per second",
        "unknown": found.no_window,
    }


def _serving_headline(evidence: dict[str, Any]) -> dict[str, Any]:
    """The compact ``evidence`` object of ``verdict.json``: the known deltas."""
    out: dict[str, Any] = {}
    for key, v in evidence["scalars"].items():
        if v["delta"] is None:
            continue
        out[f"{key}_delta_pct" if v["delta_pct"] is not None else f"{key}_delta"] = (
            v["delta_pct"] if v["delta_pct"] is not None else v["delta"]
        )
    out["failed_fraction_delta_points"] = evidence["failures"]["delta_points"]
    out["unknown"] = evidence["missing"]
    return out
