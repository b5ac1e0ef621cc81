"""AACO's critical path beside HTA 0.5's, on the traces of tests/analysis/fixtures/hta.

    python bench/compare_hta_critical_path.py

HTA's reference figures come from tests/analysis/fixtures/hta/hta_critical_path.json
(written by bench/hta_critical_path_reference.py in HTA's own venv). The two models differ
by design (docs/metrics.md, "Critical path: agreement with HTA"): HTA's path length leaves
out untraced host time and blocked-sync time (zero-weight dependency edges), AACO's path
spans the region, so it equals the wall time. What both measure the same way is the GPU
compute on the path and the operator time on it; this script prints those side by side
for every window HTA analysed (whole trace and ProfilerStep windows).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "analysis" / "fixtures" / "hta"


def compare() -> list[dict[str, Any]]:
    from aaco.analysis.critical_path import critical_paths
    from aaco.importers.registry import import_paths

    ref = json.loads((FIX / "hta_critical_path.json").read_text())
    rows = []
    for key, tr in ref["traces"].items():
        path = (
            (FIX / tr["file"]).resolve() if not Path(tr["file"]).is_absolute() else Path(tr["file"])
        )
        if not path.exists():
            path = ROOT / tr["file"]
        tt = import_paths([path])
        tables = {"kernels": tt.kernels, "api_calls": tt.api_calls, "memcpy": tt.memcpy,
                  "ops": tt.ops, "annotations": tt.annotations}  # fmt: skip
        load = tr["loads"][0]
        t0 = load["hta_min_ts_us"]
        for w in load["windows"]:
            if not w.get("success"):
                continue
            if w["annotation"] == "":
                window = None
            else:
                window = (
                    int((w["window_start_us"] + t0) * 1000),
                    int((w["window_end_us"] + t0) * 1000) + 1,
                )
            cps = critical_paths(tables, window=window)
            if not cps:
                continue
            cp = max(cps, key=lambda c: c.stats.get("gpu_activities", 0))
            hta = w["by_bound_by_us"]
            c = {k: v / 1000 for k, v in cp.by_category.items()}
            rows.append({
                "trace": key, "window": w["label"],
                "hta_length_us": w["critical_path_length_us"],
                "hta_gpu_compute_us": hta.get("gpu_compute_bound", 0),
                "hta_cpu_us": hta.get("cpu_bound", 0),
                "aaco_length_us": cp.length_ns / 1000,
                "aaco_gpu_compute_us": c["gpu_compute"] + c["copy"],
                "aaco_cpu_us": c["cpu_op"] + c["runtime"],
                "aaco_idle_sync_us": c["idle_gap"] + c["sync_wait"],
            })  # fmt: skip
    return rows


def main() -> int:
    rows = compare()
    print(f"{'trace':<28} {'window':<34} {'HTA len':>10} {'AACO len':>10} {'HTA gpu':>9} "
          f"{'AACO gpu':>9} {'HTA cpu':>10} {'AACO cpu':>10} {'AACO idle+sync':>14}")  # fmt: skip
    for r in rows:
        print(f"{r['trace']:<28} {r['window'][:34]:<34} {r['hta_length_us']:>10.0f} "
              f"{r['aaco_length_us']:>10.0f} {r['hta_gpu_compute_us']:>9.0f} "
              f"{r['aaco_gpu_compute_us']:>9.0f} {r['hta_cpu_us']:>10.0f} "
              f"{r['aaco_cpu_us']:>10.0f} {r['aaco_idle_sync_us']:>14.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
