"""``aaco run`` as a library call: resolve the model, measure it in a worker, write the bundle.

Two frameworks: ONNX Runtime (the default; worker :mod:`aaco.runners.ort`) and PyTorch
(``framework="torch"``; worker :mod:`aaco.runners.torch`, its torch.profiler trace imported
with :func:`aaco.ingest.ingest_traces`). ``profile_mode="kernels"`` on a ROCm/MIGraphX
backend re-runs the profiled workload under rocprofv3 (:mod:`aaco.runners.rocprof`) and
imports the kernel trace the same way.

>>> from aaco.run import RunOptions, run_model          # doctest: +SKIP
>>> session = run_model(RunOptions(model="mlp", iterations=50))   # doctest: +SKIP
>>> session.summary["latency_ms"]["p50"]                # doctest: +SKIP
>>> run_model(RunOptions(model="mymodels:resnet", framework="torch"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from aaco import __version__
from aaco.config import BackendEntry, ModelEntry, Registry, load_registry
from aaco.diagnose import write_reports
from aaco.errors import InputError, UsageError, attach_warning
from aaco.runners.inputs import InputSpec, UnresolvedShapes, batch_of, resolve_inputs
from aaco.runners.launch import LaunchOutcome, launch_worker
from aaco.runners.spec import OPTIMIZED_WEIGHTS, SPEC_FILE, RunSpec, TorchRunSpec
from aaco.session.bundle import (
    FORMAT_VERSION,
    LATEST,
    STATUS_FAILED,
    STATUS_RUNNING,
    BundleWriter,
    Session,
    read_json,
    utc_now_iso,
)

DEFAULT_WARMUP = 10
DEFAULT_ITERATIONS = 100
DEFAULT_PROFILE_WARMUP = 2
DEFAULT_PROFILE_ITERATIONS = 10
DEFAULT_SAMPLE_HZ = 10.0
DEFAULT_TIMEOUT_S = 3600.0
FRAMEWORKS = ("onnxruntime", "torch")
PROFILE_MODES = ("ops", "kernels")
TORCH_MISSING = "PyTorch is not installed; install it with pip install 'aaco[torch]'"
_TORCH_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


@dataclass
class RunOptions:
    """The options of ``aaco run``; None means "take the registry's value, else the default"."""

    model: str
    # None: ONNX Runtime's cpu backend; with framework torch, --device chooses instead
    backend: str | None = None
    batch: int | None = None
    shapes: dict[str, list[int]] = field(default_factory=dict)
    # --input NAME=NUMBER|FILE.npy: a constant fill, or an array file to feed
    values: dict[str, str] = field(default_factory=dict)
    warmup: int | None = None
    iterations: int | None = None
    duration_s: float | None = None
    threads: int | None = None
    tag: str | None = None
    output: Path = Path("sessions")
    profile: bool = True
    profile_iterations: int = DEFAULT_PROFILE_ITERATIONS
    telemetry: bool = True
    sample_hz: float = DEFAULT_SAMPLE_HZ
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    seed: int = 0
    int_range: tuple[int, int] | None = None
    config_dir: Path | None = None
    argv: Sequence[str] | None = None
    framework: str = "onnxruntime"
    device: str | None = None  # torch only: cpu, cuda, cuda:N (default cpu)
    compile: bool = False  # torch only: torch.compile the module
    profile_mode: str = "ops"  # ops | kernels (GPU kernel trace)
    preprocess: str | None = None  # a host-side step inside each iteration (runners.preprocess)
    # a CPU run without a stored calibration measures a quick one after the worker is done;
    # None: unless AACO_AUTO_CALIBRATE=0 (collectors.calibrate.first_run_calibration)
    auto_calibrate: bool | None = None


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    path: Path
    source: str  # builtin | file
    entry: ModelEntry | None


def resolve_model(spec: str, registry: Registry) -> ResolvedModel:
    """A registry name or a path to an ONNX file; builds built-in models on first use."""
    p = Path(spec).expanduser()
    looks_like_path = spec.endswith(".onnx") or "/" in spec or p.is_file()
    if looks_like_path and spec not in registry.models:
        if not p.exists():
            raise InputError(f"model file not found: {spec}")
        if p.is_dir():
            raise InputError(f"{spec}: is a directory, expected an .onnx file")
        return ResolvedModel(name=p.stem, path=p.resolve(), source="file", entry=None)
    entry = registry.model(spec)
    if entry.builder is not None:
        from aaco.models.registry import build_cached

        params = dict(entry.params)
        if entry.dtype is not None and "dtype" not in params:
            params["dtype"] = entry.dtype
        path = build_cached(entry.builder, params)
        return ResolvedModel(name=entry.name, path=path, source="builtin", entry=entry)
    assert entry.path is not None
    if not entry.path.exists():
        raise InputError(f"model {spec!r}: file not found: {entry.path} (from {entry.origin})")
    return ResolvedModel(name=entry.name, path=entry.path.resolve(), source="registry", entry=entry)


def check_provider(backend: BackendEntry) -> tuple[list[str], list[str]]:
    """(available providers, fallbacks kept); error when the backend's provider is missing."""
    import onnxruntime as ort

    available = list(ort.get_available_providers())
    if backend.provider not in available:
        raise UsageError(
            f"backend {backend.name!r} needs {backend.provider}, which this onnxruntime "
            f"{ort.__version__} does not provide; available: {', '.join(available)}"
        )
    fallbacks = [p for p in backend.fallback_providers if p in available and p != backend.provider]
    return available, fallbacks


