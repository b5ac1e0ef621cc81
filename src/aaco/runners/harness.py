"""The one worker harness: every runner's workload is measured here, in its own process.

Started by the parent as ``python -m aaco.runners.harness BUNDLE_DIR [--capture]``; it reads
``runtime/worker_spec.json``, whose ``workload`` key names the runner's :class:`Workload`
(``module:Class``), and runs the protocol every runner shares:

  1. ``prepare`` (load the model, make the inputs) → one iteration as a callable;
  2. ``warmup`` iterations, then the measured ones (``iterations``, or until ``duration_s``
     has passed), each timed with ``time.perf_counter_ns()`` immediately around the call,
     garbage collection off during the measured loop; the clock readings go to
     ``metrics/inference_iters.parquet``;
  3. ``release`` (drop the measured session), then with ``profile`` a separate profiled pass
     of ``profile_warmup`` + ``profile_iterations`` iterations (``Workload.profiled``), so
     the profiler's overhead never touches the latency statistics of step 2;
  4. ``finish``, then ``runtime/worker_result.json`` (:class:`~aaco.runners.spec.WorkerResult`).

With ``sentinel: true`` in the spec, the noise sentinel (:mod:`aaco.runners.sentinel`) is
timed before the warmup, between warmup and measured phase, and after the measured phase;
the worker also records the CPUs it and its threads may run on (``affinity``), which is how
a run pinned by ``--isolate`` shows that it was.

``--capture`` runs only the profiled pass's iteration count on a plain ``prepare("capture")``
step, for a tracer wrapping this process (rocprofv3), and reports in ``runtime/capture_*``.

A crash, hang or out-of-memory kill of this process leaves the parent in charge: the
parent (:mod:`aaco.runners.launch`) records what happened from the progress file.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from aaco.plugins import load_ref
from aaco.runners.rss import own_peak_rss_bytes
from aaco.runners.sentinel import Watch
from aaco.runners.spec import CAPTURE_FILES, MEASURE_FILES, SPEC_FILE, WorkerFiles, WorkerResult
from aaco.session.bundle import atomic_write_json, write_table
from aaco.session.schema import INFERENCE_ITERS

__all__ = [
    "LoopSpec",
    "Profiled",
    "Progress",
    "WorkerContext",
    "Workload",
    "cpu_affinity",
    "iters_table",
    "main",
    "one_line",
    "run_worker",
    "timing_loop",
    "timing_loop_for",
]

#: ``python -m`` target of every worker
WORKER_MODULE = "aaco.runners.harness"
CAPTURE_FLAG = "--capture"


def timing_loop(
    step: Callable[[], Any], n: int, clock: Callable[[], int] = time.perf_counter_ns
) -> tuple[array[int], array[int]]:
    """Time ``n`` calls of ``step``; the only work between the two clock reads is the call.

    Timestamps go to preallocated int64 arrays (8 bytes each, no Python int kept alive), so
    the worker's memory, which the telemetry reports, is the model's and not AACO's.
    ``clock`` is injectable for tests (:class:`aaco.testing.FakeClock`).
    """
    starts = array("q", bytes(8 * n))
    ends = array("q", bytes(8 * n))
    for i in range(n):
        t0 = clock()
        step()
        t1 = clock()
        starts[i] = t0
        ends[i] = t1
    return starts, ends


def timing_loop_for(
    step: Callable[[], Any], duration_ns: int, clock: Callable[[], int] = time.perf_counter_ns
) -> tuple[array[int], array[int]]:
    """Time calls of ``step`` until ``duration_ns`` has passed (at least one call)."""
    starts = array("q")
    ends = array("q")
    deadline = clock() + duration_ns
    while True:
        t0 = clock()
        step()
        t1 = clock()
        starts.append(t0)
        ends.append(t1)
        if t1 >= deadline:
            return starts, ends


def iters_table(
    w_starts: array[int],
    w_ends: array[int],
    m_starts: array[int],
    m_ends: array[int],
    preprocess_ns: np.ndarray | None = None,
) -> pa.Table:
    """The ``inference_iters`` table of the warmup and measured calls' clock readings;
    ``preprocess_ns`` (warmup then measured) when a preprocessing step ran in each call."""
    starts = np.concatenate([np.frombuffer(w_starts, np.int64), np.frombuffer(m_starts, np.int64)])
    ends = np.concatenate([np.frombuffer(w_ends, np.int64), np.frombuffer(m_ends, np.int64)])
    return INFERENCE_ITERS.from_columns(
        {
            "phase": pa.concat_arrays(
                [
                    pa.repeat(pa.scalar("warmup"), len(w_starts)),
                    pa.repeat(pa.scalar("measured"), len(m_starts)),
                ]
            ),
            "iteration": np.concatenate(
                [np.arange(len(w_starts), dtype=np.int32), np.arange(len(m_starts), dtype=np.int32)]
            ),
            "start_ns": starts,
            "end_ns": ends,
            "latency_ns": ends - starts,
            "preprocess_ns": preprocess_ns
            if preprocess_ns is not None
            else pa.nulls(len(starts), pa.int64()),
        }
    )


def one_line(exc: BaseException, limit: int | None = 400) -> str:
    """The first line of an exception's message, at most ``limit`` characters."""
    text = str(exc).strip() or type(exc).__name__
    return (text.splitlines()[0] if text else text)[:limit]


