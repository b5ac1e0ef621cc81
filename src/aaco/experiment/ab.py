"""``aaco ab``: an interleaved A/B experiment between two run configurations.

A and B run alternately, each run a fresh ``aaco run`` (its own worker process and bundle,
under the sessions root), the order within each pair drawn at random; the pairs are judged
by :mod:`aaco.analysis.paired` at the looks of a group-sequential schedule, and the
experiment stops as soon as the verdict is decided or the budget (``max_pairs``,
``max_time_s``) is spent. A pair in which either run's measurement is not valid (other
processes held the worker's CPUs, the hypervisor stole its time, the noise sentinel saw
the machine change speed) is recorded and redone. The result is ``ab.json`` (and a text
summary) under ``<sessions root>/ab/<ab id>/``; the method is in docs/methodology.md.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aaco import __version__
from aaco.analysis.compare import INCONCLUSIVE, NO_CHANGE, QUANTILES, REGRESSION
from aaco.analysis.paired import (
    DEFAULT_MAX_PAIRS,
    DEFAULT_MIN_PAIRS,
    DEFAULT_THRESHOLD,
    METHODS,
    PairedLook,
    evaluate,
    looks,
)
from aaco.errors import BundleError, RunError, UsageError
from aaco.pipeline import RunOptions, run_model
from aaco.regress.common import (
    CONTENTION_SHARE,
    EXIT_CODES,
    as_dict,
    finite,
    sched_contended,
)
from aaco.regress.diff import cpu_contention, measured_latencies
from aaco.session.bundle import Session, atomic_write_bytes, atomic_write_json, utc_now_iso

__all__ = [
    "AB_FILE",
    "ABSettings",
    "PairRecord",
    "RunRecord",
    "ab_summary_lines",
    "new_ab_id",
    "run_ab",
    "run_invalid_reason",
]

AB_FILE = "ab.json"
AB_TEXT = "ab.txt"
#: the default gate: the fast end, as aaco diff (docs/methodology.md)
DEFAULT_GATE = "p10"

#: why an experiment ended
DECIDED = "decided"
MAX_PAIRS = "max-pairs"
MAX_TIME = "max-time"
INVALID_BUDGET = "invalid-pairs"
INTERRUPTED = "interrupted"
FAILED = "failed"


@dataclass(frozen=True)
class ABSettings:
    """The experiment's design (``aaco ab``'s options)."""

    gate: str = DEFAULT_GATE
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = 0.05
    method: str = METHODS[0]
    min_pairs: int = DEFAULT_MIN_PAIRS
    max_pairs: int = DEFAULT_MAX_PAIRS
    max_time_s: float | None = None
    #: invalid pairs tolerated before the experiment gives up (None: as many as max_pairs)
    max_invalid: int | None = None
    #: seed of the order within pairs (None: drawn, and recorded)
    seed: int | None = None
    #: judge the measurement's validity (off: every completed pair counts)
    check_contention: bool = True
    #: compare latency per item (each run's latencies over its batch): throughput, for sides
    #: of different batch sizes
    per_item: bool = False

    def check(self) -> None:
        if self.gate not in QUANTILES:
            raise UsageError(f"unknown gate {self.gate!r}; choose from {', '.join(QUANTILES)}")
        if self.method not in METHODS:
            raise UsageError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        if not 0 < self.alpha < 1:
            raise UsageError("alpha must lie in (0, 1)")
        if self.min_pairs < 2 or self.max_pairs < self.min_pairs:
            raise UsageError(
                f"--min-pairs {self.min_pairs} / --max-pairs {self.max_pairs}: need "
                "2 <= min-pairs <= max-pairs"
            )
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise UsageError("--max-time must be positive")

    def schedule(self) -> list[int]:
        return looks(self.min_pairs, self.max_pairs)


@dataclass
class RunRecord:
    """One run of one side."""

    side: str  # "A" | "B"
    session_id: str
    path: str
    status: str
    value_ms: float | None  # the run's gating quantile
    wall_s: float
    invalid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class PairRecord:
    """A pair: its two runs in the order they ran, and whether it counts."""

    index: int
    first: str  # the side that ran first
    a: RunRecord
    b: RunRecord
    valid: bool
    log_ratio: float | None
    started_utc: str

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "first": self.first,
            "valid": self.valid,
            "ratio": None if self.log_ratio is None else math.exp(self.log_ratio),
            "started_utc": self.started_utc,
            "a": self.a.to_json(),
            "b": self.b.to_json(),
        }


def new_ab_id() -> str:
    from aaco.session.bundle import new_session_id

    return f"ab_{new_session_id()}"


def run_invalid_reason(session: Session, check_contention: bool = True) -> str | None:
    """Why a run's timing cannot be paired, or None: it did not complete, or (with
    ``check_contention``) its worker waited for CPUs that other tasks held, the hypervisor
    stole its CPUs' time, the noise sentinel saw the machine change speed, or other
    processes used a fifth or more of the machine during its measured phase (the rules of
    ``aaco diff``'s measurement-validity check, applied to one run)."""
    if session.status != "completed":
        return f"the run {session.status}"
    if not check_contention:
        return None
    why = sched_contended(as_dict(session.summary).get("sched"))
    if why is not None:
        return why
    sentinel = as_dict(as_dict(session.meta.get("capsule")).get("sentinel"))
    if sentinel.get("speed_changed") is True:
        drift = finite(sentinel.get("drift_pct"))
        return "the machine's speed changed during the run" + (
            f" ({drift:+.1f} %)" if drift is not None else ""
        )
    c = cpu_contention(session)
    if c is not None and c >= CONTENTION_SHARE:
        return f"other processes used {c:.0%} of the CPU during the measured phase"
    return None


def _tagged(opts: RunOptions, ab_id: str, side: str, output: Path) -> RunOptions:
    mark = f"{ab_id}:{side}"
    tag = f"{opts.tag} ({mark})" if opts.tag else mark
    return dataclasses.replace(opts, tag=tag, output=output)


@dataclass
class _State:
    pairs: list[PairRecord] = field(default_factory=list)
    a_runs: list[np.ndarray[Any, Any]] = field(default_factory=list)
    b_runs: list[np.ndarray[Any, Any]] = field(default_factory=list)
    looks: list[PairedLook] = field(default_factory=list)
    invalid: int = 0


def run_ab(
    a: RunOptions,
    b: RunOptions,
    settings: ABSettings,
    *,
    output: Path,
    ab_id: str | None = None,
    run: Callable[[RunOptions], Session] = run_model,
    clock: Callable[[], float] = time.monotonic,
    on_pair: Callable[[PairRecord, PairedLook | None], None] | None = None,
    history: Session | None = None,
) -> dict[str, Any]:
    """Run the experiment; returns ``ab.json``'s content (also written under
    ``output/ab/<ab_id>/``). ``run`` is the seam that measures one configuration into a
    bundle (:func:`aaco.pipeline.run_model`). A run that fails outright (the model cannot
    run) raises RunError naming its bundle. ``history``: a recorded session of A's
    configuration (``--a-session``), reported beside the fresh runs."""
    settings.check()
    ab_id = ab_id or new_ab_id()
    seed = settings.seed if settings.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    schedule = settings.schedule()
    max_invalid = settings.max_invalid if settings.max_invalid is not None else settings.max_pairs
    opts = {"A": _tagged(a, ab_id, "A", output), "B": _tagged(b, ab_id, "B", output)}
    q = QUANTILES[settings.gate]
    state = _State()
    started, t0 = utc_now_iso(), clock()
    stopped = MAX_PAIRS
    interrupted = False
    failure: Exception | None = None
    try:
        while len(state.a_runs) < settings.max_pairs:
            if settings.max_time_s is not None and clock() - t0 >= settings.max_time_s:
                stopped = MAX_TIME
                break
            if state.invalid > max_invalid:
                stopped = INVALID_BUDGET
                break
            order = ["A", "B"] if rng.random() < 0.5 else ["B", "A"]
            pair_started = utc_now_iso()
            records: dict[str, RunRecord] = {}
            series: dict[str, np.ndarray[Any, Any] | None] = {}
            for side in order:
                t = clock()
                s = run(opts[side])
                wall = clock() - t
                if s.status != "completed":
                    raise RunError(
                        f"side {side}'s run {s.status} ({s.path}): the configuration does not run; "
                        "fix it with aaco run first"
                    )
                why = run_invalid_reason(s, settings.check_contention)
                try:
                    x = measured_latencies(s)
                except BundleError as exc:
                    raise RunError(f"side {side}'s run recorded no latencies ({exc})") from None
                if settings.per_item:
                    batch = (s.meta.get("run") or {}).get("batch")
                    if not isinstance(batch, int) or batch <= 0:
                        raise UsageError(
                            f"side {side}'s batch is unknown: a per-item comparison needs it"
                        )
                    x = x / batch
                series[side] = x
                records[side] = RunRecord(
                    side=side,
                    session_id=s.session_id,
                    path=str(s.path),
                    status=s.status,
                    value_ms=float(np.quantile(x, q)),
                    wall_s=wall,
                    invalid=why,
                )
            valid = records["A"].invalid is None and records["B"].invalid is None
            ra, rb = records["A"].value_ms, records["B"].value_ms
            log_ratio = math.log(rb / ra) if ra and rb and ra > 0 and rb > 0 else None
            pair = PairRecord(
                index=len(state.pairs) + 1,
                first=order[0],
                a=records["A"],
                b=records["B"],
                valid=valid and log_ratio is not None,
                log_ratio=log_ratio,
                started_utc=pair_started,
            )
            state.pairs.append(pair)
            look: PairedLook | None = None
            if pair.valid:
                xa, xb = series["A"], series["B"]
                assert xa is not None and xb is not None
                state.a_runs.append(xa)
                state.b_runs.append(xb)
                if len(state.a_runs) in schedule:
                    look = evaluate(
                        state.a_runs,
                        state.b_runs,
                        gate=settings.gate,
                        delta=settings.threshold,
                        alpha=settings.alpha,
                        schedule=schedule,
                        method=settings.method,
                        seed=seed,
                    )
                    state.looks.append(look)
            else:
                state.invalid += 1
            if on_pair is not None:
                on_pair(pair, look)
            if look is not None and look.decided:
                stopped = DECIDED
                break
    except KeyboardInterrupt:
        # Ctrl-C: the pairs done so far are written, then the interrupt goes on
        stopped, interrupted = INTERRUPTED, True
    except (RunError, UsageError) as exc:
        # a side that cannot run: the pairs done so far are written, then the error goes on
        failure = exc
        stopped = FAILED
    result = _result(ab_id, a, b, settings, schedule, seed, state, stopped, started, t0, clock)
    if history is not None:
        result["history"] = _history(history, state, q)
    folder = output / "ab" / ab_id
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / AB_FILE, result)
    atomic_write_bytes(folder / AB_TEXT, ("\n".join(ab_summary_lines(result)) + "\n").encode())
    result["path"] = str(folder)
    if interrupted:
        raise KeyboardInterrupt
    if failure is not None:
        raise failure
    return result


