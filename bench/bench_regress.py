"""False alarms and power of ``aaco diff`` on real sessions, side by side with plain Welch.

Builds a chain of ``--layers`` MatMul+Relu layers and variants with extra layers (each extra
layer adds about 1/layers of the latency: real injected slowdowns), then runs sessions of
them with ``aaco run`` in an interleaved order (base every round; base, variant, ... in the
last ``--variant-runs`` rounds) so that drifts of the machine hit every configuration alike,
and records when each session started. Then:

* A/A: pairs of base sessions (earlier one as baseline) -> the rate of each verdict of
  AACO's method at each margin in ``--thresholds``, and the rate at which Welch's t-test
  on raw iterations (p < 0.05 and a slower mean, the original design's rule) calls a
  regression;
* A/B: (base, variant) pairs -> the rate at which each method flags REGRESSION.

Single-run pairs are causal, as a CI job meets them: the baseline was recorded before the
session it judges, and the learned noise floor (margin "3 % + learned noise floor") comes
from the base sessions recorded up to and including the baseline, never a later one
(``aaco diff``'s own rule: :func:`aaco.regress.diff.baseline_history`); only pairs whose
baseline has at least ``NOISE_FLOOR_MIN_SESSIONS`` (5) such sessions are counted. The pairs
share sessions (21 base sessions give 136 such A/A pairs, but only 8 disjoint ones among them):
``bench/bench_noise_floor.py`` reports the disjoint pairs with intervals and evaluates the
floor rule out of sample.

Each comparison is made once per pair (``compare``, 2 000 resamples, fixed seed) and then
judged against every margin and gate with ``Comparison.at_margin``: the whole verdict of
``aaco diff`` (interval rule, Holm, bimodal gates, the median's shape guard), followed by
its measurement-validity check on each session's CPU contention (``contention_reason``),
as ``aaco diff`` applies it. ``--runs-per-side 1,3`` evaluates single sessions (every causal
pair) and groups of 3 sessions per side (300 random draws; disjoint groups for A/A), pooled
by the two-stage bootstrap that ``aaco diff -b B1 -b B2 -b B3 -s S1 -s S2 -s S3`` uses (no
learned floor on top of 3 runs a side, as in ``aaco diff``). The slowdown of each variant is
measured as the median, over its sessions, of the ratio of the session's median (p10) to that
of the base session recorded just before it.

Usage::

    python bench/bench_regress.py [--base-runs 21] [--variant-runs 10] [--iterations 200]
        [--thresholds 2,2.5,3] [--runs-per-side 1,3] [--threads 1] [--save lat.npz]
        [--load lat.npz] [--save-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aaco.analysis.compare import (
    INCONCLUSIVE,
    NOISE_FLOOR_MIN_SESSIONS,
    REGRESSION,
    Comparison,
    compare,
    noise_floor,
    welch_flags_regression,
)
from aaco.regress.diff import (
    HISTORY_WINDOW,
    POOLED_RUNS,
    contention_reason,
    cpu_contention,
    measured_latencies,
)
from aaco.session.bundle import Session


def chain_model(path: Path, layers: int, hidden: int, batch: int) -> None:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul_{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu_{i}"))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, hidden])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [batch, hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def run_session(model: Path, root: Path, a: argparse.Namespace, tag: str) -> Path:
    cmd = [
        sys.executable, "-m", "aaco", "run", "--model", str(model), "--iterations",
        str(a.iterations), "--warmup", str(a.warmup), "--no-profile", "--report", "none",
        "--tag", tag, "-o", str(root),
    ]  # fmt: skip
    if a.threads is not None:
        cmd += ["--threads", str(a.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"aaco run failed: {p.stderr.strip()}")
    return (root / "latest").resolve()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-runs", type=int, default=21)
    ap.add_argument("--variant-runs", type=int, default=10)
    ap.add_argument("--extra-layers", default="1,2,3,4", help="variants: extra layers each")
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--thresholds", default="2,2.5,3", help="percent, comma-separated: each is evaluated"
    )
    ap.add_argument(
        "--runs-per-side", default="1,3", help="sessions pooled per side, comma-separated"
    )
    ap.add_argument("--save", type=Path, help="save every session's latencies (.npz)")
    ap.add_argument("--load", type=Path, help="analyse saved latencies instead of running")
    ap.add_argument(
        "--save-only", action="store_true", help="with --save: record the sessions, no analysis"
    )
    ap.add_argument("--json", type=Path, help="write all figures here")
    a = ap.parse_args()
    extras = [int(x) for x in a.extra_layers.split(",") if x]
    thresholds = [float(x) for x in a.thresholds.split(",") if x]
    runs_per_side = [int(x) for x in a.runs_per_side.split(",") if x]
    if a.load:
        saved = np.load(a.load)
        keys = [0, *extras]
        sessions = {k: [saved[f"{k}_{i}"] for i in range(int(saved[f"n_{k}"]))] for k in keys}
        # files saved before contention was recorded: unknown (nan), never a made-up 0
        contention = {
            k: [float(saved.get(f"c_{k}_{i}", np.nan)) for i in range(len(sessions[k]))]
            for k in keys
        }
        started = load_start_times(saved, {k: len(v) for k, v in sessions.items()}, extras)
        run_s = 0.0
    else:
        sessions, contention, started, run_s = _run_all(a, extras)
    if a.save:
        arrays = {f"{k}_{i}": x for k, xs in sessions.items() for i, x in enumerate(xs)}
        arrays |= {f"n_{k}": np.array(len(xs)) for k, xs in sessions.items()}
        arrays |= {
            f"c_{k}_{i}": np.array(c) for k, cs in contention.items() for i, c in enumerate(cs)
        }
        arrays |= {f"t_{k}_{i}": np.array(t) for k, ts in started.items() for i, t in enumerate(ts)}
        np.savez_compressed(a.save, **arrays)
        if a.save_only:
            print(f"saved {a.save} ({run_s:.0f} s of runs)")
            return
    result = analyse(sessions, contention, extras, thresholds, runs_per_side, started)
    result["config"] = {k: str(v) for k, v in vars(a).items()}
    result["machine"] = {"cpus": os.cpu_count()}
    result["run_seconds"] = run_s
    report(result)
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


def load_start_times(
    saved: Any, counts: dict[int, int], extras: list[int]
) -> dict[int, list[float]]:
    """When each saved session started (seconds). Files saved before the start times were
    recorded get the order ``_run_all`` ran them in then: round r ran the base's r-th
    session, then each variant's r-th (while it had runs left)."""
    if all(f"t_{k}_{i}" in saved.files for k, n in counts.items() for i in range(n)):
        return {k: [float(saved[f"t_{k}_{i}"]) for i in range(n)] for k, n in counts.items()}
    order = [0, *extras]
    return {k: [r * len(order) + order.index(k) for r in range(n)] for k, n in counts.items()}


