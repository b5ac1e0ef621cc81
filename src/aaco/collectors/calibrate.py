"""Microbenchmarks that measure the achievable peaks of this machine (``aaco calibrate``).

CPU (backend ``cpu``):
- GEMM FLOP/s: square matrix products, 2 n^3 FLOPs each, with numpy (its BLAS) and through
  ONNX Runtime (a MatMul model on the CPU execution provider, default threads), in float32
  and float64. Each dtype's ceiling is the higher of the two rates (:func:`best_of_stable`:
  among the figures that stabilised, when any did): the fastest GEMM this machine ran in
  that dtype is a roof an operator could reach (on a small shared VM one engine's thread
  pool can lose badly to contention; both figures are kept in ``details``).
- Bandwidth per memory level (the cache-aware roofline): for each data cache level (sysfs)
  a numpy float64 ``add.reduce`` over a stride-0 view of a row that fits the level, on one
  thread per core (numpy releases the GIL inside the loop): every element read twice and
  written once inside the level, 3 x 8 bytes; the last-level cache also with an ONNX
  Runtime Add sized to fit it. DRAM: numpy copy (2 bytes moved per byte: read + write) and
  add (3: two reads, one write), single-threaded, and an ONNX Runtime Add of a scalar (2:
  read + write, on ORT's threads) over arrays of at least 4 x the last-level cache. Each
  level's roof is the best of its figures and never below a farther level's.

GPU (backends ``cuda``, ``rocm``, ``gpu``; needs torch with a GPU, a CUDA or a HIP build:
PyTorch on ROCm is driven through ``torch.cuda`` too): torch matmul in float32 (TF32 off),
float16 and bfloat16 (matrix peaks), on CUDA also float32 with TF32 on (``tfloat32_matrix``),
and a device-to-device copy for bandwidth. The result is
stored under the GPU's device identity (:mod:`aaco.session.devices`: vendor, name,
architecture, compute units), so an ONNX Runtime CUDA/ROCm/MIGraphX session, a PyTorch
run on CUDA or ROCm and an imported trace of that device all find it.

Each figure is measured "until stable": repetitions continue until the last ``window``
rates have a coefficient of variation below ``cv_target``, or the time budget is spent;
the figure is the median of that last window (``stable`` says which case it was). Around
each repetition the machine's idle time (``/proc/stat``) and this process's CPU time are
read: a repetition during which other processes used more than ``busy_share`` of the
machine's CPU time is discarded and repeated, and a figure left without enough quiet
repetitions when its budget runs out is *disturbed*: the calibration stops with
:class:`aaco.errors.BusyError` (``allow_busy`` keeps going and marks the result).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from aaco.collectors.environment import capture_environment
from aaco.errors import AacoError, BusyError, RunError, UsageError
from aaco.session.calibration import GPU_BACKEND, Ceilings, MemoryLevel, save_calibration
from aaco.session.devices import DeviceIdentity, identify
from aaco.session.fingerprint import hardware_fingerprint

__all__ = [
    "AUTO_CALIBRATE_ENV",
    "BUSY_SHARE",
    "CacheLevel",
    "ContentionProbe",
    "CpuTimeReader",
    "CpuTimes",
    "FirstRun",
    "Measurement",
    "ProcStatReplay",
    "auto_calibrate_enabled",
    "best_of_stable",
    "cache_levels",
    "calibrate",
    "first_run_calibration",
    "level_plan",
    "level_roofs",
    "llc_bytes",
    "measure_in_subprocess",
    "measure_until_stable",
    "other_share",
    "parse_proc_stat",
    "read_cpu_times",
]

#: a repetition during which other processes used more than this share of the machine's CPU
#: time (wall x logical CPUs) is discarded: docs/metrics.md, "Ceilings and calibration"
BUSY_SHARE = 0.10
#: set to 0 / false / no / off to keep `aaco run` and `aaco analyze` from calibrating
AUTO_CALIBRATE_ENV = "AACO_AUTO_CALIBRATE"


# --- contention: /proc/stat around each repetition ------------------------------------------


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU-time counters read at one instant.

    ``idle_s``: idle + iowait time of all CPUs (``/proc/stat``), ``own_s``: this process's
    user + system time (all its threads), ``wall_s``: the monotonic clock when read,
    ``cpus``: logical CPUs counted in ``/proc/stat``, ``tick_s``: the resolution of
    ``idle_s`` (one ``USER_HZ`` tick).
    """

    wall_s: float
    idle_s: float
    own_s: float
    cpus: int
    tick_s: float


