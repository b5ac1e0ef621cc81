"""Benchmark: import a large current-generation rocprofv3 kernel-trace CSV (rows/s, peak RSS).

Generates ``<pid>_kernel_trace.csv`` with the current column set (LDS_Block_Size ...
SGPR_Count, ``Agent N`` labels) and realistic kernel names from a small pool (a generated
file: the real rocprofv3 outputs at hand have a handful of rows), then times
:func:`aaco.importers.rocprofv3.read_rocprofv3_csv` on it (the import into the normalized
``kernels`` table, in this process: no bundle written), side by side with the anchor,
``pyarrow.csv.read_csv`` of the same file with default options alone, alternating which
runs first in each round. The file is in the page cache for both. Target: >= 2 million
rows/s. The absolute figures vary about 2x across hosts of the same kind; the ratio to
pyarrow's parser is the portable figure.

Usage::

    python bench/bench_rocprof_csv.py [--rows 3000000] [--repeat 3] [--keep PATH]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from aaco.importers._rocprofiler_sdk import KERNEL_TRACE_COLUMNS
from aaco.importers.rocprofv3 import read_rocprofv3_csv

NAMES = (
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::"
    "CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> "
    "const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<...>)",
    "naive_conv_fwd_nchw_half_double_half",
    "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<...>, true, "
    "(ck::InMemoryDataOperationEnum)0, 1, (ck::TailNumber)1>(ck::GridwiseGemm_xdl_cshuffle_"
    "v3<...>::Argument)",
    "triton_poi_fused_add_mul_0",
    "MIOpenBatchNormFwdInferSpatialEst",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "__amd_rocclr_copyBuffer",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "layer_norm_fwd_kernel",
)
HEADER = list(KERNEL_TRACE_COLUMNS["current"])


def generate(path: Path, rows: int, seed: int = 0) -> None:
    """Write a kernel trace of ``rows`` dispatches, seeded, in 1M-row slices."""
    rng = np.random.default_rng(seed)
    t = 1_191_916_548_500_000
    path.write_text(",".join(f'"{h}"' for h in HEADER) + "\n")
    with path.open("ab") as f:
        done = 0
        while done < rows:
            n = min(1_000_000, rows - done)
            k = rng.integers(0, len(NAMES), n)
            dur = rng.integers(2_000, 400_000, n)
            gap = rng.integers(500, 5_000, n)
            start = t + np.cumsum(gap + dur) - dur
            t = int(start[-1] + dur[-1])
            ids = np.arange(done + 1, done + n + 1)
            wg = np.array([64, 128, 256, 256, 512])[k % 5]
            cols = {
                "Kind": pa.array(["KERNEL_DISPATCH"] * n),
                "Agent_Id": pa.array(np.array(["Agent 1", "Agent 2"])[k % 2]),
                "Queue_Id": k % 4,
                "Stream_Id": k % 3,
                "Thread_Id": np.full(n, 4242),
                "Dispatch_Id": ids,
                "Kernel_Id": k + 10,
                "Kernel_Name": pa.array(np.array(NAMES, dtype=object)[k]),
                "Correlation_Id": ids,
                "Start_Timestamp": start,
                "End_Timestamp": start + dur,
                "LDS_Block_Size": (k % 4) * 4096,
                "Scratch_Size": np.zeros(n, dtype=np.int64),
                "VGPR_Count": 32 + (k % 8) * 16,
                "Accum_VGPR_Count": (k % 2) * 64,
                "Workgroup_Size_X": wg,
                "SGPR_Count": 16 + (k % 5) * 8,
                "Workgroup_Size_Y": np.ones(n, dtype=np.int64),
                "Workgroup_Size_Z": np.ones(n, dtype=np.int64),
                "Grid_Size_X": wg * rng.integers(1, 4096, n),
                "Grid_Size_Y": np.ones(n, dtype=np.int64),
                "Grid_Size_Z": np.ones(n, dtype=np.int64),
            }
            table = pa.table({h: cols[h] for h in HEADER})
            pacsv.write_csv(table, f, pacsv.WriteOptions(include_header=False))
            done += n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the generated CSV here and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "4242_kernel_trace.csv"
        t0 = time.perf_counter()
        generate(path, args.rows)
        gen_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 1e6
        print(f"generated {args.rows:,} rows, {size_mb:.0f} MB in {gen_s:.1f} s: {path.name}")
        imports: list[float] = []
        anchors: list[float] = []
        for i in range(args.repeat):
            for which in ("import", "read_csv") if i % 2 == 0 else ("read_csv", "import"):
                t0 = time.perf_counter()
                if which == "import":
                    n = read_rocprofv3_csv(path).kernels.num_rows
                else:
                    n = pacsv.read_csv(path).num_rows
                secs = time.perf_counter() - t0
                assert n == args.rows, (which, n, args.rows)
                (imports if which == "import" else anchors).append(secs)
            print(
                f"round {i + 1}: import {imports[-1]:.3f} s = "
                f"{n / imports[-1] / 1e6:.2f} M rows/s; pyarrow read_csv alone "
                f"{anchors[-1]:.3f} s; import / read_csv {imports[-1] / anchors[-1]:.2f}"
            )
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        best, med = min(imports), statistics.median(imports)
        ratios = [x / y for x, y in zip(imports, anchors, strict=True)]
        print(
            f"import: best {best:.3f} s = {args.rows / best / 1e6:.2f} M rows/s "
            f"({size_mb / best:.0f} MB/s), median {med:.3f} s = "
            f"{args.rows / med / 1e6:.2f} M rows/s; pyarrow read_csv alone: best "
            f"{min(anchors):.3f} s, median {statistics.median(anchors):.3f} s; import / "
            f"read_csv per round: median {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}); peak RSS {peak_mb:.0f} MB "
            "(whole process, generation included)"
        )


if __name__ == "__main__":
    main()
