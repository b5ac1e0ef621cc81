"""Critical-path speed on a real Kineto trace and on that trace repeated for scale.

    python bench/bench_critical_path.py [TRACE.json.gz] [--copies 1,2] [--repeat 5]

Default trace: HTA's real 108,936-event CUDA training trace
(../shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz).
``--copies N`` concatenates the trace with itself N times, each copy shifted in time past
the previous one and its correlation / external ids offset (a real trace made longer, not a
generated one). For each size: events, the Kineto import, `critical_paths` (graph, longest
path, slack, 8 what-ifs: the analysis `aaco analyze` runs) and the check that the path's
length equals the region's wall time. Medians of ``--repeat`` runs, one process.

``--hta PYTHON`` (a venv with HolisticTraceAnalysis 0.5 and pandas < 3) also times HTA's
critical path on the same file in a fresh process per run, alternating with AACO's whole
command (``aaco analyze critical-path FILE --json``, also a fresh process): load + analysis,
wall clock, and peak RSS.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parents[2] / (
    "shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz"
)


def _concat(src: Path, copies: int, out: Path) -> int:
    with gzip.open(src) as f:
        data = json.loads(f.read())
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    ts = [float(e["ts"]) for e in events if isinstance(e.get("ts"), int | float)]
    span = max(ts) + max(float(e.get("dur") or 0) for e in events) - min(ts) + 1000.0
    all_ev: list[dict[str, Any]] = []
    for c in range(copies):
        for e in events:
            e2 = dict(e)
            if isinstance(e2.get("ts"), int | float) and e2.get("ph") != "M":
                e2["ts"] = e2["ts"] + c * span
            args = e2.get("args")
            if c and isinstance(args, dict):
                args = dict(args)
                for k in ("correlation", "External id"):
                    if isinstance(args.get(k), int) and args[k] > 0:
                        args[k] = args[k] + c * 10_000_000
                e2["args"] = args
            if c and e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                e2["id"] = e2["id"] + c * 10_000_000
            if c and e2.get("ph") == "M":
                continue
            all_ev.append(e2)
    data["traceEvents"] = all_ev
    with gzip.open(out, "wt") as f:
        json.dump(data, f)
    return len(all_ev)


_HTA = """
import sys, time, tempfile, shutil, contextlib, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp(); shutil.copy(sys.argv[1], d)
with contextlib.redirect_stdout(sys.stderr):
    ta = TraceAnalysis(trace_dir=d)
t1 = time.perf_counter()
rank = ta.t.get_ranks()[0]
with contextlib.redirect_stdout(sys.stderr):
    cp, ok = ta.critical_path_analysis(rank=rank, annotation="", instance_id=None)
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f} {ok}")
"""


_WRAP = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
    "sys.stderr.write(f'\\nMAXRSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n'); "
    "sys.exit(p.returncode)"
)


def _child(cmd: list[str], timeout: float) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (bytes) and stdout of ``cmd`` in a fresh process (a small
    wrapper reads the peak of its one child)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True, text=True,
                       timeout=timeout)  # fmt: skip
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {p.stderr[-500:]}")
    rss = int(p.stderr.rsplit("MAXRSS", 1)[1].split()[0]) * 1024
    return wall, rss, p.stdout


def _whole_commands(path: Path, hta: str, repeat: int) -> None:
    aaco_w, hta_w, hta_parts, aaco_rss, hta_rss = [], [], [], [], []
    for i in range(repeat):
        order = ("hta", "aaco") if i % 2 else ("aaco", "hta")
        for who in order:
            if who == "aaco":
                w, rss, _ = _child([sys.executable, "-m", "aaco", "analyze", "critical-path",
                                    str(path), "--json"], 600)  # fmt: skip
                aaco_w.append(w)
                aaco_rss.append(rss)
            else:
                w, rss, out = _child([hta, "-c", _HTA, str(path)], 1800)
                hta_w.append(w)
                hta_rss.append(rss)
                load, cp, ok = out.split()
                hta_parts.append((float(load), float(cp), ok))
    am, hm = statistics.median(aaco_w), statistics.median(hta_w)
    print(f"  whole commands, fresh processes, medians of {repeat} alternating runs:")
    print(f"    aaco analyze critical-path --json: {am:.2f} s")
    load = statistics.median(p[0] for p in hta_parts)
    cpt = statistics.median(p[1] for p in hta_parts)
    print(f"    HTA 0.5 load + critical_path_analysis: {hm:.2f} s (load {load:.2f} s, critical "
          f"path {cpt:.2f} s, success {hta_parts[0][2]})")  # fmt: skip
    print(f"    speed-up {hm / am:.1f}x; peak RSS median aaco "
          f"{statistics.median(aaco_rss) / 2**20:.0f} MiB, HTA "
          f"{statistics.median(hta_rss) / 2**20:.0f} MiB")  # fmt: skip


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    p.add_argument("--copies", default="1,2")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--hta", help="a Python with HTA 0.5 (pandas < 3): time it side by side")
    args = p.parse_args(argv)
    from aaco.analysis.critical_path import auto_what_ifs, critical_paths
    from aaco.importers.registry import import_paths

    print(f"trace: {args.trace}")
    with tempfile.TemporaryDirectory() as tmp:
        for copies in [int(x) for x in args.copies.split(",")]:
            path = Path(tmp) / f"x{copies}.json.gz"
            n_events = _concat(args.trace, copies, path)
            imp, cp = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                tt = import_paths([path])
                t1 = time.perf_counter()
                tables = {"kernels": tt.kernels, "api_calls": tt.api_calls, "memcpy": tt.memcpy,
                          "ops": tt.ops, "annotations": tt.annotations}  # fmt: skip
                res = critical_paths(tables, what_if=auto_what_ifs(tables))
                t2 = time.perf_counter()
                imp.append(t1 - t0)
                cp.append(t2 - t1)
            worst = max(abs(r.length_ns - r.wall_ns) for r in res)
            stats = res[0].stats
            print(
                f"x{copies}: {n_events:,} events ({stats['nodes']:,} nodes, {stats['edges']:,} "
                f"edges); import median {statistics.median(imp):.3f} s; critical path + slack + "
                f"{len(auto_what_ifs(tables))} what-ifs median {statistics.median(cp):.3f} s "
                f"(min {min(cp):.3f}); |length - wall| max {worst} ns"
            )
            if args.hta:
                _whole_commands(path, args.hta, max(3, args.repeat // 2 * 2 + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