#: reads the counters now; None when this platform cannot tell
CpuTimeReader = Callable[[], CpuTimes | None]


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(idle + iowait ticks of all CPUs, number of ``cpuN`` lines) from ``/proc/stat``.

    The aggregate ``cpu`` line's fields are user, nice, system, idle, iowait, irq, softirq,
    steal, ...: everything but idle and iowait is busy (hypervisor steal included, since a
    stolen vCPU is one this process could not use). Raises ValueError when the text has no
    aggregate line.
    """
    idle = None
    cpus = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            fields = [int(x) for x in parts[1:]]
            if len(fields) < 4:
                raise ValueError("/proc/stat: short cpu line")
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cpus += 1
    if idle is None:
        raise ValueError("/proc/stat: no aggregate cpu line")
    return idle, max(cpus, 1)


_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def read_cpu_times() -> CpuTimes | None:
    """The counters of this machine now (Linux ``/proc/stat``; psutil elsewhere)."""
    wall = time.perf_counter()
    own = time.process_time()
    try:
        idle_ticks, cpus = parse_proc_stat(Path("/proc/stat").read_text())
        return CpuTimes(wall, idle_ticks * _TICK_S, own, cpus, _TICK_S)
    except (OSError, ValueError):
        pass
    try:
        import psutil

        t = psutil.cpu_times()
        idle = float(t.idle) + float(getattr(t, "iowait", 0.0))
        return CpuTimes(wall, idle, own, psutil.cpu_count() or 1, 0.01)
    except Exception:  # a platform psutil cannot read: contention stays unknown
        return None


class ProcStatReplay:
    """A :data:`CpuTimeReader` that plays back recorded snapshots, in order (tests, and
    replaying a machine's recorded load): each record is ``{"wall_s", "proc_stat" (the
    text of /proc/stat), "own_s"}`` with optional ``"tick_s"`` (default 0.01)."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        self._records = list(records)
        self._next = 0

    @classmethod
    def from_jsonl(cls, path: Path) -> ProcStatReplay:
        lines = Path(path).read_text().splitlines()
        return cls([json.loads(x) for x in lines if x.strip()])

    def __call__(self) -> CpuTimes | None:
        if self._next >= len(self._records):
            return None  # the recording ran out: unknown from here on
        r = self._records[self._next]
        self._next += 1
        tick = float(r.get("tick_s", 0.01))
        idle, cpus = parse_proc_stat(str(r["proc_stat"]))
        return CpuTimes(float(r["wall_s"]), idle * tick, float(r["own_s"]), cpus, tick)


def other_share(before: CpuTimes | None, after: CpuTimes | None) -> tuple[float, float] | None:
    """(others' CPU seconds, capacity in CPU seconds) between two readings, or None.

    Capacity is wall time x logical CPUs; others' time is capacity - idle - this process's
    own CPU time (so hypervisor steal and every other process count).
    """
    if before is None or after is None:
        return None
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        return None
    capacity = wall * after.cpus
    others = capacity - (after.idle_s - before.idle_s) - (after.own_s - before.own_s)
    return max(0.0, others), capacity


def _disturbed(others: float, capacity: float, tick_s: float, busy_share: float) -> bool:
    # the two idle readings are whole ticks each: grant two ticks of doubt before blaming
    # other processes, so that a quiet repetition is never discarded for rounding
    return others - 2.0 * tick_s > busy_share * capacity


class ContentionProbe:
    """Share of the machine's CPU time (wall x logical CPUs) that went to anything but this
    process since the probe was made: busy time (all but idle and iowait, so hypervisor
    steal counts) minus this process's own user + system time."""

    def __init__(self, reader: CpuTimeReader = read_cpu_times) -> None:
        self._reader = reader
        self._start = reader()

    def other_share(self) -> float | None:
        got = other_share(self._start, self._reader())
        if got is None:
            return None
        others, capacity = got
        return min(1.0, others / capacity)


# --- the stability loop ---------------------------------------------------------------------


