"""False alarms and power of ``aaco ab`` (interleaved, sequential) on real runs, side by side
with single-pair ``aaco diff``.

Two steps:

``record``: runs rounds of fresh ``aaco run`` sessions (``aaco ab``'s own run function,
:func:`aaco.pipeline.run_model`, and its validity check,
:func:`aaco.experiment.ab.run_invalid_reason`) of a chain of ``--layers`` MatMul+ReLU layers
(``bench_regress.chain_model``) and of variants with ``N`` extra layers (real slowdowns).
Each round runs the pairs named by ``--pairs`` (default ``AA,AB1,AA,AB1,AB2,AB4``: A/A pairs
of the base with itself, A/B pairs of the base with the variant of 1, 2 or 4 extra layers)
in a random order; each pair, as ``aaco ab`` runs it, is two adjacent runs in an order drawn
at random. One JSON line per run (round, pair, side, configuration, validity, measured
latencies) goes to ``--out``. The
bundles are deleted once read (``--keep`` keeps them).

``analyse``: replays ``aaco ab``'s sequential rule (:func:`aaco.analysis.paired.evaluate` at
the looks of the schedule, invalid pairs skipped as ``aaco ab`` redoes them) over the
recorded pairs, in recording order, cut into **disjoint** experiments: an experiment starts
at the pair after the previous one stopped. Reports, per method: the rate of each verdict,
the median pairs and wall time to a decision; and, for single-pair ``aaco diff``
(:func:`aaco.analysis.compare.compare` on the two runs of each pair, the 3 % margin, no
history), the same rates.

Usage::

    python bench/bench_ab.py record --out ab_runs.jsonl [--minutes 60] [--pairs AA,AB1]
    python bench/bench_ab.py analyse ab_runs.jsonl [--json out.json] [--max-pairs 40]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aaco.analysis.compare import INCONCLUSIVE, NO_CHANGE, QUANTILES, REGRESSION, compare
from aaco.analysis.paired import METHODS, evaluate, looks
from bench_regress import chain_model


def record(a: argparse.Namespace) -> None:
    from aaco.experiment.ab import run_invalid_reason
    from aaco.pipeline import RunOptions, run_model
    from aaco.regress.diff import measured_latencies

    work = Path(a.work)
    units = a.pairs.split(",")  # e.g. AA, AB1: side A runs config A, side B config A / B1
    models: dict[str, Path] = {}
    for unit in units:
        for c in ("A", "A" if unit == "AA" else f"B{unit[2:]}"):
            extra = 0 if c == "A" else int(c[1:])
            models[c] = work / f"chain_{a.layers + extra}.onnx"
            if not models[c].exists():
                chain_model(models[c], a.layers + extra, a.hidden, a.batch)
    rng = random.Random(a.seed)
    deadline = time.monotonic() + a.minutes * 60
    rnd = 0
    with open(a.out, "a") as fh:
        while time.monotonic() < deadline:
            order = list(range(len(units)))
            rng.shuffle(order)
            pos = 0
            for u in order:
                unit = units[u]
                sides = {"A": "A", "B": "A" if unit == "AA" else f"B{unit[2:]}"}
                # as aaco ab runs a pair: two adjacent runs, the order drawn at random
                for side in ["A", "B"] if rng.random() < 0.5 else ["B", "A"]:
                    c = sides[side]
                    opts = RunOptions(
                        model=str(models[c]), iterations=a.iterations, warmup=a.warmup,
                        threads=a.threads, profile=False, output=work / "sessions",
                        auto_calibrate=False, tag=f"bench_ab:{c}",
                    )  # fmt: skip
                    t = time.monotonic()
                    s = run_model(opts)
                    wall = time.monotonic() - t
                    x = measured_latencies(s) if s.status == "completed" else np.array([])
                    row = {
                        "round": a.round_offset + rnd, "unit": u, "kind": unit, "side": side,
                        "position": pos, "config": c, "layers": a.layers, "wall_s": wall,
                        "status": s.status, "invalid": run_invalid_reason(s),
                        "utc": s.meta.get("created_utc"),
                        "lat_ms": [round(float(v), 5) for v in x],
                    }  # fmt: skip
                    pos += 1
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    if not a.keep:
                        shutil.rmtree(s.path, ignore_errors=True)
            rnd += 1


def load(paths: list[str]) -> dict[int, list[dict[str, Any]]]:
    rounds: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for p in paths:
        with open(p) as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    if "kind" in r:  # files of the adjacent-pair design only
                        rounds[r["round"]].append(r)
    return dict(sorted(rounds.items()))


def pairs_of(rounds: dict[int, list[dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    """The recorded pairs of one kind (AA, AB1 ...), in recording order."""
    out = []
    for rnd, runs in rounds.items():
        units: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in runs:
            if r["kind"] == kind:
                units[r["unit"]][r["side"]] = r
        for u in sorted(units):
            x, y = units[u].get("A"), units[u].get("B")
            if x is None or y is None:
                continue  # the recording stopped inside this pair
            if x["status"] != "completed" or y["status"] != "completed":
                continue
            valid = x["invalid"] is None and y["invalid"] is None
            out.append({
                "round": rnd, "a": np.asarray(x["lat_ms"]), "b": np.asarray(y["lat_ms"]),
                "valid": valid, "wall_s": x["wall_s"] + y["wall_s"],
            })  # fmt: skip
    return out


def replay(pairs: list[dict[str, Any]], *, method: str, gate: str, delta: float, alpha: float,
           min_pairs: int, max_pairs: int) -> list[dict[str, Any]]:  # fmt: skip
    """Disjoint sequential experiments over ``pairs``: each as aaco ab would run it."""
    schedule = looks(min_pairs, max_pairs)
    out, i = [], 0
    while i < len(pairs):
        a_runs: list[Any] = []
        b_runs: list[Any] = []
        wall, used, verdict, decided = 0.0, 0, INCONCLUSIVE, False
        effect = None
        while i < len(pairs) and len(a_runs) < max_pairs:
            p = pairs[i]
            i += 1
            used += 1
            wall += p["wall_s"]
            if not p["valid"]:
                continue
            a_runs.append(p["a"])
            b_runs.append(p["b"])
            if len(a_runs) in schedule:
                look = evaluate(a_runs, b_runs, gate=gate, delta=delta, alpha=alpha,
                                schedule=schedule, method=method)  # fmt: skip
                effect = look.ratio
                if look.decided:
                    verdict, decided = look.verdict, True
                    break
        if not decided and len(a_runs) < max_pairs:
            break  # the stream ended inside this experiment: not counted
        out.append({"verdict": verdict, "pairs": len(a_runs), "pairs_run": used,
                    "wall_s": wall, "ratio": effect})  # fmt: skip
    return out


def resampled(
    pairs: list[dict[str, Any]], n_exp: int, seed: int, **kw: Any
) -> list[dict[str, Any]]:
    """Experiments on pairs drawn at random (without replacement within an experiment) from
    the recorded valid pairs: the real distribution of pair ratios, not their time order;
    experiments share pairs, so they are not independent."""
    valid = [p for p in pairs if p["valid"]]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_exp):
        order = rng.permutation(len(valid))[: kw["max_pairs"]]
        exps = replay([valid[i] for i in order], **kw)
        if exps:
            out.append(exps[0])
    return out


def summarise(exps: list[dict[str, Any]]) -> dict[str, Any]:
    verdicts = [e["verdict"] for e in exps]
    decided = [e["pairs"] for e in exps if e["verdict"] != INCONCLUSIVE]
    alarms = sum(v not in (NO_CHANGE, INCONCLUSIVE) for v in verdicts)
    return {
        "experiments": len(exps),
        "rates": {v: verdicts.count(v) / len(exps) for v in sorted(set(verdicts))},
        "regression_rate": verdicts.count(REGRESSION) / len(exps),
        "false_alarm_rate": alarms / len(exps),
        "median_pairs": float(np.median([e["pairs"] for e in exps])),
        "median_pairs_decided": float(np.median(decided)) if decided else None,
        "median_wall_s": float(np.median([e["wall_s"] for e in exps])),
    }


def single_pair_diff(pairs: list[dict[str, Any]], gate: str, delta: float) -> dict[str, float]:
    counts: dict[str, int] = defaultdict(int)
    n = 0
    for p in pairs:
        if not p["valid"]:
            continue
        c = compare(p["a"], p["b"], delta=delta, gates=(gate,), resamples=1000)
        counts[c.verdict] += 1
        n += 1
    return {k: v / n for k, v in counts.items()} | {"n": n}


def analyse(a: argparse.Namespace) -> None:
    rounds = load(a.files)
    if a.since:
        rounds = {k: [r for r in v if (r.get("utc") or "") >= a.since] for k, v in rounds.items()}
    kinds = sorted({r["kind"] for runs in rounds.values() for r in runs})
    evals = {k: pairs_of(rounds, k) for k in kinds}
    report: dict[str, Any] = {"rounds": len(rounds), "evaluations": {}}
    for name, pairs in evals.items():
        valid = [p for p in pairs if p["valid"]]
        if not valid:
            continue
        q = QUANTILES[a.gate]
        d = np.log([np.quantile(p["b"], q) / np.quantile(p["a"], q) for p in valid])
        entry: dict[str, Any] = {
            "pairs": len(pairs), "valid_pairs": len(valid),
            "median_ratio": float(math.exp(np.median(d))),
            "mean_log_ratio": float(d.mean()), "sd_log_ratio": float(d.std(ddof=1)),
            "mad_sd_log_ratio": float(1.4826 * np.median(np.abs(d - np.median(d)))),
            "wall_per_pair_s": float(np.mean([p["wall_s"] for p in pairs])),
            "methods": {},
        }  # fmt: skip
        for m in a.methods.split(","):
            kw = {"method": m, "gate": a.gate, "delta": a.threshold / 100, "alpha": a.alpha,
                  "min_pairs": a.min_pairs, "max_pairs": a.max_pairs}  # fmt: skip
            exps = replay(pairs, **kw)
            entry["methods"][m] = {
                "disjoint": summarise(exps) if exps else None,
                "resampled": summarise(resampled(pairs, a.resampled, 1, **kw)),
            }
        entry["single_pair_diff"] = single_pair_diff(pairs, a.gate, a.diff_threshold / 100)
        report["evaluations"][name] = entry
    text = json.dumps(report, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--work", default="/tmp/bench_ab")
    r.add_argument("--minutes", type=float, default=60)
    r.add_argument("--pairs", default="AA,AB1,AA,AB1,AB2,AB4")
    r.add_argument("--round-offset", type=int, default=0)
    r.add_argument("--layers", type=int, default=20)
    r.add_argument("--hidden", type=int, default=512)
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--iterations", type=int, default=40)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--keep", action="store_true")
    n = sub.add_parser("analyse")
    n.add_argument("files", nargs="+")
    n.add_argument("--json")
    n.add_argument("--gate", default="p10")
    n.add_argument("--threshold", type=float, default=1.0, help="margin, percent")
    n.add_argument("--alpha", type=float, default=0.05)
    n.add_argument("--min-pairs", type=int, default=12)
    n.add_argument("--max-pairs", type=int, default=80)
    n.add_argument("--resampled", type=int, default=200, help="re-sampled experiments")
    n.add_argument("--since", help="only runs recorded at or after this UTC time (ISO)")
    n.add_argument("--diff-threshold", type=float, default=3.0, help="aaco diff's margin, %")
    n.add_argument("--methods", default=",".join(METHODS))
    a = ap.parse_args()
    record(a) if a.cmd == "record" else analyse(a)


if __name__ == "__main__":
    main()
