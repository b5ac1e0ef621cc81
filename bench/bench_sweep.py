"""``aaco sweep`` of 8 points (2 models x 2 thread counts x 2 batch sizes of real
``aaco run``s) here and on a local Ray, whole commands, and ``aaco query``'s group-by over
the sweep's sessions.

The models are MatMul chains built here (tests/onnx_models.make_matmul_chain: 4 and 8
layers of 256 x 256, a symbolic batch); each point measures 200 iterations after 20 of
warmup, without the operator profile. Reports each command's wall time, whether the two
result tables are identical up to timing (the columns ``session_id``, figures, ``host``
and ``gpu_ids``), and the median of ``--repeat`` group-by queries. Usage::

    python bench/bench_sweep.py [--repeat 5] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TIMING = {"session_id", "p50_ms", "p90_ms", "p99_ms", "throughput", "ttft_p50_ms", "ttft_p99_ms",
          "output_tokens_per_s", "host", "gpu_ids"}  # fmt: skip
GROUP_BY = (
    "SELECT model, threads, batch, count(*) AS n, median(p50_ms) AS p50_ms FROM sessions "
    "WHERE tag LIKE 'sweep:bench:%' GROUP BY ALL ORDER BY ALL"
)


def run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return time.perf_counter() - t, proc


def main() -> None:
    from tests.onnx_models import make_matmul_chain

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/aaco-bench-sweep"))
    args = ap.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    make_matmul_chain(work / "a.onnx", 4, 256)
    make_matmul_chain(work / "b.onnx", 8, 256)
    spec = {
        "name": "bench",
        "options": {"iterations": 200, "warmup": 20, "no-profile": True, "no-calibrate": True},
        "matrix": {
            "model": [str(work / "a.onnx"), str(work / "b.onnx")],
            "threads": [1, 2],
            "batch": [1, 8],
        },
    }
    (work / "sweep.yaml").write_text(json.dumps(spec))
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    tables = {}
    for label, extra in (("local", []), ("ray", ["--ray", "local"])):
        root = work / f"sessions-{label}"
        cmd = [sys.executable, "-m", "aaco", "sweep", str(work / "sweep.yaml"),
               "--sessions", str(root), *extra]  # fmt: skip
        wall, proc = run(cmd)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        table = pq.read_table(root / "sweeps" / "bench" / "results.parquet")
        tables[label] = [{k: v for k, v in r.items() if k not in TIMING} for r in table.to_pylist()]
        print(f"aaco sweep ({label}), 8 points: {wall:6.1f} s")
        walls = []
        for _ in range(args.repeat):
            w, q = run([sys.executable, "-m", "aaco", "query", GROUP_BY, "--sessions", str(root),
                        "-f", "json"])  # fmt: skip
            if q.returncode != 0:
                raise SystemExit(q.stderr)
            walls.append(w)
        groups = len(q.stdout.splitlines())
        print(f"  aaco query group-by over its sessions: {statistics.median(walls):.3f} s "
              f"(median of {args.repeat}, {groups} groups)")  # fmt: skip
    same = tables["local"] == tables["ray"]
    print(f"result tables identical up to timing: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