@dataclass
class Measurement:
    """A rate measured until stable: ``value`` (median of the last window of quiet
    repetitions), its CV, and how contention went (``discarded`` repetitions, ``other_share``
    of the CPU time over all of them, ``disturbed`` when too few quiet ones were left)."""

    name: str
    unit: str
    value: float
    cv: float
    repeats: int
    stable: bool
    size: str
    rates: list[float]
    calls_per_repeat: int = 1
    discarded: int = 0
    other_share: float | None = None
    disturbed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "value": self.value,
            "cv": self.cv,
            "repeats": self.repeats,
            "stable": self.stable,
            "size": self.size,
            "calls_per_repeat": self.calls_per_repeat,
            "discarded": self.discarded,
            "other_share": self.other_share,
            "disturbed": self.disturbed,
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
    min_repeat_s: float = 0.0,
    reader: CpuTimeReader | None = None,
    busy_share: float = BUSY_SHARE,
) -> Measurement:
    """Repeat ``fn`` until the last ``window`` rates (``work`` per call / seconds) vary by
    less than ``cv_target`` (sample std / mean), ``max_repeats`` is reached or ``budget_s``
    spent.

    ``min_repeat_s`` > 0: untimed batches of calls first find how many calls last that
    long, and each repetition makes that many (short calls are timed in batches; the
    counters of ``reader`` need a long enough span to tell contention from rounding).
    ``reader``: read around each repetition; one during which others used more than
    ``busy_share`` of the machine is discarded and does not count towards the window.
    """
    calls = 1
    # untimed batches (which also warm caches and thread pools up) until one lasts
    # min_repeat_s: a single first call is often far slower than the steady state
    for _ in range(6 if min_repeat_s > 0 else 0):
        t0 = clock()
        for _ in range(calls):
            fn()
        dt = clock() - t0
        if dt >= min_repeat_s:
            break
        calls = _grow(calls, dt, min_repeat_s)
    rates: list[float] = []
    noisy: list[float] = []  # rates of discarded repetitions, for a figure of last resort
    others_sum = capacity_sum = 0.0
    probed = False
    start = clock()
    stable = False
    while len(rates) + len(noisy) < max_repeats:
        before = reader() if reader is not None else None
        t0 = clock()
        for _ in range(calls):
            fn()
        dt = clock() - t0
        after = reader() if reader is not None else None
        if dt < min_repeat_s / 2 and clock() - start <= budget_s:
            # sped up since the batches were sized (a contended start): too short for the
            # counters to judge; redo it with more calls (past the budget it counts as is)
            calls = _grow(calls, dt, min_repeat_s)
            continue
        rate = calls * work / dt if dt > 0 else float("inf")
        got = other_share(before, after)
        busy = False
        if got is not None and after is not None:
            probed = True
            others_sum += got[0]
            capacity_sum += got[1]
            busy = _disturbed(got[0], got[1], after.tick_s, busy_share)
        if busy:
            noisy.append(rate)
        else:
            rates.append(rate)
            if len(rates) >= window:
                last = rates[-window:]
                mean = statistics.fmean(last)
                cv = statistics.stdev(last) / mean if mean else float("inf")
                if cv < cv_target:
                    stable = True
                    break
        if clock() - start > budget_s and len(rates) + len(noisy) >= 2:
            break
    disturbed = bool(noisy) and len(rates) < window
    last = rates[-window:] if rates else noisy[-window:]
    mean = statistics.fmean(last)
    cv = statistics.stdev(last) / mean if len(last) > 1 and mean else 0.0
    return Measurement(
        name,
        unit,
        statistics.median(last),
        cv,
        len(rates) + len(noisy),
        stable,
        size,
        rates,
        calls_per_repeat=calls,
        discarded=len(noisy),
        other_share=min(1.0, others_sum / capacity_sum) if probed and capacity_sum else None,
        disturbed=disturbed,
    )


def _grow(calls: int, dt: float, target_s: float) -> int:
    """Calls per batch for a batch of ``calls`` that took ``dt`` to last ``target_s``, with a
    25 % margin."""
    grow = math.ceil(calls * 1.25 * target_s / dt) if dt > 0 else calls * 10
    return min(1_000_000, max(calls + 1, grow))


def best_of_stable(ms: list[Measurement]) -> float:
    """The highest value among the measurements that stabilised; among all of them when
    none did (each is still a median of its last window)."""
    stable = [m.value for m in ms if m.stable]
    return max(stable or [m.value for m in ms])


# --- the cache hierarchy (sysfs) ------------------------------------------------------------


@dataclass(frozen=True)
class CacheLevel:
    """A data (or unified) cache level: its size per instance and how many instances serve
    the CPUs this process may run on (per-core caches: one per core; a shared cache: one
    per group of CPUs that share it)."""

    level: int
    size_bytes: int
    instances: int

    @property
    def name(self) -> str:
        return f"L{self.level}"

    @property
    def capacity_bytes(self) -> int:
        return self.size_bytes * self.instances


def _size(text: str) -> int | None:
    t = text.strip().upper()
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(t[-1:], 1)
    try:
        return int(t.rstrip("KMG")) * mult
    except ValueError:
        return None


