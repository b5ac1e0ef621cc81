"""The built-in reference models, each profiled with ``aaco run`` at its registry defaults
(BENCHMARKS.md §4).

Runs ``aaco run --model M --report json`` for each model (CPU, default options: the
registry's warmup and iterations, operator profile and telemetry on) and prints the latency,
the operator-time coverage in the same pass and against the separately measured p50, the
profiler's inflation (profiled run p50 / measured p50) and the node count, as the JSON report
gives them (definitions: docs/metrics.md), and the size of the bundle's ``report/report.html``
(the file every ``aaco run`` writes). Bundles go to a temporary folder; the calibration
folder is a temporary one too (``AACO_AUTO_CALIBRATE=0``: the figures here need no ceilings).

Usage::

    python bench/bench_builtin_models.py [--models resnet50,bert-base,...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foreign_models import _parse_report

MODELS = "resnet50,bert-base,gpt2,gpt2-decode,mlp,tiny-convnet"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=MODELS)
    a = ap.parse_args()
    print(
        "| model | measured iterations | p50 ms | p99 ms | coverage same pass | "
        "coverage vs measured p50 | profiled/measured | nodes | report.html |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AACO_CALIBRATION_DIR": tmp, "AACO_AUTO_CALIBRATE": "0"}
        for name in a.models.split(","):
            cmd = [sys.executable, "-m", "aaco", "run", "--model", name, "--report", "json"]
            p = subprocess.run(
                [*cmd, "-o", str(Path(tmp) / "sessions")],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            r = _parse_report(p.stdout)
            if p.returncode != 0 or r is None:
                print(f"| {name} | failed: {p.stderr.strip()[-300:]} |")
                continue
            s = r["summary"]
            prof = s.get("profile") or {}

            def pct(key: str, prof: dict[str, float] = prof) -> str:
                v = prof.get(key)
                return "-" if v is None else f"{v * 100:.1f} %"

            infl = prof.get("profiler_inflation")
            html = Path(tmp) / "sessions" / "latest" / "report" / "report.html"
            print(
                f"| {name} | {s['measured_iterations']} | {s['latency_ms']['p50']:.3f} | "
                f"{s['latency_ms']['p99']:.3f} | {pct('coverage_same_pass')} | "
                f"{pct('coverage')} | {'-' if infl is None else f'{infl:.2f}'} | "
                f"{r['model'].get('node_count')} | {html.stat().st_size / 1e3:.0f} KB |"
            )


if __name__ == "__main__":
    main()
