"""The ONNX Runtime worker: runs in its own process, times iterations, then profiles a pass.

Started by the parent as ``python -m aaco.runners.ort BUNDLE_DIR``; it reads
``runtime/worker_spec.json`` and writes ``metrics/inference_iters.parquet``, the raw ORT
profile, the optimized graph and ``runtime/worker_result.json`` into the bundle's staging
folder. A crash, hang or out-of-memory kill of this process leaves the parent in charge:
the parent records what happened.

Measurement protocol:
  1. session A (no profiling) -> ``warmup`` untimed-for-statistics iterations, then the
     measured iterations (``iterations``, or until ``duration_s`` has passed), each timed
     with ``time.perf_counter_ns()`` immediately around ``session.run``;
  2. session B (``enable_profiling``, same options, optimized graph saved) ->
     ``profile_warmup`` + ``profile_iterations`` runs, so profiler overhead never touches
     the latency statistics of step 1.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from aaco.runners.inputs import feed_value, make_array
from aaco.runners.preprocess import PREPROCESSORS, Preprocessed, image_input
from aaco.runners.rss import own_peak_rss_bytes
from aaco.runners.spec import (
    OPTIMIZED_MODEL,
    OPTIMIZED_WEIGHTS,
    PROFILE_DIR,
    PROGRESS_FILE,
    RESULT_FILE,
    SPEC_FILE,
    RunSpec,
    WorkerResult,
)
from aaco.session.bundle import atomic_write_json, write_table
from aaco.session.schema import INFERENCE_ITERS

_OPT_LEVEL_NAMES = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}


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


def timing_loop(
    run: Any, output_names: list[str] | None, feeds: dict[str, Any], n: int
) -> tuple[array[int], array[int]]:
    """Time ``n`` calls of ``run``; the only work between the two clock reads is the call.

    Timestamps go to preallocated int64 arrays (8 bytes each, no Python int kept alive), so
    the worker's memory, which the telemetry reports, is the model's and not AACO's.
    """
    clock = time.perf_counter_ns
    starts = array("q", bytes(8 * n))
    ends = array("q", bytes(8 * n))
    for i in range(n):
        t0 = clock()
        run(output_names, feeds)
        t1 = clock()
        starts[i] = t0
        ends[i] = t1
    return starts, ends


def timing_loop_for(
    run: Any, output_names: list[str] | None, feeds: dict[str, Any], duration_ns: int
) -> tuple[array[int], array[int]]:
    """Time calls of ``run`` until ``duration_ns`` has passed (at least one call)."""
    clock = time.perf_counter_ns
    starts = array("q")
    ends = array("q")
    deadline = clock() + duration_ns
    t1 = 0
    while t1 < deadline:
        t0 = clock()
        run(output_names, feeds)
        t1 = clock()
        starts.append(t0)
        ends.append(t1)
    return starts, ends


class _Progress:
    """Appends one JSON line per stage so the parent knows how far a dead worker got."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", buffering=1)

    def stage(self, name: str, **extra: Any) -> None:
        self._fh.write(json.dumps({"stage": name, "ts_ns": time.perf_counter_ns(), **extra}) + "\n")
        self._fh.flush()