class Progress:
    """Appends one JSON line per stage so the parent knows how far a dead worker got."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", buffering=1)

    def stage(self, name: str, **extra: Any) -> None:
        self._fh.write(json.dumps({"stage": name, "ts_ns": time.perf_counter_ns(), **extra}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


@dataclass(frozen=True)
class LoopSpec:
    """The harness's part of ``worker_spec.json``: how many iterations of what."""

    warmup: int
    iterations: int | None
    duration_s: float | None
    profile: bool
    profile_warmup: int
    profile_iterations: int
    #: time the noise sentinel around the warmup and measured phases
    sentinel: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LoopSpec:
        return cls(
            warmup=int(d.get("warmup") or 0),
            iterations=d.get("iterations"),
            duration_s=d.get("duration_s"),
            profile=bool(d.get("profile")),
            profile_warmup=int(d.get("profile_warmup") or 0),
            profile_iterations=int(d.get("profile_iterations") or 0),
            sentinel=bool(d.get("sentinel")),
        )

    @property
    def profile_runs(self) -> int:
        return self.profile_warmup + self.profile_iterations


class WorkerContext:
    """What a workload may touch: the bundle folder, the result it fills, the progress file."""

    def __init__(self, bundle_dir: Path, result: WorkerResult, progress: Progress) -> None:
        self.bundle_dir = bundle_dir
        self.result = result
        self._progress = progress

    def stage(self, name: str, *, announce: bool = True) -> None:
        """Enter stage ``name``: the result says so and, with ``announce``, the progress file
        too (what the parent reports when the worker dies there)."""
        self.result.stage = name
        if announce:
            self._progress.stage(name)


@dataclass
class Profiled:
    """The profiled pass's iteration, and a marker run after each one outside the timed
    region (``torch.profiler``'s ``prof.step``, which at its last call exports the trace)."""

    step: Callable[[], Any]
    after: Callable[[], Any] | None = None


class Workload(ABC):
    """The worker-side part of a runner: prepare, one iteration, finish.

    The harness owns the loop, the clock, GC policy, progress, the iterations table and
    failure recording; a workload only says how to get one iteration ready, how to profile
    it, and what to clean up. ``spec`` is the whole ``worker_spec.json``.
    """

    def __init__(self, spec: Mapping[str, Any], ctx: WorkerContext) -> None:
        self.spec = spec
        self.ctx = ctx

    @abstractmethod
    def prepare(self, purpose: str) -> Callable[[], Any]:
        """Load the model and make the inputs; return one iteration. ``purpose`` is
        ``"measure"`` or ``"capture"`` (a plain step for a tracer, nothing extra inside)."""

    def preprocess_ns(self) -> np.ndarray | None:
        """Per-iteration host preprocessing time (warmup then measured), when there is any."""
        return None

    def release(self) -> None:  # noqa: B027 - optional hook
        """Drop what :meth:`prepare` built, before the profiled pass."""

    @contextmanager
    def profiled(self) -> Iterator[Profiled | None]:
        """The profiled pass: yields its iteration (None: this runner does not profile)."""
        yield None

    def finish(self) -> None:  # noqa: B027 - optional hook
        """Called once at the end, whether or not the run completed."""

    def describe_error(self, exc: BaseException) -> str:
        """The one line recorded as the run's error."""
        return one_line(exc)


def _loop_phase(result: WorkerResult, phase: str, starts: array[int], ends: array[int]) -> None:
    if len(starts):
        result.phases[phase] = [starts[0], ends[-1]]


