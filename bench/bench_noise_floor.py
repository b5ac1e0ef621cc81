"""The learned noise floor of ``aaco diff``, judged causally and out of sample on saved real
sessions (BENCHMARKS.md §11).

Reads the latencies (and start times) that ``bench/bench_regress.py --save lat.npz`` stored,
one file per *window* (a separate recording), and judges single-run pairs with the whole
verdict of ``aaco diff`` (p10 gate, 3 % threshold, Holm, shape guards, then the CPU-contention
check) under a grid of noise-floor rules:

* ``levels``: ``K x 1.4826 x MAD(log q)`` (the design documents' example has K = 3);
* ``levels-sqrt2``: the same scaled by sqrt(2), for the difference of two sessions;
* ``moving-range``: ``K x 1.4826 x MAD(consecutive differences of log q)``; AACO ships K = 3
  (:func:`aaco.analysis.compare.noise_floor`), fixed on the windows of 2026-11-25 morning,
  whose latency files were not kept: any window recorded later is out of sample for it;

with K in ``--k-grid``. What makes the figures honest:

* **Causal.** A pair's baseline is a base session recorded before the session it judges, and
  its floor comes from the base sessions recorded up to and including the baseline (the last
  50), as ``aaco diff`` reads a baseline's history: never a later session. Pairs whose
  baseline has fewer than 5 such sessions get no floor in ``aaco diff`` (a cold start) and are
  left out here.
* **Independence.** The causal pairs of one window share sessions (21 base sessions give
  136 A/A pairs), so their rates are not rates over independent trials. The script also
  reports *disjoint* pairs: consecutive base sessions (i, i+1) from the 5th on for A/A, and
  each variant session with the base session recorded just before it for A/B, no session in
  two pairs of one set, with exact (Clopper-Pearson) 95 % intervals. Their floors still
  share history, as a CI job's do.
* **Contention.** ``aaco diff`` turns a REGRESSION into INCONCLUSIVE when other processes
  held the CPU during a measured phase; on a busy machine that check, not the floor, decides.
  ``--allow-contention`` judges without it, which isolates the floor rule.
* **Out of sample.** Leave one window out: the rule (family and K) is chosen on the other
  windows (the highest mean power over the variants among the rules with at most 1 % A/A
  false alarms over their causal pairs; the fewest false alarms if none qualifies) and its
  false alarms and power are reported on the held-out window.

Usage::

    python bench/bench_noise_floor.py lat1.npz lat2.npz [lat3.npz ...] [--k-grid 2,2.5,3,3.5,4]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta

from aaco.analysis.compare import (
    INCONCLUSIVE,
    NOISE_FLOOR_MIN_SESSIONS,
    REGRESSION,
    Comparison,
    compare,
)
from aaco.regress.diff import contention_reason
from bench_regress import causal_history, load_start_times, same_round_slowdown

THRESHOLD = 0.03
MAX_AA_RATE = 0.01
SHIPPED = ("moving-range", 3.0)


def _mad(v: np.ndarray[Any, Any]) -> float:
    return float(np.median(np.abs(v - np.median(v))))


def _levels(q: Sequence[float], k: float) -> float:
    return math.expm1(k * 1.4826 * _mad(np.log(np.asarray(q))))


def _levels_sqrt2(q: Sequence[float], k: float) -> float:
    return math.expm1(k * math.sqrt(2) * 1.4826 * _mad(np.log(np.asarray(q))))


def _moving_range(q: Sequence[float], k: float) -> float:
    # aaco.analysis.compare.noise_floor with NOISE_FLOOR_K = k
    return math.expm1(k * 1.4826 * _mad(np.diff(np.log(np.asarray(q)))))


RULES: dict[str, Callable[[Sequence[float], float], float]] = {
    "levels": _levels,
    "levels-sqrt2": _levels_sqrt2,
    "moving-range": _moving_range,
}


def clopper_pearson(x: int, n: int) -> tuple[float, float]:
    """Exact 95 % interval of a binomial rate."""
    lo = 0.0 if x == 0 else float(beta.ppf(0.025, x, n - x + 1))
    hi = 1.0 if x == n else float(beta.ppf(0.975, x + 1, n - x))
    return lo, hi


class Window:
    """One recording: every causal pair compared once, judged under any rule afterwards."""

    def __init__(self, path: Path, contention_check: bool = True) -> None:
        saved = np.load(path)
        self.contention_check = contention_check
        self.errors: set[tuple[Any, ...]] = set()
        self.name = path.name
        keys = sorted(int(k[2:]) for k in saved.files if k.startswith("n_"))
        self.variants = [k for k in keys if k != 0]
        self.runs = {k: [saved[f"{k}_{i}"] for i in range(int(saved[f"n_{k}"]))] for k in keys}
        self.started = load_start_times(
            saved, {k: len(v) for k, v in self.runs.items()}, self.variants
        )
        self.timed = all(f"t_0_{i}" in saved.files for i in range(len(self.runs[0])))
        self.cont = {
            k: [float(saved.get(f"c_{k}_{i}", np.nan)) for i in range(len(v))]
            for k, v in self.runs.items()
        }
        base = self.runs[0]
        self.p10 = [float(np.percentile(x, 10)) for x in base]
        self.median_contention = float(np.nanmedian(self.cont[0]))
        meds = [float(np.median(x)) for x in base]
        self.sd_log_pct = float(np.std(np.log(meds), ddof=1) * 100)
        # each variant session against the base session recorded just before it
        self.slowdown_p10 = {
            e: same_round_slowdown(self.runs, self.started, e, 10) for e in self.variants
        }
        tb = self.started[0]
        order = sorted(range(len(base)), key=lambda i: tb[i])
        eligible = [i for i in order if len(causal_history(tb, tb[i])) >= NOISE_FLOOR_MIN_SESSIONS]
        # (config, baseline index, session index) -> comparison, history of the baseline
        self.pairs: dict[int, list[tuple[int, int]]] = {}
        self.disjoint: dict[int, list[tuple[int, int]]] = {}
        self.pairs[0] = [(i, j) for i in eligible for j in order if tb[j] > tb[i]]
        self.disjoint[0] = []
        for pos in range(0, len(eligible) - 1, 2):
            i, j = eligible[pos], eligible[pos + 1]
            if order.index(j) == order.index(i) + 1:
                self.disjoint[0].append((i, j))
        for e in self.variants:
            tx = self.started[e]
            self.pairs[e] = [(i, j) for i in eligible for j in range(len(tx)) if tb[i] < tx[j]]
            self.disjoint[e] = []
            for j in sorted(range(len(tx)), key=lambda j: tx[j]):
                before = [i for i in eligible if tb[i] < tx[j]]
                if before:
                    i = max(before, key=lambda i: tb[i])
                    if all(i != a for a, _ in self.disjoint[e]):
                        self.disjoint[e].append((i, j))
        self.comparisons: dict[tuple[int, int, int], Comparison] = {}
        for e, ps in self.pairs.items():
            for i, j in ps:
                self.comparisons[(e, i, j)] = compare(self.runs[0][i], self.runs[e][j], delta=0.0)
        self.n_cold_aa = sum(1 for i in order for j in order if tb[j] > tb[i] and i not in eligible)

    def history(self, i: int) -> list[float]:
        return [self.p10[h] for h in causal_history(self.started[0], self.started[0][i])]

    def flagged(
        self, rule: tuple[str, float], e: int, disjoint: bool = False
    ) -> tuple[int, int, float]:
        """REGRESSION verdicts, pairs, mean margin of one configuration under one rule."""
        fn, k = RULES[rule[0]], rule[1]
        hits, margins = 0, []
        for i, j in (self.disjoint if disjoint else self.pairs)[e]:
            margin = max(THRESHOLD, fn(self.history(i), k))
            margins.append(margin)
            if margin >= 1.0:
                # a floor of 100 % or more: aaco diff stops with a usage error (compare()
                # takes a margin in [0, 1)), never a REGRESSION
                self.errors.add((rule, e, i, j))
                continue
            v = self.comparisons[(e, i, j)].at_margin(margin, ("p10",)).verdict
            ca, cb = self.cont[0][i], self.cont[e][j]
            if self.contention_check and contention_reason(
                None if np.isnan(ca) else ca, None if np.isnan(cb) else cb, v
            ):
                v = INCONCLUSIVE
            hits += v == REGRESSION
        n = len((self.disjoint if disjoint else self.pairs)[e])
        return hits, n, float(np.mean(margins)) if margins else float("nan")


def _rate(x: int, n: int, ci: bool = False) -> str:
    if n == 0:
        return "-"
    s = f"{x}/{n} ({x / n:.1%})"
    if ci:
        lo, hi = clopper_pearson(x, n)
        s += f" [{lo:.1%}, {hi:.1%}]"
    return s


def _score(windows: list[Window], rule: tuple[str, float]) -> tuple[float, float, int]:
    """Pooled A/A false-alarm rate, mean power over the variants, A/A pairs."""
    aa = [w.flagged(rule, 0) for w in windows]
    fa = sum(x for x, _, _ in aa) / max(1, sum(n for _, n, _ in aa))
    powers = []
    for e in windows[0].variants:
        ab = [w.flagged(rule, e) for w in windows]
        powers.append(sum(x for x, _, _ in ab) / max(1, sum(n for _, n, _ in ab)))
    return fa, float(np.mean(powers)), sum(n for _, n, _ in aa)


def choose(windows: list[Window], grid: list[tuple[str, float]]) -> tuple[str, float]:
    scored = [(rule, *_score(windows, rule)) for rule in grid]
    ok = [s for s in scored if s[1] <= MAX_AA_RATE]
    if ok:
        return max(ok, key=lambda s: (s[2], -s[1]))[0]
    return min(scored, key=lambda s: (s[1], -s[2]))[0]


def report_rule(w: Window, rule: tuple[str, float], label: str) -> dict[str, Any]:
    aa, aad = w.flagged(rule, 0), w.flagged(rule, 0, disjoint=True)
    ab = {e: w.flagged(rule, e) for e in w.variants}
    abd = {e: w.flagged(rule, e, disjoint=True) for e in w.variants}
    power = ", ".join(
        f"{w.slowdown_p10[e]:+.1%}: {_rate(*ab[e][:2])} | disjoint {_rate(*abd[e][:2])}"
        for e in w.variants
    )
    print(
        f"  {label:34s} margin {aa[2] * 100:4.1f} %; A/A {_rate(*aa[:2])}; disjoint A/A "
        f"{_rate(*aad[:2], ci=True)}\n      flagged {power}"
    )
    return {
        "rule": list(rule),
        "aa": aa[:2],
        "aa_disjoint": aad[:2],
        "aa_disjoint_ci95": clopper_pearson(*aad[:2]) if aad[1] else None,
        "mean_margin": aa[2],
        "ab": {e: ab[e][:2] for e in w.variants},
        "ab_disjoint": {e: abd[e][:2] for e in w.variants},
        "slowdown_p10": w.slowdown_p10,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("saved", type=Path, nargs="+", help="files of bench_regress.py --save")
    ap.add_argument("--k-grid", default="2,2.5,3,3.5,4", help="multipliers K to choose from")
    ap.add_argument(
        "--allow-contention",
        action="store_true",
        help="judge without the CPU-contention check (aaco diff --allow-contention): the "
        "statistics and the floor alone",
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    grid = [(r, float(k)) for r in RULES for k in a.k_grid.split(",") if k]
    windows = [Window(p, not a.allow_contention) for p in a.saved]
    print(
        "verdicts "
        + (
            "without the CPU-contention check (--allow-contention)"
            if a.allow_contention
            else "with aaco diff's CPU-contention check"
        )
    )
    out: dict[str, Any] = {"windows": {}, "leave_one_window_out": {}}
    for w in windows:
        print(
            f"== {w.name}: {len(w.runs[0])} base sessions, sd(log median) {w.sd_log_pct:.2f} %, "
            f"median CPU share of other processes {w.median_contention:.0%}; "
            f"causal pairs with >= {NOISE_FLOOR_MIN_SESSIONS} sessions of history: A/A "
            f"{len(w.pairs[0])} (disjoint {len(w.disjoint[0])}; cold starts left out "
            f"{w.n_cold_aa}), A/B per variant {[len(w.pairs[e]) for e in w.variants]} "
            f"(disjoint {[len(w.disjoint[e]) for e in w.variants]})"
            + ("" if w.timed else "; start times reconstructed from the run order")
        )
        rows = {}
        for rule in [("levels", 3.0), ("levels-sqrt2", 3.0), SHIPPED]:
            label = f"{rule[0]} K={rule[1]:g}" + (" (AACO)" if rule == SHIPPED else "")
            rows[label] = report_rule(w, rule, label)
        out["windows"][w.name] = {"sd_log_pct": w.sd_log_pct, "rules": rows}
    if len(windows) >= 2:
        print(
            f"== leave one window out: rule chosen on the other windows (max mean power with "
            f"A/A <= {MAX_AA_RATE:.0%}), grid {len(grid)} rules"
        )
        for held in windows:
            train = [w for w in windows if w is not held]
            rule = choose(train, grid)
            fa, pw, n = _score(train, rule)
            print(
                f" held out {held.name}: chosen {rule[0]} K={rule[1]:g} (on the others: A/A "
                f"{fa:.1%} of {n}, mean power {pw:.1%})"
            )
            out["leave_one_window_out"][held.name] = {
                "chosen": list(rule),
                "train_aa": fa,
                "train_power": pw,
                "held_out": report_rule(held, rule, "on the held-out window"),
            }
    # pooled over all windows: the shipped rule, out of sample for every window recorded
    # after it was fixed; disjoint pairs only, with exact intervals
    pooled: dict[str, Any] = {}
    aa = [w.flagged(SHIPPED, 0, disjoint=True) for w in windows]
    x, n = sum(v[0] for v in aa), sum(v[1] for v in aa)
    print(f"== all windows, AACO's rule, disjoint pairs: A/A {_rate(x, n, ci=True)}")
    pooled["aa_disjoint"] = (x, n)
    for e in windows[0].variants:
        ab = [w.flagged(SHIPPED, e, disjoint=True) for w in windows]
        x, n = sum(v[0] for v in ab), sum(v[1] for v in ab)
        slow = ", ".join(f"{w.slowdown_p10[e]:+.1%}" for w in windows)
        print(f"   +{e} layer(s) (p10 {slow}): flagged {_rate(x, n, ci=True)}")
        pooled[f"ab_disjoint_{e}"] = (x, n)
    out["pooled_shipped_disjoint"] = pooled
    errors = sum(len(w.errors) for w in windows)
    if errors:
        print(
            f"({errors} (rule, pair) judgments had a learned floor >= 100 %: aaco diff stops "
            "with a usage error there; counted as pairs, never as REGRESSION)"
        )
    out["floor_over_100pct"] = errors
    if a.json:
        a.json.write_text(json.dumps(out, indent=2, default=float))


if __name__ == "__main__":
    main()