MAX_SAMPLE_HZ = 1000.0


def _positive(value: float | None, option: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{option} must be a finite number > 0, got {value:g}")


def _validate(opts: RunOptions) -> None:
    """Reject impossible options before anything is built or started."""
    if opts.iterations is not None and opts.duration_s is not None:
        raise UsageError("give --iterations or --duration, not both")
    if opts.iterations is not None and opts.iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {opts.iterations}")
    _positive(opts.duration_s, "--duration")
    _positive(opts.timeout_s, "--timeout")
    if opts.warmup is not None and opts.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {opts.warmup}")
    if opts.threads is not None and opts.threads < 0:
        raise UsageError(f"--threads must be >= 0 (0 = onnxruntime default), got {opts.threads}")
    if opts.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {opts.seed}")
    if opts.telemetry:
        _positive(opts.sample_hz, "--sample-hz")
        if opts.sample_hz > MAX_SAMPLE_HZ:
            # Past this the sampler costs more CPU than it is worth and disturbs the run.
            raise UsageError(f"--sample-hz must be <= {MAX_SAMPLE_HZ:g}, got {opts.sample_hz:g}")
    if opts.profile and opts.profile_iterations < 1:
        raise UsageError("--profile-iterations must be >= 1")
    if opts.framework not in FRAMEWORKS:
        raise UsageError(f"unknown --framework {opts.framework!r}; valid: {', '.join(FRAMEWORKS)}")
    if opts.profile_mode not in PROFILE_MODES:
        raise UsageError(
            f"unknown --profile {opts.profile_mode!r}; valid: {', '.join(PROFILE_MODES)}"
        )
    if opts.profile_mode == "kernels" and not opts.profile:
        raise UsageError("--profile kernels and --no-profile contradict each other")
    if opts.batch is not None and opts.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {opts.batch}")
    if opts.preprocess is not None:
        from aaco.runners.preprocess import PREPROCESSORS

        if opts.preprocess not in ("none", *PREPROCESSORS):
            valid = ", ".join(["none", *PREPROCESSORS])
            raise UsageError(f"unknown --preprocess {opts.preprocess!r}; valid: {valid}")
        if opts.framework == "torch" and opts.preprocess != "none":
            raise UsageError("--preprocess applies to --framework onnxruntime")
    if opts.framework == "torch":
        if opts.backend is not None:
            raise UsageError(
                "--backend chooses an ONNX Runtime provider; with --framework torch use --device"
            )
        for given, option in (
            (opts.shapes, "--shape"),
            (opts.int_range, "--int-range"),
            (opts.values, "--input"),
        ):
            if given:
                raise UsageError(
                    f"{option} does not apply to --framework torch: the model function "
                    "returns its example inputs"
                )
    else:
        if opts.device is not None:
            raise UsageError(
                "--device applies to --framework torch; ONNX Runtime picks its device "
                "with --backend"
            )
        if opts.compile:
            raise UsageError("--compile applies to --framework torch")
    if (
        opts.duration_s is not None
        and opts.timeout_s is not None
        and opts.duration_s >= opts.timeout_s
    ):
        # The worker would be killed before it could hand over a single measurement.
        raise UsageError(
            f"--duration {opts.duration_s:g} s must be shorter than --timeout {opts.timeout_s:g} s"
        )


def run_model(opts: RunOptions) -> Session:
    """Measure a model and write a bundle; returns the published bundle, whatever its status.

    Usage errors (unknown model or backend, bad shapes, unreadable files) raise before any
    bundle exists. Once the bundle exists, a failure is recorded in it, not raised.
    """
    _validate(opts)
    if opts.framework == "torch":
        return _run_torch(opts)
    registry = load_registry(opts.config_dir)
    backend = registry.backend(opts.backend or "cpu")
    available, fallbacks = check_provider(backend)
    rocprofv3 = None
    if opts.profile_mode == "kernels":
        from aaco.runners.rocprof import check_kernel_capture

        rocprofv3 = check_kernel_capture(backend.provider)
    backend = dataclasses.replace(backend, fallback_providers=tuple(fallbacks))
    model = resolve_model(opts.model, registry)

    from aaco.analysis.graph import check_external_data, load_model_proto

    proto = load_model_proto(model.path)
    check_external_data(proto, model.path)
    entry = model.entry
    try:
        inputs = resolve_inputs(
            proto,
            user_shapes=opts.shapes,
            registry_shapes=entry.input_shapes if entry else None,
            batch=opts.batch,
            int_range=opts.int_range,
            values=opts.values,
        )
    except UnresolvedShapes as exc:
        raise UsageError(_open_shapes_hint(exc, model, proto, opts)) from None
    warmup = (
        opts.warmup
        if opts.warmup is not None
        else (entry.warmup if entry and entry.warmup is not None else DEFAULT_WARMUP)
    )
    iterations: int | None = None
    if opts.duration_s is None:
        iterations = opts.iterations or (
            entry.iterations if entry and entry.iterations else DEFAULT_ITERATIONS
        )
    preprocess = opts.preprocess or (entry.preprocess if entry else None)
    if preprocess == "none":
        preprocess = None
    if preprocess is not None:
        from aaco.runners.preprocess import image_input

        image_input(inputs)  # a UsageError, before any bundle exists, when it cannot apply
    opts = dataclasses.replace(opts, preprocess=preprocess)
    if opts.batch is not None:
        # --batch was applied (resolve_inputs refuses it otherwise); it is the items per
        # iteration only when every input carries it as its leading dimension.
        leading = {i.shape[0] for i in inputs if i.shape}
        batch = opts.batch if leading == {opts.batch} else None
    else:
        batch = batch_of(inputs)

    writer = BundleWriter(opts.output)
    try:
        return _run_into(
            writer,
            opts,
            model,
            backend,
            available,
            proto,
            inputs,
            warmup,
            iterations,
            batch,
            rocprofv3,
        )
    except BaseException:
        # Only AACO's own bug or Ctrl-C gets here; keep the bundle as a record, flagged failed.
        _salvage(writer, sys.exc_info()[1])
        raise


def _open_shapes_hint(
    exc: UnresolvedShapes, model: ResolvedModel, proto: Any, opts: RunOptions
) -> str:
    """The open-dimension error with a command that runs: candidate shapes are tried on the
    model (:mod:`aaco.runners.probe`) and the first that ran goes into the command line."""
    from aaco.runners.probe import hint_command, probe_shapes

    found = probe_shapes(
        model.path,
        proto,
        exc,
        int_range=opts.int_range,
        values=opts.values,
        seed=opts.seed,
        timeout_s=min(opts.timeout_s or 120.0, 120.0),
    )
    message = str(exc).split("; give ", 1)[0]
    if found.shapes is not None:
        open_inputs = dict.fromkeys(od.input for od in exc.open_dims)
        shapes = {name: found.shapes[name] for name in open_inputs}
        argv = list(opts.argv) if opts.argv else ["aaco", "run", "--model", opts.model]
        return f"{message}; it runs with: {hint_command(argv, shapes)}"
    why = found.errors[0] if found.errors else "no candidate could be tried"
    return (
        f"{exc!s} (none of the {found.tried} shapes AACO tried ran; the first failed with: {why})"
    )


def _base_meta(
    writer: BundleWriter,
    opts: RunOptions,
    model: ResolvedModel,
    backend: BackendEntry,
    inputs: Sequence[InputSpec],
    warmup: int,
    iterations: int | None,
    batch: int | None,
) -> dict[str, Any]:
    return _meta(
        writer,
        opts,
        {"name": model.name, "path": str(model.path), "source": model.source},
        {"name": backend.name, "provider": backend.provider},
        [i.to_json() for i in inputs],
        warmup,
        iterations,
        batch,
    )


def _meta(
    writer: BundleWriter,
    opts: RunOptions,
    model: dict[str, Any],
    backend: dict[str, Any],
    inputs: list[dict[str, Any]],
    warmup: int,
    iterations: int | None,
    batch: int | None,
) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "aaco_version": __version__,
        "session_id": writer.session_id,
        "created_utc": utc_now_iso(),
        "finished_utc": None,
        "status": STATUS_RUNNING,
        "error": None,
        "tag": opts.tag,
        "command_line": list(opts.argv if opts.argv is not None else sys.argv),
        "model": model,
        "backend": backend,
        "run": {
            "framework": opts.framework,
            "batch": batch,
            "batch_source": None if batch is None else ("--batch" if opts.batch else "inputs"),
            "inputs": inputs,
            "warmup": warmup,
            "iterations": iterations,
            "duration_s": opts.duration_s,
            "threads": opts.threads,
            "seed": opts.seed,
            "preprocess": opts.preprocess,
            "profile": opts.profile,
            "profile_mode": opts.profile_mode if opts.profile else None,
            "profile_warmup": max(DEFAULT_PROFILE_WARMUP, warmup) if opts.profile else 0,
            "profile_iterations": opts.profile_iterations if opts.profile else 0,
            "telemetry": opts.telemetry,
            "sample_hz": opts.sample_hz if opts.telemetry else None,
            "timeout_s": opts.timeout_s,
        },
        "clock": {
            "name": "perf_counter_ns (CLOCK_MONOTONIC)",
            "epoch_offset_ns": time.time_ns() - time.perf_counter_ns(),
        },
        "phases": {},
        "failures": [],
    }


