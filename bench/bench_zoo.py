"""Bottleneck classifier accuracy on the labeled workload zoo (issue #4).

Calibrates this machine once (``aaco calibrate``, into a temporary calibration folder unless
``--calibration-dir`` is given), then runs every ``zoo-*`` model of the registry ``--repeat``
times with ``aaco run`` and compares the verdict of ``metrics/bottleneck.json`` with the
model's ``expected_bottleneck``. Prints one line per run and the accuracy table.

With ``--first-run`` nothing is calibrated beforehand: the calibration folder starts empty
and ``aaco run`` alone measures its quick calibration on the first run (issue #14's "a
fresh machine gets verdicts with ``aaco run`` alone"); each run's ``ceilings_note`` is
printed when it has one.

The zoo is in-sample: the classifier's thresholds were tuned while looking at these six
workloads. ``--holdout`` runs instead workloads built here that the tuning never saw, each
with a bottleneck known by construction but other operators, shapes and sizes than its zoo
counterpart (:func:`holdout_cases`): out-of-sample evidence, if of the same kind.

Usage::

    python bench/bench_zoo.py [--repeat 3] [--calibration-dir DIR] [--quick-calibration]
    python bench/bench_zoo.py --first-run [--repeat 3]
    python bench/bench_zoo.py --holdout [--repeat 2]
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


def _save(path: Path, nodes: list[Any], x: list[int], y: list[int], inits: list[Any]) -> Path:
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def holdout_cases(folder: Path) -> list[dict[str, Any]]:
    """Workloads the classifier's tuning never saw, the bottleneck known by construction:

    * compute-bound: 4 Conv 3x3, 128 -> 128 channels on 28x28 (231 MFLOP each, ~170 FLOP
      per byte of weights and activations; the zoo's is a MatMul chain);
    * compute-bound: 6 MatMul [512, 768] x [768, 768] with Tanh between them;
    * memory-bound: Sub, Div, Neg, Abs over a [8192, 8192] float32 tensor (256 MiB; the
      zoo's: Add/Mul over [16384, 4096]);
    * launch-bound: 300 ops (Div, Sigmoid, Add, Tanh in turn) on [1, 8] (the zoo's: 400
      Add/Mul/Sub/Relu on [1, 16]);
    * latency-bound: one Softmax on [1, 32] (the zoo's: an 8x8 Gemm + Relu);
    * warmup-instability: [1, 1] expanded to [8192, 8192] and summed (ReduceSum), warmup 0
      (the zoo's: ReduceMax over [8192, 4096]);
    * cpu-bound: a Conv 3 -> 4, 7x7 stride 4 + ReduceMean head run with ``--preprocess
      image`` (the zoo's: Conv 3 -> 8, 3x3 stride 2 + GlobalAveragePool).
    """
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)

    def w(name: str, shape: tuple[int, ...], scale: float) -> Any:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    def scalar(name: str, value: float) -> Any:
        return numpy_helper.from_array(np.array([value], np.float32), name)

    cases: list[dict[str, Any]] = []
    # compute-bound, convolution
    nodes, inits, prev = [], [], "x"
    for i in range(4):
        inits.append(w(f"k{i}", (128, 128, 3, 3), (2 / (128 * 9)) ** 0.5))
        out = "y" if i == 3 else f"c{i}"
        nodes.append(
            helper.make_node(
                "Conv",
                [prev, f"k{i}"],
                [out],
                name=f"conv{i}",
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
            )
        )
        prev = out
    path = _save(folder / "holdout_conv.onnx", nodes, [1, 128, 28, 28], [1, 128, 28, 28], inits)
    cases.append(
        {
            "name": "holdout-conv",
            "path": path,
            "expected": "compute-bound",
            "args": ["--warmup", "3", "--iterations", "30"],
        }
    )
    # compute-bound, GEMM + Tanh
    nodes, inits, prev = [], [], "x"
    for i in range(6):
        inits.append(w(f"w{i}", (768, 768), 768**-0.5))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        out = "y" if i == 5 else f"t{i}"
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [out], name=f"tanh{i}"))
        prev = out
    path = _save(folder / "holdout_gemm.onnx", nodes, [512, 768], [512, 768], inits)
    cases.append(
        {
            "name": "holdout-gemm",
            "path": path,
            "expected": "compute-bound",
            "args": ["--warmup", "3", "--iterations", "30"],
        }
    )
    # memory-bound
    ops = [("Sub", True), ("Div", True), ("Neg", False), ("Abs", False)]
    nodes, inits, prev = [], [], "x"
    for i, (op, binary) in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"e{i}"
        if binary:
            inits.append(scalar(f"s{i}", 1.5 + i))
        ins = [prev, f"s{i}"] if binary else [prev]
        nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}{i}"))
        prev = out
    path = _save(folder / "holdout_memory.onnx", nodes, [8192, 8192], [8192, 8192], inits)
    cases.append(
        {
            "name": "holdout-memory",
            "path": path,
            "expected": "memory-bound",
            "args": ["--warmup", "3", "--iterations", "20"],
        }
    )
    # launch-bound
    nodes, inits, prev = [], [], "x"
    for i in range(300):
        op = ("Div", "Sigmoid", "Add", "Tanh")[i % 4]
        out = "y" if i == 299 else f"l{i}"
        if op in ("Div", "Add"):
            inits.append(w(f"v{i}", (8,), 0.1))
            if op == "Div":
                inits[-1] = numpy_helper.from_array(
                    (1.0 + np.abs(numpy_helper.to_array(inits[-1]))).astype(np.float32), f"v{i}"
                )
            nodes.append(helper.make_node(op, [prev, f"v{i}"], [out], name=f"{op.lower()}{i}"))
        else:
            nodes.append(helper.make_node(op, [prev], [out], name=f"{op.lower()}{i}"))
        prev = out
    path = _save(folder / "holdout_launch.onnx", nodes, [1, 8], [1, 8], inits)
    cases.append(
        {
            "name": "holdout-launch",
            "path": path,
            "expected": "launch-bound",
            "args": ["--warmup", "20", "--iterations", "200"],
        }
    )
    # latency-bound
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=-1)]
    path = _save(folder / "holdout_latency.onnx", nodes, [1, 32], [1, 32], [])
    cases.append(
        {
            "name": "holdout-latency",
            "path": path,
            "expected": "latency-bound",
            "args": ["--warmup", "50", "--iterations", "500"],
        }
    )
    # warmup-instability
    shape = numpy_helper.from_array(np.array([8192, 8192], np.int64), "shape")
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["big"], name="expand"),
        helper.make_node("ReduceSum", ["big"], ["y"], name="reduce", keepdims=1),
    ]
    path = _save(folder / "holdout_warmup.onnx", nodes, [1, 1], [1, 1], [shape])
    cases.append(
        {
            "name": "holdout-warmup",
            "path": path,
            "expected": "warmup-instability",
            "args": ["--warmup", "0", "--iterations", "20"],
        }
    )
    # cpu-bound: the host-side preprocessing inside each iteration
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "k"],
            ["c"],
            name="conv",
            kernel_shape=[7, 7],
            strides=[4, 4],
            pads=[3, 3, 3, 3],
        ),
        helper.make_node("ReduceMean", ["c"], ["y"], name="mean", axes=[2, 3], keepdims=0),
    ]
    path = _save(
        folder / "holdout_host.onnx", nodes, [1, 3, 224, 224], [1, 4], [w("k", (4, 3, 7, 7), 0.1)]
    )
    cases.append(
        {
            "name": "holdout-host",
            "path": path,
            "expected": "cpu-bound",
            "args": ["--warmup", "3", "--iterations", "30", "--preprocess", "image"],
        }
    )
    return cases


def _aaco(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aaco", *args], capture_output=True, text=True, env=env, check=False
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calibration-dir", type=Path)
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--first-run", action="store_true", help="no calibration beforehand")
    ap.add_argument(
        "--holdout", action="store_true", help="workloads the tuning never saw, not the zoo"
    )
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["AACO_CALIBRATION_DIR"] = str(a.calibration_dir or Path(tmp) / "calibration")
        if a.first_run:
            env["AACO_AUTO_CALIBRATE"] = "1"
            folder = Path(env["AACO_CALIBRATION_DIR"])
            if folder.is_dir() and any(folder.iterdir()):
                sys.exit(f"--first-run needs an empty calibration folder: {folder}")
        else:
            t0 = time.perf_counter()
            args = ["calibrate", "--json"] + (["--quick"] if a.quick_calibration else [])
            cal = _aaco(args, env)
            if cal.returncode != 0:
                sys.exit(f"calibration failed: {cal.stderr.strip()}")
            print(f"calibration: {time.perf_counter() - t0:.1f} s")
        if a.holdout:
            zoo = [
                {
                    "name": c["name"],
                    "expected_bottleneck": c["expected"],
                    "run": ["--model", str(c["path"]), *c["args"]],
                }
                for c in holdout_cases(Path(tmp) / "holdout")
            ]
        else:
            models = json.loads(_aaco(["models", "list", "--json"], env).stdout)
            zoo = [
                {**m, "run": ["--model", m["name"]]} for m in models if m.get("expected_bottleneck")
            ]
        results: list[dict[str, Any]] = []
        for m in zoo:
            for i in range(a.repeat):
                out = Path(tmp) / "sessions"
                p = _aaco(["run", *m["run"], "--report", "none", "-o", str(out)], env)
                if p.returncode != 0:
                    print(f"{m['name']} run {i}: failed: {p.stderr.strip()}")
                    results.append({"model": m["name"], "expected": m["expected_bottleneck"],
                                    "got": "run failed", "confidence": None})  # fmt: skip
                    continue
                v = json.loads((out / "latest" / "metrics" / "bottleneck.json").read_text())
                roof = json.loads((out / "latest" / "metrics" / "roofline.json").read_text())
                if roof.get("ceilings_note"):
                    print(f"    {m['name']} run {i}: {roof['ceilings_note']}")
                r = {
                    "model": m["name"],
                    "expected": m["expected_bottleneck"],
                    "got": v["bottleneck_class"],
                    "confidence": v["confidence"],
                    "secondary": [s["class"] for s in v.get("secondary", [])],
                }
                results.append(r)
                ok = "ok " if r["got"] == r["expected"] else "BAD"
                print(f"{ok} {m['name']:12} run {i}: {r['got']:20} confidence "
                      f"{r['confidence']} secondary {r['secondary']}")  # fmt: skip
        print()
        print("| workload | expected | runs | correct | verdicts (confidence) |")
        print("|---|---|---|---|---|")
        for m in zoo:
            rs = [r for r in results if r["model"] == m["name"]]
            good = sum(r["got"] == r["expected"] for r in rs)
            verdicts = ", ".join(f"{r['got']} ({r['confidence']})" for r in rs)
            print(f"| {m['name']} | {m['expected_bottleneck']} | {len(rs)} | {good} | "
                  f"{verdicts} |")  # fmt: skip
        total = sum(r["got"] == r["expected"] for r in results)
        print(f"\naccuracy: {total}/{len(results)}")


if __name__ == "__main__":
    main()
