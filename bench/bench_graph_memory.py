"""Parent memory and time of graph extraction on issue #14's 1-D model, alone and in `aaco run`.

The model: input ``x`` float [N] (N = 33 554 432 by default), Add, Mul, Relu, Sigmoid, Add,
Mul, Relu, Sigmoid with scalar constants. ONNX's data propagation once held one ~70-byte
record per element of it for each Add and Mul (9.5 GB, 84 s for this model).

Two measurements, each in fresh processes so that a peak is that process's own:

* ``extract``: a Python process loads the model and runs ``extract_graph`` once; reported:
  the growth of its peak RSS (``VmHWM``) across the call, and the call's seconds.
* ``run``: ``python -m aaco run --model m.onnx --iterations 5``; the parent's peak RSS is
  polled from ``/proc/<pid>/status`` (``VmHWM`` only grows, so the last reading is the peak,
  whichever aaco version runs), for the N-element model and for a 1 024-element twin; the
  difference is what the tensor size adds to the parent. Also reported: wall time, the
  worker's own wall time (``session.json``) and the parent's time besides it, and the
  worker and parent peaks as the bundle records them (``worker.max_rss_bytes``, older
  versions: ``wait4``'s ``ru_maxrss``; ``aaco_process.max_rss_bytes``).

Linux only (``/proc``). To measure an older checkout, put its ``src`` first on
``PYTHONPATH``; expect ~10 GB of memory for the old ``extract_graph`` at the default N.

Usage::

    python bench/bench_graph_memory.py [--elements 33554432] [--skip-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIB = 2**20
TWIN = 1024

_EXTRACT = """
import json, sys, time
from pathlib import Path
from aaco.analysis.graph import extract_graph, load_model_proto

def vmhwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

model = load_model_proto(Path(sys.argv[1]))
before = vmhwm()
start = time.perf_counter()
info = extract_graph(model)
seconds = time.perf_counter() - start
print(json.dumps({"added_bytes": vmhwm() - before, "seconds": seconds,
                  "data_propagation": info.meta.get("data_propagation"),
                  "shape_inference": info.meta["shape_inference"]}))
"""


def issue_model(path: Path, n: int) -> None:
    ops = ["Add", "Mul", "Relu", "Sigmoid"] * 2
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        ins = [prev, "c"] if op in ("Add", "Mul") else [prev]
        nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}_{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "elementwise_1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, path)


def _vmhwm(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def measure_extract(model: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _EXTRACT, str(model)], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def measure_run(model: Path, workdir: Path, iterations: int) -> dict[str, Any]:
    sessions = workdir / f"sessions_{model.stem}"
    cmd = [sys.executable, "-m", "aaco", "run", "--model", str(model)]
    cmd += ["--iterations", str(iterations), "--output", str(sessions)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _vmhwm(proc.pid) or 0)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"aaco run failed ({proc.returncode}): {err[-2000:]}")
    session = json.loads(next(sessions.rglob("session.json")).read_text())
    worker = session.get("worker") or {}
    return {
        "wall_s": wall,
        "worker_wall_s": worker.get("wall_s"),
        "parent_s": wall - (worker.get("wall_s") or 0.0),
        "parent_peak_rss_polled": peak,
        "parent_peak_rss_bundle": (session.get("aaco_process") or {}).get("max_rss_bytes"),
        "worker_peak_rss_bundle": worker.get("max_rss_bytes"),
        "worker_peak_rss_source": worker.get("max_rss_source", "wait4 ru_maxrss (old)"),
    }


def _mib(v: float | None) -> str:
    return "unknown" if v is None else f"{v / MIB:,.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--elements", type=int, default=33_554_432)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--skip-run", action="store_true", help="only extract_graph")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not Path("/proc/self/status").is_file():
        print("needs Linux /proc", file=sys.stderr)
        return 2

    figures: dict[str, Any] = {"elements": args.elements, "python": sys.version.split()[0]}
    figures["onnx"] = onnx.__version__
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        big, twin = work / "elementwise_1d.onnx", work / "elementwise_1d_twin.onnx"
        issue_model(big, args.elements)
        issue_model(twin, TWIN)

        ext = measure_extract(big)
        figures["extract_graph"] = ext
        print(f"extract_graph, 1-D {args.elements:,} elements, 8 ops:")
        print(f"  adds {_mib(ext['added_bytes'])} to peak RSS, {ext['seconds']:.3f} s")
        print(f"  data_propagation {ext['data_propagation']}, {ext['shape_inference']}")

        if not args.skip_run:
            runs = {
                "big": measure_run(big, work, args.iterations),
                "twin": measure_run(twin, work, args.iterations),
            }
            figures["aaco_run"] = runs
            added = runs["big"]["parent_peak_rss_polled"] - runs["twin"]["parent_peak_rss_polled"]
            figures["aaco_run"]["parent_added_bytes"] = added
            for key, label in (("big", f"{args.elements:,}"), ("twin", f"{TWIN:,}")):
                r = runs[key]
                print(f"aaco run --iterations {args.iterations}, 1-D {label} elements:")
                print(
                    f"  wall {r['wall_s']:.1f} s (worker {r['worker_wall_s'] or 0:.1f} s, "
                    f"parent {r['parent_s']:.1f} s)"
                )
                print(
                    f"  parent peak RSS {_mib(r['parent_peak_rss_polled'])} polled, "
                    f"{_mib(r['parent_peak_rss_bundle'])} recorded"
                )
                print(
                    f"  worker peak RSS {_mib(r['worker_peak_rss_bundle'])} recorded "
                    f"({r['worker_peak_rss_source']})"
                )
            print(f"tensor size adds {_mib(added)} to the parent's peak RSS")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
