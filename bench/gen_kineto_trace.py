"""Generate a large, deterministic CUDA-flavour Kineto trace in the layout torch.profiler writes.

Each profiler step is a ``ProfilerStep#N`` user annotation on the main thread holding a stack
of layers: ``aten::linear`` -> ``aten::t`` + ``aten::addmm`` -> ``cudaLaunchKernel`` -> a GEMM
kernel, then ``aten::relu`` -> ``cudaLaunchKernel`` -> an elementwise kernel, with ``ac2g``
flow events linking each launch to its kernel (as Kineto writes them), an input copy
(``cudaMemcpyAsync`` + ``gpu_memcpy``) and a final ``cudaStreamSynchronize`` + ``cuda_sync``
per step, and a ``gpu_user_annotation`` step range on the GPU. Kernels alternate between two
streams. The text is pretty-printed exactly as Kineto's ChromeTraceLogger does (2-space event
indent, ``args`` on their own lines), so the benchmark exercises the real layout.

Usage::

    python bench/gen_kineto_trace.py OUT.json [--events 216000] [--seed 0] [--gzip]
"""

from __future__ import annotations

import argparse
import gzip
import random
from pathlib import Path

PID = 2869224
TID = 2869224
DEVICE = 0
STREAMS = (7, 20)
# Per layer: linear, t, addmm, launch, s, kernel, f, relu, launch, s, kernel, f
EVENTS_PER_LAYER = 12
# Per step: step annotation, copy_ op, memcpy launch, s, memcpy, f, sync call, cuda_sync,
# gpu step annotation
EVENTS_PER_STEP = 9
LAYERS = 60

GEMM_KERNELS = (
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "ampere_sgemm_128x64_tn",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4>"
    "(cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4::Params)",
)
ELEMENTWISE_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::"
    "detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() "
    "const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous "
    "namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
)

HEADER = """{
  "schemaVersion": 1,
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
  "deviceProperties": [
    {
      "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 233472,
      "numSms": 132, "sharedMemPerBlockOptin": 232448
    }
  ],
  "cupti_version": 24,
  "cuda_runtime_version": 12040,
  "cuda_driver_version": 12040,
  "trace_id": "F1A4C0DE",
  "traceEvents": [
"""


def _x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: str) -> str:
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }}'
    )


def _flow(ph: str, corr: int, pid: int, tid: int, ts: float) -> str:
    end = ', "bp": "e"' if ph == "f" else ""
    return (
        f'  {{\n    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n'
        f'    "cat": "ac2g", "name": "ac2g"{end}\n  }}'
    )


def _kernel_args(ext: int, corr: int, stream: int, regs: int, shared: int, grid: int) -> str:
    return (
        f'"External id": {ext},\n      "queued": 0, "device": {DEVICE}, "context": 1,\n'
        f'      "stream": {stream}, "correlation": {corr},\n'
        f'      "registers per thread": {regs},\n      "shared memory": {shared},\n'
        f'      "blocks per SM": {grid / 132:.5f},\n      "warps per SM": {grid * 4 / 132:.5f},\n'
        f'      "grid": [{grid}, 1, 1],\n      "block": [128, 1, 1],\n'
        f'      "est. achieved occupancy %": 25'
    )


