"""Critical-path speed and memory at scale: ``critical_path_summary`` (what ``aaco import``
runs, auto what-ifs included) on real Kineto traces of 109 k and 2 M events.

    python bench/bench_critical_path_scale.py [--big TRACE_OR_BUNDLE] [--repeat 3]
        [--module PATH/critical_path.py] [--work DIR]

Traces: HTA's real 108,936-event CUDA training trace
(../shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz) and
a 2-million-event CUDA transformer trace recorded with torch.profiler on an H200
(/work/bigtraces/cuda_transformer_2m.json, or ``--big``; skipped with a message when missing).
Each is imported once into a bundle under ``--work`` (``aaco import TRACE --format none``,
reused by later runs) and its tables are read as ``aaco import`` reads them
(``diagnose._critical_path``). A bundle folder may be given instead of a trace.

For each trace a fresh process loads the tables, then runs the analysis ``--repeat`` times:
wall seconds of every run (the first includes one-time imports, scipy's among them), their
median, events per second, and the peak RSS above the loaded tables (``ru_maxrss`` minus the
RSS before the first run, so fragmentation counts); a second fresh process runs it once more
after a first run, under tracemalloc, for the peak of live allocations. ``--module`` times
another version of ``aaco/analysis/critical_path.py`` (``git show
REV:src/aaco/analysis/critical_path.py > old.py``) the same way, to compare. Events are the
rows of the tables the analysis reads (ops, runtime calls, kernels, copies, annotations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT.parent / (
    "shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz"
)
BIG = Path("/work/bigtraces/cuda_transformer_2m.json")

_CHILD = r"""
import importlib.util, json, os, resource, sys, time, tracemalloc
bundle, repeat, module, trace_mem = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
from aaco.session.bundle import Session
if module:
    spec = importlib.util.spec_from_file_location("critical_path_under_test", module)
    cp = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cp  # dataclasses look their module up
    spec.loader.exec_module(cp)
else:
    import aaco.analysis.critical_path as cp
s = Session.load(bundle)
tables = {n: s.table(n) for n in ("kernels", "api_calls", "memcpy", "annotations")}
tables["ops"] = s.ops()
events = sum(t.num_rows for t in tables.values() if t is not None)
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = rss()
walls, peak = [], None
if trace_mem:  # one run first: one-time imports are not the analysis's memory
    cp.critical_path_summary(tables)
    tracemalloc.start()
for _ in range(repeat):
    t0 = time.perf_counter()
    summary = cp.critical_path_summary(tables)
    walls.append(time.perf_counter() - t0)
if trace_mem:
    peak = tracemalloc.get_traced_memory()[1]
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
p = summary["primary"] if summary else {}
print(json.dumps({"events": events, "walls": walls, "rss_before": before, "maxrss": maxrss,
                  "tracemalloc_peak": peak, "length_ns": p.get("length_ns"),
                  "wall_ns": p.get("wall_ns"), "segments": p.get("segments_total")}))
"""


def _bundle(src: Path, work: Path) -> Path:
    """A bundle of ``src`` (imported once into ``work``, then reused)."""
    if src.is_dir():
        return src
    out = work / src.name.split(".")[0]
    latest = out / "latest"
    if latest.exists():
        return latest
    print(f"  importing {src.name} once into {out} (aaco import) ...", flush=True)
    subprocess.run([sys.executable, "-m", "aaco", "import", str(src), "-o", str(out),
                    "--format", "none"], check=True, capture_output=True)  # fmt: skip
    return latest


def _child(bundle: Path, repeat: int, module: str, trace_mem: bool) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, str(bundle), str(repeat), module, "1" if trace_mem else "0"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    if p.returncode:
        raise RuntimeError(f"benchmark process failed: {p.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def _mib(x: float) -> str:
    return f"{x / 2**20:,.0f} MiB"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--big", type=Path, default=BIG, help="the 2 M-event trace or its bundle")
    p.add_argument("--small", type=Path, default=SMALL, help="the 109 k-event trace or bundle")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--module", default="", help="another critical_path.py to time instead")
    p.add_argument("--work", type=Path,
                   default=Path(tempfile.gettempdir()) / "aaco-bench-critical-path")  # fmt: skip
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc run")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    module = os.path.abspath(args.module) if args.module else ""
    print(f"critical_path_summary, {args.repeat} runs per trace, fresh process per trace"
          + (f", module {module}" if module else ""))  # fmt: skip
    for label, src in (("109 k", args.small), ("2 M", args.big)):
        if not src.exists():
            print(f"{label}: {src} is missing, skipped")
            continue
        r = _child(_bundle(src, args.work), args.repeat, module, trace_mem=False)
        walls = r["walls"]
        med = statistics.median(walls)
        print(f"{label} ({src}): {r['events']:,} events, {r['segments']:,} path segments, "
              f"length {r['length_ns']:,} ns = wall {r['wall_ns']:,} ns")  # fmt: skip
        print(
            f"  wall per run: {', '.join(f'{w:.3f}' for w in walls)} s (the first includes "
            f"one-time imports); median {med:.3f} s, {r['events'] / med:,.0f} events/s"
        )
        print(
            f"  peak RSS above the loaded tables: {_mib(r['maxrss'] - r['rss_before'])} "
            f"(tables loaded: {_mib(r['rss_before'])}, process peak {_mib(r['maxrss'])})"
        )
        if not args.no_tracemalloc:
            m = _child(_bundle(src, args.work), 1, module, trace_mem=True)
            print(
                f"  peak of live allocations (tracemalloc, one run): {_mib(m['tracemalloc_peak'])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
