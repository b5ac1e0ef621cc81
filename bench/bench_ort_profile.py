"""ONNX Runtime profile parsing: AACO's parser against a plain ``json.load`` (BENCHMARKS.md §5).

Records a real ONNX Runtime profile here (the installed onnxruntime, CPU, one thread): a
1 000-node model (333 MatMul+Add+Relu layers and an Identity, width 32) run ``--runs`` times
with ``enable_profiling``, so the file holds ``--runs`` x 1 000 node events plus the
``model_run`` and session events. Then, in alternating order within each round and each in a
fresh process (imports before the clock):

* AACO: :func:`aaco.importers.ort_profile.parse_ort_profile` (the file -> the ``ops`` and
  ``runs`` tables, what ``aaco run`` and ``aaco import`` use);
* anchor: ``json.load`` of the same file (a list of dicts, nothing else).

Reports seconds, events/s, MB/s and the process's RSS growth over its baseline after the
imports (``ru_maxrss``). Usage::

    python bench/bench_ort_profile.py [--runs 100] [--repeat 3] [--keep PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

_PARSE = """
import json, resource, sys, time
from pathlib import Path
from aaco.importers.ort_profile import parse_ort_profile
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
p = parse_ort_profile(Path(sys.argv[1]))
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "grow_kb": peak - base, "rows": p.ops.num_rows,
                  "runs": p.runs.num_rows}))
"""

_JSON = """
import json, resource, sys, time
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
with open(sys.argv[1]) as f:
    events = json.load(f)
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "grow_kb": peak - base, "events": len(events)}))
"""


def record(out: Path, runs: int, layers: int = 333, width: int = 32) -> None:
    import numpy as np
    import onnxruntime as ort

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_html import thousand_node_model  # the same 1 000-node chain as §12

    model_path = out.with_suffix(".onnx")
    thousand_node_model(model_path, width=width, layers=layers)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(out.with_suffix(""))
    so.intra_op_num_threads = 1
    # keep the 1 000 nodes apart, as a profile of an unoptimized graph shows them
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    x = np.ones((1, width), np.float32)
    for _ in range(runs):
        sess.run(None, {"x": x})
    Path(sess.end_profiling()).rename(out)


def _child(code: str, path: Path) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the profile here and keep it")
    ap.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.record:
        record(a.record, a.runs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = a.keep or Path(tmp) / "ort_profile.json"
        # recorded in a child: this process stays small
        rec = [sys.executable, __file__, "--record", str(path), "--runs", str(a.runs)]
        subprocess.run(rec, check=True)
        size = path.stat().st_size / 1e6
        aaco: list[dict[str, Any]] = []
        plain: list[dict[str, Any]] = []
        for r in range(a.repeat):
            for which in ("aaco", "json") if r % 2 == 0 else ("json", "aaco"):
                if which == "aaco":
                    aaco.append(_child(_PARSE, path))
                else:
                    plain.append(_child(_JSON, path))
        n = plain[0]["events"]
        print(
            f"profile: {n:,} events, {size:.1f} MB (onnxruntime, {a.runs} runs of a "
            f"1 000-node model); AACO: {aaco[0]['rows']:,} ops rows, {aaco[0]['runs']} runs"
        )
        for label, rs in (("AACO parse_ort_profile", aaco), ("json.load alone", plain)):
            secs = [x["seconds"] for x in rs]
            med = statistics.median(secs)
            grow = statistics.median(x["grow_kb"] for x in rs) / 1024
            print(
                f"{label:24s} {' '.join(f'{s:.2f}' for s in secs)} s; median {med:.2f} s = "
                f"{n / med / 1e3:.0f} k events/s, {size / med:.0f} MB/s; RSS growth {grow:.0f} MB"
            )
        ratios = [x["seconds"] / y["seconds"] for x, y in zip(aaco, plain, strict=True)]
        print(f"AACO / json.load time per round: {' '.join(f'{q:.2f}' for q in ratios)}")


if __name__ == "__main__":
    main()
