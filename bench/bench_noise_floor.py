"""Noise-floor rules of ``aaco diff`` compared on saved real sessions (BENCHMARKS.md §11).

Reads the latencies that ``bench/bench_regress.py --save lat.npz`` stored, and judges every
single-run pair (A/A: pairs of base sessions; A/B: base against each variant) with the whole
verdict of ``aaco diff`` (p10 gate, 3 % threshold) under three noise floors, each learned
from the other base sessions in time order:

* ``levels``: the design documents' example, ``3 x 1.4826 x MAD(log q)``;
* ``levels-sqrt2``: the same, scaled to the difference of two sessions;
* ``moving-range``: AACO's rule, ``3 x 1.4826 x MAD(consecutive differences of log q)``
  (:func:`aaco.analysis.compare.noise_floor`).

Prints, per rule, the rate of REGRESSION verdicts for A/A pairs and each variant, and the
mean margin. Usage::

    python bench/bench_noise_floor.py lat.npz [lat2.npz ...]
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aaco.analysis.compare import REGRESSION, compare, noise_floor

THRESHOLD = 0.03


def _mad(v: np.ndarray[Any, Any]) -> float:
    return float(np.median(np.abs(v - np.median(v))))


def _levels(q: Sequence[float]) -> float:
    return math.expm1(3 * 1.4826 * _mad(np.log(np.asarray(q))))


def _levels_sqrt2(q: Sequence[float]) -> float:
    return math.expm1(3 * math.sqrt(2) * 1.4826 * _mad(np.log(np.asarray(q))))


def _moving_range(q: Sequence[float]) -> float:
    return noise_floor(list(q)) or 0.0


RULES: dict[str, Callable[[Sequence[float]], float]] = {
    "levels": _levels,
    "levels-sqrt2": _levels_sqrt2,
    "moving-range": _moving_range,
}


def analyse(path: Path) -> None:
    saved = np.load(path)
    keys = sorted(int(k[2:]) for k in saved.files if k.startswith("n_"))
    runs = {k: [saved[f"{k}_{i}"] for i in range(int(saved[f"n_{k}"]))] for k in keys}
    base = runs[0]
    p10 = [float(np.percentile(x, 10)) for x in base]
    flagged: dict[tuple[str, int], list[bool]] = {}
    margins: dict[str, list[float]] = {r: [] for r in RULES}
    for k in keys:
        other = runs[k]
        pairs = (
            list(itertools.combinations(range(len(base)), 2))
            if k == 0
            else [(i, j) for i in range(len(base)) for j in range(len(other))]
        )
        for i, j in pairs:
            c = compare(base[i], other[j], delta=0.0)
            used = {i, j} if k == 0 else {i}
            history = [v for n, v in enumerate(p10) if n not in used]  # time order kept
            for rule, fn in RULES.items():
                margin = max(THRESHOLD, fn(history))
                flagged.setdefault((rule, k), []).append(c.at_margin(margin).verdict == REGRESSION)
                if k == 0:
                    margins[rule].append(margin)
    print(f"== {path}")
    for rule in RULES:
        rates = ", ".join(
            f"{'A/A' if k == 0 else f'+{k} layer(s)'} {np.mean(flagged[(rule, k)]):.1%}"
            for k in keys
        )
        print(f"{rule:13s} mean margin {np.mean(margins[rule]) * 100:.1f} %: {rates}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("saved", type=Path, nargs="+", help="files of bench_regress.py --save")
    for path in ap.parse_args().saved:
        analyse(path)


if __name__ == "__main__":
    main()