def _history(history: Session, state: _State, q: float) -> dict[str, Any]:
    """The recorded A session beside the fresh A runs: the drift since it was recorded
    (informative only: it was not interleaved, so it takes no part in the verdict)."""
    try:
        value = float(np.quantile(measured_latencies(history), q))
    except BundleError:
        value = None
    fresh = [float(np.quantile(x, q)) for x in state.a_runs]
    now = float(np.median(fresh)) if fresh else None
    drift = None if not value or now is None else (now / value - 1.0) * 100.0
    return {
        "session_id": history.session_id,
        "path": str(history.path),
        "created_utc": history.meta.get("created_utc"),
        "value_ms": value,
        "fresh_a_median_ms": now,
        "drift_pct": drift,
    }


def _order_effect(pairs: list[PairRecord]) -> dict[str, Any]:
    """The median pair log ratio by which side ran first: a large gap means the position in
    the pair matters (a warm file cache, a turbo budget), which randomisation turns into
    noise rather than bias."""
    out: dict[str, Any] = {}
    for first in ("A", "B"):
        d = [p.log_ratio for p in pairs if p.valid and p.first == first and p.log_ratio is not None]
        out[f"{first.lower()}_first_pairs"] = len(d)
        out[f"{first.lower()}_first_ratio"] = float(math.exp(float(np.median(d)))) if d else None
    return out