def same_round_slowdown(
    sessions: dict[int, list[np.ndarray[Any, Any]]],
    started: dict[int, list[float]],
    e: int,
    percentile: float,
) -> float:
    """Median over variant ``e``'s sessions of its ``percentile`` over that of the base
    session recorded just before it, minus 1."""
    tb = started[0]
    ratios = []
    for j, x in enumerate(sessions[e]):
        before = [i for i in range(len(tb)) if tb[i] < started[e][j]]
        if before:
            i = max(before, key=lambda i: tb[i])
            ratios.append(np.percentile(x, percentile) / np.percentile(sessions[0][i], percentile))
    return float(np.median(ratios) - 1) if ratios else float("nan")


def _run_all(
    a: argparse.Namespace, extras: list[int]
) -> tuple[
    dict[int, list[np.ndarray[Any, Any]]], dict[int, list[float]], dict[int, list[float]], float
]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sessions"
        models = {0: Path(tmp) / "m0" / "chain.onnx"}
        chain_model(models[0], a.layers, a.hidden, a.batch)
        for e in extras:
            models[e] = Path(tmp) / f"m{e}" / "chain.onnx"
            chain_model(models[e], a.layers + e, a.hidden, a.batch)
        # interleave: each round runs the base and, in the last --variant-runs rounds, each
        # variant; so every variant session has a history of earlier base sessions behind it,
        # as a change judged by a CI job has (variants ran in the first rounds before
        # 2026-11-25 evening: load_start_times)
        sessions: dict[int, list[np.ndarray[Any, Any]]] = {k: [] for k in models}
        contention: dict[int, list[float]] = {k: [] for k in models}
        started: dict[int, list[float]] = {k: [] for k in models}
        t0 = time.perf_counter()
        rounds = max(a.base_runs, a.variant_runs)
        for r in range(rounds):
            for k in models:
                want = a.base_runs if k == 0 else a.variant_runs
                if len(sessions[k]) < want and (k == 0 or r >= rounds - want):
                    started[k].append(time.time())
                    path = run_session(models[k], root, a, f"extra{k}")
                    s = Session.load(path)
                    sessions[k].append(measured_latencies(s))
                    c = cpu_contention(s)
                    contention[k].append(np.nan if c is None else c)
            print(f"round {r + 1}/{rounds} done, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        return sessions, contention, started, time.perf_counter() - t0


def _side_contention(values: list[float]) -> float | None:
    """The most contended run of a side (nan = unknown)."""
    known = [v for v in values if not np.isnan(v)]
    return max(known) if known else None


def _verdict(c: Comparison, delta: float, gate: str, ca: float | None, cb: float | None) -> str:
    """``aaco diff``'s verdict: the statistics, then the measurement-validity check. A margin
    of 100 % or more (a learned floor that large) stops ``aaco diff`` with a usage error."""
    if delta >= 1.0:
        return "ERROR"
    v = c.at_margin(delta, (gate,)).verdict
    return INCONCLUSIVE if contention_reason(ca, cb, v) else v


def causal_history(started_base: list[float], baseline_start: float) -> list[int]:
    """The base sessions ``aaco diff`` learns the floor from when this base session is the
    baseline: those recorded up to and including it, the last ``HISTORY_WINDOW``, oldest
    first (:func:`aaco.regress.diff.baseline_history`): never one recorded later."""
    idx = sorted(
        (i for i, t in enumerate(started_base) if t <= baseline_start),
        key=lambda i: started_base[i],
    )
    return idx[-HISTORY_WINDOW:]


def _pairs(
    started: dict[int, list[float]],
    e: int,
    k: int,
    same: bool,
    rng: np.random.Generator,
    limit: int,
) -> list[tuple[list[int], list[int]]]:
    """Groups of k runs per side. k = 1: every causal pair, i.e. the baseline (a base
    session) recorded before the judged session and with at least
    ``NOISE_FLOOR_MIN_SESSIONS`` base sessions up to it, so that the learned floor exists
    as it would for a CI job. Else ``limit`` random draws (disjoint groups when both sides
    come from the same configuration; no learned floor with that many runs a side)."""
    tb, tx = started[0], started[e]
    n_a, n_b = len(tb), len(tx)
    if k == 1:
        return [
            ([i], [j])
            for i in range(n_a)
            for j in range(n_b)
            if (not same or i != j)
            and tb[i] < tx[j]
            and len(causal_history(tb, tb[i])) >= NOISE_FLOOR_MIN_SESSIONS
        ]
    out = []
    for _ in range(limit):
        if same:
            idx = rng.choice(n_a, 2 * k, replace=False)
            out.append((list(idx[:k]), list(idx[k:])))
        else:
            out.append(
                (list(rng.choice(n_a, k, replace=False)), list(rng.choice(n_b, k, replace=False)))
            )
    return out


def analyse(
    sessions: dict[int, list[np.ndarray[Any, Any]]],
    contention: dict[int, list[float]],
    extras: list[int],
    thresholds: list[float],
    runs_per_side: list[int],
    started: dict[int, list[float]],
    limit: int = 300,
) -> dict[str, Any]:
    base = sessions[0]
    base_meds = [float(np.median(x)) for x in base]
    base_med = float(np.median(base_meds))
    base_p10s = [float(np.percentile(x, 10)) for x in base]
    result: dict[str, Any] = {
        "base_p50_ms": base_med,
        "base_session_p50_spread_pct": (max(base_meds) / min(base_meds) - 1) * 100,
        "base_session_p50_sd_log_pct": float(np.std(np.log(base_meds), ddof=1) * 100),
        # each variant session against the base session recorded just before it (same
        # round), so that a drift of the machine over the window does not pass for a slowdown
        "slowdowns": {e: same_round_slowdown(sessions, started, e, 50) * 100 for e in extras},
        "slowdowns_p10": {e: same_round_slowdown(sessions, started, e, 10) * 100 for e in extras},
        "contention_max": {
            k: (None if all(np.isnan(v)) else float(np.nanmax(v))) for k, v in contention.items()
        },
        "by_runs": {},
    }
    t1 = time.perf_counter()
    n_diffs = 0
    rng = np.random.default_rng(0)
    for k in runs_per_side:
        configs = [(0, True)] + [(e, False) for e in extras]
        # per configuration and pair: (comparison, p50 floor, p10 floor, contention a, b)
        cis: dict[int, list[tuple[Any, ...]]] = {}
        welch: dict[int, float] = {}
        for e, same in configs:
            other = sessions[e]
            pairs = _pairs(started, e, k, same, rng, limit)
            cis[e] = []
            flags = 0
            for ia, ib in pairs:
                a = [base[i] for i in ia]
                b = [other[j] for j in ib]
                c = compare(a, b, delta=0.0)
                # the noise floor aaco diff learns (single runs only): the base sessions
                # recorded up to and including the baseline, never a later one
                hist = causal_history(started[0], started[0][ia[0]]) if k == 1 else []
                floors = [
                    noise_floor([vals[i] for i in hist]) or 0.0 for vals in (base_meds, base_p10s)
                ]
                cont = (
                    _side_contention([contention[0][i] for i in ia]),
                    _side_contention([contention[e][j] for j in ib]),
                )
                cis[e].append((c, *floors, *cont))
                flags += welch_flags_regression(a, b)
            welch[e] = flags / len(pairs)
            n_diffs += len(pairs)
        rows: dict[str, Any] = {}
        for gate, gi in (("p50", 0), ("p10", 1)):
            for th in [*thresholds, "history"]:

                def margin(x: tuple[Any, ...], th: Any = th, gi: int = gi, k: int = k) -> float:
                    # as aaco diff: no learned floor on top of POOLED_RUNS pooled runs a side
                    if th != "history" or k >= POOLED_RUNS:
                        return 0.03 if th == "history" else float(th) / 100
                    return max(0.03, float(x[1 + gi]))

                def judge(x: tuple[Any, ...], gate: str = gate) -> str:
                    return _verdict(x[0], margin(x), gate, x[3], x[4])

                aa = [judge(x) for x in cis[0]]
                power = {
                    e: sum(judge(x) == REGRESSION for x in cis[e]) / len(cis[e]) for e in extras
                }
                detected = [e for e in extras if power[e] >= 0.95]
                measure = result["slowdowns_p10" if gate == "p10" else "slowdowns"]
                label = "3 % + learned noise floor" if th == "history" else f"{th:g} %"
                rows[f"{gate}, margin {label}"] = {
                    "aa_regression_rate": aa.count(REGRESSION) / len(aa),
                    "aa_verdicts": {v: aa.count(v) for v in sorted(set(aa))},
                    "regression_rate": power,
                    "mean_margin_pct": float(np.mean([margin(x) for x in cis[0]]) * 100),
                    "smallest_slowdown_detected_95pct": min(
                        (measure[e] for e in detected), default=None
                    ),
                }
        result["by_runs"][k] = {
            "aa_pairs": len(cis[0]),
            "ab_pairs": {e: len(cis[e]) for e in extras},
            "welch_regression_rate": welch,
            "by_threshold": rows,
        }
    result["analysis_seconds"] = time.perf_counter() - t1
    result["diffs_per_second"] = n_diffs / result["analysis_seconds"]
    return result


def report(r: dict[str, Any]) -> None:
    print(
        f"base p50 {r['base_p50_ms']:.3f} ms; session medians: spread "
        f"{r['base_session_p50_spread_pct']:.1f} %, "
        f"sd(log) {r['base_session_p50_sd_log_pct']:.2f} %"
    )
    slow = ", ".join(
        f"+{e} layer(s) {s:+.1f} % (p10 {r['slowdowns_p10'][e]:+.1f} %)"
        for e, s in r["slowdowns"].items()
    )
    print(f"measured slowdowns (p50 of session medians): {slow}")
    cont = ", ".join(
        f"{'base' if k == 0 else f'+{k}'}: {'unknown' if c is None else f'{c:.0%}'}"
        for k, c in r["contention_max"].items()
    )
    print(f"largest CPU share of other processes in a measured phase: {cont}")
    for k, g in r["by_runs"].items():
        print(f"-- {k} run(s) per side: {g['aa_pairs']} A/A pairs, A/B pairs {g['ab_pairs']}")
        w = g["welch_regression_rate"]
        print(
            "   Welch (p<0.05, slower mean): A/A "
            + f"{w[0]:.1%}; "
            + ", ".join(f"{r['slowdowns'][e]:+.1f} %: {w[e]:.1%}" for e in r["slowdowns"])
        )
        for th, row in g["by_threshold"].items():
            ab = ", ".join(
                f"{r['slowdowns'][e]:+.1f} %: {x:.1%}" for e, x in row["regression_rate"].items()
            )
            print(
                f"   AACO {th} (mean {row['mean_margin_pct']:.1f} %): "
                f"A/A REGRESSION {row['aa_regression_rate']:.1%} "
                f"{row['aa_verdicts']}; flagged {ab}; smallest at 95 %: "
                f"{row['smallest_slowdown_detected_95pct']}"
            )
    print(
        f"runs {r['run_seconds']:.0f} s; analysis {r['analysis_seconds']:.1f} s "
        f"({r['diffs_per_second']:.0f} diffs/s)"
    )


if __name__ == "__main__":
    main()