def _session_options(spec: RunSpec, ort: Any) -> Any:
    so = ort.SessionOptions()
    b = spec.backend
    threads = spec.threads if spec.threads is not None else b.intra_op_threads
    if threads is not None:
        so.intra_op_num_threads = threads
    if b.inter_op_threads is not None:
        so.inter_op_num_threads = b.inter_op_threads
    level = getattr(ort.GraphOptimizationLevel, _OPT_LEVEL_NAMES[b.graph_optimization_level], None)
    so.graph_optimization_level = (
        level if level is not None else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    so.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL
        if b.execution_mode == "parallel"
        else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    so.log_severity_level = 3  # errors only: warnings would flood the worker log
    return so


def _providers(spec: RunSpec) -> tuple[list[str], list[dict[str, Any]]]:
    names = [spec.backend.provider, *spec.backend.fallback_providers]
    options: list[dict[str, Any]] = [
        {k: str(v) for k, v in spec.backend.provider_options.items()}
    ] + [{} for _ in spec.backend.fallback_providers]
    return names, options


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    first = text.splitlines()[0] if text else text
    # ORT prefixes messages with "[ONNXRuntimeError] : 10 : INVALID_GRAPH : "; keep the reason.
    if first.startswith("[ONNXRuntimeError]"):
        parts = first.split(" : ", 3)
        first = parts[-1] if len(parts) == 4 else first
    return first[:400]


def run_worker(bundle_dir: Path) -> WorkerResult:
    """Run the spec found in ``bundle_dir``; always returns a result, never raises."""
    result = WorkerResult()
    progress = _Progress(bundle_dir / PROGRESS_FILE)
    try:
        spec = RunSpec.from_json(json.loads((bundle_dir / SPEC_FILE).read_text()))
        _run(spec, bundle_dir, result, progress)
        result.status = "completed"
        result.stage = "done"
        progress.stage("done")
    except Exception as exc:
        result.status = "failed"
        result.error_type = type(exc).__name__
        result.error = _one_line(exc)
        if result.stage == "load":
            result.error = f"onnxruntime rejected the model: {result.error}"
        (bundle_dir / "runtime").mkdir(parents=True, exist_ok=True)
        with (bundle_dir / "runtime" / "worker_traceback.txt").open("w") as fh:
            traceback.print_exc(file=fh)
    result.peak_rss_bytes = own_peak_rss_bytes()  # last: it covers the whole run
    atomic_write_json(bundle_dir / RESULT_FILE, result.to_json())
    return result


def _run(spec: RunSpec, bundle_dir: Path, result: WorkerResult, progress: _Progress) -> None:
    import onnxruntime as ort

    names, options = _providers(spec)
    result.providers_requested = names
    result.stage = "load"
    progress.stage("load")
    so = _session_options(spec, ort)
    t0 = time.perf_counter_ns()
    sess = ort.InferenceSession(
        spec.model_path, sess_options=so, providers=names, provider_options=options
    )
    result.load_time_ns = time.perf_counter_ns() - t0
    result.providers_active = list(sess.get_providers())
    result.session_options = {
        "intra_op_num_threads": so.intra_op_num_threads,
        "inter_op_num_threads": so.inter_op_num_threads,
        "graph_optimization_level": str(so.graph_optimization_level).rsplit(".", 1)[-1],
        "execution_mode": str(so.execution_mode).rsplit(".", 1)[-1],
        "provider_options": sess.get_provider_options(),
    }

    result.stage = "inputs"
    rng = np.random.default_rng(spec.seed)
    feeds = {i.name: feed_value(i, make_array(i, rng)) for i in spec.inputs}
    output_names = [o.name for o in sess.get_outputs()]
    run: Any = sess.run
    pre: Preprocessed | None = None
    if spec.preprocess:
        target = image_input(spec.inputs)
        step = PREPROCESSORS[spec.preprocess](target.shape, spec.seed)
        run = pre = Preprocessed(sess.run, step, target.name)

    result.stage = "warmup"
    progress.stage("warmup")
    w_starts, w_ends = timing_loop(run, output_names, feeds, spec.warmup)
    if spec.warmup:
        result.phases["warmup"] = [w_starts[0], w_ends[-1]]
    result.warmup_iterations = spec.warmup

    result.stage = "measure"
    progress.stage("measure")
    # A collection in the middle of the loop would be charged to one unlucky iteration.
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        if spec.duration_s is not None:
            m_starts, m_ends = timing_loop_for(run, output_names, feeds, int(spec.duration_s * 1e9))
        else:
            m_starts, m_ends = timing_loop(run, output_names, feeds, spec.iterations or 0)
    finally:
        if gc_was_enabled:
            gc.enable()
    if m_starts:
        result.phases["measured"] = [m_starts[0], m_ends[-1]]
    result.measured_iterations = len(m_starts)
    pre_ns = np.frombuffer(pre.times, np.int64).copy() if pre is not None else None
    write_table(
        bundle_dir / INFERENCE_ITERS.path,
        iters_table(w_starts, w_ends, m_starts, m_ends, pre_ns),
    )
    del sess

    if spec.profile:
        result.stage = "profile"
        progress.stage("profile")
        _profile_pass(spec, bundle_dir, result, feeds, output_names, ort)


def _profile_pass(
    spec: RunSpec,
    bundle_dir: Path,
    result: WorkerResult,
    feeds: dict[str, Any],
    output_names: list[str],
    ort: Any,
) -> None:
    names, options = _providers(spec)
    profile_dir = bundle_dir / PROFILE_DIR
    profile_dir.mkdir(parents=True, exist_ok=True)
    so = _session_options(spec, ort)
    so.enable_profiling = True
    so.profile_file_prefix = str(profile_dir / "ort_profile")
    optimized = bundle_dir / OPTIMIZED_MODEL
    optimized.parent.mkdir(parents=True, exist_ok=True)
    so.optimized_model_filepath = str(optimized)
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", OPTIMIZED_WEIGHTS
    )
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    try:
        sess = ort.InferenceSession(
            spec.model_path, sess_options=so, providers=names, provider_options=options
        )
    except Exception as exc:
        # Some providers cannot serialise their compiled graph; profile without it.
        result.failures.append({"stage": "save_optimized_model", "error": _one_line(exc)})
        optimized.unlink(missing_ok=True)
        (optimized.parent / OPTIMIZED_WEIGHTS).unlink(missing_ok=True)
        so = _session_options(spec, ort)
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_dir / "ort_profile")
        sess = ort.InferenceSession(
            spec.model_path, sess_options=so, providers=names, provider_options=options
        )
    if optimized.is_file():
        result.optimized_model = OPTIMIZED_MODEL
    runs = spec.profile_warmup + spec.profile_iterations
    starts, ends = timing_loop(sess.run, output_names, feeds, runs)
    path = Path(sess.end_profiling())
    result.phases["profile"] = [starts[0], ends[-1]]
    result.profile_runs = runs
    result.profile_wall_ns = [e - s for s, e in zip(starts, ends, strict=True)]
    del sess
    result.profile_file = os.path.relpath(path.resolve(), bundle_dir.resolve())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aaco.runners.ort BUNDLE_DIR", file=sys.stderr)
        return 2
    result = run_worker(Path(args[0]))
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
