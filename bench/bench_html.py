"""HTML report size and render time for a 1 000-node model with 100 000 kernels (issue #6).

Builds a 1 000-node ONNX model (333 MatMul+Add+Relu layers and an output Identity), runs it
with ``aaco run`` (real iterations, operator profile, telemetry), imports into the same
bundle a generated 100 000-kernel Kineto trace (``bench/gen_kineto_trace.py``, 500 layers of
2 kernels per step, 100 steps), then:

* renders ``aaco report --format html`` in Python (median of ``--repeat``),
* opens the file in headless chromium through Selenium and measures the time from
  navigation to the load event (``performance.timing``) and the wall time of ``get`` until
  every chart is laid out (median of ``--repeat`` fresh loads).

Usage::

    python bench/bench_html.py [--iterations 2000] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from aaco.report.html import HtmlRenderer
from aaco.session.bundle import Session
from gen_kineto_trace import generate


def thousand_node_model(path: Path, width: int = 32, layers: int = 333) -> int:
    """A chain of ``layers`` MatMul+Add+Relu blocks (1 000 nodes by default) saved at
    ``path``; returns its node count (also used by bench_ort_profile.py)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(
            np.zeros(width, np.float32), f"b{i}")]  # fmt: skip
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"layer{i}.matmul"),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"layer{i}.add"),
            helper.make_node("Relu", [f"a{i}"], [f"h{i}"], name=f"layer{i}.relu"),
        ]
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "thousand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))
    return len(nodes)


def _aaco(*args: str) -> None:
    p = subprocess.run([sys.executable, "-m", "aaco", *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"aaco {' '.join(args[:2])} failed: {p.stderr.strip()}")


def browser_times(html: Path, repeat: int) -> dict[str, Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    load, wall = [], []
    try:
        for _ in range(repeat):
            driver.get("about:blank")
            t0 = time.perf_counter()
            driver.get(html.as_uri())
            n = driver.execute_script(
                "return Array.from(document.querySelectorAll('svg.chart'))"
                ".filter(s => s.getBoundingClientRect().width > 0).length"
            )
            wall.append(time.perf_counter() - t0)
            load.append(
                driver.execute_script(
                    "const t = performance.timing; return t.loadEventEnd - t.navigationStart"
                )
                / 1000.0
            )
        charts = int(n)
    finally:
        driver.quit()
    return {
        "load_event_s": statistics.median(load),
        "get_until_charts_s": statistics.median(wall),
        "charts": charts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        n_nodes = thousand_node_model(t / "thousand.onnx")
        root = t / "sessions"
        _aaco("run", "--model", str(t / "thousand.onnx"), "--iterations", str(a.iterations),
              "--report", "none", "-o", str(root))  # fmt: skip
        bundle = (root / "latest").resolve()
        events = generate(t / "trace.json", events=600_900, layers=500)
        _aaco("import", str(t / "trace.json"), "--session", str(bundle))
        s = Session.load(bundle)
        kernels = s.table("kernels")
        ops = s.ops()
        renders = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            html = HtmlRenderer().render(Session.load(bundle))
            renders.append(time.perf_counter() - t0)
        out = t / "report.html"
        out.write_text(html)
        result: dict[str, Any] = {
            "graph_nodes": n_nodes,
            "kernels": kernels.num_rows if kernels is not None else 0,
            "op_rows": ops.num_rows if ops is not None else 0,
            "trace_events": events,
            "measured_iterations": a.iterations,
            "python_render_s": statistics.median(renders),
            "file_bytes": out.stat().st_size,
            **browser_times(out, a.repeat),
        }
    print(json.dumps(result, indent=2))
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