def cache_levels(
    root: Path = Path("/sys/devices/system/cpu"), cpus: set[int] | None = None
) -> list[CacheLevel]:
    """The data and unified cache levels serving ``cpus`` (default: this process's CPU
    affinity), nearest first, from ``root/cpuN/cache/index*/{level,type,size,
    shared_cpu_list}``; [] when sysfs does not tell."""
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = set(range(os.cpu_count() or 1))
    groups: dict[int, dict[str, int]] = {}
    for cpu in sorted(cpus):
        base = root / f"cpu{cpu}" / "cache"
        for idx in sorted(base.glob("index*")) if base.is_dir() else []:
            try:
                kind = (idx / "type").read_text().strip()
                level = int((idx / "level").read_text().strip())
                size = _size((idx / "size").read_text())
                shared = (idx / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError):
                continue
            if kind not in ("Data", "Unified") or not size:
                continue
            groups.setdefault(level, {})[shared or f"cpu{cpu}"] = size
    return [
        CacheLevel(level, max(sizes.values()), len(sizes))
        for level, sizes in sorted(groups.items())
    ]


def llc_bytes() -> int | None:
    """Size of the largest CPU cache instance (sysfs), or None when it cannot be read."""
    levels = cache_levels()
    return max(lv.size_bytes for lv in levels) if levels else None


# --- the CPU benchmarks ---------------------------------------------------------------------


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


