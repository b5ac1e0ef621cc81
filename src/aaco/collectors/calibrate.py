"""Microbenchmarks that measure the achievable peaks of this machine (``aaco calibrate``).

CPU (backend ``cpu``):
- GEMM FLOP/s: square matrix products, 2 n^3 FLOPs each, with numpy (its BLAS) and through
  ONNX Runtime (a MatMul model on the CPU execution provider, default threads), in float32
  and float64. Each dtype's ceiling is the higher of the two rates (:func:`best_of_stable`:
  among the figures that stabilised, when any did): the fastest GEMM this machine ran in
  that dtype is a roof an operator could reach (on a small shared VM one engine's thread
  pool can lose badly to contention; both figures are kept in ``details``).
- Memory bandwidth: numpy copy (2 bytes moved per byte: read + write) and add (3: two reads,
  one write), single-threaded, and an ONNX Runtime Add of a scalar (2: read + write, on
  ORT's threads) over arrays of at least 4 x the last-level cache; the ceiling is the
  highest of the three (an ORT elementwise operator can use every core, numpy one), again
  best-of-stable.

GPU (backends ``cuda``, ``rocm``; needs torch with a GPU): torch matmul in float32, float16
and bfloat16 (matrix peaks), and a device-to-device copy for bandwidth.

Each figure is measured "until stable": repetitions continue until the last ``window``
rates have a coefficient of variation below ``cv_target``, or the time budget is spent;
the figure is the median of that last window (``stable`` says which case it was).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from aaco.analysis.ceilings import Ceilings, hardware_fingerprint
from aaco.errors import UsageError

__all__ = [
    "ContentionProbe",
    "Measurement",
    "best_of_stable",
    "calibrate",
    "llc_bytes",
    "measure_until_stable",
]


@dataclass
class Measurement:
    """A rate measured until stable: ``value`` (median of the last window), its CV."""

    name: str
    unit: str
    value: float
    cv: float
    repeats: int
    stable: bool
    size: str
    rates: list[float]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "value": self.value,
            "cv": self.cv,
            "repeats": self.repeats,
            "stable": self.stable,
            "size": self.size,
        }


def measure_until_stable(
    fn: Callable[[], Any],
    work: float,
    *,
    name: str = "",
    unit: str = "",
    size: str = "",
    window: int = 5,
    cv_target: float = 0.03,
    max_repeats: int = 200,
    budget_s: float = 10.0,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Call ``fn`` until the last ``window`` rates (``work`` / seconds) vary by less than
    ``cv_target`` (sample std / mean), ``max_repeats`` is reached or ``budget_s`` spent."""
    rates: list[float] = []
    start = clock()
    stable = False
    while len(rates) < max_repeats:
        t0 = clock()
        fn()
        dt = clock() - t0
        rates.append(work / dt if dt > 0 else float("inf"))
        if len(rates) >= window:
            last = rates[-window:]
            mean = statistics.fmean(last)
            cv = statistics.stdev(last) / mean if mean else float("inf")
            if cv < cv_target:
                stable = True
                break
        if clock() - start > budget_s and len(rates) >= 2:
            break
    last = rates[-window:]
    mean = statistics.fmean(last)
    cv = statistics.stdev(last) / mean if len(last) > 1 and mean else 0.0
    return Measurement(name, unit, statistics.median(last), cv, len(rates), stable, size, rates)


def best_of_stable(ms: list[Measurement]) -> float:
    """The highest value among the measurements that stabilised; among all of them when
    none did (each is still a median of its last window)."""
    stable = [m.value for m in ms if m.stable]
    return max(stable or [m.value for m in ms])


def llc_bytes() -> int | None:
    """Size of the largest CPU cache (sysfs), or None when it cannot be read."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            text = (idx / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * mult
        except ValueError:
            continue
        best = max(best or 0, size)
    return best


def _ort_runner(graph: Any, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    """A checked opset-17 model of ``graph`` in an ONNX Runtime CPU session (default
    threads, quiet), returned as a call that runs it on ``feeds``."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)


