"""Two-sample latency comparison for ``aaco diff``: effect sizes, intervals that respect
autocorrelation, a verdict rule with an equivalence margin, Holm's correction, bimodality.

Pure functions over arrays of per-iteration latencies (measured phase, in run order). The
method and its sources are written up in docs/methodology.md; in short:

* effect size = ratio of the session's quantile to the baseline's (p50, p90, p99 ...);
* the interval is a percentile interval from a **circular block bootstrap** (Politis &
  Romano 1992) of each series separately, with the block length chosen per series by the
  Politis & White (2004) rule (corrected by Patton, Politis & White 2009), so that runs of
  correlated iterations are resampled together instead of being treated as independent;
* the verdict compares the whole interval with an equivalence margin ``delta``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from warnings import catch_warnings, simplefilter

import numpy as np


def _sps() -> Any:
    """scipy.stats, imported when first needed: it takes ~0.5-1 s to import, and most
    commands never reach a statistical test."""
    from scipy import stats

    return stats


#: quantiles every comparison estimates; the verdict uses the gating subset
QUANTILES: dict[str, float] = {
    "p10": 0.10,
    "p25": 0.25,
    "p50": 0.50,
    "p75": 0.75,
    "p90": 0.90,
    "p99": 0.99,
}
#: p10 by default: on shared machines interference inflates the upper quantiles, so the
#: fast end of the distribution measures the code's own cost with the least run-to-run noise
#: (BENCHMARKS.md §11: session-to-session sd of log p10 1.25 % against 2.9 % for p50)
DEFAULT_GATES: tuple[str, ...] = ("p10",)
DEFAULT_ALPHA = 0.05
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20260524
MIN_SAMPLES = 10

REGRESSION = "REGRESSION"
IMPROVEMENT = "IMPROVEMENT"
NO_CHANGE = "NO CHANGE"
INCONCLUSIVE = "INCONCLUSIVE"
#: how a diff's warning about runs on different machines starts (the renderers' banner)
DIFFERENT_MACHINES = "DIFFERENT MACHINES"

#: quantiles that gate as well when either side is bimodal ("report quantile shifts")
BIMODAL_GATES: tuple[str, ...] = ("p25", "p50", "p75")
#: a secondary mode counts only with at least this share of the samples on its side
BIMODAL_MIN_MASS = 0.10
#: ... and a valley at most this fraction of the smaller peak's density
BIMODAL_MAX_VALLEY = 0.70


# -- block length ------------------------------------------------------------------------
def _autocorr(x: np.ndarray[Any, Any], max_lag: int) -> np.ndarray[Any, Any]:
    """Sample autocorrelations r(0..max_lag) (biased estimator, divides by n)."""
    n = x.size
    d = x - x.mean()
    denom = float(d @ d)
    if denom == 0.0:
        out = np.zeros(max_lag + 1)
        out[0] = 1.0
        return out
    # FFT keeps this O(n log n) for long runs.
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(d, size)
    acov = np.fft.irfft(f * np.conj(f), size)[: max_lag + 1]
    result: np.ndarray[Any, Any] = acov / denom
    return result


def block_length(x: Sequence[float] | np.ndarray[Any, Any]) -> int:
    """Circular-block-bootstrap block length by Politis & White (2004), corrected (2009).

    1 for a series without detectable autocorrelation; never more than n/3.
    """
    a = np.asarray(x, dtype=np.float64)
    n = int(a.size)
    if n < 8:
        return 1
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = math.ceil(math.sqrt(n)) + kn
    max_lag = min(n - 1, 2 * m_max + kn)
    rho = _autocorr(a, max_lag)
    crit = 2.0 * math.sqrt(math.log10(n) / n)
    # smallest m after which kn consecutive autocorrelations are insignificant
    m_hat = max_lag
    insignificant = np.abs(rho[1:]) < crit
    for m in range(0, max_lag - kn + 1):
        if insignificant[m : m + kn].all():
            m_hat = m
            break
    big_m = min(2 * max(m_hat, 1), m_max, max_lag)
    lags = np.arange(-big_m, big_m + 1)
    t = np.abs(lags) / big_m
    lam = np.where(t <= 0.5, 1.0, np.where(t <= 1.0, 2.0 * (1.0 - t), 0.0))
    d = a - a.mean()
    acov = rho[np.abs(lags)] * float(d @ d) / n
    g = float(np.sum(lam * np.abs(lags) * acov))
    s0 = float(np.sum(lam * acov))
    d_cb = (4.0 / 3.0) * s0 * s0
    if d_cb <= 0.0 or g == 0.0:
        return 1
    b = (2.0 * g * g / d_cb) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(1, math.ceil(b)), max(1, n // 3)))


def _block_resample(
    x: np.ndarray[Any, Any], resamples: int, rng: np.random.Generator, block: int
) -> np.ndarray[Any, Any]:
    """``resamples`` circular block bootstrap resamples of ``x``: shape (B, n)."""
    n = x.size
    k = math.ceil(n / block)
    starts = rng.integers(0, n, size=(resamples, k))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, k * block)
    idx = idx[:, :n] % n
    out: np.ndarray[Any, Any] = x[idx]
    return out


def block_bootstrap_quantiles(
    x: np.ndarray[Any, Any],
    probs: Sequence[float],
    resamples: int,
    rng: np.random.Generator,
    block: int | None = None,
) -> np.ndarray[Any, Any]:
    """Quantiles of ``resamples`` circular block bootstrap resamples: shape (len(probs), B)."""
    b = block_length(x) if block is None else block
    out: np.ndarray[Any, Any] = np.quantile(_block_resample(x, resamples, rng, b), probs, axis=1)
    return out


def runs_bootstrap_quantiles(
    runs: Sequence[np.ndarray[Any, Any]],
    probs: Sequence[float],
    resamples: int,
    rng: np.random.Generator,
    blocks: Sequence[int],
) -> np.ndarray[Any, Any]:
    """Two-stage bootstrap of pooled runs: draw runs with replacement, then block-resample
    each drawn run; quantiles of the pooled values, shape (len(probs), B).

    Drawing whole runs puts the run-to-run variation (a new process, new memory layout, a
    different neighbour) into the interval; one run reduces to the block bootstrap.
    """
    k = len(runs)
    if k == 1:
        return block_bootstrap_quantiles(runs[0], probs, resamples, rng, blocks[0])
    nmax = max(r.size for r in runs)
    stacked = np.full((k, resamples, nmax), np.nan)
    for i, r in enumerate(runs):
        stacked[i, :, : r.size] = _block_resample(r, resamples, rng, blocks[i])
    pick = rng.integers(0, k, size=(resamples, k))
    pooled = stacked[pick, np.arange(resamples)[:, None], :].reshape(resamples, k * nmax)
    if all(r.size == nmax for r in runs):
        out: np.ndarray[Any, Any] = np.quantile(pooled, probs, axis=1)
    else:
        out = np.nanquantile(pooled, probs, axis=1)
    return out


Series = Sequence[float] | np.ndarray[Any, Any]


def as_runs(x: Series | Sequence[Series]) -> list[np.ndarray[Any, Any]]:
    """One series, or a sequence of runs (each a series) -> a list of float arrays."""
    if isinstance(x, np.ndarray):
        return [x.astype(np.float64)] if x.ndim == 1 else [np.asarray(r, np.float64) for r in x]
    items = list(x)
    if items and all(hasattr(e, "__len__") for e in items):
        return [np.asarray(e, dtype=np.float64) for e in items]  # type: ignore[arg-type]
    return [np.asarray(items, dtype=np.float64)]


# -- comparison ------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricShift:
    """One quantile's ratio session/baseline with its bootstrap interval and tests."""

    name: str
    baseline: float
    session: float
    ratio: float
    ci: tuple[float, float]
    p_regression: float  # one-sided: P(ratio <= 1 + delta) under the bootstrap distribution
    p_improvement: float  # one-sided: P(ratio >= 1 - delta)
    p_equivalence: float  # TOST: max of the two outer tails
    verdict: str | None = None  # None for a quantile that did not gate the verdict
    p_regression_holm: float | None = None
    p_improvement_holm: float | None = None

    @property
    def delta_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def ci_pct(self) -> tuple[float, float]:
        return ((self.ci[0] - 1.0) * 100.0, (self.ci[1] - 1.0) * 100.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "baseline_ms": self.baseline,
            "session_ms": self.session,
            "ratio": self.ratio,
            "delta_pct": self.delta_pct,
            "ci_pct": list(self.ci_pct),
            "p_regression": self.p_regression,
            "p_regression_holm": self.p_regression_holm,
            "p_improvement": self.p_improvement,
            "p_improvement_holm": self.p_improvement_holm,
            "p_equivalence": self.p_equivalence,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variance t-test on raw iterations, reported for familiarity only:
    it assumes independent iterations, which timed loops rarely are."""

    mean_ratio: float
    t: float
    p_value: float

    def to_json(self) -> dict[str, Any]:
        # two constant series of different values give an infinite t, which JSON lacks
        t = self.t if math.isfinite(self.t) else None
        return {"mean_ratio": self.mean_ratio, "t": t, "p_value": self.p_value}


@dataclass(frozen=True)
class Comparison:
    verdict: str
    delta: float  # equivalence margin as a fraction (0.02 = 2 %)
    alpha: float
    gates: tuple[str, ...]
    metrics: dict[str, MetricShift]
    welch: Welch
    block_lengths: tuple[int, int]
    n: tuple[int, int]
    resamples: int
    seed: int
    bimodal: tuple[bool, bool]
    runs: tuple[int, int] = (1, 1)
    warnings: list[str] = field(default_factory=list)
    #: the quantiles the user asked to gate on (``gates`` adds BIMODAL_GATES when bimodal)
    requested_gates: tuple[str, ...] = ()
    #: bootstrap ratios session/baseline, one row per quantile of ``QUANTILES``
    ratios: np.ndarray[Any, Any] | None = field(default=None, repr=False, compare=False)
    #: the gate the headline reports: the one that decided a REGRESSION or IMPROVEMENT
    primary_gate: str = ""
    #: larger values are better (a throughput): a regression is a ratio below ``1 - delta``
    higher_is_better: bool = False

    @property
    def primary(self) -> MetricShift:
        return self.metrics[self.primary_gate or self.gates[0]]

    def at_margin(self, delta: float, gates: Sequence[str] | None = None) -> Comparison:
        """The same bootstrap judged against another margin (and gates), no resampling."""
        if self.ratios is None:
            raise ValueError("this comparison kept no bootstrap ratios")
        requested = tuple(dict.fromkeys(gates or self.requested_gates or self.gates))
        unknown = [g for g in requested if g not in QUANTILES]
        if unknown:
            raise ValueError(f"unknown gate(s) {unknown}; choose from {', '.join(QUANTILES)}")
        shifts = _shifts(self.ratios, self.metrics, delta, self.higher_is_better)
        verdict, metrics, used, notes, primary = _judge(shifts, requested, self.alpha, self.bimodal)
        base_warnings = [w for w in self.warnings if not w.startswith(_SHAPE_NOTE)]
        return replace(
            self,
            verdict=verdict,
            delta=delta,
            metrics=metrics,
            gates=used,
            requested_gates=requested,
            warnings=[*base_warnings, *notes],
            primary_gate=primary,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "delta_pct": self.delta * 100.0,
            "alpha": self.alpha,
            "gates": list(self.gates),
            "requested_gates": list(self.requested_gates or self.gates),
            "primary": self.primary.name,
            "metrics": {k: v.to_json() for k, v in self.metrics.items()},
            "welch": self.welch.to_json(),
            "method": {
                "interval": "circular block bootstrap (runs drawn with replacement first when "
                "a side has several), percentile interval of the quantile ratio",
                "block_length": {
                    "baseline": self.block_lengths[0],
                    "session": self.block_lengths[1],
                },
                "resamples": self.resamples,
                "seed": self.seed,
                "confidence_level": 1.0 - self.alpha,
                "multiple_testing": "Holm" if len(self.gates) > 1 else None,
            },
            "samples": {"baseline": self.n[0], "session": self.n[1]},
            "runs": {"baseline": self.runs[0], "session": self.runs[1]},
            "bimodal": {"baseline": self.bimodal[0], "session": self.bimodal[1]},
            **({"higher_is_better": True} if self.higher_is_better else {}),
            "warnings": list(self.warnings),
        }


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm (1979) step-down adjusted p-values, in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _metric_verdict(p_reg: float, p_imp: float, p_eq: float, alpha: float) -> str:
    # A one-sided p below alpha/2 is the same event as the (1 - alpha) percentile interval
    # lying wholly beyond the margin, so the rule reads as the interval rule of the docs.
    if p_reg < alpha / 2:
        return REGRESSION
    if p_imp < alpha / 2:
        return IMPROVEMENT
    if p_eq < alpha / 2:
        return NO_CHANGE
    return INCONCLUSIVE


#: the note the shape guard adds (``Comparison.at_margin`` replaces it)
_SHAPE_NOTE = "the median disagrees with the gate"


def _shifts(
    ratios: np.ndarray[Any, Any],
    points: dict[str, MetricShift],
    delta: float,
    higher_is_better: bool = False,
) -> dict[str, MetricShift]:
    """One-sided bootstrap p-values of every quantile against the margin ``delta``: a
    regression is a ratio above ``1 + delta`` (below ``1 - delta`` when higher is better)."""
    if not 0 <= delta < 1:
        raise ValueError("delta must be a fraction in [0, 1)")
    denom = ratios.shape[1] + 1
    out: dict[str, MetricShift] = {}
    for i, name in enumerate(QUANTILES):
        r = ratios[i]
        not_up = (1 + int(np.count_nonzero(r <= 1 + delta))) / denom
        not_down = (1 + int(np.count_nonzero(r >= 1 - delta))) / denom
        out[name] = replace(
            points[name],
            p_regression=not_down if higher_is_better else not_up,
            p_improvement=not_up if higher_is_better else not_down,
            p_equivalence=max(
                (1 + int(np.count_nonzero(r >= 1 + delta))) / denom,
                (1 + int(np.count_nonzero(r <= 1 - delta))) / denom,
            ),
            verdict=None,
            p_regression_holm=None,
            p_improvement_holm=None,
        )
    return out


def combine_verdicts(verdicts: Sequence[str]) -> str:
    """The verdict of several gates: REGRESSION if any regresses, NO CHANGE if all are
    equivalent, IMPROVEMENT if one improves and the others are equivalent, else
    INCONCLUSIVE."""
    if REGRESSION in verdicts:
        return REGRESSION
    if all(v == NO_CHANGE for v in verdicts):
        return NO_CHANGE
    if IMPROVEMENT in verdicts and all(v in (IMPROVEMENT, NO_CHANGE) for v in verdicts):
        return IMPROVEMENT
    return INCONCLUSIVE


def _shape_note(
    metrics: dict[str, MetricShift], gates: tuple[str, ...], verdict: str, alpha: float
) -> str | None:
    """The median's say: why ``verdict`` must become INCONCLUSIVE, or None (see _judge)."""
    if "p50" in gates or verdict == INCONCLUSIVE:
        return None
    med = metrics["p50"]
    say = _metric_verdict(med.p_regression, med.p_improvement, med.p_equivalence, alpha)
    if say not in (REGRESSION, IMPROVEMENT) or say == verdict:
        return None
    lo, hi = med.ci_pct
    return (
        f"{_SHAPE_NOTE}: {gates[0]} says {verdict} but the median moved "
        f"{med.delta_pct:+.1f} % [{lo:+.1f}, {hi:+.1f}]; the distribution changed "
        "shape (a slower mode, a longer tail, interference), so the verdict is "
        "INCONCLUSIVE: rerun, or gate on p50 (--gate p50)"
    )


def _deciding(metrics: dict[str, MetricShift], gates: tuple[str, ...], verdict: str) -> str:
    """The gate behind a REGRESSION or IMPROVEMENT (smallest Holm-adjusted p), else the first."""
    if verdict == REGRESSION:
        deciding = [g for g in gates if metrics[g].verdict == REGRESSION]
        return min(deciding, key=lambda g: metrics[g].p_regression_holm or 1.0)
    if verdict == IMPROVEMENT:
        deciding = [g for g in gates if metrics[g].verdict == IMPROVEMENT]
        return min(deciding, key=lambda g: metrics[g].p_improvement_holm or 1.0)
    return gates[0]


def _judge(
    shifts: dict[str, MetricShift],
    requested: tuple[str, ...],
    alpha: float,
    bimodal: tuple[bool, bool],
) -> tuple[str, dict[str, MetricShift], tuple[str, ...], list[str], str]:
    """The verdict: Holm over the gating quantiles, then the median's say; and the gate
    the headline reports (the strongest one behind a REGRESSION or IMPROVEMENT, else the
    first requested).

    A bimodal side makes the quartiles and the median gate too (mass moving between the
    modes is a real change that the fast end cannot see, and a median between two modes is
    unstable, so p25 and p75 carry it). Otherwise the median is a guard: when its own
    interval lies wholly beyond the margin on the other side of what the gate concluded (or
    the gate saw no change), the distribution changed shape and the verdict is
    INCONCLUSIVE, never a NO CHANGE that hides a slower median.
    """
    gates = requested
    if any(bimodal):
        gates = tuple(dict.fromkeys((*gates, *BIMODAL_GATES)))
    metrics = dict(shifts)
    adj_reg = holm([metrics[g].p_regression for g in gates])
    adj_imp = holm([metrics[g].p_improvement for g in gates])
    verdicts: list[str] = []
    for g, pr, pi in zip(gates, adj_reg, adj_imp, strict=True):
        m = metrics[g]
        v = _metric_verdict(pr, pi, m.p_equivalence, alpha)
        verdicts.append(v)
        metrics[g] = replace(m, verdict=v, p_regression_holm=pr, p_improvement_holm=pi)
    overall = combine_verdicts(verdicts)
    notes: list[str] = []
    note = _shape_note(metrics, gates, overall, alpha)
    if note is not None:
        notes.append(note)
        overall = INCONCLUSIVE
    return overall, metrics, gates, notes, _deciding(metrics, gates, overall)


@dataclass(frozen=True)
class GateTest:
    """A test beside the quantile gates of a family (:func:`judge_family`), such as a rise
    of the failed-request share: its one-sided p-values and whether it found the sides
    equivalent (``p_equivalence`` below ``alpha / 2``)."""

    name: str
    p_regression: float
    p_improvement: float
    p_equivalence: float
    verdict: str | None = None
    p_regression_holm: float | None = None
    p_improvement_holm: float | None = None


@dataclass(frozen=True)
class Family:
    """The verdict of several comparisons judged together (:func:`judge_family`)."""

    verdict: str
    #: each comparison with its family-adjusted gates and its own verdict within the family
    comparisons: dict[str, Comparison]
    tests: dict[str, GateTest]
    #: what decided: ``(comparison name, gate)``, or ``(test name, "")``
    primary: tuple[str, str]
    alpha: float


def judge_family(
    comparisons: dict[str, Comparison],
    tests: Sequence[GateTest] = (),
    alpha: float = DEFAULT_ALPHA,
) -> Family:
    """Judge several comparisons (each metric of a serving session: TTFT, TPOT ...) and
    tests as one family: Holm's procedure over *every* gate of every comparison and every
    test together, so that the chance of any false REGRESSION stays at ``alpha / 2`` however
    many metrics gate. Each comparison keeps its own gates (bimodal ones included) and the
    median's say; the family's verdict combines the comparisons' and the tests' verdicts by
    :func:`combine_verdicts`. The primary is the gate or test with the smallest adjusted p
    behind a REGRESSION or IMPROVEMENT, else the first INCONCLUSIVE one, else the first gate.
    """
    if not comparisons and not tests:
        raise ValueError("a family needs at least one comparison or test")
    slots = [(name, g) for name, c in comparisons.items() for g in c.gates]
    raw_reg = [comparisons[n].metrics[g].p_regression for n, g in slots]
    raw_imp = [comparisons[n].metrics[g].p_improvement for n, g in slots]
    raw_reg += [t.p_regression for t in tests]
    raw_imp += [t.p_improvement for t in tests]
    adj_reg, adj_imp = holm(raw_reg), holm(raw_imp)
    updated: dict[str, Comparison] = {}
    guarded: set[str] = set()  # comparisons the median's say made INCONCLUSIVE
    i = 0
    for name, c in comparisons.items():
        metrics = dict(c.metrics)
        own: list[str] = []
        for g in c.gates:
            m = metrics[g]
            v = _metric_verdict(adj_reg[i], adj_imp[i], m.p_equivalence, alpha)
            metrics[g] = replace(
                m, verdict=v, p_regression_holm=adj_reg[i], p_improvement_holm=adj_imp[i]
            )
            own.append(v)
            i += 1
        verdict = combine_verdicts(own)
        warnings = [w for w in c.warnings if not w.startswith(_SHAPE_NOTE)]
        note = _shape_note(metrics, c.gates, verdict, alpha)
        if note is not None:
            warnings.append(note)
            verdict = INCONCLUSIVE
            guarded.add(name)
        updated[name] = replace(
            c,
            verdict=verdict,
            metrics=metrics,
            warnings=warnings,
            primary_gate=_deciding(metrics, c.gates, verdict),
        )
    judged: dict[str, GateTest] = {}
    for t in tests:
        v = _metric_verdict(adj_reg[i], adj_imp[i], t.p_equivalence, alpha)
        judged[t.name] = replace(
            t, verdict=v, p_regression_holm=adj_reg[i], p_improvement_holm=adj_imp[i]
        )
        i += 1
    overall = combine_verdicts(
        [c.verdict for c in updated.values()] + [str(t.verdict) for t in judged.values()]
    )
    # (name, gate, verdict, adjusted p behind it) of every gate and test, in order; the
    # gates of a comparison the median's say overruled count as INCONCLUSIVE
    candidates: list[tuple[str, str, str, float]] = []
    for name, c in updated.items():
        for g in c.gates:
            m = c.metrics[g]
            q = m.p_regression_holm if overall == REGRESSION else m.p_improvement_holm
            said = INCONCLUSIVE if name in guarded else m.verdict
            candidates.append((name, g, str(said), 1.0 if q is None else q))
    for t in judged.values():
        q = t.p_regression_holm if overall == REGRESSION else t.p_improvement_holm
        candidates.append((t.name, "", str(t.verdict), 1.0 if q is None else q))
    matching = [k for k in candidates if k[2] == overall]
    if overall in (REGRESSION, IMPROVEMENT):
        best = min(matching, key=lambda k: k[3])
    else:
        best = matching[0] if matching else candidates[0]
    primary = (best[0], best[1])
    return Family(verdict=overall, comparisons=updated, tests=judged, primary=primary, alpha=alpha)


def compare(
    baseline: Series | Sequence[Series],
    session: Series | Sequence[Series],
    *,
    delta: float,
    gates: Sequence[str] = DEFAULT_GATES,
    alpha: float = DEFAULT_ALPHA,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    higher_is_better: bool = False,
) -> Comparison:
    """Compare per-iteration latencies (warmup already dropped, run order kept).

    Each side is one run's series or a sequence of runs (separate processes of the same
    configuration), pooled through :func:`runs_bootstrap_quantiles`. ``delta`` is the
    equivalence margin as a fraction. ``higher_is_better``: the values are a rate (a
    throughput), so a REGRESSION is a ratio below ``1 - delta``. Raises ValueError on runs
    shorter than ``MIN_SAMPLES``, non-finite or non-positive values, or unknown gate names.
    """
    runs_a, runs_b = as_runs(baseline), as_runs(session)
    noun = "values" if higher_is_better else "latencies"
    for label, runs in (("baseline", runs_a), ("session", runs_b)):
        if not runs:
            raise ValueError(f"{label} has no runs")
        for x in runs:
            if x.size < MIN_SAMPLES:
                raise ValueError(
                    f"{label} has a run of {x.size} measured iterations; at least "
                    f"{MIN_SAMPLES} are needed"
                )
            if not np.all(np.isfinite(x)) or np.any(x <= 0):
                raise ValueError(f"{label} {noun} must be finite and positive")
    a, b = np.concatenate(runs_a), np.concatenate(runs_b)
    unknown = [g for g in gates if g not in QUANTILES]
    if unknown or not gates:
        raise ValueError(f"unknown gate(s) {unknown}; choose from {', '.join(QUANTILES)}")
    if not 0 <= delta < 1:
        raise ValueError("delta must be a fraction in [0, 1)")
    names = list(QUANTILES)
    probs = [QUANTILES[k] for k in names]
    rng = np.random.default_rng(seed)
    blocks_a = [block_length(x) for x in runs_a]
    blocks_b = [block_length(x) for x in runs_b]
    la, lb = max(blocks_a), max(blocks_b)
    qa = runs_bootstrap_quantiles(runs_a, probs, resamples, rng, blocks_a)
    qb = runs_bootstrap_quantiles(runs_b, probs, resamples, rng, blocks_b)
    point_a = np.quantile(a, probs)
    point_b = np.quantile(b, probs)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = qb / qa
    lo_q, hi_q = alpha / 2, 1 - alpha / 2
    points: dict[str, MetricShift] = {}
    for i, name in enumerate(names):
        lo, hi = np.quantile(ratios[i], [lo_q, hi_q])
        points[name] = MetricShift(
            name=name,
            baseline=float(point_a[i]),
            session=float(point_b[i]),
            ratio=float(point_b[i] / point_a[i]),
            ci=(float(lo), float(hi)),
            p_regression=1.0,
            p_improvement=1.0,
            p_equivalence=1.0,
        )
    bim = (is_bimodal(a), is_bimodal(b))
    requested = tuple(dict.fromkeys(gates))
    overall, metrics, gate_list, notes, primary = _judge(
        _shifts(ratios, points, delta, higher_is_better), requested, alpha, bim
    )
    with catch_warnings():
        # nearly constant series (a scripted or quantised figure) warn of precision loss;
        # Welch is reported for reference only, so its accuracy there does not matter
        simplefilter("ignore", RuntimeWarning)
        t = _sps().ttest_ind(b, a, equal_var=False)
    t_stat, p_val = float(t.statistic), float(t.pvalue)
    if math.isnan(p_val):  # two constant series
        t_stat, p_val = 0.0, 1.0
    welch = Welch(mean_ratio=float(b.mean() / a.mean()), t=t_stat, p_value=p_val)
    warnings: list[str] = []
    if any(bim):
        which = " and ".join(n for n, f in zip(("baseline", "session"), bim, strict=True) if f)
        warnings.append(
            f"{which} {noun} are bimodal: a single quantile hides two populations, so the "
            "quartiles and the median gate too; read the quantile shifts (p10..p90)"
        )
    for label, runs, blocks in (("baseline", runs_a, blocks_a), ("session", runs_b, blocks_b)):
        for x, bl in zip(runs, blocks, strict=True):
            if bl > 1 and bl * 10 > x.size:
                warnings.append(
                    f"{label} iterations are strongly autocorrelated (block length {bl} of "
                    f"{x.size}): the interval rests on few independent blocks; run longer"
                )
                break
    return Comparison(
        verdict=overall,
        delta=delta,
        alpha=alpha,
        gates=gate_list,
        metrics=metrics,
        welch=welch,
        block_lengths=(la, lb),
        n=(int(a.size), int(b.size)),
        runs=(len(runs_a), len(runs_b)),
        resamples=resamples,
        seed=seed,
        bimodal=bim,
        warnings=[*warnings, *notes],
        requested_gates=requested,
        ratios=ratios,
        primary_gate=primary,
        higher_is_better=higher_is_better,
    )


def welch_flags_regression(
    baseline: Series | Sequence[Series],
    session: Series | Sequence[Series],
    alpha: float = DEFAULT_ALPHA,
) -> bool:
    """The original design's rule: Welch's t-test p < alpha and a slower mean (runs pooled)."""
    a = np.concatenate(as_runs(baseline))
    b = np.concatenate(as_runs(session))
    t = _sps().ttest_ind(b, a, equal_var=False)
    return bool(float(t.pvalue) < alpha and b.mean() > a.mean())


# -- distribution shape ------------------------------------------------------------------
def mode_splits(x: Sequence[float] | np.ndarray[Any, Any]) -> list[float]:
    """The valleys between the substantial modes of a Gaussian KDE (Silverman bandwidth) of
    ``x``, ascending; empty for one mode.

    A secondary mode counts when at least ``BIMODAL_MIN_MASS`` of the samples lie on its side
    of the deepest valley and that valley falls to ``BIMODAL_MAX_VALLEY`` of the smaller
    peak or below; tails and outlier clusters therefore do not count.
    """
    a = np.asarray(x, dtype=np.float64)
    if a.size < 20 or float(a.std()) == 0.0:
        return []
    try:
        kde = _sps().gaussian_kde(a, bw_method="silverman")
    except (np.linalg.LinAlgError, ValueError):
        return []
    lo, hi = float(a.min()), float(a.max())
    grid = np.linspace(lo, hi, 512)
    dens = kde(grid)
    peaks = [i for i in range(1, grid.size - 1) if dens[i] >= dens[i - 1] and dens[i] > dens[i + 1]]
    if dens[0] > dens[1]:
        peaks.insert(0, 0)
    if dens[-1] > dens[-2]:
        peaks.append(grid.size - 1)
    if len(peaks) < 2:
        return []
    sorted_a = np.sort(a)
    splits: list[float] = []
    current = peaks[0]
    for nxt in peaks[1:]:
        valley_i = current + int(np.argmin(dens[current : nxt + 1]))
        valley = float(dens[valley_i])
        smaller = min(float(dens[current]), float(dens[nxt]))
        split = float(grid[valley_i])
        left = np.searchsorted(sorted_a, split) / a.size
        if valley <= BIMODAL_MAX_VALLEY * smaller and min(left, 1 - left) >= BIMODAL_MIN_MASS:
            splits.append(split)
            current = nxt
        elif dens[nxt] > dens[current]:
            current = nxt
    return splits


def mode_count(x: Sequence[float] | np.ndarray[Any, Any]) -> int:
    """Number of substantial modes of ``x`` (:func:`mode_splits`)."""
    return len(mode_splits(x)) + 1


def mode_shares(
    a: Sequence[float] | np.ndarray[Any, Any], b: Sequence[float] | np.ndarray[Any, Any]
) -> dict[str, Any] | None:
    """Where the two sides' iterations fall between the modes of both pooled: the pooled
    distribution's first valley (``split``) and each side's share of iterations above it
    (the slower mode); None when the pooled distribution has one mode."""
    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    splits = mode_splits(np.concatenate([xa, xb]))
    if not splits:
        return None
    split = splits[0]
    return {
        "split": split,
        "baseline_slow_share": float(np.mean(xa > split)),
        "session_slow_share": float(np.mean(xb > split)),
    }


def spans_modes(x: Sequence[float] | np.ndarray[Any, Any], split: float) -> bool:
    """Whether at least ``BIMODAL_MIN_MASS`` of ``x`` lies on each side of ``split``."""
    share = float(np.mean(np.asarray(x, dtype=np.float64) > split))
    return min(share, 1.0 - share) >= BIMODAL_MIN_MASS


def is_bimodal(x: Sequence[float] | np.ndarray[Any, Any]) -> bool:
    return mode_count(x) >= 2


# -- noise floor ---------------------------------------------------------------------------
NOISE_FLOOR_K = 3.0
NOISE_FLOOR_MIN_SESSIONS = 5
MAD_TO_SIGMA = 1.4826


def noise_floor(session_values: Sequence[float]) -> float | None:
    """Relative margin learned from a configuration's past sessions (one value each, the
    gating quantile, oldest first): ``exp(3 x 1.4826 x MAD(d)) - 1`` where ``d`` are the
    differences of consecutive log values; None under ``NOISE_FLOOR_MIN_SESSIONS``.

    A diff compares *two* sessions, so the floor is three standard deviations of the log
    ratio of two sessions, and the differences of consecutive sessions are exactly such
    ratios (1.4826 x MAD estimates their standard deviation robustly). Consecutive
    differences, not the spread of the levels: a history holds drifts and level shifts
    (the change points ``aaco history`` finds), which would inflate the spread of the
    levels and blind the gate for 50 sessions after each, while each adds one difference
    that the median ignores (the moving range of a Shewhart individuals chart).
    BENCHMARKS.md §11 compares the rules.
    """
    m = np.asarray([v for v in session_values if v and v > 0], dtype=np.float64)
    if m.size < NOISE_FLOOR_MIN_SESSIONS:
        return None
    d = np.diff(np.log(m))
    mad = float(np.median(np.abs(d - np.median(d))))
    return float(math.expm1(NOISE_FLOOR_K * MAD_TO_SIGMA * mad))
