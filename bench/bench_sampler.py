"""Measures the SystemSampler's own CPU cost and timing jitter while it watches a busy process.

Usage::

    python bench/bench_sampler.py [--duration 20] [--rates 10,50,100] [--json]

For each rate a child Python process spins on one core for the whole run; the sampler
watches it from a thread of this process while the main thread sleeps. Reported per rate:
the sampler thread's CPU time (``time.thread_time`` inside the thread) over wall time, as
% of one core; the same for this whole process (``time.process_time``), which also catches
costs outside the thread (GIL hand-offs, thread start, the main thread); the number of
samples and the achieved rate; how late each scheduled sample was against its absolute
deadline (mean / p99 / max); and the mean ``proc_cpu_pct`` seen for the spinning child,
which should read close to 100.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from aaco.collectors.system import SystemSampler

_SPIN = "import time\nend = time.monotonic() + {secs}\nwhile time.monotonic() < end:\n    pass\n"


def measure(hz: float, duration_s: float) -> dict[str, Any]:
    child = subprocess.Popen([sys.executable, "-c", _SPIN.format(secs=duration_s + 5.0)])
    try:
        time.sleep(0.2)  # let the child get past interpreter start-up
        sampler = SystemSampler(child.pid, hz=hz)
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        sampler.start()
        time.sleep(duration_s)
        sampler.stop()
        wall = time.perf_counter() - wall0
        proc_cpu = time.process_time() - cpu0
    finally:
        child.kill()
        child.wait()

    table = sampler.table()
    ts = table.column("ts_ns").to_pylist()
    late_ms = sorted(x / 1e6 for x in sampler.lateness_ns)
    pcpu = [v for v in table.column("proc_cpu_pct").to_pylist() if v is not None]
    scheduled = len(late_ms)  # the extra sample taken at stop is not on the schedule
    span_s = (ts[scheduled - 1] - ts[0]) / 1e9 if scheduled > 1 else 0.0
    return {
        "hz": hz,
        "duration_s": round(wall, 3),
        "samples": sampler.sample_count,
        "achieved_hz": round((scheduled - 1) / span_s, 3) if span_s > 0 else None,
        "sampler_cpu_s": round(sampler.overhead_cpu_s, 4),
        "sampler_cpu_pct_core": round(100.0 * sampler.overhead_cpu_s / wall, 3),
        "process_cpu_s": round(proc_cpu, 4),
        "process_cpu_pct_core": round(100.0 * proc_cpu / wall, 3),
        "per_sample_us": round(1e6 * sampler.overhead_cpu_s / max(1, sampler.sample_count), 1),
        "late_mean_ms": round(statistics.fmean(late_ms), 3) if late_ms else None,
        "late_p99_ms": round(late_ms[min(len(late_ms) - 1, int(0.99 * len(late_ms)))], 3)
        if late_ms
        else None,
        "late_max_ms": round(late_ms[-1], 3) if late_ms else None,
        "child_cpu_pct_mean": round(statistics.fmean(pcpu), 1) if pcpu else None,
        "stopped_reason": sampler.stopped_reason,
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| rate (Hz) | wall (s) | samples | achieved (Hz) | sampler thread CPU (% core) "
        "| whole process CPU (% core) | CPU per sample (µs) | late mean (ms) "
        "| late p99 (ms) | late max (ms) | child proc_cpu_pct mean |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        cells = [
            r["hz"],
            r["duration_s"],
            r["samples"],
            r["achieved_hz"],
            r["sampler_cpu_pct_core"],
            r["process_cpu_pct_core"],
            r["per_sample_us"],
            r["late_mean_ms"],
            r["late_p99_ms"],
            r["late_max_ms"],
            r["child_cpu_pct_mean"],
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per rate")
    parser.add_argument("--rates", default="10,50,100", help="comma-separated rates in Hz")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    rows = [measure(hz, args.duration) for hz in rates]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