def _run_into(
    writer: BundleWriter,
    opts: RunOptions,
    model: ResolvedModel,
    backend: BackendEntry,
    available: list[str],
    proto: Any,
    inputs: list[InputSpec],
    warmup: int,
    iterations: int | None,
    batch: int | None,
    rocprofv3: str | None = None,
) -> Session:
    meta = _base_meta(writer, opts, model, backend, inputs, warmup, iterations, batch)
    # The profiled session is new and cold: warm it as long as the measured one was warmed.
    profile_warmup = int(meta["run"]["profile_warmup"])
    failures: list[dict[str, str]] = meta["failures"]
    writer.write_json("session.json", meta)

    attempt = _Attempt(failures)
    _write_env(writer, meta, attempt, available)
    attempt("graph", _write_graph, writer, model, proto, inputs)

    spec = RunSpec(
        model_path=str(model.path),
        inputs=tuple(inputs),
        backend=backend,
        warmup=warmup,
        iterations=iterations,
        duration_s=opts.duration_s,
        threads=opts.threads,
        seed=opts.seed,
        profile=opts.profile,
        profile_warmup=profile_warmup,
        profile_iterations=opts.profile_iterations,
        bundle_dir=str(writer.path),
        preprocess=opts.preprocess,
    )
    writer.write_json(SPEC_FILE, spec.to_json())
    outcome = launch_worker(
        writer.path,
        "aaco.runners.ort",
        timeout_s=opts.timeout_s,
        telemetry_hz=opts.sample_hz if opts.telemetry else None,
    )
    _finish(writer, meta, outcome, spec, proto, batch, attempt)
    if rocprofv3 is not None and outcome.status == "completed":
        _capture_kernels(writer, meta, opts, rocprofv3, attempt)
    _diagnose(writer, meta, attempt, opts.auto_calibrate)
    writer.publish()
    write_reports(writer.final_path)
    session = Session.load(writer.final_path)
    return session


