"""Measures the GPU samplers' own CPU cost, with the vendor libraries replaced by the fakes
of aaco.testing.fake_gpu built from recorded outputs (no GPU needed).

Usage::

    python bench/bench_gpu_sampler.py [--duration 20] [--hz 10] [--json]

Cases: NvmlCollector over the recorded dual RTX A5000 (two devices, every NVML call the
collector makes), NvmlCollector over the Blackwell recording with GPM on, and
AmdSmiCollector over the recorded 8x MI300X, each watching this process (its pid on
device 0, children re-listed every 2 s). For each: the sampler thread's CPU time
(``time.thread_time`` inside the thread, over the sampling loop) as % of one core, which
is the collector's own ``cpu_share``; and a whole-process measure: this process's CPU time
(``time.process_time``) over ``duration`` with the sampler running, minus the same over
``duration`` of plain sleep, as % of one core (it also catches GIL hand-offs, thread start
and stop, and building the table). The fakes answer from Python, so this is the cost of
AACO's side of each sample; a real driver call adds its own (an NVML call is a few µs of
ioctl).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aaco.collectors.gpu.amd import AmdSmiCollector
from aaco.collectors.gpu.common import GpuSamplerBase
from aaco.collectors.gpu.nvml import NvmlCollector
from aaco.testing.fake_gpu import (
    FakeAmdSmi,
    FakePynvml,
    amd_records_from_metric_csv,
    nvml_records_from_xml,
)

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "collectors" / "fixtures" / "smi"


def _nvml(xml: str, **kw: Any) -> Callable[[float], GpuSamplerBase]:
    def make(hz: float) -> GpuSamplerBase:
        fake = FakePynvml(
            nvml_records_from_xml((FIXTURES / xml).read_text()), pids={0: [os.getpid()]}, **kw
        )
        return NvmlCollector(os.getpid(), hz=hz, nvml=fake)

    return make


def _amd(hz: float) -> GpuSamplerBase:
    records = amd_records_from_metric_csv(
        (FIXTURES / "metric-8xMI300X.csv").read_text(),
        name="AMD Instinct MI300X",
        xgmi_json=(FIXTURES / "xgmi-8xMI300X.json").read_text(),
    )
    fake = FakeAmdSmi(records, violation=(0.1, 0.0), pids={0: [os.getpid()]})
    return AmdSmiCollector(os.getpid(), hz=hz, amdsmi=fake)


_GPM = {"sm_util": 50.0, "sm_occupancy": 25.0, "tensor_util": 10.0, "dram_bw_util": 40.0}
CASES: dict[str, Callable[[float], GpuSamplerBase]] = {
    "nvml 2x RTX A5000": _nvml("dual_a5000-v13.xml"),
    "nvml 1x Blackwell + GPM": _nvml("pro-6000-maxq-blackwell-v13.xml", gpm={0: _GPM}),
    "amdsmi 8x MI300X": _amd,
}


def _idle_cpu(duration_s: float) -> float:
    cpu0 = time.process_time()
    time.sleep(duration_s)
    return time.process_time() - cpu0


def measure(case: str, hz: float, duration_s: float) -> dict[str, Any]:
    baseline = _idle_cpu(duration_s)
    collector = CASES[case](hz)
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    collector.start()
    time.sleep(duration_s)
    collector.stop()
    table = collector.table()
    wall = time.perf_counter() - wall0
    with_sampler = time.process_time() - cpu0
    info = collector.info()
    samples = max(1, info["samples"])
    return {
        "case": case,
        "hz": hz,
        "duration_s": round(wall, 3),
        "devices": info["devices"],
        "samples": info["samples"],
        "rows": table.num_rows,
        "achieved_hz": round(info["achieved_hz"] or 0.0, 3),
        "sampler_cpu_pct_core": round(100.0 * (info["cpu_share"] or 0.0), 4),
        "per_sample_us": round(1e6 * info["sampler_cpu_s"] / samples, 1),
        "process_cpu_pct_core_with": round(100.0 * with_sampler / wall, 4),
        "process_cpu_pct_core_without": round(100.0 * baseline / duration_s, 4),
        "process_cpu_pct_core_added": round(100.0 * (with_sampler - baseline) / wall, 4),
        "errors": info.get("errors", {}),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| case | rate (Hz) | wall (s) | devices | samples | achieved (Hz) "
        "| sampler thread CPU (% core) | CPU per sample (µs) | process CPU with (% core) "
        "| process CPU without (% core) | added (% core) |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        cells = [
            r["case"],
            r["hz"],
            r["duration_s"],
            r["devices"],
            r["samples"],
            r["achieved_hz"],
            r["sampler_cpu_pct_core"],
            r["per_sample_us"],
            r["process_cpu_pct_core_with"],
            r["process_cpu_pct_core_without"],
            r["process_cpu_pct_core_added"],
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--hz", type=float, default=10.0, help="sampling rate")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    rows = [measure(case, args.hz, args.duration) for case in cases]
    print(json.dumps(rows, indent=2) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