def _ort_matmul(n: int, dtype: type[np.floating[Any]]) -> Callable[[], Any]:
    """One [n, n] x [n, n] MatMul through ONNX Runtime's CPU provider (default threads)."""
    from onnx import TensorProto, helper

    elem = TensorProto.DOUBLE if dtype is np.float64 else TensorProto.FLOAT
    a = helper.make_tensor_value_info("a", elem, [n, n])
    b = helper.make_tensor_value_info("b", elem, [n, n])
    y = helper.make_tensor_value_info("y", elem, [n, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm", [a, b], [y])
    rng = np.random.default_rng(0)
    feeds = {
        "a": rng.standard_normal((n, n)).astype(dtype),
        "b": rng.standard_normal((n, n)).astype(dtype),
    }
    return _ort_runner(graph, feeds)


def _ort_add(numel: int) -> Callable[[], Any]:
    """x + 1 over [numel] floats through ONNX Runtime (its multi-threaded elementwise path)."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [numel])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [numel])
    one = numpy_helper.from_array(np.ones(1, dtype=np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "add", [x], [y], initializer=[one]
    )
    return _ort_runner(graph, {"x": np.ones(numel, dtype=np.float32)})


def _cpu(quick: bool) -> tuple[dict[str, float], float, dict[str, Any]]:
    # 7 figures x 7 s at most keeps a full calibration under a minute
    budget = 1.5 if quick else 7.0
    n = 256 if quick else 1024
    rng = np.random.default_rng(0)
    ms: list[Measurement] = []
    for dt in (np.float32, np.float64):
        a = rng.standard_normal((n, n)).astype(dt)
        b = rng.standard_normal((n, n)).astype(dt)
        out = np.empty((n, n), dtype=dt)

        def gemm(a: np.ndarray = a, b: np.ndarray = b, out: np.ndarray = out) -> None:
            np.matmul(a, b, out=out)

        for engine, fn in (("numpy", gemm), ("onnxruntime", _ort_matmul(n, dt))):
            ms.append(
                measure_until_stable(
                    fn,
                    2.0 * n**3,
                    name=f"{engine}_gemm_{np.dtype(dt).name}",
                    unit="FLOP/s",
                    size=f"{n}x{n}x{n}",
                    budget_s=budget,
                )
            )
    llc = llc_bytes()
    nbytes = max(4 * (llc or 0), (16 if quick else 128) * 1024**2)
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    other = np.ones_like(src)
    size = (
        f"{nbytes / 1024**2:.0f} MiB arrays (LLC {llc / 1024**2:.0f} MiB)"
        if llc
        else (f"{nbytes / 1024**2:.0f} MiB arrays (LLC unknown)")
    )
    for name, fn, moved in (
        ("numpy_copy_bandwidth", lambda: np.copyto(dst, src), 2.0),
        ("numpy_add_bandwidth", lambda: np.add(src, other, out=dst), 3.0),
        ("onnxruntime_add_bandwidth", _ort_add(nbytes // 4), 2.0),
    ):
        ms.append(
            measure_until_stable(
                fn, moved * nbytes, name=name, unit="B/s", size=size, budget_s=budget
            )
        )
    by = {m.name: m for m in ms}
    flops = {
        dt: best_of_stable([by[f"numpy_gemm_{dt}"], by[f"onnxruntime_gemm_{dt}"]])
        for dt in ("float32", "float64")
    }
    bw = best_of_stable([m for m in ms if m.unit == "B/s"])
    import onnxruntime as ort

    details = {
        "measurements": [m.to_json() for m in ms],
        "threads": os.cpu_count(),
        "llc_bytes": llc,
        "numpy": np.__version__,
        "onnxruntime": ort.__version__,
        "quick": quick,
    }
    return flops, bw, details


def _gpu(backend: str, quick: bool) -> tuple[dict[str, float], float, dict[str, Any], str]:
    try:
        import torch
    except ImportError:
        raise UsageError(
            f"calibrating --backend {backend} needs PyTorch with GPU support: "
            "pip install 'aaco[torch]'"
        ) from None
    build = torch.version.hip if backend == "rocm" else torch.version.cuda
    if not build:
        raise UsageError(
            f"--backend {backend}: torch {torch.__version__} is not a "
            f"{'ROCm' if backend == 'rocm' else 'CUDA'} build"
        )
    if not torch.cuda.is_available():
        raise UsageError(f"--backend {backend}: torch {torch.__version__} sees no GPU")
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    budget = 2.0 if quick else 10.0
    n = 2048 if quick else 8192
    ms: list[Measurement] = []
    flops: dict[str, float] = {}
    for name, dt in (("float32", torch.float32), ("float16", torch.float16),
                     ("bfloat16", torch.bfloat16)):  # fmt: skip
        a = torch.randn(n, n, device=dev, dtype=dt)
        b = torch.randn(n, n, device=dev, dtype=dt)

        def mm(a: Any = a, b: Any = b) -> None:
            torch.matmul(a, b)
            sync()

        mm()
        m = measure_until_stable(mm, 2.0 * n**3, name=f"torch_gemm_{name}", unit="FLOP/s",
                                 size=f"{n}x{n}x{n}", budget_s=budget)  # fmt: skip
        ms.append(m)
        flops[name if name == "float32" else f"{name}_matrix"] = m.value
    nbytes = (256 if quick else 2048) * 1024**2
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)
        sync()

    copy()
    m = measure_until_stable(copy, 2.0 * nbytes, name="torch_copy_bandwidth", unit="B/s",
                             size=f"{nbytes / 1024**2:.0f} MiB", budget_s=budget)  # fmt: skip
    ms.append(m)
    details = {"measurements": [x.to_json() for x in ms], "torch": torch.__version__,
               "quick": quick}  # fmt: skip
    return flops, m.value, details, torch.cuda.get_device_name(0)


class ContentionProbe:
    """Share of the machine's CPU time (wall x logical CPUs) that went to anything but this
    process while it measured: busy time (all but idle and iowait, so hypervisor steal
    counts) minus this process's own user + system time."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._t0 = time.perf_counter()
        self._sys0 = psutil.cpu_times()
        self._own0 = self._me.cpu_times()

    def other_share(self) -> float | None:
        import psutil

        wall = time.perf_counter() - self._t0
        cpus = psutil.cpu_count() or 0
        if wall <= 0 or cpus <= 0:
            return None
        sys1, own1 = psutil.cpu_times(), self._me.cpu_times()

        def busy(t: Any) -> float:
            # guest time is already counted in user time on Linux
            left_out = ("idle", "iowait", "guest", "guest_nice")
            return float(sum(float(getattr(t, k, 0.0)) for k in t._fields if k not in left_out))

        own = (own1.user - self._own0.user) + (own1.system - self._own0.system)
        others = busy(sys1) - busy(self._sys0) - own
        return min(1.0, max(0.0, others / (wall * cpus)))


def calibrate(
    backend: str = "cpu", quick: bool = False, env: dict[str, Any] | None = None
) -> Ceilings:
    """Measure this machine's peaks for ``backend`` and return them (not yet stored)."""
    from aaco.collectors.environment import capture_environment

    if backend not in ("cpu", "cuda", "rocm"):
        raise UsageError(f"unknown --backend {backend!r}; valid: cpu, cuda, rocm")
    env = env if env is not None else capture_environment([], [])
    probe = ContentionProbe()
    t0 = time.perf_counter()
    if backend == "cpu":
        flops, bw, details = _cpu(quick)
        device = str((env.get("cpu") or {}).get("model") or "CPU")
    else:
        flops, bw, details, device = _gpu(backend, quick)
    details["seconds"] = time.perf_counter() - t0
    details["other_cpu_share"] = probe.other_share()
    details["logical_cpus"] = os.cpu_count()
    return Ceilings(
        device=device,
        source="calibrated",
        flops_per_s=flops,
        bytes_per_s=bw,
        fingerprint=hardware_fingerprint(env),
        backend=backend,
        measured_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        details=details,
    )