def generate(
    path: Path, events: int = 216_000, seed: int = 0, compress: bool = False, layers: int = LAYERS
) -> int:
    """Write the trace; returns the number of events written (close to ``events``)."""
    rng = random.Random(seed)
    steps = max(1, round(events / (EVENTS_PER_STEP + layers * EVENTS_PER_LAYER)))
    out: list[str] = []
    ext = 0
    corr = 0
    t = 1_000_000.0
    gpu_t = t
    n = 0
    for step in range(steps):
        step_start = t
        ops: list[str] = []
        gpu: list[str] = []
        ext += 1
        step_ext = ext
        t += 5.0
        # input copy
        ext += 1
        corr += 1
        ops.append(
            _x(
                "cpu_op",
                "aten::copy_",
                PID,
                TID,
                t,
                30.0,
                f'"External id": {ext},"Ev Idx": {n}, "Input Dims": [[64, 1024], [64, 1024], []]',
            )
        )
        ops.append(
            _x(
                "cuda_runtime",
                "cudaMemcpyAsync",
                PID,
                TID,
                t + 2.0,
                20.0,
                f'"External id": {ext},\n      "cbid": 41, "correlation": {corr}',
            )
        )
        ops.append(_flow("s", corr, PID, TID, t + 2.0))
        gpu_t = max(gpu_t, t + 10.0)
        gpu.append(
            _x(
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                DEVICE,
                STREAMS[0],
                gpu_t,
                12.5,
                f'"External id": {ext},\n      "device": {DEVICE}, '
                f'"context": 1,\n      "stream": {STREAMS[0]}, "correlation": {corr},\n'
                f'      "bytes": 262144, "memory bandwidth (GB/s)": 20.97',
            )
        )
        gpu.append(_flow("f", corr, DEVICE, STREAMS[0], gpu_t))
        gpu_step_start = gpu_t
        gpu_t += 12.5
        t += 32.0
        for layer in range(layers):
            stream = STREAMS[layer % 2]
            lin_ext = ext + 1
            t_ext = ext + 2
            mm_ext = ext + 3
            relu_ext = ext + 4
            ext += 4
            lin_dur = 40.0 + rng.random() * 10
            ops.append(
                _x(
                    "cpu_op",
                    "aten::linear",
                    PID,
                    TID,
                    t,
                    lin_dur,
                    f'"External id": {lin_ext},"Ev Idx": {n}, '
                    '"Input Dims": [[64, 1024], [1024, 1024], [1024]]',
                )
            )
            ops.append(
                _x(
                    "cpu_op",
                    "aten::t",
                    PID,
                    TID,
                    t + 1.0,
                    4.0,
                    f'"External id": {t_ext},"Ev Idx": {n}, "Input Dims": [[1024, 1024]]',
                )
            )
            ops.append(
                _x(
                    "cpu_op",
                    "aten::addmm",
                    PID,
                    TID,
                    t + 6.0,
                    lin_dur - 8.0,
                    f'"External id": {mm_ext},"Ev Idx": {n}, '
                    '"Input Dims": [[1024], [64, 1024], [1024, 1024], [], []]',
                )
            )
            corr += 1
            launch_t = t + 10.0
            ops.append(
                _x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    PID,
                    TID,
                    launch_t,
                    6.0,
                    f'"External id": {mm_ext},\n      "cbid": 211, "correlation": {corr}',
                )
            )
            ops.append(_flow("s", corr, PID, TID, launch_t))
            gpu_t = max(gpu_t + 1.0, launch_t + 8.0)
            k_dur = 20.0 + rng.random() * 30
            gpu.append(
                _x(
                    "kernel",
                    GEMM_KERNELS[layer % len(GEMM_KERNELS)],
                    DEVICE,
                    stream,
                    gpu_t,
                    k_dur,
                    _kernel_args(mm_ext, corr, stream, 168, 49152, 64),
                )
            )
            gpu.append(_flow("f", corr, DEVICE, stream, gpu_t))
            gpu_t += k_dur
            t += lin_dur + 2.0
            relu_dur = 12.0 + rng.random() * 4
            ops.append(
                _x(
                    "cpu_op",
                    "aten::relu",
                    PID,
                    TID,
                    t,
                    relu_dur,
                    f'"External id": {relu_ext},"Ev Idx": {n}, "Input Dims": [[64, 1024]]',
                )
            )
            corr += 1
            launch_t = t + 3.0
            ops.append(
                _x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    PID,
                    TID,
                    launch_t,
                    5.0,
                    f'"External id": {relu_ext},\n      "cbid": 211, "correlation": {corr}',
                )
            )
            ops.append(_flow("s", corr, PID, TID, launch_t))
            gpu_t = max(gpu_t + 1.0, launch_t + 7.0)
            k_dur = 2.0 + rng.random() * 3
            gpu.append(
                _x(
                    "kernel",
                    ELEMENTWISE_KERNEL,
                    DEVICE,
                    stream,
                    gpu_t,
                    k_dur,
                    _kernel_args(relu_ext, corr, stream, 22, 0, 512),
                )
            )
            gpu.append(_flow("f", corr, DEVICE, stream, gpu_t))
            gpu_t += k_dur
            t += relu_dur + 2.0
        # sync at the end of the step
        ext += 1
        corr += 1
        sync_start = t
        sync_end = max(gpu_t, t + 5.0) + 2.0
        ops.append(
            _x(
                "cuda_runtime",
                "cudaStreamSynchronize",
                PID,
                TID,
                sync_start,
                sync_end - sync_start,
                f'"External id": {ext},\n      "cbid": 131, "correlation": {corr}',
            )
        )
        gpu.append(
            _x(
                "cuda_sync",
                "Stream Sync",
                DEVICE,
                STREAMS[0],
                gpu_t,
                sync_end - gpu_t,
                f'"External id": {ext},\n      "cuda_sync_kind": '
                f'"Stream Sync",\n      "stream": {STREAMS[0]}, "correlation": {corr},\n'
                f'      "device": {DEVICE}, "context": 1',
            )
        )
        t = sync_end + 3.0
        gpu.append(
            _x(
                "gpu_user_annotation",
                f"ProfilerStep#{step}",
                DEVICE,
                STREAMS[0],
                gpu_step_start,
                gpu_t - gpu_step_start,
                f'"External id": {step_ext}',
            )
        )
        out.append(
            _x(
                "user_annotation",
                f"ProfilerStep#{step}",
                PID,
                TID,
                step_start,
                t - step_start,
                f'"External id": {step_ext},"Ev Idx": {n}',
            )
        )
        out.extend(ops)
        out.extend(gpu)
        n = len(out)
        t += 10.0
    for tid, label in ((STREAMS[0], "stream 7 "), (STREAMS[1], "stream 20 ")):
        out.append(
            f'  {{\n    "name": "thread_name", "ph": "M", "ts": 1000000.000, "pid": {DEVICE}, '
            f'"tid": {tid},\n    "args": {{\n      "name": "{label}"\n    }}\n  }}'
        )
    out.append(
        f'  {{\n    "name": "process_name", "ph": "M", "ts": 1000000.000, "pid": {PID}, '
        f'"tid": 0,\n    "args": {{\n      "name": "python3"\n    }}\n  }}'
    )
    out.append(
        '  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
        f'    "pid": "", "tid": "", "ts": {t:.3f}\n  }}'
    )
    text = (
        HEADER
        + ",\n".join(out)
        + '\n  ],\n  "traceName": "bench_trace.json",\n  "displayTimeUnit": "ms",\n'
        '  "baseTimeNanoseconds": 1727000000000000000\n}\n'
    )
    data = text.encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(path, "wb", compresslevel=6) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return len(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--events", type=int, default=216_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--layers", type=int, default=LAYERS, help="layers per step (2 ops each)")
    a = ap.parse_args()
    n = generate(a.out, a.events, a.seed, a.gzip, a.layers)
    print(f"wrote {a.out}: {n} events")


if __name__ == "__main__":
    main()