def _ort_matmul_integer(n: int) -> Callable[[], Any]:
    """One [n, n] uint8 x [n, n] int8 -> int32 MatMulInteger through ONNX Runtime's CPU
    provider: the kernel under ORT's dynamically quantized MatMul, Conv and LSTM
    (``quantize_dynamic``'s defaults: uint8 activations, int8 weights)."""
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n])
    b = helper.make_tensor_value_info("b", TensorProto.INT8, [n, n])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [n, n])
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "gemm_int8", [a, b], [y]
    )
    rng = np.random.default_rng(0)
    feeds = {
        "a": rng.integers(0, 256, (n, n), dtype=np.uint8),
        "b": rng.integers(-128, 128, (n, n), dtype=np.int8),
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


class _ResidentReduce:
    """``threads`` threads, each summing the rows of a [rows, n] float64 view whose rows
    all alias one row (stride 0) into an accumulator row: ``n`` x 8 bytes row + ``n`` x 8
    accumulator stay in the cache they fit, and each element costs 2 reads and 1 write
    there (24 bytes). numpy releases the GIL inside the loop, so the threads run together.
    """

    ITEM = 8

    def __init__(self, working_set: int, threads: int, bytes_per_call: int = 8 * 2**20) -> None:
        self.n = max(64, working_set // (2 * self.ITEM))
        self.rows = max(1, bytes_per_call // (3 * self.ITEM * self.n))
        self.threads = threads
        self._views = []
        self._accs = []
        for _ in range(threads):
            row = np.ones(self.n, dtype=np.float64)
            self._views.append(
                np.lib.stride_tricks.as_strided(row, (self.rows, self.n), (0, self.ITEM))
            )
            self._accs.append(np.zeros(self.n, dtype=np.float64))
        self._pool = ThreadPoolExecutor(threads) if threads > 1 else None

    @property
    def work(self) -> float:
        """Bytes moved per call, all threads."""
        return 3.0 * self.ITEM * self.n * self.rows * self.threads

    def _one(self, i: int) -> None:
        np.add.reduce(self._views[i], axis=0, out=self._accs[i])

    def __call__(self) -> None:
        if self._pool is None:
            self._one(0)
            return
        for f in [self._pool.submit(self._one, i) for i in range(self.threads)]:
            f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


@dataclass(frozen=True)
class _Settings:
    quick: bool
    budget_s: float
    window: int
    cv_target: float
    min_repeat_s: float
    reader: CpuTimeReader | None
    busy_share: float
    allow_busy: bool
    log: Callable[[str], None] | None = None

    @classmethod
    def make(
        cls,
        quick: bool,
        reader: CpuTimeReader | None,
        busy_share: float,
        allow_busy: bool,
        cpus: int,
        log: Callable[[str], None] | None = None,
    ) -> _Settings:
        # a repetition long enough for two ticks of /proc/stat to be a fraction of the
        # machine's capacity well under busy_share: 100 ms on 2 CPUs, 20 ms from 10 CPUs
        min_rep = max(0.02, min(0.1, 2 * _TICK_S / (busy_share * max(cpus, 1))))
        return cls(
            quick=quick,
            budget_s=1.0 if quick else 5.0,
            window=3 if quick else 5,
            cv_target=0.05 if quick else 0.03,
            min_repeat_s=min_rep,
            reader=reader,
            busy_share=busy_share,
            allow_busy=allow_busy,
            log=log,
        )


@dataclass
class _Run:
    """The figures measured so far; stops the calibration at the first disturbed one."""

    settings: _Settings
    ms: list[Measurement] = field(default_factory=list)

    def measure(self, fn: Callable[[], Any], work: float, name: str, unit: str, size: str) -> None:
        s = self.settings
        m = measure_until_stable(
            fn,
            work,
            name=name,
            unit=unit,
            size=size,
            window=s.window,
            cv_target=s.cv_target,
            budget_s=s.budget_s,
            min_repeat_s=s.min_repeat_s,
            reader=s.reader,
            busy_share=s.busy_share,
        )
        self.ms.append(m)
        if s.log is not None:
            s.log(f"{name}: {m.value:.3g} {unit}{' (disturbed)' if m.disturbed else ''}")
        if m.disturbed and not s.allow_busy:
            share = f"{100 * m.other_share:.0f} %" if m.other_share is not None else "much"
            detail = f"other processes held {share} of the CPU"
            raise BusyError(
                f"calibration refused: {detail} while measuring {name} ({m.discarded} of "
                f"{m.repeats} repetitions over {100 * s.busy_share:.0f} %); nothing was "
                "stored. Run it on a quiet machine, or with --allow-busy to store it marked "
                "as disturbed",
                detail=detail,
                share=m.other_share,
            )


def level_plan(levels: list[CacheLevel], threads: int) -> list[tuple[CacheLevel, int]]:
    """(level, working set per thread) for each cache level that can be measured on its
    own: L1 at half a core's L1; each farther level at the geometric mean of the nearer
    level's and its own share per thread, so that the set overflows the nearer level and
    fits this one; a level less than 4 x the nearer one per thread cannot be told apart."""
    plan: list[tuple[CacheLevel, int]] = []
    prev: float | None = None
    for lv in levels:
        # a thread has a whole instance when there are as many as threads, else its share
        per_thread = (
            float(lv.size_bytes) if lv.instances >= threads else lv.capacity_bytes / threads
        )
        if prev is None:
            ws = per_thread / 2
        elif per_thread >= 4 * prev:
            ws = math.sqrt(prev * per_thread)
        else:
            prev = max(prev, per_thread)
            continue
        plan.append((lv, int(ws)))
        prev = per_thread
    return plan


def _cpu(settings: _Settings) -> tuple[dict[str, float], float, list[MemoryLevel], dict[str, Any]]:
    quick = settings.quick
    # 1024 even when quick (a shorter budget makes it quick): a 256^3 GEMM runs well under
    # the BLAS peak, and a model's larger GEMMs then ran above that roof (zoo-compute: 256 x
    # 1024 x 1024 MatMuls against a 256^3 figure)
    n = 1024
    run = _Run(settings)
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        a = rng.standard_normal((n, n)).astype(dt)
        b = rng.standard_normal((n, n)).astype(dt)
        out = np.empty((n, n), dtype=dt)

        def gemm(a: np.ndarray = a, b: np.ndarray = b, out: np.ndarray = out) -> None:
            np.matmul(a, b, out=out)

        for engine, fn in (("numpy", gemm), ("onnxruntime", _ort_matmul(n, dt))):
            run.measure(fn, 2.0 * n**3, f"{engine}_gemm_{np.dtype(dt).name}", "FLOP/s",
                        f"{n}x{n}x{n}")  # fmt: skip
    # integer GEMM (no numpy path): the roof of ORT's quantized operators (int8 and uint8)
    run.measure(_ort_matmul_integer(n), 2.0 * n**3, "onnxruntime_gemm_int8", "OP/s",
                f"{n}x{n}x{n} u8 x s8")  # fmt: skip

    levels = cache_levels()
    threads = levels[0].instances if levels else (os.cpu_count() or 1)
    level_figures: dict[str, list[Measurement]] = {}
    for lv, ws in level_plan(levels, threads):
        kernel = _ResidentReduce(ws, threads)
        try:
            run.measure(kernel, kernel.work, f"numpy_reduce_{lv.name.lower()}_bandwidth", "B/s",
                        f"{threads} x {ws / 1024:.0f} KiB")  # fmt: skip
        finally:
            kernel.close()
        level_figures[lv.name] = [run.ms[-1]]
        if lv is levels[-1]:
            # the last-level cache is where ORT's own threads can reach a cache's roof: one
            # Add (x in, y out) sized to the same total working set
            numel = max(1024, ws * threads // 8)
            name = f"onnxruntime_add_{lv.name.lower()}_bandwidth"
            run.measure(_ort_add(numel), 8.0 * numel, name, "B/s",
                        f"2 x {4 * numel / 1024:.0f} KiB")  # fmt: skip
            level_figures[lv.name].append(run.ms[-1])

    llc = levels[-1].capacity_bytes if levels else None
    nbytes = max(4 * (llc or 0), (64 if quick else 128) * 1024**2)
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    other = np.ones_like(src)
    size = (
        f"{nbytes / 1024**2:.0f} MiB arrays (LLC {llc / 1024**2:.0f} MiB)"
        if llc
        else (f"{nbytes / 1024**2:.0f} MiB arrays (LLC unknown)")
    )
    dram: list[Measurement] = []
    for name, fn, moved in (
        ("numpy_copy_bandwidth", lambda: np.copyto(dst, src), 2.0),
        ("numpy_add_bandwidth", lambda: np.add(src, other, out=dst), 3.0),
        ("onnxruntime_add_bandwidth", _ort_add(nbytes // 4), 2.0),
    ):
        run.measure(fn, moved * nbytes, name, "B/s", size)
        dram.append(run.ms[-1])
    by = {m.name: m for m in run.ms}
    flops = {
        dt: best_of_stable([by[f"numpy_gemm_{dt}"], by[f"onnxruntime_gemm_{dt}"]])
        for dt in ("float32", "float64")
    }
    flops["int8"] = best_of_stable([by["onnxruntime_gemm_int8"]])
    bw = best_of_stable(dram)
    memory_levels = level_roofs(levels, level_figures, bw)
    import onnxruntime as ort

    details = {
        "measurements": [m.to_json() for m in run.ms],
        "threads": threads,
        "llc_bytes": llc,
        "caches": [
            {"level": lv.name, "size_bytes": lv.size_bytes, "instances": lv.instances}
            for lv in levels
        ],
        "numpy": np.__version__,
        "onnxruntime": ort.__version__,
        "quick": quick,
    }
    details["disturbed_figures"] = [m.name for m in run.ms if m.disturbed]
    return flops, bw, memory_levels, details


def level_roofs(
    levels: list[CacheLevel], figures: Mapping[str, list[Measurement]], dram: float
) -> list[MemoryLevel]:
    """The roofs, nearest first: each level's best figure, raised to the best of the
    farther levels (data in a nearer level is never slower to reach than from a farther
    one); a level that could not be measured takes the nearer level's roof, an upper
    bound (so that none of its operators is ever drawn above a roof for want of a figure)."""
    raw: list[tuple[CacheLevel, float | None]] = [
        (lv, best_of_stable(figures[lv.name]) if figures.get(lv.name) else None) for lv in levels
    ]
    out: list[MemoryLevel] = []
    floor = dram
    roofs: list[float | None] = []
    for _, v in reversed(raw):
        if v is not None:
            floor = max(floor, v)
            roofs.append(floor)
        else:
            roofs.append(None)
    roofs.reverse()
    nearer: float | None = None
    for (lv, v), roof in zip(raw, roofs, strict=True):
        value = roof if roof is not None else nearer
        out.append(MemoryLevel(lv.name, lv.capacity_bytes, value, measured=v is not None))
        nearer = value if value is not None else nearer
    out.append(MemoryLevel("DRAM", None, dram))
    return out


def _gpu(backend: str, settings: _Settings) -> tuple[dict[str, float], float, dict[str, Any], str]:
    try:
        import torch
    except ImportError:
        raise UsageError(
            f"calibrating --backend {backend} needs PyTorch with GPU support: "
            "pip install 'aaco[torch]'"
        ) from None
    # PyTorch on ROCm (HIP) drives the GPU through the same torch.cuda API as on CUDA, so
    # either build measures "the GPU torch sees"; only rocm with a CUDA build is refused
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    if not (hip or cuda) or (backend == "rocm" and not hip):
        raise UsageError(
            f"--backend {backend}: torch {torch.__version__} is not a "
            f"{'ROCm' if backend == 'rocm' else 'CUDA or ROCm'} build"
        )
    if not torch.cuda.is_available():
        raise UsageError(f"--backend {backend}: torch {torch.__version__} sees no GPU")
    quick = settings.quick
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    n = 2048 if quick else 8192
    run = _Run(settings)
    flops: dict[str, float] = {}
    matmul_flags = torch.backends.cuda.matmul
    tf32_before = matmul_flags.allow_tf32
    # float32 with TF32 off (plain FP32: SIMT on NVIDIA, MFMA FP32 on AMD), then on NVIDIA
    # with TF32 on: the TF32 tensor-core roof that FP32 GEMMs reach when it is allowed
    plan = [("float32", torch.float32, False), ("float16", torch.float16, False),
            ("bfloat16", torch.bfloat16, False)]  # fmt: skip
    if not hip:
        plan.append(("tfloat32", torch.float32, True))
    try:
        for name, dt, tf32 in plan:
            matmul_flags.allow_tf32 = tf32
            a = torch.randn(n, n, device=dev, dtype=dt)
            b = torch.randn(n, n, device=dev, dtype=dt)

            def mm(a: Any = a, b: Any = b) -> None:
                torch.matmul(a, b)
                sync()

            mm()
            run.measure(mm, 2.0 * n**3, f"torch_gemm_{name}", "FLOP/s", f"{n}x{n}x{n}")
            flops[name if name == "float32" else f"{name}_matrix"] = run.ms[-1].value
    finally:
        matmul_flags.allow_tf32 = tf32_before
    nbytes = (256 if quick else 2048) * 1024**2
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)
        sync()

    copy()
    run.measure(copy, 2.0 * nbytes, "torch_copy_bandwidth", "B/s", f"{nbytes / 1024**2:.0f} MiB")
    props = torch.cuda.get_device_properties(0)
    arch = getattr(props, "gcnArchName", None) if hip else f"sm_{props.major}{props.minor}"
    details = {"measurements": [x.to_json() for x in run.ms], "torch": torch.__version__,
               "build": f"hip {hip}" if hip else f"cuda {cuda}", "quick": quick,
               "arch": arch, "compute_units": props.multi_processor_count,
               "memory_bytes": props.total_memory,
               "disturbed_figures": [m.name for m in run.ms if m.disturbed]}  # fmt: skip
    return flops, run.ms[-1].value, details, torch.cuda.get_device_name(0)


def calibrate(
    backend: str = "cpu",
    quick: bool = False,
    env: dict[str, Any] | None = None,
    *,
    reader: CpuTimeReader | None = read_cpu_times,
    busy_share: float = BUSY_SHARE,
    allow_busy: bool = False,
    log: Callable[[str], None] | None = None,
) -> Ceilings:
    """Measure this machine's peaks for ``backend`` and return them (not yet stored).

    ``reader``: the CPU-time counters read around each repetition (None: contention is not
    judged, the result's ``contention`` is unknown). A figure left without enough quiet
    repetitions raises :class:`aaco.errors.BusyError` at once, unless ``allow_busy``:
    then every figure is measured and the result is marked ``contention="disturbed"``.
    """
    if backend not in ("cpu", "cuda", "rocm", "gpu"):
        raise UsageError(f"unknown --backend {backend!r}; valid: cpu, cuda, rocm, gpu")
    env = env if env is not None else capture_environment([], [])
    probe = ContentionProbe(reader) if reader is not None else None
    first = reader() if reader is not None else None
    cpus = first.cpus if first is not None else (os.cpu_count() or 1)
    settings = _Settings.make(quick, reader, busy_share, allow_busy, cpus, log)
    t0 = time.perf_counter()
    levels: list[MemoryLevel] = []
    if backend == "cpu":
        flops, bw, levels, details = _cpu(settings)
        device = str((env.get("cpu") or {}).get("model") or "CPU")
    else:
        flops, bw, details, device = _gpu(backend, settings)
    details["seconds"] = time.perf_counter() - t0
    details["other_cpu_share"] = probe.other_share() if probe is not None else None
    details["logical_cpus"] = os.cpu_count()
    details["busy_share_threshold"] = busy_share
    contention: str | None = None
    if reader is not None and first is not None:
        contention = "disturbed" if details.get("disturbed_figures") else "quiet"
    fingerprint, stored_as = hardware_fingerprint(env), backend
    if backend != "cpu":
        ident = gpu_identity(device, details)
        fingerprint, stored_as = ident.key, GPU_BACKEND
        details["device_identity"] = ident.to_json()
        details["requested_backend"] = backend
    return Ceilings(
        device=device,
        source="calibrated",
        flops_per_s=flops,
        bytes_per_s=bw,
        fingerprint=fingerprint,
        backend=stored_as,
        measured_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        details=details,
        memory_levels=tuple(levels),
        mode="quick" if quick else "full",
        contention=contention,
    )


def gpu_identity(device: str, details: Mapping[str, Any]) -> DeviceIdentity:
    """The identity a GPU calibration is stored under, from what torch reported."""
    hip = str(details.get("build", "")).startswith("hip")
    ident = identify(
        device,
        vendor="amd" if hip else "nvidia",
        arch=details.get("arch"),
        compute_units=details.get("compute_units"),
        memory_bytes=details.get("memory_bytes"),
    )
    return ident if ident is not None else DeviceIdentity("amd" if hip else "nvidia", device)


# --- the first run: a quick calibration when none is stored ---------------------------------


def auto_calibrate_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``AACO_AUTO_CALIBRATE`` says 0 / false / no / off; True otherwise."""
    value = (environ if environ is not None else os.environ).get(AUTO_CALIBRATE_ENV, "")
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class FirstRun:
    """What a first-run calibration did: the ceilings (None when refused or not possible),
    a one-line note for the report, the seconds it took and where it was stored."""

    ceilings: Ceilings | None
    note: str
    seconds: float | None = None
    stored: Path | None = None


def measure_in_subprocess(
    backend: str = "cpu",
    quick: bool = True,
    env: Mapping[str, Any] | None = None,
    timeout_s: float = 300.0,
) -> Ceilings:
    """:func:`calibrate` in a child process (``python -m aaco.collectors.calibrate``): its
    arrays (hundreds of MiB for DRAM) and thread pools stay out of this process, whose peak
    RSS the report gives as the aaco process's, and a crash stays the child's. Raises
    :class:`BusyError` when the child refused, RunError when it failed."""
    import subprocess
    import sys

    request = json.dumps({"backend": backend, "quick": quick, "env": dict(env or {})})
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "aaco.collectors.calibrate"],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RunError(f"the calibration process ran past {timeout_s:.0f} s") from None
    lines = proc.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else {}
    except ValueError:
        out = {}
    if isinstance(out.get("refused"), dict):
        r = out["refused"]
        raise BusyError(str(r.get("message")), detail=str(r.get("detail")), share=r.get("share"))
    if not isinstance(out.get("ceilings"), dict):
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunError(f"the calibration process failed (exit {proc.returncode}): {err}")
    return Ceilings.from_json(out["ceilings"])


def _child() -> None:
    """``python -m aaco.collectors.calibrate``: a request ``{"backend", "quick", "env"}`` on
    stdin, one JSON line on stdout: ``{"ceilings": ...}`` or ``{"refused": {message,
    detail, share}}``."""
    import sys

    req = json.loads(sys.stdin.read() or "{}")
    env = req.get("env") or None
    try:
        c = calibrate(str(req.get("backend", "cpu")), bool(req.get("quick", True)), env=env)
    except BusyError as exc:
        out: dict[str, Any] = {
            "refused": {"message": str(exc), "detail": exc.detail, "share": exc.share}
        }
    else:
        out = {"ceilings": c.to_json()}
    sys.stdout.write(json.dumps(out) + "\n")


def first_run_calibration(
    session_env: Mapping[str, Any] | None,
    backend: str = "cpu",
    *,
    measure: Callable[[dict[str, Any]], Ceilings] | None = None,
    this_env: dict[str, Any] | None = None,
) -> FirstRun:
    """A quick calibration of this machine for a session that found none (CPU only).

    Only when the session ran on this machine (same hardware fingerprint): another
    machine's session cannot be judged by this one's peaks. Measured by ``measure`` (this
    machine's environment in, ceilings out; default :func:`measure_in_subprocess`, quick),
    stored like ``aaco calibrate --quick``'s when quiet; refused (not stored, no ceilings)
    when other processes held the CPU.
    """
    if backend != "cpu":
        return FirstRun(None, f"no ceilings: run `aaco calibrate --backend {backend}`")
    here = this_env if this_env is not None else capture_environment([], [])
    if not session_env or hardware_fingerprint(session_env) != hardware_fingerprint(here):
        return FirstRun(
            None,
            "no ceilings: the session ran on another machine; run `aaco calibrate` there "
            "and `aaco analyze` with its calibration folder",
        )
    run = measure if measure is not None else (lambda e: measure_in_subprocess("cpu", True, e))
    t0 = time.perf_counter()
    try:
        c = run(here)
    except BusyError as exc:
        return FirstRun(
            None,
            f"no ceilings: the quick calibration was refused, {exc.detail}; run `aaco "
            "calibrate` on a quiet machine",
            time.perf_counter() - t0,
        )
    except AacoError as exc:
        return FirstRun(None, f"no ceilings: the quick calibration failed: {exc}")
    seconds = time.perf_counter() - t0
    path = save_calibration(c)
    return FirstRun(
        c,
        f"quick calibration measured now, {seconds:.1f} s (stored); run `aaco calibrate` "
        "for a full one",
        seconds,
        path,
    )


if __name__ == "__main__":
    _child()