def _result(
    ab_id: str,
    a: RunOptions,
    b: RunOptions,
    settings: ABSettings,
    schedule: list[int],
    seed: int,
    state: _State,
    stopped: str,
    started: str,
    t0: float,
    clock: Callable[[], float],
) -> dict[str, Any]:
    last = state.looks[-1] if state.looks else None
    verdict = last.verdict if last is not None and stopped == DECIDED else INCONCLUSIVE
    valid = [p for p in state.pairs if p.valid]
    why = {
        DECIDED: f"decided after {len(valid)} pairs",
        MAX_PAIRS: f"budget spent: {settings.max_pairs} pairs (--max-pairs) without a decision",
        MAX_TIME: f"budget spent: --max-time {settings.max_time_s:g} s after {len(valid)} "
        "valid pairs"
        if settings.max_time_s is not None
        else "",
        INTERRUPTED: f"interrupted after {len(valid)} valid pairs",
        FAILED: f"a run failed after {len(valid)} valid pairs",
        INVALID_BUDGET: f"{state.invalid} pairs were not valid (the machine was busy): quiet "
        "the machine, or pin the runs (--isolate in both option sets)",
    }[stopped]
    warnings: list[str] = []
    if stopped != DECIDED and last is not None:
        warnings.append(
            f"no decision at the last look ({last.pairs} pairs): the interval "
            f"[{last.ci_pct[0]:+.1f} %, {last.ci_pct[1]:+.1f} %] straddles the margin "
            f"±{settings.threshold * 100:g} %; raise --max-pairs or --max-time"
        )
    elif stopped != DECIDED:
        warnings.append(
            f"no look was reached ({len(valid)} valid pairs, the first look at {schedule[0]})"
        )
    summary_pairs = [p.to_json() for p in state.pairs]
    return {
        "ab_format_version": 1,
        "ab_id": ab_id,
        "aaco_version": __version__,
        "created_utc": started,
        "finished_utc": utc_now_iso(),
        "wall_s": clock() - t0,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "regression": verdict == REGRESSION,
        "stopped": stopped,
        "stopped_reason": why,
        "effect": None if last is None else last.to_json(),
        "design": {
            "gate": settings.gate,
            "threshold_pct": settings.threshold * 100.0,
            "alpha": settings.alpha,
            "method": settings.method,
            "looks": schedule,
            "min_pairs": settings.min_pairs,
            "max_pairs": settings.max_pairs,
            "max_time_s": settings.max_time_s,
            "seed": seed,
            "contention_check": settings.check_contention,
            "per_item": settings.per_item,
        },
        "sides": {
            "A": _side_json(a, [p.a for p in valid]),
            "B": _side_json(b, [p.b for p in valid]),
        },
        "pairs_valid": len(valid),
        "pairs_invalid": state.invalid,
        "looks": [x.to_json() for x in state.looks],
        "order_effect": _order_effect(state.pairs),
        "pairs": summary_pairs,
        "warnings": warnings,
        "no_change": verdict == NO_CHANGE,
    }


