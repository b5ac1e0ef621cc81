"""The ONNX Runtime workload, run by the worker harness (:mod:`aaco.runners.harness`).

``prepare`` builds session A (no profiling) and the inputs; the harness times its
``session.run`` calls. ``profiled`` builds session B (``enable_profiling``, same options,
optimized graph saved) for the profiled pass, so profiler overhead never touches the
latency statistics. Writes the raw ORT profile and the optimized graph into the bundle's
staging folder; its own result fields (``WorkerResult.extra``): ``providers_requested``,
``providers_active``, ``session_options``, ``profile_file``, ``optimized_model``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from aaco.runners.harness import Profiled, Workload, one_line
from aaco.runners.inputs import feed_value, make_array
from aaco.runners.preprocess import PREPROCESSORS, Preprocessed, image_input
from aaco.runners.spec import OPTIMIZED_MODEL, OPTIMIZED_WEIGHTS, PROFILE_DIR, RunSpec

__all__ = ["OrtWorkload"]

_OPT_LEVEL_NAMES = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}


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
    if b.enable_mem_pattern is not None:
        so.enable_mem_pattern = b.enable_mem_pattern
    if b.enable_cpu_mem_arena is not None:
        so.enable_cpu_mem_arena = b.enable_cpu_mem_arena
    so.log_severity_level = 3  # errors only: warnings would flood the worker log
    return so


def _bound_run(sess: Any, spec: RunSpec, output_names: list[str], feeds: dict[str, Any]) -> Any:
    """``session.run`` through IO binding: the inputs bound once, the outputs to the
    provider's device (CUDA) or to CPU memory; each call runs with the binding."""
    binding = sess.io_binding()
    for name, value in feeds.items():
        if isinstance(value, np.ndarray):
            binding.bind_cpu_input(name, value)
        else:  # an OrtValue (bfloat16, float8 bit patterns)
            binding.bind_ortvalue_input(name, value)
    device = "cuda" if spec.backend.provider == "CUDAExecutionProvider" else "cpu"
    for name in output_names:
        binding.bind_output(name, device)

    def run(_names: Any = None, _feeds: Any = None) -> Any:
        sess.run_with_iobinding(binding)
        return binding

    return run


def _providers(spec: RunSpec) -> tuple[list[str], list[dict[str, Any]]]:
    names = [spec.backend.provider, *spec.backend.fallback_providers]
    options: list[dict[str, Any]] = [
        {k: str(v) for k, v in spec.backend.provider_options.items()}
    ] + [{} for _ in spec.backend.fallback_providers]
    return names, options


def _one_line(exc: BaseException) -> str:
    first = one_line(exc, limit=None)
    # ORT prefixes messages with "[ONNXRuntimeError] : 10 : INVALID_GRAPH : "; keep the reason.
    if first.startswith("[ONNXRuntimeError]"):
        parts = first.split(" : ", 3)
        first = parts[-1] if len(parts) == 4 else first
    return first[:400]


class OrtWorkload(Workload):
    """One ``InferenceSession.run`` per iteration, on the spec's backend and inputs."""

    def __init__(self, spec: Any, ctx: Any) -> None:
        super().__init__(spec, ctx)
        import onnxruntime as ort

        self.ort = ort
        self.run_spec = RunSpec.from_json(spec)
        self.sess: Any = None
        self.feeds: dict[str, Any] = {}
        self.output_names: list[str] = []
        self.pre: Preprocessed | None = None
        self.purpose = "measure"

    def prepare(self, purpose: str) -> Callable[[], Any]:
        spec, ort, result = self.run_spec, self.ort, self.ctx.result
        names, options = _providers(spec)
        result.extra["providers_requested"] = names
        self.ctx.stage("load")
        so = _session_options(spec, ort)
        self.purpose = purpose
        t0 = time.perf_counter_ns()
        sess = ort.InferenceSession(
            spec.model_path, sess_options=so, providers=names, provider_options=options
        )
        load_time_ns = time.perf_counter_ns() - t0
        result.extra["providers_active"] = list(sess.get_providers())
        if purpose == "capture":
            rng = np.random.default_rng(spec.seed)
            feeds = {i.name: make_array(i, rng) for i in spec.inputs}
            return functools.partial(sess.run, [o.name for o in sess.get_outputs()], feeds)
        result.load_time_ns = load_time_ns
        result.extra["session_options"] = {
            "intra_op_num_threads": so.intra_op_num_threads,
            "inter_op_num_threads": so.inter_op_num_threads,
            "graph_optimization_level": str(so.graph_optimization_level).rsplit(".", 1)[-1],
            "execution_mode": str(so.execution_mode).rsplit(".", 1)[-1],
            "provider_options": sess.get_provider_options(),
            "enable_mem_pattern": bool(so.enable_mem_pattern),
            "enable_cpu_mem_arena": bool(so.enable_cpu_mem_arena),
            # a preprocessing step feeds new inputs each iteration: no binding then
            "io_binding": spec.backend.io_binding and not spec.preprocess,
        }
        self.ctx.stage("inputs", announce=False)
        rng = np.random.default_rng(spec.seed)
        self.feeds = {i.name: feed_value(i, make_array(i, rng)) for i in spec.inputs}
        self.output_names = [o.name for o in sess.get_outputs()]
        self.sess = sess
        run: Callable[..., Any] = sess.run
        if spec.backend.io_binding and not spec.preprocess:
            run = _bound_run(sess, spec, self.output_names, self.feeds)
        if spec.preprocess:
            target = image_input(spec.inputs)
            step = PREPROCESSORS[spec.preprocess](target.shape, spec.seed)
            run = self.pre = Preprocessed(sess.run, step, target.name)
        return functools.partial(run, self.output_names, self.feeds)

    def preprocess_ns(self) -> np.ndarray | None:
        return np.frombuffer(self.pre.times, np.int64).copy() if self.pre is not None else None

    def release(self) -> None:
        # The measured session goes before the profiled one is built, so the worker's peak
        # memory is one session's (before #16 a bound method kept it alive: two sessions)
        self.sess = None
        self.pre = None  # its times are in the iterations table by now

    @contextmanager
    def profiled(self) -> Iterator[Profiled | None]:
        spec, ort, result = self.run_spec, self.ort, self.ctx.result
        bundle_dir = self.ctx.bundle_dir
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
            result.extra["optimized_model"] = OPTIMIZED_MODEL
        yield Profiled(functools.partial(sess.run, self.output_names, self.feeds))
        path = Path(sess.end_profiling())
        del sess
        result.extra["profile_file"] = os.path.relpath(path.resolve(), bundle_dir.resolve())

    def describe_error(self, exc: BaseException) -> str:
        error = _one_line(exc)
        if self.ctx.result.stage == "load" and self.purpose == "measure":
            return f"onnxruntime rejected the model: {error}"
        return error
