"""The ONNX Runtime runner (parent side): resolve the model, its inputs and the execution
provider; write the graph; after the worker, the optimized graph, the operator profile and
the GPU kernels ORT profiled. The worker side is :mod:`aaco.runners.ort_worker`.

``profile_mode="kernels"`` on a ROCm/MIGraphX backend names the rocprofv3 tracer
(:mod:`aaco.tracers.rocprofv3`): the pipeline re-runs the profiled workload under it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq

from aaco.analysis.graph import (
    check_external_data,
    eliminated_original_nodes,
    external_data_files,
    extract_graph,
    file_sha256,
    load_model_proto,
    map_optimized_to_original,
)
from aaco.analysis.ops import profile_coverage
from aaco.config import BackendEntry, ModelEntry, Registry, load_registry
from aaco.errors import InputError, UsageError
from aaco.importers.ort_profile import parse_ort_profile
from aaco.ingest import ingest_profile_kernels
from aaco.models.registry import build_cached
from aaco.runners.base import Runner, RunOptions, RunPlan, RunStage
from aaco.runners.inputs import InputSpec, UnresolvedShapes, batch_of, resolve_inputs
from aaco.runners.launch import LaunchOutcome
from aaco.runners.preprocess import PREPROCESSORS, image_input
from aaco.runners.probe import hint_command, probe_shapes
from aaco.runners.spec import OPTIMIZED_WEIGHTS, RunSpec
from aaco.session.paths import (
    MODEL_META_FILE,
    OPTIMIZED_META_FILE,
    OPTIMIZED_MODEL,
    ORT_CONFIG_FILE,
)
from aaco.session.schema import TABLES

__all__ = ["OrtRunner", "ResolvedModel", "check_provider", "resolve_model"]

DEFAULT_WARMUP = 10
DEFAULT_ITERATIONS = 100


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
    available = list(ort.get_available_providers())
    if backend.provider not in available:
        raise UsageError(
            f"backend {backend.name!r} needs {backend.provider}, which this onnxruntime "
            f"{ort.__version__} does not provide; available: {', '.join(available)}"
        )
    fallbacks = [p for p in backend.fallback_providers if p in available and p != backend.provider]
    return available, fallbacks


@dataclass
class _OrtState:
    model: ResolvedModel
    backend: BackendEntry
    proto: Any
    inputs: list[InputSpec]
    spec: RunSpec | None = None


class OrtRunner(Runner):
    """Any ONNX model on any ONNX Runtime execution provider (``--backend``)."""

    name: ClassVar[str] = "onnxruntime"
    description: ClassVar[str] = "ONNX Runtime, any execution provider (--backend)"
    workload: ClassVar[str] = "aaco.runners.ort_worker:OrtWorkload"

    def validate(self, opts: RunOptions) -> None:
        if opts.preprocess is not None and opts.preprocess not in ("none", *PREPROCESSORS):
            valid = ", ".join(["none", *PREPROCESSORS])
            raise UsageError(f"unknown --preprocess {opts.preprocess!r}; valid: {valid}")
        if opts.device is not None:
            raise UsageError(
                "--device applies to --framework torch; ONNX Runtime picks its device "
                "with --backend"
            )
        if opts.compile:
            raise UsageError("--compile applies to --framework torch")

    def tracer(self, opts: RunOptions) -> tuple[str, str] | None:
        if opts.profile_mode != "kernels":
            return None
        backend = load_registry(opts.config_dir).backend(opts.backend or "cpu")
        check_provider(backend)
        return opts.tracer or "rocprofv3", backend.provider

    def plan(self, opts: RunOptions) -> RunPlan:
        registry = load_registry(opts.config_dir)
        backend = registry.backend(opts.backend or "cpu")
        available, fallbacks = check_provider(backend)
        backend = dataclasses.replace(backend, fallback_providers=tuple(fallbacks))
        model = resolve_model(opts.model, registry)
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
            image_input(inputs)  # a UsageError, before any bundle exists, when it cannot apply
        if opts.batch is not None:
            # --batch was applied (resolve_inputs refuses it otherwise); it is the items per
            # iteration only when every input carries it as its leading dimension.
            leading = {i.shape[0] for i in inputs if i.shape}
            batch = opts.batch if leading == {opts.batch} else None
        else:
            batch = batch_of(inputs)
        return RunPlan(
            model={"name": model.name, "path": str(model.path), "source": model.source},
            backend={"name": backend.name, "provider": backend.provider},
            spec={
                "model_path": str(model.path),
                "inputs": [i.to_json() for i in inputs],
                "backend": backend.to_json(),
                "preprocess": preprocess,
            },
            warmup=warmup,
            iterations=iterations,
            inputs=[i.to_json() for i in inputs],
            batch=batch,
            run={"preprocess": preprocess},
            providers=available,
            state=_OrtState(model, backend, proto, inputs),
        )

    def before_worker(self, plan: RunPlan, stage: RunStage) -> None:
        state: _OrtState = plan.state
        stage.attempt("graph", _write_graph, stage, state.model, state.proto, state.inputs)

    def finish(
        self, plan: RunPlan, outcome: LaunchOutcome, stage: RunStage, summary: dict[str, Any]
    ) -> None:
        state: _OrtState = plan.state
        spec = RunSpec.from_json(plan.spec)
        result = outcome.result
        if result is not None:
            stage.write_json(
                ORT_CONFIG_FILE,
                {
                    "backend": spec.backend.to_json(),
                    "providers_requested": result.get("providers_requested", []),
                    "providers_active": result.get("providers_active", []),
                    "session_options": result.get("session_options", {}),
                    "model_load_ms": result.load_time_ns / 1e6 if result.load_time_ns else None,
                    "optimized_model": result.get("optimized_model"),
                },
            )
            stage.update("backend", providers_active=result.get("providers_active", []))

        mapping = None
        if result is not None and result.get("optimized_model"):
            mapping = stage.attempt(
                "optimized_graph", _add_optimized_graph, stage, state.proto, spec
            )
        # The optimized graph's weights are a copy of the model's (hundreds of MB for an
        # LLM): the bundle keeps the graph and drops them, whether or not the run got here.
        (stage.path / Path(OPTIMIZED_MODEL).parent / OPTIMIZED_WEIGHTS).unlink(missing_ok=True)
        if result is None or not result.get("profile_file"):
            return
        profile = stage.attempt(
            "profile_parse",
            parse_ort_profile,
            stage.path / result.get("profile_file"),
            spec.profile_warmup,
            mapping,
        )
        if profile is None:
            return
        runs = _with_wall_times(profile.runs, result, spec.profile_warmup)
        stage.write_table("ops", profile.ops)
        stage.write_table("ort_runs", runs)
        lat = summary.get("latency_ms") or {}
        summary["profile"] = profile_coverage(profile.ops, runs, lat.get("mean"), lat.get("p50"))
        summary["profile"]["session_events_ms"] = {
            k: v / 1e6 for k, v in profile.session_events.items()
        }
        if profile.kernels.num_rows or profile.memcpy.num_rows:
            # a CUDA/ROCm EP build with GPU profiling: the kernels' durations are the
            # device time the roofline sets against the GPU's ceilings
            stage.attempt(
                "profile_kernels",
                ingest_profile_kernels,
                stage.path,
                profile.kernels,
                profile.memcpy,
                profile.ops,
            )


def _open_shapes_hint(
    exc: UnresolvedShapes, model: ResolvedModel, proto: Any, opts: RunOptions
) -> str:
    """The open-dimension error with a command that runs: candidate shapes are tried on the
    model (:mod:`aaco.runners.probe`) and the first that ran goes into the command line."""
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


def _write_graph(
    writer: RunStage, model: ResolvedModel, proto: Any, inputs: Sequence[InputSpec]
) -> None:
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
    writer.write_json(MODEL_META_FILE, meta)
    writer.write_table("graph_nodes", info.nodes)
    writer.write_table("graph_edges", info.edges)


def _add_optimized_graph(
    writer: RunStage, proto: Any, spec: RunSpec
) -> dict[str, list[str] | None]:
    """Add the graph ORT executed to graph_nodes, each node mapped to the original nodes it
    stands for; write its metadata and the original nodes ORT eliminated."""
    optimized = load_model_proto(writer.path / OPTIMIZED_MODEL)
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
    meta["weights_kept"] = False  # see OrtRunner.finish
    writer.write_json(OPTIMIZED_META_FILE, meta)
    nodes_file = writer.path / TABLES["graph_nodes"].path
    nodes = info.nodes
    if nodes_file.is_file():
        nodes = pa.concat_tables([pq.read_table(nodes_file), info.nodes])
    writer.write_table("graph_nodes", nodes)
    return mapping


def _with_wall_times(runs: pa.Table, result: Any, skip: int) -> pa.Table:
    """Attach the worker's wall time of each profiled run, matched by order; left null when
    the profile's run count does not match the runs the worker made."""
    walls = list(result.profile_wall_ns)
    if len(walls) != result.profile_runs or runs.num_rows != len(walls) - skip:
        return runs
    idx = runs.schema.get_field_index("wall_ns")
    return runs.set_column(idx, "wall_ns", pa.array(walls[skip:], pa.int64()))
