"""Kineto trace import: AACO against Holistic Trace Analysis (HTA) on the same generated trace.

Generates (bench/gen_kineto_trace.py, seeded) a CUDA-flavour trace in Kineto's layout, then
runs each tool in its own fresh subprocess and measures wall time and peak RSS
(``ru_maxrss``), also RSS growth over the process's baseline after its imports:

* AACO: :func:`aaco_job`: import + the full analysis ``aaco import`` runs.
* HTA: ``TraceAnalysis(trace_dir=...)`` + ``get_temporal_breakdown(visualize=False)`` under
  ``/tmp/hta-venv/bin/python`` (skipped with a message when that interpreter is missing;
  ``python3.11 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis``).
  Run a second time with ``HTA_DISABLE_NS_ROUNDING=1`` (untimed): by default HTA rounds each
  event's start up and end down to whole microseconds, which shifts its breakdown on traces
  with sub-microsecond times; without rounding it must agree with AACO's breakdown over the
  kernels HTA keeps (:func:`aaco.analysis.timeline.hta_selection`).

Usage::

    python bench/bench_kineto.py [--events 216000] [--keep DIR] [--no-hta] [--no-hta-exact]
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

HERE = Path(__file__).resolve().parent
HTA_PYTHON = Path(os.environ.get("AACO_HTA_PYTHON", "/tmp/hta-venv/bin/python"))


def aaco_job(path: Path) -> dict[str, Any]:
    """The timed AACO work on one trace: import + the full analysis `aaco import` runs
    (kernel classification, op->kernel attribution, kernel groups, derived metrics with
    the temporal/idle breakdowns and launch statistics)."""
    from aaco.importers.kineto import KinetoImporter
    from aaco.ingest import analyze_trace

    t0 = time.perf_counter()
    tables = KinetoImporter().read(path)
    t1 = time.perf_counter()
    analyzed = analyze_trace(tables)
    t2 = time.perf_counter()
    return {
        "import_s": t1 - t0,
        "analysis_s": t2 - t1,
        "rows": tables.event_count,
        "kernels": tables.kernels.num_rows,
        "temporal_breakdown": analyzed.metrics["temporal_breakdown"],
        # for the comparison with HTA, computed after the timing (see _AACO_CHILD)
        "tables": tables,
        "attributed": analyzed.attribution.get("kernels_attributed_fraction"),
        # forked decoding workers and their memory (see _AACO_CHILD)
        "workers": tables.meta.get("workers", []),
    }


def _hta_view(tables: Any) -> list[dict[str, Any]]:
    """AACO's temporal breakdown over the kernels HTA keeps (it drops the last step's)."""
    from aaco.analysis.timeline import hta_selection, temporal_breakdown

    kernels, memcpy = hta_selection(
        tables.kernels, tables.memcpy, tables.api_calls, tables.annotations
    )
    return temporal_breakdown(kernels, memcpy)


_AACO_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {bench!r})
from pathlib import Path
import aaco.importers.kineto, aaco.ingest, pyarrow, numpy, msgspec  # imports out of the timing
import aaco.analysis.attribution, aaco.analysis.kernels, aaco.analysis.timeline
from bench_kineto import _hta_view, aaco_job
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
out = aaco_job(Path({path!r}))
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out["temporal_breakdown_hta_selection"] = _hta_view(out.pop("tables"))
# the whole job's memory counts the forked workers: their peak RSS (RUSAGE_CHILDREN, which
# also counts the pages they share with this process) and their private memory (own pages
# and copy-on-write copies, read from /proc at their end)
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
private = sum(w["private_kb"] for w in out["workers"])
print(json.dumps({{"seconds": dt, "peak_kb": peak, "base_kb": base, "out": out,
                   "children_peak_kb": children, "children_private_kb": private}}))
"""

_HTA_CHILD = """
import json, resource, sys, time, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir={trace_dir!r})
t1 = time.perf_counter()
tb = analyzer.get_temporal_breakdown(visualize=False)
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"seconds": dt, "load_seconds": t1 - t0, "peak_kb": peak, "base_kb": base,
                   "out": json.loads(tb.to_json(orient="records"))}}))
"""