class _Attempt:
    """Run a side product; on failure record ``{stage, error}`` and carry on (None)."""

    def __init__(self, failures: list[dict[str, str]]) -> None:
        self.failures = failures

    def __call__(self, stage: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # a side product failed: record it, keep the run
            self.failures.append({"stage": stage, "error": f"{type(exc).__name__}: {exc}"[:400]})
            return None


def _write_env(
    writer: BundleWriter, meta: dict[str, Any], attempt: _Attempt, available: list[str]
) -> None:
    """env.json and the session's fingerprint (a failure is recorded, not raised)."""
    from aaco.collectors.environment import capture_environment

    env = attempt("environment", capture_environment, meta["command_line"], available)
    if env is not None:
        writer.write_json("env.json", env)
        meta["fingerprint"] = env.get("fingerprint")


def _diagnose(
    writer: BundleWriter,
    meta: dict[str, Any],
    attempt: _Attempt,
    auto_calibrate: bool | None = None,
) -> None:
    """Roofline, bottleneck verdict and recommendations, written before the bundle is
    published (a failure is recorded, the run is kept); then the aaco process's own peak RSS
    (``aaco_process``). The worker has exited by now, so a first-run calibration
    (``auto_calibrate``, in a process of its own) never measures beside the workload."""
    from aaco.diagnose import diagnose_bundle
    from aaco.runners.rss import own_peak_rss_bytes

    writer.write_json("session.json", meta)
    completed = meta.get("status") == "completed"
    diagnose = functools.partial(diagnose_bundle, auto_calibrate=auto_calibrate)
    if completed and attempt("diagnose", diagnose, writer.path) is not None:
        # the diagnosis records its own stage failures in session.json
        meta["failures"] = read_json(writer.path / "session.json").get("failures", [])
    # After the last analysis: the reports rendered from the bundle next are not counted.
    meta["aaco_process"] = {"max_rss_bytes": own_peak_rss_bytes()}
    writer.write_json("session.json", meta)


def _write_graph(
    writer: BundleWriter, model: ResolvedModel, proto: Any, inputs: Sequence[InputSpec]
) -> None:
    from aaco.analysis.graph import external_data_files, extract_graph, file_sha256

    info = extract_graph(proto, {i.name: list(i.shape) for i in inputs}, graph_label="original")
    meta = dict(info.meta)
    meta["path"] = str(model.path)
    meta["name"] = model.name
    meta["source"] = model.source
    meta["file_bytes"] = model.path.stat().st_size
    meta["sha256"] = file_sha256(model.path)
    meta["external_data"] = [
        {"file": f.name, "bytes": f.stat().st_size, "sha256": file_sha256(f)}
        for f in external_data_files(proto, model.path)
    ]
    if model.entry is not None and model.entry.builder is not None:
        meta["builder"] = {"name": model.entry.builder, "params": model.entry.params}
    writer.write_json("model/model_meta.json", meta)
    writer.write_table("graph_nodes", info.nodes)
    writer.write_table("graph_edges", info.edges)


def _add_optimized_graph(
    writer: BundleWriter, proto: Any, spec: RunSpec
) -> dict[str, list[str] | None]:
    """Add the graph ORT executed to graph_nodes, each node mapped to the original nodes it
    stands for; write its metadata and the original nodes ORT eliminated."""
    import pyarrow.parquet as pq

    from aaco.analysis.graph import (
        eliminated_original_nodes,
        extract_graph,
        load_model_proto,
        map_optimized_to_original,
    )

    optimized = load_model_proto(writer.path / "model" / "optimized.onnx")
    mapping = map_optimized_to_original(proto, optimized)
    info = extract_graph(
        optimized,
        {i.name: list(i.shape) for i in spec.inputs},
        graph_label="optimized",
        original_map=mapping,
        # ORT saves surviving nodes without names but profiles them as <op>_<original index>
        reference=proto,
    )
    meta = dict(info.meta)
    meta["eliminated_original_nodes"] = eliminated_original_nodes(proto, optimized)
    meta["unmapped_nodes"] = sorted(k for k, v in mapping.items() if v is None)
    meta["weights_kept"] = False  # see _finish
    writer.write_json("model/optimized_meta.json", meta)
    nodes_file = writer.path / "model" / "graph_nodes.parquet"
    nodes = info.nodes
    if nodes_file.is_file():
        nodes = pa.concat_tables([pq.read_table(nodes_file), info.nodes])
    writer.write_table("graph_nodes", nodes)
    return mapping


def _finish(
    writer: BundleWriter,
    meta: dict[str, Any],
    outcome: LaunchOutcome,
    spec: RunSpec,
    proto: Any,
    batch: int | None,
    attempt: Any,
) -> None:
    from aaco.analysis.ops import profile_coverage

    result = outcome.result
    summary = _finish_common(writer, meta, outcome, batch)
    if result is not None:
        writer.write_json(
            "runtime/ort_config.json",
            {
                "backend": spec.backend.to_json(),
                "providers_requested": result.providers_requested,
                "providers_active": result.providers_active,
                "session_options": result.session_options,
                "model_load_ms": result.load_time_ns / 1e6 if result.load_time_ns else None,
                "optimized_model": result.optimized_model,
            },
        )
        meta["backend"]["providers_active"] = result.providers_active

    mapping = None
    if result is not None and result.optimized_model:
        mapping = attempt("optimized_graph", _add_optimized_graph, writer, proto, spec)
    # The optimized graph's weights are a copy of the model's (hundreds of MB for an LLM):
    # the bundle keeps the graph and drops them, whether or not the run got this far.
    (writer.path / "model" / OPTIMIZED_WEIGHTS).unlink(missing_ok=True)
    if result is not None and result.profile_file:
        from aaco.importers.ort_profile import parse_ort_profile

        profile = attempt(
            "profile_parse",
            parse_ort_profile,
            writer.path / result.profile_file,
            spec.profile_warmup,
            mapping,
        )
        if profile is not None:
            runs = _with_wall_times(profile.runs, result, spec.profile_warmup)
            writer.write_table("ops", profile.ops)
            writer.write_table("ort_runs", runs)
            lat = summary.get("latency_ms") or {}
            summary["profile"] = profile_coverage(
                profile.ops, runs, lat.get("mean"), lat.get("p50")
            )
            summary["profile"]["session_events_ms"] = {
                k: v / 1e6 for k, v in profile.session_events.items()
            }
            if profile.kernels.num_rows or profile.memcpy.num_rows:
                # a CUDA/ROCm EP build with GPU profiling: the kernels' durations are the
                # device time the roofline sets against the GPU's ceilings
                from aaco.ingest import ingest_profile_kernels

                attempt(
                    "profile_kernels",
                    ingest_profile_kernels,
                    writer.path,
                    profile.kernels,
                    profile.memcpy,
                    profile.ops,
                )
    _finish_summary(writer, meta, outcome, summary)


def _finish_common(
    writer: BundleWriter, meta: dict[str, Any], outcome: LaunchOutcome, batch: int | None
) -> dict[str, Any]:
    """What every worker's end records: status, phases, telemetry, latency statistics."""
    from aaco.analysis.stats import summarize_iterations

    result = outcome.result
    meta["status"] = outcome.status
    meta["error"] = (
        {"message": outcome.error, "stage": outcome.stage, "returncode": outcome.returncode}
        if outcome.error
        else None
    )
    meta["finished_utc"] = utc_now_iso()
    meta["worker"] = {
        "wall_s": outcome.wall_ns / 1e9,
        "returncode": outcome.returncode,
        **(outcome.usage or {}),
    }
    if result is not None:
        meta["phases"] = result.phases
        meta["failures"].extend(result.failures)
    if outcome.telemetry is not None:
        writer.write_table("system_events", outcome.telemetry)
        meta["telemetry"] = outcome.telemetry_info

    summary: dict[str, Any] = {"status": outcome.status}
    if outcome.usage is not None:
        summary["worker"] = {
            "max_rss_bytes": outcome.usage["max_rss_bytes"],
            "max_rss_source": outcome.usage["max_rss_source"],
            "cpu_user_s": outcome.usage["cpu_user_s"],
            "cpu_system_s": outcome.usage["cpu_system_s"],
            "wall_s": outcome.wall_ns / 1e9,
        }
    else:
        summary["worker"] = None
    iters_file = writer.path / "metrics" / "inference_iters.parquet"
    if iters_file.is_file():
        import pyarrow.parquet as pq

        summary.update(summarize_iterations(pq.read_table(iters_file), batch))
    else:
        summary.update(
            {"latency_ms": None, "throughput": None, "warmup": None, "noise": None, "warnings": []}
        )
    return summary


def _finish_summary(
    writer: BundleWriter, meta: dict[str, Any], outcome: LaunchOutcome, summary: dict[str, Any]
) -> None:
    from aaco.analysis.telemetry import summarize_system

    if "profile" not in summary:
        summary["profile"] = None
    if outcome.telemetry is not None and outcome.telemetry.num_rows:
        window = meta["phases"].get("measured")
        summary["telemetry"] = summarize_system(
            outcome.telemetry, tuple(window) if window else None
        )
    else:
        summary["telemetry"] = None
    writer.write_json("metrics/inference_summary.json", summary)


def _graph_node_count(writer: BundleWriter) -> int | None:
    """Node count of the original graph (for KAR), from model/model_meta.json."""
    f = writer.path / "model" / "model_meta.json"
    if not f.is_file():
        return None
    count = read_json(f).get("node_count")
    return count if isinstance(count, int) else None


def _ingest(bundle: Path, paths: list[Path], graph_node_count: int | None) -> dict[str, Any]:
    from aaco.ingest import ingest_traces

    return ingest_traces(bundle, paths, graph_node_count=graph_node_count)


def _capture_kernels(
    writer: BundleWriter, meta: dict[str, Any], opts: RunOptions, rocprofv3: str, attempt: Any
) -> None:
    """Re-run the profiled workload under rocprofv3 and import its kernel trace; a failure
    is recorded (``kernel_capture``) and leaves the measured run as it is."""
    from aaco.runners.rocprof import capture_kernels

    capture = capture_kernels(writer.path, rocprofv3, opts.timeout_s)
    meta["kernel_capture"] = capture.to_json()
    if capture.status != "completed":
        meta["failures"].append(
            {"stage": "kernel_capture", "error": f"{capture.status}: {capture.error}"[:400]}
        )
        return
    record = attempt(
        "kernel_ingest",
        _ingest,
        writer.path,
        [Path(capture.output_dir)],
        _graph_node_count(writer),
    )
    if record is not None:
        meta["kernel_capture"]["rows"] = record.get("rows")


@dataclass(frozen=True)
class TorchModelRef:
    """A ``--model`` for ``--framework torch``: what the worker loads and how."""

    spec: str  # as given
    target: str  # module name, absolute .py path + ":function", or absolute .pt2 path
    kind: str  # function | export
    name: str


def resolve_torch_model(spec: str, cwd: Path | None = None) -> TorchModelRef:
    """Check a torch ``--model`` without importing torch or the user's code.

    ``module:function`` (found on ``sys.path`` or in ``cwd``), ``file.py:function`` or a
    ``.pt2`` file. Whether the function exists and what it returns is checked by the worker.
    """
    base = Path.cwd() if cwd is None else cwd
    if spec.endswith(".pt2"):
        p = (base / Path(spec).expanduser()).resolve()
        if not p.is_file():
            raise InputError(f"model file not found: {spec}")
        return TorchModelRef(spec=spec, target=str(p), kind="export", name=p.stem)
    where, sep, func = spec.rpartition(":")
    if not sep or not where or not func.isidentifier():
        raise UsageError(
            f"--model {spec}: with --framework torch give module:function, "
            "file.py:function or a saved torch.export program (.pt2)"
        )
    if where.endswith(".py") or "/" in where:
        p = (base / Path(where).expanduser()).resolve()
        if not p.is_file():
            raise InputError(f"--model {spec}: file not found: {where}")
        return TorchModelRef(spec=spec, target=f"{p}:{func}", kind="function", name=func)
    saved = list(sys.path)
    sys.path.insert(0, str(base))
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        found = None
    finally:
        sys.path[:] = saved
    if found is None:
        raise InputError(f"--model {spec}: cannot import module {where!r}")
    return TorchModelRef(spec=spec, target=spec, kind="function", name=func)


def _run_torch(opts: RunOptions) -> Session:
    """``aaco run --framework torch``: checks before any bundle exists, then the worker."""
    if importlib.util.find_spec("torch") is None:
        raise UsageError(TORCH_MISSING)
    device = opts.device or "cpu"
    if not _TORCH_DEVICE.match(device):
        raise UsageError(f"--device {device}: expected cpu, cuda or cuda:N")
    if opts.profile_mode == "kernels" and device == "cpu":
        raise UsageError(
            "--profile kernels records GPU kernels; --device cpu runs none (use --device cuda, "
            "where torch.profiler records the kernels with CUPTI or roctracer)"
        )
    ref = resolve_torch_model(opts.model)
    if opts.batch is not None and ref.kind == "export":
        raise UsageError(
            "--batch does not apply to a saved torch.export program: its example inputs "
            "fix the shapes"
        )
    warmup = opts.warmup if opts.warmup is not None else DEFAULT_WARMUP
    iterations: int | None = None
    if opts.duration_s is None:
        iterations = opts.iterations or DEFAULT_ITERATIONS
    writer = BundleWriter(opts.output)
    try:
        return _run_torch_into(writer, opts, ref, device, warmup, iterations)
    except UsageError:
        # The user's model or device was at fault (found by the worker): no bundle.
        writer.discard()
        raise
    except BaseException:
        _salvage(writer, sys.exc_info()[1])
        raise


def _run_torch_into(
    writer: BundleWriter,
    opts: RunOptions,
    ref: TorchModelRef,
    device: str,
    warmup: int,
    iterations: int | None,
) -> Session:
    model_json = {"name": ref.name, "path": ref.target, "source": f"torch-{ref.kind}"}
    meta = _meta(
        writer,
        opts,
        model_json,
        {"name": "torch", "provider": device},
        [],
        warmup,
        iterations,
        None,
    )
    meta["run"]["device"] = device
    meta["run"]["compile"] = opts.compile
    meta["run"]["model_spec"] = ref.spec
    profile_warmup = int(meta["run"]["profile_warmup"])
    failures: list[dict[str, str]] = meta["failures"]
    writer.write_json("session.json", meta)

    attempt = _Attempt(failures)
    _write_env(writer, meta, attempt, [])
    spec = TorchRunSpec(
        model=ref.target,
        model_kind=ref.kind,
        device=device,
        compile=opts.compile,
        batch=opts.batch,
        warmup=warmup,
        iterations=iterations,
        duration_s=opts.duration_s,
        threads=opts.threads,
        seed=opts.seed,
        profile=opts.profile,
        profile_warmup=profile_warmup,
        profile_iterations=opts.profile_iterations,
        bundle_dir=str(writer.path),
        sys_path=(os.getcwd(),),
    )
    writer.write_json(SPEC_FILE, spec.to_json())
    outcome = launch_worker(
        writer.path,
        "aaco.runners.torch",
        timeout_s=opts.timeout_s,
        telemetry_hz=opts.sample_hz if opts.telemetry else None,
    )
    result = outcome.result
    if result is not None and result.stage == "load" and result.error:
        if result.error_type == "InputError":
            raise InputError(result.error)
        if result.error_type == "UsageError":
            raise UsageError(result.error)
    _finish_torch(writer, meta, outcome, spec, attempt)
    _diagnose(writer, meta, attempt, opts.auto_calibrate)
    writer.publish()
    write_reports(writer.final_path)
    session = Session.load(writer.final_path)
    return session


def _finish_torch(
    writer: BundleWriter,
    meta: dict[str, Any],
    outcome: LaunchOutcome,
    spec: TorchRunSpec,
    attempt: Any,
) -> None:
    from aaco.runners.spec import TORCH_TRACE

    result = outcome.result
    batch: int | None = None
    if result is not None:
        batch = result.batch
        if spec.batch is not None and batch != spec.batch:
            batch = None  # --batch was passed on, but the inputs do not all lead with it
        meta["run"]["inputs"] = result.inputs
        meta["run"]["batch"] = batch
        meta["run"]["batch_source"] = (
            None if batch is None else ("--batch" if spec.batch else "inputs")
        )
        meta["run"]["torch"] = result.framework_info
        compile_ms = result.compile_time_ns / 1e6 if result.compile_time_ns else None
        meta["run"]["compile_ms"] = compile_ms
        writer.write_json(
            "runtime/torch_config.json",
            {
                **result.framework_info,
                "model": spec.model,
                "model_kind": spec.model_kind,
                "model_load_ms": result.load_time_ns / 1e6 if result.load_time_ns else None,
                "compile_ms": compile_ms,
            },
        )
    summary = _finish_common(writer, meta, outcome, batch)
    if result is not None and result.trace_file:
        trace = writer.path / result.trace_file
        record = attempt("trace_ingest", _ingest, writer.path, [trace], None)
        summary["profile"] = {
            "source": "torch.profiler",
            "trace_file": TORCH_TRACE,
            "profiled_iterations": spec.profile_iterations,
            "rows": record.get("rows") if record else None,
            "events": record.get("events") if record else None,
        }
    _finish_summary(writer, meta, outcome, summary)


def _with_wall_times(runs: pa.Table, result: Any, skip: int) -> pa.Table:
    """Attach the worker's wall time of each profiled run, matched by order; left null when
    the profile's run count does not match the runs the worker made."""
    walls = list(result.profile_wall_ns)
    if len(walls) != result.profile_runs or runs.num_rows != len(walls) - skip:
        return runs
    idx = runs.schema.get_field_index("wall_ns")
    return runs.set_column(idx, "wall_ns", pa.array(walls[skip:], pa.int64()))


def _salvage(writer: BundleWriter, exc: BaseException | None) -> str | None:
    """Publish what exists, marked failed, after an unexpected error or an interrupt.

    The caller re-raises ``exc``, which stays what the user sees. When the bundle cannot be
    published, one line saying where its files are is attached to ``exc`` for the CLI to
    print (:func:`aaco.errors.attach_warning`) and returned; None when it was published.
    """
    try:
        session_file = writer.path / "session.json"
        meta = (
            read_json(session_file)
            if session_file.is_file()
            else {"format_version": FORMAT_VERSION, "session_id": writer.session_id}
        )
        interrupted = isinstance(exc, KeyboardInterrupt)
        reason = (
            "interrupted (Ctrl-C or SIGTERM)"
            if interrupted
            else f"internal error: {type(exc).__name__}: {exc}"
        )
        meta["status"] = STATUS_FAILED
        meta["error"] = {"message": reason, "stage": "aaco"}
        meta["finished_utc"] = utc_now_iso()
        writer.write_json("session.json", meta)
        if not interrupted:
            (writer.path / "runtime").mkdir(exist_ok=True)
            (writer.path / "runtime" / "aaco_traceback.txt").write_text(traceback.format_exc())
        writer.publish()
    except Exception as err:
        warning = _salvage_failed(writer, err)
        if exc is not None:
            attach_warning(exc, warning)
        return warning
    return None


def _salvage_failed(writer: BundleWriter, err: Exception) -> str:
    """The one line that says what became of a bundle :func:`_salvage` could not publish.

    Files are never left unsaid in a hidden folder: when the staging folder holds any, it
    is kept and named; when it holds none, it is removed.
    """
    why = " ".join(f"{type(err).__name__}: {err}".split())
    where = writer.path
    if where == writer.final_path:  # renamed into place; only the latest pointer failed
        latest = writer.root / LATEST
        return f"the failed run's bundle is {where}; {latest} could not point at it ({why})"
    if _holds_files(where):
        return (
            f"could not publish the failed run's bundle ({why}); its files are kept in the "
            f"hidden folder {where} (aaco ls does not list it)"
        )
    writer.discard()
    return f"could not publish the failed run's bundle ({why}); it held no files to keep"


def _holds_files(folder: Path) -> bool:
    """Whether ``folder`` holds any file (True when it cannot be read: keep, never guess)."""
    try:
        return folder.is_dir() and any(f.is_file() for f in folder.rglob("*"))
    except OSError:
        return True


__all__ = [
    "FRAMEWORKS",
    "PROFILE_MODES",
    "RunOptions",
    "TorchModelRef",
    "resolve_model",
    "resolve_torch_model",
    "run_model",
]