def _side_json(opts: RunOptions, runs: list[RunRecord]) -> dict[str, Any]:
    values = [r.value_ms for r in runs if r.value_ms is not None]
    return {
        "model": opts.model,
        "backend": opts.backend,
        "options": {
            k: v
            for k, v in dataclasses.asdict(opts).items()
            if k not in ("argv", "output", "tag")
            and v not in (None, {}, ())
            and not isinstance(v, Path)
        },
        "runs": len(runs),
        "value_ms_median": float(np.median(values)) if values else None,
        "value_ms_min": min(values) if values else None,
        "value_ms_max": max(values) if values else None,
        "sessions": [r.session_id for r in runs],
    }


def ab_summary_lines(result: dict[str, Any]) -> list[str]:
    """The experiment in a few lines (the CLI prints them; ``ab.txt`` holds them)."""
    d = result["design"]
    eff = result.get("effect")
    lines = [f"aaco ab {result['ab_id']}: {result['verdict']}"]
    sa, sb = result["sides"]["A"], result["sides"]["B"]
    lines.append(f"  A: {sa['model']}  ({sa['runs']} runs, {d['gate']} median {_ms(sa)})")
    lines.append(f"  B: {sb['model']}  ({sb['runs']} runs, {d['gate']} median {_ms(sb)})")
    if eff is not None:
        lo, hi = eff["ci_pct"]
        span = (
            "unbounded"
            if lo is None or hi is None
            else f"[{lo:+.1f} %, {hi:+.1f} %] ({eff['level'] * 100:.2f} % level)"
        )
        lines.append(
            f"  B vs A ({d['gate']}, {d['method']}): {eff['delta_pct']:+.1f} % {span}, "
            f"margin ±{d['threshold_pct']:g} %"
        )
    lines.append(
        f"  {result['stopped_reason']}; {result['pairs_valid']} valid pairs, "
        f"{result['pairs_invalid']} redone, {result['wall_s']:.1f} s"
    )
    for w in result.get("warnings") or []:
        lines.append(f"  warning: {w}")
    h = result.get("history")
    if h and h.get("drift_pct") is not None:
        lines.append(
            f"  recorded A session {h['session_id']}: {h['value_ms']:.3f} ms; fresh A runs "
            f"{h['drift_pct']:+.1f} % from it (not interleaved: not in the verdict)"
        )
    return lines


def _ms(side: dict[str, Any]) -> str:
    v = side.get("value_ms_median")
    return "unknown" if v is None else f"{v:.3f} ms"