def _run(python: str, code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE.parent,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _print_hta(label: str, r: dict[str, Any]) -> None:
    for row in r["out"]:
        print(
            f"{label}, rank {row['rank']}: idle {row['idle_time(us)']:.0f} us, compute "
            f"{row['compute_time(us)']:.0f} us, non-compute {row['non_compute_time(us)']:.0f} "
            f"us, total {row['kernel_time(us)']:.0f} us ({row['idle_time_pctg']:.2f} / "
            f"{row['compute_time_pctg']:.2f} / {row['non_compute_time_pctg']:.2f} %)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=216_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="write the trace here and keep it")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument(
        "--no-hta-exact", action="store_true", help="skip HTA's second run without rounding"
    )
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = a.keep or Path(tmp) / "trace"
        trace_dir.mkdir(parents=True, exist_ok=True)
        # HTA reads every rank file of a directory; one rank, as HTA names them
        path = trace_dir / "rank-0.json"
        # generated in a child: ru_maxrss survives fork+exec, so the parent must stay small
        # for the children's peak RSS figures to be their own
        gen = [sys.executable, str(HERE / "gen_kineto_trace.py"), str(path)]
        gen += ["--events", str(a.events), "--seed", str(a.seed)]
        out = subprocess.run(gen, capture_output=True, text=True, check=True).stdout
        n = int(out.rsplit(":", 1)[1].split()[0])
        size_mb = path.stat().st_size / 1e6
        print(f"trace: {path} {n} events, {size_mb:.1f} MB")

        rows: list[tuple[str, dict[str, Any]]] = []
        aaco = _run(sys.executable, _AACO_CHILD.format(bench=str(HERE), path=str(path)))
        rows.append(("aaco", aaco))
        views = (("all kernels", "temporal_breakdown"),
                 ("HTA's selection", "temporal_breakdown_hta_selection"))  # fmt: skip
        for label, key in views:
            for row in aaco["out"][key]:
                print(
                    f"AACO temporal breakdown ({label}), device {row['device']}: idle "
                    f"{row['idle_ns'] / 1e3:.0f} us, compute {row['compute_ns'] / 1e3:.0f} "
                    f"us, non-compute {row['non_compute_ns'] / 1e3:.0f} us, total "
                    f"{row['total_ns'] / 1e3:.0f} us ({row['idle_pct']:.2f} / "
                    f"{row['compute_pct']:.2f} / {row['non_compute_pct']:.2f} %)"
                )
        if a.no_hta:
            print("HTA: skipped (--no-hta)")
        elif not HTA_PYTHON.exists():
            print(f"HTA: skipped ({HTA_PYTHON} not found; set AACO_HTA_PYTHON)")
        else:
            hta = _run(str(HTA_PYTHON), _HTA_CHILD.format(trace_dir=str(trace_dir)))
            rows.append(("hta", hta))
            _print_hta("HTA temporal breakdown (default: ts rounded up, end down, to us)", hta)
            if not a.no_hta_exact:
                # HTA rounds event times to whole microseconds by default; with rounding off
                # its definitions give AACO's numbers (AACO keeps Kineto's ns resolution)
                exact = _run(
                    str(HTA_PYTHON),
                    _HTA_CHILD.format(trace_dir=str(trace_dir)),
                    {"HTA_DISABLE_NS_ROUNDING": "1"},
                )
                _print_hta("HTA temporal breakdown (HTA_DISABLE_NS_ROUNDING=1)", exact)

        print(f"{'tool':6} {'events':>8} {'seconds':>8} {'events/s':>10} {'peak MB':>8} "
              f"{'+RSS MB':>8}")  # fmt: skip
        for name, r in rows:
            peak = r["peak_kb"] / 1024
            grow = (r["peak_kb"] - r["base_kb"]) / 1024
            print(f"{name:6} {n:8d} {r['seconds']:8.3f} {n / r['seconds']:10.0f} {peak:8.1f} "
                  f"{grow:8.1f}")  # fmt: skip
        print(f"aaco stages: import {aaco['out']['import_s']:.3f} s, analysis "
              f"{aaco['out']['analysis_s']:.3f} s")  # fmt: skip
        if aaco.get("children_peak_kb"):
            kid, private = aaco["children_peak_kb"] / 1024, aaco["children_private_kb"] / 1024
            print(f"aaco worker process: peak RSS {kid:.1f} MB (shared pages included), "
                  f"private {private:.1f} MB")  # fmt: skip
        if len(rows) == 2:
            (_, x), (_, h) = rows
            h_grow = max(1, h["peak_kb"] - h["base_kb"])
            x_grow = x["peak_kb"] - x["base_kb"] + x.get("children_private_kb", 0)
            strict = x["peak_kb"] + x.get("children_peak_kb", 0)
            fair = x["peak_kb"] + x.get("children_private_kb", 0)
            print(f"speed-up x{h['seconds'] / x['seconds']:.1f}; peak RSS ratio (job = this "
                  f"process + worker private) {fair / h['peak_kb']:.2f}, (+ worker peak RSS) "
                  f"{strict / h['peak_kb']:.2f}; RSS growth ratio "
                  f"{x_grow / h_grow:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