def cpu_affinity() -> dict[str, Any] | None:
    """The CPUs this process may run on, and those any of its threads may (the union over
    ``/proc/self/task``: a runtime's thread pool included); None off Linux."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    process = sorted(os.sched_getaffinity(0))
    threads: set[int] = set()
    count = 0
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task") if t.isdigit()]
    except OSError:
        tids = []
    for tid in tids:
        try:
            threads |= os.sched_getaffinity(tid)
        except OSError:  # the thread ended
            continue
        count += 1
    return {"process": process, "threads": sorted(threads), "thread_count": count}


def _measure(workload: Workload, loop: LoopSpec, ctx: WorkerContext) -> None:
    result = ctx.result
    step = workload.prepare("measure")
    # After the model is loaded, so that loading's page faults and allocations are over.
    watch = Watch() if loop.sentinel else None
    if watch is not None:
        result.sentinel = watch.at("before")
    ctx.stage("warmup")
    w_starts, w_ends = timing_loop(step, loop.warmup)
    _loop_phase(result, "warmup", w_starts, w_ends)
    result.warmup_iterations = loop.warmup
    if watch is not None:
        result.sentinel = watch.at("between")

    ctx.stage("measure")
    # A collection in the middle of the loop would be charged to one unlucky iteration.
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        if loop.duration_s is not None:
            m_starts, m_ends = timing_loop_for(step, int(loop.duration_s * 1e9))
        else:
            m_starts, m_ends = timing_loop(step, loop.iterations or 0)
    finally:
        if gc_was_enabled:
            gc.enable()
    _loop_phase(result, "measured", m_starts, m_ends)
    result.measured_iterations = len(m_starts)
    if watch is not None:
        result.sentinel = watch.at("after")
    # while the measured session and its thread pool are alive
    result.affinity = cpu_affinity()
    write_table(
        ctx.bundle_dir / INFERENCE_ITERS.path,
        iters_table(w_starts, w_ends, m_starts, m_ends, workload.preprocess_ns()),
    )
    del step
    workload.release()

    if loop.profile:
        ctx.stage("profile")
        with workload.profiled() as profiled:
            if profiled is not None:
                starts, ends = _profiled_runs(profiled, loop.profile_runs)
                _record_runs(result, "profile", starts, ends)


def _profiled_runs(profiled: Profiled, n: int) -> tuple[array[int], array[int]]:
    """``n`` timed iterations of the profiled pass; its marker (if any) after each one,
    outside the clock readings: one iteration of the timing loop at a time then."""
    if profiled.after is None:
        return timing_loop(profiled.step, n)
    starts, ends = array("q"), array("q")
    for _ in range(n):
        s, e = timing_loop(profiled.step, 1)
        starts += s
        ends += e
        profiled.after()
    return starts, ends


def _record_runs(result: WorkerResult, phase: str, starts: array[int], ends: array[int]) -> None:
    _loop_phase(result, phase, starts, ends)
    result.profile_runs = len(starts)
    result.profile_wall_ns = [e - s for s, e in zip(starts, ends, strict=True)]


def _capture(workload: Workload, loop: LoopSpec, ctx: WorkerContext) -> None:
    step = workload.prepare("capture")
    ctx.stage("capture")
    starts, ends = timing_loop(step, loop.profile_runs)
    _record_runs(ctx.result, "kernel_capture", starts, ends)


def run_worker(bundle_dir: Path, capture: bool = False) -> WorkerResult:
    """Run the spec found in ``bundle_dir``; always returns a result, never raises."""
    files = CAPTURE_FILES if capture else MEASURE_FILES
    result = WorkerResult()
    progress = Progress(bundle_dir / files.progress)
    ctx = WorkerContext(bundle_dir, result, progress)
    workload: Workload | None = None
    try:
        try:
            spec = json.loads((bundle_dir / SPEC_FILE).read_text())
            loop = LoopSpec.from_json(spec)
            workload_cls = load_ref(spec["workload"])
            workload = workload_cls(spec, ctx)
            (_capture if capture else _measure)(workload, loop, ctx)
        finally:
            if workload is not None:
                workload.finish()
        result.status = "completed"
        ctx.stage("done")
    except Exception as exc:
        result.status = "failed"
        result.error_type = type(exc).__name__
        result.error = workload.describe_error(exc) if workload is not None else one_line(exc)
        _write_traceback(bundle_dir, files)
    progress.close()
    if result.affinity is None:
        result.affinity = cpu_affinity()
    result.peak_rss_bytes = own_peak_rss_bytes()  # last: it covers the whole run
    atomic_write_json(bundle_dir / files.result, result.to_json())
    return result


def _write_traceback(bundle_dir: Path, files: WorkerFiles) -> None:
    name = "capture_traceback.txt" if files is CAPTURE_FILES else "worker_traceback.txt"
    (bundle_dir / "runtime").mkdir(parents=True, exist_ok=True)
    with (bundle_dir / "runtime" / name).open("w") as fh:
        traceback.print_exc(file=fh)


def worker_argv(bundle_dir: Path, capture: bool = False) -> list[str]:
    """The worker's command line, as a tracer wraps it."""
    return [
        sys.executable,
        "-m",
        WORKER_MODULE,
        str(bundle_dir),
        *([CAPTURE_FLAG] if capture else []),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    capture = CAPTURE_FLAG in args
    rest = [a for a in args if a != CAPTURE_FLAG]
    if len(rest) != 1:
        print(f"usage: python -m {WORKER_MODULE} BUNDLE_DIR [{CAPTURE_FLAG}]", file=sys.stderr)
        return 2
    result = run_worker(Path(rest[0]), capture=capture)
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
